"""The controller benchmark's harness (tools/bench/reassign_controller.py) moves a whole batched, throttled
reassignment to its end within the KIP-435 limits, and leaves no throttle behind: so the figures it times are of
work that is right.  No timing is checked here."""

from __future__ import annotations

from kjbod.controller.throttles import FOLLOWER_REPLICAS, LEADER_RATE
from tools.bench.reassign_controller import Harness, per_step


def test_the_harness_takes_every_partition_to_its_target_within_the_limits():
    h = Harness(300)
    h.start()
    assert h.image.throttled_rates and h.image.throttled_replicas
    most = 0
    while True:
        stepping = h.stepping()
        most = max(most, len(stepping))
        if not stepping:
            break
        for topic, p in stepping:
            h.step(topic, h.image.topic_by_id(topic.topic_id).partitions[p.partition])
    assert not h.plans and 0 < most <= 100  # reassignment.parallel.partition.count
    spare = list(range(4, 13))
    for t in h.image.topics_by_id.values():
        assert FOLLOWER_REPLICAS not in t.configs
        for p in t.partitions.values():
            assert list(p.replicas) == [spare[(p.partition + i) % len(spare)] for i in range(3)]
    assert h.image.throttled_rates == {} and h.image.throttled_replicas == {}
    assert all(LEADER_RATE not in h.image.resource_configs(4, str(b)) for b in range(1, 13))


def test_per_step_counts_the_steps_it_times():
    _mean, _initial, done = per_step(200, steps=10, warmup=2)
    assert done == 12
