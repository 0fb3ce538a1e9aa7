"""The connection limits' logic in process (kjbod.server.quotas), the keys' checks in server.properties and at
runtime (AlterConfigs), and the delayed answer to a failed SASL authentication (kjbod.server.sasl_gate).

What only real processes show (a refused connection, a listener that stops accepting, a dynamic change, the idle
close, the delayed answer on the wire) is in tests/test_connection_limits_live.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from kjbod.broker import broker_config as bc
from kjbod.net.sasl import SaslSettings
from kjbod.server.config import ConfigError, build_config
from kjbod.server.handler import RequestContext
from kjbod.server.quotas import INT_MAX, ConnectionLimits, ConnectionQuotas, RateWindow
from kjbod.server.sasl_gate import SaslGate

BASE = {"node.id": "1", "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER", "log.dirs": "/tmp/kjbod-quotas-test"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Conn:
    """What the quotas look at on a connection."""

    connection_id: int
    listener_name: str
    last_active: float
    closing: bool = False

    def abort(self) -> None:
        self.closing = True


def quotas(limits: ConnectionLimits, listeners=("PLAINTEXT",), inter_broker=None, clock=None) -> ConnectionQuotas:
    return ConnectionQuotas(limits, list(listeners), inter_broker, clock=clock or Clock())


# -- per IP --------------------------------------------------------------------------------------------------------


def test_a_connection_over_its_ips_limit_is_refused_and_not_counted():
    q = quotas(ConnectionLimits(max_connections_per_ip=2))
    assert q.open("PLAINTEXT", "10.0.0.1") is None
    assert q.open("PLAINTEXT", "10.0.0.1") is None
    assert q.open("PLAINTEXT", "10.0.0.1") == 2  # refused: the limit it exceeds
    assert q.open("PLAINTEXT", "10.0.0.2") is None  # another IP has its own count
    assert (q.total, q.per_ip, q.refused["PLAINTEXT"]) == (3, {"10.0.0.1": 2, "10.0.0.2": 1}, 1)
    q.close("PLAINTEXT", "10.0.0.1")
    assert q.open("PLAINTEXT", "10.0.0.1") is None  # room again once one closed


def test_an_override_sets_one_ips_limit_and_ipv4_mapped_addresses_count_as_ipv4():
    q = quotas(ConnectionLimits(max_connections_per_ip=1, per_ip_overrides={"127.0.0.1": 3}))
    assert [q.open("PLAINTEXT", "127.0.0.1") for _ in range(3)] == [None, None, None]
    assert q.open("PLAINTEXT", "::ffff:127.0.0.1") == 3
    assert q.open("PLAINTEXT", "127.0.0.2") is None
    assert q.open("PLAINTEXT", "127.0.0.2") == 1


def test_limits_are_built_from_the_config_with_dynamic_values_over_static_ones():
    config = build_config({**BASE, "max.connections": "100", "max.connections.per.ip": "7",
                           "max.connections.per.ip.overrides": "127.0.0.1:50,[::1]:9",
                           "listener.name.plaintext.max.connections": "30",
                           "listener.name.PLAINTEXT.max.connection.creation.rate": "5"})
    static = ConnectionLimits.build(config, {})
    assert static == ConnectionLimits(max_connections=100, max_connections_per_ip=7,
                                      per_ip_overrides={"127.0.0.1": 50, "::1": 9},
                                      listener_max_connections={"PLAINTEXT": 30},
                                      listener_max_connection_creation_rate={"PLAINTEXT": 5})
    dynamic = ConnectionLimits.build(config, {"max.connections.per.ip": "3",
                                              "max.connections.per.ip.overrides": "127.0.0.2:4",
                                              "listener.name.PLAINTEXT.max.connections": "10",
                                              "max.connection.creation.rate": "20"})
    assert (dynamic.max_connections, dynamic.max_connections_per_ip, dict(dynamic.per_ip_overrides),
            dict(dynamic.listener_max_connections), dynamic.max_connection_creation_rate) == (
        100, 3, {"127.0.0.2": 4}, {"PLAINTEXT": 10}, 20)
    defaults = ConnectionLimits.build(build_config(BASE), {})
    assert defaults == ConnectionLimits()
    assert defaults.max_connections == defaults.max_connections_per_ip == INT_MAX


# -- listener and broker limits --------------------------------------------------------------------------------------


def test_a_listener_at_its_limit_has_no_slot_until_one_closes():
    q = quotas(ConnectionLimits(listener_max_connections={"PLAINTEXT": 2}), listeners=("PLAINTEXT", "OTHER"))
    q.open("PLAINTEXT", "10.0.0.1")
    assert q.slot_available("PLAINTEXT")
    q.open("PLAINTEXT", "10.0.0.2")
    assert not q.slot_available("PLAINTEXT") and q.slot_available("OTHER")
    q.close("PLAINTEXT", "10.0.0.1")
    assert q.slot_available("PLAINTEXT")


def test_the_broker_limit_holds_every_listener_but_the_inter_broker_one():
    q = quotas(ConnectionLimits(max_connections=2), listeners=("CLIENT", "INTERNAL"), inter_broker="INTERNAL")
    q.open("CLIENT", "10.0.0.1")
    q.open("CLIENT", "10.0.0.2")
    assert not q.slot_available("CLIENT")
    assert q.slot_available("INTERNAL")  # protected: a broker can always reach its peers
    # with one listener only, nothing is protected (Kafka: there would be no other listener to take room from)
    single = quotas(ConnectionLimits(max_connections=1), listeners=("INTERNAL",), inter_broker="INTERNAL")
    single.open("INTERNAL", "10.0.0.1")
    assert not single.slot_available("INTERNAL")


def test_the_inter_broker_listener_takes_room_from_the_least_recently_used_connection_of_another():
    q = quotas(ConnectionLimits(max_connections=2), listeners=("CLIENT", "INTERNAL"), inter_broker="INTERNAL")
    old, recent = Conn(1, "CLIENT", last_active=5.0), Conn(2, "CLIENT", last_active=9.0)
    q.open("CLIENT", "10.0.0.1")
    q.open("CLIENT", "10.0.0.2")
    peer = Conn(3, "INTERNAL", last_active=1.0)  # the oldest, but protected
    q.open("INTERNAL", "10.0.0.3")
    everyone = [recent, peer, old]
    assert q.excess() == 1
    assert q.close_excess(everyone) == 1 and old.closing and not recent.closing and not peer.closing
    assert q.lru_to_close(everyone) == []  # one is already going: nothing more until its count comes back
    q.close("CLIENT", "10.0.0.1")
    assert q.excess() == 0


def test_lowering_max_connections_closes_the_excess_and_wakes_nobody_early():
    q = quotas(ConnectionLimits(), listeners=("PLAINTEXT",))
    conns = [Conn(i, "PLAINTEXT", last_active=float(i)) for i in range(4)]
    for i in range(4):
        q.open("PLAINTEXT", f"10.0.0.{i}")
    assert q.reconfigure(ConnectionLimits(max_connections=2))
    assert not q.reconfigure(ConnectionLimits(max_connections=2))  # the same limits: no change
    assert [c.connection_id for c in q.lru_to_close(conns)] == [0, 1]


def test_admit_waits_for_a_slot_and_goes_on_when_one_closes_or_the_limit_is_raised():
    async def run() -> list[str]:
        q = quotas(ConnectionLimits(listener_max_connections={"PLAINTEXT": 1}), clock=asyncio.get_running_loop().time)
        q.open("PLAINTEXT", "10.0.0.1")
        seen: list[str] = []

        async def acceptor(name: str) -> None:
            await q.admit("PLAINTEXT")
            seen.append(name)
            q.open("PLAINTEXT", "10.0.0.2")

        first = asyncio.ensure_future(acceptor("first"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert seen == []  # at its limit: waiting
        q.close("PLAINTEXT", "10.0.0.1")
        await asyncio.wait_for(first, 5)
        second = asyncio.ensure_future(acceptor("second"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert seen == ["first"]
        q.reconfigure(ConnectionLimits(listener_max_connections={"PLAINTEXT": 5}))
        await asyncio.wait_for(second, 5)
        return seen

    assert asyncio.run(run()) == ["first", "second"]


# -- creation rate ---------------------------------------------------------------------------------------------------


def test_the_rate_window_lets_rate_connections_through_a_second_then_delays_the_next():
    w = RateWindow(3)
    for t in (10.0, 10.1, 10.2):
        assert w.delay(t) == 0
        w.record(t)
    assert w.delay(10.3) == pytest.approx(0.7)  # the one at 10.0 must leave the window first
    assert w.delay(11.05) == 0
    assert RateWindow().delay(0.0) == 0 and not RateWindow().limited


def test_creation_rates_broker_wide_and_per_listener_the_inter_broker_listener_only_its_own():
    clock = Clock()
    q = quotas(ConnectionLimits(max_connection_creation_rate=2,
                                listener_max_connection_creation_rate={"INTERNAL": 1}),
               listeners=("CLIENT", "INTERNAL"), inter_broker="INTERNAL", clock=clock)
    q.open("CLIENT", "10.0.0.1")
    q.open("CLIENT", "10.0.0.1")
    assert q.creation_delay("CLIENT", clock.now) == pytest.approx(1.0)  # the broker's 2 a second are used
    assert q.creation_delay("INTERNAL", clock.now) == 0  # the broker-wide rate does not hold it
    q.open("INTERNAL", "10.0.0.2")
    assert q.creation_delay("INTERNAL", clock.now) == pytest.approx(1.0)  # its own rate does
    clock.now += 1.0
    assert q.creation_delay("CLIENT", clock.now) == 0 and q.creation_delay("INTERNAL", clock.now) == 0


# -- the keys' checks ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value", "says"), [
    ("max.connections", "-1", "invalid value '-1' for max.connections"),
    ("max.connections.per.ip", "many", "invalid value 'many' for max.connections.per.ip"),
    ("max.connections.per.ip.overrides", "127.0.0.1", "'127.0.0.1' is not host:count"),
    ("max.connections.per.ip.overrides", "127.0.0.1:-3", "'127.0.0.1:-3' is not host:count"),
    ("max.connection.creation.rate", "2147483648", "invalid value '2147483648' for max.connection.creation.rate"),
    ("connection.failed.authentication.delay.ms", "-5", "connection.failed.authentication.delay.ms"),
    ("connections.max.idle.ms", "10m", "invalid value '10m' for connections.max.idle.ms"),
    ("listener.name.plaintext.max.connections", "0", "invalid value '0' for listener.name.plaintext.max.connections"),
    ("listener.name.plaintext.max.connection.creation.rate", "x",
     "invalid value 'x' for listener.name.plaintext.max.connection.creation.rate"),
])
def test_server_properties_refuse_bad_values_naming_key_and_value(key, value, says):
    with pytest.raises(ConfigError, match=None) as refused:
        build_config({**BASE, key: value})
    assert says in str(refused.value)


def test_a_zero_per_ip_limit_needs_overrides():
    with pytest.raises(ConfigError, match="max.connections.per.ip is 0"):
        build_config({**BASE, "max.connections.per.ip": "0"})
    assert build_config({**BASE, "max.connections.per.ip": "0",
                         "max.connections.per.ip.overrides": "10.1.1.1:5"}).max_connections_per_ip == 0


def plan(changes, dynamic=None):
    return bc.plan_broker_changes(dynamic or bc.DynamicBrokerConfigs(1), "1", changes, replace=False)


def test_the_connection_limits_change_at_runtime_and_bad_values_are_refused_naming_key_and_value():
    assert plan([("max.connections", bc.SET, " 1000 "), ("max.connections.per.ip", bc.SET, "0"),
                 ("max.connections.per.ip.overrides", bc.SET, "127.0.0.1:5,host-a:2"),
                 ("max.connection.creation.rate", bc.SET, "30"),
                 ("listener.name.PLAINTEXT.max.connections", bc.SET, "12"),
                 ("listener.name.internal.max.connection.creation.rate", bc.SET, "3")]) == {
        "max.connections": "1000", "max.connections.per.ip": "0",
        "max.connections.per.ip.overrides": "127.0.0.1:5,host-a:2", "max.connection.creation.rate": "30",
        "listener.name.PLAINTEXT.max.connections": "12", "listener.name.internal.max.connection.creation.rate": "3"}
    for key, value in [("max.connections", "-1"), ("max.connections.per.ip", "2147483648"),
                       ("max.connections.per.ip.overrides", "nonsense"),
                       ("listener.name.PLAINTEXT.max.connections", "0"),
                       ("listener.name.PLAINTEXT.max.connection.creation.rate", "-2")]:
        with pytest.raises(bc.ConfigProblem) as refused:
            plan([(key, bc.SET, value)])
        assert refused.value.code == bc.BAD_BROKER_VALUE
        assert key in refused.value.message and repr(value) in refused.value.message
    with pytest.raises(bc.ConfigProblem) as static:  # known, but not dynamic (as in Kafka)
        plan([("connections.max.idle.ms", bc.SET, "1000")])
    assert "Cannot update these configs dynamically: connections.max.idle.ms" in static.value.message


def test_describe_configs_shows_the_limits_and_a_listeners_own_with_their_sources():
    config = build_config({**BASE, "max.connections.per.ip": "9", "listener.name.PLAINTEXT.max.connections": "4"})
    dynamic = bc.DynamicBrokerConfigs(1)
    dynamic.per_broker = {"max.connections": "50", "listener.name.PLAINTEXT.max.connections": "6"}
    entries = {e.name: e for e in bc.describe_broker(config, dynamic, "1", None)}
    assert (entries["max.connections"].value, entries["max.connections"].source) == ("50", bc.DYNAMIC_BROKER_CONFIG)
    assert (entries["max.connections.per.ip"].value, entries["max.connections.per.ip"].source) == (
        "9", bc.STATIC_BROKER_CONFIG)
    assert entries["connection.failed.authentication.delay.ms"].value == "100"
    assert entries["connections.max.idle.ms"].value == "600000"
    own = entries["listener.name.PLAINTEXT.max.connections"]
    assert (own.value, own.source, [s[2] for s in own.synonyms]) == (
        "6", bc.DYNAMIC_BROKER_CONFIG, [bc.DYNAMIC_BROKER_CONFIG, bc.STATIC_BROKER_CONFIG])


# -- a failed SASL authentication -------------------------------------------------------------------------------------


def test_the_answer_to_a_failed_authentication_waits_the_delay_and_the_close_follows_it():
    """The gate gives the failure's answer as a future that completes after the delay (the connection writes it
    in order, then closes); with no delay, at once."""
    settings = SaslSettings.for_listener({
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";'},
        "SASL_PLAINTEXT")
    from kjbod.protocol.generated import SaslAuthenticateRequest, SaslHandshakeRequest
    from tests.security.test_sasl_live import request

    ctx = RequestContext(connection_id=1, peer_host="127.0.0.1", peer_port=1, listener_name="SASL_PLAINTEXT",
                         listener_kind="broker", security_protocol="SASL_PLAINTEXT")

    async def run(delay_ms: int) -> tuple[bool, bool, list[str]]:
        closes: list[str] = []
        gate = SaslGate(lambda frame, c: None, settings, close_later=closes.append, failure_delay_ms=delay_ms)
        gate.handle(request(17, 1, 1, SaslHandshakeRequest(mechanism="PLAIN"))[4:], ctx)
        answer = gate.handle(request(36, 1, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong"))[4:], ctx)
        if not isinstance(answer, asyncio.Future):
            return False, True, closes
        ready_at_once = answer.done()
        await asyncio.wait_for(answer, 10)
        return True, ready_at_once, closes

    delayed, at_once, closes = asyncio.run(run(50))
    assert (delayed, at_once, closes) == (True, False, ["SASL authentication failed"])
    assert asyncio.run(run(0)) == (False, True, ["SASL authentication failed"])
