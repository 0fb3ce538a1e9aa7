"""A failing disk under a running server: the failed dir's partitions answer KAFKA_STORAGE_ERROR, the other dirs
keep serving with zero errors, and the server stays up (KIP-858 / JBOD semantics).

Two ways to break a dir, with the same checks (the scenarios live in disk_scenarios.py and print their
observations as JSON):

* **real disks, as root** (disk-faults.md): each log dir is an ext4 image on a loop device and one is shut down
  with FS_IOC_SHUTDOWN while all six partitions are produced to and fetched from; for ENOSPC one dir is a 3 MiB
  tmpfs that fills up.  These run inside a private mount and pid namespace (`unshare -m -p -f --kill-child`), so
  no mount, loop device or server outlives the test.  Without root, or where the kernel refuses the mounts, they
  are skipped and the reason says which.
* **the fault seam** (kjbod.storage.fsio, env-var form): the server subprocess is started with KJBOD_FAULTS
  pointing at a control file, and the test arms an EIO or ENOSPC rule for one dir while the load runs.  These
  need no privileges and always run.

ENOSPC makes the dir *full*, not offline (unlike Kafka, where any IOException fails the dir): its data stays
readable, a move off it works, its appends are refused with KAFKA_STORAGE_ERROR until space returns, and then
resume with no restart; the other dirs see no error throughout.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("disk_scenarios.py")
STORAGE_ERROR = "56"
NOT_LEADER = "6"
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6

pytestmark = pytest.mark.slow


def run_scenario(name: str, base: Path, *, namespace: bool) -> dict:
    cmd = [sys.executable, str(HELPER), name, str(base)]
    if namespace:
        cmd = ["unshare", "-m", "-p", "-f", "--kill-child", "--propagation", "private", *cmd]
    env = {k: v for k, v in os.environ.items() if k != "KJBOD_FAULTS"}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)
    if proc.returncode != 0:
        server_log = base / "node" / "stderr.log"
        tail = server_log.read_text(errors="replace")[-3000:] if server_log.exists() else ""
        raise AssertionError(f"scenario {name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}\n"
                             f"server log tail:\n{tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@functools.cache
def mount_capabilities(tmp_root: str) -> dict | str:
    if os.geteuid() != 0:
        return "needs root to mount tmpfs and ext4 loop images (the fault-seam variants below cover this case)"
    missing = [t for t in ("unshare", "mkfs.ext4", "mount") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    base = Path(tmp_root) / "datapath-probe"
    base.mkdir(parents=True, exist_ok=True)
    try:
        return run_scenario("probe", base, namespace=True)
    except (AssertionError, subprocess.TimeoutExpired, ValueError) as e:
        return f"cannot mount here: {e}"


@pytest.fixture
def mounts(tmp_path_factory) -> dict:
    found = mount_capabilities(str(tmp_path_factory.getbasetemp()))
    if isinstance(found, str):
        pytest.skip(found)
    return found


# ------------------------------------------------------------------------------------------------ checks


def check_eio_under_load(out: dict) -> None:
    failed = [p for p, d in out["placement"].items() if d == 1]
    healthy = [p for p, d in out["placement"].items() if d != 1]
    assert len(failed) == 2 and len(healthy) == 4, out["placement"]
    assert out["load_failures"] == []
    for p in healthy:
        seen = out["partitions"][p]
        for phase in ("produce_before", "produce_after", "fetch_before", "fetch_after"):
            assert set(seen[phase]) == {"0"}, f"healthy partition {p} saw errors in {phase}: {seen[phase]}"
        assert seen["produce_after"]["0"] > 10, f"healthy partition {p} stopped taking produces: {seen}"
        assert out["acked_check"][p] is None, f"partition {p}: {out['acked_check'][p]}"
    for p in failed:
        seen = out["partitions"][p]
        # Requests in flight when the dir broke may already fail; every one started once the server has taken the
        # dir offline (on its next operation there: disk_scenarios.noticed) must.  A fetch whose
        # file regions were handed out just before the failure is half sent when sendfile gets EIO, so the server
        # can only close that connection (Kafka does the same); that happens at most once per consumer.
        # One in flight while the node's replica state drops the partition may also get NOT_LEADER_OR_FOLLOWER, as a
        # produce racing a leadership change does in Kafka.
        assert set(seen["produce_before"]) <= {"0", STORAGE_ERROR, NOT_LEADER}, seen
        assert set(seen["fetch_before"]) <= {"0", STORAGE_ERROR, "disconnect"}, seen
        assert set(seen["produce_after"]) == {STORAGE_ERROR}, f"failed partition {p}: {seen['produce_after']}"
        fetch_after = dict(seen["fetch_after"])
        assert fetch_after.pop("disconnect", 0) + seen["fetch_before"].get("disconnect", 0) <= 1, seen
        assert set(fetch_after) == {STORAGE_ERROR}, f"failed partition {p}: {seen['fetch_after']}"
        assert out["acked"][p] > 0
    assert out["server_running"] is True
    for p in healthy:
        assert out["metadata"][p] == [0, 1, []]
    for p in failed:
        assert out["metadata"][p] == [LEADER_NOT_AVAILABLE, -1, [1]], "offline partitions must be leaderless"
    assert out["failed_dir_fetch"] == [56, 56]
    for p in healthy:
        assert out["list_offsets"][p] == [0, 0, 0]
    for p in failed:  # latest, earliest, by timestamp: none may answer from memory as if the partition were fine
        assert out["list_offsets"][p] == [56, 56, 56]
    assert out["failed_dir_produce_v3"] == [NOT_LEADER_OR_FOLLOWER] * 2  # Produce v3 predates KAFKA_STORAGE_ERROR
    assert out["new_topic_dirs"] == [0, 2], "new partitions must avoid the offline dir"
    assert set(out["offline_events"]) == {out["failed_dir"]}
    assert out["exit_code"] == 0
    assert out["markers"] == [True, False, True], "no clean-shutdown marker may be written to the failed dir"


def check_enospc(out: dict) -> None:
    full = str(out["loaded"][2])
    healthy = [str(p) for p in out["loaded"][:2]]
    assert out["first_error_round"] is not None, "the small dir never filled up"
    # Full is not failed: appends refused with KAFKA_STORAGE_ERROR and a message naming the dir and its free bytes.
    assert out["codes_after_first_error"][full] == [56]
    assert "logs-2" in out["full_message"] and "bytes free" in out["full_message"]
    for p in healthy:
        assert out["codes"][p] == [0], f"partition {p} on a healthy dir saw errors: {out['codes'][p]}"
        assert out["healthy_check"][p] is None, out["healthy_check"][p]
        assert out["metadata"][p] == [0, 1, []]
    assert out["full_fetch"] == 0 and out["full_check_while_full"] is None
    assert out["full_list_offsets"] == [0, 0, 0]
    assert out["metadata"][full] == [0, 1, []], "a full dir's partitions keep their leader"
    # A move off it completes while it is full; the moved partition takes appends in its new dir.
    assert out["move_exit"] == 0, out["move_output"]
    assert out["movable_dir_after"] == 0 and out["movable_check"] is None
    assert out["movable_produce_after_move"] == 0
    states = {os.path.basename(path): v for path, v in out["describe_states"].items()}
    assert states["logs-2"][0] == "full" and states["logs-0"][0] == "online"
    assert all(v[1] is not None and v[1] >= 0 for v in states.values())
    # Space returns: no restart, kafka-python (default settings) delivers every record it was retrying.
    assert out["kp_done_while_full"] == 0
    assert out["kp_delivered"] == 20 and out["kp_stored"] == 20
    assert out["produce_after_growth"] == 0 and out["space_returned_events"] >= 1
    # Restarted after kill -9 while full: loads, places nothing in the full dir, nothing acknowledged lost.
    assert out["refill_codes"] == [56]
    assert out["new_topic_dirs"] == [0, 1]
    assert out["after_restart_check"] == {str(p): None for p in range(6)}
    assert out["after_restart_kp"] == 20
    assert out["after_restart_full_produce"] == 56
    # Space back again, appends resume, a second kill -9: still everything acknowledged, once.
    assert out["resumed_codes"] == [0]
    assert out["after_second_kill_check"] == {str(p): None for p in range(6)}
    assert out["server_running"] is True and out["exit_code"] == 0
    assert out["scan_problems"] == {}


# ------------------------------------------------------------------------------------------------ real disks


def test_ext4_shutdown_under_load(mounts, tmp_path):
    if not mounts.get("ext4_loop"):
        pytest.skip(f"ext4 on a loop device is not possible here: {mounts.get('ext4_error')}")
    out = run_scenario("ext4-shutdown", tmp_path, namespace=True)
    check_eio_under_load(out)


def test_tmpfs_enospc_under_load(mounts, tmp_path):
    out = run_scenario("tmpfs-enospc", tmp_path, namespace=True)
    check_enospc(out)


# ------------------------------------------------------------------------------------------------ fault seam


def test_seam_eio_under_load(tmp_path):
    out = run_scenario("seam-eio", tmp_path, namespace=False)
    check_eio_under_load(out)
    # The injected failure left the files intact: after a restart with the rule removed, everything is back.
    assert out["after_restart_check"] == dict.fromkeys(out["placement"])
    assert out["scan_problems"] == {}


def test_seam_enospc_under_load(tmp_path):
    out = run_scenario("seam-enospc", tmp_path, namespace=False)
    check_enospc(out)
    assert out["first_error_round"] == 20  # the rule was armed before round 20


def delete_with_an_offline_partition(factory, tmp_path, monkeypatch):
    """Topic "doomed" (3 partitions, one per dir) deleted while the dir of doomed-1 is offline; then the server is
    restarted with the disk back.  Returns (server, dirs of the partitions, the DeleteTopics result)."""
    from kjbod.protocol.generated import DeleteTopicsRequest as D

    from .support import (
        RawClient,
        batch,
        create_topic,
        partition_dirs,
        produce,
        renamed_to_delete,
        write_faults,
    )

    control = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(control))
    server = factory(overrides={"log.dir.placement.policy": "fewest-partitions",
                                "log.segment.delete.delay.ms": "60000"})
    with RawClient.to(server) as raw:
        assert create_topic(raw, "doomed", 3).error_code == 0
        for p in range(3):
            assert produce(raw, "doomed", p, batch([b"x"])).error_code == 0
        dirs = {name: path.parent for name, path in partition_dirs(server.log_dirs).items()}
        write_faults(control, [{"dir": str(dirs["doomed-1"]), "errno": "EIO"}])
        assert produce(raw, "doomed", 1, batch([b"y"])).error_code == 56
        (result,) = raw.call(D(topics=[D.DeleteTopicState(name="doomed")], timeout_ms=5000), 6).responses
    assert server.running
    for name in ("doomed-0", "doomed-2"):
        parent = dirs[name]
        assert renamed_to_delete(parent, name)
        assert not (parent / name).exists()
    assert (dirs["doomed-1"] / "doomed-1").exists()  # untouchable while its disk is offline
    assert server.stop() == 0
    control.unlink()
    server.start()
    return server, dirs, result


def test_seam_delete_topic_with_a_partition_in_an_offline_dir(kjbod_server_factory, tmp_path, monkeypatch):
    """The topic leaves the metadata first, so the answer is success and every partition in an online dir is
    renamed to -delete; the one in the offline dir cannot be touched, stays behind, and at the next start is a
    stray replica: renamed -stray (kept for the operator, as Kafka does) and no longer served."""
    from .support import RawClient, log_events, metadata

    server, dirs, result = delete_with_an_offline_partition(kjbod_server_factory, tmp_path, monkeypatch)
    assert result.error_code == 0, result.error_message
    (stray,) = log_events(server, "partitions_not_in_metadata")
    assert stray["partitions"] == ["doomed-1"]
    parent = dirs["doomed-1"]
    assert not (parent / "doomed-1").exists()
    (kept,) = [d for d in parent.iterdir() if d.name.startswith("doomed-1.") and d.name.endswith("-stray")]
    assert [str(kept)] == stray["renamed_to"]
    assert any(f.suffix == ".log" and f.stat().st_size > 0 for f in kept.iterdir())  # its data is kept
    with RawClient.to(server) as raw:
        assert metadata(raw, ["doomed"]).topics[0].error_code == 3


def test_seam_topic_name_is_free_again_after_the_offline_dir_returns(kjbod_server_factory, tmp_path, monkeypatch):
    from .support import RawClient, create_topic, log_events

    server, dirs, _result = delete_with_an_offline_partition(kjbod_server_factory, tmp_path, monkeypatch)
    with RawClient.to(server) as raw:
        again = create_topic(raw, "doomed", 3)
        assert again.error_code == 0, again.error_message
    # The new topic's partitions are new logs; the stray stays as it was, also across a restart.
    strays = [d for d in dirs["doomed-1"].iterdir() if d.name.endswith("-stray")]
    assert len(strays) == 1
    assert server.stop() == 0
    server.start()
    assert not log_events(server, "partitions_not_in_metadata")[1:]  # nothing new is stray after the restart
    assert [d for d in dirs["doomed-1"].iterdir() if d.name.endswith("-stray")] == strays


def every_dir_failing(factory, tmp_path, monkeypatch):
    """A server whose three log dirs all fail (through the seam) while it serves; returns it once it exited."""
    import time

    from .support import RawClient, batch, create_topic, produce, write_faults

    control = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(control))
    server = factory(overrides={"log.dir.placement.policy": "fewest-partitions"})
    with RawClient.to(server) as raw:
        assert create_topic(raw, "t", 3).error_code == 0
        write_faults(control, [{"dir": str(d), "errno": "EIO"} for d in server.log_dirs])
        assert [produce(raw, "t", p, batch([b"x"])).error_code for p in range(3)] == [56, 56, 56]
    deadline = time.monotonic() + 30
    while server.running:
        assert time.monotonic() < deadline, "the server kept running with every log dir offline"
        time.sleep(0.1)
    return server


def test_seam_every_dir_failing_stops_the_server(kjbod_server_factory, tmp_path, monkeypatch):
    """As Kafka halts when no log dir is left, the node stops by itself (after answering what it owed)."""
    from .support import log_events

    server = every_dir_failing(kjbod_server_factory, tmp_path, monkeypatch)
    assert log_events(server, "all_log_dirs_offline")
    assert {e["log_dir"] for e in log_events(server, "log_dir_offline") if "log_dir" in e} == \
        {str(d) for d in server.log_dirs}


def test_seam_every_dir_failing_exits_non_zero(kjbod_server_factory, tmp_path, monkeypatch):
    server = every_dir_failing(kjbod_server_factory, tmp_path, monkeypatch)
    assert server.process.returncode != 0


def test_seam_a_creation_failing_on_a_full_dir_leaves_no_debris_and_the_broker_restarts(
        kjbod_server_factory, tmp_path, monkeypatch):
    """The debris case of the full-disk issue: CreateTopics places a partition in a dir that turns out to be full
    (ENOSPC at its first file): nothing is left there and the partition is placed again in another dir, so the
    creation succeeds; a partition dir left half-made by an older kjbod (only partition.metadata) does not stop
    the next start, which serves the partition from the dir its data is in."""
    from .support import (
        RawClient,
        batch,
        create_topic,
        fetch_all,
        log_events,
        partition_dirs,
        produce,
        write_faults,
    )

    control = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(control))
    server = kjbod_server_factory(overrides={"log.dir.placement.policy": "fewest-partitions"})
    full = server.log_dirs[2]
    with RawClient.to(server) as raw:
        assert create_topic(raw, "first", 2).error_code == 0  # logs-0 and logs-1: logs-2 is next
        write_faults(control, [{"dir": str(full), "errno": "ENOSPC", "ops": ["open"], "count": 1}])
        created = create_topic(raw, "newonfull", 1)
        assert created.error_code == 0, created
        assert not [p for p in full.iterdir() if p.name.startswith("newonfull")]
        assert produce(raw, "newonfull", 0, batch([b"kept"])).error_code == 0
    home = partition_dirs(server.log_dirs)["newonfull-0"].parent
    assert home != full
    (again,) = log_events(server, "partition_placed_again")
    assert again["full_dir"] == str(full)
    assert server.stop() == 0
    control.unlink()  # a new process would read the rule afresh
    debris = full / "newonfull-0"
    debris.mkdir()
    (debris / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
    server.start()
    with RawClient.to(server) as raw:
        assert [r.value for r in fetch_all(raw, "newonfull", 0)] == [b"kept"]
        assert produce(raw, "newonfull", 0, batch([b"after restart"])).error_code == 0
    assert partition_dirs(server.log_dirs)["newonfull-0"].parent == home
    assert not debris.exists()
    assert [p.name for p in full.iterdir() if p.name.startswith("newonfull")][0].endswith("-stray")
    assert server.stop() == 0
