"""The dir-workers benchmark's rounds: the 1 MiB Produce samples (tools.bench.dir_workers.mib_samples), every
server sampled MIB_SAMPLES_PER_ROUND times a round, the servers taking turns in an order that rotates, and every
dirty page written out before each sample, outside its timing; and the moderate-rate p99 rounds (p99_phase). The
load itself is replaced by a recorder here (the real one runs against real servers in `make bench`)."""

from __future__ import annotations

from typing import Any

from tools.bench import dir_workers


class _Server:
    def __init__(self, port: int) -> None:
        self.port = port


def test_each_sample_follows_a_sync_and_the_order_rotates(monkeypatch) -> None:
    events: list[Any] = []
    monkeypatch.setattr(dir_workers.os, "sync", lambda: events.append("sync"))

    def produce(port: int, frame: bytes, count: int, depth: int) -> float:
        events.append(port)
        assert (frame, count, depth) == (b"frame", dir_workers.MIB_COUNT, 8)
        return count / (port * 100.0)  # a rate told apart by server: port x 100 MiB/s

    monkeypatch.setattr(dir_workers, "produce_pipelined", produce)
    servers = {"workers": _Server(1), "loop": _Server(2), "unplaced": _Server(3)}
    samples: dict[str, dict[str, list[float]]] = {name: {"mib": []} for name in servers}
    for round_no in range(2):
        dir_workers.mib_samples(servers, b"frame", round_no, samples)  # type: ignore[arg-type]

    assert events[0::2] == ["sync"] * (len(events) // 2)  # a sync before every sample
    order = events[1::2]
    per_round = dir_workers.MIB_SAMPLES_PER_ROUND
    assert len(order) == 2 * per_round * 3
    turns = [tuple(order[i : i + 3]) for i in range(0, len(order), 3)]
    assert all(sorted(turn) == [1, 2, 3] for turn in turns)  # every server once a turn
    assert {turn[0] for turn in turns} == {1, 2, 3}  # each one first in some turn
    assert turns[1] == turns[0][1:] + turns[0][:1]  # the order rotates by one each turn
    for name, server in servers.items():
        assert samples[name]["mib"] == [server.port * 100.0] * (2 * per_round)


def test_the_p99_rounds_rotate_the_six_servers_and_keep_each_sets_figures_apart(monkeypatch) -> None:
    """tools.bench.dir_workers.p99_phase: the operator's servers give the figure ("p99"), the recording ones
    ("p99_timed") the requests the tail is explained from; the order rotates by one server a round."""
    ran: list[int] = []

    def one_round(server: _Server, batch: bytes, seconds: float) -> tuple[list[tuple[float, float]], float, float]:
        ran.append(server.port)
        return [(0.0, server.port / 1000)], 0.0, float(server.port)

    monkeypatch.setattr(dir_workers, "p99_round", one_round)
    plain = {"workers": _Server(1), "loop": _Server(2), "unplaced": _Server(3)}
    timed = {"workers": _Server(11), "loop": _Server(12), "unplaced": _Server(13)}
    samples = {name: dir_workers.p99_keys() for name in plain}
    requests: dict[str, list[list[tuple[float, float]]]] = {name: [] for name in plain}
    dir_workers.p99_phase(plain, timed, b"batch", 1.0, 7, samples, requests)  # type: ignore[arg-type]

    turns = [ran[i : i + 6] for i in range(0, len(ran), 6)]
    assert len(turns) == 7 and all(sorted(t) == [1, 2, 3, 11, 12, 13] for t in turns)
    assert [t[0] for t in turns] == [1, 2, 3, 11, 12, 13, 1]  # each server first once in six rounds
    assert turns[1] == turns[0][1:] + turns[0][:1]
    assert samples["workers"]["p99"] == [0.001] * 7 and samples["workers"]["p99_timed"] == [0.011] * 7
    assert samples["loop"]["preempted"] == [2.0] * 7 and samples["loop"]["preempted_timed"] == [12.0] * 7
    assert requests["unplaced"] == [[(0.0, 0.013)]] * 7  # the recording servers' requests only
