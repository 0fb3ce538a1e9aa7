"""DeleteTopics (key 20), versions 1-6.

Version notes: v1-v3 identical requests (names only); v4 flexible; v5 adds error messages; v6 names topics by
name or by id (an unknown id answers UNKNOWN_TOPIC_ID).  With `delete.topic.enable=false` the controller answers
every topic TOPIC_DELETION_DISABLED (v3+) or INVALID_REQUEST (v1-v2), as Kafka's does.  The controller owns deletion
(kjbod.controller.replication_control): it records RemoveTopicRecords; once they are durable this broker renames
its partition directories with Kafka's `-delete` suffix, removed in the background, and the request is answered.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import DeleteTopicsRequest, DeleteTopicsResponse


@api(DeleteTopicsRequest)
def handle(node, request, body: DeleteTopicsRequest) -> DeleteTopicsResponse:
    return node.controller_call(body, request.api_version)
