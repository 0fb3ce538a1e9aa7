"""Server-level disk faults on real filesystems, run by test_disk_faults.py inside a private mount namespace.

Usage: ``unshare -m -p -f --kill-child --propagation private python disk_scenarios.py SCENARIO BASE``.

Each scenario mounts its log dirs under BASE (ext4 images on loop devices, or a small tmpfs; the mount helpers
are tests/storage/realdisk_scenarios.py's), starts a real `kjbod serve` on them (tests/live.py), drives it with
raw Produce/Fetch/Metadata requests from several threads (tests/datapath/support.py), breaks one dir while the
load runs, and prints one JSON object of observations on stdout.  Everything the scenario started (mounts, loop
devices, the server) lives in the namespace and disappears with it, whatever happens.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from live import start_server  # noqa: E402

from tests.datapath.support import (  # noqa: E402
    RawClient,
    batch,
    create_topic,
    fetch,
    fetch_all,
    list_offset,
    log_events,
    metadata,
    partition_dirs,
    produce,
    scan_log_dirs,
    write_faults,
)
from tests.storage.realdisk_scenarios import mount_ext4, mount_tmpfs, sh  # noqa: E402

FS_IOC_SHUTDOWN = 0x8004587D
NOLOGFLUSH = 2
STORAGE_ERROR = 56


def value(partition: int, seq: int, size: int = 100) -> bytes:
    head = b"p%d-%08d:" % (partition, seq)
    return head + b"x" * (size - len(head))


def placement(server, topic: str, partitions: int) -> dict[int, int]:
    """partition -> index of the log dir holding it."""
    dirs = partition_dirs(server.log_dirs)
    index = {str(d): i for i, d in enumerate(server.log_dirs)}
    return {p: index[str(dirs[f"{topic}-{p}"].parent)] for p in range(partitions)}


class Load:
    """One producer and one consumer thread per partition, each on its own connection, until stopped.

    Every request is logged as (start time, kind, error code); acknowledged produces keep their offsets so the
    data can be checked afterwards."""

    def __init__(self, server, topic: str, partitions: int, records_per_batch: int = 10):
        self.server, self.topic, self.partitions = server, topic, partitions
        self.records_per_batch = records_per_batch
        self.stop = threading.Event()
        self.results: dict[int, list[tuple[float, str, int | str]]] = {p: [] for p in range(partitions)}
        self.acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}  # (base offset, seq)
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._produce, args=(p,), daemon=True) for p in range(partitions)]
        self.threads += [threading.Thread(target=self._fetch, args=(p,), daemon=True) for p in range(partitions)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _produce(self, p: int) -> None:
        seq = 0
        n = self.records_per_batch

        def one(raw: RawClient) -> int:
            nonlocal seq
            resp = produce(raw, self.topic, p, batch([value(p, seq + i) for i in range(n)]))
            if resp.error_code == 0:
                self.acked[p].append((resp.base_offset, seq))
                seq += n
            return resp.error_code

        self._loop(p, "produce", one)

    def _fetch(self, p: int) -> None:
        from kjbod.storage.records import iter_batches

        offset = 0

        def one(raw: RawClient) -> int:
            nonlocal offset
            part = fetch(raw, self.topic, p, offset, max_wait_ms=50)
            if part.error_code == 0 and part.records:
                for _pos, h in iter_batches(part.records):
                    offset = max(offset, h.next_offset)
            return part.error_code

        self._loop(p, "fetch", one)

    def _loop(self, p: int, kind: str, one) -> None:
        """Calls `one(connection)` until stopped.  A dropped connection is logged as code "disconnect" and
        replaced: a fetch whose file regions were handed out just before the disk failed cannot answer with an
        error code (the response is half sent when sendfile gets EIO), so the server closes that connection."""
        raw = None
        try:
            while not self.stop.is_set():
                if raw is None:
                    raw = RawClient.to(self.server)
                started = time.monotonic()
                try:
                    code: int | str = one(raw)
                except (ConnectionError, OSError):
                    raw.close()
                    raw = None
                    code = "disconnect"
                self.results[p].append((started, kind, code))
                if code != 0:
                    time.sleep(0.01)
        except Exception as e:  # anything else is an observation, not a crash of the scenario
            self.failures.append(f"{kind} {p}: {e!r}")
        finally:
            if raw is not None:
                raw.close()

    def codes(self, p: int, kind: str, after: float | None = None, before: float | None = None) -> dict[str, int]:
        out: dict[str, int] = {}
        for t, k, code in self.results[p]:
            if k == kind and (after is None or t >= after) and (before is None or t < before):
                out[str(code)] = out.get(str(code), 0) + 1
        return out


def check_acked(raw: RawClient, topic: str, p: int, acked: list[tuple[int, int]], per_batch: int,
                size: int = 100) -> str | None:
    """None when every acknowledged batch is back at its offset with its values, once; else what is wrong."""
    records = fetch_all(raw, topic, p)
    by_offset = {r.offset: r.value for r in records}
    if len(by_offset) != len(records):
        return "an offset appears twice"
    values = [r.value for r in records]
    if len(set(values)) != len(values):
        return "a record is stored twice"
    for base, seq in acked:
        for i in range(per_batch):
            if by_offset.get(base + i) != value(p, seq + i, size):
                return f"acknowledged record {seq + i} missing at offset {base + i}"
    return None


def noticed(server, event: str, timeout: float = 60.0) -> float:
    """The moment the server has logged `event` (time.monotonic, as Load stamps its requests).

    A broken disk is found by the server's next operation on it: until then, a request that does no I/O there
    (a fetch at the log end waiting for appends) answers as before, as in Kafka. So "after the failure" starts
    when the server has taken the dir offline, not when the disk broke: on a loaded machine the producers' next
    append may come much later."""
    deadline = time.monotonic() + timeout
    while not log_events(server, event):
        assert time.monotonic() < deadline, f"the server did not log {event} within {timeout} s"
        time.sleep(0.01)
    return time.monotonic()


def partition_view(raw: RawClient, topic: str) -> dict[str, list]:
    (t,) = metadata(raw, [topic]).topics
    return {str(p.partition_index): [p.error_code, p.leader_id, list(p.offline_replicas)] for p in t.partitions}


# ------------------------------------------------------------------------------------------------ scenarios


def probe(base: str) -> dict:
    mount_tmpfs(os.path.join(base, "t"), "1m")
    out = {"tmpfs": True}
    try:
        mount_ext4(os.path.join(base, "img"), os.path.join(base, "e"), 8)
        out["ext4_loop"] = True
    except Exception as e:
        out["ext4_loop"] = False
        out["ext4_error"] = str(getattr(e, "stderr", b"") or e)[:200]
    return out


def faults_file(base: str) -> Path:
    """The KJBOD_FAULTS control file of the seam variants; set in the environment the server inherits."""
    path = Path(base) / "faults.json"
    os.environ["KJBOD_FAULTS"] = str(path)
    return path


def eio_under_load(base: str, mode: str) -> dict:
    """One of three log dirs fails with EIO while every partition is produced to and fetched from.

    mode "ext4": each log dir is an ext4 image on a loop device and the failing one is shut down with
    FS_IOC_SHUTDOWN (real kernel EIO on every operation); mode "seam": plain dirs, and the failure is an EIO rule
    for every operation in the dir, armed through the server's KJBOD_FAULTS file."""
    node = Path(base) / "node"
    control = faults_file(base) if mode == "seam" else None
    if mode == "ext4":
        for i in range(3):
            mount_ext4(os.path.join(base, f"img{i}"), str(node / f"logs-{i}"), 48)
    server = start_server(node, overrides={"log.dir.placement.policy": "fewest-partitions",
                                           "log.segment.bytes": str(256 * 1024)})
    out: dict = {}
    try:
        with RawClient.to(server) as raw:
            assert create_topic(raw, "load", 6).error_code == 0
        where = placement(server, "load", 6)
        out["placement"] = where
        failed_dir = 1
        load = Load(server, "load", 6)
        load.start()
        time.sleep(1.5)
        if control is None:
            fd = os.open(server.log_dirs[failed_dir], os.O_RDONLY | os.O_DIRECTORY)
            fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", NOLOGFLUSH))
            os.close(fd)
        else:
            write_faults(control, [{"dir": str(server.log_dirs[failed_dir]), "errno": "EIO"}])
        shut = noticed(server, "log_dir_offline")
        time.sleep(2.0)
        load.finish()
        out["load_failures"] = load.failures
        out["partitions"] = {}
        for p in range(6):
            out["partitions"][str(p)] = {
                "dir": where[p],
                "produce_before": load.codes(p, "produce", before=shut),
                "produce_after": load.codes(p, "produce", after=shut),
                "fetch_before": load.codes(p, "fetch", before=shut),
                "fetch_after": load.codes(p, "fetch", after=shut),
            }
        out["server_running"] = server.running
        with RawClient.to(server) as raw:
            out["metadata"] = partition_view(raw, "load")
            out["acked_check"] = {str(p): check_acked(raw, "load", p, load.acked[p], load.records_per_batch)
                                  for p in range(6) if where[p] != failed_dir}
            out["acked"] = {str(p): len(load.acked[p]) for p in range(6)}
            out["failed_dir_fetch"] = [fetch(raw, "load", p, 0).error_code for p in range(6) if where[p] == failed_dir]
            out["list_offsets"] = {str(p): [list_offset(raw, "load", p, ts).error_code for ts in (-1, -2, 0)]
                                   for p in range(6)}
            out["failed_dir_produce_v3"] = [produce(raw, "load", p, batch([b"old client"]), version=3).error_code
                                            for p in range(6) if where[p] == failed_dir]
            assert create_topic(raw, "after", 4).error_code == 0
            out["new_topic_dirs"] = sorted(set(placement(server, "after", 4).values()))
        out["offline_events"] = [e.get("log_dir") for e in log_events(server, "log_dir_offline")
                                 if e.get("log_dir")]
        out["failed_dir"] = str(server.log_dirs[failed_dir])
        out["exit_code"] = server.stop()
        out["markers"] = [os.path.exists(os.path.join(d, ".kafka_cleanshutdown")) for d in server.log_dirs]
        if control is not None:
            # The seam's EIO left the data intact: heal the dir, restart, and everything acknowledged is back.
            control.unlink()
            server.start()
            with RawClient.to(server) as raw:
                out["after_restart_check"] = {str(p): check_acked(raw, "load", p, load.acked[p],
                                                                  load.records_per_batch) for p in range(6)}
            out["scan_problems"] = {k: s.problems for k, s in scan_log_dirs(server.log_dirs).items() if s.problems}
    finally:
        server.stop()
    return out


def _tmpfs_to_its_used_size(path: str) -> None:
    """Shrink a tmpfs to what its files use (disk-faults.md (b)): from now on every new block is ENOSPC."""
    st = os.statvfs(path)
    used_k = max((st.f_blocks - st.f_bfree) * st.f_frsize // 1024, 4)
    sh("mount", "-o", f"remount,size={used_k}k", path)


def enospc(base: str, mode: str) -> dict:
    """One of three log dirs fills up while a partition of each dir is produced to in 64 KB batches.

    mode "tmpfs": that dir is a 3 MiB tmpfs which really fills up; space returns with a remount that grows it,
    files open (disk-faults.md (b)). mode "seam": plain dirs; after 20 rounds a KJBOD_FAULTS file makes the dir's
    writes fail with ENOSPC and its statvfs answer 0 usable bytes; removing the file is the space returning.

    While full: appends refused (56, the message naming the dir and its free bytes), fetches and ListOffsets of
    its data answered, Metadata keeping the leader, a `kjbod log-dirs move` off it completing. Then a
    kafka-python producer with default settings retries while the dir is full and delivers everything once space
    returns, with no restart. Then the dir is filled again and the server killed with SIGKILL: it restarts,
    loads the full dir, places no new partition there, and has lost nothing acknowledged."""
    node = Path(base) / "node"
    small = node / "logs-2"
    control = faults_file(base) if mode == "seam" else None
    if mode == "tmpfs":
        mount_tmpfs(str(small), "3m")
    server = start_server(node, overrides={"log.dir.placement.policy": "fewest-partitions",
                                           "log.dir.space.check.interval.ms": "200"})
    full_rules = [{"dir": str(small), "errno": "ENOSPC", "ops": ["write"]},
                  {"dir": str(small), "total_bytes": 1 << 30, "usable_bytes": 0}]
    out: dict = {}
    try:
        with RawClient.to(server) as raw:
            assert create_topic(raw, "fill", 6).error_code == 0
        where = placement(server, "fill", 6)
        out["placement"] = where
        on_small = [p for p, d in where.items() if d == 2]
        full, movable = on_small[0], on_small[1]
        loaded = [next(p for p, d in where.items() if d == i) for i in (0, 1)] + [full]
        out["loaded"] = loaded
        per_batch = 100
        acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(6)}
        codes: dict[int, list[int]] = {p: [] for p in loaded}
        seqs = dict.fromkeys(range(6), 0)

        def send(raw: RawClient, p: int, n: int = per_batch) -> object:
            resp = produce(raw, "fill", p, batch([value(p, seqs[p] + i, 600) for i in range(n)]))
            if resp.error_code == 0:
                acked[p].append((resp.base_offset, seqs[p]))
                seqs[p] += n
            return resp

        first_error_round = None
        with RawClient.to(server) as raw:
            assert send(raw, movable).error_code == 0
            for rnd in range(400):
                if control is not None and rnd == 20:
                    write_faults(control, full_rules)
                for p in loaded:
                    resp = send(raw, p)
                    codes[p].append(resp.error_code)
                    if p == full and resp.error_code:
                        out["full_message"] = resp.error_message
                if first_error_round is None and codes[full][-1] != 0:
                    first_error_round = rnd
                if first_error_round is not None and rnd >= first_error_round + 10:
                    break
            out["first_error_round"] = first_error_round
            out["codes"] = {str(p): sorted(set(c)) for p, c in codes.items()}
            out["codes_after_first_error"] = {
                str(p): sorted(set(c[first_error_round:])) for p, c in codes.items()} if first_error_round else {}
            out["healthy_check"] = {str(p): check_acked(raw, "fill", p, acked[p], per_batch, 600)
                                    for p in loaded if p != full}
            out["full_fetch"] = fetch(raw, "fill", full, 0).error_code
            out["full_check_while_full"] = check_acked(raw, "fill", full, acked[full], per_batch, 600)
            out["full_list_offsets"] = [list_offset(raw, "fill", full, ts).error_code for ts in (-1, -2, 0)]
            out["metadata"] = partition_view(raw, "fill")
        # A KIP-113 move off the full dir, with the CLI, while it is full.
        assignment = Path(base) / "move.json"
        assignment.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "fill", "partition": movable, "log_dir": str(server.log_dirs[0])}]}))
        moved = subprocess.run([sys.executable, "-m", "kjbod", "log-dirs", "move", "--bootstrap-server",
                                server.bootstrap, "--broker", "1", "--assignment", str(assignment), "--wait",
                                "--report-interval", "1"], capture_output=True, text=True, timeout=120, cwd=ROOT)
        out["move_exit"] = moved.returncode
        out["move_output"] = (moved.stdout + moved.stderr)[-600:]
        out["movable_dir_after"] = placement(server, "fill", 6)[movable]
        described = subprocess.run([sys.executable, "-m", "kjbod", "log-dirs", "describe", "--bootstrap-server",
                                    server.bootstrap, "--json"], capture_output=True, text=True, timeout=60,
                                   cwd=ROOT)
        out["describe_states"] = {d["path"]: [d["state"], d.get("reserved_bytes")]
                                  for b in json.loads(described.stdout)["brokers"] for d in b["log_dirs"]}
        with RawClient.to(server) as raw:
            out["movable_check"] = check_acked(raw, "fill", movable, acked[movable], per_batch, 600)
            out["movable_produce_after_move"] = send(raw, movable).error_code
        # kafka-python, default settings: it retries KAFKA_STORAGE_ERROR until space returns, then delivers.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=server.bootstrap)
        try:
            retried = [producer.send("fill", value=b"kp-%03d" % i, partition=full) for i in range(20)]
            time.sleep(1.5)
            out["kp_done_while_full"] = sum(f.is_done for f in retried)
            if control is None:
                sh("mount", "-o", "remount,size=64m", str(small))
            else:
                control.unlink()
            kp_offsets = [f.get(timeout=60).offset for f in retried]
        finally:
            producer.close(timeout=10)
        out["kp_delivered"] = len(kp_offsets)
        with RawClient.to(server) as raw:
            out["produce_after_growth"] = send(raw, full).error_code
            out["kp_stored"] = sum(1 for r in fetch_all(raw, "fill", full) if r.value.startswith(b"kp-"))
        out["space_returned_events"] = len(log_events(server, "log_dir_space_returned"))
        # Full again, then kill -9: the restart loads the full dir, creates nothing there, loses nothing acked.
        if control is None:
            _tmpfs_to_its_used_size(str(small))
        else:
            write_faults(control, full_rules)
        with RawClient.to(server) as raw:
            out["refill_codes"] = sorted({send(raw, full).error_code for _ in range(5)})
        server.process.kill()
        server.process.wait()
        server.start()
        with RawClient.to(server) as raw:
            assert create_topic(raw, "after", 4).error_code == 0
            out["new_topic_dirs"] = sorted(set(placement(server, "after", 4).values()))
            out["after_restart_check"] = {str(p): check_acked(raw, "fill", p, acked[p], per_batch, 600)
                                          for p in range(6)}
            out["after_restart_kp"] = sum(1 for r in fetch_all(raw, "fill", full) if r.value.startswith(b"kp-"))
            out["after_restart_full_produce"] = send(raw, full).error_code
        # Space returns once more; appends resume; kill -9 again: still nothing acknowledged lost.
        if control is None:
            sh("mount", "-o", "remount,size=64m", str(small))
        else:
            control.unlink()
        with RawClient.to(server) as raw:
            deadline = time.monotonic() + 30
            while send(raw, full).error_code != 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            out["resumed_codes"] = sorted({send(raw, full).error_code for _ in range(5)})
        server.process.kill()
        server.process.wait()
        server.start()
        with RawClient.to(server) as raw:
            out["after_second_kill_check"] = {str(p): check_acked(raw, "fill", p, acked[p], per_batch, 600)
                                              for p in range(6)}
        out["server_running"] = server.running
        out["exit_code"] = server.stop()
        out["scan_problems"] = {k: s.problems for k, s in scan_log_dirs(server.log_dirs).items() if s.problems}
    finally:
        server.stop()
    return out


SCENARIOS = {
    "probe": probe,
    "ext4-shutdown": lambda base: eio_under_load(base, "ext4"),
    "seam-eio": lambda base: eio_under_load(base, "seam"),
    "tmpfs-enospc": lambda base: enospc(base, "tmpfs"),
    "seam-enospc": lambda base: enospc(base, "seam"),
}

if __name__ == "__main__":
    name, base = sys.argv[1], sys.argv[2]
    print(json.dumps(SCENARIOS[name](base)), flush=True)
