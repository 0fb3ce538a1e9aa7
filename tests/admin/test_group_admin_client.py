"""The group calls' coordinator handling against fake brokers (real framing and codecs), for the answers a live
server gives only by chance: NOT_COORDINATOR (find the coordinator again and go there), COORDINATOR_LOAD_IN_PROGRESS
(ask the same one again), a coordinator that never becomes ready (the group keeps that error at the deadline), and
FindCoordinator below v4 (one key per request)."""

from __future__ import annotations

from typing import Any

from kjbod.admin import AdminClient, ErrorCode
from kjbod.admin.consumer_protocol import encode_assignment
from kjbod.protocol.generated import DescribeGroupsResponse, FindCoordinatorResponse
from kjbod.protocol.generated.describe_groups_response import DescribedGroup, DescribedGroupMember
from kjbod.protocol.generated.find_coordinator_response import Coordinator

FIND_COORDINATOR = 10
DESCRIBE_GROUPS = 15


def received(broker: Any, api_key: int) -> list[Any]:
    return [r for r in broker.received if r.api_key == api_key]


def serve_groups(cluster: Any, find_versions: tuple[int, int] = (0, 4)) -> None:
    for b in cluster.brokers.values():
        b.api_versions[FIND_COORDINATOR] = find_versions
        b.api_versions[DESCRIBE_GROUPS] = (0, 5)


def coordinator_is(cluster: Any, node_id: int):
    port = cluster.brokers[node_id].port

    def answer(m: Any, v: int) -> FindCoordinatorResponse:
        if v >= 4:
            return FindCoordinatorResponse(coordinators=[
                Coordinator(key=k, node_id=node_id, host="127.0.0.1", port=port) for k in m.coordinator_keys])
        return FindCoordinatorResponse(node_id=node_id, host="127.0.0.1", port=port)
    return answer


def described(code: int = 0):
    def answer(m: Any, v: int) -> DescribeGroupsResponse:
        if code:
            return DescribeGroupsResponse(groups=[DescribedGroup(error_code=code, group_id=g) for g in m.groups])
        return DescribeGroupsResponse(groups=[DescribedGroup(
            group_id=g, group_state="Stable", protocol_type="consumer", protocol_data="range",
            members=[DescribedGroupMember(member_id="m-1", client_id="c", client_host="/10.0.0.1",
                                          member_assignment=encode_assignment([("t", 1), ("t", 0)]))])
            for g in m.groups])
    return answer


async def test_not_coordinator_finds_the_coordinator_again_and_load_in_progress_asks_again(cluster3):
    serve_groups(cluster3)
    for b in cluster3.brokers.values():  # whichever broker the client asks: first 2, then 1
        b.add_script(FIND_COORDINATOR, coordinator_is(cluster3, 2), coordinator_is(cluster3, 1))
    cluster3.brokers[2].add_script(DESCRIBE_GROUPS, described(ErrorCode.NOT_COORDINATOR))
    cluster3.brokers[1].add_script(DESCRIBE_GROUPS, described(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), described())
    async with AdminClient(cluster3.bootstrap, retry_backoff=0.01, retry_backoff_max=0.05) as admin:
        result = (await admin.describe_groups(["g"], timeout=10))["g"]
    assert result.error is None and result.state == "Stable" and result.coordinator.node_id == 1
    (member,) = result.members
    assert member.assignment == (("t", 1), ("t", 0)) and member.host == "/10.0.0.1"
    assert len(cluster3.requests(FIND_COORDINATOR)) == 2  # found again after NOT_COORDINATOR only
    assert [m.version for m in cluster3.requests(FIND_COORDINATOR)] == [4, 4]
    assert len(received(cluster3.brokers[2], DESCRIBE_GROUPS)) == 1
    assert len(received(cluster3.brokers[1], DESCRIBE_GROUPS)) == 2


async def test_a_coordinator_that_stays_loading_leaves_the_group_its_error(cluster):
    serve_groups(cluster)
    broker = cluster.brokers[1]
    broker.add_script(FIND_COORDINATOR, *[coordinator_is(cluster, 1)] * 100)
    broker.add_script(DESCRIBE_GROUPS, *[described(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)] * 1000)
    async with AdminClient(cluster.bootstrap, retry_backoff=0.01, retry_backoff_max=0.05) as admin:
        result = (await admin.describe_groups(["g", "h"], timeout=1.0))
    assert {g: r.error.code for g, r in result.items()} == {
        "g": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "h": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
    # Both groups went in one request each time, to the coordinator found once.
    assert len(cluster.requests(FIND_COORDINATOR)) == 1
    assert all(m.message.groups == ["g", "h"] for m in received(broker, DESCRIBE_GROUPS))


async def test_a_deadline_that_passes_mid_request_keeps_the_groups_last_error(cluster):
    # loading at first, then the coordinator does not answer before the call's deadline: the error the groups
    # had says more than the deadline's REQUEST_TIMED_OUT (which depended on where the deadline fell)
    serve_groups(cluster)
    broker = cluster.brokers[1]
    broker.add_script(FIND_COORDINATOR, *[coordinator_is(cluster, 1)] * 10)
    broker.add_script(DESCRIBE_GROUPS, described(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), ("delay", 3.0))
    async with AdminClient(cluster.bootstrap, retry_backoff=0.01, retry_backoff_max=0.05) as admin:
        result = await admin.describe_groups(["g", "h"], timeout=1.0)
    assert {g: r.error.code for g, r in result.items()} == {
        "g": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "h": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
    assert len(received(broker, DESCRIBE_GROUPS)) == 2


async def test_find_coordinator_below_v4_asks_one_group_per_request(cluster):
    serve_groups(cluster, find_versions=(0, 3))
    broker = cluster.brokers[1]
    broker.add_script(FIND_COORDINATOR, coordinator_is(cluster, 1), coordinator_is(cluster, 1))
    broker.add_script(DESCRIBE_GROUPS, described())
    async with AdminClient(cluster.bootstrap) as admin:
        result = await admin.describe_groups(["g", "h"], timeout=10)
    assert [r.state for r in result.values()] == ["Stable", "Stable"]
    assert sorted(m.message.key for m in cluster.requests(FIND_COORDINATOR)) == ["g", "h"]
    assert [m.message.groups for m in received(broker, DESCRIBE_GROUPS)] == [["g", "h"]]
