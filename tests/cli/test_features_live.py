"""`kjbod features` (kafka-features.sh) against a real node: describe, a downgrade and upgrade of metadata.version
through UpdateFeatures, refusals, and the level kept across a restart; group.version turning KIP-848's consumer
protocol off and on, and transaction.version 1's record layout in `__transaction_state`."""

from __future__ import annotations

import subprocess
import sys

KJBOD = [sys.executable, "-m", "kjbod"]


def features(server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KJBOD, "features", "--bootstrap-server", server.bootstrap, *args], capture_output=True,
                          text=True, timeout=120)


def described_all(server) -> dict[str, dict[str, str]]:
    done = features(server, "describe")
    assert done.returncode == 0, done.stderr
    lines = [dict(field.split(": ", 1) for field in line.split("\t")) for line in done.stdout.splitlines()]
    assert [d["Feature"] for d in lines] == sorted(d["Feature"] for d in lines)
    return {line["Feature"]: line for line in lines}


def described(server, feature: str = "metadata.version") -> dict[str, str]:
    return described_all(server)[feature]


def test_describe_downgrade_upgrade_and_refusals(kjbod_server_factory):
    server = kjbod_server_factory(format_args=["--release-version", "4.0-IV0"])  # bootstrap.checkpoint: 22
    every = described_all(server)
    assert {name: {k: v for k, v in line.items() if k != "Epoch"} for name, line in every.items()} == {
        "group.version": {"Feature": "group.version", "SupportedMinVersion": "0", "SupportedMaxVersion": "1",
                          "FinalizedVersionLevel": "1"},
        "metadata.version": {"Feature": "metadata.version", "SupportedMinVersion": "3.7-IV2",
                             "SupportedMaxVersion": "4.3-IV0", "FinalizedVersionLevel": "4.0-IV0"},
        "eligible.leader.replicas.version": {"Feature": "eligible.leader.replicas.version",
                                             "SupportedMinVersion": "0", "SupportedMaxVersion": "1",
                                             "FinalizedVersionLevel": "0"},
        "transaction.version": {"Feature": "transaction.version", "SupportedMinVersion": "0",
                                "SupportedMaxVersion": "2", "FinalizedVersionLevel": "0"},
        # share groups start on from 4.2-IV0 only, as in Kafka
        "share.version": {"Feature": "share.version", "SupportedMinVersion": "0", "SupportedMaxVersion": "1",
                          "FinalizedVersionLevel": "0"},
        # streams groups start on from 4.2-IV1 only, as in Kafka
        "streams.version": {"Feature": "streams.version", "SupportedMinVersion": "0", "SupportedMaxVersion": "1",
                            "FinalizedVersionLevel": "0"},
        # a static quorum: supported 0-1, finalized 0 (Kafka 3.9's answer)
        "kraft.version": {"Feature": "kraft.version", "SupportedMinVersion": "0", "SupportedMaxVersion": "1",
                          "FinalizedVersionLevel": "0"}}
    first = every["metadata.version"]
    assert int(first["Epoch"]) >= 0

    dry = features(server, "downgrade", "--metadata", "3.8", "--dry-run")
    assert (dry.returncode, dry.stdout) == (0, "metadata.version can be downgraded to 20.\n")
    assert described(server)["FinalizedVersionLevel"] == "4.0-IV0"
    down = features(server, "downgrade", "--metadata", "3.8")
    assert (down.returncode, down.stdout) == (0, "metadata.version was downgraded to 20.\n")
    after = described(server)
    assert after["FinalizedVersionLevel"] == "3.8-IV0" and int(after["Epoch"]) > int(first["Epoch"])

    refused = features(server, "upgrade", "--metadata", "3.7")
    assert refused.returncode == 1
    first_line, last_line = refused.stdout.splitlines()
    assert first_line.startswith(
        "Could not upgrade metadata.version to 19. Invalid update version 19 for feature metadata.version. Can't "
        "downgrade the version of this feature without setting the upgrade type to either safe or unsafe "
        "downgrade.")
    assert last_line == "1 out of 1 operation(s) failed."
    unknown = features(server, "upgrade", "--feature", "kraft.version=1")
    assert unknown.returncode == 1 and "does not support this feature" in unknown.stdout
    bad = features(server, "upgrade", "--metadata", "4.4")
    assert bad.returncode == 2 and "unknown metadata.version '4.4'" in bad.stderr
    elr = features(server, "upgrade", "--feature", "eligible.leader.replicas.version=1")
    assert elr.returncode == 1 and elr.stdout.splitlines()[0].startswith(
        "Could not upgrade eligible.leader.replicas.version to 1. Invalid update version 1 for feature "
        "eligible.leader.replicas.version. eligible.leader.replicas.version could not be set to 1 because it "
        "depends on metadata.version level 23")

    server.stop()  # the level is a record of the metadata log; the node registers again at it
    server.start()
    assert described(server)["FinalizedVersionLevel"] == "3.8-IV0"
    up = features(server, "upgrade", "--release-version", "3.9")
    assert (up.returncode, up.stdout) == (0, "metadata.version was upgraded to 21.\n")
    assert described(server)["FinalizedVersionLevel"] == "3.9-IV0"

    mapping = subprocess.run([*KJBOD, "features", "--bootstrap-server", "127.0.0.1:1", "version-mapping",
                              "--release-version", "3.7-IV2"], capture_output=True, text=True, timeout=60)
    assert mapping.stdout == ("metadata.version=17 (3.7-IV2)\ntransaction.version=0\ngroup.version=0\n"
                              "eligible.leader.replicas.version=0\nshare.version=0\nstreams.version=0\n")
    mapping = subprocess.run([*KJBOD, "features", "--bootstrap-server", "127.0.0.1:1", "version-mapping"],
                             capture_output=True, text=True, timeout=60)
    assert mapping.stdout == ("metadata.version=30 (4.3-IV0)\ntransaction.version=2\ngroup.version=1\n"
                              "eligible.leader.replicas.version=1\nshare.version=1\nstreams.version=1\n")

    # Up to 4.2 and the ELR on; 4.0-IV1 changed the partition records, so no way back below it.
    up = features(server, "upgrade", "--release-version", "4.2")
    assert (up.returncode, up.stdout) == (0, "metadata.version was upgraded to 29.\n")
    up = features(server, "upgrade", "--feature", "eligible.leader.replicas.version=1")
    assert (up.returncode, up.stdout) == (0, "eligible.leader.replicas.version was upgraded to 1.\n")
    every = described_all(server)
    assert every["metadata.version"]["FinalizedVersionLevel"] == "4.2-IV1"
    assert every["eligible.leader.replicas.version"]["FinalizedVersionLevel"] == "1"
    down = features(server, "downgrade", "--metadata", "4.0-IV0")
    assert down.returncode == 1 and down.stdout.splitlines()[0].startswith(
        "Could not downgrade metadata.version to 22. Unsupported metadata.version downgrade from 29 to 22. Refusing "
        "to perform the requested downgrade because it might delete metadata information.")
    down = features(server, "downgrade", "--metadata", "4.0-IV1")  # 24-29 changed no record: allowed
    assert (down.returncode, down.stdout) == (0, "metadata.version was downgraded to 23.\n")
    # Up to the latest level, 4.3-IV0 (KIP-1066's cordons in the broker records): no way back below it either.
    up = features(server, "upgrade", "--release-version", "4.3")
    assert (up.returncode, up.stdout) == (0, "metadata.version was upgraded to 30.\n")
    assert described(server)["FinalizedVersionLevel"] == "4.3-IV0"
    down = features(server, "downgrade", "--metadata", "4.2")
    assert down.returncode == 1 and "Unsupported metadata.version downgrade from 30 to 29" in down.stdout


TXN_OVERRIDES = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
                 "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
                 "transaction.state.log.num.partitions": "1"}


def _heartbeat(server, group: str, topic: str) -> tuple[int, int]:
    """(ConsumerGroupHeartbeat's code, ConsumerGroupDescribe's code for the group), COORDINATOR_* retried."""
    import asyncio
    import time

    from kjbod.net.connection import ClientConnection
    from kjbod.protocol.errors import ErrorCode
    from kjbod.protocol.generated import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupHeartbeatRequest,
        FindCoordinatorRequest,
    )

    async def run() -> tuple[int, int]:
        conn = await ClientConnection.open(server.host, server.port, client_id="gv", connect_timeout=10.0)
        try:
            deadline = time.monotonic() + 60
            while True:
                # FindCoordinator makes __consumer_offsets, as a consumer's first one does.
                await conn.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 30.0)
                r = await conn.request(68, 1, ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id="m1", member_epoch=0, rebalance_timeout_ms=5000,
                    subscribed_topic_names=[topic], topic_partitions=[]), 30.0)
                if r.error_code not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                        ErrorCode.NOT_COORDINATOR) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            d = await conn.request(69, 0, ConsumerGroupDescribeRequest(group_ids=[group]), 30.0)
            return r.error_code, d.groups[0].error_code
        finally:
            conn.close()

    return asyncio.run(run())


def _wait_described(server, feature: str, level: str) -> None:
    import time

    deadline = time.monotonic() + 60
    while described(server, feature)["FinalizedVersionLevel"] != level:
        assert time.monotonic() < deadline, f"{feature} never reached {level}"
        time.sleep(0.1)


def test_group_version_gates_the_consumer_protocol_and_transaction_version_1_writes_flexible_values(
        kjbod_server_factory):
    import uuid
    from pathlib import Path

    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient, NewTopic

    from kjbod.protocol.errors import ErrorCode
    from kjbod.storage.records import iter_batches, iter_records

    # 4.0-IV0: group.version 1, transaction.version 0 from the start
    server = kjbod_server_factory(overrides=TXN_OVERRIDES, format_args=["-r", "4.0-IV0"])
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic("gv", 1, 1)])
    finally:
        admin.close()
    assert _heartbeat(server, "g1", "gv") == (0, 0)  # group.version 1 from the start: KIP-848 is on

    down = features(server, "downgrade", "--feature", "group.version=0")
    assert (down.returncode, down.stdout) == (0, "group.version was downgraded to 0.\n")
    _wait_described(server, "group.version", "0")
    assert _heartbeat(server, "g2", "gv") == (ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_VERSION)
    server.stop()  # the 0 is a record of the metadata log, not the absence of one
    server.start()
    assert described(server, "group.version")["FinalizedVersionLevel"] == "0"
    assert _heartbeat(server, "g2", "gv")[0] == ErrorCode.UNSUPPORTED_VERSION
    up = features(server, "upgrade", "--feature", "group.version=1")
    assert (up.returncode, up.stdout) == (0, "group.version was upgraded to 1.\n")
    _wait_described(server, "group.version", "1")
    assert _heartbeat(server, "g3", "gv") == (0, 0)

    refused = features(server, "upgrade", "--feature", "transaction.version=3")
    assert refused.returncode == 1 and "only supports versions 0-2" in refused.stdout
    up = features(server, "upgrade", "--feature", "transaction.version=1")
    assert (up.returncode, up.stdout) == (0, "transaction.version was upgraded to 1.\n")
    _wait_described(server, "transaction.version", "1")
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": f"tv-{uuid.uuid4().hex[:6]}"})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce("gv", b"x", partition=0)
    p.commit_transaction(60)
    versions = set()
    for d in server.log_dirs:
        for path in Path(d).glob("__transaction_state-*/*.log"):
            view = memoryview(path.read_bytes())
            for pos, header in iter_batches(view):
                versions |= {int.from_bytes(bytes(r.value[:2]), "big") for r in
                             iter_records(view[pos:pos + header.size]) if r.value is not None}
    assert versions == {1}  # Kafka's TV_1: the flexible TransactionLogValue
