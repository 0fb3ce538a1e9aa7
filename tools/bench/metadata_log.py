"""Restart with a 200,000-record metadata log, with and without a snapshot, against an empty log.

Strategy: one metadata log of 200,000 records as a controller writes them (1,000 PartitionRecords, then
PartitionChangeRecords moving their leaders, 100 records a batch), and a copy of it with a snapshot at its end
holding the image (the 1,000 partitions). Two measures, each the median of 3 runs, the three logs interleaved:

* `kjbod serve` of a combined node, from the process start until its broker listener accepts connections (what a
  restart costs an operator), for an empty metadata log, the big log, and the big log with the snapshot;
* `MetadataLog.load()` alone in this process (the part the snapshot bounds).

Target (issue 13): with a snapshot, within 2x of an empty log, i.e. `..._empty_over_snapshot` >= 0.5.
"""

from __future__ import annotations

import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tools.bench.common import heading

RECORDS = 200_000
PARTITIONS = 1_000
PER_BATCH = 100
ROUNDS = 3


def _records(n: int):
    from kjbod.protocol.generated import PartitionChangeRecord, PartitionRecord

    topic_id = uuid.UUID(int=7)
    image = [PartitionRecord(partition_id=p, topic_id=topic_id, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1,
                             leader_epoch=0, partition_epoch=0) for p in range(PARTITIONS)]
    changes = [PartitionChangeRecord(partition_id=i % PARTITIONS, topic_id=topic_id, leader=1 + i % 3)
               for i in range(n - PARTITIONS)]
    return image, image + changes


def _build(root: Path, n: int, snapshot: bool) -> None:
    from kjbod.storage.metadata_log import MetadataLog

    image, records = _records(n)
    mlog = MetadataLog(str(root))
    mlog.load()
    for i in range(0, len(records), PER_BATCH):
        mlog.append(records[i:i + PER_BATCH])
    if snapshot:
        mlog.write_snapshot(image, mlog.high_watermark)
    mlog.close()


def _load_seconds(root: Path) -> float:
    from kjbod.storage.metadata_log import MetadataLog

    started = time.perf_counter()
    mlog = MetadataLog(str(root), writer=False)
    mlog.load()
    took = time.perf_counter() - started
    mlog.close()
    return took


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_seconds(node: Path) -> float:
    port, cport = _free_port(), _free_port()
    config = node / "server.properties"
    config.write_text(f"node.id=1\nprocess.roles=broker,controller\n"
                      f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}\n"
                      f"controller.listener.names=CONTROLLER\nlog.dirs={node / 'logs'}\n"
                      f"metadata.log.dir={node / 'meta'}\n")
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "kjbod", "serve", "-c", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"kjbod serve in {node} exited with {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return time.perf_counter() - started
            except OSError:
                time.sleep(0.01)
    finally:
        proc.terminate()
        proc.wait(30)


def _node(base: Path, name: str, n: int, snapshot: bool | None, cluster_id: str) -> Path:
    node = base / name
    (node / "logs").mkdir(parents=True)
    (node / "meta").mkdir()
    config = node / "server.properties"
    config.write_text(f"node.id=1\nprocess.roles=broker,controller\nlog.dirs={node / 'logs'}\n"
                      f"metadata.log.dir={node / 'meta'}\ncontroller.listener.names=CONTROLLER\n"
                      "listeners=PLAINTEXT://127.0.0.1:1,CONTROLLER://127.0.0.1:2\n")
    subprocess.run([sys.executable, "-m", "kjbod", "format", "-c", str(config), f"--cluster-id={cluster_id}"],
                   check=True, capture_output=True)
    if snapshot is not None:
        _build(node / "meta", n, snapshot)
    return node


def run(quick: bool = False) -> dict:
    n = 20_000 if quick else RECORDS
    heading(f"Metadata log restart: {n:,} records ({PARTITIONS:,} partitions, then leader changes), "
            "with and without a snapshot of the image, against an empty log")
    base = Path(tempfile.mkdtemp(prefix="kjbod-bench-mlog-"))
    try:
        cluster_id = subprocess.run([sys.executable, "-m", "kjbod", "random-uuid"], check=True,
                                    capture_output=True, text=True).stdout.strip()
        nodes = {"empty": _node(base, "empty", n, None, cluster_id),
                 "log": _node(base, "log", n, False, cluster_id),
                 "snapshot": _node(base, "snapshot", n, True, cluster_id)}
        serve: dict[str, list[float]] = {k: [] for k in nodes}
        load: dict[str, list[float]] = {k: [] for k in nodes}
        for _ in range(ROUNDS):
            for name, node in nodes.items():
                load[name].append(_load_seconds(node / "meta"))
                serve[name].append(_serve_seconds(node))
        s = {k: statistics.median(v) for k, v in serve.items()}
        ld = {k: statistics.median(v) for k, v in load.items()}
        for name in nodes:
            print(f"   {name:>8}: kjbod serve ready in {s[name]:.3f} s; MetadataLog.load() {ld[name]:.3f} s")
        ratio = s["empty"] / s["snapshot"]
        print(f"   serve start, empty over with-snapshot: {ratio:.2f} (target >= 0.5: within 2x of an empty log)")
        return {
            "restart_empty_over_snapshot": ratio,
            "restart_empty_over_log": s["empty"] / s["log"],
            "restart_snapshot_seconds": s["snapshot"],
            "restart_log_seconds": s["log"],
            "restart_empty_seconds": s["empty"],
            "load_snapshot_seconds": ld["snapshot"],
            "load_log_seconds": ld["log"],
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
