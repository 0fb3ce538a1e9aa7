"""A log dir of a cluster broker failing for real, run as root inside a private mount and pid namespace
(``unshare -m -p -f --kill-child``, by test_dir_failure_live.py): `kjbod cluster up` makes a 3-broker cluster,
which is stopped once so that broker 2's third log dir can be put on an ext4 image on a loop device (its files
copied over), then started again.  Two partitions broker 2 leads are moved into that dir; while a producer keeps
every partition busy, the filesystem is shut down with FS_IOC_SHUTDOWN (every operation on it then fails with
EIO, old fds included).  Prints one JSON object of observations; the namespace takes the cluster's processes,
the mount and the loop device with it whatever happens.

Usage: python realdisk_cluster.py BASE
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1])]

TOPIC = "realdisk"
PARTITIONS = 12
WAIT_S = 120.0


def kjbod(*args: str) -> str:
    from live import COMMAND

    done = subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"kjbod {' '.join(args)}: {done.stdout}{done.stderr}")
    return done.stdout


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {WAIT_S:g}s: {what}")
        time.sleep(0.05)
    return value


def main(base: Path) -> dict:
    from datapath.support import RawClient, batch, create_topic, list_offset, log_events, metadata, produce
    from kip113.realdisk_move import mount_ext4, shutdown
    from live import cluster_ports

    from kjbod.cli.cluster import listen_port
    from kjbod.protocol.generated import AlterReplicaLogDirsRequest as A
    from kjbod.protocol.generated import DescribeClusterRequest, DescribeLogDirsRequest

    root = base / "cluster"
    up = ["cluster", "up", "--detach", "--brokers", "3", "--log-dirs", "3", "--dir", str(root), *cluster_ports(3),
          "--set", "broker.heartbeat.interval.ms=300", "--set", "broker.session.timeout.ms=9000"]
    kjbod(*up)
    kjbod("cluster", "down", "--dir", str(root))
    failing = root / "broker-2" / "logs-2"
    kept = base / "logs-2.kept"
    shutil.copytree(failing, kept)
    shutil.rmtree(failing)
    mount_ext4(base / "logs-2.img", failing, 96)
    shutil.copytree(kept, failing, dirs_exist_ok=True)
    kjbod(*up)
    ports = {b: listen_port(root / f"broker-{b}") for b in (1, 2, 3)}

    def leaders() -> dict[int, int]:
        with RawClient("127.0.0.1", ports[1]) as raw:
            (t,) = metadata(raw, [TOPIC]).topics
        return {p.partition_index: p.leader_id for p in t.partitions}

    with RawClient("127.0.0.1", ports[1]) as raw:
        assert create_topic(raw, TOPIC, PARTITIONS).error_code == 0
    led = wait_for(lambda: (ls := leaders()) and all(v >= 0 for v in ls.values()) and ls, "every leader")
    doomed = sorted(p for p, b in led.items() if b == 2)[:2]

    def hosted(p: int, b: int) -> bool:
        with RawClient("127.0.0.1", ports[b]) as raw:
            return list_offset(raw, TOPIC, p, -1).error_code == 0

    # Broker 1's metadata is not every broker's: a loaded broker may not have applied the topic yet (its
    # AlterReplicaLogDirs then answers UNKNOWN_TOPIC_OR_PARTITION) or made its logs (a produce is refused, and
    # counted as an error below). Each leader serving its partitions is where the test starts.
    wait_for(lambda: all(hosted(p, b) for p, b in led.items()), "every leader hosts its partitions")

    def moved() -> bool:
        # REPLICA_NOT_AVAILABLE (9) while broker 2 is still making its replicas (on its dirs' workers, after the
        # metadata named it): asked again, as Kafka's tool does
        with RawClient("127.0.0.1", ports[2]) as raw:
            resp = raw.call(A(dirs=[A.AlterReplicaLogDir(path=str(failing), topics=[A.AlterReplicaLogDirTopic(
                name=TOPIC, partitions=doomed)])]), 2)
        codes = [r.error_code for t in resp.results for r in t.partitions]
        assert set(codes) <= {0, 9}, resp
        return codes == [0, 0]

    wait_for(moved, "AlterReplicaLogDirs of the two partitions accepted")
    wait_for(lambda: all((failing / f"{TOPIC}-{p}").is_dir() for p in doomed), "the moves into the ext4 dir")

    answers: Counter[tuple[int, int]] = Counter()
    stop = threading.Event()

    def produce_all() -> None:
        clients = {b: RawClient("127.0.0.1", ports[b]) for b in set(led.values())}
        try:
            while not stop.is_set():
                for p, b in led.items():
                    answers[(p, produce(clients[b], TOPIC, p, batch([b"m"]), acks=1).error_code)] += 1
        finally:
            for c in clients.values():
                c.close()

    producer = threading.Thread(target=produce_all, daemon=True)
    producer.start()
    wait_for(lambda: all(answers[(p, 0)] for p in led), "every partition takes produce requests")
    started = time.monotonic()
    shutdown(str(failing))
    fenced: list[bool] = []

    def moved() -> bool:
        with RawClient("127.0.0.1", ports[1]) as raw:
            brokers = raw.call(DescribeClusterRequest(include_fenced_brokers=True), 2).brokers
        fenced.append(next(b.is_fenced for b in brokers if b.broker_id == 2))
        now = leaders()
        return all(now[p] == -1 for p in doomed) and all(now[p] == led[p] for p in led if p not in doomed)

    wait_for(moved, "the ext4 dir's partitions leaderless, the others led as before")
    seconds = time.monotonic() - started
    spared = [p for p in led if p not in doomed]
    counted = sum(answers[(p, 0)] for p in spared)
    wait_for(lambda: sum(answers[(p, 0)] for p in spared) > counted + 3 * len(spared), "the others keep serving")
    stop.set()
    producer.join(60)
    with RawClient("127.0.0.1", ports[2]) as raw:
        dirs = raw.call(DescribeLogDirsRequest(topics=None), 4).results
    out = {
        "seconds_to_leaderless": seconds,
        "broker_2_session_expired": any(e.get("broker_id") == 2 for e in log_events(
            SimpleNamespace(stderr_path=root / "controller" / "server.log"), "broker_session_expired")),
        "broker_2_ever_fenced": any(fenced),
        "errors_outside_the_failed_dir": sum(n for (p, code), n in answers.items() if code and p in spared),
        "dir_errors": {r.log_dir: r.error_code for r in dirs},
        "failed_dir": str(failing),
        "broker_2_running": (root / "broker-2" / "pid").exists(),
    }
    kjbod("cluster", "down", "--dir", str(root))
    return out


def as_init(work) -> int:
    """Runs `work()` in a child while this process, pid 1 of the namespace, reaps every process that ends (the
    cluster's detached nodes are re-parented here: left unreaped they would look alive to `cluster down`)."""
    child = os.fork()
    if child == 0:
        code = 1
        try:
            print(json.dumps(work()), flush=True)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    while True:
        pid, status = os.wait()
        if pid == child:
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    where = Path(sys.argv[1])
    where.mkdir(parents=True, exist_ok=True)
    sys.exit(as_init(lambda: main(where)))
