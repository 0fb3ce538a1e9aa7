"""The metadata log as a KRaft voter keeps it (`replicated=True`): the quorum commits, not the fsync; epochs come from
the quorum; a follower's log is cut where it parted from the leader's, never below the high watermark."""

from __future__ import annotations

import uuid

import pytest

from kjbod.protocol.generated.leader_change_message import LeaderChangeMessage, Voter
from kjbod.protocol.generated.topic_record import TopicRecord
from kjbod.raft.log_view import MetadataLogView
from kjbod.storage.errors import StorageError
from kjbod.storage.metadata_log import MetadataLog


def open_log(path, node_id: int = 1) -> MetadataLog:
    mlog = MetadataLog(str(path), node_id=node_id, writer=False, replicated=True)
    mlog.load()
    return mlog


def topics(*names: str) -> list[TopicRecord]:
    return [TopicRecord(name=n, topic_id=uuid.uuid4()) for n in names]


def test_a_leader_writes_uncommitted_until_the_quorum_says_so(tmp_path) -> None:
    mlog = open_log(tmp_path)
    commits: list[int] = []
    mlog.add_commit_listener(commits.append)
    change = LeaderChangeMessage(leader_id=1, voters=[Voter(voter_id=v) for v in (1, 2, 3)])
    assert mlog.append_leader_change(change, 3) == 1
    assert mlog.append_as_leader(topics("a", "b"), 3) == 1
    assert (mlog.next_offset, mlog.high_watermark, mlog.epochs) == (3, 0, [(3, 0)])
    assert mlog.read(0, 1 << 20) == b""  # nothing committed: nothing served to observers
    assert len(mlog.read_uncommitted(0, 1 << 20)) > 0  # voters get it all
    mlog.advance_high_watermark(2)
    mlog.advance_high_watermark(1)  # never backwards
    mlog.advance_high_watermark(99)  # capped at the log end
    assert commits == [2, 3]
    view = MetadataLogView(mlog)
    assert (view.end_offset(), view.last_epoch(), view.end_offset_for_epoch(3), view.end_offset_for_epoch(5)) == (
        3, 3, (3, 3), (3, 3))
    mlog.close()
    # reopened: the tail is not taken as committed; the quorum tells it again
    again = open_log(tmp_path)
    assert (again.next_offset, again.high_watermark, again.epoch) == (3, 0, 3)
    again.close()


def test_a_follower_appends_the_leaders_batches_and_truncates_where_they_part(tmp_path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append_leader_change(LeaderChangeMessage(leader_id=1), 1)
    leader.append_as_leader(topics("a"), 1)
    follower = open_log(tmp_path / "follower", 2)
    assert follower.append_replicated(leader.read_uncommitted(0, 1 << 20)) == 2
    follower.advance_high_watermark(1)
    # the follower then gets records of an epoch-2 leader that never committed them
    stale = open_log(tmp_path / "stale", 3)
    stale.append_replicated(leader.read_uncommitted(0, 1 << 20))
    stale.append_leader_change(LeaderChangeMessage(leader_id=3), 2)
    stale.append_as_leader(topics("x", "y"), 2)
    follower.append_replicated(stale.read_uncommitted(2, 1 << 20))
    assert (follower.next_offset, follower.epochs) == (5, [(1, 0), (2, 2)])
    follower.truncate_to(2)
    assert (follower.next_offset, follower.epochs, follower.epoch) == (2, [(1, 0)], 1)
    with pytest.raises(StorageError, match="would drop committed records"):
        follower.truncate_to(0)
    for m in (leader, follower, stale):
        m.close()
