"""What the four delegation-token handlers share: who may ask at all, and how a broker forwards a token write to
the controller with the principal it is made for.

Kafka's brokers refuse token requests (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED) from a client that authenticated
with a token, from a PLAINTEXT listener, and from an SSL listener without a client certificate (User:ANONYMOUS).
A broker forwards CreateDelegationToken, RenewDelegationToken and ExpireDelegationToken at their latest (flexible)
version with kjbod's extension fields naming the requester; the controller takes those fields only from a peer
allowed CLUSTER_ACTION on the cluster (a broker; anyone when there is no authorizer, as Kafka trusts a forwarded
request's principal), and otherwise takes the connection's own principal.
"""

from __future__ import annotations

from typing import Any

from kjbod.broker.authz import allowed_cluster
from kjbod.metadata.acls import ANONYMOUS, CLUSTER_ACTION
from kjbod.metadata.tokens import split_principal

__all__ = ["forward", "forwarded", "token_requests_allowed"]


def token_requests_allowed(ctx: Any) -> bool:
    if getattr(ctx, "token_authenticated", False):
        return False
    protocol = ctx.security_protocol.upper()
    if protocol == "PLAINTEXT":
        return False
    return not (protocol == "SSL" and ctx.principal == ANONYMOUS)


def forwarded(node: Any, request: Any, body: Any) -> bool:
    """Whether `body` reached this controller listener forwarded by a broker (it names a requester, and the peer
    may act for the cluster)."""
    if request.ctx.listener_kind != "controller" or not getattr(body, "requester_principal_name", None):
        return False
    return allowed_cluster(node, request, CLUSTER_ACTION)


def forward(node: Any, request: Any, body: Any, version: int) -> Any:
    """Sends `body` to the controller at `version`, naming the client's principal as the requester (a request
    that arrived forwarded keeps the requester it names)."""
    if not forwarded(node, request, body):
        body.requester_principal_type, body.requester_principal_name = split_principal(request.ctx.principal)
    return node.controller_request(body, version)
