"""The controller mutation quota in process (kjbod.broker.client_quotas, KIP-599): Kafka's token bucket, the
strict quota that refuses a topic while the bucket is below zero and the permissive one that only reports the
throttle, giving back what a refused topic took, and the controller.quota.window keys reaching the broker."""

from __future__ import annotations

import dataclasses

import pytest

from kjbod.broker.client_quotas import ABSENT, ClientQuotas, MutationQuotaType, TokenBucket
from kjbod.broker.mutation_quotas import admit
from kjbod.broker.node import BrokerNode
from kjbod.metadata.image import EMPTY_IMAGE
from kjbod.server.config import build_config


def test_a_new_bucket_is_full_and_refills_at_the_bound_up_to_the_burst() -> None:
    bucket = TokenBucket()
    assert bucket.measure(2.0, 10.0, 5_000) == 10.0
    bucket.record(14.0, 2.0, 10.0, 5_000)
    assert bucket.measure(2.0, 10.0, 5_000) == -4.0
    assert bucket.measure(2.0, 10.0, 6_500) == -1.0  # 1.5 s at 2 tokens a second
    assert bucket.measure(2.0, 10.0, 60_000) == 10.0  # never above the burst


def mutation_quotas(bound: float, now: list[int], samples: int = 2) -> ClientQuotas:
    quotas = ClientQuotas(lambda: {(("client-id", "hasty"),): {"controller_mutation_rate": bound}},
                          clock_ms=lambda: now[0], mutation_samples=samples, mutation_window_seconds=1)
    assert quotas.sync()
    return quotas


def test_strict_quota_admits_until_the_bucket_is_below_zero_then_refuses_with_the_refill_time() -> None:
    now = [1_000]
    quotas = mutation_quotas(1.0, now)  # a burst of 2 x 1 s x 1 partition/s
    quota = quotas.mutation_quota("User:ANONYMOUS", "hasty", strict=True)
    assert quota is not None and quota.tags == (ABSENT, "hasty")
    assert quota.admit(2) and quota.throttle_ms() == 0  # the bucket is now empty, not below zero
    assert quota.admit(3)  # Kafka checks before it records: this one goes through and leaves -3
    assert not quota.admit(1)
    assert quota.throttle_ms() == 3000  # the deficit refills at 1 token a second
    now[0] += 1000
    assert quota.throttle_ms() == 2000  # less the time since it was noted
    again = quotas.mutation_quota("User:ANONYMOUS", "hasty", strict=True)
    assert again is not None and not again.admit(1) and again.throttle_ms() == 2000
    assert quotas.mutation.sensors[(ABSENT, "hasty")].total == 5  # refused topics took nothing


def test_permissive_quota_admits_everything_and_reports_the_deficit() -> None:
    now = [0]
    quota = mutation_quotas(2.0, now).mutation_quota("User:ANONYMOUS", "hasty", strict=False)
    assert quota is not None
    assert quota.admit(4) and quota.throttle_ms() == 0
    assert quota.admit(5) and quota.admit(1)
    assert quota.throttle_ms() == 3000  # 6 tokens short at 2 a second


def test_another_client_and_a_quota_free_broker_are_unaffected() -> None:
    now = [0]
    quotas = mutation_quotas(1.0, now)
    calm = quotas.mutation_quota("User:ANONYMOUS", "calm", strict=True)
    assert calm is not None
    assert all(calm.admit(100) for _ in range(5)) and calm.throttle_ms() == 0
    free = ClientQuotas(lambda: {}, clock_ms=lambda: 0)
    assert free.mutation_quota("User:ANONYMOUS", "hasty", strict=True) is None


def test_admit_gives_back_what_refused_topics_took_and_skips_duplicates() -> None:
    now = [0]
    quotas = mutation_quotas(1.0, now)
    quota = quotas.mutation_quota("User:ANONYMOUS", "hasty", strict=True)
    assert quota is not None
    topics = [("a", 2), ("dup", 9), ("b", 1), ("dup", 9), ("c", 1)]
    admission, kept, refused = admit(quota, topics, lambda t: t[0], lambda t: t[1])
    assert kept == [("a", 2), ("dup", 9), ("b", 1), ("dup", 9)]  # the duplicates go on, for the controller to refuse
    assert refused == [("c", 1)]
    sensor = quotas.mutation.sensors[(ABSENT, "hasty")]
    assert sensor.total == 3
    response = type("Response", (), {"throttle_time_ms": 0})()
    admission.settle(response, ["b"])  # the controller refused b: its partition comes back
    assert sensor.total == 2
    assert response.throttle_time_ms == 1000  # -1 token after giving back
    assert quotas.mutation.metrics(now[0]).__next__()[2] == 1000  # the throttle-time sensor noted it


@pytest.mark.parametrize(("num", "seconds", "burst"), [("11", "1", 11.0), ("3", "2", 6.0)])
def test_the_controller_window_keys_set_the_brokers_burst(num: str, seconds: str, burst: float) -> None:
    """controller.quota.window.num and controller.quota.window.size.seconds: the bucket holds num x seconds x the
    bound, so the same burst of creations is throttled or not."""
    config = build_config({"process.roles": "broker,controller", "node.id": "1", "log.dirs": "/tmp/unused",
                           "controller.quorum.voters": "1@127.0.0.1:9093", "listeners":
                           "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                           "controller.listener.names": "CONTROLLER",
                           "controller.quota.window.num": num, "controller.quota.window.size.seconds": seconds})
    node = BrokerNode(config, lambda *_: None)
    node.metadata = dataclasses.replace(
        EMPTY_IMAGE, client_quotas={(("client-id", "c"),): {"controller_mutation_rate": 1.0}})
    quotas = node.client_quotas
    quotas.clock_ms = lambda: 0
    quota = quotas.mutation_quota("User:ANONYMOUS", "c", strict=True)
    assert quota is not None
    assert isinstance(quotas.mutation, MutationQuotaType) and quotas.mutation.burst(1.0) == burst
    assert quota.admit(int(burst) + 1)  # bucket at -1
    assert not quota.admit(1) and quota.throttle_ms() == 1000
