"""DeleteTopics (key 20), versions 1-6.

Version notes: v1-v3 identical requests (names only); v4 flexible; v5 adds error messages; v6 names topics by
name or by id (an unknown id answers UNKNOWN_TOPIC_ID).  With `delete.topic.enable=false` the controller answers
every topic TOPIC_DELETION_DISABLED (v3+) or INVALID_REQUEST (v1-v2), as Kafka's does.  The controller owns deletion
(kjbod.controller.replication_control): it records RemoveTopicRecords; once they are durable this broker renames
its partition directories with Kafka's `-delete` suffix, removed in the background, and the request is answered.
"""

from __future__ import annotations

import inspect

from kjbod.broker.authz import allowed, checks_resources, denied_message
from kjbod.broker.router import api
from kjbod.metadata.acls import DELETE, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DeleteTopicsRequest, DeleteTopicsResponse
from kjbod.protocol.generated.delete_topics_response import DeletableTopicResult


@api(DeleteTopicsRequest)
def handle(node, request, body: DeleteTopicsRequest):
    if not checks_resources(node, request):
        return node.controller_call(body, request.api_version)
    # Kafka: DELETE on each topic; a topic named by an id this node does not know is left to the controller
    image = node.metadata
    denied: list[DeletableTopicResult] = []

    def may(name: str | None) -> bool:
        return name is None or allowed(node, request, DELETE, TOPIC, name)

    if body.topics:
        kept = []
        for t in body.topics:
            known = image.topic_by_id(t.topic_id) if t.name is None else None
            name = t.name if t.name is not None else (known.name if known is not None else None)
            if may(name):
                kept.append(t)
            else:
                denied.append(DeletableTopicResult(name=name, topic_id=t.topic_id,
                                                   error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                   error_message=denied_message(request, DELETE, f"topic {name}")))
        body.topics = kept
        left = bool(kept)
    else:
        names = [n for n in body.topic_names if may(n)]
        denied = [DeletableTopicResult(name=n, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                       error_message=denied_message(request, DELETE, f"topic {n}"))
                  for n in body.topic_names if n not in names]
        body.topic_names = names
        left = bool(names)
    if not denied:
        return node.controller_call(body, request.api_version)
    if not left:
        return DeleteTopicsResponse(responses=denied)
    result = node.controller_call(body, request.api_version)

    async def merged() -> DeleteTopicsResponse:
        response = await result if inspect.isawaitable(result) else result
        response.responses.extend(denied)
        return response

    return merged()
