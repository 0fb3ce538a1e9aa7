"""Authorization of requests: the node's authorizer (or none) and the checks handlers make with it.

Strategy: `authorizer.class.name` empty means no authorizer (`node.authorizer` is None) and every check below
allows at once; that is the whole cost for a node without one. With Kafka's StandardAuthorizer configured, the
node holds a `kjbod.metadata.acls.Authorizer` over its current image's ACLs, and handlers ask it with Kafka's
operation and resource for the API (AuthHelper's and KafkaApis' pairs): one cached dict lookup per resource.

APIs that only brokers and controllers send among themselves (replication, registration, heartbeats, metadata
log fetches) need CLUSTER_ACTION on the cluster; `CLUSTER_ACTION_APIS` lists them and the router checks them
before their handlers run, answering CLUSTER_AUTHORIZATION_FAILED in the response's own error fields.
"""

from __future__ import annotations

from typing import Any

from kjbod.metadata.acls import (
    ALTER,
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_NAME,
    CREATE,
    DESCRIBE,
    STANDARD_AUTHORIZER,
    Authorizer,
)

__all__ = ["CLUSTER_ACTION_APIS", "allowed", "allowed_cluster", "build_authorizer", "may_create_topic"]

# Inter-broker and controller APIs: Kafka asks for CLUSTER_ACTION on the cluster.
CLUSTER_ACTION_APIS = frozenset({
    56,  # AlterPartition
    62,  # BrokerRegistration
    63,  # BrokerHeartbeat
    67,  # AllocateProducerIds
    73,  # AssignReplicasToDirs
    59,  # FetchSnapshot
})
# APIs that change the cluster as a whole: ALTER on the cluster.
CLUSTER_ALTER_APIS = frozenset({
    43,  # ElectLeaders
    45,  # AlterPartitionReassignments
    64,  # UnregisterBroker
    10000, 10001, 10002,  # kjbod's KIP-179 reassignment and throttle extensions
})
# APIs that only read the cluster's state: DESCRIBE on the cluster.
CLUSTER_DESCRIBE_APIS = frozenset({
    46,  # ListPartitionReassignments
    35,  # DescribeLogDirs (Kafka answers it empty, not with an error, when denied: see its handler)
})


def build_authorizer(config: Any, node: Any) -> Authorizer | None:
    """The authorizer `config` asks for, reading the ACLs of `node`'s current image; None when there is none."""
    name = config.authorizer_class_name
    if not name:
        return None
    if name != STANDARD_AUTHORIZER:  # the config parser refuses it first; this keeps the contract in one place
        raise ValueError(f"authorizer.class.name={name} is not served")
    return Authorizer(lambda: node.metadata.acls, super_users=config.super_users,
                      allow_if_no_acl=config.allow_everyone_if_no_acl_found)


def allowed(node: Any, request: Any, operation: int, resource_type: int, name: str) -> bool:
    """May the client of `request` do `operation` on this resource? Always, without an authorizer."""
    authz = node.authorizer
    if authz is None:
        return True
    ctx = request.ctx
    return authz.allowed(ctx.principal, ctx.peer_host, operation, resource_type, name)


def allowed_cluster(node: Any, request: Any, operation: int) -> bool:
    return allowed(node, request, operation, CLUSTER, CLUSTER_NAME)


def may_create_topic(node: Any, request: Any, name: str) -> bool:
    """Kafka's rule for creating a topic (CreateTopics, Metadata's auto-creation): CREATE on the cluster, or on the
    topic."""
    from kjbod.metadata.acls import TOPIC

    return allowed_cluster(node, request, CREATE) or allowed(node, request, CREATE, TOPIC, name)


def cluster_operation_for(api_key: int) -> int | None:
    """The cluster operation an API needs before its handler runs, or None (checked per resource inside)."""
    if api_key in CLUSTER_ACTION_APIS:
        return CLUSTER_ACTION
    if api_key in CLUSTER_ALTER_APIS:
        return ALTER
    if api_key in CLUSTER_DESCRIBE_APIS and api_key != 35:
        return DESCRIBE
    return None
