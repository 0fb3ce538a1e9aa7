"""Controller work per step of a batched (KIP-435) reassignment, and how it grows from 1,000 to 10,000 partitions.

In process, on the controller's own code paths and nothing else (no sockets, no disk): a cluster of 12 brokers
with topics of 100 partitions each, replication factor 3 on brokers 1-3, is moved to brokers 4-12 (partition p
to three of them), with KIP-435 limits `reassignment.parallel.partition.count=100`,
`reassignment.parallel.replica.count=1`, `reassignment.parallel.leader.movements=100`, through kjbod's
ReassignPartitions with a throttle (so the KIP-179 bookkeeping runs too).  Then steps complete one at a time as
brokers would report them: the leader of a stepping partition sends AlterPartition with every replica in the
ISR; the controller answers it (completing that step), the batch goes through the throttle check
(`throttles.finish`) and is replayed into the next image, and `reassignment.advance` starts the next steps
(again through `finish` and replay) until a round writes nothing: exactly what the QuorumController does per
commit, less the metadata log's append and fsync.  One "step" is that whole round trip for one partition.

Figures: the mean controller time per step over the same number of steps at 1,000 and at 10,000 partitions
(after warm-up steps), and its growth from one to the other against linear (10x): `growth / 10`, so 1.0 is
exactly linear in the partition count and less is better.  Work that scans every partition once per step
(`advance` counts the partitions stepping) makes it linear; anything quadratic would show as ~10.  Target:
within 1.5 of linear.  The initial request (validating and planning every partition) is reported beside it.

    python -m tools.bench.reassign_controller [--rounds N] [--quick]
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kjbod.controller import alter_partition, reassignment, throttles
from kjbod.controller.result import ControllerSettings
from kjbod.metadata import BROKER_RESOURCE, EMPTY_IMAGE, MetadataImage, replay
from kjbod.protocol.generated import (
    AlterPartitionRequest,
    ConfigRecord,
    PartitionRecord,
    ReassignPartitionsRequest,
    RegisterBrokerRecord,
    TopicRecord,
)
from kjbod.protocol.generated import alter_partition_request as ap
from kjbod.protocol.generated import reassign_partitions_request as rp

from .common import heading, median, rounds_main, verdict

BROKERS = 12
PER_TOPIC = 100
LIMITS = {"reassignment.parallel.partition.count": "100", "reassignment.parallel.replica.count": "1",
          "reassignment.parallel.leader.movements": "100"}
TARGET = 1.5


class Harness:
    """The controller's state for one run: the image and the KIP-435 plans, changed as the QuorumController
    changes them."""

    def __init__(self, partitions: int) -> None:
        self.settings = ControllerSettings(cluster_id="bench")
        records: list[Any] = [RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.UUID(int=b), broker_epoch=b,
                                                   fenced=False, log_dirs=[uuid.UUID(int=1000 + b)])
                              for b in range(1, BROKERS + 1)]
        records += [ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=k, value=v)
                    for k, v in LIMITS.items()]
        self.topics: list[str] = []
        for t in range(partitions // PER_TOPIC):
            name, tid = f"t{t:04d}", uuid.UUID(int=(1 << 100) + t)
            self.topics.append(name)
            records.append(TopicRecord(name=name, topic_id=tid))
            records += [PartitionRecord(partition_id=p, topic_id=tid, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1,
                                        directories=[uuid.UUID(int=1001), uuid.UUID(int=1002), uuid.UUID(int=1003)])
                        for p in range(PER_TOPIC)]
        self.image: MetadataImage = replay(EMPTY_IMAGE, records)
        self.plans: reassignment.Plans = {}

    def commit(self, records: list[Any]) -> None:
        """A batch as the QuorumController writes it: through the throttle check, replayed into the next image."""
        records = throttles.finish(self.image, records)
        if records:
            self.image = replay(self.image, records)

    def settle(self) -> None:
        """The QuorumController's `_advance_reassignments`: next steps until a round writes nothing."""
        while self.plans:
            records = reassignment.advance(self.image, self.plans)
            if not records:
                return
            self.commit(records)
            if not reassignment.started_steps_ended(self.image, records):
                return

    def start(self) -> float:
        """ReassignPartitions of every partition, with a throttle; returns the controller's time for it."""
        spare = list(range(4, BROKERS + 1))
        req = ReassignPartitionsRequest(throttle=10_000_000, topic_reassignments=[rp.TopicReassignment(
            topic=name, partition_reassignments=[rp.PartitionReassignment(
                partition_id=p, brokers=[spare[(p + i) % len(spare)] for i in range(3)]) for p in range(PER_TOPIC)])
            for name in self.topics])
        began = time.perf_counter()
        result = throttles.reassign_partitions(self.image, req, self.settings, self.plans)
        assert all(e.error_code == 0 for t in result.response.reassign_partition_results for e in t.partition_errors)
        self.commit(result.records)
        self.settle()
        return time.perf_counter() - began

    def stepping(self) -> list[tuple[Any, Any]]:
        return [(t, p) for t in self.image.topics_by_id.values() for p in t.partitions.values() if p.reassigning]

    def step(self, topic: Any, p: Any) -> None:
        """The leader reports every replica in sync: the controller's whole round for that step."""
        req = AlterPartitionRequest(broker_id=p.leader, broker_epoch=p.leader, topics=[ap.TopicData(
            topic_id=topic.topic_id, partitions=[ap.PartitionData(
                partition_index=p.partition, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                new_isr_with_epochs=[ap.BrokerState(broker_id=b, broker_epoch=b) for b in p.replicas])])])
        result = alter_partition.alter_partition(self.image, req, 3, self.settings)
        self.commit(result.records)
        self.settle()


def per_step(partitions: int, steps: int, warmup: int) -> tuple[float, float, int]:
    """(mean seconds per step over `steps` steps after `warmup`, seconds for the initial request, steps done)."""
    h = Harness(partitions)
    initial = h.start()
    done = 0
    timed = 0.0
    while done < warmup + steps:
        batch = h.stepping()
        if not batch:
            break
        for topic, p in batch:
            now = h.image.topic_by_id(topic.topic_id).partitions[p.partition]
            began = time.perf_counter()
            h.step(topic, now)
            if done >= warmup:
                timed += time.perf_counter() - began
            done += 1
            if done >= warmup + steps:
                break
    assert done >= warmup + steps, f"only {done} steps at {partitions} partitions"
    return timed / steps, initial, done


def run(rounds: int = 3, seconds: float = 0.0, quick: bool = False) -> dict:
    """`seconds` is unused (the runs are counted in steps), kept for the common command line."""
    small, large = (1_000, 10_000)
    steps, warmup = (100, 20) if quick else (300, 50)
    if quick:
        rounds = 1
    limits = ", ".join(f"{k.removeprefix('reassignment.parallel.')}={v}" for k, v in LIMITS.items())
    heading(f"Reassignment: controller work per KIP-435 step, {small:,} vs {large:,} partitions "
            f"(limits {limits}, throttled)")
    ratios, t_small, t_large, i_small, i_large = [], [], [], [], []
    for _ in range(rounds):
        s, si, _ = per_step(small, steps, warmup)
        big, bi, _ = per_step(large, steps, warmup)
        t_small.append(s)
        t_large.append(big)
        i_small.append(si)
        i_large.append(bi)
        ratios.append(big / s)
    growth = median(ratios)
    vs_linear = growth / (large / small)
    print(f"   per step: {median(t_small) * 1e3:,.2f} ms at {small:,} partitions, {median(t_large) * 1e3:,.2f} ms at "
          f"{large:,} ({growth:.1f}x for {large // small}x the partitions: {vs_linear:.2f} of linear, "
          f"target <= {TARGET}: {verdict(vs_linear <= TARGET)})")
    print(f"   the initial ReassignPartitions: {median(i_small):,.2f} s at {small:,}, {median(i_large):,.2f} s at "
          f"{large:,} partitions")
    return {"reassign_controller_step_growth_vs_linear": vs_linear}


def main(argv: list[str] | None = None) -> int:
    return rounds_main("python -m tools.bench.reassign_controller", __doc__, run, argv, rounds=3)


if __name__ == "__main__":
    raise SystemExit(main())
