"""KIP-858 benchmarks on a real 3-broker cluster (`kjbod cluster up --detach`, every node its own process, default
timers):

* Dir failure to leadership change.  A log dir of one broker fails (the fsio fault seam, `KJBOD_FAULTS`, armed
  while the cluster runs) and one produce request to a partition in it makes the broker find the failure on its
  data path.  The time runs from arming the fault until the metadata of both *other* brokers shows that dir's
  partitions without a leader (RF 1), i.e. until the PartitionChangeRecords are visible there, and is reported
  as a multiple of `broker.heartbeat.interval.ms` (default 2000 ms): the broker reports the dir in an extra
  heartbeat rather than at the next interval.  One round per broker (its second dir: the first holds its
  metadata log); the median is reported.  Target <= 1.5x.
* Assignments.  CreateTopics of 1,000 partitions (RF 1) on 3-dir brokers until every broker shows every leader and
  the controller's metadata log gives every partition a real directory (each broker places its replicas and
  reports them with AssignReplicasToDirs), against the same create on a cluster of 1-dir brokers, whose
  partitions get their broker's only dir in the PartitionRecord (no assignment needed).  The controller's metadata
  log is read as it is written (its segment files; the controller flushes every batch).  Rounds alternate the
  two clusters; the median of the per-round ratios is reported.  Target <= 1.5x.

    python -m tools.bench.kip858 [--rounds N] [--quick]
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kjbod.metadata import is_reserved_dir
from kjbod.protocol.generated import CreateTopicsRequest, CreateTopicsResponse, ProduceResponse
from kjbod.protocol.generated.registry import METADATA_RECORDS
from kjbod.storage.metadata_records import unframe
from kjbod.storage.records import build_batch, iter_batches, iter_records

from .common import heading, median, verdict
from .controller import call, frame
from .datapath import produce_frame
from .propagation import ROOT, WAIT_S, _all_led, start_cluster

TARGET_FAILURE_VS_HEARTBEAT = 1.5
TARGET_ASSIGNMENTS_VS_ONE_DIR = 1.5
HEARTBEAT_MS = 2000  # broker.heartbeat.interval.ms: Kafka's default, which the cluster keeps
TOPIC_RECORD, PARTITION_RECORD, PARTITION_CHANGE_RECORD = 2, 3, 5


class MetadataTail:
    """Reads the controller's metadata log segments as they grow; keeps each partition's Directories of the
    topics it is told to watch (by name)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.positions: dict[Path, int] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.directories: dict[tuple[uuid.UUID, int], list[uuid.UUID]] = {}

    def poll(self) -> None:
        for segment in sorted(self.log_dir.glob("*.log")):
            pos = self.positions.get(segment, 0)
            with open(segment, "rb") as fh:
                fh.seek(pos)
                data = fh.read()
            end = 0
            for start, h in iter_batches(data):
                end = start + h.size
                if h.is_control:
                    continue
                for rec in iter_records(memoryview(data)[start:end]):
                    self._record(rec.value)
            self.positions[segment] = pos + end

    def _record(self, value: bytes | None) -> None:
        if value is None:
            return
        key, version, body = unframe(value)
        if key not in (TOPIC_RECORD, PARTITION_RECORD, PARTITION_CHANGE_RECORD):
            return
        message = METADATA_RECORDS[key].decode(value[body:], version)
        if key == TOPIC_RECORD:
            self.topic_ids[message.name] = message.topic_id
        elif message.directories:
            self.directories[(message.topic_id, message.partition_id)] = list(message.directories)

    def assigned(self, topic: str, partitions: int) -> bool:
        self.poll()
        tid = self.topic_ids.get(topic)
        if tid is None:
            return False
        for p in range(partitions):
            dirs = self.directories.get((tid, p))
            if not dirs or any(is_reserved_dir(d) for d in dirs):
                return False
        return True


def _create_and_wait(ports: list[int], tail: MetadataTail, topic: str, partitions: int) -> float:
    """Seconds from CreateTopics until every broker shows every leader and every directory is assigned."""
    socks = [socket.create_connection(("127.0.0.1", p), timeout=WAIT_S) for p in ports]
    try:
        create = frame(19, 7, CreateTopicsRequest(timeout_ms=int(WAIT_S * 1000), topics=[
            CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1)]))
        started = time.perf_counter()
        resp = call(socks[0], create, CreateTopicsResponse, 7)
        if resp.topics[0].error_code != 0:  # type: ignore[attr-defined]
            raise RuntimeError(f"CreateTopics {topic}: {resp.topics[0].error_message}")  # type: ignore[attr-defined]
        deadline = time.monotonic() + WAIT_S
        for sock in socks:
            while not _all_led(sock, topic, partitions):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{topic}: not every leader shown within {WAIT_S:g}s")
        while not tail.assigned(topic, partitions):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: not every directory assigned within {WAIT_S:g}s")
            time.sleep(0.005)
        return time.perf_counter() - started
    finally:
        for sock in socks:
            sock.close()


def _leaders(port: int, topic: str) -> dict[int, int]:
    from kjbod.protocol.generated import MetadataRequest, MetadataResponse

    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=False)
        md = call(sock, frame(3, 12, req), MetadataResponse, 12)
    (t,) = md.topics  # type: ignore[attr-defined]
    return {p.partition_index: p.leader_id for p in t.partitions}


def _produce_one(port: int, topic: str, partition: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        batch = build_batch([(None, b"x", [], int(time.time() * 1000))])
        resp = call(sock, produce_frame(topic, partition, batch), ProduceResponse, 9)
    return resp.responses[0].partition_responses[0].error_code  # type: ignore[attr-defined]


def _dir_ids(broker_home: Path) -> dict[str, str]:
    """directory.id -> path of each log dir of a broker, in log.dirs order."""
    props = dict(line.split("=", 1) for line in (broker_home / "server.properties").read_text().splitlines()
                 if "=" in line and not line.startswith("#"))
    out = {}
    for path in props["log.dirs"].split(","):
        meta = dict(line.split("=", 1) for line in (Path(path) / "meta.properties").read_text().splitlines()
                    if "=" in line and not line.startswith("#"))
        out[meta["directory.id"]] = path
    return out


def dir_failures(work: Path, partitions: int) -> list[float]:
    """Seconds from a dir failure to its partitions shown leaderless on the other brokers, one per broker."""
    faults = work / "faults.json"
    ports = start_cluster(work, name="failing", log_dirs=3, env={"KJBOD_FAULTS": str(faults)})
    tail = MetadataTail(work / "failing" / "controller" / "metadata" / "__cluster_metadata-0")
    _create_and_wait(ports, tail, "failing", partitions)
    tid = tail.topic_ids["failing"]
    rules: list[dict[str, str]] = []
    out = []
    for b in range(1, len(ports) + 1):
        ids = _dir_ids(work / "failing" / f"broker-{b}")
        second_id, second = list(ids.items())[1]
        led = _leaders(ports[0], "failing")
        doomed = [p for p, leader in led.items() if leader == b and _text(tail.directories[(tid, p)][0]) == second_id]
        if not doomed:
            continue
        others = [port for i, port in enumerate(ports) if i + 1 != b]
        rules.append({"dir": second, "errno": "EIO"})
        tmp = faults.with_suffix(".tmp")
        tmp.write_text(json.dumps({"faults": rules}))
        started = time.perf_counter()
        os.replace(tmp, faults)
        _produce_one(ports[b - 1], "failing", doomed[0])  # the data path finds the failure
        deadline = time.monotonic() + WAIT_S
        for port in others:
            while any(_leaders(port, "failing")[p] != -1 for p in doomed):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker {b}'s failed dir: leadership not moved within {WAIT_S:g}s")
        out.append(time.perf_counter() - started)
    return out


def _text(dir_id: uuid.UUID) -> str:
    from kjbod.storage.ids import uuid_to_str

    return uuid_to_str(dir_id.bytes)


def run(rounds: int = 3, seconds: float = 0.0, quick: bool = False) -> dict:
    partitions = 200 if quick else 1000
    if quick:
        rounds = 2
    heading(f"KIP-858: dir failure to leadership change (x broker.heartbeat.interval.ms); CreateTopics of "
            f"{partitions:,} partitions until every dir is assigned, 3-dir vs 1-dir brokers")
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-kip858-", dir=os.environ.get("KJBOD_BENCH_DIR") or None))
    names = ("failing", "three", "one")
    try:
        failures = dir_failures(work, 60 if quick else 300)
        _stop_cluster(work, "failing")
        three = start_cluster(work, name="three", log_dirs=3)
        one = start_cluster(work, name="one", log_dirs=1)
        tails = {n: MetadataTail(work / n / "controller" / "metadata" / "__cluster_metadata-0") for n in names[1:]}
        _create_and_wait(three, tails["three"], "warm", 10)
        _create_and_wait(one, tails["one"], "warm", 10)
        on_three, on_one = [], []
        for r in range(rounds):
            on_three.append(_create_and_wait(three, tails["three"], f"round-{r}", partitions))
            on_one.append(_create_and_wait(one, tails["one"], f"round-{r}", partitions))
        failure = median(failures) * 1000 / HEARTBEAT_MS
        ratio = median([t / o for t, o in zip(on_three, on_one, strict=True)])
        print(f"   dir failure -> leaderless on the other brokers (s): {', '.join(f'{x:.3f}' for x in failures)}; "
              f"median {median(failures) * 1000:.0f} ms = {failure:.2f}x the {HEARTBEAT_MS} ms heartbeat interval "
              f"(target <= {TARGET_FAILURE_VS_HEARTBEAT}x: {verdict(failure <= TARGET_FAILURE_VS_HEARTBEAT)})")
        print(f"   rounds (s): 3-dir {', '.join(f'{x:.2f}' for x in on_three)}; "
              f"1-dir {', '.join(f'{x:.2f}' for x in on_one)}")
        print(f"   {partitions:,} partitions until every dir is assigned: 3-dir {median(on_three):.2f} s, "
              f"1-dir {median(on_one):.2f} s: {ratio:.2f}x "
              f"(target <= {TARGET_ASSIGNMENTS_VS_ONE_DIR}x: {verdict(ratio <= TARGET_ASSIGNMENTS_VS_ONE_DIR)})")
        return {"kip858_dir_failure_vs_heartbeat_interval": failure, "kip858_assignments_3dir_vs_1dir": ratio,
                "kip858_assignments_3dir_seconds": median(on_three)}
    finally:
        for name in names:
            _stop_cluster(work, name)
        shutil.rmtree(work, ignore_errors=True)


def _stop_cluster(work: Path, name: str) -> None:
    if (work / name).exists():
        subprocess.run([sys.executable, "-m", "kjbod", "cluster", "down", "--dir", str(work / name)],
                       capture_output=True, cwd=ROOT, timeout=300)


def main(argv: list[str] | None = None) -> int:
    from .common import rounds_main

    return rounds_main("python -m tools.bench.kip858", __doc__, run, argv, rounds=3)


if __name__ == "__main__":
    raise SystemExit(main())
