"""`kjbod consumer-groups` and the admin client's group calls on a three-broker cluster (`kjbod cluster up`),
where groups have different coordinators: each group is asked of its own coordinator (FindCoordinator, batched),
and --describe, --state, --list and --reset-offsets --execute see every group whichever broker coordinates it.
When a coordinator is killed (SIGKILL), an admin client that was talking to it finds the new one and gets the
group's offsets from it."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from group_clients import make_topic, stopped_group

from kjbod.admin import SyncAdminClient
from kjbod.broker.groups.coordinator import partition_for
from tests.cluster.conftest import running_cluster

pytestmark = pytest.mark.slow

OFFSETS_PARTITIONS = 3


def groups_on_each_offsets_partition() -> list[str]:
    """One group id per `__consumer_offsets` partition, so each partition's leader coordinates one of them."""
    chosen: dict[int, str] = {}
    i = 0
    while len(chosen) < OFFSETS_PARTITIONS:
        name = f"cluster-group-{i}"
        chosen.setdefault(partition_for(name, OFFSETS_PARTITIONS), name)
        i += 1
    return [chosen[p] for p in sorted(chosen)]


def test_groups_with_different_coordinators(tmp_path):
    settings = {"group.initial.rebalance.delay.ms": "100",
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}
    with running_cluster(tmp_path / "cluster", settings, log_dirs=1) as cluster:
        topic = make_topic(cluster.bootstrap, 2, 10, replication=3)
        groups = groups_on_each_offsets_partition()
        for n, group in enumerate(groups):
            stopped_group(cluster.bootstrap, topic, {0: n, 1: n + 1}, group=group)

        with SyncAdminClient(cluster.bootstrap, request_timeout=60.0) as admin:
            coordinators = admin.find_group_coordinators(groups)
            ids = {g: c.node_id for g, c in coordinators.items()}
            assert len(set(ids.values())) > 1, ids  # the offsets partitions' leaders are spread over the brokers
            described = admin.describe_groups(groups)
            assert {g: d.coordinator.node_id for g, d in described.items()} == ids
            assert {d.state for d in described.values()} == {"Empty"}
            fetched = admin.list_group_offsets(groups)
            assert {g: {tp: o.offset for tp, o in r.offsets.items()} for g, r in fetched.items()} == {
                g: {(topic, 0): n, (topic, 1): n + 1} for n, g in enumerate(groups)}
            assert set(groups) <= {g.group_id for g in admin.list_groups(states=["Empty"])}

        def tool(*args: str) -> subprocess.CompletedProcess[str]:
            done = subprocess.run([sys.executable, "-m", "kjbod", "consumer-groups", "--bootstrap-server",
                                   cluster.bootstrap, "--timeout", "60000", *args],
                                  capture_output=True, text=True, timeout=180)
            assert "Traceback" not in done.stderr, done.stderr
            return done

        listed = tool("--list")
        assert set(groups) <= set(listed.stdout.split())
        states = tool("--describe", "--all-groups", "--state")
        for group in groups:
            (row,) = [line.split() for line in states.stdout.splitlines() if line.startswith(group + " ")]
            assert row[2] == f"({ids[group]})" and row[-2:] == ["Empty", "0"]
        offsets = tool("--describe", "--all-groups")
        lines = [line.split() for line in offsets.stdout.splitlines() if line.split()[:1] in ([g] for g in groups)]
        assert sorted((r[0], r[2], r[3], r[4]) for r in lines) == sorted(
            (g, str(p), str(n + p), "5") for n, g in enumerate(groups) for p in (0, 1))

        reset = tool("--reset-offsets", "--all-groups", "--topic", topic, "--to-latest", "--execute")
        assert reset.returncode == 0, reset.stdout + reset.stderr
        with SyncAdminClient(cluster.bootstrap, request_timeout=60.0) as admin:
            fetched = admin.list_group_offsets(groups)
            assert {g: {tp: o.offset for tp, o in r.offsets.items()} for g, r in fetched.items()} == {
                g: {(topic, 0): 5, (topic, 1): 5} for g in groups}

        # Kill one group's coordinator: the same admin client (its connection to that broker now broken) looks the
        # coordinator up again, waits while the new leader loads the partition, and answers from there.
        victim = groups[0]
        with SyncAdminClient(cluster.bootstrap, request_timeout=90.0) as admin:
            old = admin.find_group_coordinators([victim])[victim].node_id
            assert admin.describe_groups([victim])[victim].coordinator.node_id == old
            cluster.signal(f"broker-{old}", signal.SIGKILL)
            fetched = admin.list_group_offsets(victim)[victim]
            assert fetched.error is None
            assert {tp: o.offset for tp, o in fetched.offsets.items()} == {(topic, 0): 5, (topic, 1): 5}
            moved = admin.describe_groups([victim])[victim]
            assert moved.error is None and moved.state == "Empty" and moved.coordinator.node_id != old
        state = tool("--describe", "--group", victim, "--state")
        (row,) = [line.split() for line in state.stdout.splitlines() if line.startswith(victim + " ")]
        assert row[2] == f"({moved.coordinator.node_id})"
        cluster.start(f"broker-{old}")
