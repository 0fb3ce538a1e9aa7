"""`kjbod metadata-quorum describe`: Kafka's tool's two renderings of a DescribeQuorum answer (pure), and its
usage errors as one line."""

from __future__ import annotations

import subprocess

from live import COMMAND

from kjbod.cli.metadata_quorum import QuorumInfo, Replica, render_replication, render_status

INFO = QuorumInfo(
    leader_id=1002, leader_epoch=4, high_watermark=120,
    voters=[Replica(1001, 118, 9_000, 8_500), Replica(1002, 120, 10_000, 10_000), Replica(1003, 120, 9_990, 9_990)],
    observers=[Replica(1, 120, 9_995, 9_995)],
    endpoints={1002: ["CONTROLLER://127.0.0.1:9096"]})


def test_status_is_kafkas_summary() -> None:
    assert render_status(INFO, "MkU3OEVBNTcwNTJENDM2Qg").splitlines() == [
        "ClusterId:              MkU3OEVBNTcwNTJENDM2Qg",
        "LeaderId:               1002",
        "LeaderEpoch:            4",
        "HighWatermark:          120",
        "MaxFollowerLag:         2",
        "MaxFollowerLagTimeMs:   1500",  # the leader's last caught-up time minus the laggard's
        'CurrentVoters:          [{"id": 1001, "directoryId": null}, {"id": 1002, "directoryId": null, '
        '"endpoints": ["CONTROLLER://127.0.0.1:9096"]}, {"id": 1003, "directoryId": null}]',
        'CurrentObservers:       [{"id": 1, "directoryId": null}]',
    ]


def test_replication_is_kafkas_table_leader_first() -> None:
    rows = [line.split("\t")[:-1] for line in render_replication(INFO).splitlines()]
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"],
        ["1002", "AAAAAAAAAAAAAAAAAAAAAA", "120", "0", "10000", "10000", "Leader"],
        ["1001", "AAAAAAAAAAAAAAAAAAAAAA", "118", "2", "9000", "8500", "Follower"],
        ["1003", "AAAAAAAAAAAAAAAAAAAAAA", "120", "0", "9990", "9990", "Follower"],
        ["1", "AAAAAAAAAAAAAAAAAAAAAA", "120", "0", "9995", "9995", "Observer"],
    ]
    assert len({len(row[0]) for row in rows}) == 1  # each column padded to its widest cell
    human = render_replication(INFO, human_readable=True, now_ms=10_500).splitlines()
    assert human[1].split("\t")[4].strip() == "500 ms ago"


def test_usage_errors_are_one_line() -> None:
    for args, why in ((("--bootstrap-controller", "nohost", "describe", "--status"), "is not HOST:PORT"),
                      (("--bootstrap-controller", "127.0.0.1:1", "describe", "--status", "--human-readable"),
                       "--human-readable is only supported along with --replication"),
                      (("--bootstrap-controller", "127.0.0.1:1", "describe", "--status"),
                       "no controller in --bootstrap-controller described the quorum")):
        done = subprocess.run([*COMMAND, "metadata-quorum", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert why in line, line
