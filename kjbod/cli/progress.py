"""Progress output for long CLI operations: one redrawn bar on a terminal, plain periodic lines everywhere else.

Strategy: the caller owns the work and the polling; this module only turns snapshots of "how far" into text.

* `Snapshot` is what the caller knows at one moment (bytes done and total, items done and total, an optional
  extra such as offset lag); `Progress.update(snapshot)` decides what to write.
* The rate comes from `RateMeter`, a sliding window over the recent snapshots (bytes done at time t), so a burst
  or a stall a minute ago does not distort the ETA now; the ETA is what is left divided by that rate.
* On a terminal (`tty=True`) every update redraws one line in place (carriage return and erase-to-end-of-line),
  sized to the terminal's width. Anywhere else (pipes, files, CI logs, tests) a full line is written at most once
  per `interval` seconds, plus one at the end, so logs stay short and every line can be read on its own.
* `note(text)` writes a permanent line (a move finished, an error) without tearing the bar: the bar is erased,
  the note written, and the bar drawn again under it.
* Time comes from an injected clock, so tests drive the whole thing with a fake clock and a StringIO.

The formatting helpers (`human_bytes`, `human_rate`, `human_duration`, `bar`) are shared with the tables of
`kjbod log-dirs describe`.
"""

from __future__ import annotations

import shutil
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

__all__ = ["Progress", "RateMeter", "Snapshot", "bar", "human_bytes", "human_duration", "human_rate"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_ERASE_LINE = "\r\x1b[K"
BAR_WIDTH = 32


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


def bar(fraction: float, width: int) -> str:
    """An ASCII bar, "[#####-----]", `width` characters wide in all (brackets included)."""
    inner = max(width - 2, 1)
    fraction = min(max(fraction, 0.0), 1.0)
    filled = int(fraction * inner)
    return "[" + "#" * filled + "-" * (inner - filled) + "]"


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
    """Writes progress to `stream`: a bar redrawn in place on a TTY, else a line every `interval` seconds."""

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
        self.started = clock()
        self._last: Snapshot | None = None
        self._last_line_at: float | None = None
        self._written: Snapshot | None = None  # the snapshot of the last plain line
        self._bar_shown = False

    # ------------------------------------------------------------------------------------------ public

    def update(self, snapshot: Snapshot) -> None:
        now = self.clock()
        self.meter.add(now, snapshot.done_bytes)
        self._last = snapshot
        if self.tty:
            self._draw(self.render(snapshot, self._columns()))
        elif self._last_line_at is None or now - self._last_line_at >= self.interval:
            self._last_line_at = now
            self._written = snapshot
            self._write_line(self.render(snapshot))

    def note(self, text: str, stream: TextIO | None = None) -> None:
        """A line that stays (above the bar on a TTY); `stream` sends it elsewhere, e.g. errors to stderr."""
        if self.tty and self._bar_shown:
            self.stream.write(_ERASE_LINE)
            self.stream.flush()
            self._bar_shown = False
        out = self.stream if stream is None else stream
        out.write(text + "\n")
        out.flush()
        if self.tty and self._last is not None:
            self._draw(self.render(self._last, self._columns()))

    def close(self) -> None:
        """Ends the bar (leaving its last state on screen), or writes the final line when not on a TTY."""
        if self._last is None:
            return
        if self.tty:
            if self._bar_shown:
                self.stream.write("\n")
                self._bar_shown = False
        elif self._written is not self._last:
            self._written = self._last
            self._write_line(self.render(self._last))
        self.stream.flush()

    def rate(self) -> float | None:
        return self.meter.rate()

    def eta(self, snapshot: Snapshot) -> float | None:
        rate = self.meter.rate()
        remaining = max(snapshot.total_bytes - snapshot.done_bytes, 0)
        if remaining == 0:
            return 0.0
        if not rate:
            return None
        return remaining / rate

    def render(self, snapshot: Snapshot, columns: int | None = None) -> str:
        """The text for one snapshot; with `columns`, a bar fitted to that width (TTY form)."""
        percent = f"{snapshot.fraction * 100:5.1f}%"
        rate, eta = human_rate(self.rate()), human_duration(self.eta(snapshot))
        items = f"{snapshot.done_items}/{snapshot.total_items} {self.item_name}"
        if columns is None:
            parts = [f"{human_bytes(snapshot.done_bytes)} of {human_bytes(snapshot.total_bytes)}",
                     f"{rate}, ETA {eta}", f"{items} done"]
            if snapshot.extra:
                parts.append(snapshot.extra)
            prefix = f"{self.label}: " if self.label else ""
            return f"{prefix}{percent.strip()} {', '.join(parts)} (elapsed {self._elapsed()})"
        # The terminal form is terser and its bar keeps one width, so the line does not jump as numbers change.
        parts = [f"{human_bytes(snapshot.done_bytes)} / {human_bytes(snapshot.total_bytes)}", rate, f"ETA {eta}",
                 items]
        if snapshot.extra:
            parts.append(snapshot.extra)
        text = f"{percent}  {'  '.join(parts)}"
        if columns >= 48:
            # The bar's width depends on the terminal only, never on the text beside it.
            text = f"{bar(snapshot.fraction, min(BAR_WIDTH, columns // 4))} {text}"
        return text[: columns - 1]

    # ------------------------------------------------------------------------------------------ internals

    def _elapsed(self) -> str:
        return human_duration(self.clock() - self.started)

    def _columns(self) -> int:
        if self._width is not None:
            return self._width
        return shutil.get_terminal_size((100, 24)).columns

    def _draw(self, text: str) -> None:
        self.stream.write(_ERASE_LINE + text)
        self.stream.flush()
        self._bar_shown = True

    def _write_line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
