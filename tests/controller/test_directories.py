"""KIP-858 on the controller, in process: AssignReplicasToDirs and heartbeats' OfflineLogDirs, requests in,
records and responses out (the managers' context of test_managers)."""

from __future__ import annotations

import uuid

import pytest

from kjbod.controller import directories
from kjbod.metadata import DIR_LOST, DIR_UNASSIGNED, EMPTY_IMAGE, image_records, replay
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    AssignReplicasToDirsRequest,
    BrokerRegistrationChangeRecord,
    PartitionChangeRecord,
)
from kjbod.protocol.generated.assign_replicas_to_dirs_request import DirectoryData, PartitionData, TopicData

from .test_managers import Ctx

D1, D2, D3 = (uuid.UUID(int=(n << 70) + 7) for n in (21, 22, 23))
OTHER = uuid.UUID(int=99 << 70)  # broker 2's dir


def cluster(*, fenced=False):
    """Broker 1 with three dirs (fenced when asked), broker 2 with one; topic t: partitions 0-3 on broker 1
    (UNASSIGNED), partition 4 on broker 2."""
    ctx = Ctx()
    ctx.live_broker(1, dirs=[D1, D2, D3])
    ctx.live_broker(2, dirs=[OTHER])
    ctx.create("t", -1, assignments=[[1], [1], [1], [1], [2]])
    if fenced:
        ctx.heartbeat(1, want_fence=True)
        assert ctx.image.broker(1).fenced
    return ctx


def assign(ctx, placements, *, broker=1, epoch=None):
    """placements: {dir id: {topic id: [partitions]}}; returns the response, committing the records."""
    reg = ctx.image.brokers.get(broker)
    req = AssignReplicasToDirsRequest(
        broker_id=broker, broker_epoch=reg.epoch if epoch is None else epoch,
        directories=[DirectoryData(id=d, topics=[TopicData(topic_id=t, partitions=[PartitionData(partition_index=i)
                                                                                     for i in parts])
                                                 for t, parts in topics.items()])
                     for d, topics in placements.items()])
    return ctx.commit(directories.assign_replicas_to_dirs(ctx.image, req, ctx.hb.dirs))


def codes(resp):
    return {(d.id, t.topic_id, p.partition_index): p.error_code
            for d in resp.directories for t in d.topics for p in t.partitions}


def dirs_of(ctx, broker=1):
    return {i: p.directory_of(broker) for i, p in ctx.image.topic("t").partitions.items() if broker in p.replicas}


@pytest.mark.parametrize("fenced", [False, True])
def test_assignments_write_directories_and_answer_each_partition(fenced):
    # A fenced broker is answered too: a several-dir broker reports its placements before it may be unfenced.
    ctx = cluster(fenced=fenced)
    tid = ctx.image.topic("t").topic_id
    assert set(dirs_of(ctx).values()) == {DIR_UNASSIGNED}
    before = len(ctx.log)
    resp = assign(ctx, {D1: {tid: [0, 1]}, D3: {tid: [2, 3]}})
    assert resp.error_code == 0 and set(codes(resp).values()) == {0}
    assert codes(resp).keys() == {(D1, tid, 0), (D1, tid, 1), (D3, tid, 2), (D3, tid, 3)}
    assert dirs_of(ctx) == {0: D1, 1: D1, 2: D3, 3: D3}
    new = ctx.log[before:]
    assert len(new) == 4 and all(isinstance(r, PartitionChangeRecord) and r.leader == -2 and r.isr is None
                                 for r in new)
    # The same assignment again writes nothing and still succeeds.
    before = len(ctx.log)
    assert set(codes(assign(ctx, {D1: {tid: [0]}})).values()) == {0} and len(ctx.log) == before


@pytest.mark.parametrize("epoch", [12345, None])
def test_a_stale_or_unknown_broker_epoch_fails_the_whole_request(epoch):
    ctx = cluster()
    tid = ctx.image.topic("t").topic_id
    before = len(ctx.log)
    broker = 1 if epoch is not None else 7  # broker 7 never registered
    req_epoch = epoch if epoch is not None else 0
    if broker == 7:
        req = AssignReplicasToDirsRequest(broker_id=7, broker_epoch=req_epoch, directories=[])
        resp = ctx.commit(directories.assign_replicas_to_dirs(ctx.image, req, ctx.hb.dirs))
    else:
        resp = assign(ctx, {D1: {tid: [0]}}, epoch=req_epoch)
    assert resp.error_code == E.STALE_BROKER_EPOCH and resp.directories == []
    assert len(ctx.log) == before


def test_per_partition_errors_in_kafkas_order():
    ctx = cluster()
    tid = ctx.image.topic("t").topic_id
    unknown_topic = uuid.uuid4()
    before = len(ctx.log)
    resp = assign(ctx, {
        D1: {unknown_topic: [0], tid: [9, 4, 0]},  # no such topic; no partition 9; 4 is broker 2's
        OTHER: {tid: [1]},  # broker 2's dir: not one of broker 1's
        uuid.UUID(int=55 << 70): {unknown_topic: [1], tid: [2]},  # nobody's dir; the topic is checked first
    })
    assert codes(resp) == {
        (D1, unknown_topic, 0): E.UNKNOWN_TOPIC_ID,
        (D1, tid, 9): E.UNKNOWN_TOPIC_OR_PARTITION,
        (D1, tid, 4): E.NOT_LEADER_OR_FOLLOWER,
        (D1, tid, 0): 0,
        (OTHER, tid, 1): E.LOG_DIR_NOT_FOUND,
        (uuid.UUID(int=55 << 70), unknown_topic, 1): E.UNKNOWN_TOPIC_ID,
        (uuid.UUID(int=55 << 70), tid, 2): E.LOG_DIR_NOT_FOUND,
    }
    # Only the good partition was written.
    assert [(r.partition_id, r.directories) for r in ctx.log[before:]] == [(0, [D1])]
    assert dirs_of(ctx) == {0: D1, 1: DIR_UNASSIGNED, 2: DIR_UNASSIGNED, 3: DIR_UNASSIGNED}


@pytest.mark.parametrize("target", ["lost", "failed"])
def test_a_replica_placed_in_an_offline_dir_loses_leadership(target):
    ctx = cluster()
    tid = ctx.image.topic("t").topic_id
    assign(ctx, {D1: {tid: [0]}, D2: {tid: [1]}})
    if target == "failed":
        ctx.heartbeat(1, offline=[D2])
        assert ctx.image.broker(1).log_dirs == (D1, D3)
    dest = DIR_LOST if target == "lost" else D2
    before = len(ctx.log)
    resp = assign(ctx, {dest: {tid: [0]}})
    assert set(codes(resp).values()) == {0}
    dir_rec, leader_rec = ctx.log[before:]
    assert (dir_rec.partition_id, dir_rec.directories) == (0, [dest])
    assert (leader_rec.partition_id, leader_rec.leader) == (0, -1)
    parts = ctx.image.topic("t").partitions
    assert parts[0].leader == -1 and parts[0].directory_of(1) == dest
    assert parts[2].leader == 1 and not ctx.image.broker(1).fenced  # the rest keep their leader


def test_a_leaderless_replica_assigned_back_to_an_online_dir_gets_its_leader_back():
    """A move's destination was recorded, then failed (the heartbeat took the partition's leadership away); the
    broker points the replica back at its source, online: the same record elects the broker again."""
    ctx = cluster()
    tid = ctx.image.topic("t").topic_id
    assign(ctx, {D1: {tid: [0, 1]}})
    assign(ctx, {D2: {tid: [0]}})  # the move's destination, confirmed before the swap
    ctx.heartbeat(1, offline=[D2])
    assert ctx.image.topic("t").partitions[0].leader == -1
    before = len(ctx.log)
    assert set(codes(assign(ctx, {D1: {tid: [0]}})).values()) == {0}  # the revert
    (rec,) = ctx.log[before:]
    assert (rec.directories, rec.leader) == ([D1], 1)
    p0 = ctx.image.topic("t").partitions[0]
    assert (p0.leader, p0.isr, p0.directory_of(1)) == (1, (1,), D1)
    # Still leaderless when the dir it is pointed at is offline too.
    ctx.heartbeat(1, offline=[D2, D1])
    assert ctx.image.topic("t").partitions[1].leader == -1
    assert set(codes(assign(ctx, {D3: {tid: [1]}})).values()) == {0}
    assert ctx.image.topic("t").partitions[1].leader == 1
    assert set(codes(assign(ctx, {D1: {tid: [1]}})).values()) == {0}
    assert ctx.image.topic("t").partitions[1].leader == -1


# ------------------------------------------------------------------------------------------ heartbeats


def test_a_failed_dir_moves_leadership_off_exactly_its_partitions():
    ctx = cluster()
    tid = ctx.image.topic("t").topic_id
    assign(ctx, {D1: {tid: [0, 1]}, D2: {tid: [2]}, D3: {tid: [3]}})
    before = len(ctx.log)
    resp = ctx.heartbeat(1, offline=[D1])
    assert (resp.error_code, resp.is_fenced, resp.should_shut_down) == (0, False, False)
    new = ctx.log[before:]
    assert [(r.partition_id, r.leader) for r in new if isinstance(r, PartitionChangeRecord)] == [(0, -1), (1, -1)]
    (change,) = [r for r in new if isinstance(r, BrokerRegistrationChangeRecord)]
    assert change.log_dirs == [D2, D3] and change.fenced == 0
    leaders = {i: p.leader for i, p in ctx.image.topic("t").partitions.items()}
    assert leaders == {0: -1, 1: -1, 2: 1, 3: 1, 4: 2}
    assert not ctx.image.broker(1).fenced
    # Resent in every heartbeat: nothing new, no error.
    before = len(ctx.log)
    assert ctx.heartbeat(1, offline=[D1]).error_code == 0 and len(ctx.log) == before
    # A second failure adds to the first.
    ctx.heartbeat(1, offline=[D1, D3])
    assert ctx.image.broker(1).log_dirs == (D2,) and ctx.image.topic("t").partitions[3].leader == -1
    assert ctx.image.topic("t").partitions[2].leader == 1


def test_an_offline_dir_the_broker_never_registered_is_log_dir_not_found():
    ctx = cluster()
    before = (len(ctx.log), ctx.hb.sessions[1].last_contact)
    ctx.now += 1
    for bad in ([uuid.UUID(int=77 << 70)], [D1, OTHER]):  # nobody's dir; broker 2's dir
        resp = ctx.heartbeat(1, offline=bad)
        assert resp.error_code == E.LOG_DIR_NOT_FOUND
    assert (len(ctx.log), ctx.hb.sessions[1].last_contact) == before  # nothing changed, not even the session
    assert ctx.image.broker(1).log_dirs == (D1, D2, D3)


def test_a_failed_dir_stays_known_after_a_controller_restart():
    """A restarted controller knows the failed dirs from the image it replays (the registration keeps them as
    offline_dirs) and from the log's registrations, so the cumulative OfflineLogDirs of a broker whose empty dir
    failed is still accepted."""
    ctx = cluster()
    tid = ctx.image.topic("t").topic_id
    assign(ctx, {D1: {tid: [0]}})
    ctx.heartbeat(1, offline=[D1, D3])  # D1 holds partition 0, D3 nothing
    restarted = directories.BrokerDirs()
    assert restarted.unknown(ctx.image, 1, [D1, D3]) == []
    assert ctx.image.broker(1).offline_dirs == (D1, D3)
    restarted.note_records(ctx.log)
    assert restarted.unknown(ctx.image, 1, [D3]) == []
    ctx.hb.dirs = restarted
    assert ctx.heartbeat(1, offline=[D1, D3]).error_code == 0


def test_an_empty_failed_dir_stays_known_after_a_snapshot_and_a_restart():
    """The edge case of the memory above: once a snapshot has replaced the records, the failed dir is still in
    the snapshot (its RegisterBrokerRecord with every dir, then a BrokerRegistrationChangeRecord with the online
    ones), so a controller started from it accepts the broker's resent OfflineLogDirs."""
    ctx = cluster()
    ctx.heartbeat(1, offline=[D3])  # D3 holds nothing
    assert (ctx.image.broker(1).log_dirs, ctx.image.broker(1).offline_dirs) == ((D1, D2), (D3,))
    snapshot = [type(r).decode(r.encode(type(r).MAX_VERSION), type(r).MAX_VERSION) for r in image_records(ctx.image)]
    started = replay(EMPTY_IMAGE, snapshot)
    assert started.brokers == ctx.image.brokers and started.topics_by_id == ctx.image.topics_by_id
    assert (started.broker(1).log_dirs, started.broker(1).offline_dirs) == ((D1, D2), (D3,))
    ctx.image, ctx.hb.dirs = started, directories.BrokerDirs()
    ctx.hb.dirs.note_records(snapshot)
    assert ctx.heartbeat(1, offline=[D3]).error_code == 0
    # A broker started again with the dir repaired registers it: it is online again, no longer remembered.
    ctx.register(1, dirs=[D1, D2, D3])
    assert (ctx.image.broker(1).log_dirs, ctx.image.broker(1).offline_dirs) == ((D1, D2, D3), ())


def test_an_unclean_election_in_a_new_dir_keeps_recovering() -> None:
    """A leaderless partition whose replica moves to an online dir may get that replica as its leader in the same
    record; when that election is unclean the record says RECOVERING, as any unclean election's does."""
    da, db = uuid.UUID(int=(2 << 64) + 1), uuid.UUID(int=(2 << 64) + 2)
    ctx = Ctx(elr=False)
    ctx.live_broker(1)
    ctx.live_broker(2, dirs=[da, db])
    r = ctx.create("t", -1, assignments=[[1, 2]], configs={"unclean.leader.election.enable": "true"})
    assert r.error_code == 0, r.error_message
    t = ctx.image.topic("t")
    assign(ctx, {DIR_LOST: {t.topic_id: [0]}}, broker=2)  # 2's replica is lost: it leaves the ISR
    ctx.heartbeat(1, want_fence=True)  # the last ISR member goes: no leader
    p = ctx.image.topic("t").partitions[0]
    assert (p.leader, p.isr) == (-1, (1,))
    assign(ctx, {db: {t.topic_id: [0]}}, broker=2)  # the replica is back, in an online dir
    p = ctx.image.topic("t").partitions[0]
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), 1)
