"""Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch and DescribeQuorum messages to and from the state machine's,
through the codec at every version, with Kafka's checks of the cluster id and the partition."""

from __future__ import annotations

import random

import pytest

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    BeginQuorumEpochRequest as WireBegin,
)
from kjbod.protocol.generated import (
    BeginQuorumEpochResponse as WireBeginResponse,
)
from kjbod.protocol.generated import (
    DescribeQuorumRequest as WireDescribe,
)
from kjbod.protocol.generated import (
    DescribeQuorumResponse as WireDescribeResponse,
)
from kjbod.protocol.generated import (
    EndQuorumEpochRequest as WireEnd,
)
from kjbod.protocol.generated import (
    EndQuorumEpochResponse as WireEndResponse,
)
from kjbod.protocol.generated import (
    VoteRequest as WireVote,
)
from kjbod.protocol.generated import (
    VoteResponse as WireVoteResponse,
)
from kjbod.protocol.generated import describe_quorum_request as dq
from kjbod.protocol.generated import vote_request as vr
from kjbod.raft import messages as m
from kjbod.raft.log_view import EpochHistory
from kjbod.raft.quorum import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    EpochResponse,
    FetchRequest,
    RaftQuorum,
    Send,
    VoteRequest,
    VoteResponse,
)

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


def through(msg, version: int):
    return type(msg).decode(msg.encode(version), version)


@pytest.mark.parametrize("version", [0, 1])
def test_vote_round_trip(version: int) -> None:
    req = VoteRequest(candidate_epoch=5, candidate_id=2, last_offset_epoch=4, last_offset=123)
    wire = through(m.vote_request(CLUSTER, 3, req), version)
    assert m.parse_vote_request(wire, CLUSTER) == req
    resp = VoteResponse(0, -1, 5, True)
    assert m.parse_vote_response(through(m.vote_response(resp), version)) == resp


@pytest.mark.parametrize("version", [0, 1])
def test_begin_and_end_quorum_epoch_round_trip(version: int) -> None:
    begin = BeginQuorumEpochRequest(leader_epoch=7, leader_id=1)
    assert m.parse_begin_quorum_epoch_request(through(m.begin_quorum_epoch_request(CLUSTER, 2, begin), version),
                                              CLUSTER) == begin
    end = EndQuorumEpochRequest(leader_epoch=7, leader_id=1, preferred_successors=(3, 2))
    assert m.parse_end_quorum_epoch_request(through(m.end_quorum_epoch_request(CLUSTER, end, version), version),
                                            CLUSTER) == end
    resp = EpochResponse(ErrorCode.FENCED_LEADER_EPOCH, 2, 8)
    for wire in (WireBeginResponse, WireEndResponse):
        assert m.parse_epoch_response(through(m.epoch_response(resp, wire), version)) == resp


def test_a_null_cluster_id_is_accepted_and_another_refused() -> None:
    wire = m.vote_request(CLUSTER, 3, VoteRequest(1, 2, 0, 0))
    wire.cluster_id = None
    assert isinstance(m.parse_vote_request(wire, CLUSTER), VoteRequest)
    wire.cluster_id = "another"
    assert m.parse_vote_request(wire, CLUSTER) == WireVoteResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
    begin = m.begin_quorum_epoch_request("another", 2, BeginQuorumEpochRequest(1, 1))
    assert m.parse_begin_quorum_epoch_request(begin, CLUSTER).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    end = m.end_quorum_epoch_request("another", EndQuorumEpochRequest(1, 1), 1)
    assert m.parse_end_quorum_epoch_request(end, CLUSTER).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID


@pytest.mark.parametrize("topics", [
    [],
    [vr.TopicData(topic_name="other", partitions=[vr.PartitionData()])],
    [vr.TopicData(topic_name="__cluster_metadata", partitions=[vr.PartitionData(partition_index=1)])],
    [vr.TopicData(topic_name="__cluster_metadata", partitions=[vr.PartitionData(), vr.PartitionData()])],
])
def test_anything_but_the_metadata_partition_is_an_invalid_request(topics: list) -> None:
    assert m.parse_vote_request(WireVote(cluster_id=CLUSTER, topics=topics), CLUSTER) == WireVoteResponse(
        error_code=ErrorCode.INVALID_REQUEST)
    assert m.parse_begin_quorum_epoch_request(WireBegin(topics=[]), CLUSTER).error_code == ErrorCode.INVALID_REQUEST
    assert m.parse_end_quorum_epoch_request(WireEnd(topics=[]), CLUSTER).error_code == ErrorCode.INVALID_REQUEST


def test_a_top_level_error_response_is_a_failed_request() -> None:
    assert m.parse_vote_response(WireVoteResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)) is None
    assert m.parse_epoch_response(WireBeginResponse(error_code=ErrorCode.BROKER_NOT_AVAILABLE)) is None
    assert m.parse_epoch_response(WireEndResponse(topics=[])) is None


def _describe() -> WireDescribe:
    return WireDescribe(topics=[dq.TopicData(topic_name="__cluster_metadata",
                                             partitions=[dq.PartitionData(partition_index=0)])])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_from_the_leader(version: int) -> None:
    log = EpochHistory()
    q = RaftQuorum(1, (1, 2, 3), log, stored=None, now_ms=0, rng=random.Random(0))
    for _ in ("pre-vote", "vote"):
        q.poll(5000)
        votes = {e.destination: e.correlation_id for e in q.take_effects() if isinstance(e, Send)}
        q.handle_vote_response(2, votes[2], VoteResponse(0, -1, q.epoch, True), 5000)
    assert q.is_leader
    log.append(1, 3)
    q.leader_flushed(3, 5000)
    q.handle_fetch(FetchRequest(2, 1, 3, 1), 5100)
    q.handle_fetch(FetchRequest(5, 1, 1, 1), 5200)  # an observer (a broker)
    resp = through(m.describe_quorum_response(_describe(), q, now_ms=5300, wall_ms=1_700_000_000_000), version)
    part = resp.topics[0].partitions[0]
    assert (resp.error_code, part.error_code, part.leader_id, part.leader_epoch, part.high_watermark) == (
        0, 0, 1, 1, 3)
    voters = {r.replica_id: r for r in part.current_voters}
    assert {r: v.log_end_offset for r, v in voters.items()} == {1: 3, 2: 3, 3: -1}
    assert [(o.replica_id, o.log_end_offset) for o in part.observers] == [(5, 1)]
    if version >= 1:
        assert voters[2].last_fetch_timestamp == 1_700_000_000_000 - 200
        assert voters[2].last_caught_up_timestamp == 1_700_000_000_000 - 200
        assert voters[3].last_fetch_timestamp == -1
        assert part.observers[0].last_caught_up_timestamp == -1  # behind the leader


def test_describe_quorum_from_a_follower_or_about_another_partition() -> None:
    q = RaftQuorum(2, (1, 2, 3), EpochHistory(), stored=None, now_ms=0, rng=random.Random(0))
    q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(4, 1), 0)
    part = m.describe_quorum_response(_describe(), q, 0, 0).topics[0].partitions[0]
    assert (part.error_code, part.leader_id, part.leader_epoch) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, 1, 4)
    resp = m.describe_quorum_response(WireDescribe(topics=[]), q, 0, 0)
    assert isinstance(resp, WireDescribeResponse) and resp.error_code == ErrorCode.INVALID_REQUEST
