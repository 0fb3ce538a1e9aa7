"""The leader's side of a replica fetcher's fetch round trip, in process: Python calls and time per round trip with
the short way (kjbod.broker.handlers.follower_fetch_fast) against the general way on the same leader (its router's
short way turned off).

One leader of t-0 (RF 3) on a real PartitionLog whose dir has an idle worker (reads of the page cache on the loop,
as a caught-up follower's fetch is read); per record, as in the latency rounds: followers 2 and 3 each fetch at
the log end through the router (the frames a replica fetcher sends, v17) and park, a batch of one 1 KiB record is
appended (on the dir's worker in a broker: not counted here), and the append's wake-up answers both. Counted:
the router's handling of the two fetches (checks, the followers' positions, the HW move) and the wake-up with
the reads and answers; not the connection's reads and writes (tools.bench.replication --profile counts those).

    python -m tools.bench.follower_fetch_leader [--records N]
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import struct
import sys
import tempfile
import time
import uuid
from types import SimpleNamespace
from typing import Any

from kjbod.broker.parked_fetches import ParkedFetches
from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.router import Router
from kjbod.metadata import MetadataImage
from kjbod.metadata.image import BrokerRegistration, PartitionImage, TopicImage
from kjbod.protocol.generated import FetchRequest
from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.log import PartitionLog
from kjbod.storage.records import build_batch
from kjbod.wire.handler import Later, RequestContext

from .common import heading

TOPIC_ID = uuid.UUID(int=77)
EPOCHS = {1: 101, 2: 102, 3: 103}
VERSION = 17
RECORD = b"x" * 1024


class _IdleWorker:
    """A dir's worker with nothing queued (kjbod.storage.workers): the loop may read the page cache itself."""

    io = SimpleNamespace(online=True)

    def idle(self) -> bool:
        return True

    def submit(self, job: Any, done: Any, loop: Any = None) -> None:
        """Runs `job` at once (the new leader epoch's write when the leader starts); a failure stops the bench."""
        done(True, job())


class _Leader:
    """What the Fetch handler, the router and the replica manager ask of a broker node, for broker 1."""

    def __init__(self, plog: PartitionLog) -> None:
        p = PartitionImage(0, (1, 2, 3), (1, 2, 3), 1, 0, 0)
        topic = TopicImage("t", TOPIC_ID, {0: p}, {"min.insync.replicas": "2"})
        brokers = {b: BrokerRegistration(b, e, uuid.uuid4()) for b, e in EPOCHS.items()}
        self.metadata = MetadataImage(topics_by_name={"t": topic}, topics_by_id={TOPIC_ID: topic}, brokers=brokers)
        self.node_id, self.broker_epoch = 1, EPOCHS[1]
        self.config = SimpleNamespace(listeners=[], controller_listener_names=())
        worker = _IdleWorker()
        self.logs = SimpleNamespace(manager=SimpleNamespace(
            find=lambda t, n: plog if (t, n) == ("t", 0) else None, get_future=lambda t, n: None,
            worker=lambda path: worker, dir_degraded=lambda path: False))
        self.parked_fetches = ParkedFetches()
        self.stopping = False
        self.topic_stats = None
        self.fetch_max_bytes = 55 * 1024 * 1024
        self.partition_log = self.local_log = lambda t, n: plog
        self.replication = ReplicaManager(self, ReplicationConfig(lag_time_max_ms=30_000))
        self.replication.sync(self.metadata)

    def notify_append(self, topic: str, partition: int) -> None:
        self.parked_fetches.appended((topic, partition))

    def notify_high_watermark(self, topic: str, partition: int) -> None:
        self.parked_fetches.high_watermark_moved((topic, partition))


def _frame(corr: int, replica: int, offset: int) -> bytes:
    part = FetchRequest.FetchPartition(partition=0, current_leader_epoch=0, fetch_offset=offset, last_fetched_epoch=0,
                                       log_start_offset=0, partition_max_bytes=1 << 20)
    body = FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=10 << 20,
                        topics=[FetchRequest.FetchTopic(topic_id=TOPIC_ID, partitions=[part])],
                        replica_state=FetchRequest.ReplicaState(replica_id=replica, replica_epoch=EPOCHS[replica]))
    return struct.pack(">hhih", 1, VERSION, corr, 6) + b"broker\x00" + body.encode(VERSION)


async def _measure(records: int, short: bool, profiled: bool) -> float:
    """Python calls (`profiled`) or us per follower fetch round trip on the leader."""
    with tempfile.TemporaryDirectory() as tmp:
        io = fsio.LogDirIO(f"{tmp}/d0")
        io.mkdir(io.path, parents=True)
        plog = PartitionLog.create(io, io.join("t-0"), "t", 0, "3uI2M2AbQVO0J2cYw2xvOA", LogConfig())
        try:
            node = _Leader(plog)
            router = Router(node)
            if not short:
                for route in router._routes.values():
                    route.follower_fetch = None
            ctx = {r: RequestContext(1000 + r, "127.0.0.1", 1, "PLAINTEXT", "broker") for r in (2, 3)}
            profile = cProfile.Profile()
            corr = 0
            took = 0.0
            for i in range(records + 20):  # the first 20 learn the shapes and warm up, uncounted
                counted = i >= 20
                frames = []
                for r in (2, 3):
                    corr += 1
                    frames.append((_frame(corr, r, plog.log_end_offset), ctx[r]))
                batch = build_batch([(None, RECORD, (), 1_700_000_000_000)], partition_leader_epoch=0)
                if counted and profiled:
                    profile.enable()
                started = time.perf_counter()
                replies: list[Any] = [router.handle(f, c) for f, c in frames]
                took += time.perf_counter() - started if counted else 0.0
                profile.disable()
                plog.append(batch, leader_epoch=0)
                if counted and profiled:
                    profile.enable()
                started = time.perf_counter()
                node.notify_append("t", 0)
                took += time.perf_counter() - started if counted else 0.0
                profile.disable()
                for reply in replies:
                    if reply.__class__ is not Later or not reply.done():
                        raise RuntimeError(f"a follower's fetch at the log end was not parked and woken: {reply!r}")
                    reply.result()
            if profiled:
                return sum(v[1] for v in pstats.Stats(profile).stats.values()) / records / 2  # type: ignore[attr-defined]
            return took / records / 2 * 1e6
        finally:
            plog.close_quietly()


def run(records: int = 2000) -> dict:
    heading(f"The leader's side of a follower fetch round trip, in process ({records} records, 2 followers)")
    out = {}
    for name, short in (("general way", False), ("short way", True)):
        calls = asyncio.run(_measure(records, short, True))
        us = min(asyncio.run(_measure(records, short, False)) for _ in range(3))  # the least disturbed of three
        out[name] = (calls, us)
        print(f"   {name:12s} {calls:6.1f} Python calls, {us:5.1f} us per round trip")
    print(f"   the short way: {out['general way'][0] / out['short way'][0]:.1f}x fewer calls, "
          f"{out['general way'][1] / out['short way'][1]:.1f}x less time")
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    run(int(args[args.index("--records") + 1]) if "--records" in args else 2000)
