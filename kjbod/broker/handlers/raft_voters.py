"""AddRaftVoter (key 80, v0-1), RemoveRaftVoter (key 81, v0) and UpdateRaftVoter (key 82, v0), on the controller
listener (KIP-853: dynamic controller membership; what `kjbod metadata-quorum add-controller` and
`remove-controller` send).

Version notes: v0 as Kafka 3.9; AddRaftVoter v1 (Kafka 4.2+) adds AckWhenCommitted (default true): false makes the
leader answer NONE as soon as the new VotersRecord is in its own log, not once it is committed (the change still
blocks the next until it commits). The quorum's leader (kjbod.controller.raft_driver) applies Kafka's rules: a
cluster id other than ours is INCONSISTENT_CLUSTER_ID; a controller that does not lead answers
NOT_LEADER_OR_FOLLOWER; a zero directory id, or (add, update) no endpoint on the leader's controller listener, is
INVALID_REQUEST; one change at a time (REQUEST_TIMED_OUT while one is pending, or while the last VotersRecord or
the leader's epoch is not committed); kraft.version 0 (a static quorum, controller.quorum.voters) is
UNSUPPORTED_VERSION; adding an id that votes already is DUPLICATE_VOTER; a new voter must answer ApiVersions
with a kraft.version range holding the finalized level (else INVALID_REQUEST) and have caught up as an observer
(else REQUEST_TIMED_OUT); removing a voter the (id, directory id) does not name is VOTER_NOT_FOUND. Add and
remove answer once the new voter set is committed (or REQUEST_TIMED_OUT after TimeoutMs / the request timeout);
a leader that removed itself resigns then. A controller that runs no quorum (a combined node alone) is at
kraft.version 0.
"""

from __future__ import annotations

from typing import Any

from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
)
from kjbod.protocol.generated import update_raft_voter_response as urv

_STATIC = "Cluster doesn't support {what} voter because the kraft.version feature is 0"


def _cluster_refusal(node: Any, body: Any) -> str | None:
    cluster_id = getattr(node, "cluster_id", "") or ""
    if body.cluster_id is not None and body.cluster_id != cluster_id:
        return f'The given id "{body.cluster_id}" doesn\'t match the cluster id "{cluster_id}"'
    return None


def _endpoints(listeners: Any) -> tuple[tuple[str, str, int], ...]:
    return tuple((ln.name, ln.host, ln.port) for ln in listeners)


@api(AddRaftVoterRequest, listeners=frozenset({"controller"}))
async def handle_add(node, request, body: AddRaftVoterRequest) -> AddRaftVoterResponse:
    refused = _cluster_refusal(node, body)
    if refused is not None:
        return AddRaftVoterResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID, error_message=refused)
    raft = getattr(node, "raft", None)
    if raft is None:
        return AddRaftVoterResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                    error_message=_STATIC.format(what="adding"))
    code, message = await raft.add_voter(body.voter_id, body.voter_directory_id, _endpoints(body.listeners),
                                         max(0, body.timeout_ms), ack_when_committed=body.ack_when_committed)
    return AddRaftVoterResponse(error_code=code, error_message=message)


@api(RemoveRaftVoterRequest, listeners=frozenset({"controller"}))
async def handle_remove(node, request, body: RemoveRaftVoterRequest) -> RemoveRaftVoterResponse:
    refused = _cluster_refusal(node, body)
    if refused is not None:
        return RemoveRaftVoterResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID, error_message=refused)
    raft = getattr(node, "raft", None)
    if raft is None:
        return RemoveRaftVoterResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                       error_message=_STATIC.format(what="removing"))
    code, message = await raft.remove_voter(body.voter_id, body.voter_directory_id)
    return RemoveRaftVoterResponse(error_code=code, error_message=message)


@api(UpdateRaftVoterRequest, listeners=frozenset({"controller"}))
async def handle_update(node, request, body: UpdateRaftVoterRequest) -> UpdateRaftVoterResponse:
    if _cluster_refusal(node, body) is not None:
        return UpdateRaftVoterResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
    raft = getattr(node, "raft", None)
    if raft is None:
        return UpdateRaftVoterResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
    feature = body.k_raft_version_feature
    code, _message = await raft.update_voter(body.voter_id, body.voter_directory_id, _endpoints(body.listeners),
                                             (feature.min_supported_version, feature.max_supported_version))
    response = UpdateRaftVoterResponse(error_code=code)
    leader = raft.leader_id
    where = raft.voters.get(leader) if leader >= 0 else None
    response.current_leader = urv.CurrentLeader(leader_id=leader, leader_epoch=raft.epoch,
                                                host=where[0] if where else "", port=where[1] if where else -1)
    return response
