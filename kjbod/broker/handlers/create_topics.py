"""CreateTopics (key 19), versions 2-7.

Version notes: v2 is the oldest served (throttle time, validate_only, error messages); v4 lets
num_partitions / replication_factor be -1 for the broker defaults; v5 is flexible and answers the effective
partition count, replication factor and configs; v6 may answer THROTTLING_QUOTA_EXCEEDED (never here); v7
returns the topic id.

The controller owns topic creation (kjbod.controller.replication_control: every check, in Kafka's order, and
placement over the unfenced brokers); this handler sends the request to it and, for v5+, fills in each created
topic's effective configs.  The answer comes once the topic's records are durable and this broker has created
the partitions it hosts.
"""

from __future__ import annotations

from kjbod.broker.authz import checks_resources, denied_message, may_create_topic
from kjbod.broker.router import api
from kjbod.broker.topic_config import effective
from kjbod.metadata.acls import CREATE
from kjbod.metadata.names import CLUSTER_METADATA_TOPIC, collision_index, collision_problem
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import CreateTopicsRequest, CreateTopicsResponse
from kjbod.protocol.generated.create_topics_response import CreatableTopicConfigs as ConfigEntry
from kjbod.protocol.generated.create_topics_response import CreatableTopicResult

__all__ = ["CLUSTER_METADATA_TOPIC", "collision_index", "collision_problem", "config_entries", "handle"]

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
    response = await node.controller_request(body, request.api_version)
    response.topics.extend(denied)
    wanted = {t.name: {c.name: c.value for c in t.configs if c.value is not None} for t in body.topics}
    for result in response.topics:
        if result.error_code == 0 and result.name in wanted:
            result.configs = config_entries(node, wanted[result.name])
    return response
