"""DescribeClientQuotas (key 48), versions 0-1 (v1 flexible, the same fields).

Answered from this node's metadata image (kjbod.metadata.client_quotas), as Kafka's brokers answer it from their
metadata cache. With an authorizer the client needs DESCRIBE_CONFIGS on the cluster (the router checks it:
CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.metadata.client_quotas import describe_client_quotas
from kjbod.protocol.generated import DescribeClientQuotasRequest, DescribeClientQuotasResponse


@api(DescribeClientQuotasRequest)
def handle(node, request, body: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    return describe_client_quotas(node.metadata.client_quotas, body)
