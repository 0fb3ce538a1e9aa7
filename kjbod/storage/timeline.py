"""When the server's periodic and background work ran: a debugging record for finding what makes a latency tail.

A request's p99 at a moderate rate is its 1 % slowest: a few periodic events a second (a timer on the loop, a
background thread taking the interpreter, a garbage collection) are enough to own it. With ``KJBOD_TIMELINE``
naming a file, the process records each such event as ``(kind, start, end, detail)`` on ``time.perf_counter``
(CLOCK_MONOTONIC on Linux, the same clock in every process of the machine, so a client can lay its requests
over them) and writes them there, one JSON array per line, when it exits. tools/bench/dir_workers.py uses it to
say which events sit under the slowest requests.

Off (the default), :data:`ON` is False and every call site tests it first: nothing is timed or kept.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import time

ENV = "KJBOD_TIMELINE"

_path = os.environ.get(ENV) or None
ON = _path is not None
_events: list[tuple[str, float, float, str]] = []  # appended from any thread (a list append is atomic)


def span(kind: str, start: float, detail: str = "") -> None:
    """One event of ``kind`` that began at ``start`` (perf_counter) and ends now."""
    _events.append((kind, start, time.perf_counter(), detail))


def events() -> list[tuple[str, float, float, str]]:
    return list(_events)


def _on_gc(phase: str, info: dict[str, int], started: list[float] = [0.0]) -> None:  # noqa: B006 (the state)
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        span("gc", started[0], f"generation {info['generation']}")


def _dump() -> None:
    if _path is None:
        return
    try:
        with open(_path, "w") as f:
            for event in _events:
                f.write(json.dumps(event) + "\n")
    except OSError:  # a debugging aid: a process that cannot write it still exits as usual
        pass


if ON:
    gc.callbacks.append(_on_gc)
    atexit.register(_dump)
