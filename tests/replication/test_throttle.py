"""Inter-broker replication throttles in process (kjbod.broker.replication.throttle): the replica lists as Kafka
validates and parses them, the rates as dynamic broker configs, the quota arithmetic on a fake clock (Kafka's
SimpleRate over sampled windows), and the leader's and the follower's decisions through the replica manager."""

from __future__ import annotations

import uuid

import pytest

from kjbod.broker import topic_config
from kjbod.broker.broker_config import (
    ConfigProblem,
    DynamicBrokerConfigs,
    plan_broker_changes,
    plan_topic_changes,
)
from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.replication.fetcher import Fetcher, FetchState
from kjbod.broker.replication.throttle import (
    ALL,
    LONG_MAX,
    ReplicationQuota,
    SampledRate,
    replica_list_problem,
    throttled_partitions,
)
from kjbod.metadata import MetadataImage
from kjbod.protocol.errors import ErrorCode
from kjbod.server.config import build_config
from tests.replication.test_config import BASE
from tests.replication.test_replica_manager import Clock, FakeNode, image

LEADER_LIST = "leader.replication.throttled.replicas"
FOLLOWER_LIST = "follower.replication.throttled.replicas"
MB = 1_000_000


def with_configs(img: MetadataImage, broker: dict[str, dict[str, str]] | None = None, **topic: str) -> MetadataImage:
    """`img` with topic t's configs and broker resources' configs replaced."""
    t = img.topic("t")
    assert t is not None
    t2 = type(t)(t.name, t.topic_id, t.partitions, {k.replace("_", "."): v for k, v in topic.items()})
    configs = {(4, name): values for name, values in (broker or {}).items()}
    return MetadataImage(topics_by_name={"t": t2}, topics_by_id={t.topic_id: t2}, brokers=img.brokers,
                         configs=configs)


# ------------------------------------------------------------------------------------------ the replica lists


@pytest.mark.parametrize("value", ["", "*", " * ", "0:1", "0:1,1:2", "0:1, 1:2 ,", "10:100,,3:4"])
def test_valid_replica_lists(value):
    assert replica_list_problem(LEADER_LIST, value) is None
    assert plan_topic_changes({}, [(LEADER_LIST, 0, value)], replace=False) == {LEADER_LIST: value}


@pytest.mark.parametrize("value", ["x", "0:1,*", "*,*", "0", "0:", ":1", "0:1:2", "-1:2", "a:b", "0;1"])
def test_invalid_replica_lists_get_kafkas_message_as_invalid_config(value):
    message = replica_list_problem(FOLLOWER_LIST, value)
    assert message is not None and message.startswith("Invalid value [")
    assert message.endswith(f"for configuration {FOLLOWER_LIST}: {FOLLOWER_LIST} must be the literal '*' or a list "
                            "of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
    with pytest.raises(ConfigProblem) as refused:
        plan_topic_changes({}, [(FOLLOWER_LIST, 0, value)], replace=False)
    assert refused.value.code == ErrorCode.INVALID_CONFIG and refused.value.message.startswith("Invalid value [")
    with pytest.raises(topic_config.TopicConfigError):  # CreateTopics checks the same table
        topic_config.validate({FOLLOWER_LIST: value})


def test_the_lists_are_list_configs_defaulting_to_empty_and_append_adds_entries():
    d = topic_config.DEFS[LEADER_LIST]
    assert (d.type, d.fallback, d.broker_key) == ("list", "", None)
    after = plan_topic_changes({LEADER_LIST: "0:1"}, [(LEADER_LIST, 2, "1:2")], replace=False)  # APPEND
    assert after == {LEADER_LIST: "0:1,1:2"}
    assert plan_topic_changes(after, [(LEADER_LIST, 3, "0:1,1:2")], replace=False) == {}  # SUBTRACT all: gone


def test_each_broker_keeps_the_partitions_paired_with_it():
    assert throttled_partitions("0:1,1:2,2:1, 3:10", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions("*", 3) == ALL and throttled_partitions(" *,", 3) == ALL
    assert throttled_partitions("", 1) is None and throttled_partitions(None, 1) is None
    assert throttled_partitions("rubbish", 1) is None


# ------------------------------------------------------------------------------------------ the rates


def test_the_rates_are_dynamic_longs_from_0():
    dynamic = DynamicBrokerConfigs(1)
    for key in ("leader.replication.throttled.rate", "follower.replication.throttled.rate"):
        assert plan_broker_changes(dynamic, "", [(key, 0, "10000000")], replace=False) == {key: "10000000"}
        assert plan_broker_changes(dynamic, "1", [(key, 0, "0")], replace=False) == {key: "0"}
        assert plan_broker_changes(dynamic, "1", [(key, 0, str(LONG_MAX))], replace=False) == {key: str(LONG_MAX)}
        for bad in ("-1", "fast", str(LONG_MAX + 1), "1.5"):
            with pytest.raises(ConfigProblem) as refused:
                plan_broker_changes(dynamic, "1", [(key, 0, bad)], replace=False)
            # a bad broker value: Kafka's broker answers INVALID_REQUEST (ConfigAdminManager, KAFKA-13609)
            assert refused.value.code == ErrorCode.INVALID_REQUEST and key in refused.value.message


def test_the_quota_window_keys_reach_the_quotas(make_log):
    default = ReplicationConfig.from_config(build_config(BASE))
    assert (default.quota_window_num, default.quota_window_size_seconds) == (11, 1)  # Kafka's
    cfg = ReplicationConfig.from_config(build_config({**BASE, "replication.quota.window.num": "3",
                                                      "replication.quota.window.size.seconds": "2"}))
    manager = ReplicaManager(FakeNode(2, make_log("t-0"), image()), cfg, clock=Clock())
    for quota in (manager.throttles.leader, manager.throttles.follower):
        assert (quota.rate.samples, quota.rate.window_ms) == (3, 2000)
    # Three 2 s samples, each expiring 6 s after its last record.
    rate = manager.throttles.leader.rate
    for second in range(0, 6, 2):
        rate.record(2 * MB, second * 1000)
    assert rate.measure(5000) == pytest.approx(6 * MB / 5)
    assert rate.measure(9999) == pytest.approx(2 * MB / 5.999)  # only the sample begun at 4 s is left
    assert rate.measure(10_000) == 0.0


# ------------------------------------------------------------------------------------------ quota arithmetic


def test_the_rate_is_kafkas_simple_rate():
    rate = SampledRate(11, 1000)
    assert rate.measure(0) == 0.0
    rate.record(1000, 0)
    assert rate.measure(0) == 1000.0  # at least one window
    assert rate.measure(500) == 1000.0
    assert rate.measure(4000) == 250.0  # elapsed since the oldest sample began
    rate.record(3000, 4000)
    assert rate.measure(4000) == 1000.0
    assert rate.measure(14_999) == pytest.approx(3000 / 10.999)  # the first sample expired 11 s after its event
    assert rate.measure(15_000) == 0.0  # and then the second


def test_a_sample_ring_keeps_one_more_slot_than_samples():
    rate = SampledRate(3, 1000)
    for second in range(10):
        rate.record(100, second * 1000)
    assert len(rate._ring) == 4
    # the samples begun at 7, 8 and 9 s are live (the one of 6 s expired 3 s after its record): 300 bytes
    # over 9.5 - 7 s
    assert rate.measure(9500) == pytest.approx(300 / 2.5)


@pytest.mark.parametrize("bound", [10 * MB, 50 * MB])
@pytest.mark.parametrize("chunk", [1 << 20, 64 << 10])
def test_a_transfer_paced_by_the_quota_settles_at_the_rate(bound, chunk):
    """A fetcher that asks for `chunk` bytes whenever the quota is not exceeded, and waits 100 ms when it is:
    over 120 s of fake time it moves the bound's worth of bytes per second, within 5%."""
    quota = ReplicationQuota("FollowerReplication")
    quota.bound = bound
    now, moved, end = 0, 0, 120_000
    while now < end:
        if quota.exceeded(now):
            now += 100
            continue
        quota.record(chunk, now)
        moved += chunk
        now += 1  # a fetch takes a millisecond: far faster than the rate
    assert abs(moved / (end / 1000) / bound - 1) <= 0.05
    assert abs(quota.byte_rate(now) / bound - 1) <= 0.05


class KafkasRate(SampledRate):
    """Kafka's SimpleRate as it is: the idle time before a transfer is never forgotten."""

    def forget_idle(self, now_ms: int, bound: float) -> bool:
        return False


def ten_seconds_at_10mbs(rate: SampledRate | None = None) -> ReplicationQuota:
    """A quota of 10 MB/s (11 windows of 1 s) that recorded 10 MB at 0, 1, ..., 9 s."""
    quota = ReplicationQuota("FollowerReplication")
    quota.rate = rate or quota.rate
    quota.bound = 10 * MB
    for second in range(10):
        quota.record(10 * MB, second * 1000)
    return quota


def test_idle_time_is_not_credit_worked_example():
    """Worked by hand from Kafka's formulas (SampledStat.purgeObsoleteSamples, SimpleRate.windowSize):

    at 15 s the samples begun at 0..4 s have had no record for 11 s (>= 11 windows): purged.  The live ones,
    begun at 5..9 s, hold 50 MB; the oldest began at 5 s, so Kafka's rate is 50 MB / 10 s = 5 MB/s, and it
    lets 10 MB/s x 10 s - 50 MB = 50 MB through at once before the rate reaches the bound (5 s of quota in a
    burst).  Those samples hold less than 10 MB/s x (10 - 1) s = 90 MB: idle for more than a window, so here
    they are dropped and a new transfer gets one window's worth, 10 MB, then the bound."""
    kafka = ten_seconds_at_10mbs(KafkasRate())
    assert kafka.rate.measure(15_000) == 5 * MB
    kafka.record(50 * MB, 15_000)
    assert kafka.rate.measure(15_000) == 10 * MB and not kafka.exceeded(15_000)  # 100 MB / 10 s: at the bound

    quota = ten_seconds_at_10mbs()
    assert not quota.exceeded(15_000)
    assert quota.rate.measure(15_000) == 0.0  # dropped
    quota.record(10 * MB, 15_000)
    assert quota.rate.measure(15_000) == 10 * MB and not quota.exceeded(15_000)  # 10 MB over one window
    quota.record(1, 15_000)
    assert quota.exceeded(15_000)
    assert quota.rate.measure(16_000) == pytest.approx((10 * MB + 1) / 1.0)  # still one window: 1 s elapsed
    assert quota.rate.measure(17_000) == pytest.approx((10 * MB + 1) / 2.0) and not quota.exceeded(17_000)


def test_a_deficit_within_a_window_is_kept_worked_example():
    """At 10.9 s nothing is purged yet (the oldest sample's record was 10.9 s ago, under 11 windows): 100 MB over
    10.9 s = 9.17 MB/s.  The deficit, 10 MB/s x 10.9 s - 100 MB = 9 MB, is under a window's worth (10 MB):
    kept, as Kafka keeps it, so 10 MB more makes 110 MB / 10.9 s = 10.09 MB/s, over the bound."""
    quota = ten_seconds_at_10mbs()
    assert not quota.exceeded(10_900)
    assert quota.rate.measure(10_900) == pytest.approx(100 * MB / 10.9)
    quota.record(10 * MB, 10_900)
    assert quota.rate.measure(10_900) == pytest.approx(110 * MB / 10.9) and quota.exceeded(10_900)


def test_a_purged_sample_does_not_pin_the_time_base_worked_example():
    """Kafka's purge resets an expired sample to start where the purge ran, empty, for another 11 windows: 10 MB
    at 0 s, read at 11 s (purged, reset to begin at 11 s), then at 19 s Kafka's rate is 0 over 8 s and a
    transfer passes 10 MB/s x 8 s = 80 MB at once before it reaches the bound.  Here: one window's worth."""
    kafka = ReplicationQuota("LeaderReplication")
    kafka.rate = KafkasRate()
    kafka.bound = 10 * MB
    kafka.record(10 * MB, 0)
    assert kafka.rate.measure(11_000) == 0.0
    kafka.record(80 * MB, 19_000)
    assert kafka.rate.measure(19_000) == 10 * MB and not kafka.exceeded(19_000)

    quota = ReplicationQuota("LeaderReplication")
    quota.bound = 10 * MB
    quota.record(10 * MB, 0)
    assert quota.byte_rate(11_000) == 0.0  # the metrics' reading purges as Kafka's does
    assert not quota.exceeded(19_000)
    quota.record(10 * MB, 19_000)
    quota.record(1, 19_000)
    assert quota.exceeded(19_000)


def paced_copy(quota: ReplicationQuota, nbytes: int, start_ms: int) -> tuple[int, list[tuple[int, int]]]:
    """A follower fetching 1 MiB every 5 ms while the quota allows it and retrying 200 ms later when it does not
    (the reassignment bench's replica.fetch.backoff.ms): (end time, (time, bytes so far) after each fetch)."""
    now, moved, progress = start_ms, 0, []
    while moved < nbytes:
        if quota.exceeded(now):
            now += 200
            continue
        chunk = min(1 << 20, nbytes - moved)
        quota.record(chunk, now)
        moved += chunk
        progress.append((now, moved))
        now += 5
    return now, progress


def steady_rate(progress: list[tuple[int, int]], nbytes: int) -> float:
    """Bytes per second between 10% and 90% of the copy (the bench's measure)."""
    first = next(p for p in progress if p[1] >= 0.1 * nbytes)
    last = next(p for p in progress if p[1] >= 0.9 * nbytes)
    return (last[1] - first[1]) / ((last[0] - first[0]) / 1000)


@pytest.mark.parametrize("gap_ms", [0, 2000, 8000])
def test_a_copy_soon_after_another_keeps_to_its_rate(gap_ms):
    """The reassignment bench's sequence: 200 MB at 10 MB/s, then `gap_ms` later 600 MB at 50 MB/s.  The second
    copy keeps within 5% of its rate between 10% and 90%; with Kafka's rate as it is, the first copy's samples
    (and the time since) let it run far ahead (1.3x to 4x in this model)."""
    ratios = {}
    for name, rate in (("kjbod", SampledRate()), ("kafka", KafkasRate())):
        quota = ReplicationQuota("FollowerReplication")
        quota.rate = rate
        quota.bound = 10 * MB
        end, _ = paced_copy(quota, 200 * MB, 0)
        quota.bound = 50 * MB
        _, progress = paced_copy(quota, 600 * MB, end + gap_ms)
        ratios[name] = steady_rate(progress, 600 * MB) / (50 * MB)
    assert abs(ratios["kjbod"] - 1) <= 0.05, ratios
    assert ratios["kafka"] > 1.2, ratios


def test_how_long_until_the_quota_allows_more_worked_example():
    """30 MB recorded at 0 against 10 MB/s: within the bound once they span 3 s.  At 0.5 s that is 2.5 s away
    (the floor of one window does not matter: 30 MB / 1 s is over too), at 2 s 1 s away, at 3 s now."""
    quota = ReplicationQuota("FollowerReplication")
    quota.bound = 10 * MB
    quota.record(30 * MB, 0)
    assert quota.ms_until_within(500) == 2500
    assert quota.ms_until_within(2000) == 1000
    assert quota.ms_until_within(2999) == 1 and quota.ms_until_within(3000) == 0
    quota.bound = LONG_MAX
    assert quota.ms_until_within(500) == 0
    quota.bound = 0
    assert quota.ms_until_within(500) == LONG_MAX  # 0 B/s: never (the fetcher's own waits bound it)


def test_an_unlimited_bound_is_never_exceeded_and_0_always_is_once_anything_moved():
    quota = ReplicationQuota("LeaderReplication")
    quota.record(10 * MB, 0)
    assert quota.bound == LONG_MAX and not quota.exceeded(0)
    quota.bound = 0
    assert quota.exceeded(0)
    fresh = ReplicationQuota("LeaderReplication")
    fresh.bound = 0
    assert not fresh.exceeded(0)  # 0 bytes per second is within a bound of 0


# ------------------------------------------------------------------------------------------ the replica manager


def scraped(node: FakeNode, name: str) -> float:
    """One sample of the node's ReplicaManager metric families, as the /metrics endpoint reports it."""
    from kjbod.metrics.collect import NodeCollector
    from kjbod.metrics.counters import RequestStats

    families = NodeCollector(node, RequestStats(), None)._replica_manager()
    return next(sample.value for f in families for sample in f.samples if sample.name == name)


@pytest.fixture
def manager_on(make_log):
    def make(node_id: int, img: MetadataImage, *, sync: bool = True) -> tuple[ReplicaManager, FakeNode, Clock]:
        clock = Clock()
        node = FakeNode(node_id, make_log("t-0"), img)
        manager = ReplicaManager(node, ReplicationConfig(), clock=clock)
        if sync:
            manager.sync(img)
        else:  # a follower would start its fetcher: only the throttles are taken from the image
            manager.throttles.update(img)
        return manager, node, clock
    return make


def test_the_replica_lists_and_rates_follow_the_image(manager_on):
    manager, node, _ = manager_on(1, image())
    t = manager.throttles
    assert (t.leader.bound, t.follower.bound, t.leader.throttled, t.follower.throttled) == (LONG_MAX, LONG_MAX, {}, {})
    img = with_configs(image(), {"": {"leader.replication.throttled.rate": "5000000",
                                      "follower.replication.throttled.rate": "6000000"},
                                 "1": {"leader.replication.throttled.rate": "7000000"},
                                 "2": {"follower.replication.throttled.rate": "1"}},
                       leader_replication_throttled_replicas="0:1,0:2",
                       follower_replication_throttled_replicas="*")
    manager.sync(img, {uuid.UUID(int=77): [0]}, (), ["t"])  # a delta naming the topic and its configs
    assert (t.leader.bound, t.follower.bound) == (7_000_000, 6_000_000)  # per broker, else the default
    assert t.leader.throttled == {"t": frozenset({0})} and t.follower.throttled == {"t": ALL}
    assert t.leader.is_throttled("t", 0) and not t.leader.is_throttled("t", 1) and t.follower.is_throttled("t", 5)
    manager.sync(with_configs(image(), leader_replication_throttled_replicas=""), {uuid.UUID(int=77): [0]}, (), ["t"])
    assert (t.leader.bound, t.follower.bound, t.leader.throttled, t.follower.throttled) == (LONG_MAX, LONG_MAX, {}, {})
    manager.sync(with_configs(image(), leader_replication_throttled_replicas="*"))  # a full sync
    assert t.leader.throttled == {"t": ALL}
    manager.sync(MetadataImage(brokers=image().brokers), {}, (), ["t"])  # the topic deleted
    assert t.leader.throttled == {}


def test_the_leader_throttles_only_out_of_sync_throttled_replicas_over_quota(manager_on):
    rate = {"": {"leader.replication.throttled.rate": str(MB)}}
    manager, node, clock = manager_on(1, with_configs(image(isr=(1, 2)), rate,
                                                      leader_replication_throttled_replicas="*"))
    node.replication = manager
    assert not manager.leader_throttled("t", 0, 3)  # under quota
    manager.leader_sent("t", 0, 2 * MB)
    assert manager.leader_throttled_byte_rate == 2 * MB
    assert scraped(node, "kafka_server_leaderreplication_byte_rate") == 2 * MB  # the metrics endpoint's figure
    assert scraped(node, "kafka_server_followerreplication_byte_rate") == 0
    assert manager.leader_throttled("t", 0, 3)  # out of sync, throttled, over quota
    assert not manager.leader_throttled("t", 0, 2)  # in the ISR: never
    clock.ms += 1000
    assert manager.leader_throttled("t", 0, 3)  # 2 MB over 1 s
    clock.ms += 1000
    assert not manager.leader_throttled("t", 0, 3)  # 2 MB over 2 s: at the bound, not over it
    manager.leader_sent("t", 0, 3 * MB)
    assert manager.leader_throttled("t", 0, 3)
    # Not listed for this broker (only broker 2's leader replica is): not throttled, and not recorded either.
    manager.sync(with_configs(image(isr=(1, 2)), rate, leader_replication_throttled_replicas="0:2"))
    assert not manager.leader_throttled("t", 0, 3)
    before = manager.leader_throttled_byte_rate
    manager.leader_sent("t", 0, 100 * MB)
    assert manager.leader_throttled_byte_rate == before
    # A list without a rate is unlimited.
    manager.sync(with_configs(image(isr=(1, 2)), leader_replication_throttled_replicas="*"))
    assert not manager.leader_throttled("t", 0, 3)


def test_a_throttled_long_poll_looks_again_when_the_leader_quota_allows(manager_on):
    """The leader's long poll for a follower whose partitions it holds back waits only as long as the quota
    needs (kjbod.broker.replication.hooks.leader_throttle_wait_s): 2 MB sent at 1 MB/s span 2 s."""
    from kjbod.broker.replication.hooks import THROTTLE_RECHECK_S, leader_throttle_wait_s

    rate = {"": {"leader.replication.throttled.rate": str(MB)}}
    manager, node, clock = manager_on(1, with_configs(image(isr=(1, 2)), rate,
                                                      leader_replication_throttled_replicas="*"))
    node.replication = manager
    manager.leader_sent("t", 0, 2 * MB)
    assert manager.leader_throttled("t", 0, 3) and leader_throttle_wait_s(node) == 2.0
    clock.ms += 1500
    assert leader_throttle_wait_s(node) == 0.5
    clock.ms += 499
    assert leader_throttle_wait_s(node) == THROTTLE_RECHECK_S  # 1 ms to go: the shortest wait
    clock.ms += 1
    assert not manager.leader_throttled("t", 0, 3)


def test_the_follower_throttles_only_out_of_sync_throttled_replicas_over_quota(manager_on):
    img = with_configs(image(leader=1), {"3": {"follower.replication.throttled.rate": str(MB)}},
                       follower_replication_throttled_replicas="0:3")
    manager, _, clock = manager_on(3, img, sync=False)
    fetcher = Fetcher(manager, 1, 0)
    state = FetchState("t", 0, 0)

    def asked() -> bool:
        request = fetcher._request([state], 12)
        return request is not None and [p.partition for t in request.topics for p in t.partitions] == [0]

    assert asked()  # under quota
    assert fetcher._request([state], 12).max_wait_ms == 500  # replica.fetch.wait.max.ms: nothing held back
    manager.follower_appended("t", 0, 5 * MB)
    assert manager.follower_throttled_byte_rate == 5 * MB
    assert not asked()  # never heard from the leader: not in sync, so left out
    state.leader_end_offset = 10  # the leader's HW is past this follower's end (0): behind
    assert not asked()
    state.leader_end_offset = 0  # caught up with the leader's HW: in sync, never left out
    assert asked()
    state.leader_end_offset = 10
    # held back until the quota allows it: 5 MB at 1 MB/s span 5 s, none of which has passed
    assert not asked() and fetcher._held_ms == 5000
    clock.ms += 4995
    assert not asked() and fetcher._held_ms == 10  # 5 ms to go: the shortest wait
    clock.ms += 5  # 5 MB over 5 s: at the bound, not over it
    assert asked()
    manager.throttles.update(with_configs(image(leader=1), {"3": {"follower.replication.throttled.rate": str(MB)}},
                                          follower_replication_throttled_replicas="0:2"))
    manager.follower_appended("t", 0, 50 * MB)  # not throttled here: not recorded
    assert asked()


def test_the_rates_in_server_properties_are_refused_naming_the_way_to_set_them():
    from kjbod.server.config import ConfigError

    for key in ("leader.replication.throttled.rate", "follower.replication.throttled.rate"):
        with pytest.raises(ConfigError, match=f"{key} can only be set at runtime"):
            build_config({**BASE, key: "1000"})
