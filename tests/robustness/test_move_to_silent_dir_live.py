"""AlterReplicaLogDirs into a log dir that does not answer, on a running node (the fsio seam's fault file holds
the dir's size probe: KJBOD_FAULTS with ``delay_ms``; the stall timeout off, so the dir stays "not answering"
rather than going offline).

Making the move's future dir there would hold the request until the call returned, which for a hung disk may be
never: the request once went unanswered for as long as the dir hung, past the stall timeout that took the dir
offline. The move is refused with KAFKA_STORAGE_ERROR (what DescribeLogDirs reports for the dir, and what an
offline destination gets), logged naming the dir; the partition stays where it is and a move to its own dir is
still answered.

A dir that hangs only once the move is accepted (its future dir being made there) holds that request until the
stall timeout takes the dir offline, then the request is answered KAFKA_STORAGE_ERROR without waiting any longer
for the stuck call (it once waited for the call to return).
"""

from __future__ import annotations

import json
import time

import pytest
from live import start_server

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import AlterReplicaLogDirsRequest, DescribeLogDirsRequest
from tests.datapath.support import RawClient, log_events, new_topic

pytestmark = pytest.mark.slow

PATIENCE_S = 120.0
HELD_MS = 25_000  # how long the hanging dir holds each operation: longer than the client waits for an answer


def dir_errors(client: RawClient) -> dict[str, tuple[int, list[str]]]:
    """Every log dir's error code and the partitions DescribeLogDirs lists in it."""
    resp = client.call(DescribeLogDirsRequest(topics=None), 4)
    return {d.log_dir: (d.error_code, [f"{t.name}-{p.partition_index}" for t in d.topics for p in t.partitions])
            for d in resp.results}


def move(client: RawClient, topic: str, path: str) -> int:
    req = AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDirsRequest.AlterReplicaLogDir(path=path, topics=[
        AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=topic, partitions=[0])])])
    [result] = client.call(req, 2).results
    [partition] = result.partitions
    return partition.error_code


def test_a_move_into_a_dir_that_does_not_answer_is_refused_at_once(tmp_path, monkeypatch):
    faults = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(faults))
    server = start_server(tmp_path / "node", log_dir_count=2, overrides={"log.dir.stall.timeout.ms": "0"})
    try:
        # The client's timeout is far below how long the dir is held: a request waiting on it fails the test.
        with RawClient.to(server, timeout=60) as client:
            new_topic(client, "m")
            [home] = [path for path, (_code, parts) in dir_errors(client).items() if "m-0" in parts]
            [silent] = [str(p) for p in server.log_dirs if str(p) != home]
            faults.write_text(json.dumps({"faults": [{"dir": silent, "delay_ms": 600_000, "ops": ["statvfs"]}]}))
            deadline = time.monotonic() + PATIENCE_S
            while dir_errors(client)[silent][0] != E.KAFKA_STORAGE_ERROR:
                assert time.monotonic() < deadline, "the held dir never showed as not answering"
                time.sleep(0.2)

            assert move(client, "m", silent) == E.KAFKA_STORAGE_ERROR
            assert move(client, "m", home) == E.NONE  # its own dir: nothing to do, answered as before
            assert dir_errors(client)[home] == (E.NONE, ["m-0"])
    finally:
        code = server.stop()
    assert code == 0, server.stderr()
    [refused] = log_events(server, "replica_move_refused")
    assert refused["dest_dir"] == silent and refused["partition"] == "m-0"
    assert f"statvfs {silent} has not returned" in refused["reason"]


def test_a_move_whose_destination_hangs_meanwhile_is_answered_when_the_dir_is_failed(tmp_path, monkeypatch):
    faults = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(faults))
    server = start_server(tmp_path / "node", log_dir_count=2, overrides={"log.dir.stall.timeout.ms": "2000"})
    try:
        # The client gives up before the held call returns: only an answer that does not wait for it passes.
        with RawClient.to(server, timeout=HELD_MS / 1000 - 5) as client:
            new_topic(client, "h")
            [home] = [path for path, (_code, parts) in dir_errors(client).items() if "h-0" in parts]
            [hanging] = [str(p) for p in server.log_dirs if str(p) != home]
            faults.write_text(json.dumps({"faults": [{"dir": hanging, "delay_ms": HELD_MS}]}))
            held_until = time.monotonic() + HELD_MS / 1000
            assert move(client, "h", hanging) == E.KAFKA_STORAGE_ERROR
            assert dir_errors(client)[home] == (E.NONE, ["h-0"])
            assert dir_errors(client)[hanging][0] == E.KAFKA_STORAGE_ERROR
        # A call held by a hung disk keeps the process from ending until it returns (README, "What a hung disk
        # still costs"); this one returns after HELD_MS, and the stop is awaited after that.
        time.sleep(max(0.0, held_until - time.monotonic()) + 1)
    finally:
        faults.write_text(json.dumps({"faults": []}))
        code = server.stop()
    assert code == 0, server.stderr()
    assert log_events(server, "log_dir_stalled")
