"""CreateTopics (key 19), versions 2-7.

Version notes: v2 is the oldest served (throttle time, validate_only, error messages); v4 lets
num_partitions / replication_factor be -1 for the broker defaults; v5 is flexible and answers the effective
partition count, replication factor and configs; v6 answers THROTTLING_QUOTA_EXCEEDED for a topic over its client's controller
mutation quota (older versions are let through and only throttled: kjbod.broker.mutation_quotas); v7 returns
the topic id.

The controller owns topic creation (kjbod.controller.replication_control: every check, in Kafka's order, and
placement over the unfenced brokers); this handler sends the request to it and, for v5+, fills in each created
topic's effective configs.  The answer comes once the topic's records are durable and this broker has created
the partitions it hosts.
"""

from __future__ import annotations

from kjbod.broker.authz import checks_resources, denied_message, may_create_topic
from kjbod.broker.mutation_quotas import THROTTLED_MESSAGE, admit, quota_for
from kjbod.broker.router import api
from kjbod.broker.topic_config import effective
from kjbod.metadata.acls import CREATE
from kjbod.metadata.names import CLUSTER_METADATA_TOPIC, collision_index, collision_problem
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import CreateTopicsRequest, CreateTopicsResponse
from kjbod.protocol.generated.create_topics_response import CreatableTopicConfigs as ConfigEntry
from kjbod.protocol.generated.create_topics_response import CreatableTopicResult

__all__ = ["CLUSTER_METADATA_TOPIC", "collision_index", "collision_problem", "config_entries", "handle"]

STRICT_SINCE = 6  # the first version that answers THROTTLING_QUOTA_EXCEEDED
TOPIC_CONFIG_SOURCE = 1
DEFAULT_CONFIG_SOURCE = 5


def config_entries(node, overrides: dict[str, str]) -> list:
    out = []
    for name, (value, is_override) in sorted(effective(overrides, node.config).items()):
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        out.append(ConfigEntry(name=name, value=text, read_only=False,
                               config_source=TOPIC_CONFIG_SOURCE if is_override else DEFAULT_CONFIG_SOURCE,
                               is_sensitive=False))
    return out


@api(CreateTopicsRequest)
async def handle(node, request, body: CreateTopicsRequest) -> CreateTopicsResponse:
    denied: list[CreatableTopicResult] = []
    if checks_resources(node, request):  # Kafka: CREATE on the cluster, or on each topic
        kept = [t for t in body.topics if may_create_topic(node, request, t.name)]
        denied = [CreatableTopicResult(name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                       error_message=denied_message(request, CREATE, f"topic {t.name}"), configs=None)
                  for t in body.topics if t not in kept]
        if denied and not kept:
            return CreateTopicsResponse(topics=denied)
        body.topics = kept
    quota = quota_for(node, request, STRICT_SINCE)
    admission = None
    if quota is not None:
        image = node.metadata

        def permits(t) -> int | None:
            if image.topic(t.name) is not None:
                return None  # TOPIC_ALREADY_EXISTS from the controller
            if t.assignments:
                return len(t.assignments)
            return t.num_partitions if t.num_partitions != -1 else node.config.num_partitions

        admission, body.topics, refused = admit(quota, body.topics, lambda t: t.name, permits)
        denied.extend(CreatableTopicResult(name=t.name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                           error_message=THROTTLED_MESSAGE, configs=None) for t in refused)
        if not body.topics:
            response = CreateTopicsResponse(topics=denied)
            admission.settle(response, ())
            return response
    response = await node.controller_request(body, request.api_version)
    if admission is not None:
        admission.settle(response, [r.name for r in response.topics if r.error_code != 0])
    response.topics.extend(denied)
    wanted = {t.name: {c.name: c.value for c in t.configs if c.value is not None} for t in body.topics}
    for result in response.topics:
        if result.error_code == 0 and result.name in wanted:
            result.configs = config_entries(node, wanted[result.name])
    return response
