"""Share groups under the ACL authorizer (Kafka's StandardAuthorizer) on a real `kjbod serve` over SASL PLAIN, with
hand-made requests: ShareGroupHeartbeat needs READ on the group, then DESCRIBE on every subscribed topic;
ShareGroupDescribe needs DESCRIBE on the group; the offsets APIs need DESCRIBE (describe), READ (alter) or DELETE
(delete) on the group and DESCRIBE or READ on each topic, as in Kafka."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from security.test_acls_live import USERS, acl, add_acls, create_topic, eventually
from security.test_acls_live import node as node  # noqa: F401  (the module's SASL + ACL node)

from kjbod.net.connection import ClientConnection
from kjbod.net.sasl import SaslCredentials
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    FindCoordinatorRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)
from kjbod.protocol.generated.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kjbod.protocol.generated.delete_share_group_offsets_request import DeleteShareGroupOffsetsRequestTopic
from kjbod.protocol.generated.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)

pytestmark = pytest.mark.slow


async def _as(node, user: str, calls):
    host, port = node.bootstrap.split(":")
    conn = await ClientConnection.open(host, int(port), client_id="kip932g-acl", connect_timeout=10.0,
                                       sasl=SaslCredentials("PLAIN", user, USERS[user]))
    try:
        return [await conn.request(key, version, body, 30.0) for key, version, body in calls]
    finally:
        conn.close()


def calls(node, user: str, *requests):
    return asyncio.run(_as(node, user, requests))


def test_share_group_requests_need_kafkas_acls(node):
    topic = f"st-{uuid.uuid4().hex[:6]}"
    create_topic(node, topic)
    group = f"sg-{uuid.uuid4().hex[:6]}"
    member = str(uuid.uuid4())
    join = (76, 1, ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=0,
                                              subscribed_topic_names=[topic]))
    describe = (77, 1, ShareGroupDescribeRequest(group_ids=[group]))
    offsets = (90, 1, DescribeShareGroupOffsetsRequest(groups=[DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=[DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])]))
    alter = (91, 0, AlterShareGroupOffsetsRequest(group_id=group, topics=[AlterShareGroupOffsetsRequestTopic(
        topic_name=topic, partitions=[AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)])]))
    delete = (92, 0, DeleteShareGroupOffsetsRequest(group_id=group, topics=[
        DeleteShareGroupOffsetsRequestTopic(topic_name=topic)]))

    def coordinator_ready() -> None:  # as a client would, the admin asks for the group's coordinator first
        (found,) = calls(node, "admin", (10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[group])))
        assert found.coordinators[0].error_code == 0, found

    eventually(coordinator_ready, "the group's coordinator")
    hb, desc, off, alt, dele = calls(node, "bob", join, describe, offsets, alter, delete)
    assert hb.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert desc.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert off.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert alt.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert dele.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED

    # READ on the group (which implies DESCRIBE) but nothing on the topic
    add_acls(node, acl("User:bob", "READ", group, kind="GROUP"))

    def topic_refused() -> None:
        hb, off, alt = calls(node, "bob", join, offsets, alter)
        assert hb.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, hb
        assert [(p.error_code, p.start_offset) for t in off.groups[0].topics for p in t.partitions] == [
            (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)], off
        assert [p.error_code for t in alt.responses for p in t.partitions] == [
            ErrorCode.TOPIC_AUTHORIZATION_FAILED], alt

    eventually(topic_refused, "bob's share requests with READ on the group only")
    # and DESCRIBE and READ on the topic: the member joins, the group is described
    add_acls(node, acl("User:bob", "READ", topic))

    def joined() -> None:
        hb, desc = calls(node, "bob", join, describe)
        assert (hb.error_code, hb.member_epoch) == (0, 1), hb
        assert desc.groups[0].error_code == 0 and [m.member_id for m in desc.groups[0].members] == [member]

    eventually(joined, "bob joining with READ on the group and the topic")
    # deleting offsets needs DELETE on the group
    (dele,) = calls(node, "bob", delete)
    assert dele.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
