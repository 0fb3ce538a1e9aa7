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
    ALTER_CONFIGS,
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_NAME,
    CREATE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    STANDARD_AUTHORIZER,
    TOPIC,
    WRITE,
    Authorizer,
)

__all__ = ["CLUSTER_ACTION_APIS", "CLUSTER_ALTER_APIS", "CLUSTER_DESCRIBE_APIS", "allowed", "allowed_cluster",
           "authorized_operations", "build_authorizer", "checks_resources", "cluster_operation_for",
           "config_access_refusal", "denied_message", "idempotent_write_allowed", "may_create_topic"]

GROUP_CONFIGS = 32  # the config resource type of a group (not the ACL resource type)

# Inter-broker and controller APIs: Kafka asks for CLUSTER_ACTION on the cluster.
CLUSTER_ACTION_APIS = frozenset({
    56,  # AlterPartition
    62,  # BrokerRegistration
    63,  # BrokerHeartbeat
    67,  # AllocateProducerIds
    70,  # ControllerRegistration
    73,  # AssignReplicasToDirs
    59,  # FetchSnapshot
    27,  # WriteTxnMarkers
    83, 84, 85, 86, 87,  # the share coordinator's RPCs (KIP-932)
})
# APIs that change the cluster as a whole: ALTER on the cluster.
CLUSTER_ALTER_APIS = frozenset({
    43,  # ElectLeaders
    45,  # AlterPartitionReassignments
    64,  # UnregisterBroker
    51,  # AlterUserScramCredentials
    57,  # UpdateFeatures
    10000, 10001, 10002,  # kjbod's KIP-179 reassignment and throttle extensions
})
# APIs that only read the cluster's state: DESCRIBE on the cluster.
CLUSTER_DESCRIBE_APIS = frozenset({
    46,  # ListPartitionReassignments
    50,  # DescribeUserScramCredentials
})
# Client quotas are configs of the cluster (Kafka's KafkaApis): ALTER_CONFIGS or DESCRIBE_CONFIGS on the cluster.
CLUSTER_ALTER_CONFIGS_APIS = frozenset({49})  # AlterClientQuotas
CLUSTER_DESCRIBE_CONFIGS_APIS = frozenset({48})  # DescribeClientQuotas


def build_authorizer(config: Any, node: Any) -> Authorizer | None:
    """The authorizer `config` asks for, reading the ACLs of `node`'s current image; None when there is none."""
    name = config.authorizer_class_name
    if not name:
        return None
    if name != STANDARD_AUTHORIZER:  # the config parser refuses it first; this keeps the contract in one place
        raise ValueError(f"authorizer.class.name={name} is not served")
    return Authorizer(lambda: node.metadata.acls, super_users=config.super_users,
                      allow_if_no_acl=config.allow_everyone_if_no_acl_found,
                      loaded=getattr(node, "metadata_loaded", None))


def allowed(node: Any, request: Any, operation: int, resource_type: int, name: str) -> bool:
    """May the client of `request` do `operation` on this resource? Always, without an authorizer."""
    authz = getattr(node, "authorizer", None)
    if authz is None:
        return True
    ctx = request.ctx
    return authz.allowed(ctx.principal, ctx.peer_host, operation, resource_type, name)


def allowed_cluster(node: Any, request: Any, operation: int) -> bool:
    return allowed(node, request, operation, CLUSTER, CLUSTER_NAME)


def may_create_topic(node: Any, request: Any, name: str) -> bool:
    """Kafka's rule for creating a topic (CreateTopics, Metadata's auto-creation): CREATE on the cluster, or on the
    topic."""
    return allowed_cluster(node, request, CREATE) or allowed(node, request, CREATE, TOPIC, name)


def checks_resources(node: Any, request: Any) -> bool:
    """Whether the per-resource checks apply to this request: an authorizer is on, and the request is not one a
    broker forwarded to the controller listener (a principal with CLUSTER_ACTION; the broker checked the client)."""
    if getattr(node, "authorizer", None) is None:
        return False
    return not (request.ctx.listener_kind == "controller" and allowed_cluster(node, request, CLUSTER_ACTION))


def denied_message(request: Any, operation: int, what: str) -> str:
    from kjbod.metadata.acls import OPERATIONS

    return f"{request.ctx.principal} may not {OPERATIONS[operation]} {what}"


def config_access_refusal(node: Any, request: Any, resource_type: int, name: str,
                          operation: int) -> tuple[int, str] | None:
    """Kafka's rule for DescribeConfigs (DESCRIBE_CONFIGS) and AlterConfigs (ALTER_CONFIGS): a topic's configs need
    the operation on the topic (TOPIC_AUTHORIZATION_FAILED), a broker's on the cluster
    (CLUSTER_AUTHORIZATION_FAILED), a group's on the group (GROUP_AUTHORIZATION_FAILED). None when allowed."""
    if getattr(node, "authorizer", None) is None:
        return None
    from kjbod.metadata.acls import OPERATIONS
    from kjbod.protocol.errors import ErrorCode

    if resource_type == TOPIC:
        if not allowed(node, request, operation, TOPIC, name):
            return (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    f"{request.ctx.principal} may not {OPERATIONS[operation]} of topic {name}")
    elif resource_type == GROUP_CONFIGS:  # a group's configs (KIP-848): the operation on the group
        from kjbod.metadata.acls import GROUP

        if not allowed(node, request, operation, GROUP, name):
            return (ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    f"{request.ctx.principal} may not {OPERATIONS[operation]} of group {name}")
    elif not allowed_cluster(node, request, operation):
        return (ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{request.ctx.principal} may not {OPERATIONS[operation]} of the cluster")
    return None


def idempotent_write_allowed(node: Any, request: Any) -> bool:
    """An idempotent producer's InitProducerId: Kafka allows IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
    (its authorizeByResourceType: an ALLOW for WRITE or ALL on a topic pattern that applies to the client, and no
    DENY of it on the wildcard topic)."""
    from kjbod.metadata.acls import IDEMPOTENT_WRITE

    if allowed_cluster(node, request, IDEMPOTENT_WRITE):
        return True
    ctx = request.ctx
    authz = getattr(node, "authorizer", None)
    return authz is None or bool(authz.may_on_some(ctx.principal, ctx.peer_host, WRITE, TOPIC))


def authorized_operations(node: Any, request: Any, resource_type: int, name: str) -> int:
    """The bit set (1 << operation code) of the operations the client may do on a resource, of those its type has:
    what Metadata, DescribeCluster and DescribeGroups answer when asked. Without an authorizer, every one."""
    from kjbod.metadata.acls import SUPPORTED_OPERATIONS

    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if allowed(node, request, op, resource_type, name):
            bits |= 1 << op
    return bits


def cluster_operation_for(api_key: int) -> int | None:
    """The cluster operation an API needs before its handler runs, or None (checked per resource inside)."""
    if api_key in CLUSTER_ACTION_APIS:
        return CLUSTER_ACTION
    if api_key in CLUSTER_ALTER_APIS:
        return ALTER
    if api_key in CLUSTER_DESCRIBE_APIS:
        return DESCRIBE
    if api_key in CLUSTER_ALTER_CONFIGS_APIS:
        return ALTER_CONFIGS
    if api_key in CLUSTER_DESCRIBE_CONFIGS_APIS:
        return DESCRIBE_CONFIGS
    return None
