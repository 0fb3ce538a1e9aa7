"""CreatePartitions (key 37), versions 0-3.

Version notes: v0 and v1 are the same request (v1 answers before throttling a quota violation); v2 is flexible;
v3 answers THROTTLING_QUOTA_EXCEEDED for a topic over its client's controller mutation quota (older versions
are let through and only throttled: kjbod.broker.mutation_quotas).

The controller owns it, as CreateTopics (kjbod.controller.replication_control.create_partitions: Kafka's checks
and the same replica placement); this handler sends the request to it.  The answer comes once the new
partitions' records are durable and this broker has created the replicas it holds of them.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed, checks_resources, denied_message
from kjbod.broker.mutation_quotas import THROTTLED_MESSAGE, admit, quota_for
from kjbod.broker.router import api
from kjbod.metadata.acls import ALTER, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import CreatePartitionsRequest, CreatePartitionsResponse
from kjbod.protocol.generated.create_partitions_response import CreatePartitionsTopicResult

STRICT_SINCE = 3  # the first version that answers THROTTLING_QUOTA_EXCEEDED


@api(CreatePartitionsRequest)
async def handle(node, request, body: CreatePartitionsRequest) -> CreatePartitionsResponse:
    denied: list[CreatePartitionsTopicResult] = []
    if checks_resources(node, request):  # Kafka: ALTER on each topic
        kept = [t for t in body.topics if allowed(node, request, ALTER, TOPIC, t.name)]
        denied = [CreatePartitionsTopicResult(name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                              error_message=denied_message(request, ALTER, f"topic {t.name}"))
                  for t in body.topics if t not in kept]
        if denied and not kept:
            return CreatePartitionsResponse(results=denied)
        body.topics = kept
    quota = quota_for(node, request, STRICT_SINCE)
    admission = None
    if quota is not None:
        image = node.metadata

        def permits(t) -> int | None:
            topic = image.topic(t.name)
            if topic is None or t.count <= len(topic.partitions):
                return None  # refused by the controller
            return t.count - len(topic.partitions)

        admission, body.topics, refused = admit(quota, body.topics, lambda t: t.name, permits)
        denied.extend(CreatePartitionsTopicResult(name=t.name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                                  error_message=THROTTLED_MESSAGE) for t in refused)
        if not body.topics:
            response = CreatePartitionsResponse(results=denied)
            admission.settle(response, ())
            return response
    response = await node.controller_request(body, request.api_version)
    if admission is not None:
        admission.settle(response, [r.name for r in response.results if r.error_code != 0])
    response.results.extend(denied)
    return response
