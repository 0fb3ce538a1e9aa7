"""The dir_workers bench's Fetch phase (tools/bench/dir_workers.py): its rounds measure what they say on a real
server, and its report gives the median of the per-round ratios with their spread."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import live
from tools.bench import dir_workers
from tools.bench.datapath import exact_batch
from tools.bench.dir_workers import (
    fetch_keys,
    fetch_round,
    fetch_setup,
    hand_offs,
    read_timeline,
    report_fetch,
)

kjbod_server_factory = live.kjbod_server_factory


def test_a_fetch_round_measures_each_server_over_the_same_passes(kjbod_server_factory, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(dir_workers, "FETCH_MIB", 2)  # a backlog of two batches per partition
    monkeypatch.setenv("KJBOD_TIMELINE", str(tmp_path / "timeline"))
    workers = kjbod_server_factory()
    monkeypatch.delenv("KJBOD_TIMELINE")
    monkeypatch.setenv("KJBOD_DIR_WORKERS", "0")  # the loop path, for the server started now
    servers = {"workers": workers, "loop": kjbod_server_factory()}
    monkeypatch.delenv("KJBOD_DIR_WORKERS")
    batch = exact_batch(256 * 1024, 1024)  # 1024 records, as the bench's 1 MiB batches (its offsets count them)
    for server in servers.values():
        fetch_setup(server, batch)  # type: ignore[arg-type]
    samples = {name: fetch_keys() for name in servers}
    windows: dict[str, list[tuple[float, float]]] = {}
    fetch_round(servers, 3, samples, windows)  # type: ignore[arg-type]
    assert [len(w) for w in windows.values()] == [3, 3]
    assert all(a < b for w in windows.values() for a, b in w)
    for name, s in samples.items():
        assert all(len(v) == 1 for v in s.values()), (name, s)
        assert s["fetch"][0] > 0
        assert s["fetch_loop_cpu"][0] > 0 and s["fetch_client_cpu"][0] > 0
        # Each fetch reads its request and sends at least its answer's header (and a region per partition).
        assert s["fetch_syscr"][0] >= 1 and s["fetch_syscw"][0] >= 1
        assert s["fetch_placed"][0] in (0.0, 1.0)
    assert workers.stop() == 0
    # Reads the page cache answers are served on the event loop: the workers ran no batch for most fetches (one
    # finds the log's lock held by a flush now and then, and goes to its dir's worker).
    fetches = 3 * dir_workers.FETCH_MIB
    assert hand_offs(read_timeline(tmp_path / "timeline"), windows["workers"]) < fetches / 2


def test_hand_offs_counts_the_worker_batches_that_ended_within_the_windows():
    events = [("worker batch", 0.0, 0.5, "1"), ("worker batch", 1.0, 1.5, "2"), ("worker batch", 2.9, 3.1, "1"),
              ("loop wake-up", 1.2, 1.3, "")]
    assert hand_offs(events, [(0.4, 1.6), (3.0, 4.0)]) == 3
    assert hand_offs(events, [(0.6, 0.9)]) == 0


def _variant(rates: list[float], **per_fetch: float) -> dict[str, list[float]]:
    s = fetch_keys()
    for key in s:
        s[key] = [per_fetch.get(key, 0.0)] * len(rates)
    s["fetch"] = rates
    return s


def test_the_fetch_report_gives_the_median_of_the_rounds_and_their_spread(capsys: pytest.CaptureFixture[str]):
    samples = {"workers": _variant([900.0, 1000.0, 1100.0], fetch_loop_cpu=0.0011),
               "loop": _variant([1000.0] * 3, fetch_loop_cpu=0.001)}
    assert report_fetch(samples) == pytest.approx(1.0)
    printed = capsys.readouterr().out
    assert "workers: 1,000 MiB/s, loop 1,000 MiB/s: 100.0% (target >= 95%: meets target)" in printed
    assert "per-round ratios min 90.0%, median 100.0%, max 110.0% over 3 rounds" in printed
    assert "loop path over workers: median 90.9%" in printed
    assert "event-loop thread 1100 us CPU" in printed
    report_fetch(samples, {"workers": 0.25, "loop": 0.0})
    printed = capsys.readouterr().out
    assert "0.250 hand-offs to a dir's worker (KJBOD_TIMELINE)" in printed
    assert "Why" not in printed


def test_a_fetch_figure_below_target_says_why_from_what_was_measured(capsys: pytest.CaptureFixture[str]):
    loop = _variant([1000.0] * 3, fetch_loop_cpu=0.001, fetch_loop_waited=0.0002)
    # Handed off: the hand-offs are the cause.
    report_fetch({"workers": _variant([800.0] * 3, fetch_loop_cpu=0.001), "loop": loop}, {"workers": 1.0})
    assert "Why Fetch is below 95% (80.0%): the workers' fetches were handed to a dir's worker (1.00" in \
        capsys.readouterr().out
    # No hand-off but more CPU per fetch.
    report_fetch({"workers": _variant([800.0] * 3, fetch_loop_cpu=0.0012), "loop": loop}, {"workers": 0.0})
    assert "a fetch cost the workers' server +200 us of CPU against the loop path's 1000 us" in \
        capsys.readouterr().out
    # Neither: the machine's other work, with the run-queue waits and the rounds' spread measured.
    report_fetch({"workers": _variant([700.0, 900.0, 1000.0], fetch_loop_cpu=0.001, fetch_loop_waited=0.0005),
                  "loop": loop}, {"workers": 0.0})
    printed = capsys.readouterr().out
    assert "not the fetch's cost: 0.00 hand-offs per fetch and +0 us of server CPU" in printed
    assert "waited on a run queue 500 us per fetch against 200 us, and single rounds ranged from 70% to 100%" in printed
