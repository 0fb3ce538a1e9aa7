"""ListClientMetricsResources (key 74), version 0 (KIP-714).

Version notes: v0 is the only version, flexible. Answers the names of the client metrics subscriptions (the
CLIENT_METRICS config resources in this broker's metadata image); DESCRIBE_CONFIGS on the cluster is needed when
an authorizer is configured, as in Kafka.
"""

from __future__ import annotations

from kjbod.broker.authz import config_access_refusal
from kjbod.broker.router import api
from kjbod.metadata.acls import DESCRIBE_CONFIGS
from kjbod.metadata.client_metrics import CLIENT_METRICS_RESOURCE
from kjbod.protocol.generated import ListClientMetricsResourcesRequest, ListClientMetricsResourcesResponse
from kjbod.protocol.generated.list_client_metrics_resources_response import ClientMetricsResource


@api(ListClientMetricsResourcesRequest)
def handle(node, request, body: ListClientMetricsResourcesRequest) -> ListClientMetricsResourcesResponse:
    denied = config_access_refusal(node, request, CLIENT_METRICS_RESOURCE, "", DESCRIBE_CONFIGS)
    if denied:
        return ListClientMetricsResourcesResponse(error_code=denied[0])
    names = sorted(name for (rtype, name), values in node.metadata.configs.items()
                   if rtype == CLIENT_METRICS_RESOURCE and values)
    return ListClientMetricsResourcesResponse(
        error_code=0, client_metrics_resources=[ClientMetricsResource(name=n) for n in names])
