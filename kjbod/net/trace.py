"""Timestamps of what a process does, for finding what sits under a latency tail (``KJBOD_TRACE=<dir>``).

Strategy: off by default, and then ``event`` costs a global lookup and a test (the hot paths that call it look
at ``ON`` first). On, each event is a tuple (CLOCK_MONOTONIC seconds, kind, a, b) appended to a list in memory
(any thread: ``list.append`` is atomic), and a daemon thread of this module writes what gathered, every
FLUSH_S, to ``<dir>/trace-<pid>.txt``, one event a line: ``<time> <kind> <a> <b>``. The file is not in a log
dir and the loop never writes it. CLOCK_MONOTONIC is the same clock in every process of the machine, so a load
generator's own timestamps (``time.monotonic()``) line up with the brokers': tools/bench/replication.py reads
the files after its latency rounds and decomposes each slow record's latency into legs (leader append,
answer to each follower, the follower's append, its next fetch, the HW move) and lists the background events
under the slowest ones.

Kinds ending in ``+`` open a span that the same kind ending in ``-`` closes (the work between ran on the
thread that recorded them). The replication path records its own events where they happen (fetcher.py, the
Fetch handler, manager.py); the background work elsewhere (GC, heartbeats, the metadata log's fetches, the dir
workers' placement reviews, the dirs' background ticks, the stall watchdog) is hooked by kjbod.server.tracing
when the process starts, without touching those modules.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

ENV = "KJBOD_TRACE"
FLUSH_S = 0.5

ON = False
_events: list[tuple[float, str, Any, Any]] = []
_path: str | None = None
_flusher: threading.Thread | None = None
_stop = threading.Event()


def event(kind: str, a: Any = "", b: Any = "") -> None:
    """One event now (nothing while tracing is off)."""
    if ON:
        _events.append((time.monotonic(), kind, a, b))


def start(directory: str | None = None) -> bool:
    """Turns tracing on when ``directory`` (or ``$KJBOD_TRACE``) names one; False when it stays off."""
    global ON, _path, _flusher
    if ON:
        return True
    directory = directory or os.environ.get(ENV)
    if not directory:
        return False
    os.makedirs(directory, exist_ok=True)
    _path = os.path.join(directory, f"trace-{os.getpid()}.txt")
    ON = True
    _stop.clear()
    _flusher = threading.Thread(target=_flush_loop, name="kjbod-trace", daemon=True)
    _flusher.start()
    return True


def stop() -> None:
    """Writes what is left and turns tracing off."""
    global ON, _flusher
    if not ON:
        return
    ON = False
    _stop.set()
    if _flusher is not None:
        _flusher.join()
        _flusher = None
    flush()


def flush() -> None:
    if _path is None:
        return
    taken = _events[: len(_events)]
    del _events[: len(taken)]  # appends made meanwhile are after these: kept for the next flush
    if not taken:
        return
    with open(_path, "a") as f:
        f.write("".join(f"{t:.6f} {kind} {a} {b}\n" for t, kind, a, b in taken))


def _flush_loop() -> None:
    while not _stop.wait(FLUSH_S):
        event("trace_flush+")  # its own cost shows in the trace: formatting holds the GIL
        flush()
        event("trace_flush-")


def read(path: str) -> list[tuple[float, str, str, str]]:
    """A trace file's events: (time, kind, a, b), the last two as written."""
    out = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 3)
            if len(parts) >= 2:
                parts += [""] * (4 - len(parts))
                out.append((float(parts[0]), parts[1], parts[2], parts[3]))
    return out
