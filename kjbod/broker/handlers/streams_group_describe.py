"""StreamsGroupDescribe (key 89), version 0.

Version notes: v0 is KIP-1071's only version.  Each group asked for is answered on its own: its state, epochs,
topology and members with their current and target tasks.  Kafka's answers: streams.version 0 is
UNSUPPORTED_VERSION for every group; DESCRIBE on the group is needed (GROUP_AUTHORIZATION_FAILED); an id no group
has, or a group of another kind, is GROUP_ID_NOT_FOUND ("Group X not found." / "Group X is not a streams
group."); a group whose topology names a topic the caller may not describe is TOPIC_AUTHORIZATION_FAILED, without
its members and topology.  The topology is sorted as Kafka sorts it, with the internal topics' partition counts
once it is configured.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed, authorized_operations
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.router import api
from kjbod.broker.streams.groups import StreamsGroup, Tasks
from kjbod.broker.streams.topology import TopicInfo as Info
from kjbod.metadata import features
from kjbod.metadata.acls import DESCRIBE, GROUP, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import StreamsGroupDescribeRequest, StreamsGroupDescribeResponse
from kjbod.protocol.generated.streams_group_describe_response import (
    Assignment,
    DescribedGroup,
    Endpoint,
    KeyValue,
    Member,
    Subtopology,
    TaskIds,
    TopicInfo,
    Topology,
)

NOT_ASKED = -(2**31)


def _assignment(tasks: Tasks) -> Assignment:
    def one(kind: dict[str, set[int]]) -> list[TaskIds]:
        return [TaskIds(subtopology_id=s, partitions=sorted(ps)) for s, ps in sorted(kind.items()) if ps]

    return Assignment(active_tasks=one(tasks.active), standby_tasks=one(tasks.standby),
                      warmup_tasks=one(tasks.warmup))


def described_topology(g: StreamsGroup) -> Topology | None:
    """The group's topology as Kafka describes it: once configured against the image, the internal topics with the
    partition counts decided for them, else as the members sent it; sub-topologies by id, each list by name."""
    if g.topology is None:
        return None
    configured = g.configured.internal if g.configured is not None and g.configured.ready else {}

    def info(t: Info) -> TopicInfo:
        n = configured[t.name].partitions if t.name in configured else t.partitions
        return TopicInfo(name=t.name, partitions=n, replication_factor=t.replication_factor,
                         topic_configs=[KeyValue(key=k, value=v) for k, v in t.configs])

    def infos(topics: tuple[Info, ...]) -> list[TopicInfo]:
        return [info(t) for t in sorted(topics, key=lambda t: t.name)]

    return Topology(epoch=g.topology.epoch, subtopologies=[
        Subtopology(subtopology_id=s.subtopology_id, source_topics=sorted(s.source_topics),
                    repartition_sink_topics=sorted(s.repartition_sink_topics),
                    state_changelog_topics=infos(s.state_changelog_topics),
                    repartition_source_topics=infos(s.repartition_source_topics))
        for s in sorted(g.topology.subtopologies, key=lambda s: s.subtopology_id)])


@api(StreamsGroupDescribeRequest)
def handle(node, request, body: StreamsGroupDescribeRequest) -> StreamsGroupDescribeResponse:
    if not features.streams_groups_enabled(node.metadata):
        return StreamsGroupDescribeResponse(groups=[
            DescribedGroup(error_code=ErrorCode.UNSUPPORTED_VERSION, group_id=gid) for gid in body.group_ids])
    coordinator = coordinator_of(node)
    out = []
    for gid in body.group_ids:
        if not allowed(node, request, DESCRIBE, GROUP, gid):
            out.append(DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid))
            continue
        if (code := coordinator.status(gid)):
            out.append(DescribedGroup(error_code=code, group_id=gid))
            continue
        g = coordinator.streams_groups.get(gid)
        if g is None:
            message = f"Group {gid} is not a streams group." if coordinator.other_kind_than_streams(gid) \
                else f"Group {gid} not found."
            out.append(DescribedGroup(error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=gid, error_message=message))
            continue
        if g.topology is not None and not all(allowed(node, request, DESCRIBE, TOPIC, t)
                                              for t in g.topology.required_topics()):
            out.append(DescribedGroup(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, group_id=gid,
                error_message="The described group uses topics that the client is not authorized to describe."))
            continue
        members = [Member(
            member_id=m.member_id, member_epoch=m.member_epoch, instance_id=None, rack_id=m.rack_id,
            client_id=m.client_id, client_host=m.client_host, topology_epoch=m.topology_epoch,
            process_id=m.process_id,
            user_endpoint=None if m.user_endpoint is None else Endpoint(host=m.user_endpoint[0],
                                                                        port=m.user_endpoint[1]),
            client_tags=[KeyValue(key=k, value=v) for k, v in m.client_tags], task_offsets=[], task_end_offsets=[],
            assignment=_assignment(m.assigned), target_assignment=_assignment(g.targets.get(m.member_id, Tasks())),
            is_classic=False) for m in sorted(g.members.values(), key=lambda m: m.member_id)]
        ops = authorized_operations(node, request, GROUP, gid) if body.include_authorized_operations else NOT_ASKED
        out.append(DescribedGroup(group_id=gid, group_state=g.state().value, group_epoch=g.group_epoch,
                                  assignment_epoch=g.assignment_epoch, topology=described_topology(g), members=members,
                                  authorized_operations=ops))
    return StreamsGroupDescribeResponse(groups=out)
