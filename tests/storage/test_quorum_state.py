"""The quorum-state file: Kafka's JSON layout byte for byte, read back, written atomically through the dir's seam."""

from __future__ import annotations

import json
import os

import pytest

from kjbod.storage import fsio
from kjbod.storage.errors import KafkaStorageError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.quorum_state import QUORUM_STATE_FILE, ElectionState, QuorumStateError, QuorumStateStore


def test_exact_bytes_of_kafkas_version_0_layout() -> None:
    voted = ElectionState(epoch=7, voted_id=2, voters=(3, 1, 2))
    assert voted.render() == (b'{"clusterId":"","leaderId":-1,"leaderEpoch":7,"votedId":2,"appliedOffset":0,'
                              b'"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')
    led = ElectionState(epoch=3, leader_id=1, voters=(1,))
    assert json.loads(led.render()) == {"clusterId": "", "leaderId": 1, "leaderEpoch": 3, "votedId": -1,
                                        "appliedOffset": 0, "currentVoters": [{"voterId": 1}], "data_version": 0}


@pytest.mark.parametrize("state", [
    ElectionState(0),
    ElectionState(5, leader_id=3, voters=(1, 2, 3)),
    ElectionState(9, voted_id=1, voters=(1, 2, 3)),
    ElectionState(9, leader_id=2, voted_id=1, voters=(1, 2, 3)),  # a vote given, then the epoch's leader learned
])
def test_round_trip(state: ElectionState) -> None:
    assert ElectionState.parse(state.render()) == state


def test_a_file_written_by_kafka_is_read() -> None:
    # the example in Kafka's FileQuorumStateStore, and a version 1 file without a voted directory
    v0 = b'{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,"currentVoters":[],' \
         b'"data_version":0}'
    assert ElectionState.parse(v0) == ElectionState(2, leader_id=1)
    v1 = b'{"leaderId":-1,"leaderEpoch":4,"votedId":3,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}'
    assert ElectionState.parse(v1) == ElectionState(4, voted_id=3)


@pytest.mark.parametrize(("data", "message"), [
    (b"", "not JSON"),
    (b"[1]", "not a JSON object"),
    (b'{"leaderEpoch":1}', "does not have a data_version field"),
    (b'{"leaderEpoch":1,"data_version":2}', r"data_version \(2\) is not within the min \(0\) and max \(1\)"),
    (b'{"leaderEpoch":"x","data_version":0}', "leaderEpoch is 'x', not a 32-bit integer"),
    (b'{"leaderEpoch":1,"currentVoters":[{"voterId":"a"}],"data_version":0}', "voterId 'a' is not an integer"),
    (b'{"leaderEpoch":1,"votedId":2,"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}',
     "dynamic quorum"),
])
def test_a_damaged_file_is_refused_with_its_name_and_problem(data: bytes, message: str) -> None:
    with pytest.raises(QuorumStateError, match=message) as info:
        ElectionState.parse(data, "/d/__cluster_metadata-0/quorum-state")
    assert "/d/__cluster_metadata-0/quorum-state" in str(info.value)


def test_store_writes_atomically_and_reads_back(tmp_path) -> None:
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    store = QuorumStateStore(LogDirIO(str(tmp_path)), str(part))
    assert store.read() is None
    store.write(ElectionState(1, voted_id=2, voters=(1, 2, 3)))
    store.write(ElectionState(2, leader_id=3, voters=(1, 2, 3)))
    assert sorted(os.listdir(part)) == [QUORUM_STATE_FILE]  # no temp file left behind
    assert store.read() == ElectionState(2, leader_id=3, voters=(1, 2, 3))
    assert QuorumStateStore(LogDirIO(str(tmp_path)), str(part)).read() == ElectionState(2, leader_id=3,
                                                                                          voters=(1, 2, 3))
    store.clear()
    assert store.read() is None


def test_a_failed_write_leaves_the_old_state_and_fails_the_dir(tmp_path) -> None:
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    io = LogDirIO(str(tmp_path))
    store = QuorumStateStore(io, str(part))
    store.write(ElectionState(1, voted_id=2, voters=(1, 2, 3)))
    rule = fsio.inject(str(tmp_path), ops=["rename"])
    try:
        with pytest.raises(KafkaStorageError):
            store.write(ElectionState(2, voted_id=3, voters=(1, 2, 3)))
    finally:
        rule.release()
        fsio.clear()
    assert ElectionState.parse((part / QUORUM_STATE_FILE).read_bytes()) == ElectionState(1, voted_id=2,
                                                                                         voters=(1, 2, 3))
    assert not io.online
