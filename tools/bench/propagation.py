"""Metadata propagation benchmark: CreateTopics of 1,000 partitions on a 3-broker cluster until every broker's
Metadata shows a leader for every partition, against the same create on one combined broker+controller node; and
the growth from 1,000 to 10,000 partitions on the cluster.

The cluster is `kjbod cluster up --detach --brokers 3 --log-dirs 1` (a controller and three broker-only processes
that follow the controller's metadata log); the reference is one `process.roles=broker,controller` node with one
log dir, which applies the same records in its own process.  Nothing is pinned (the cluster's four processes share
the machine as the combined node does) and every node logs as `kjbod serve` does by default.  A round sends one
CreateTopics (a new topic, replication factor 1) to broker 1 and then polls Metadata v12 for that topic on every
broker, each until all partitions have a leader; the time is from the send to the last broker's complete answer.
Rounds alternate cluster and combined node; the report gives medians.  Targets: cluster / combined <= 1.5x at
1,000 partitions; 10,000 / 1,000 partitions on the cluster <= 12x (close to linear).

    python -m tools.bench.propagation [--rounds N] [--quick]
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kjbod.protocol.generated import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)

from .common import heading, median, verdict
from .controller import call, frame
from .server import _free_port, _stop, _wait_listening

ROOT = Path(__file__).resolve().parents[2]
TARGET_VS_COMBINED = 1.5
TARGET_GROWTH = 12.0
WAIT_S = 600.0


def _kjbod(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kjbod", *args], capture_output=True, text=True, cwd=ROOT,
                          check=True, **kw)  # type: ignore[call-overload]


def start_cluster(work: Path, *, name: str = "cluster", log_dirs: int = 1,
                  env: dict[str, str] | None = None) -> list[int]:
    """`kjbod cluster up --detach` in `work/name` with three brokers of `log_dirs` dirs each (`env` added to the
    nodes' environment); returns the brokers' ports."""
    out = _kjbod("cluster", "up", "--detach", "--brokers", "3", "--log-dirs", str(log_dirs), "--dir",
                 str(work / name), timeout=300, env={**os.environ, **env} if env else None).stdout
    line = next(x for x in out.splitlines() if x.startswith("bootstrap.servers="))
    return [int(hp.rpartition(":")[2]) for hp in line.partition("=")[2].split(",")]


def start_combined(work: Path) -> tuple[subprocess.Popen[bytes], int]:
    port, cport = _free_port(), _free_port()
    home = work / "combined"
    home.mkdir()
    config = home / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in {
        "node.id": "1", "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "controller.listener.names": "CONTROLLER", "log.dirs": str(home / "logs"),
        "metadata.log.dir": str(home / "metadata")}.items()))
    _kjbod("format", "-c", str(config), timeout=120)
    with open(home / "server.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kjbod", "serve", "-c", str(config)], stdout=log,
                                stderr=subprocess.STDOUT, cwd=ROOT)
    _wait_listening(proc, port, "combined node")
    return proc, port


def _all_led(sock: socket.socket, topic: str, partitions: int) -> bool:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    md = call(sock, frame(3, 12, req), MetadataResponse, 12)
    (t,) = md.topics  # type: ignore[attr-defined]
    return t.error_code == 0 and len(t.partitions) == partitions and all(p.leader_id >= 0 for p in t.partitions)


def propagate(ports: list[int], topic: str, partitions: int) -> float:
    """Seconds from CreateTopics (to the first port) until every port's Metadata shows every leader."""
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
        return time.perf_counter() - started
    finally:
        for sock in socks:
            sock.close()


def sessions_expired(cluster: Path) -> int:
    """How many times the cluster's controller fenced a broker whose session expired (from its log)."""
    log = cluster / "controller" / "server.log"
    return log.read_text(errors="replace").count('"broker_session_expired"') if log.is_file() else 0


def run(rounds: int = 5, seconds: float = 0.0, quick: bool = False) -> dict:
    small, large = (200, 2000) if quick else (1000, 10000)
    if quick:
        rounds = 2
    heading(f"Metadata propagation: CreateTopics of {small:,} partitions until every broker shows every leader, "
            f"3-broker cluster vs one combined node; growth to {large:,}")
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-propagation-", dir=os.environ.get("KJBOD_BENCH_DIR") or None))
    combined = None
    try:
        cluster_ports = start_cluster(work)
        combined, combined_port = start_combined(work)
        propagate(cluster_ports, "warm-cluster", 10)
        propagate([combined_port], "warm-combined", 10)
        on_cluster, on_combined = [], []
        for r in range(rounds):
            on_cluster.append(propagate(cluster_ports, f"cluster-{r}", small))
            on_combined.append(propagate([combined_port], f"combined-{r}", small))
        grown = propagate(cluster_ports, "cluster-large", large)
        ratio = median([c / s for c, s in zip(on_cluster, on_combined, strict=True)])
        growth = grown / median(on_cluster)
        print(f"   rounds (s): cluster {', '.join(f'{x:.2f}' for x in on_cluster)}; "
              f"combined {', '.join(f'{x:.2f}' for x in on_combined)}")
        print(f"   {small:,} partitions: cluster {median(on_cluster):.2f} s, combined node {median(on_combined):.2f} s: "
              f"{ratio:.2f}x (target <= {TARGET_VS_COMBINED}x: {verdict(ratio <= TARGET_VS_COMBINED)})")
        print(f"   {large:,} partitions on the cluster: {grown:.2f} s, {growth:.2f}x the {small:,} time "
              f"(target <= {TARGET_GROWTH}x: {verdict(growth <= TARGET_GROWTH)})")
        # A broker too busy applying a create to heartbeat is fenced, and leading its partitions again costs as
        # much once more: the figures above are only meaningful without that.
        print(f"   brokers fenced for a missed session during the runs: {sessions_expired(work / 'cluster')}")
        return {"propagation_cluster_vs_combined": ratio, "propagation_growth_10x_partitions": growth,
                "propagation_cluster_seconds": median(on_cluster)}
    finally:
        subprocess.run([sys.executable, "-m", "kjbod", "cluster", "down", "--dir", str(work / "cluster")],
                       capture_output=True, cwd=ROOT, timeout=300)
        if combined is not None:
            _stop(combined)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    from .common import rounds_main

    return rounds_main("python -m tools.bench.propagation", __doc__, run, argv, rounds=5)


if __name__ == "__main__":
    raise SystemExit(main())
