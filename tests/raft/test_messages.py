"""Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch and DescribeQuorum messages to and from the state machine's,
through the codec at every version, with Kafka's checks of the cluster id and the partition."""

from __future__ import annotations

import random
import struct
import uuid

import pytest

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AddRaftVoterRequest, AddRaftVoterResponse
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
from kjbod.protocol.generated import add_raft_voter_request as arv
from kjbod.protocol.generated import describe_quorum_request as dq
from kjbod.protocol.generated import vote_request as vr
from kjbod.protocol.runtime import EncodeError
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


@pytest.mark.parametrize("version", [0, 1, 2])
def test_vote_round_trip(version: int) -> None:
    req = VoteRequest(candidate_epoch=5, candidate_id=2, last_offset_epoch=4, last_offset=123)
    wire = through(m.vote_request(CLUSTER, 3, req), version)
    assert m.parse_vote_request(wire, CLUSTER) == req
    resp = VoteResponse(0, -1, 5, True)
    assert m.parse_vote_response(through(m.vote_response(resp), version)) == resp


def _compact(text: str) -> bytes:
    data = text.encode()
    return bytes([len(data) + 1]) + data  # a compact string's length + 1 fits one varint byte here


def test_a_pre_vote_has_kafkas_vote_v2_layout_both_ways() -> None:
    """Vote v2 (flexible): ClusterId, VoterId, then per partition PartitionIndex, ReplicaEpoch, ReplicaId,
    ReplicaDirectoryId, VoterDirectoryId, LastOffsetEpoch, LastOffset and PreVote, each struct ending in its
    (empty) tagged fields."""
    req = VoteRequest(candidate_epoch=7, candidate_id=2, last_offset_epoch=7, last_offset=300, pre_vote=True)
    golden = (_compact(CLUSTER) + struct.pack(">i", 3)
              + b"\x02" + _compact("__cluster_metadata")
              + b"\x02" + struct.pack(">iii", 0, 7, 2) + bytes(16) + bytes(16) + struct.pack(">iq?", 7, 300, True)
              + b"\x00" + b"\x00" + b"\x00")
    assert m.vote_request(CLUSTER, 3, req).encode(2) == golden
    decoded = WireVote.decode(golden, 2)
    assert m.parse_vote_request(decoded, CLUSTER) == req
    # the same request without PreVote is v1's bytes with one false byte more
    standard = VoteRequest(candidate_epoch=8, candidate_id=2, last_offset_epoch=7, last_offset=300)
    v1, v2 = (m.vote_request(CLUSTER, 3, standard).encode(v) for v in (1, 2))
    assert v2 == v1[:-3] + b"\x00" + v1[-3:]
    # a pre-vote cannot be written at v0-1 (the field is not ignorable, as in Kafka)
    for version in (0, 1):
        with pytest.raises(EncodeError, match="PreVote"):
            m.vote_request(CLUSTER, 3, req).encode(version)


def test_add_raft_voter_v1_has_kafkas_layout_both_ways() -> None:
    """AddRaftVoter v1 (flexible): ClusterId, TimeoutMs, VoterId, VoterDirectoryId, Listeners (Name, Host, uint16
    Port), then AckWhenCommitted; v0 is the same without it (and means true)."""
    directory = uuid.UUID("0123456789abcdef0123456789abcdef")
    body = AddRaftVoterRequest(cluster_id=None, timeout_ms=30_000, voter_id=4, voter_directory_id=directory,
                               listeners=[arv.Listener(name="CONTROLLER", host="h4", port=9093)],
                               ack_when_committed=False)
    head = (b"\x00" + struct.pack(">ii", 30_000, 4) + directory.bytes
            + b"\x02" + _compact("CONTROLLER") + _compact("h4") + struct.pack(">H", 9093) + b"\x00")
    assert body.encode(1) == head + b"\x00" + b"\x00"
    assert AddRaftVoterRequest.decode(head + b"\x01\x00", 1).ack_when_committed is True
    assert AddRaftVoterRequest.decode(head + b"\x00\x00", 1) == body
    assert AddRaftVoterRequest.decode(head + b"\x00", 0).ack_when_committed is True  # v0: always on commit
    with pytest.raises(EncodeError, match="AckWhenCommitted"):
        body.encode(0)
    response = AddRaftVoterResponse(throttle_time_ms=0, error_code=0, error_message=None)
    assert response.encode(1) == response.encode(0) == struct.pack(">ih", 0, 0) + b"\x00" + b"\x00"


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
