"""`kjbod reassign-partitions` without a cluster: the argument parsers (throttle rates, --generate's files and
broker list), the disk-aware proposal of --generate (kjbod.cli.reassign_plan), and the Kafka-way throttles of
--execute / --verify against a recording fake admin client (what is set, merged and deleted)."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest

from kjbod.admin import UnsupportedVersionError
from kjbod.admin.types import ConfigEntry, ConfigResource, ConfigSource
from kjbod.cli import reassign_partitions as rp
from kjbod.cli.main import UserError
from kjbod.cli.reassign_plan import propose


@pytest.mark.parametrize(("text", "rate"), [
    ("10000000", 10_000_000), ("10MB", 10_000_000), ("10M", 10_000_000), ("10MiB", 10 * 2**20),
    ("1.5 kB", 1500), ("2GiB/s", 2 * 2**30), ("1", 1),
])
def test_rates(text, rate):
    assert rp.parse_rate(text) == rate


@pytest.mark.parametrize("text", ["0", "-5", "0MB", "ten", "10 furlongs", ""])
def test_bad_rates(text):
    with pytest.raises(argparse.ArgumentTypeError, match=repr(text).replace("(", r"\(")):
        rp.parse_rate(text)


@pytest.mark.parametrize(("text", "words"), [
    ("0", "must be a positive number"), ("-5", "must be a positive number"), ("-1MB", "must be a positive number"),
    ("ten", "not a rate in bytes/s"), ("-ten", "not a rate in bytes/s"),
])
def test_a_rate_that_is_a_number_but_not_positive_is_named_so(text, words):
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        rp.parse_rate(text)


@pytest.mark.parametrize(("data", "words"), [
    ("{", "topics-to-move JSON file is not valid JSON"),
    ('{"topics": []}', 'needs a non-empty "topics" list'),
    ('{"topics": [{"name": "a"}]}', "topics[0] needs a topic name"),
    ('{"topics": [{"topic": "a"}, {"topic": "a"}]}', "List of topics to reassign contains duplicate entries: a"),
])
def test_bad_topic_files(data, words):
    with pytest.raises(UserError, match=words.replace("[", r"\[")):
        rp.parse_topics(data)


def test_broker_lists():
    assert rp.parse_topics('{"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]}') == ["a", "b"]
    assert rp.parse_broker_list("3,1,2") == [3, 1, 2]
    for text, words in [(None, "--broker-list is required"), ("1,x", "broker ids separated by commas"),
                        ("1,2,1", "Broker list contains duplicate entries: 1")]:
        with pytest.raises(UserError, match=words):
            rp.parse_broker_list(text)


def test_the_proposal_balances_bytes_across_brokers_and_their_dirs():
    gib = 2**30
    # Four partitions on broker 1 (sizes 8, 4, 2, 2 GiB) move to brokers 2 and 3, whose dirs have equal room.
    partitions = {("t", p): [1] for p in range(4)}
    sizes = {("t", 0): 8 * gib, ("t", 1): 4 * gib, ("t", 2): 2 * gib, ("t", 3): 2 * gib}
    brokers = {2: [("/b2/a", 100 * gib), ("/b2/b", 100 * gib)], 3: [("/b3/a", 100 * gib), ("/b3/b", 100 * gib)]}
    plan = propose(partitions, sizes, brokers, {("t", p, 1): "/b1" for p in range(4)})
    by_broker: dict[int, int] = {}
    by_dir: dict[str, int] = {}
    for key, (replicas, dirs) in plan.items():
        by_broker[replicas[0]] = by_broker.get(replicas[0], 0) + sizes[key]
        by_dir[dirs[0]] = by_dir.get(dirs[0], 0) + sizes[key]
    assert by_broker == {2: 8 * gib, 3: 8 * gib}  # 8 | 4 + 2 + 2
    # Within broker 3 the three smaller partitions spread over both dirs (4 | 2 + 2), not all in the first.
    assert sorted(v for d, v in by_dir.items() if d.startswith("/b3")) == [4 * gib, 4 * gib]
    assert sorted(by_dir) == ["/b2/a", "/b3/a", "/b3/b"]


def test_the_proposal_prefers_the_broker_with_more_room_keeps_staying_replicas_and_spreads_leaders():
    brokers = {1: [("/1", 50)], 2: [("/2", 10)], 3: [("/3", 90)]}
    partitions = {("t", 0): [1, 2], ("t", 1): [2, 1]}
    plan = propose(partitions, {("t", 0): 5, ("t", 1): 5}, brokers,
                   {("t", 0, 1): "/1", ("t", 0, 2): "/2", ("t", 1, 1): "/1", ("t", 1, 2): "/2"})
    assert {frozenset(r) for r, _ in plan.values()} == {frozenset({1, 3})}
    assert {r[0] for r, _ in plan.values()} == {1, 3}  # one leader each
    assert all(d == [f"/{b}" for b in r] for r, d in plan.values())


def test_the_proposal_without_sizes_spreads_by_count_and_refuses_too_few_brokers():
    plan = propose({("t", p): [1, 2] for p in range(6)}, {}, {1: [], 2: [], 3: []}, {})
    counts: dict[int, int] = {}
    for replicas, dirs in plan.values():
        assert dirs == ["any", "any"] and len(set(replicas)) == 2
        for b in replicas:
            counts[b] = counts.get(b, 0) + 1
    assert counts == {1: 4, 2: 4, 3: 4}
    with pytest.raises(ValueError, match="replication factor of 2 cannot be reached because only 1 broker"):
        propose({("t", 0): [1, 2]}, {}, {3: []}, {})


class FakeAdmin:
    """Answers what --execute and --verify ask, and records every config change."""

    def __init__(self, configs: dict[ConfigResource, dict[str, str]], ongoing: dict[Any, Any] | None = None, *,
                 kip179: bool = False):
        self.configs = configs
        self.ongoing = ongoing or {}
        self.kip179 = kip179
        self.altered: list[dict[ConfigResource, dict[str, str | None]]] = []
        self.started: list[Any] = []

    def reassign_partitions(self, targets, *, throttle=None, validate_only=False, directories=None,
                            allow_replication_factor_change=True, additional=False):
        if not self.kip179:
            raise UnsupportedVersionError("ReassignPartitions: not served")
        if not validate_only:
            self.started.append(("kip179", targets, throttle))
        return {k: (0, None) for k in targets}

    def list_partition_reassignments(self, partitions=None):
        return dict(self.ongoing)

    def describe_cluster(self):
        return SimpleNamespace(brokers=[SimpleNamespace(node_id=b) for b in (1, 2, 3, 4)])

    def describe_topics(self):
        parts = [SimpleNamespace(partition=0, replicas=(1, 2)), SimpleNamespace(partition=1, replicas=(2, 1))]
        return {"t": SimpleNamespace(partitions=parts)}

    def describe_configs(self, resources, keys=None):
        out = {}
        for r in resources:
            source = ConfigSource.DYNAMIC_TOPIC_CONFIG if r.type == 2 else ConfigSource.DYNAMIC_BROKER_CONFIG
            out[r] = {k: ConfigEntry(k, v, source, False, False) for k, v in self.configs.get(r, {}).items()
                      if keys is None or k in keys}
        return out

    def incremental_alter_configs(self, changes):
        self.altered.append(changes)
        for r, kv in changes.items():
            for k, v in kv.items():
                if v is None:
                    self.configs.get(r, {}).pop(k, None)
                else:
                    self.configs.setdefault(r, {})[k] = v

    def alter_partition_reassignments(self, targets, directories=None, allow_replication_factor_change=True):
        self.started.append(targets)
        return {k: (0, None) for k in targets}


def _args(**options: Any) -> argparse.Namespace:
    base = {"additional": False, "disallow_replication_factor_change": False, "throttle": None,
            "replica_alter_log_dirs_throttle": None, "progress": False}
    return argparse.Namespace(**{**base, **options})


def test_execute_throttle_sets_kafkas_configs_merged_and_verify_removes_exactly_those(capsys):
    other = ConfigResource.topic("t")
    admin = FakeAdmin({other: {rp.FOLLOWER_REPLICAS: "5:9"}})
    moves = {("t", 0): ([3, 4], ["any", "any"]), ("t", 1): ([2, 3], ["any", "any"])}
    assert rp._execute(admin, moves, _args(throttle=1000)) == 0
    out = capsys.readouterr().out
    assert "Warning: You must run --verify periodically" in out
    assert rp.NO_KIP179 in out.splitlines()
    assert "The inter-broker throttle limit was set to 1000 B/s" in out
    assert admin.configs[other] == {rp.LEADER_REPLICAS: "0:1,0:2,1:1,1:2",
                                    rp.FOLLOWER_REPLICAS: "0:3,0:4,1:3,5:9"}  # someone else's 5:9 kept
    assert {r.name: kv for r, kv in admin.configs.items() if r.type == 4} == {
        b: {rp.LEADER_RATE: "1000", rp.FOLLOWER_RATE: "1000"} for b in ("1", "2", "3", "4")}
    assert len(admin.started) == 1
    admin.configs[ConfigResource.broker(1)]["unrelated.key"] = "x"
    assert rp._verify(admin, moves) == 0
    out = capsys.readouterr().out
    assert out.endswith("Clearing broker-level throttles on broker(s) 1,2,3,4\n"
                        "Clearing topic-level throttles on topic(s) t\n")
    assert admin.configs[ConfigResource.broker(1)] == {"unrelated.key": "x"}
    assert admin.configs[other] == {}
    # Nothing left: a second --verify clears nothing and says nothing about throttles.
    rp._verify(admin, moves)
    assert "Clearing" not in capsys.readouterr().out


def test_execute_refusals_start_nothing():
    admin = FakeAdmin({}, ongoing={("t", 0): SimpleNamespace(replicas=[1, 2, 3], adding_replicas=[3])})
    moves = {("t", 0): ([3, 4], ["any", "any"])}
    with pytest.raises(UserError, match="Cannot execute because there is an existing partition assignment"):
        rp._execute(admin, moves, _args(throttle=1000))
    admin.ongoing = {}
    with pytest.raises(UserError, match="t-0: The replication factor is changed from 2 to 3"):
        rp._execute(admin, {("t", 0): ([1, 2, 3], ["any"] * 3)}, _args(disallow_replication_factor_change=True))
    with pytest.raises(UserError, match="Unknown broker id 7"):
        rp._execute(admin, {("t", 0): ([1, 7], ["any"] * 2)}, _args(throttle=5))
    assert admin.started == [] and admin.altered == []


def test_throttles_include_reassignments_in_progress():
    ongoing = {("u", 3): SimpleNamespace(replicas=[1, 2, 5], adding_replicas=[5])}
    lists = rp.throttled_replicas({("t", 0): ([3], ["any"])}, {("t", 0): (1,)}, ongoing)
    assert lists == {"t": ({"0:1"}, {"0:3"}), "u": ({"3:1", "3:2"}, {"3:5"})}
    assert rp._merge("*", {"0:1"}) == "*"
    assert rp._merge(" 10:1 ,2:3", {"2:3", "0:1"}) == "0:1,2:3,10:1"


def test_execute_throttle_goes_with_the_moves_where_kip179_is_served(capsys):
    admin = FakeAdmin({}, kip179=True)
    moves = {("t", 0): ([3, 4], ["any", "any"])}
    assert rp._execute(admin, moves, _args(throttle=1000)) == 0
    out = capsys.readouterr().out
    assert admin.started == [("kip179", {("t", 0): [3, 4]}, 1000)] and admin.altered == []
    assert "Warning" not in out and rp.NO_KIP179 not in out
    assert ("The inter-broker throttle limit was set to 1000 B/s; the controller removes it when the reassignment "
            "completes or is cancelled") in out.splitlines()
    # Without a throttle the ordinary AlterPartitionReassignments starts it.
    assert rp._execute(admin, moves, _args()) == 0
    assert admin.started[-1] == {("t", 0): [3, 4]}


def test_verify_leaves_throttles_alone_where_kip179_is_served(capsys):
    broker = ConfigResource.broker(1)
    admin = FakeAdmin({broker: {rp.LEADER_RATE: "5"}}, kip179=True)
    rp._verify(admin, {("t", 0): ([1, 2], ["any", "any"])})
    out = capsys.readouterr().out
    assert "Clearing" not in out
    assert admin.configs[broker] == {rp.LEADER_RATE: "5"} and admin.altered == []
    # It says what is left, so that nobody has to look the configs up to know the throttle is gone.
    assert out.splitlines()[-1] == ("Replication throttles still set (the controller removes only those it set for "
                                    "a reassignment): broker 1: leader.replication.throttled.rate=5")
    del admin.configs[broker]
    rp._verify(admin, {("t", 0): ([1, 2], ["any", "any"])})
    assert "throttle" not in capsys.readouterr().out  # none left: Kafka's output, nothing added
    rp._report_throttles(admin, {("t", 0): ([1, 2], ["any", "any"])}, {("t", 0): (1, 3)})
    assert capsys.readouterr().out == "No replication throttle is left on broker(s) 1,2,3 or topic(s) t.\n"


def test_cancel_ends_its_lines_and_json_errors_name_the_file(capsys):
    """Kafka's tool leaves "None of the specified partition moves are active." without a line end (the shell prompt
    then follows it); kjbod ends it.  A file that is not JSON is named."""
    admin = FakeAdmin({}, kip179=True)
    assert rp._cancel(admin, {("t", 0): ([1, 2], ["any", "any"])}) == 0
    assert capsys.readouterr().out == ("None of the specified partition reassignments are active.\n"
                                       "None of the specified partition moves are active.\n")
    with pytest.raises(UserError, match="^plan.json is not valid JSON: Expecting"):
        rp.parse_moves('{"partitions": [', "plan.json")
    with pytest.raises(UserError, match="^topics.json is not valid JSON: Expecting"):
        rp.parse_topics('{"topics": [', "topics.json")
