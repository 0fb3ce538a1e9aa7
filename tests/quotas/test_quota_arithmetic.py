"""Client quota arithmetic in process (kjbod.broker.client_quotas): Kafka's Rate over sampled windows, the
throttle time, the precedence of entity matches and the sensors' tags, the Fetch cap, and quotas following the
image without a restart."""

from __future__ import annotations

import dataclasses

import pytest

from kjbod.broker.client_quotas import ABSENT, ClientQuotas, QuotaType, Rate, bounds_from
from kjbod.broker.node import BrokerNode
from kjbod.metadata.client_quotas import Entity
from kjbod.metadata.image import EMPTY_IMAGE
from kjbod.server.config import build_config


def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    rate = Rate(11, 1000)
    rate.record(1000, 0)
    assert rate.window_size(0) == 10_000  # nothing elapsed: 10 whole windows
    assert rate.measure(0) == 100.0
    assert rate.window_size(15_500) == 10_000  # the sample expired (11 windows): a fresh one, counted as 10 windows
    assert rate.measure(15_500) == 0.0
    rate = Rate(2, 1000)
    rate.record(300, 0)
    rate.record(300, 1500)  # a second window
    assert rate.window_size(1500) == 1500
    assert rate.measure(1500) == 400.0
    rate.record(100, 2600)  # a third window reuses the first sample's slot
    assert rate.measure(2600) == 400 / 1.1


def test_throttle_time_is_the_excess_over_the_bound_across_the_window() -> None:
    qt = QuotaType("Produce", 11, 1)
    qt.set_bounds({(ABSENT, "app"): 100.0})
    assert qt.record("ANONYMOUS", "app", 1000, 0) == 0  # 1000 B over 10 s = 100 B/s: within
    assert qt.record("ANONYMOUS", "app", 100, 0) == 1000  # 110 B/s: 10% over for 10 s -> 1 s
    assert qt.record("ANONYMOUS", "other", 10**6, 0) == 0  # another client id has no quota
    qt.unrecord("ANONYMOUS", "app", 100, 0)
    assert qt.record("ANONYMOUS", "app", 0, 0) == 0
    tags, rate, avg_throttle, total = next(t for t in qt.metrics(0) if t[0] == (ABSENT, "app"))
    assert (rate, total) == (100.0, 1000.0)


def test_request_quota_throttle_is_at_most_one_window() -> None:
    qt = QuotaType("Request", 11, 2, max_throttle_ms=2000)
    qt.set_bounds({(ABSENT, "app"): 1.0})
    assert qt.record("u", "app", 500.0, 0) == 2000


def test_precedence_of_entity_matches() -> None:
    qt = QuotaType("Produce")
    bounds = {("alice", "app"): 1.0, ("alice", None): 2.0, ("alice", ABSENT): 3.0, (None, "app"): 4.0,
              (None, None): 5.0, (None, ABSENT): 6.0, (ABSENT, "app"): 7.0, (ABSENT, None): 8.0}
    order = list(bounds)
    expected = [("alice", "app", 1.0), ("alice", "app", 2.0), ("alice", "app", 3.0), ("alice", "app", 4.0),
                ("alice", "app", 5.0), ("alice", "app", 6.0), ("alice", "app", 7.0), ("alice", "app", 8.0)]
    for i, (user, client, value) in enumerate(expected):
        qt.set_bounds({k: bounds[k] for k in order[i:]})
        assert qt.limit(qt.tags(user, client)) == value, order[i]
    qt.set_bounds({})
    assert qt.limit(qt.tags("alice", "app")) is None


def test_single_level_tags_and_the_sticky_levels() -> None:
    qt = QuotaType("Fetch")
    qt.set_bounds({(ABSENT, None): 10.0})  # client-id default only
    assert qt.tags("bob", "x") == (ABSENT, "x") and qt.limit((ABSENT, "x")) == 10.0
    assert qt.tags("bob", "") == (ABSENT, "") and qt.limit((ABSENT, "")) is None  # no client id: no quota
    qt = QuotaType("Fetch")
    qt.set_bounds({("bob", ABSENT): 10.0})
    assert qt.tags("bob", "x") == ("bob", ABSENT)
    qt.set_bounds({})  # removed, but the user level stays enabled until a restart, as Kafka's quotaTypesEnabled
    assert qt.active and qt.tags("bob", "x") == ("bob", ABSENT)


def test_fetch_cap_is_the_quota_over_all_but_one_window() -> None:
    qt = QuotaType("Fetch", 11, 2)
    qt.set_bounds({(ABSENT, "c"): 1000.0})
    assert qt.max_value_in_window("u", "c") == 1000.0 * 10 * 2
    assert qt.max_value_in_window("u", "d") == float("inf")


def test_bounds_follow_the_image_without_a_restart() -> None:
    image: dict[Entity, dict[str, float]] = {}
    quotas = ClientQuotas(lambda: image, clock_ms=lambda: 0)
    assert not quotas.sync() and not quotas.produce.active
    image = {(("client-id", "app"),): {"producer_byte_rate": 50.0},
             (("ip", None),): {"connection_creation_rate": 5.0},
             (("user", "u"),): {"request_percentage": 10.0}}
    assert quotas.sync()
    assert quotas.produce.bounds == {(ABSENT, "app"): 50.0}
    assert quotas.request.bounds == {("u", ABSENT): 10.0}
    assert not quotas.fetch.active
    image = {}
    quotas.sync()
    assert quotas.produce.bounds == {} and quotas.produce.limit(quotas.produce.tags("x", "app")) is None
    assert bounds_from({(("client-id", None), ("user", "a")): {"consumer_byte_rate": 3.0}},
                       "consumer_byte_rate") == {("a", None): 3.0}


@pytest.mark.parametrize(("num", "seconds"), [("11", "1"), ("3", "2")])
def test_the_window_keys_shape_the_brokers_quota_rates(num: str, seconds: str) -> None:
    """quota.window.num and quota.window.size.seconds: a broker's rates count at least num - 1 windows of that
    size, so the same burst is throttled for a different time."""
    config = build_config({"process.roles": "broker,controller", "node.id": "1", "log.dirs": "/tmp/unused",
                           "controller.quorum.voters": "1@127.0.0.1:9093", "listeners":
                           "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                           "controller.listener.names": "CONTROLLER",
                           "quota.window.num": num, "quota.window.size.seconds": seconds})
    node = BrokerNode(config, lambda *_: None)
    node.metadata = dataclasses.replace(EMPTY_IMAGE, client_quotas={(("client-id", "c"),): {"producer_byte_rate": 100.0}})
    quotas = node.client_quotas
    assert quotas.sync()
    window_ms = (int(num) - 1) * int(seconds) * 1000
    allowed = 100 * window_ms // 1000
    assert quotas.produce.record("u", "c", allowed, 0) == 0
    assert quotas.produce.record("u", "c", allowed, 0) == window_ms  # twice the bound: one more window's time
