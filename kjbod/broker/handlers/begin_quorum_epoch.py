"""BeginQuorumEpoch (key 53), versions 0-1, on the controller listener only (KRaft, KIP-595).

Version notes: v0 baseline; v1 (KIP-853) is flexible and adds the voter id, directory and the leader's endpoints
(read and ignored: the leader's address comes from controller.quorum.voters). On a controller of a multi-voter
quorum the quorum's state machine answers (kjbod.controller.raft_driver); a controller that is its quorum's only
voter refuses another leader.
"""

from __future__ import annotations

from kjbod.broker.handlers import quorum_common
from kjbod.broker.router import api
from kjbod.protocol.generated import BeginQuorumEpochRequest, BeginQuorumEpochResponse


@api(BeginQuorumEpochRequest, listeners=frozenset({"controller"}))
async def handle(node, request, body: BeginQuorumEpochRequest) -> BeginQuorumEpochResponse:
    return await quorum_common.answer(node, 53, request.api_version, body)
