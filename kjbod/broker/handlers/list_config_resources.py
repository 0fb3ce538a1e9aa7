"""ListConfigResources (key 74), versions 0-1 (KIP-1142; v0 is KIP-714's ListClientMetricsResources).

Version notes: v0 lists the client-metrics resources (type 16) only; v1 takes the resource types to list and
names each resource's type.

The config resources a client may then describe, as Kafka's broker lists them: groups with configs of their
own (type 32), client-metrics subscriptions (16), each broker as a broker-logger resource (8) and as a broker
(4) (the unfenced brokers with an endpoint on this listener, by id), then every topic (2), in that order of types
and, within a type, by name (broker ids by number).  An empty v1 list asks for all five types; any other type
fails the whole request with UNSUPPORTED_VERSION and nothing listed, as Kafka answers.  The caller needs
DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise).  kjbod keeps group and client-metrics
configs as ConfigRecords of those resource types when it has them; a cluster without any lists none.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed_cluster
from kjbod.broker.router import api
from kjbod.metadata.acls import DESCRIBE_CONFIGS
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ListConfigResourcesRequest, ListConfigResourcesResponse
from kjbod.protocol.generated.list_config_resources_response import ConfigResource

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
# The types Kafka lists at v1, in the order its answer lists them.
V1_TYPES = (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)


def _configured(image, resource_type: int) -> list[str]:
    """Names of the resources of `resource_type` that have configs in the metadata (groups, client metrics)."""
    return sorted(name for (rtype, name), configs in image.configs.items() if rtype == resource_type and configs)


@api(ListConfigResourcesRequest)
def handle(node, request, body: ListConfigResourcesRequest) -> ListConfigResourcesResponse:
    if not allowed_cluster(node, request, DESCRIBE_CONFIGS):
        return ListConfigResourcesResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, config_resources=[])
    if request.api_version == 0:
        wanted = {CLIENT_METRICS}
    else:
        wanted = set(body.resource_types) or set(V1_TYPES)
        if not wanted <= set(V1_TYPES):
            return ListConfigResourcesResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, config_resources=[])
    image = node.metadata
    out: list[ConfigResource] = []
    for rtype in V1_TYPES:
        if rtype not in wanted:
            continue
        if rtype in (GROUP, CLIENT_METRICS):
            names = _configured(image, rtype)
        elif rtype == TOPIC:
            names = sorted(t.name for t in image.topics())
        else:
            names = [str(b) for b in sorted({n.node_id for n in node.cluster_nodes(request.ctx.listener_name,
                                                                                    controllers=False)})]
        out.extend(ConfigResource(resource_name=n, resource_type=rtype) for n in names)
    return ListConfigResourcesResponse(error_code=0, config_resources=out)
