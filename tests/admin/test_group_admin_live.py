"""The admin client's group calls against a real `kjbod serve`, on groups made by real kafka-python consumers.

Strategy: one single-node server for the module (offsets.topic.replication.factor=1); each test makes its own
topic and groups: an active one (a member that stays, so the group is Stable) and a stopped one (a member that
committed offsets and left, so the group is Empty with a lag).  Each call is checked against what the consumers
did and against Kafka's per-group codes (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID for an offset
change while members are in the group).
"""

from __future__ import annotations

import time

import pytest
from group_clients import GROUP_OVERRIDES, active_consumer, make_topic, stopped_group, unique
from live import start_server

from kjbod.admin import ErrorCode, OffsetSpec, SyncAdminClient

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("group-admin"), log_dir_count=1, overrides=GROUP_OVERRIDES)
    yield s
    s.stop()


@pytest.fixture
def admin(server):
    with SyncAdminClient(server.bootstrap, request_timeout=30.0) as a:
        yield a


def test_list_describe_and_fetch_offsets_of_an_active_and_a_stopped_group(server, admin):
    topic = make_topic(server.bootstrap, 3, 30)
    stopped = stopped_group(server.bootstrap, topic, {0: 4, 1: 10, 2: 0})
    active = unique("g")
    c = active_consumer(server.bootstrap, topic, active, 3)
    try:
        listed = {g.group_id: g for g in admin.list_groups()}
        assert listed[stopped].state == "Empty" and listed[stopped].protocol_type == "consumer"
        assert listed[active].state == "Stable" and listed[active].type == "classic"
        assert [g.group_id for g in admin.list_groups(states=["stable"]) if g.group_id in (stopped, active)] \
            == [active]
        assert [g.group_id for g in admin.list_groups(states=["Empty"]) if g.group_id in (stopped, active)] \
            == [stopped]

        missing = unique("nobody")
        described = admin.describe_groups([active, stopped, missing])
        a = described[active]
        assert a.error is None and a.state == "Stable" and a.protocol_type == "consumer"
        assert a.protocol == "range" and a.coordinator is not None and a.coordinator.node_id == 1
        (member,) = a.members
        assert member.client_id == "active-client" and member.host
        assert sorted(member.assignment or ()) == [(topic, 0), (topic, 1), (topic, 2)]
        assert described[stopped].state == "Empty" and described[stopped].members == ()
        # A group nobody ever used: Dead with no members, as Kafka's classic coordinator describes it.
        assert described[missing].state == "Dead" and described[missing].error is None

        offsets = admin.list_group_offsets(stopped)[stopped]
        assert offsets.error is None
        assert {tp: o.offset for tp, o in offsets.offsets.items()} == {(topic, 0): 4, (topic, 1): 10, (topic, 2): 0}
        only = admin.list_group_offsets([stopped], partitions=[(topic, 1)])[stopped]
        assert {tp: o.offset for tp, o in only.offsets.items()} == {(topic, 1): 10}
        assert admin.list_group_offsets(missing)[missing].offsets == {}
    finally:
        c.close()


def test_alter_group_offsets_is_refused_while_the_group_has_members(server, admin):
    topic = make_topic(server.bootstrap, 2, 10)
    stopped = stopped_group(server.bootstrap, topic, {0: 1, 1: 1})
    active = unique("g")
    c = active_consumer(server.bootstrap, topic, active, 2)
    try:
        refused = admin.alter_group_offsets(active, {(topic, 0): 3})
        assert refused.error is not None and refused.error.code == ErrorCode.UNKNOWN_MEMBER_ID
        assert refused.partitions[(topic, 0)].code == ErrorCode.UNKNOWN_MEMBER_ID
    finally:
        c.close()
    done = admin.alter_group_offsets(stopped, {(topic, 0): 5, (topic, 1): 2})
    assert done.error is None and done.partitions == {(topic, 0): None, (topic, 1): None}
    after = admin.list_group_offsets(stopped)[stopped].offsets
    assert {tp: o.offset for tp, o in after.items()} == {(topic, 0): 5, (topic, 1): 2}


def test_delete_group_offsets_and_delete_groups(server, admin):
    topic = make_topic(server.bootstrap, 2, 10)
    stopped = stopped_group(server.bootstrap, topic, {0: 2, 1: 3})
    result = admin.delete_group_offsets(stopped, [(topic, 0)])
    assert result.error is None and result.partitions == {(topic, 0): None}
    left = admin.list_group_offsets(stopped)[stopped].offsets
    assert {tp: o.offset for tp, o in left.items()} == {(topic, 1): 3}

    missing = unique("nobody")
    unknown = admin.delete_group_offsets(missing, [(topic, 0)])
    assert unknown.error is not None and unknown.error.code == ErrorCode.GROUP_ID_NOT_FOUND

    active = unique("g")
    c = active_consumer(server.bootstrap, topic, active, 2)
    try:
        # An active consumer group keeps the offsets of the topics it consumes.
        subscribed = admin.delete_group_offsets(active, [(topic, 0)])
        assert subscribed.partitions[(topic, 0)].code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        deleted = admin.delete_groups([stopped, active, missing])
        assert deleted[stopped].error is None
        assert deleted[active].error.code == ErrorCode.NON_EMPTY_GROUP
        assert deleted[missing].error.code == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        c.close()
    assert stopped not in {g.group_id for g in admin.list_groups()}
    assert admin.list_group_offsets(stopped)[stopped].offsets == {}


def test_list_offsets_earliest_latest_and_by_time(server, admin):
    before = int(time.time() * 1000) - 1
    topic = make_topic(server.bootstrap, 2, 10)
    after = int(time.time() * 1000) + 60_000
    got = admin.list_offsets({(topic, 0): OffsetSpec.EARLIEST, (topic, 1): OffsetSpec.LATEST})
    assert got[(topic, 0)].offset == 0 and got[(topic, 1)].offset == 5
    by_time = admin.list_offsets({(topic, 0): before, (topic, 1): after})
    assert by_time[(topic, 0)].offset == 0
    assert by_time[(topic, 1)].offset is None and by_time[(topic, 1)].error is None  # no record that late
    unknown = admin.list_offsets({(topic, 7): OffsetSpec.LATEST}, raise_on_error=False, timeout=3.0)
    assert unknown[(topic, 7)].error is not None
    assert unknown[(topic, 7)].error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
