"""Reassignment benchmarks on a 3-broker cluster (tools/bench/replication.py's), each against its reference
measured in the same run:

* throttle accuracy at 10 and 50 MB/s: a partition led by broker 1 gets a new replica on broker 2 with both
  inter-broker throttles set as Kafka's tool sets them (`leader.replication.throttled.rate` and
  `follower.replication.throttled.rate` = R on every broker, `leader.replication.throttled.replicas` = `0:1`,
  `follower.replication.throttled.replicas` = `0:2`).  Each copy lasts three quota window spans
  (`replication.quota.window.num` x `replication.quota.window.size.seconds`, 11 x 1 s: 33 s at R); the new
  replica's bytes on disk are sampled every 100 ms and the achieved rate is taken over the steady part: from
  two windows after its first byte (the first window lets one window's worth through at once, as Kafka's
  SimpleRate does) to one window before its last (the ISR join).  Target |achieved / R - 1| <= 5%; the whole
  copy's rate, start and ISR join included, is printed beside it.  Both backlogs are written first and the
  50 MB/s copy starts right after the 10 MB/s one, as an operator raising a throttle would: the quotas still
  hold the first copy's samples.  Each throttled topic is deleted after its copy (the 50 MB/s one is 1.65 GB,
  on two brokers);
* produce latency during a throttled reassignment: acks=all produce p99 at a fixed rate to an RF 2 topic on the
  same two brokers, while the 10 MB/s copy runs, against the same measure just before it (target <= 1.5x);
* unthrottled reassignment of 1 GiB to a new broker: the time from when broker 2 begins to follow the partition
  (its log's became_follower) until it is in the ISR, against replication.py's follower catch-up of the same
  backlog (a follower restarted after its leader took it) (target: the reassignment's rate >= 0.9x).

    python -m tools.bench.reassign [--quick] [--only-throttle]

`--quick` copies for one window span only; `--only-throttle` measures the throttle figures and nothing else.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kjbod.broker.replication.throttle import WINDOW_NUM_DEFAULT, WINDOW_SIZE_SECONDS_DEFAULT

from .common import heading, verdict
from .replication import (
    MIB,
    Cluster,
    _admin,
    _wait,
    began_following,
    catch_up,
    latencies,
    p99,
    produce_throughput,
)

MB = 1_000_000
TARGET_ACCURACY = 0.05
TARGET_LATENCY = 1.5
TARGET_UNTHROTTLED = 0.9
LATENCY_RATE = 500  # records per second


def _kjbod_admin(bootstrap: str):
    from kjbod.admin import SyncAdminClient

    return SyncAdminClient(bootstrap, request_timeout=60)


def create_on(bootstrap: str, topic: str, replicas: list[int], configs: dict[str, str] | None = None) -> None:
    from kjbod.admin.types import NewTopic

    with _kjbod_admin(bootstrap) as kjbod:
        kjbod.create_topics([NewTopic(topic, assignments={0: replicas}, configs=configs or {})])
    admin = _admin(bootstrap)
    _wait(lambda: _isr(admin, topic) == set(replicas), f"{topic} in sync")


def _isr(admin, topic: str) -> set[int]:
    md = admin.list_topics(topic, timeout=10).topics.get(topic)
    return set(md.partitions[0].isrs) if md and md.partitions and md.partitions[0].leader >= 0 else set()


def set_rates(bootstrap: str, rate: int | None) -> None:
    """Both inter-broker rates on the cluster default broker resource (None: removed)."""
    from kjbod.admin.types import ConfigResource, ConfigResourceType

    value = None if rate is None else str(rate)
    with _kjbod_admin(bootstrap) as admin:
        admin.incremental_alter_configs({ConfigResource(ConfigResourceType.BROKER, ""): {
            "leader.replication.throttled.rate": value, "follower.replication.throttled.rate": value}})


def replica_bytes(cluster: Cluster, broker: int, topic: str) -> int:
    """Bytes of the segments of `topic`-0 in the broker's log dirs."""
    total = 0
    for d in (cluster.dir / f"broker-{broker}").iterdir():
        part = d / f"{topic}-0"
        if part.is_dir():
            total += sum(f.stat().st_size for f in part.glob("*.log"))
    return total


class Sampler(threading.Thread):
    """(time, bytes) of the new replica every 100 ms until stopped."""

    def __init__(self, cluster: Cluster, broker: int, topic: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.broker, self.topic = cluster, broker, topic
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.samples.append((time.monotonic(), replica_bytes(self.cluster, self.broker, self.topic)))
            except OSError:  # a segment rolled or the dir appeared between listing and stat
                pass
            self.stop.wait(0.1)


@dataclass
class Steady:
    """A throttled copy's rate over its steady part: from 2 windows after the first sample with any byte to 1
    window before the first one with all of them."""

    rate: float  # bytes per second
    samples: int  # the samples in the steady part
    seconds: float  # its length
    whole: float  # bytes per second from the first byte to the last


def steady_part(samples: list[tuple[float, int]], final: int, window_s: float) -> Steady:
    first = next(t for t, b in samples if b > 0)
    last = next(t for t, b in samples if b >= final)
    steady = [(t, b) for t, b in samples if first + 2 * window_s <= t <= last - window_s]
    if len(steady) < 2:
        raise ValueError(f"a copy of {last - first:.1f} s has no steady part (2 windows of {window_s:g} s after its "
                         "first byte, 1 before its last)")
    (t0, b0), (t1, b1) = steady[0], steady[-1]
    return Steady((b1 - b0) / (t1 - t0), len(steady), t1 - t0, final / (last - first))


def moved(cluster: Cluster, topic: str, *, during=None) -> tuple[float, Sampler, object]:
    """Reassigns `topic`-0 from (1) to (1, 2); returns (seconds from broker 2 beginning to follow until it is in
    the ISR, the sampler of the new replica's bytes, what `during()` returned: called once a tenth is copied)."""
    total = replica_bytes(cluster, 1, topic)
    log = cluster.dir / "broker-2" / "server.log"
    skip = log.stat().st_size
    sampler = Sampler(cluster, 2, topic)
    sampler.start()
    with _kjbod_admin(cluster.bootstrap) as admin:
        answer = admin.alter_partition_reassignments({(topic, 0): [1, 2]})
    if any(code for code, _ in answer.values()):
        raise RuntimeError(f"reassignment of {topic} refused: {answer}")
    _wait(lambda: any(b >= 0.1 * total for _, b in sampler.samples), f"{topic}: 10% copied", timeout=600)
    extra = during() if during is not None else None
    admin = _admin(cluster.bootstrap)
    _wait(lambda: 2 in _isr(admin, topic), f"{topic}: the new replica in the ISR", timeout=1800)
    done = time.time()
    _wait(lambda: bool(sampler.samples) and sampler.samples[-1][1] >= total, f"{topic}: all of it on broker 2")
    sampler.stop.set()
    sampler.join()
    return done - began_following(log, skip, topic), sampler, extra


def throttled(cluster: Cluster, rate: int, *, latency_seconds: float = 0.0
              ) -> tuple[Steady, tuple[list[float], list[float]]]:
    """The steady rate of the copy of topic throttled-<rate> at `rate`, and (p99 without, p99 during) when
    latency_seconds; the topic is deleted afterwards."""
    topic = f"throttled-{rate // MB}"
    set_rates(cluster.bootstrap, rate)
    before: list[float] = []
    if latency_seconds:
        before = latencies(cluster.bootstrap, "latency", "all", LATENCY_RATE, latency_seconds)

    def during() -> list[float]:
        return latencies(cluster.bootstrap, "latency", "all", LATENCY_RATE, latency_seconds) if latency_seconds else []

    try:
        _seconds, sampler, lat = moved(cluster, topic, during=during)
    finally:
        set_rates(cluster.bootstrap, None)
    steady = steady_part(sampler.samples, replica_bytes(cluster, 1, topic), WINDOW_SIZE_SECONDS_DEFAULT)
    with _kjbod_admin(cluster.bootstrap) as admin:
        admin.delete_topics([topic])
    return steady, (before, lat)


def accuracy(cluster: Cluster, quick: bool, out: dict[str, float]) -> None:
    """The throttle figures at 10 and 50 MB/s (and the produce p99 during the 10 MB/s copy) into `out`.  Both
    backlogs are written first, so the second copy starts right after the first."""
    span_s = WINDOW_NUM_DEFAULT * WINDOW_SIZE_SECONDS_DEFAULT
    spans = 1 if quick else 3
    print(f"   quota windows: replication.quota.window.num={WINDOW_NUM_DEFAULT} x "
          f"replication.quota.window.size.seconds={WINDOW_SIZE_SECONDS_DEFAULT}: one span is {span_s} s; each copy "
          f"lasts {spans} span(s) at its rate")
    rates = (10 * MB, 50 * MB)
    for rate in rates:
        topic = f"throttled-{rate // MB}"
        create_on(cluster.bootstrap, topic, [1], {"leader.replication.throttled.replicas": "0:1",
                                                  "follower.replication.throttled.replicas": "0:2"})
        produce_throughput(cluster.bootstrap, topic, "1", rate * span_s * spans)
    for rate in rates:
        steady, (before, during) = throttled(
            cluster, rate, latency_seconds=(4.0 if quick else 8.0) if rate == 10 * MB else 0.0)
        x = steady.rate / rate
        print(f"   throttle at {rate // MB} MB/s: {steady.rate / MB:.2f} MB/s over the steady {steady.seconds:.1f} s "
              f"({steady.samples} samples) = {x:.3f}x (|x - 1| {abs(x - 1):.1%}, target <= {TARGET_ACCURACY:.0%}: "
              f"{verdict(abs(x - 1) <= TARGET_ACCURACY)}); the whole copy, start and ISR join included: "
              f"{steady.whole / MB:.2f} MB/s; load average {os.getloadavg()[0]:.1f}")
        out[f"reassign_throttle_{rate // MB}mbs_achieved_vs_rate"] = x
        if before and during:
            ratio = p99(during) / p99(before)
            print(f"   acks=all produce p99 at {LATENCY_RATE} records/s on the same brokers: {p99(during):.1f} ms "
                  f"during the {rate // MB} MB/s reassignment, {p99(before):.1f} ms just before: {ratio:.2f}x "
                  f"(target <= {TARGET_LATENCY}x: {verdict(ratio <= TARGET_LATENCY)})")
            out["reassign_p99_during_throttled_vs_without"] = ratio


def run(quick: bool = False, only_throttle: bool = False) -> dict:
    heading(f"Reassignment on 3 brokers ({os.cpu_count()} cores shared by the brokers, the controller and the load "
            "generator)")
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-reassign-", dir=os.environ.get("KJBOD_BENCH_DIR") or None))
    cluster = Cluster(work)
    out: dict[str, float] = {}
    try:
        create_on(cluster.bootstrap, "latency", [1, 2])
        produce_throughput(cluster.bootstrap, "latency", "all", 8 * MIB)  # warm up
        accuracy(cluster, quick, out)
        if only_throttle:
            return out
        backlog = (64 if quick else 1024) * MIB
        create_on(cluster.bootstrap, "unthrottled", [1])
        produce_throughput(cluster.bootstrap, "unthrottled", "1", backlog)
        reassign_s, _sampler, _ = moved(cluster, "unthrottled")
        follower_s, _consumer_s = catch_up(cluster, backlog)
        ratio = follower_s / reassign_s
        print(f"   unthrottled reassignment of {backlog // MIB} MiB to a new broker: {reassign_s:.2f} s "
              f"({backlog / reassign_s / MB:.1f} MB/s) from following to in the ISR; follower catch-up of the same "
              f"backlog {follower_s:.2f} s ({backlog / follower_s / MB:.1f} MB/s): {ratio:.2f}x "
              f"(target >= {TARGET_UNTHROTTLED}x: {verdict(ratio >= TARGET_UNTHROTTLED)})")
        out["reassign_unthrottled_vs_follower_catch_up"] = ratio
        return out
    finally:
        cluster.down()
        os.environ.pop("KJBOD_FAULTS", None)
        shutil.rmtree(work, ignore_errors=True)  # gigabytes: the deleted topics' files go only after a delay


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.reassign", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only-throttle", action="store_true")
    args = ap.parse_args(argv)
    run(args.quick, args.only_throttle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
