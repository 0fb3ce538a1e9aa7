"""KJBOD_LOOP_PROFILE (kjbod.server.loop_profile): SIGUSR1 profiles the loop's thread, SIGUSR2 writes the profile
and the thread's CPU seconds over it, for tools/bench/replication.py --profile."""

from __future__ import annotations

import asyncio
import json
import os
import pstats
import signal
import threading

from kjbod.server.loop_profile import ENV, install_loop_profile


def busy_work() -> int:
    return sum(i * i for i in range(20000))


async def test_the_signals_profile_the_loops_thread_only(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path))
    loop = asyncio.get_running_loop()
    profile = install_loop_profile(loop)
    assert profile is not None
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        while profile.profiler is None:  # the handler runs on a later pass of the loop
            await asyncio.sleep(0.01)
        busy_work()
        other = threading.Thread(target=busy_work, name="not-the-loop")
        other.start()
        other.join()
        os.kill(os.getpid(), signal.SIGUSR2)
        base = tmp_path / f"loop-{os.getpid()}"
        while not (base.with_suffix(".json")).exists():
            await asyncio.sleep(0.01)
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
        loop.remove_signal_handler(signal.SIGUSR2)
    stats = pstats.Stats(str(base.with_suffix(".prof")))
    calls = {func: value[1] for (_file, _line, func), value in stats.stats.items()}  # type: ignore[attr-defined]
    assert calls.get("busy_work") == 1  # this thread's call; the other thread's is not in it
    assert json.loads(base.with_suffix(".json").read_text())["loop_cpu_s"] > 0


def test_without_the_variable_nothing_is_installed(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    loop = asyncio.new_event_loop()
    try:
        assert install_loop_profile(loop) is None
    finally:
        loop.close()


async def test_the_signals_profile_the_dir_workers_threads_too(tmp_path, monkeypatch):
    """A dir worker's jobs between the two signals land in workers-<pid>.prof, and its CPU in the json."""
    from kjbod.storage import fsio
    from kjbod.storage.workers import DirWorker

    monkeypatch.setenv(ENV, str(tmp_path / "profiles"))
    io = fsio.LogDirIO(str(tmp_path / "d"))
    io.mkdir(io.path, parents=True)
    worker = DirWorker(io)
    loop = asyncio.get_running_loop()
    profile = install_loop_profile(loop)
    assert profile is not None
    base = tmp_path / "profiles" / f"loop-{os.getpid()}"
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        while profile.profiler is None:
            await asyncio.sleep(0.01)
        done = loop.create_future()
        worker.submit(busy_work, lambda ok, value: done.set_result(value), loop)
        assert await done == busy_work()
        os.kill(os.getpid(), signal.SIGUSR2)
        while not base.with_suffix(".json").exists():
            await asyncio.sleep(0.01)
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
        loop.remove_signal_handler(signal.SIGUSR2)
        worker.stop()
        worker.join(10)
    stats = pstats.Stats(str(tmp_path / "profiles" / f"workers-{os.getpid()}.prof"))
    calls = {func: value[1] for (_file, _line, func), value in stats.stats.items()}  # type: ignore[attr-defined]
    assert calls.get("busy_work") == 1  # the worker's call; the loop's own (the assert above) is not in it
    loop_stats = pstats.Stats(str(base.with_suffix(".prof")))
    loop_calls = {func: value[1] for (_f, _l, func), value in loop_stats.stats.items()}  # type: ignore[attr-defined]
    assert loop_calls.get("busy_work") == 1  # the loop's
    got = json.loads(base.with_suffix(".json").read_text())
    assert got["workers"] >= 1 and got["workers_cpu_s"] > 0
