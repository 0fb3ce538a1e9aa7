"""EndQuorumEpoch (key 54), versions 0-1, on the controller listener only (KRaft, KIP-595).

Version notes: v0 names the preferred successors by id; v1 (KIP-853) is flexible, names them with directory ids
and adds the leader's endpoints. On a controller of a multi-voter quorum the quorum's state machine answers
(kjbod.controller.raft_driver); a controller that is its quorum's only voter refuses another leader.
"""

from __future__ import annotations

from kjbod.broker.handlers import quorum_common
from kjbod.broker.router import api
from kjbod.protocol.generated import EndQuorumEpochRequest, EndQuorumEpochResponse


@api(EndQuorumEpochRequest, listeners=frozenset({"controller"}))
async def handle(node, request, body: EndQuorumEpochRequest) -> EndQuorumEpochResponse:
    return await quorum_common.answer(node, 54, request.api_version, body)
