"""KJBOD_TIMELINE (kjbod.storage.timeline): a server asked for it writes when its periodic work and each hand-off's
legs ran, on the machine-wide monotonic clock, when it exits; tools/bench/dir_workers.py lays its requests over
that to say what sits under the p99. Off by default: nothing is hooked or kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import live
import pytest

from tools.bench.datapath import create_topic
from tools.bench.dir_workers import explain_tail, paced_produce, read_timeline, report_p99, small_batch

kjbod_server_factory = live.kjbod_server_factory


def test_off_by_default_nothing_is_hooked():
    env = {k: v for k, v in os.environ.items() if k != "KJBOD_TIMELINE"}
    code = "import gc; from kjbod.storage import timeline; print(timeline.ON, timeline._on_gc in gc.callbacks)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_a_server_records_its_hand_offs_and_periodic_work(kjbod_server_factory, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "timeline"
    monkeypatch.setenv("KJBOD_TIMELINE", str(path))
    server = kjbod_server_factory()
    create_topic(server.port, "t", 3)
    started = time.perf_counter()
    sent: list[float] = []
    latencies = paced_produce(server.port, "t", 0, 200, 0.2, small_batch(), sent=sent)
    assert server.stop() == 0
    events = read_timeline(path)
    kinds = {e[0] for e in events}
    assert {"server read", "server write", "worker wake-up", "worker batch", "loop wake-up"} <= kinds, kinds
    assert all(start <= end for _kind, start, end, _detail in events)
    # The server's clock is the client's: each request's reply was written while the client waited for it.
    writes = sorted(e[1] for e in events if e[0] == "server write" and e[1] >= started)
    for at, took in zip(sent, latencies, strict=True):
        assert any(at <= w <= at + took for w in writes)


def test_explain_tail_names_what_sits_under_the_slowest_requests():
    # 100 requests of 1 ms every 10 ms; the two slowest (8 ms) each sit under a "placement review".
    requests = [(i * 0.01, 0.001) for i in range(100)]
    requests[10] = (0.10, 0.008)
    requests[50] = (0.50, 0.008)
    events = [("placement review", 0.101, 0.103, "stay placed"), ("placement review", 0.502, 0.503, "spread"),
              ("gc", 0.3005, 0.3006, "generation 0")]
    lines = explain_tail([requests], events)
    text = "\n".join(lines)
    assert "slowest 2% of each round: 2 requests" in lines[0]
    assert "placement review 100% (by chance 1.9%, any request 2.0%" in text
    assert "gc 0% (by chance 0.8%, any request 1.0%" in text
    assert "under none of those: 0%" in text
    assert "placement reviews: spread 1, stay placed 1" in text


def test_explain_tail_cuts_a_slow_request_at_each_leg_of_its_hand_off():
    # One request of 1 ms through a worker: read at 0.1 ms, handed over at 0.2, the worker running 0.3-0.5,
    # the loop answered at 0.6, the reply written at 0.8.
    events = [("server read", 0.0001, 0.0001, ""), ("worker wake-up", 0.0002, 0.0003, ""),
              ("worker batch", 0.0003, 0.0005, "1"), ("loop wake-up", 0.0005, 0.0006, ""),
              ("server write", 0.0008, 0.0008, "")]
    text = "\n".join(explain_tail([[(0.0, 0.001)]], events))
    assert ("to the server's read 100 (100), on the loop to the hand-over 100 (100), the worker's wake-up 100 "
            "(100), on the worker 200 (200), the loop's wake-up 100 (100), on the loop to the reply's write 200 "
            "(200), back to the client 200 (200)") in text
    loop_path = "\n".join(explain_tail([[(0.0, 0.001)]], [events[0], events[-1]]))
    assert "to the server's read 100 (100), in the server 700 (700), back to the client 200 (200)" in loop_path


def test_the_p99_report_says_why_when_the_target_is_missed(capsys: pytest.CaptureFixture[str]):
    def variant(p99_s: float, preempted: float) -> dict[str, list[float]]:
        """The figure's samples (servers as an operator runs them) and, "_timed", the recording servers' ones,
        here 10 % slower and preempted once more per request."""
        plain = {"p99": [p99_s] * 2, "p50": [0.0003] * 2, "waited": [0.0001] * 2, "preempted": [preempted] * 2}
        timed = {"p99_timed": [p99_s * 1.1] * 2, "p50_timed": [0.0003] * 2, "waited_timed": [0.0002] * 2,
                 "preempted_timed": [preempted + 1] * 2}
        return plain | timed

    samples = {"workers": variant(0.0015, 3.5), "loop": variant(0.001, 0.5), "unplaced": variant(0.001, 3.0)}
    requests = {name: [[(0.0, 0.001), (0.01, 0.002)]] for name in samples}
    out = report_p99(samples, requests, {name: [] for name in samples}, [])
    printed = capsys.readouterr().out
    assert out["handoff_produce_p99_vs_loop"] == pytest.approx(1.5)
    assert "1.50x (target <= 1.2x: BELOW TARGET); per-round ratios min 1.50, median 1.50, max 1.50" in printed
    assert "Why above 1.2x" in printed and "preempted 3.5 times per request against 0.5" in printed
    # the recording servers' figure beside it, and their tail: the explanation's
    assert "On the servers recording the timeline, in the same rounds: 1650 us vs 1100 us, 1.50x" in printed
    assert "Tail, workers (the servers recording the timeline): the server's threads waited on a run queue 200 us " \
           "per request and were preempted 4.50 times per request" in printed
    samples["workers"] = variant(0.0011, 3.5)
    report_p99(samples, requests, {name: [] for name in samples}, [])
    assert "Why above" not in capsys.readouterr().out
