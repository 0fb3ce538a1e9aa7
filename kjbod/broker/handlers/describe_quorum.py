"""DescribeQuorum (key 55), versions 0-2, on the controller listener (KRaft, KIP-595; what
kafka-metadata-quorum.sh --bootstrap-controller asks).

Version notes: v0 baseline; v1 (KIP-836) adds each replica's last fetch and caught-up times; v2 (KIP-853) adds
error messages, the voters' directory ids (zero for a static quorum, controller.quorum.voters) and, in the leader's answer, the voters'
controller listeners (`controller.quorum.voters`). The
quorum's leader answers with its epoch, high watermark and every voter's progress; another controller answers
NOT_LEADER_OR_FOLLOWER naming the leader. A controller that is its quorum's only voter describes itself.
"""

from __future__ import annotations

from kjbod.broker.handlers import quorum_common
from kjbod.broker.router import api
from kjbod.protocol.generated import DescribeQuorumRequest, DescribeQuorumResponse


@api(DescribeQuorumRequest, listeners=frozenset({"controller"}))
async def handle(node, request, body: DescribeQuorumRequest) -> DescribeQuorumResponse:
    return await quorum_common.answer(node, 55, request.api_version, body)
