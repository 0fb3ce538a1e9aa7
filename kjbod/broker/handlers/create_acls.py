"""CreateAcls (key 30), versions 1-3 (Kafka 4.x dropped v0): v2 flexible, v3 the same as v2.

The controller owns it (kjbod.controller.acls: Kafka's checks per entry, one AccessControlEntryRecord per new
entry); a broker checks what Kafka's broker checks and sends the request on. Without an authorizer every entry
answers SECURITY_DISABLED; without ALTER on the cluster CLUSTER_AUTHORIZATION_FAILED. An entry with an UNKNOWN
part is a request Kafka cannot parse: the connection is closed, with a
warning naming the problem. Every node learns the entries from the metadata log.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed_cluster
from kjbod.broker.handlers.acl_checks import refuse_creations
from kjbod.broker.router import api
from kjbod.metadata.acls import ALTER
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import CreateAclsRequest, CreateAclsResponse
from kjbod.protocol.generated.create_acls_response import AclCreationResult


@api(CreateAclsRequest)
def handle(node, request, body: CreateAclsRequest):
    refuse_creations(request, body)
    if getattr(node, "authorizer", None) is None:
        return _all(body, ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    if not allowed_cluster(node, request, ALTER):
        return _all(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{request.ctx.principal} may not ALTER the cluster")
    return node.controller_request(body, request.api_version)


def _all(body: CreateAclsRequest, code: int, message: str) -> CreateAclsResponse:
    return CreateAclsResponse(results=[AclCreationResult(error_code=code, error_message=message)
                                       for _ in body.creations])
