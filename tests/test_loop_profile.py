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
