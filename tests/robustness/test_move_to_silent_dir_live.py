"""AlterReplicaLogDirs into a log dir that does not answer, on a running node (the fsio seam's fault file holds
the dir's size probe: KJBOD_FAULTS with ``delay_ms``; the stall timeout off, so the dir stays "not answering"
rather than going offline).

Making the move's future dir there would hold the request until the call returned, which for a hung disk may be
never: the request once went unanswered for as long as the dir hung, past the stall timeout that took the dir
offline. The move is refused with KAFKA_STORAGE_ERROR (what DescribeLogDirs reports for the dir, and what an
offline destination gets), logged naming the dir; the partition stays where it is and a move to its own dir is
still answered.
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
