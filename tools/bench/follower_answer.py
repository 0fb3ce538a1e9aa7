"""A follower's handling of one fetch answer, in process: the event loop's and the dir worker's CPU per answer.

The replication bench's per-broker CPU moves with everything else the shared cores run; this isolates the
follower. One Fetcher (kjbod.broker.replication.fetcher) follows one partition on a real log with a real dir
worker, on uvloop, in this process; its leader is a stand-in that answers each fetch at once (in the next loop
pass) with one batch of one 1 KiB record, so every answer is one replicated record and the fetcher never waits.
Per variant it prints the loop's and the worker's CPU per answer (each thread's /proc schedstat) and their
context switches per answer; ``--way general`` switches the fetcher's short way (_Lane) off, ``--way both`` runs
both in turns. ``--calls`` profiles the worker's thread with cProfile instead and prints its Python calls per
answer (a figure no load changes) and the functions called most.

    python -m tools.bench.follower_answer [--answers N] [--way short|general|both] [--rounds R] [--calls]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import struct
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.replication.fetcher import Fetcher
from kjbod.metadata import MetadataImage
from kjbod.metadata.image import PartitionImage, TopicImage
from kjbod.protocol.generated import FetchResponse
from kjbod.protocol.generated.fetch_response import FetchableTopicResponse, PartitionData
from kjbod.storage import fsio, workers
from kjbod.storage.config import LogConfig
from kjbod.storage.log import PartitionLog
from kjbod.storage.records import build_batch
from kjbod.storage.workers import DirWorker

TOPIC_ID = uuid.UUID(int=77)
VERSION = 17
WARM_UP = 500
PAYLOAD = b"x" * 1024


def _image() -> MetadataImage:
    topic = TopicImage("t", TOPIC_ID, {0: PartitionImage(0, (1, 2), (1, 2), 1, 0, 0)}, {})
    return MetadataImage(topics_by_name={"t": topic}, topics_by_id={TOPIC_ID: topic}, brokers={})


def _schedstat(tid: int) -> tuple[int, int, int]:
    """The thread's CPU ns so far, and its voluntary and involuntary context switches."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        cpu = int(f.read().split()[0])
    with open(f"/proc/self/task/{tid}/status") as f:
        fields = dict(line.split(":", 1) for line in f.read().splitlines())
    return cpu, int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"])


class _Leader:
    """What the fetcher's connection does, answering each fetch in the next loop pass with one record at the
    offset the follower's log ends at; `done` is resolved after `left` answers."""

    host, port = "127.0.0.1", 1
    write_paused = False
    closed = False

    def __init__(self, loop: asyncio.AbstractEventLoop, offset: int, left: int) -> None:
        self.loop = loop
        self.offset = offset
        self.left = left
        self.done: asyncio.Future[None] = loop.create_future()

    def pick_version(self, *_args: Any) -> int:
        return VERSION

    def _frame(self) -> bytes:
        records = build_batch([(None, PAYLOAD, (), 1_700_000_000_000)], base_offset=self.offset,
                              partition_leader_epoch=0)
        self.offset += 1
        body = FetchResponse(responses=[FetchableTopicResponse(topic_id=TOPIC_ID, partitions=[PartitionData(
            partition_index=0, high_watermark=self.offset, last_stable_offset=self.offset, log_start_offset=0,
            aborted_transactions=None, records=records)])]).encode(VERSION)
        return struct.pack(">i", 0) + b"\x00" + body  # a correlation id and the header's tags, as a leader's

    def _answer(self, token: Any) -> None:
        if self.left <= 0:
            if not self.done.done():
                self.done.set_result(None)
            return
        self.left -= 1
        frame = self._frame()
        # The task's own fetch (a future) gets the body, which its request() decodes; the callbacks' the frame.
        self.loop.call_soon(token.set_result, frame[5:] if isinstance(token, asyncio.Future) else frame)

    def send_to(self, _key: int, version: int, message: Any, token: Any, client_id: str | None = None) -> None:
        message.encode_into([], version)
        self._answer(token)

    def send_body(self, _key: int, _version: int, _body: bytes, token: Any) -> None:
        self._answer(token)

    async def request(self, key: int, version: int, message: Any, timeout: float) -> Any:
        future = self.loop.create_future()
        self.send_to(key, version, message, future)
        return FetchResponse.decode(await future, VERSION)

    def close(self, reason: Any = None) -> None:
        pass


async def _follow(plog: PartitionLog, worker: DirWorker, answers: int, short: bool) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    node = SimpleNamespace(
        node_id=2, broker_epoch=5, metadata=_image(),
        config=SimpleNamespace(listeners=[], controller_listener_names=()),
        logs=SimpleNamespace(manager=SimpleNamespace(find=lambda t, p: plog, get_future=lambda t, p: None,
                                                     worker=lambda path: worker)),
        notify_append=lambda t, p: None, notify_high_watermark=lambda t, p: None)
    manager = ReplicaManager(node, ReplicationConfig(), clock=lambda: int(time.time() * 1000))
    fetcher = Fetcher(manager, 1, 0)
    if not short:
        fetcher._new_lane = lambda *_args: None  # type: ignore[method-assign]
    leader = _Leader(loop, plog.log_end_offset, answers)
    fetcher._conn = leader  # type: ignore[assignment]
    fetcher.add(("t", 0), 0)
    me, them = threading.get_native_id(), worker._thread.native_id
    assert them is not None
    before = _schedstat(me), _schedstat(them)
    fetcher.start()
    await leader.done
    after = _schedstat(me), _schedstat(them)
    await fetcher.close()
    (l0, lv0, li0), (w0, wv0, wi0) = before
    (l1, lv1, li1), (w1, wv1, wi1) = after
    return {"loop_us": (l1 - l0) / answers / 1e3, "worker_us": (w1 - w0) / answers / 1e3,
            "loop_switches": (lv1 - lv0 + li1 - li0) / answers, "worker_switches": (wv1 - wv0 + wi1 - wi0) / answers}


async def _run(args: argparse.Namespace) -> None:
    ways = ["short", "general"] if args.way == "both" else [args.way]
    with tempfile.TemporaryDirectory(prefix="kjbod-bench-follower-") as tmp:
        io = fsio.LogDirIO(str(Path(tmp) / "d"))
        io.mkdir(io.path, parents=True)
        plog = PartitionLog.create(io, io.join("t-0"), "t", 0, "3uI2M2AbQVO0J2cYw2xvOA", LogConfig())
        profiles: list[cProfile.Profile] = []
        if args.calls:
            real_run = DirWorker._run

            def profiled(self: DirWorker) -> None:
                profile = cProfile.Profile(time.thread_time)
                profiles.append(profile)
                profile.enable()
                try:
                    real_run(self)
                finally:
                    profile.disable()

            DirWorker._run = profiled  # type: ignore[method-assign]
        worker = DirWorker(io)
        try:
            for way in ways:
                await _follow(plog, worker, WARM_UP, way == "short")
            for r in range(args.rounds):
                for way in ways:
                    got = await _follow(plog, worker, args.answers, way == "short")
                    print(f"   round {r + 1}, {way} way: loop {got['loop_us']:.1f} us, dir worker "
                          f"{got['worker_us']:.1f} us CPU an answer; context switches an answer: loop "
                          f"{got['loop_switches']:.2f}, worker {got['worker_switches']:.2f}")
        finally:
            worker.stop()
            worker.join(10)
            plog.close_quietly()
        if profiles:
            stats = pstats.Stats(profiles[0])
            n = (WARM_UP + args.answers * args.rounds) * len(ways)
            print(f"   the dir worker: {stats.total_calls / n:.1f} Python calls an answer "  # type: ignore[attr-defined]
                  f"({', '.join(ways)} way); the most called (calls an answer, function):")
            rows = sorted(stats.stats.items(), key=lambda kv: kv[1][1], reverse=True)  # type: ignore[attr-defined]
            for (file, line, func), (_cc, nc, _tt, _ct, _callers) in rows[:25]:
                print(f"     {nc / n:6.2f}  {func} ({Path(file).name}:{line})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.follower_answer", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--answers", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--way", choices=["short", "general", "both"], default="both")
    ap.add_argument("--calls", action="store_true")
    args = ap.parse_args(argv)
    import uvloop

    print(f"== A follower's fetch answers in process ({args.answers} a round, one 1 KiB record each, uvloop; "
          f"the short wait {'on' if workers._may_wait() else 'off: no Placement here'})")
    uvloop.run(_run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
