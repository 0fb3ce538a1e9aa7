"""One node, three log dirs, the third on a FUSE passthrough (tools/faultfs.py) that is made to hang or to be slow
while real clients (kafka-python) use the node.

* hung: produce and fetch on the two healthy dirs complete; ApiVersions, Metadata and DescribeLogDirs answer (the
  hung dir NOT ANSWERING); CreateTopics places on the healthy dirs; DeleteTopics of a healthy-dir topic and a
  KIP-113 move between the healthy dirs complete; after log.dir.stall.timeout.ms the hung dir is offline (logged
  with the operation it was stuck on, shown by `kjbod log-dirs describe`); SIGTERM exits, naming it.
* slow (200 ms per operation): the dir is degraded, keeps serving, and nothing acknowledged is lost.

Skipped, with the reason, only where FUSE cannot work here (no /dev/fuse, no libfuse or mfusepy, mount refused).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from live import start_server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KJBOD = [sys.executable, "-m", "kjbod"]
PATIENCE_S = 120.0
STALL_TIMEOUT_MS = 15_000


def _fuse_problem() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        return "no fusermount3 (the fuse3 package: tools/install_system_deps.sh installs it)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:
        return f"mfusepy cannot load libfuse: {e}"
    return None


class FaultMount:
    """tools/faultfs.py serving `backing` at `mountpoint`, steered through its control file."""

    def __init__(self, work: Path, mountpoint: Path) -> None:
        self.backing = work / "faultfs-backing"
        self.mountpoint = mountpoint
        self.control = work / "faultfs-control.json"
        self.backing.mkdir(parents=True)
        mountpoint.mkdir(parents=True)
        self.set(mode="pass")
        self.log = work / "faultfs.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(ROOT / "tools" / "faultfs.py"), str(self.backing), str(mountpoint),
                 str(self.control)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while not os.path.ismount(mountpoint):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                pytest.skip(f"FUSE mount refused on this machine: {self.log.read_text(errors='replace')[-400:]}")
            time.sleep(0.05)

    def set(self, **control: object) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps(control))
        os.replace(tmp, self.control)

    def close(self) -> None:
        self.set(mode="pass")  # anything still held goes on, so nothing stays stuck in the kernel
        tool = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount3"
        subprocess.run([tool, "-u", "-z", str(self.mountpoint)], capture_output=True, timeout=60)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def fuse_node(tmp_path, request):
    """(server, mount): a node whose third log dir is the FUSE mount; an indirect parameter adds config keys."""
    problem = _fuse_problem()
    if problem:
        print(f"SKIPPED: {problem}")
        pytest.skip(problem)
    mount = FaultMount(tmp_path, tmp_path / "node" / "logs-2")
    server = None
    try:
        server = start_server(tmp_path / "node", overrides={
            "log.dir.placement.policy": "fewest-partitions",
            "log.dir.stall.timeout.ms": str(STALL_TIMEOUT_MS),
            **getattr(request, "param", {}),
        })
        yield server, mount
    finally:
        mount.set(mode="pass")
        if server is not None:
            server.stop()
        mount.close()


def _describe(bootstrap: str) -> dict[str, dict]:
    out = subprocess.run([*KJBOD, "log-dirs", "describe", "--bootstrap-server", bootstrap, "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    [broker] = json.loads(out.stdout)["brokers"]
    return {d["path"]: d for d in broker["log_dirs"]}


def _where(server, mount, topic: str) -> dict[int, int]:
    """partition -> index of the dir holding it, from the files (the FUSE dir's through its backing dir: looking
    through the mount would hang with it)."""
    found = {}
    for i, d in enumerate([*server.log_dirs[:2], mount.backing]):
        for entry in Path(d).iterdir():
            name = entry.name
            if name.startswith(f"{topic}-") and name[len(topic) + 1:].isdigit():
                found[int(name[len(topic) + 1:])] = i
    return found


def _create(admin, name: str, partitions: int) -> None:
    from kafka.admin import NewTopic

    admin.create_topics([NewTopic(name, partitions, 1)], timeout_ms=60_000)


def _consume(bootstrap: str, topic: str, partitions: list[int], want: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=2000,
                             fetch_max_wait_ms=200)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: list[bytes] = []
        deadline = time.monotonic() + PATIENCE_S
        while len(got) < want and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        return got
    finally:
        consumer.close()


def test_a_hung_dir_never_stalls_the_others_and_is_taken_offline(fuse_node):
    from kafka import KafkaAdminClient, KafkaProducer

    server, mount = fuse_node
    bad = str(server.log_dirs[2])
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=60_000)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=1, linger_ms=0, retries=0,
                             request_timeout_ms=60_000, max_block_ms=60_000)
    try:
        _create(admin, "spread", 3)
        _create(admin, "doomed", 2)
        where = _where(server, mount, "spread")
        assert sorted(where.values()) == [0, 1, 2], where
        bad_p = next(p for p, d in where.items() if d == 2)
        healthy = sorted(p for p in where if p != bad_p)
        for p in where:
            producer.send("spread", b"before-%d" % p, partition=p).get(60)
        mount.set(mode="hang")
        stuck = producer.send("spread", b"never-acked", partition=bad_p)  # held in the hung dir

        acked = [producer.send("spread", b"during-%d-%d" % (p, i), partition=p) for p in healthy for i in range(50)]
        for future in acked:
            future.get(60)
        got = _consume(server.bootstrap, "spread", healthy, 2 + len(acked))
        assert sorted(got) == sorted([b"before-%d" % p for p in healthy] + [
            b"during-%d-%d" % (p, i) for p in healthy for i in range(50)])
        assert admin.list_topics()  # Metadata (and ApiVersions on the new connection) answer
        # Held for less than the not-answering bound (5 s: five probe timeouts) it may still look slow (degraded);
        # then it does not answer, and after the stall timeout it is offline.
        deadline = time.monotonic() + PATIENCE_S
        while (seen := _describe(server.bootstrap))[bad]["state"] not in ("not-answering", "offline"):
            assert seen[bad]["state"] == "degraded" and time.monotonic() < deadline, seen[bad]
            time.sleep(0.5)
        if seen[bad]["state"] == "not-answering":
            assert seen[bad]["state_reason"].startswith("no answer for "), seen[bad]
        for path in map(str, server.log_dirs[:2]):
            assert seen[path]["state"] in ("online", "degraded") and seen[path]["total_bytes"]

        _create(admin, "placed", 4)  # placement skips the dir that does not answer
        assert set(_where(server, mount, "placed").values()) <= {0, 1}
        admin.delete_topics(["doomed"], timeout_ms=60_000)
        deadline = time.monotonic() + PATIENCE_S
        while "doomed" in admin.list_topics():
            assert time.monotonic() < deadline, "DeleteTopics of a healthy-dir topic never completed"
            time.sleep(0.2)

        # A KIP-113 move between the two healthy dirs completes.
        src = _where(server, mount, "placed")
        p0, d0 = next(iter(src.items()))
        target = str(server.log_dirs[1 - d0])
        plan = {"version": 1, "partitions": [{"topic": "placed", "partition": p0, "log_dir": target}]}
        moved = subprocess.run([*KJBOD, "log-dirs", "move", "--bootstrap-server", server.bootstrap, "--broker", "1",
                                "--assignment", "-", "--wait", "--timeout", "60"], input=json.dumps(plan),
                               capture_output=True, text=True, timeout=300)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert _where(server, mount, "placed")[p0] == 1 - d0

        # After the stall timeout the hung dir is offline, said once in the log with what it was stuck on.
        deadline = time.monotonic() + PATIENCE_S
        while (seen := _describe(server.bootstrap))[bad]["state"] != "offline":
            assert time.monotonic() < deadline, f"the hung dir was never taken offline: {seen[bad]}"
            time.sleep(0.5)
        assert seen[bad]["state_reason"].startswith("stalled: ") and bad in seen[bad]["state_reason"], seen[bad]
        log = server.stderr(tail=2000)
        assert log.count('"log_dir_stalled"') == 1 and bad in log
        with pytest.raises(Exception, match="KafkaStorageError|NotLeader"):  # failed with its dir, never acked
            stuck.get(60)
        producer.send("spread", b"after", partition=healthy[0]).get(60)  # still serving the healthy dirs
    finally:
        producer.close(timeout=5)
        admin.close()
    # SIGTERM with the dir still hung: the node shuts down without waiting for it, naming it. Its worker thread
    # stays in the kernel, in the write the disk never answered (D state), and no process can be reaped before
    # such a call returns, so the exit code comes when the mount answers again (or an operator aborts it).
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + PATIENCE_S
    while '"shutdown complete"' not in (tail := server.stderr(tail=50)):
        assert time.monotonic() < deadline, f"the shutdown waited for the hung dir:\n{tail}"
        assert server.process.poll() is None or server.process.returncode == 0, tail
        time.sleep(0.2)
    [closed] = [json.loads(line) for line in tail.splitlines() if '"log_manager_closed"' in line]
    assert closed["offline_dirs"] == [bad]
    assert '"exit_code": 0' in tail
    mount.set(mode="pass")
    assert server.process.wait(PATIENCE_S) == 0


@pytest.mark.parametrize("fuse_node", [{"log.dir.slow.threshold.ms": "150"}], indirect=True)
def test_a_slow_dir_is_degraded_and_loses_nothing_acknowledged(fuse_node):
    from kafka import KafkaAdminClient, KafkaProducer

    server, mount = fuse_node
    bad = str(server.log_dirs[2])
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=60_000)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=1, linger_ms=5, request_timeout_ms=60_000)
    try:
        _create(admin, "slowly", 3)
        where = _where(server, mount, "slowly")
        bad_p = next(p for p, d in where.items() if d == 2)
        mount.set(mode="sleep", delay_ms=200)
        acked = {p: [producer.send("slowly", b"%d-%d" % (p, i), partition=p) for i in range(30)] for p in where}
        values = {p: [f.get(120) and b"%d-%d" % (p, i) for i, f in enumerate(fs)] for p, fs in acked.items()}
        # Degraded in the log, and in DescribeLogDirs with its recent latency: a size probe slower than its 150 ms
        # wait (the slow threshold) is a slow dir, not a silent one, unless an operation has been outstanding for
        # the not-answering bound (five waits: 0.75 s, which FUSE's queue may reach at 200 ms per operation).
        deadline = time.monotonic() + PATIENCE_S
        while '"log_dir_degraded"' not in server.stderr(tail=2000):
            assert time.monotonic() < deadline, "the slow dir was never logged as degraded"
            producer.send("slowly", b"more", partition=bad_p).get(120)
            values[bad_p].append(b"more")
        seen = _describe(server.bootstrap)
        assert seen[bad]["state"] in ("degraded", "not-answering") and seen[bad]["recent_latency_ms"] >= 150, seen
        assert bad in server.stderr(tail=2000)
        mount.set(mode="pass")
        for p in where:
            assert _consume(server.bootstrap, "slowly", [p], len(values[p])) == values[p]
    finally:
        producer.close(timeout=5)
        admin.close()
    assert server.stop() == 0, server.stderr()
