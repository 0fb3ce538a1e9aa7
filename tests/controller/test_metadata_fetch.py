"""Serving the metadata log to observers, in-process: Fetch of `__cluster_metadata` and FetchSnapshot.

Each test builds a real MetadataLog in a temp dir, asks through MetadataFetchService with decoded requests, and
checks the response fields; responses are also encoded at the version asked, as the wire would.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from kjbod.controller.metadata_fetch import METADATA_TOPIC_ID, MetadataFetchService
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import FetchRequest, FetchResponse, FetchSnapshotRequest, TopicRecord
from kjbod.protocol.generated import fetch_request as fq
from kjbod.protocol.generated import fetch_snapshot_request as fsq
from kjbod.storage.metadata_log import MetadataLog
from kjbod.storage.metadata_snapshot import SnapshotId, parse_snapshot
from kjbod.storage.records import iter_batches

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


def topic(name: str) -> list:
    return [TopicRecord(name=name, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name))]


@pytest.fixture
def mlog(tmp_path: Path):
    log = MetadataLog(str(tmp_path), node_id=3000)
    log.load()
    yield log
    log.close()


@pytest.fixture
def service(mlog: MetadataLog):
    svc = MetadataFetchService(mlog, cluster_id=CLUSTER, node_id=3000, endpoint=("127.0.0.1", 9093))
    yield svc
    svc.close()


def fetch_req(offset: int, last_epoch: int = 0, *, epoch: int = 1, max_wait_ms: int = 0, version: int = 17,
              cluster_id: str | None = CLUSTER, **part_kw) -> FetchRequest:
    part = fq.FetchPartition(partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                             last_fetched_epoch=last_epoch, **part_kw)
    t = (fq.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[part]) if version >= 13
         else fq.FetchTopic(topic="__cluster_metadata", partitions=[part]))
    return FetchRequest(cluster_id=cluster_id, replica_state=fq.ReplicaState(replica_id=1), max_wait_ms=max_wait_ms,
                        max_bytes=8 << 20, topics=[t])


async def fetch(service: MetadataFetchService, req: FetchRequest, version: int = 17) -> FetchResponse:
    resp = await service.fetch(req, version)
    FetchResponse.decode(resp.encode(version), version)  # it goes on the wire at this version
    return resp


def offsets(records: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_batches(records)]


async def test_an_observer_gets_committed_batches_and_the_leader(service, mlog) -> None:
    mlog.append(topic("a"))
    mlog.append(topic("b"))
    resp = await fetch(service, fetch_req(0))
    assert resp.error_code == 0
    (t,) = resp.responses
    assert t.topic_id == METADATA_TOPIC_ID
    (p,) = t.partitions
    assert p.error_code == 0 and p.high_watermark == 3 and p.log_start_offset == 0
    assert offsets(p.records) == [0, 1, 2] and p.records == mlog.read(0, 1 << 20)
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (3000, 1)
    assert [(e.node_id, e.host, e.port) for e in resp.node_endpoints] == [(3000, "127.0.0.1", 9093)]
    resp = await fetch(service, fetch_req(2, 1))
    assert offsets(resp.responses[0].partitions[0].records) == [2]
    old = await fetch(service, fetch_req(1, 1, version=12), 12)
    assert old.responses[0].topic == "__cluster_metadata" and old.node_endpoints == []
    assert offsets(old.responses[0].partitions[0].records) == [1, 2]


async def test_the_long_poll_answers_when_a_commit_arrives(service, mlog) -> None:
    end = mlog.next_offset
    task = asyncio.create_task(fetch(service, fetch_req(end, 1, max_wait_ms=120_000)))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()  # nothing new: it waits
    await asyncio.to_thread(mlog.append, topic("late"))  # committed on another thread, as the controller does
    resp = await task
    p = resp.responses[0].partitions[0]
    assert offsets(p.records) == [end] and p.high_watermark == end + 1


async def test_a_long_poll_with_nothing_new_ends_empty(service, mlog) -> None:
    resp = await fetch(service, fetch_req(mlog.next_offset, 1, max_wait_ms=30))
    p = resp.responses[0].partitions[0]
    assert p.error_code == 0 and p.records == b"" and p.high_watermark == mlog.next_offset


@pytest.mark.parametrize("change, top, part", [
    ({"cluster_id": "another-cluster"}, E.INCONSISTENT_CLUSTER_ID, None),
    ({"topic_id": uuid.uuid4()}, E.INVALID_REQUEST, None),
    ({"partition": 1}, E.INVALID_REQUEST, None),
    ({"two_partitions": True}, E.INVALID_REQUEST, None),
    ({"max_wait_ms": -1}, 0, E.INVALID_REQUEST),
    ({"offset": -1}, 0, E.INVALID_REQUEST),
    ({"last_epoch": -1}, 0, E.INVALID_REQUEST),
    ({"last_epoch": 2}, 0, E.INVALID_REQUEST),  # above the CurrentLeaderEpoch it sends
    ({"epoch": 0, "last_epoch": 0}, 0, E.FENCED_LEADER_EPOCH),
    ({"epoch": 7}, 0, E.UNKNOWN_LEADER_EPOCH),
])
async def test_bad_fetches(service, mlog, change: dict, top: int, part: int | None) -> None:
    req = fetch_req(change.get("offset", 1), change.get("last_epoch", 1), epoch=change.get("epoch", 1),
                    max_wait_ms=change.get("max_wait_ms", 0), cluster_id=change.get("cluster_id", CLUSTER))
    if "topic_id" in change:
        req.topics[0].topic_id = change["topic_id"]
    if "partition" in change:
        req.topics[0].partitions[0].partition = change["partition"]
    if "two_partitions" in change:
        req.topics[0].partitions.append(fq.FetchPartition(partition=0, current_leader_epoch=1))
    resp = await fetch(service, req)
    assert resp.error_code == top
    if part is None:
        assert resp.responses == []
    else:
        p = resp.responses[0].partitions[0]
        assert p.error_code == part and p.records == b""
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (3000, 1)


async def test_a_fetch_behind_a_snapshot_gets_its_id(tmp_path: Path) -> None:
    log = MetadataLog(str(tmp_path), node_id=3000, segment_bytes=300, retention_bytes=0)  # each snapshot cuts the log
    log.load()
    image: list = []
    for i in range(6):
        log.append(topic(f"t{i}"))
        image += topic(f"t{i}")
    log.write_snapshot(image[:3], 4)
    log.write_snapshot(image, log.high_watermark)
    assert log.log_start_offset > 0
    svc = MetadataFetchService(log, cluster_id=CLUSTER, node_id=3000)
    try:
        for offset in (0, log.log_start_offset - 1):
            p = (await fetch(svc, fetch_req(offset, 1))).responses[0].partitions[0]
            assert p.error_code == 0 and p.records == b""
            assert (p.snapshot_id.end_offset, p.snapshot_id.epoch) == (7, 1)
        old = (await fetch(svc, fetch_req(1, 1, version=11), 11)).responses[0].partitions[0]
        assert old.error_code == E.OFFSET_OUT_OF_RANGE  # v11 has no SnapshotId field
    finally:
        svc.close()
        log.close()


async def test_a_fetcher_that_diverged_is_told_where_to_truncate(tmp_path: Path) -> None:
    log = MetadataLog(str(tmp_path), node_id=3000)
    log.load()
    log.append(topic("a"))  # epoch 1: offsets 0-1
    log.close()
    log = MetadataLog(str(tmp_path), node_id=3000)
    log.load()  # epoch 2 starts at offset 2
    log.append(topic("b"))
    svc = MetadataFetchService(log, cluster_id=CLUSTER, node_id=3000)
    try:
        # The fetcher holds offsets 0-4 of epoch 1 (more than this log's epoch 1, which ended at 2).
        p = (await fetch(svc, fetch_req(5, 1, epoch=2))).responses[0].partitions[0]
        assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (1, 2) and p.records == b""
        p = (await fetch(svc, fetch_req(2, 1, epoch=2))).responses[0].partitions[0]
        assert p.diverging_epoch.epoch == -1 and offsets(p.records) == [2, 3]
        p = (await fetch(svc, fetch_req(9, 2, epoch=2))).responses[0].partitions[0]
        assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (2, 4)
    finally:
        svc.close()
        log.close()


def snap_req(sid: SnapshotId, position: int, *, max_bytes: int = 1 << 20, epoch: int = 1, name: str =
             "__cluster_metadata", partition: int = 0, cluster_id: str | None = CLUSTER) -> FetchSnapshotRequest:
    return FetchSnapshotRequest(cluster_id=cluster_id, replica_id=1, max_bytes=max_bytes, topics=[
        fsq.TopicSnapshot(name=name, partitions=[fsq.PartitionSnapshot(
            partition=partition, current_leader_epoch=epoch,
            snapshot_id=fsq.SnapshotId(end_offset=sid.end_offset, epoch=sid.epoch), position=position)])])


def test_fetch_snapshot_in_chunks(service, mlog) -> None:
    image: list = []
    for i in range(20):
        mlog.append(topic(f"t{i}"))
        image += topic(f"t{i}")
    path = mlog.write_snapshot(image, mlog.high_watermark)
    sid = mlog.latest_snapshot()
    assert sid is not None
    got = b""
    while True:
        resp = service.fetch_snapshot(snap_req(sid, len(got), max_bytes=100), 1)
        (p,) = resp.topics[0].partitions
        assert p.error_code == 0 and p.position == len(got) and (p.snapshot_id.end_offset, p.snapshot_id.epoch) \
            == (sid.end_offset, sid.epoch)
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (3000, 1)
        assert len(p.unaligned_records) <= 100
        got += p.unaligned_records
        if len(got) == p.size:
            break
    assert got == Path(path).read_bytes() and parse_snapshot(got) == image
    assert resp.node_endpoints[0].port == 9093
    type(resp).decode(resp.encode(1), 1)


@pytest.mark.parametrize("case, code", [
    ("missing", E.SNAPSHOT_NOT_FOUND),
    ("position", E.POSITION_OUT_OF_RANGE),
    ("negative", E.POSITION_OUT_OF_RANGE),
    ("topic", E.UNKNOWN_TOPIC_OR_PARTITION),
    ("stale", E.FENCED_LEADER_EPOCH),
])
def test_bad_snapshot_fetches(service, mlog, case: str, code: int) -> None:
    mlog.append(topic("a"))
    mlog.write_snapshot(topic("a"), mlog.high_watermark)
    sid = mlog.latest_snapshot()
    assert sid is not None
    req = {
        "missing": snap_req(SnapshotId(1, 1), 0),
        "position": snap_req(sid, 1 << 20),
        "negative": snap_req(sid, -1),
        "topic": snap_req(sid, 0, name="orders", partition=2),
        "stale": snap_req(sid, 0, epoch=0),
    }[case]
    (p,) = service.fetch_snapshot(req, 0).topics[0].partitions
    assert p.error_code == code and p.unaligned_records in (None, b"")
    if case == "topic":
        assert p.index == 2


def test_fetch_snapshot_top_level_errors(service) -> None:
    sid = SnapshotId(1, 1)
    assert service.fetch_snapshot(snap_req(sid, 0, cluster_id="x"), 0).error_code == E.INCONSISTENT_CLUSTER_ID
    two = snap_req(sid, 0)
    two.topics.append(two.topics[0])
    resp = service.fetch_snapshot(two, 0)
    assert resp.error_code == E.INVALID_REQUEST and resp.topics == []


async def test_closing_the_service_answers_waiting_fetches_broker_not_available(mlog) -> None:
    svc = MetadataFetchService(mlog, cluster_id=CLUSTER, node_id=3000)
    task = asyncio.create_task(fetch(svc, fetch_req(mlog.next_offset, 1, max_wait_ms=120_000)))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    svc.close()
    p = (await task).responses[0].partitions[0]
    assert p.error_code == E.BROKER_NOT_AVAILABLE and p.records == b""
    p = (await fetch(svc, fetch_req(0))).responses[0].partitions[0]
    assert p.error_code == E.BROKER_NOT_AVAILABLE


def snapshot_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "__cluster_metadata-0").glob("*.checkpoint"))


async def observe(svc: MetadataFetchService, observer: MetadataLog) -> list:
    """A minimal KRaft observer over the service: learn the epoch, fetch, follow a SnapshotId with FetchSnapshot,
    keep everything in `observer`; returns the records it would replay (snapshot first, then fetched)."""
    from kjbod.storage.metadata_records import decode_batches

    leader_epoch, last_epoch, replay = observer.epoch, observer.epoch, []  # epochs it knows
    while True:
        resp = await fetch(svc, fetch_req(observer.next_offset, last_epoch, epoch=leader_epoch))
        p = resp.responses[0].partitions[0]
        if p.error_code == E.FENCED_LEADER_EPOCH:
            leader_epoch = p.current_leader.leader_epoch
            continue
        assert p.error_code == 0
        if p.snapshot_id.end_offset >= 0:
            sid = SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch)
            data = b""
            while True:
                (ps,) = svc.fetch_snapshot(snap_req(sid, len(data), max_bytes=64, epoch=leader_epoch), 1).topics[0] \
                    .partitions
                data += ps.unaligned_records
                if len(data) == ps.size:
                    break
            replay = observer.install_snapshot(data, sid)
            last_epoch = sid.epoch
            continue
        if not p.records:
            return replay
        replay += [r for _, r in decode_batches(p.records)]
        observer.append_fetched(p.records, p.high_watermark)
        last_epoch = observer.epoch


async def test_an_observer_catches_up_by_fetch_and_by_snapshot(tmp_path: Path) -> None:
    # metadata.max.retention.ms 5 s on the controller's clock: the first snapshot is ten seconds old when the
    # second is written, so it goes and the log start moves up to the second, which the early observer has passed.
    clock = [1_000_000]
    leader = MetadataLog(str(tmp_path / "controller"), node_id=3000, segment_bytes=400, retention_ms=5000,
                         clock=lambda: clock[0])
    leader.load()
    svc = MetadataFetchService(leader, cluster_id=CLUSTER, node_id=3000)
    fresh = MetadataLog(str(tmp_path / "early"), node_id=1, writer=False)
    fresh.load()
    late = MetadataLog(str(tmp_path / "late"), node_id=1, writer=False)
    late.load()
    try:
        image: list = []
        for i in range(2):
            leader.append(topic(f"t{i}"))
            image += topic(f"t{i}")
        seen = await observe(svc, fresh)  # from offset 0, by Fetch
        assert seen == image
        leader.write_snapshot(image, leader.high_watermark)
        clock[0] += 10_000
        for i in range(2, 4):
            leader.append(topic(f"t{i}"))
            image += topic(f"t{i}")
        seen += await observe(svc, fresh)  # on from where it was, by Fetch
        assert seen == image and fresh.read(0, 1 << 20) == leader.read(0, 1 << 20)
        leader.write_snapshot(image, leader.high_watermark)  # the first snapshot is past its retention
        assert len(snapshot_files(tmp_path / "controller")) == 1
        for i in range(4, 12):
            leader.append(topic(f"t{i}"))
            image += topic(f"t{i}")
        leader.write_snapshot(image, leader.high_watermark)
        leader.append(topic("after"))
        assert 0 < leader.log_start_offset <= fresh.next_offset
        # A new observer starts with a snapshot (KRaft prefers it to the log from offset 0), then fetches.
        assert await observe(svc, late) == image + topic("after")
        assert late.next_offset == leader.next_offset and late.high_watermark == leader.high_watermark
        # The early observer is not behind the log start: it goes on from where it was, by Fetch.
        seen += await observe(svc, fresh)
        assert seen == image + topic("after") and fresh.latest_snapshot() is None
    finally:
        svc.close()
        for log in (leader, fresh, late):
            log.close()
