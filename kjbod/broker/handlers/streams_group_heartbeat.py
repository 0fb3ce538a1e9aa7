"""StreamsGroupHeartbeat (key 88), version 0.

Version notes: v0 is KIP-1071's only version (Kafka 4.1 and later).  A member joins with epoch 0 and its topology,
heartbeats with the epoch it was given and the tasks it owns (null when unchanged), and leaves with -1; the
answer carries its epoch, the heartbeat interval, its tasks when they changed, the group's statuses and, when the
member's endpoint epoch is behind, every member's endpoint with the partitions of its tasks.

The group logic is kjbod.broker.streams.groups's.  Kafka's broker-side checks, in its order: streams.version 0
answers UNSUPPORTED_VERSION; READ on the group is needed (GROUP_AUTHORIZATION_FAILED); a topology naming one of
Kafka's internal topics, or an invalid topic name, is STREAMS_INVALID_TOPOLOGY; DESCRIBE on every topic the
topology names is needed (TOPIC_AUTHORIZATION_FAILED); the request's own checks (INVALID_REQUEST and the like,
kjbod.broker.streams.groups.validate) come before NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS.  After the
coordinator has answered, the broker creates the internal (repartition and changelog) topics the group still
misses, when the caller may create them (CREATE on the cluster or on each topic); otherwise the
MISSING_INTERNAL_TOPICS status says which it may not create.
Creation runs in the background: the next heartbeats see the topics appear and the status go.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from kjbod.broker.authz import allowed, may_create_topic
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.handlers.metadata import INTERNAL_TOPICS
from kjbod.broker.router import api
from kjbod.broker.streams.groups import Refused, StreamsHeartbeat, Tasks, validate
from kjbod.broker.streams.topology import MISSING_INTERNAL_TOPICS, Subtopology, TopicInfo, Topology
from kjbod.metadata import features
from kjbod.metadata.acls import DESCRIBE, GROUP, READ, TOPIC
from kjbod.metadata.names import topic_name_problem
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    CreateTopicsRequest,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
)
from kjbod.protocol.generated.create_topics_request import CreatableTopic, CreatableTopicConfig
from kjbod.protocol.generated.streams_group_heartbeat_response import (
    Endpoint,
    EndpointToPartitions,
    Status,
    TaskIds,
    TopicPartition,
)

log = structlog.get_logger(__name__)


@api(StreamsGroupHeartbeatRequest)
async def handle(node, request, body: StreamsGroupHeartbeatRequest) -> StreamsGroupHeartbeatResponse:
    if not features.streams_groups_enabled(node.metadata):
        return StreamsGroupHeartbeatResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=(
            "Streams groups are off: the cluster's streams.version is 0 (kjbod features upgrade --feature "
            "streams.version=1 turns them on)"))
    if not allowed(node, request, READ, GROUP, body.group_id):
        return StreamsGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    topology = None if body.topology is None else _topology(body.topology)
    if topology is not None:
        required = topology.required_topics()
        prohibited = [t for t in required if t in INTERNAL_TOPICS]
        if prohibited:
            return StreamsGroupHeartbeatResponse(
                error_code=ErrorCode.STREAMS_INVALID_TOPOLOGY,
                error_message=f"Use of Kafka internal topics {','.join(prohibited)} in a Kafka Streams topology is "
                              "prohibited.")
        invalid = [t for t in required if topic_name_problem(t) is not None]
        if invalid:
            return StreamsGroupHeartbeatResponse(
                error_code=ErrorCode.STREAMS_INVALID_TOPOLOGY,
                error_message=f"Topic names {','.join(invalid)} are not valid topic names.")
        if not all(allowed(node, request, DESCRIBE, TOPIC, t) for t in required):
            return StreamsGroupHeartbeatResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ctx = getattr(request, "ctx", None)
    heartbeat = StreamsHeartbeat(
        group_id=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch,
        endpoint_information_epoch=body.endpoint_information_epoch, instance_id=body.instance_id,
        rack_id=body.rack_id, rebalance_timeout_ms=body.rebalance_timeout_ms, topology=topology,
        active_tasks=_tasks(body.active_tasks), standby_tasks=_tasks(body.standby_tasks),
        warmup_tasks=_tasks(body.warmup_tasks), process_id=body.process_id,
        user_endpoint=None if body.user_endpoint is None else (body.user_endpoint.host, body.user_endpoint.port),
        client_tags=None if body.client_tags is None else tuple((kv.key, kv.value) for kv in body.client_tags),
        task_offsets_given=body.task_offsets is not None, task_end_offsets_given=body.task_end_offsets is not None,
        shutdown_application=body.shutdown_application, client_id=request.client_id or "",
        client_host="/" + ctx.peer_host if ctx is not None else "")
    try:  # the request's own checks come before the coordinator's, as Kafka's group coordinator service runs them
        validate(heartbeat)
    except Refused as e:
        return StreamsGroupHeartbeatResponse(error_code=e.code, error_message=e.message)
    coordinator = coordinator_of(node)
    if (code := coordinator.status(body.group_id)):
        return StreamsGroupHeartbeatResponse(error_code=code)
    result = await coordinator.streams_heartbeat(heartbeat)
    if result.error_code:
        return StreamsGroupHeartbeatResponse(error_code=result.error_code, error_message=result.error_message)
    status = [Status(status_code=code, status_detail=detail) for code, detail in result.status]
    if result.to_create:
        refused = [n for n in sorted(result.to_create) if not may_create_topic(node, request, n)]
        if refused:
            note = "Unauthorized to CREATE on topics " + ", ".join(refused) + "."
            missing = next((s for s in status if s.status_code == MISSING_INTERNAL_TOPICS), None)
            if missing is not None:
                missing.status_detail += "; " + note
            else:
                status.append(Status(status_code=MISSING_INTERNAL_TOPICS, status_detail=note))
        else:
            _create_in_background(node, list(result.to_create.values()))
    response = StreamsGroupHeartbeatResponse(
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms, status=status,
        endpoint_information_epoch=result.endpoint_information_epoch)
    if result.tasks is not None:
        response.active_tasks, response.standby_tasks, response.warmup_tasks = _task_ids(result.tasks)
    if result.partitions_by_endpoint is not None:
        response.partitions_by_user_endpoint = [
            EndpointToPartitions(user_endpoint=Endpoint(host=host, port=port),
                                 active_partitions=[TopicPartition(topic=t, partitions=ps) for t, ps in act.items()],
                                 standby_partitions=[TopicPartition(topic=t, partitions=ps) for t, ps in sb.items()])
            for (host, port), act, sb in result.partitions_by_endpoint]
    return response


def _topology(t: Any) -> Topology:
    def info(x: Any) -> TopicInfo:
        return TopicInfo(x.name, x.partitions, x.replication_factor,
                         tuple((kv.key, kv.value) for kv in x.topic_configs))

    return Topology(t.epoch, tuple(
        Subtopology(s.subtopology_id, tuple(s.source_topics), tuple(s.repartition_sink_topics),
                    tuple(info(x) for x in s.state_changelog_topics),
                    tuple(info(x) for x in s.repartition_source_topics),
                    tuple((tuple(g.source_topics), tuple(g.repartition_source_topics)) for g in s.copartition_groups),
                    tuple(s.source_topic_regex))
        for s in t.subtopologies))


def _tasks(ids: list[Any] | None) -> dict[str, set[int]] | None:
    if ids is None:
        return None
    out: dict[str, set[int]] = {}
    for t in ids:
        out.setdefault(t.subtopology_id, set()).update(t.partitions)
    return out


def _task_ids(tasks: Tasks) -> tuple[list[TaskIds], list[TaskIds], list[TaskIds]]:
    def one(kind: dict[str, set[int]]) -> list[TaskIds]:
        return [TaskIds(subtopology_id=s, partitions=sorted(ps)) for s, ps in sorted(kind.items()) if ps]

    return one(tasks.active), one(tasks.standby), one(tasks.warmup)


_creating: set[str] = set()  # internal topics a background creation is under way for (one request per topic)


def _create_in_background(node: Any, topics: list[TopicInfo]) -> None:
    wanted = [t for t in topics if t.name not in _creating]
    if not wanted:
        return
    _creating.update(t.name for t in wanted)

    async def create() -> None:
        try:
            resp = await node.controller_request(CreateTopicsRequest(timeout_ms=0, topics=[
                CreatableTopic(name=t.name, num_partitions=t.partitions,
                               replication_factor=t.replication_factor or -1,
                               configs=[CreatableTopicConfig(name=k, value=v) for k, v in t.configs])
                for t in wanted]), 7)
            for r in resp.topics:
                if r.error_code and r.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    log.warning("streams_internal_topic_not_created", topic=r.name, error=r.error_message)
        except Exception as e:  # noqa: BLE001  (a failed creation is retried by a later heartbeat)
            log.warning("streams_internal_topic_not_created", error=f"{type(e).__name__}: {e}")
        finally:
            _creating.difference_update(t.name for t in wanted)

    task = asyncio.get_running_loop().create_task(create())
    _background.add(task)
    task.add_done_callback(_background.discard)


_background: set[asyncio.Task[None]] = set()
