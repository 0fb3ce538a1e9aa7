"""Progress output for long CLI operations (`kjbod log-dirs move --wait`, `kjbod reassign-partitions
--progress`): rich's live bars on a terminal, plain periodic lines everywhere else.

Strategy: the caller owns the work and the polling; this module only turns snapshots of "how far" into output.

* `Snapshot` is what the caller knows at one moment (bytes done and total, items done and total, an optional
  extra such as offset lag).  `Progress.update(overall, parts)` takes the overall snapshot and, optionally, one
  snapshot per named part (a partition being reassigned); every one gets its own rate and ETA.
* The rate comes from `RateMeter`, a sliding window over the recent snapshots (bytes done at time t), so a burst
  or a stall a minute ago does not distort the ETA now; the ETA is what is left divided by that rate.  A part
  that has finished (all its items done) keeps the rate it finished at, instead of decaying towards zero while
  the others go on.  Rich's own
  speed columns are not used: they sample on rich's clock, and the numbers must be the ones the plain lines show.
* On a terminal, a `rich.progress.Progress` draws one bar per part and an overall bar under them, refreshed on
  each update (no refresh thread: the caller's polling drives it).  Anywhere else (pipes, files, CI logs, tests)
  full lines are written at most once per `interval` seconds, plus one set at the end, so logs stay short and
  every line can be read on its own.
* `note(text)` writes a permanent line (a move finished, an error) above the bars.
* Time comes from an injected clock, so tests drive the whole thing with a fake clock and a StringIO.

The formatting helpers (`human_bytes`, `human_rate`, `human_duration`) are shared with the tables of
`kjbod log-dirs describe` and `kjbod reassign-partitions`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["Progress", "RateMeter", "Snapshot", "human_bytes", "human_duration", "human_rate"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_bytes(count: float | None) -> str:
    """1536 -> "1.5 KiB"; binary units, one decimal above bytes; None -> "-"."""
    if count is None:
        return "-"
    value = float(count)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{sign}{int(value)} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_rate(bytes_per_second: float | None) -> str:
    return "-" if bytes_per_second is None else f"{human_bytes(bytes_per_second)}/s"


def human_duration(seconds: float | None) -> str:
    """Seconds -> "42s", "3m05s", "2h07m"; None (unknown) -> "--"."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "--"
    total = max(0, int(round(seconds)))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 100:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


class RateMeter:
    """Bytes per second over the last `window` seconds of (time, bytes done) samples."""

    def __init__(self, window: float = 10.0) -> None:
        if window <= 0:
            raise ValueError("window must be positive")
        self.window = window
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, now: float, done: float) -> None:
        self._samples.append((now, done))
        # Keep one sample older than the window, so the rate always spans the whole window once it can.
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window:
            self._samples.popleft()

    def rate(self) -> float | None:
        """None until two samples at different times exist."""
        if len(self._samples) < 2:
            return None
        (t0, d0), (t1, d1) = self._samples[0], self._samples[-1]
        if t1 <= t0:
            return None
        return max(d1 - d0, 0.0) / (t1 - t0)

    def eta(self, snapshot: Snapshot) -> float | None:
        """Seconds left at the current rate: 0 when nothing is left, None while the rate is unknown or zero."""
        remaining = max(snapshot.total_bytes - snapshot.done_bytes, 0)
        if remaining == 0:
            return 0.0
        rate = self.rate()
        return remaining / rate if rate else None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """How far the work is at one moment."""

    done_bytes: int
    total_bytes: int
    done_items: int
    total_items: int
    extra: str = ""  # appended to the line as is, e.g. "offset lag 120"

    @property
    def fraction(self) -> float:
        if self.total_bytes > 0:
            return min(self.done_bytes / self.total_bytes, 1.0)
        return self.done_items / self.total_items if self.total_items else 1.0


class Progress:
    """Writes progress to `stream`: rich bars on a TTY, else lines every `interval` seconds."""

    def __init__(
        self,
        stream: TextIO,
        *,
        label: str = "",
        item_name: str = "items",
        tty: bool | None = None,
        interval: float = 5.0,
        width: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.label = label
        self.item_name = item_name
        self.tty = _isatty(stream) if tty is None else tty
        self.interval = interval
        self._width = width
        self.clock = clock
        self.meter = RateMeter()
        self._meters: dict[str, RateMeter] = {}
        self._finished: set[str] = set()
        self.started = clock()
        self._last: tuple[Snapshot, dict[str, Snapshot]] | None = None
        self._last_line_at: float | None = None
        self._written: tuple[Snapshot, dict[str, Snapshot]] | None = None  # the state of the last plain lines
        self._bars: Any = None  # rich.progress.Progress, started on the first update on a TTY
        self._tasks: dict[str, Any] = {}

    # ------------------------------------------------------------------------------------------ public

    def update(self, overall: Snapshot, parts: Mapping[str, Snapshot] | None = None) -> None:
        now = self.clock()
        self.meter.add(now, overall.done_bytes)
        parts = dict(parts or {})
        for name, snapshot in parts.items():
            meter = self._meters.setdefault(name, RateMeter())
            if name not in self._finished:  # a finished part keeps the rate it finished at
                meter.add(now, snapshot.done_bytes)
            if snapshot.total_items and snapshot.done_items >= snapshot.total_items:
                self._finished.add(name)
        self._last = (overall, parts)
        if self.tty:
            self._draw(overall, parts)
        elif self._last_line_at is None or now - self._last_line_at >= self.interval:
            self._last_line_at = now
            self._write_lines(self._last)

    def note(self, text: str, stream: TextIO | None = None) -> None:
        """A line that stays (above the bars on a TTY); `stream` sends it elsewhere, e.g. errors to stderr."""
        if self._bars is not None and stream is None:
            self._bars.console.print(text, markup=False, highlight=False, soft_wrap=True)
            return
        out = self.stream if stream is None else stream
        out.write(text + "\n")
        out.flush()

    def close(self) -> None:
        """Ends the bars (leaving their last state on screen), or writes the final lines when not on a TTY."""
        if self._bars is not None:
            self._bars.refresh()
            self._bars.stop()
            self._bars = None
        elif self._last is not None and not self.tty and self._written is not self._last:
            self._write_lines(self._last)
        self.stream.flush()

    def rate(self, part: str | None = None) -> float | None:
        return (self.meter if part is None else self._meters[part]).rate()

    def eta(self, snapshot: Snapshot, part: str | None = None) -> float | None:
        return (self.meter if part is None else self._meters[part]).eta(snapshot)

    def render(self, snapshot: Snapshot, part: str | None = None) -> str:
        """The plain line for one snapshot: the overall one (with items and elapsed time), or a part's."""
        rate, eta = human_rate(self.rate(part)), human_duration(self.eta(snapshot, part))
        parts = [f"{human_bytes(snapshot.done_bytes)} of {human_bytes(snapshot.total_bytes)}", f"{rate}, ETA {eta}"]
        if part is not None:
            return f"  {part}: {snapshot.fraction * 100:.1f}% {', '.join(parts)}"
        parts.append(f"{snapshot.done_items}/{snapshot.total_items} {self.item_name} done")
        if snapshot.extra:
            parts.append(snapshot.extra)
        prefix = f"{self.label}: " if self.label else ""
        return f"{prefix}{snapshot.fraction * 100:.1f}% {', '.join(parts)} (elapsed {self._elapsed()})"

    # ------------------------------------------------------------------------------------------ internals

    def _elapsed(self) -> str:
        return human_duration(self.clock() - self.started)

    def _detail(self, snapshot: Snapshot, part: str | None) -> str:
        text = (f"{human_bytes(snapshot.done_bytes)} / {human_bytes(snapshot.total_bytes)}  "
                f"{human_rate(self.rate(part))}  ETA {human_duration(self.eta(snapshot, part))}")
        if part is None:
            text += f"  {snapshot.done_items}/{snapshot.total_items} {self.item_name}"
            if snapshot.extra:
                text += f"  {snapshot.extra}"
        return text

    def _draw(self, overall: Snapshot, parts: dict[str, Snapshot]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TaskProgressColumn, TextColumn
        from rich.progress import Progress as Bars

        if self._bars is None:
            console = Console(file=self.stream, force_terminal=True, width=self._width, highlight=False)
            self._bars = Bars(TextColumn("{task.description}"), BarColumn(bar_width=None), TaskProgressColumn(),
                              TextColumn("{task.fields[detail]}"), console=console, auto_refresh=False,
                              get_time=self.clock, redirect_stdout=False, redirect_stderr=False)
            self._bars.start()
        rows = [*((name, name, s) for name, s in parts.items()), (None, self.label or "overall", overall)]
        for key, title, snapshot in rows:
            task_key = "" if key is None else key
            total = max(snapshot.total_bytes, 1) if snapshot.total_bytes > 0 else max(snapshot.total_items, 1)
            done = snapshot.done_bytes if snapshot.total_bytes > 0 else snapshot.done_items
            fields = {"completed": min(done, total), "total": total, "detail": self._detail(snapshot, key)}
            if task_key not in self._tasks:
                self._tasks[task_key] = self._bars.add_task(title, **fields)
            else:
                self._bars.update(self._tasks[task_key], **fields)
        self._bars.refresh()

    def _write_lines(self, state: tuple[Snapshot, dict[str, Snapshot]]) -> None:
        self._written = state
        overall, parts = state
        lines = [self.render(s, name) for name, s in parts.items()]
        lines.append(self.render(overall))
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
