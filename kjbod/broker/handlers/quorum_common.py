"""What the quorum APIs (Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum) share: the node's quorum answers
when it runs one (`node.raft`, a kjbod.controller.raft_driver.RaftDriver), else the controller in this process is
its quorum's only voter and answers as a lone KRaft leader would."""

from __future__ import annotations

import time
from typing import Any

from kjbod.protocol.errors import ErrorCode
from kjbod.raft import messages
from kjbod.raft.quorum import BeginQuorumEpochRequest, EndQuorumEpochRequest, EpochResponse, VoteResponse


async def answer(node: Any, api_key: int, version: int, body: Any) -> Any:
    raft = getattr(node, "raft", None)
    if raft is not None:
        return await raft.handle_request(api_key, version, body)
    mlog = node.controller.log
    node_id, epoch = node.node_id, mlog.epoch
    cluster_id = getattr(node, "cluster_id", "") or ""
    if api_key == 55:
        return messages.single_voter_describe_quorum(body, node_id, epoch, mlog.high_watermark, mlog.next_offset,
                                                     time.time_ns() // 1_000_000)
    if api_key == 52:
        vote = messages.parse_vote_request(body, cluster_id)
        if not isinstance(vote, messages.VoteRequest):
            return vote
        error = ErrorCode.FENCED_LEADER_EPOCH if vote.candidate_epoch < epoch else ErrorCode.NONE
        return messages.vote_response(VoteResponse(error, node_id, epoch, False))
    parse = (messages.parse_begin_quorum_epoch_request if api_key == 53
             else messages.parse_end_quorum_epoch_request)
    wire = messages.WireBeginResponse if api_key == 53 else messages.WireEndResponse
    req = parse(body, cluster_id)
    if not isinstance(req, (BeginQuorumEpochRequest, EndQuorumEpochRequest)):
        return req
    # only this controller can lead a quorum it is the only voter of
    error = ErrorCode.FENCED_LEADER_EPOCH if req.leader_epoch < epoch else ErrorCode.INVALID_REQUEST
    return messages.epoch_response(EpochResponse(error, node_id, epoch), wire)
