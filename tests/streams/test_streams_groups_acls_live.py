"""Streams groups under the ACL authorizer (Kafka's StandardAuthorizer) on a real `kjbod serve` over SASL PLAIN,
with hand-made requests (no Kafka Streams client can be installed here): StreamsGroupHeartbeat needs READ on the
group, then DESCRIBE on every topic the topology names, and the broker creates missing internal topics only for a
caller with CREATE (else the MISSING_INTERNAL_TOPICS status says so); StreamsGroupDescribe needs DESCRIBE on the
group, as in Kafka."""

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
    FindCoordinatorRequest,
    StreamsGroupDescribeRequest,
    StreamsGroupHeartbeatRequest,
)
from kjbod.protocol.generated.streams_group_heartbeat_request import Subtopology, TopicInfo, Topology

pytestmark = pytest.mark.slow
MISSING_INTERNAL_TOPICS = 3


async def _as(node, user: str, requests):
    host, port = node.bootstrap.split(":")
    conn = await ClientConnection.open(host, int(port), client_id="kip1071-acl", connect_timeout=10.0,
                                       sasl=SaslCredentials("PLAIN", user, USERS[user]))
    try:
        return [await conn.request(key, version, body, 30.0) for key, version, body in requests]
    finally:
        conn.close()


def calls(node, user: str, *requests):
    return asyncio.run(_as(node, user, requests))


def test_streams_group_requests_need_kafkas_acls(node):
    source = f"src-{uuid.uuid4().hex[:6]}"
    create_topic(node, source)
    app = f"app-{uuid.uuid4().hex[:6]}"
    changelog = f"{app}-store-changelog"
    member = str(uuid.uuid4())
    join = (88, 0, StreamsGroupHeartbeatRequest(
        group_id=app, member_id=member, member_epoch=0, rebalance_timeout_ms=30_000, process_id=member,
        topology=Topology(epoch=1, subtopologies=[Subtopology(
            subtopology_id="0", source_topics=[source],
            state_changelog_topics=[TopicInfo(name=changelog, partitions=0, replication_factor=0)])])))
    describe = (89, 0, StreamsGroupDescribeRequest(group_ids=[app]))

    def coordinator_ready() -> None:
        (found,) = calls(node, "admin", (10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[app])))
        assert found.coordinators[0].error_code == 0, found

    eventually(coordinator_ready, "the group's coordinator")
    hb, desc = calls(node, "bob", join, describe)
    assert hb.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert desc.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED

    # READ on the group, nothing on the topics
    add_acls(node, acl("User:bob", "READ", app, kind="GROUP"))

    def topic_refused() -> None:
        (hb,) = calls(node, "bob", join)
        assert hb.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, hb

    eventually(topic_refused, "bob's heartbeat with READ on the group only")
    # DESCRIBE on every topic of the topology (READ on the source, DESCRIBE on the app's prefix), no CREATE: the
    # member joins, and the status says which internal topic it may not create
    add_acls(node, acl("User:bob", "READ", source), acl("User:bob", "DESCRIBE", app, pattern="PREFIXED"))

    def joined() -> None:
        hb, desc = calls(node, "bob", join, describe)
        assert hb.error_code == 0, hb
        detail = {s.status_code: s.status_detail for s in hb.status}[MISSING_INTERNAL_TOPICS]
        assert detail == (f"Internal topics are missing: {changelog}; Unauthorized to CREATE on topics "
                          f"{changelog}."), detail
        assert desc.groups[0].error_code == 0 and [m.member_id for m in desc.groups[0].members] == [member]

    eventually(joined, "bob joining with READ on the group and DESCRIBE on the topics")
