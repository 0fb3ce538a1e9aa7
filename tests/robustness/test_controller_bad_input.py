"""The controller's managers in process (as tests/controller/test_managers.py drives them) with brokers that
are down or do not exist.  Placement: Kafka's StripedReplicaPlacer counts every registered broker but those
shutting down now, fenced ones too (placed after the unfenced, never as leaders), and its heartbeat manager drops
a broker's controlled shutdown when it fences it.  Configs: a broker resource must name a registered broker, a
new topic's configs need values."""

from __future__ import annotations

from kjbod.controller import cluster_control, configs, replication_control
from kjbod.metadata import BROKER_RESOURCE
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import CreateTopicsRequest
from kjbod.protocol.generated.create_topics_request import CreatableTopic
from tests.controller.test_managers import Ctx, Policy


def three_brokers_one_shut_down() -> Ctx:
    """Broker 3 led partitions, shut down in a controlled way, then fenced."""
    ctx = Ctx()
    for b in (1, 2, 3):
        ctx.live_broker(b)
    ctx.create("led", 3, rf=2)
    assert not ctx.heartbeat(3, want_shut_down=True, offset=0).should_shut_down  # leadership moves first
    assert ctx.image.broker(3).in_controlled_shutdown
    for b in (1, 2):
        ctx.heartbeat(b)
    assert ctx.heartbeat(3, want_shut_down=True).should_shut_down
    assert ctx.image.broker(3).fenced
    return ctx


def test_a_broker_fenced_after_a_controlled_shutdown_still_takes_replicas():
    """`kjbod cluster down --node broker-3`, then a topic with replication factor 3: created, broker 3 a replica
    outside the ISR that catches up when it is back.  It was once refused as if only two brokers were registered
    (the registration keeps its controlled-shutdown flag after the fencing)."""
    ctx = three_brokers_one_shut_down()
    created = ctx.create("t", 4, rf=3)
    assert (created.error_code, created.error_message) == (0, None)
    for p in ctx.image.topic("t").partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and p.replicas[0] != 3
        assert sorted(p.isr) == [1, 2] and p.leader in (1, 2)


def test_a_broker_still_shutting_down_takes_no_replicas():
    """While its controlled shutdown runs (it still leads something), a broker is not usable: RF 3 on the other
    two is refused with Kafka's message."""
    ctx = Ctx()
    for b in (1, 2, 3):
        ctx.live_broker(b)
    ctx.create("led", 3, rf=2)
    assert not ctx.heartbeat(3, want_shut_down=True, offset=0).should_shut_down
    assert ctx.image.broker(3).in_controlled_shutdown and not ctx.image.broker(3).fenced
    refused = ctx.create("t", 1, rf=3)
    assert (refused.error_code, refused.error_message) == (E.INVALID_REPLICATION_FACTOR, (
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached "
        "because only 2 broker(s) are registered."))
    assert ctx.create("t", 1, rf=2).error_code == 0


def test_configs_of_a_broker_that_is_not_registered_are_refused():
    """The controller's existence check (Kafka's ConfigResourceExistenceChecker): a broker resource naming no
    registered broker is BROKER_ID_NOT_REGISTERED and writes nothing (a client on the controller listener, or a
    combined node, once recorded configs for broker 99); the cluster default and registered brokers are fine."""
    ctx = Ctx()
    for b in (1, 2):
        ctx.live_broker(b)
    result = configs.alter_configs(ctx.image, [(BROKER_RESOURCE, "99", [("k", 0, "v")]),
                                               (BROKER_RESOURCE, "2", [("k", 0, "v")]),
                                               (BROKER_RESOURCE, "", [("k", 0, "w")])],
                                   Policy(), replace=False, validate_only=False)
    assert result.response == [(E.BROKER_ID_NOT_REGISTERED, "No node with id 99 found."), (0, None), (0, None)]
    assert sorted(r.resource_name for r in result.records) == ["", "2"]


def test_a_topic_config_without_a_value_is_refused_naming_it():
    """CreateTopics with a config whose value is null (Kafka's ReplicationControlManager.computeConfigChanges):
    INVALID_CONFIG naming the keys, nothing created; it was once dropped silently and the topic created."""
    ctx = Ctx()
    ctx.live_broker(1)
    refused = ctx.create("t", 1, configs={"retention.ms": None, "unclean.leader.election.enable": None})
    assert (refused.error_code, refused.error_message) == (
        E.INVALID_CONFIG, "Null value not supported for topic configs: retention.ms,unclean.leader.election.enable")
    assert ctx.image.topic("t") is None
    assert ctx.create("t", 1, configs={"retention.ms": "1000"}).error_code == 0


def test_unregistering_a_broker_that_is_not_registered_names_it():
    """UnregisterBroker of an id nobody registered: BROKER_ID_NOT_REGISTERED, as Kafka, with a message naming the
    id (Kafka's has none) and no record."""
    ctx = Ctx()
    ctx.live_broker(1)
    result = cluster_control.unregister_broker(ctx.image, 99)
    assert (result.response.error_code, result.response.error_message) == (
        E.BROKER_ID_NOT_REGISTERED, "broker 99 is not registered")
    assert result.records == []


def test_a_create_topics_that_would_write_more_than_ten_thousand_records_fails_whole():
    """Kafka's controller refuses an operation of more than 10,000 records (MAX_RECORDS_PER_USER_OP): every topic
    of the request POLICY_VIOLATION, nothing created.  kjbod once wrote any number (up to 100,000 partitions a
    topic) in one batch, every broker then creating the partitions at once."""
    ctx = Ctx()
    ctx.live_broker(1)
    body = CreateTopicsRequest(timeout_ms=1000, topics=[
        CreatableTopic(name="small", num_partitions=1, replication_factor=1),
        CreatableTopic(name="huge", num_partitions=10_000, replication_factor=1)])
    result = replication_control.create_topics(ctx.image, body, ctx.settings, Policy())
    assert result.records == []
    assert [(t.name, t.error_code, t.error_message) for t in result.response.topics] == [
        (name, E.POLICY_VIOLATION, "Unable to perform excessively large batch operation.") for name in ("small", "huge")]
    assert ctx.create("most", 9_998).error_code == 0  # its topic record and 9,998 partitions: allowed
    assert len(ctx.image.topic("most").partitions) == 9_998
