"""DeleteShareGroupOffsets (key 92), version 0.

Version notes: v0 (KIP-932) deletes an empty share group's share state of whole topics.  Kafka's answers:
share.version 0 is UNSUPPORTED_VERSION; DELETE on the group is needed (GROUP_AUTHORIZATION_FAILED); an unknown
group or another kind of group's id is GROUP_ID_NOT_FOUND, a group with members NON_EMPTY_GROUP, an empty id
INVALID_GROUP_ID (top-level errors); READ on each topic (TOPIC_AUTHORIZATION_FAILED), and a topic without state
UNKNOWN_TOPIC_OR_PARTITION, per topic.  The work is kjbod.broker.share.groups_offsets.delete's, through the
share-state persister.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.router import api
from kjbod.broker.share import groups_offsets
from kjbod.metadata.acls import DELETE, READ, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse
from kjbod.protocol.generated.delete_share_group_offsets_response import (
    DeleteShareGroupOffsetsResponseTopic as Topic,
)


@api(DeleteShareGroupOffsetsRequest)
async def handle(node, request, body: DeleteShareGroupOffsetsRequest) -> DeleteShareGroupOffsetsResponse:
    gid = body.group_id
    if (code := groups_offsets.refusal(node, request, gid, DELETE)):
        return DeleteShareGroupOffsetsResponse(error_code=code)
    coordinator = coordinator_of(node)
    refused = [Topic(topic_name=t.topic_name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     error_message="Topic authorization failed.")
               for t in body.topics if not allowed(node, request, READ, TOPIC, t.topic_name)]
    names = [t.topic_name for t in body.topics if allowed(node, request, READ, TOPIC, t.topic_name)]
    result = await groups_offsets.delete(coordinator, gid, names)
    if result.error_code:
        return DeleteShareGroupOffsetsResponse(error_code=result.error_code, error_message=result.error_message)
    return DeleteShareGroupOffsetsResponse(responses=refused + [
        Topic(topic_name=t.name, topic_id=t.topic_id, error_code=t.error_code, error_message=t.error_message)
        for t in result.topics])
