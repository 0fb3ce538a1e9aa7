"""tools/bench/replication_floor.py measures what it says: its three processes pass every record along the chain
(the leader's and both followers' logs hold each acks=all record once its reply came back), the figures come
from records both cases really sent, and its processes stop however the measurement ends."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tools.bench import replication_floor
from tools.bench.replication_floor import ACKS_1, ACKS_ALL, RECORD, SIZE, Client, Topology, floor


def test_floor_returns_each_cases_p99_from_the_records_it_sent() -> None:
    result = floor(rounds=2, seconds=0.3, rate=500, warm_up=0.2)
    assert result["acks_all_p99_ms"] > 0 and result["acks1_p99_ms"] > 0
    assert result["ratio"] == result["acks_all_p99_ms"] / result["acks1_p99_ms"]
    assert len(result["rounds"]) == 2 and all(a > 0 and b > 0 for a, b in result["rounds"])
    # 0.3 s at 500/s is 150 records a round whatever the machine's speed: the client sends on a schedule
    assert result["records"] == {"acks_all": 300, "acks1": 300}
    sent = result["from_send"]  # the same records, from their sends: never longer than from their schedules
    assert len(sent["rounds"]) == 2
    for (all_sent, one_sent), (all_due, one_due) in zip(sent["rounds"], result["rounds"], strict=True):
        assert 0 < all_sent <= all_due and 0 < one_sent <= one_due
    assert result["cpu_us_per_record"]["acks_all"] > 0 and result["cpu_us_per_record"]["acks1"] > 0
    by_process = result["cpu_us_per_record_by_process"]
    assert set(by_process["acks_all"]) == {"leader", "follower 0", "follower 1"}
    assert all(0 < us["loop"] <= us["all"] for us in by_process["acks_all"].values())
    # an acks=1 record never reaches the followers: their parked fetches wait out those rounds
    for follower in ("follower 0", "follower 1"):
        assert by_process["acks1"][follower]["all"] < by_process["acks_all"][follower]["all"]


def test_an_acks_all_reply_comes_once_both_followers_wrote_the_record() -> None:
    with Topology() as topology:
        directory = topology.directory
        clients = {kind: Client(topology.port, kind) for kind in (ACKS_ALL, ACKS_1)}
        try:
            replicated = len(clients[ACKS_ALL].run(500, 0.1))
            single = len(clients[ACKS_1].run(500, 0.06))
        finally:
            for client in clients.values():
                client.close()
        sizes = {p.name: p.stat().st_size for p in directory.iterdir()}
    assert replicated == 50 and single == 30
    assert sizes == {"leader-rf3.log": 50 * RECORD, "follower-0.log": 50 * RECORD, "follower-1.log": 50 * RECORD,
                     "leader-rf1.log": 30 * RECORD}
    assert not directory.exists()


@pytest.mark.parametrize("ending", [RuntimeError, KeyboardInterrupt])
def test_the_processes_stop_and_the_dir_goes_however_the_measurement_ends(ending: type[BaseException]) -> None:
    with pytest.raises(ending), Topology() as topology:
        processes = list(topology.processes)
        directory = topology.directory
        raise ending()
    assert len(processes) == 3
    # 0: each stopped on its own when its standard input closed (a kill would be -9)
    assert [p.returncode for p in processes] == [0, 0, 0]
    assert not Path(f"/proc/{processes[0].pid}").exists() and not directory.exists()


def test_a_broken_frame_closes_that_connection_only_with_a_message(capfd: pytest.CaptureFixture[str]) -> None:
    with Topology() as topology:
        with socket.create_connection(("127.0.0.1", topology.port)) as bad:
            bad.sendall(SIZE.pack(1) + b"\x09")
            assert bad.recv(16) == b""  # closed by the leader
        client = Client(topology.port, ACKS_ALL)
        try:
            assert len(client.run(500, 0.02)) == 10
        finally:
            client.close()
    assert "a frame of kind 9 and 1 bytes; connection closed" in capfd.readouterr().err


def test_a_follower_gone_is_an_error_naming_it_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replication_floor, "REPLY_TIMEOUT_S", 0.5)
    with Topology() as topology:
        topology.processes[2].kill()  # a follower
        topology.processes[2].wait()
        client = Client(topology.port, ACKS_ALL)
        try:
            with pytest.raises(RuntimeError, match="no reply from the replication floor's leader to record 1"):
                client.run(500, 0.02)
        finally:
            client.close()


def test_placed_keeps_each_processs_threads_on_one_cpu() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: every thread is on it anyway")
    with Topology(placed=True) as topology:
        for pid in topology.pids():
            assert {len(os.sched_getaffinity(int(tid))) for tid in os.listdir(f"/proc/{pid}/task")} == {1}
        client = Client(topology.port, ACKS_ALL)
        try:
            assert len(client.run(500, 0.02)) == 10
        finally:
            client.close()
