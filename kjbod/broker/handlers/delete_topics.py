"""DeleteTopics (key 20), versions 1-6.

Version notes: v1-v3 identical requests (names only); v4 flexible; v5 adds error messages; v6 names topics by
name or by id (an unknown id answers UNKNOWN_TOPIC_ID).  With `delete.topic.enable=false` the controller answers
every topic TOPIC_DELETION_DISABLED (v3+) or INVALID_REQUEST (v1-v2), as Kafka's does.  v5+ answers
THROTTLING_QUOTA_EXCEEDED for a topic over its client's controller mutation quota (older versions are let
through and only throttled: kjbod.broker.mutation_quotas).  The controller owns deletion
(kjbod.controller.replication_control): it records RemoveTopicRecords; once they are durable this broker renames
its partition directories with Kafka's `-delete` suffix, removed in the background, and the request is answered.
"""

from __future__ import annotations

import inspect

from kjbod.broker.authz import allowed, checks_resources, denied_message
from kjbod.broker.mutation_quotas import THROTTLED_MESSAGE, admit, quota_for
from kjbod.broker.router import api
from kjbod.metadata.acls import DELETE, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DeleteTopicsRequest, DeleteTopicsResponse
from kjbod.protocol.generated.delete_topics_response import DeletableTopicResult

STRICT_SINCE = 5  # the first version that answers THROTTLING_QUOTA_EXCEEDED


@api(DeleteTopicsRequest)
def handle(node, request, body: DeleteTopicsRequest):
    image = node.metadata
    denied: list[DeletableTopicResult] = []
    by_id = bool(body.topics)  # v6 names topics by name or by id
    if checks_resources(node, request):
        # Kafka: DELETE on each topic; a topic named by an id this node does not know is left to the controller
        def may(name: str | None) -> bool:
            return name is None or allowed(node, request, DELETE, TOPIC, name)

        if by_id:
            kept = []
            for t in body.topics:
                name = _name_of(image, t)
                if may(name):
                    kept.append(t)
                else:
                    denied.append(DeletableTopicResult(name=name, topic_id=t.topic_id,
                                                       error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                       error_message=denied_message(request, DELETE, f"topic {name}")))
            body.topics = kept
        else:
            names = [n for n in body.topic_names if may(n)]
            denied = [DeletableTopicResult(name=n, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                           error_message=denied_message(request, DELETE, f"topic {n}"))
                      for n in body.topic_names if n not in names]
            body.topic_names = names
    admission = None
    quota = quota_for(node, request, STRICT_SINCE)
    if quota is not None:
        def permits(name: str | None) -> int | None:
            topic = image.topic(name) if name is not None else None
            return None if topic is None else len(topic.partitions)  # an unknown topic is the controller's to refuse

        if by_id:
            admission, body.topics, refused = admit(quota, body.topics, lambda t: _name_of(image, t) or t.topic_id,
                                                    lambda t: permits(_name_of(image, t)))
            denied.extend(DeletableTopicResult(name=_name_of(image, t), topic_id=t.topic_id,
                                               error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                               error_message=THROTTLED_MESSAGE) for t in refused)
        else:
            admission, body.topic_names, refused_names = admit(quota, body.topic_names, lambda n: n, permits)
            denied.extend(DeletableTopicResult(name=n, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                               error_message=THROTTLED_MESSAGE) for n in refused_names)
    if not denied:
        result = node.controller_call(body, request.api_version)
        if admission is None:
            return result
    elif not (body.topics if by_id else body.topic_names):
        response = DeleteTopicsResponse(responses=denied)
        if admission is not None:
            admission.settle(response, ())
        return response
    else:
        result = node.controller_call(body, request.api_version)

    async def merged() -> DeleteTopicsResponse:
        response = await result if inspect.isawaitable(result) else result
        if admission is not None:
            admission.settle(response, [r.name if r.name is not None else r.topic_id
                                        for r in response.responses if r.error_code != 0])
        response.responses.extend(denied)
        return response

    return merged()


def _name_of(image, t) -> str | None:
    """The topic a v6 entry names: its name, or the name of the topic its id has on this node (None: unknown)."""
    if t.name is not None:
        return t.name
    known = image.topic_by_id(t.topic_id)
    return known.name if known is not None else None
