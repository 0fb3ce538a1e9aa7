"""The broker-only node's settings from Kafka's keys: where the controller is (controller.quorum.voters wins over
controller.quorum.bootstrap.servers, as Kafka's raft client reads them) and the lifecycle's timers
(broker.heartbeat.interval.ms, broker.session.timeout.ms, log.dir.failure.timeout.ms).  The live behaviour is in
tests/cluster."""

from __future__ import annotations

import uuid

import pytest

from kjbod.broker.remote import RemoteBrokerNode
from kjbod.protocol.generated.broker_registration_request import BrokerRegistrationRequest, Listener
from kjbod.server.config import ConfigError, build_config
from kjbod.server.roles import build_node

BROKER = {"node.id": "4", "process.roles": "broker", "controller.listener.names": "CONTROLLER",
          "listeners": "PLAINTEXT://127.0.0.1:9092", "log.dirs": "/d"}


def test_the_controller_is_found_from_voters_else_bootstrap_servers():
    both = build_node(build_config({**BROKER, "controller.quorum.voters": "9@10.0.0.1:9093,8@10.0.0.2:9094",
                                    "controller.quorum.bootstrap.servers": "10.0.0.3:9095"}))
    assert isinstance(both, RemoteBrokerNode)
    assert both.controller_addresses == [("10.0.0.1", 9093), ("10.0.0.2", 9094)]
    bootstrap = build_node(build_config({**BROKER, "controller.quorum.bootstrap.servers": "10.0.0.3:9095"}))
    assert bootstrap.controller_addresses == [("10.0.0.3", 9095)]


def test_a_broker_without_a_controller_address_is_refused_with_the_keys_named():
    with pytest.raises(ConfigError, match="controller.quorum.bootstrap.servers"):
        build_node(build_config(BROKER))


def test_the_lifecycle_timers_come_from_the_brokers_keys():
    node = RemoteBrokerNode(build_config({
        **BROKER, "controller.quorum.bootstrap.servers": "10.0.0.3:9095", "broker.heartbeat.interval.ms": "250",
        "broker.session.timeout.ms": "4000", "log.dir.failure.timeout.ms": "1500",
        "initial.broker.registration.timeout.ms": "7000", "request.timeout.ms": "2500"}))
    dirs = [uuid.uuid4()]
    registration = BrokerRegistrationRequest(broker_id=4, log_dirs=dirs, rack="r1", listeners=[
        Listener(name="PLAINTEXT", host="127.0.0.1", port=9092)])
    lc = node.lifecycle_config(registration)
    assert (lc.heartbeat_interval, lc.session_timeout, lc.log_dir_failure_timeout) == (0.25, 4.0, 1.5)
    assert lc.initial_registration_timeout == 7.0
    assert node._channel("test").request_timeout == 2.5  # what every request to the controller waits at most
    assert (lc.node_id, list(lc.log_dirs), lc.rack) == (4, dirs, "r1")


def test_controlled_shutdown_enable_decides_whether_sigterm_asks_the_controller_first():
    class Lifecycle:
        def __init__(self) -> None:
            self.asked = 0

        def begin_controlled_shutdown(self) -> object:
            self.asked += 1
            return object()

    for value, asked in (("true", 1), ("false", 0)):
        node = RemoteBrokerNode(build_config({
            **BROKER, "controller.quorum.bootstrap.servers": "10.0.0.3:9095", "controlled.shutdown.enable": value}))
        node.lifecycle = Lifecycle()  # type: ignore[assignment]
        node.begin_shutdown()
        assert node.lifecycle.asked == asked, value  # type: ignore[attr-defined]
        assert node.stopping
