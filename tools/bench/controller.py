"""Controller benchmarks: heartbeat throughput, and restart time with a long metadata log.

Heartbeats: broker heartbeats per second a controller sustains from 200 simulated brokers, against
ApiVersions per second on the same controller listener.

A controller-only `kjbod serve` (process.roles=controller, uvloop, log level warning) is pinned to one CPU as in
the server benchmark.  200 brokers register over its controller listener (BrokerRegistration v4, each with its own
log dir id) and are unfenced by a first heartbeat.  Then the load generator (tools/bench/loadgen.c) opens one
connection per broker and keeps one heartbeat in flight on each (BrokerHeartbeat v1 with that broker's epoch,
caught up, not asking to be fenced: the steady state of a healthy cluster, which writes no records); the
reference is ApiVersions v3 over the same 200 connections at the same depth.  Rounds alternate the two; the
report gives the median of per-round ratios.  Target: heartbeats >= 50 % of ApiVersions.

Before timing, one heartbeat per broker is decoded: each must answer without error and unfenced (a benchmark
of a controller answering STALE_BROKER_EPOCH would measure the wrong thing).

Restart: the time a controller takes to load its metadata log (replay into the image) with 200,000 records
(1,000 partitions, then leader changes on them, as a long-running cluster accumulates), against an empty log;
and, when the metadata log can write snapshots, with a snapshot of the same image.  Target: with a snapshot,
within 2x of the empty log.  Without snapshots the 200,000-record figure is reported alone.

    python -m tools.bench.controller [--rounds N] [--seconds S] [--quick]
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from kjbod.protocol.generated import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from kjbod.protocol.generated.broker_registration_request import Listener
from kjbod.protocol.generated.request_header import RequestHeader

from .common import heading, median, rounds_main, verdict
from .server import (
    SIZE,
    _free_port,
    _stop,
    api_versions_frame,
    build_loadgen,
    launch_kjbod,
    load_frames,
    serve_kjbod,
)

BROKERS = 200
TARGET = 0.50
CLUSTER_ID = base64.urlsafe_b64encode(uuid.UUID(int=0x6B6A626F64).bytes).decode().rstrip("=")


def frame(api_key: int, version: int, body: object, correlation_id: int = 1) -> bytes:
    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                           client_id="bench-broker").encode(2)
    payload = body.encode(version)  # type: ignore[attr-defined]
    return SIZE.pack(len(header) + len(payload)) + header + payload


def call(sock: socket.socket, request: bytes, response_cls: type, version: int) -> object:
    sock.sendall(request)
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + SIZE.unpack_from(buf)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the controller closed the connection instead of answering")
        buf += chunk
    return response_cls.decode(buf[9:], version)  # type: ignore[attr-defined]  (size, correlation id, tags)


def start_controller(work: Path) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    return serve_kjbod(work, port, {
        "node.id": "3000",
        "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"3000@127.0.0.1:{port}",
        "log.dirs": str(work / "metadata"),
        "broker.session.timeout.ms": "600000",
    }, f"--cluster-id={CLUSTER_ID}"), port


def register_brokers(port: int) -> list[bytes]:
    """Registers and unfences BROKERS brokers; returns each one's steady-state heartbeat frame."""
    frames = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        for b in range(1, BROKERS + 1):
            reg = call(s, frame(62, 4, BrokerRegistrationRequest(
                broker_id=b, cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4(), log_dirs=[uuid.uuid4()],
                listeners=[Listener(name="PLAINTEXT", host="127.0.0.1", port=20000 + b)])), BrokerRegistrationResponse, 4)
            if reg.error_code != 0:  # type: ignore[attr-defined]
                raise RuntimeError(f"broker {b}: registration answered error {reg.error_code}")  # type: ignore
            beat = frame(63, 1, BrokerHeartbeatRequest(broker_id=b, broker_epoch=reg.broker_epoch,  # type: ignore
                                                       current_metadata_offset=1 << 40))
            answer = call(s, beat, BrokerHeartbeatResponse, 1)
            if answer.error_code != 0 or answer.is_fenced:  # type: ignore[attr-defined]
                raise RuntimeError(f"broker {b}: heartbeat answered {answer}")
            frames.append(beat)
    return frames


RESTART_RECORDS = 200_000
RESTART_TOPICS, RESTART_PARTITIONS = 10, 100


def write_long_log(directory: Path, total: int) -> None:
    """A metadata log of `total` records: topics and partitions, then leader changes, in batches of 1,000."""
    from kjbod.protocol.generated import PartitionChangeRecord, PartitionRecord, TopicRecord
    from kjbod.storage.metadata_log import MetadataLog

    mlog = MetadataLog(str(directory))
    mlog.load()  # (after `kjbod format`, which made the dir)
    try:
        ids = [uuid.UUID(int=(t + 1) << 64) for t in range(RESTART_TOPICS)]
        base: list[object] = []
        for t, tid in enumerate(ids):
            base.append(TopicRecord(name=f"topic-{t}", topic_id=tid))
            base += [PartitionRecord(partition_id=p, topic_id=tid, replicas=[1], isr=[1], leader=1, leader_epoch=0,
                                     partition_epoch=0) for p in range(RESTART_PARTITIONS)]
        mlog.append(base)
        written = len(base)
        while written < total:
            n = min(1000, total - written)
            mlog.append([PartitionChangeRecord(topic_id=ids[(written + i) % RESTART_TOPICS],
                                               partition_id=(written + i) // RESTART_TOPICS % RESTART_PARTITIONS,
                                               leader=1 if (written + i) % 2 else -1) for i in range(n)])
            written += n
    finally:
        mlog.close()


def start_seconds(work: Path, port: int) -> float:
    """Seconds from `kjbod serve` (controller only, already formatted in `work`) to its listener accepting."""
    start = time.perf_counter()
    proc = launch_kjbod(work, port)
    elapsed = time.perf_counter() - start
    _stop(proc)
    return elapsed


def restart(rounds: int) -> dict:
    heading(f"Controller restart: start with a {RESTART_RECORDS:,}-record metadata log vs an empty one")
    base = Path(tempfile.mkdtemp(prefix="kjbod-bench-restart-", dir=os.environ.get("KJBOD_BENCH_DIR") or None))
    try:
        servers = {}
        for name in ("empty", "long"):
            (base / name).mkdir()
            proc, port = start_controller(base / name)
            _stop(proc)
            servers[name] = port
        write_long_log(base / "long" / "metadata", RESTART_RECORDS)
        times: dict[str, list[float]] = {"empty": [], "long": []}
        for _ in range(rounds):
            for name, port in servers.items():
                times[name].append(start_seconds(base / name, port))
        t_empty, t_long = median(times["empty"]), median(times["long"])
        print(f"   empty log {t_empty:,.2f} s; {RESTART_RECORDS:,} records {t_long:,.2f} s "
              f"({t_long / t_empty:.1f}x the empty log)")
        out = {"controller_restart_empty_seconds": t_empty, "controller_restart_200k_records_seconds": t_long}
        from kjbod.storage.metadata_log import MetadataLog

        if not hasattr(MetadataLog, "write_snapshot"):
            print("   with a snapshot: not measured (this build's metadata log writes no snapshots)")
            return out
        from kjbod.metadata import EMPTY_IMAGE, image_records, replay

        mlog = MetadataLog(str(base / "long" / "metadata"))
        image = replay(EMPTY_IMAGE, mlog.load())
        mlog.write_snapshot(image_records(image), mlog.next_offset)
        mlog.close()
        t_snap = median([start_seconds(base / "long", servers["long"]) for _ in range(rounds)])
        ratio = t_snap / t_empty
        print(f"   with a snapshot {t_snap:,.2f} s: {ratio:.1f}x the empty log (target <= 2x: {verdict(ratio <= 2)})")
        out["controller_restart_empty_vs_snapshot"] = t_empty / t_snap  # higher is better, like every ratio
        return out
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(rounds: int = 5, seconds: float = 2.0, quick: bool = False) -> dict:
    if quick:
        rounds, seconds = 3, 1.0
    out = heartbeats(rounds, seconds)
    out.update(restart(rounds))
    return out


def heartbeats(rounds: int, seconds: float) -> dict:
    heading(f"Controller: BrokerHeartbeat from {BROKERS} brokers vs ApiVersions on the same controller listener")
    loadgen = build_loadgen()
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-controller-", dir=os.environ.get("KJBOD_BENCH_DIR") or None))
    proc = None
    try:
        proc, port = start_controller(work)
        heartbeats = register_brokers(port)
        versions = [api_versions_frame()]
        load_frames(loadgen, port, BROKERS, 1, seconds / 2, heartbeats)  # warm up
        load_frames(loadgen, port, BROKERS, 1, seconds / 2, versions)
        hb, av = [], []
        for _ in range(rounds):
            hb.append(load_frames(loadgen, port, BROKERS, 1, seconds, heartbeats))
            av.append(load_frames(loadgen, port, BROKERS, 1, seconds, versions))
        ratio = median([h / a for h, a in zip(hb, av, strict=True)])
        print(f"   heartbeats {median(hb):,.0f}/s, ApiVersions {median(av):,.0f}/s over {BROKERS} connections "
              f"(one in flight each); heartbeats are {ratio:.0%} (target >= {TARGET:.0%}: {verdict(ratio >= TARGET)})")
        return {"controller_heartbeats_vs_api_versions": ratio}
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return rounds_main("python -m tools.bench.controller", __doc__, run, argv, rounds=5)


if __name__ == "__main__":
    raise SystemExit(main())
