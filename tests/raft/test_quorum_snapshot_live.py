"""Three `kjbod serve` controllers of one quorum: a controller stopped while the others write and snapshot in a
later epoch comes back through FetchSnapshot and holds the same metadata as the others."""

from __future__ import annotations

from pathlib import Path

from live import LiveServer

from kjbod.metadata import EMPTY_IMAGE, MetadataDelta, image_records
from kjbod.protocol.generated import RegisterBrokerRecord
from kjbod.storage.metadata_log import MetadataLog

from .test_controller_quorum_live import (
    IDS,
    controllers,
    describe,
    register,
    wait_for_leader,
    wait_replicated,
    wait_until,
)


def image_in_log(server: LiveServer) -> list:
    """The image a controller's files hold (its snapshot, then its log), as the records that rebuild it."""
    mlog = MetadataLog(str(server.metadata_dir), node_id=server.node_id, writer=False, replicated=True)
    try:
        delta = MetadataDelta(EMPTY_IMAGE)
        for rec, offset in zip(mlog.load(), mlog.loaded_offsets, strict=True):
            delta.replay(rec, offset)
        return image_records(delta.apply())
    finally:
        mlog.close()


def checkpoints(server: LiveServer) -> list[str]:
    return sorted(p.name for p in (Path(server.metadata_dir) / "__cluster_metadata-0").glob("*.checkpoint"))


def test_a_controller_behind_a_snapshot_catches_up_through_fetch_snapshot(tmp_path: Path) -> None:
    """Controller F stops; the leader stops (SIGTERM) and comes back, so the quorum is in a later epoch; the two
    write enough for snapshots (metadata.log.max.record.bytes.between.snapshots=2048). F, restarted, is
    sent to the leader's snapshot (its last epoch is older than the snapshot's), fetches it with FetchSnapshot,
    installs it and then holds the same metadata as the others."""
    servers = controllers(tmp_path, {"metadata.log.max.record.bytes.between.snapshots": "2048"})
    try:
        for s in servers.values():
            s.start()
        first = wait_for_leader(servers)
        end = register(servers[first], 7)
        wait_replicated(servers[first], end, IDS)
        first_epoch = describe(servers[first]).leader_epoch
        behind = next(i for i in IDS if i != first)
        assert servers[behind].stop() == 0
        assert servers[first].stop() == 0  # it resigns; back, it takes part in an election of a later epoch
        servers[first].start()
        second = wait_for_leader(servers)
        assert describe(servers[second]).leader_epoch > first_epoch
        for broker_id in range(100, 130):
            end = register(servers[second], broker_id)
        running = tuple(i for i in IDS if i != behind)
        wait_replicated(servers[second], end, running)
        assert all(checkpoints(servers[i]) for i in running)  # each voter snapshots its own committed image

        servers[behind].start()
        wait_replicated(servers[second], end, IDS)
        assert wait_until(lambda: "raft_snapshot_installed" in servers[behind].stderr(tail=400),
                          "the restarted controller installed the leader's snapshot")
    finally:
        codes = {i: s.stop() for i, s in servers.items()}
    assert all(code == 0 for code in codes.values()), {i: servers[i].stderr() for i in IDS}
    assert set(checkpoints(servers[behind])) & set(checkpoints(servers[second]))
    images = {i: image_in_log(s) for i, s in servers.items()}
    assert images[behind] == images[second] == images[next(i for i in IDS if i not in (behind, second))]
    assert {7, *range(100, 130)} <= {r.broker_id for r in images[behind] if isinstance(r, RegisterBrokerRecord)}
