"""DescribeAcls (key 29), versions 1-3 (Kafka 4.x dropped v0): v2 flexible, v3 the same as v2.

Answered from this node's metadata image (kjbod.metadata.acls), as Kafka's brokers answer it from their
authorizer's cache. Kafka's checks: without an authorizer SECURITY_DISABLED; without DESCRIBE on the cluster
CLUSTER_AUTHORIZATION_FAILED; a filter with an UNKNOWN part is a request Kafka cannot parse: the connection is closed, with a warning naming the problem.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed_cluster
from kjbod.broker.handlers.acl_checks import refuse_filter
from kjbod.broker.router import api
from kjbod.metadata.acls import DESCRIBE, AclFilter, describe_acls_response
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeAclsRequest, DescribeAclsResponse


@api(DescribeAclsRequest)
def handle(node, request, body: DescribeAclsRequest) -> DescribeAclsResponse:
    refuse_filter(request, AclFilter.of(body), "DescribeAcls")
    if getattr(node, "authorizer", None) is None:
        return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED,
                                    error_message="No Authorizer is configured on the broker")
    if not allowed_cluster(node, request, DESCRIBE):
        return DescribeAclsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                    error_message=f"{request.ctx.principal} may not DESCRIBE the cluster")
    return describe_acls_response(node.metadata.acls, body)
