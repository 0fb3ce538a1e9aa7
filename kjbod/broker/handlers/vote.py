"""Vote (key 52), versions 0-2, on the controller listener only (KRaft, KIP-595).

Version notes: v0 baseline (flexible); v1 (KIP-853) adds the voter id and directory ids, read and ignored; v2
(KIP-996) adds PreVote, a prospective voter's non-binding question in its current epoch (kjbod.raft.quorum). On a controller of a multi-voter quorum the quorum's state machine answers
(kjbod.controller.raft_driver); a controller that is its quorum's only voter grants nothing and names itself the
leader of its epoch, as a lone KRaft leader does.
"""

from __future__ import annotations

from kjbod.broker.handlers import quorum_common
from kjbod.broker.router import api
from kjbod.protocol.generated import VoteRequest, VoteResponse


@api(VoteRequest, listeners=frozenset({"controller"}))
async def handle(node, request, body: VoteRequest) -> VoteResponse:
    return await quorum_common.answer(node, 52, request.api_version, body)
