"""Kafka's KRaft wire messages to and from the state machine's own (kjbod.raft.quorum), with Kafka's checks.

Strategy: the state machine reads a handful of fields; the wire messages wrap them in one topic
(`__cluster_metadata`) with one partition (0) and a cluster id. `parse_*_request` checks that wrapping as Kafka's
KafkaRaftClient does (a cluster id other than ours, null being accepted from old senders: top-level
INCONSISTENT_CLUSTER_ID; anything but exactly that one partition: top-level INVALID_REQUEST) and returns either the
state machine's request or the whole error response to send. `*_response` builds the answer; `parse_*_response`
returns the state machine's response, or None when the response carries a top-level error (the request then
counts as failed, and is retried after a backoff). DescribeQuorum is answered from the state machine by
`describe_quorum_response`.
"""

from __future__ import annotations

from typing import Any

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
from kjbod.protocol.generated import begin_quorum_epoch_request as bqe
from kjbod.protocol.generated import begin_quorum_epoch_response as bqer
from kjbod.protocol.generated import describe_quorum_response as dqr
from kjbod.protocol.generated import end_quorum_epoch_request as eqe
from kjbod.protocol.generated import end_quorum_epoch_response as eqer
from kjbod.protocol.generated import vote_request as vr
from kjbod.protocol.generated import vote_response as vrr
from kjbod.raft.quorum import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    EpochResponse,
    RaftQuorum,
    VoteRequest,
    VoteResponse,
)

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0


def _one_partition(body: Any) -> Any | None:
    """The request's only partition when it is exactly `__cluster_metadata` partition 0, else None."""
    topics = body.topics
    if len(topics) != 1 or topics[0].topic_name != METADATA_TOPIC or len(topics[0].partitions) != 1:
        return None
    part = topics[0].partitions[0]
    return part if part.partition_index == METADATA_PARTITION else None


def _cluster_ok(body: Any, cluster_id: str) -> bool:
    return body.cluster_id is None or body.cluster_id == cluster_id


# -------------------------------------------------------------------------------------------------- Vote

def vote_request(cluster_id: str, voter_id: int, req: VoteRequest) -> WireVote:
    """A pre-vote can only go out at v2 or later (the codec refuses PreVote at an older version, as Kafka's)."""
    return WireVote(cluster_id=cluster_id, voter_id=voter_id, topics=[vr.TopicData(
        topic_name=METADATA_TOPIC, partitions=[vr.PartitionData(
            partition_index=METADATA_PARTITION, replica_epoch=req.candidate_epoch, replica_id=req.candidate_id,
            last_offset_epoch=req.last_offset_epoch, last_offset=req.last_offset, pre_vote=req.pre_vote)])])


def parse_vote_request(body: WireVote, cluster_id: str) -> VoteRequest | WireVoteResponse:
    if not _cluster_ok(body, cluster_id):
        return WireVoteResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
    part = _one_partition(body)
    if part is None:
        return WireVoteResponse(error_code=ErrorCode.INVALID_REQUEST)
    return VoteRequest(part.replica_epoch, part.replica_id, part.last_offset_epoch, part.last_offset,
                       pre_vote=part.pre_vote)


def vote_response(resp: VoteResponse) -> WireVoteResponse:
    return WireVoteResponse(error_code=0, topics=[vrr.TopicData(topic_name=METADATA_TOPIC, partitions=[
        vrr.PartitionData(partition_index=METADATA_PARTITION, error_code=resp.error_code, leader_id=resp.leader_id,
                          leader_epoch=resp.leader_epoch, vote_granted=resp.vote_granted)])])


def parse_vote_response(body: WireVoteResponse) -> VoteResponse | None:
    part = _one_partition(body) if body.error_code == 0 else None
    if part is None:
        return None
    return VoteResponse(part.error_code, part.leader_id, part.leader_epoch, part.vote_granted)


# ------------------------------------------------------------------------------------ Begin/EndQuorumEpoch

def begin_quorum_epoch_request(cluster_id: str, voter_id: int, req: BeginQuorumEpochRequest) -> WireBegin:
    return WireBegin(cluster_id=cluster_id, voter_id=voter_id, topics=[bqe.TopicData(
        topic_name=METADATA_TOPIC, partitions=[bqe.PartitionData(
            partition_index=METADATA_PARTITION, leader_id=req.leader_id, leader_epoch=req.leader_epoch)])])


def parse_begin_quorum_epoch_request(body: WireBegin, cluster_id: str
                                     ) -> BeginQuorumEpochRequest | WireBeginResponse:
    if not _cluster_ok(body, cluster_id):
        return WireBeginResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
    part = _one_partition(body)
    if part is None:
        return WireBeginResponse(error_code=ErrorCode.INVALID_REQUEST)
    return BeginQuorumEpochRequest(part.leader_epoch, part.leader_id)


def end_quorum_epoch_request(cluster_id: str, req: EndQuorumEpochRequest, version: int) -> WireEnd:
    part = eqe.PartitionData(partition_index=METADATA_PARTITION, leader_id=req.leader_id,
                             leader_epoch=req.leader_epoch)
    if version == 0:
        part.preferred_successors = list(req.preferred_successors)
    else:
        part.preferred_candidates = [eqe.ReplicaInfo(candidate_id=c) for c in req.preferred_successors]
    return WireEnd(cluster_id=cluster_id, topics=[eqe.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])


def parse_end_quorum_epoch_request(body: WireEnd, cluster_id: str) -> EndQuorumEpochRequest | WireEndResponse:
    if not _cluster_ok(body, cluster_id):
        return WireEndResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
    part = _one_partition(body)
    if part is None:
        return WireEndResponse(error_code=ErrorCode.INVALID_REQUEST)
    successors = tuple(part.preferred_successors) or tuple(c.candidate_id for c in part.preferred_candidates)
    return EndQuorumEpochRequest(part.leader_epoch, part.leader_id, successors)


def epoch_response(resp: EpochResponse, wire: type[WireBeginResponse] | type[WireEndResponse]
                   ) -> WireBeginResponse | WireEndResponse:
    mod = bqer if wire is WireBeginResponse else eqer
    return wire(error_code=0, topics=[mod.TopicData(topic_name=METADATA_TOPIC, partitions=[mod.PartitionData(
        partition_index=METADATA_PARTITION, error_code=resp.error_code, leader_id=resp.leader_id,
        leader_epoch=resp.leader_epoch)])])


def parse_epoch_response(body: WireBeginResponse | WireEndResponse) -> EpochResponse | None:
    part = _one_partition(body) if body.error_code == 0 else None
    if part is None:
        return None
    return EpochResponse(part.error_code, part.leader_id, part.leader_epoch)


# --------------------------------------------------------------------------------------------- DescribeQuorum

def describe_quorum_response(body: WireDescribe, quorum: RaftQuorum, now_ms: int, wall_ms: int,
                             observers: dict[int, tuple[int, int]] | None = None,
                             directory_ids: dict[int, Any] | None = None) -> WireDescribeResponse:
    """Kafka's answer: INVALID_REQUEST for anything but the metadata partition, NOT_LEADER_OR_FOLLOWER from a
    node that does not lead, else the leader, epoch, high watermark and every replica's progress. Fetch times are
    kept on the state machine's clock (`now_ms` now) and reported on the wall clock (`wall_ms` now);
    `observers` adds replicas that fetch without voting, {id: (end offset, last fetch ms on the machine's clock)};
    `directory_ids` (kraft.version 1, v2) names each voter's metadata dir."""
    if _one_partition(body) is None:
        return WireDescribeResponse(error_code=ErrorCode.INVALID_REQUEST,
                                    error_message="DescribeQuorum is only about __cluster_metadata partition 0")
    part = dqr.PartitionData(partition_index=METADATA_PARTITION, leader_id=quorum.leader_id,
                             leader_epoch=quorum.epoch, error_message=None)
    if not quorum.is_leader:
        part.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        part.error_message = "this controller does not lead the quorum"
        part.high_watermark = -1
    else:
        progress = quorum.replica_progress()
        leader_end = progress[quorum.local_id][0]
        part.high_watermark = -1 if quorum.high_watermark is None else quorum.high_watermark

        def state(rid: int, end: int, fetched_at: int) -> dqr.ReplicaState:
            fetched = -1 if fetched_at < 0 else wall_ms - (now_ms - fetched_at)
            caught_up = fetched if end >= 0 and end >= leader_end else -1
            if rid == quorum.local_id:
                fetched = caught_up = wall_ms
            state = dqr.ReplicaState(replica_id=rid, log_end_offset=end, last_fetch_timestamp=fetched,
                                     last_caught_up_timestamp=caught_up)
            if directory_ids and rid in directory_ids and rid in quorum.voters:
                state.replica_directory_id = directory_ids[rid]  # v2: the voter's metadata dir (KIP-853)
            return state

        part.current_voters = [state(v, *progress.get(v, (-1, -1))) for v in quorum.voters]
        others = {r: p for r, p in progress.items() if r not in quorum.voters}
        others.update(observers or {})
        part.observers = [state(r, *p) for r, p in sorted(others.items())]
    return WireDescribeResponse(error_code=0, error_message=None,
                                topics=[dqr.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])


def single_voter_describe_quorum(body: WireDescribe, node_id: int, epoch: int, high_watermark: int,
                                 end_offset: int, wall_ms: int) -> WireDescribeResponse:
    """DescribeQuorum from a controller that is its quorum's only voter (and so its leader)."""
    if _one_partition(body) is None:
        return WireDescribeResponse(error_code=ErrorCode.INVALID_REQUEST,
                                    error_message="DescribeQuorum is only about __cluster_metadata partition 0")
    me = dqr.ReplicaState(replica_id=node_id, log_end_offset=end_offset, last_fetch_timestamp=wall_ms,
                          last_caught_up_timestamp=wall_ms)
    part = dqr.PartitionData(partition_index=METADATA_PARTITION, error_message=None, leader_id=node_id,
                             leader_epoch=epoch, high_watermark=high_watermark, current_voters=[me])
    return WireDescribeResponse(error_code=0, error_message=None,
                                topics=[dqr.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])
