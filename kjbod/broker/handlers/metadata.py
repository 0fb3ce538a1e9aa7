"""Metadata (key 3), versions 0-13.

Version notes: v0 treats an empty topic list as "all topics"; v1+ uses null for that and an empty list for
none, and adds rack, controller id and is_internal; v2 adds the cluster id; v3 throttle time; v4
allow_auto_topic_creation (honoured together with `auto.create.topics.enable`); v5 offline replicas; v7 leader
epoch; v8-v10 authorized-operation fields (answered as "not computed"); v9 flexible; v10 topic ids; v12 lookup
by topic id (an unknown id answers UNKNOWN_TOPIC_ID); v13 a top-level error code.

The answer lists every unfenced broker registered with the controller, with its endpoint for the listener
the request arrived on, and a live broker (this one) as the controller id, as Kafka's KRaft brokers do
(KIP-590: controller-bound requests go to any broker, which forwards them).  Each partition shows its replicas,
ISR and offline replicas (Kafka's: on unregistered or fenced brokers, brokers without this listener, or in a dir
the metadata says is offline; and this broker's own replica when its dir failed here, KIP-858).  A partition
without a leader, whose leader has no endpoint for this listener, or led by this broker from a dir that failed
here, answers LEADER_NOT_AVAILABLE with leader -1.

The topics asked for, as Kafka's KafkaApis.handleTopicMetadataRequest reads them: a set, so a topic named twice
is answered once (in the order first named here; Kafka's set has no order); from v12, a request naming some topic
id is answered for its ids only (unknown ones first, UNKNOWN_TOPIC_ID; its entries by name are not answered); a
v10-11 request naming a topic id or a null name is refused as a whole (MetadataRequest.getErrorResponse: each
topic named INVALID_REQUEST, no brokers).
"""

from __future__ import annotations

from kjbod.broker.authz import allowed, authorized_operations, may_create_topic
from kjbod.broker.handlers.create_topics import (
    CLUSTER_METADATA_TOPIC,
    collision_index,
    collision_problem,
)
from kjbod.broker.router import api
from kjbod.metadata.acls import CLUSTER, CLUSTER_NAME, DESCRIBE, TOPIC
from kjbod.metadata.names import topic_name_problem
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import MetadataRequest, MetadataResponse
from kjbod.protocol.generated.metadata_response import MetadataResponseBroker as Broker
from kjbod.protocol.generated.metadata_response import MetadataResponsePartition as Partition
from kjbod.protocol.generated.metadata_response import MetadataResponseTopic as Topic
from kjbod.protocol.runtime import ZERO_UUID

# The topics Kafka itself owns (Kafka's Topic.INTERNAL_TOPICS): their coordinators' logs.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def offline_replicas(node, p, listener: str, here_online: bool) -> list[int]:
    """Kafka's KRaftMetadataCache.getOfflineReplicas: replicas on brokers that are unregistered, fenced, without
    this listener, or whose dir holding the replica is offline; and this node's own replica when its dir has
    failed here before the metadata says so (KIP-858)."""
    image = node.metadata
    out = []
    for r in p.replicas:
        b = image.brokers.get(r)
        if (b is None or b.fenced or b.endpoint(listener) is None or not b.has_online_dir(p.directory_of(r))
                or (r == node.node_id and not here_online)):
            out.append(r)
    return out


def describe_topic(node, topic, listener: str) -> Topic:
    image = node.metadata
    parts = []
    for p in sorted(topic.partitions.values(), key=lambda p: p.partition):
        here_online = node.node_id not in p.replicas or node.partition_online(topic.name, p.partition)
        offline = offline_replicas(node, p, listener, here_online) if image.brokers else []
        leader = image.brokers.get(p.leader)
        local_leader_offline = p.leader == node.node_id and not here_online
        if p.leader < 0 or (image.brokers and (leader is None or leader.endpoint(listener) is None)) \
                or local_leader_offline:
            # No leader, or one clients cannot reach on this listener, or this broker leads from a dir that
            # failed here (the controller moves leadership once the heartbeat reports it).
            parts.append(Partition(error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=p.partition,
                                   leader_id=-1, leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
                                   isr_nodes=list(p.isr), offline_replicas=offline))
        else:
            parts.append(Partition(error_code=0, partition_index=p.partition, leader_id=p.leader,
                                   leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
                                   isr_nodes=list(p.isr), offline_replicas=offline))
    return Topic(error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=topic.name in INTERNAL_TOPICS,
                 partitions=parts)


@api(MetadataRequest)
async def handle(node, request, body: MetadataRequest) -> MetadataResponse:
    v = request.api_version
    image = node.metadata
    listener = request.ctx.listener_name
    wanted = body.topics
    authz = getattr(node, "authorizer", None)
    if wanted is None or (v == 0 and not wanted):
        topics = [describe_topic(node, t, listener) for t in sorted(image.topics(), key=lambda t: t.name)
                  if authz is None or allowed(node, request, DESCRIBE, TOPIC, t.name)]
    elif v < 12 and any(req.name is None or req.topic_id != ZERO_UUID for req in wanted):
        return MetadataResponse(topics=[Topic(error_code=ErrorCode.INVALID_REQUEST, name=req.name or "",
                                              topic_id=req.topic_id) for req in wanted])
    elif any(req.topic_id != ZERO_UUID for req in wanted):
        found = {i: image.topic_by_id(i) for i in dict.fromkeys(r.topic_id for r in wanted if r.topic_id != ZERO_UUID)}
        topics = [Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=i)
                  for i, t in found.items() if t is None]
        topics += [describe_topic(node, t, listener) if authz is None or allowed(node, request, DESCRIBE, TOPIC, t.name)
                   else Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=t.topic_id)
                   for t in found.values() if t is not None]
    else:
        topics = []
        collisions: dict[str, str] | None = None  # built on first use: most requests never auto-create
        auto_create = node.config_auto_create_topics and (body.allow_auto_topic_creation or v < 4)
        named: set[str | None] = set()
        for req in wanted:
            if req.name in named:
                continue
            named.add(req.name)
            if req.name is None:
                topics.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=req.topic_id))
                continue
            problem = topic_name_problem(req.name)
            if problem:
                topics.append(Topic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=req.name))
                continue
            if authz is not None and not allowed(node, request, DESCRIBE, TOPIC, req.name):
                topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=req.name))
                continue
            topic = image.topic(req.name)
            if topic is None and auto_create and authz is not None and req.name != CLUSTER_METADATA_TOPIC \
                    and not may_create_topic(node, request, req.name):
                topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=req.name))
                continue
            if topic is None and auto_create and req.name != CLUSTER_METADATA_TOPIC:
                # The same name rules as CreateTopics: auto-creation must not make what CreateTopics refuses.
                if collisions is None:
                    collisions = collision_index(image.by_name)
                collision = collision_problem(req.name, collisions)
                if collision:
                    topics.append(Topic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=req.name))
                    continue
                topic = await node.auto_create_topic(req.name)
                if topic is not None and ("." in req.name or "_" in req.name):
                    collisions[req.name.replace(".", "_")] = req.name
                if topic is not None:
                    # Kafka answers the creating request with LEADER_NOT_AVAILABLE; clients retry.  Answering
                    # the finished topic right away saves every producer a metadata round trip.
                    topics.append(describe_topic(node, topic, listener))
                    continue
            if topic is None:
                topics.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=req.name))
            else:
                topics.append(describe_topic(node, topic, listener))
    brokers = [Broker(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
               for n in node.cluster_nodes(request.ctx.listener_name, controllers=False)]
    response = MetadataResponse(brokers=brokers, cluster_id=node.cluster_id, controller_id=node.node_id,
                                topics=topics)
    if v >= 8 and body.include_topic_authorized_operations:
        for t in topics:
            if t.name is not None and t.error_code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                t.topic_authorized_operations = authorized_operations(node, request, TOPIC, t.name)
    if 8 <= v <= 10 and body.include_cluster_authorized_operations:
        response.cluster_authorized_operations = authorized_operations(node, request, CLUSTER, CLUSTER_NAME)
    return response
