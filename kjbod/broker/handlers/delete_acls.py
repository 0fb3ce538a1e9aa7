"""DeleteAcls (key 31), versions 1-3 (Kafka 4.x dropped v0): v2 flexible, v3 the same as v2.

The controller owns it (kjbod.controller.acls: every entry a filter matches is removed with a
RemoveAccessControlEntryRecord and listed under that filter); a broker checks what Kafka's broker checks and
sends it on. Without an authorizer every filter answers SECURITY_DISABLED; without ALTER on the cluster
CLUSTER_AUTHORIZATION_FAILED. A filter with an UNKNOWN part is a request Kafka cannot parse: the connection is closed, with a warning naming the problem.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed_cluster
from kjbod.broker.handlers.acl_checks import refuse_filter
from kjbod.broker.router import api
from kjbod.metadata.acls import ALTER, AclFilter
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DeleteAclsRequest, DeleteAclsResponse
from kjbod.protocol.generated.delete_acls_response import DeleteAclsFilterResult


@api(DeleteAclsRequest)
def handle(node, request, body: DeleteAclsRequest):
    for f in body.filters:
        refuse_filter(request, AclFilter.of(f), "DeleteAcls")
    if getattr(node, "authorizer", None) is None:
        return _all(body, ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    if not allowed_cluster(node, request, ALTER):
        return _all(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{request.ctx.principal} may not ALTER the cluster")
    return node.controller_request(body, request.api_version)


def _all(body: DeleteAclsRequest, code: int, message: str) -> DeleteAclsResponse:
    return DeleteAclsResponse(filter_results=[DeleteAclsFilterResult(error_code=code, error_message=message)
                                              for _ in body.filters])
