"""kjbod.cli.progress: the formatting helpers, the rate window, and both output forms (rich bars on a TTY, lines
else), overall and per part."""

from __future__ import annotations

import io
import re

import pytest

from kjbod.cli.progress import Progress, RateMeter, Snapshot, human_bytes, human_duration, human_rate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("count", "text"), [
    (None, "-"), (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (5 * 2**20, "5.0 MiB"), (int(2.25 * 2**30), "2.2 GiB"), (3 * 2**40, "3.0 TiB"), (-2048, "-2.0 KiB"),
    (2**70, "1024.0 EiB"),
])
def test_human_bytes(count, text):
    assert human_bytes(count) == text


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "--"), (float("inf"), "--"), (float("nan"), "--"), (0, "0s"), (0.4, "0s"), (59.4, "59s"),
    (60, "1m00s"), (185, "3m05s"), (3600, "1h00m"), (7620, "2h07m"), (100 * 3600 + 60, "4d04h"),
])
def test_human_duration(seconds, text):
    assert human_duration(seconds) == text


def test_human_rate():
    assert human_rate(None) == "-"
    assert human_rate(2 * 2**20) == "2.0 MiB/s"


def test_rate_meter_uses_a_sliding_window():
    meter = RateMeter(window=10)
    assert meter.rate() is None
    meter.add(0, 0)
    assert meter.rate() is None  # one sample is no rate
    meter.add(1, 1000)
    assert meter.rate() == 1000
    # A fast start long ago stops counting once it leaves the window: 20 s later at 10 B/s the rate is ~10.
    for t in range(2, 40):
        meter.add(t, 1000 + 10 * (t - 1))
    assert meter.rate() == pytest.approx(10)
    with pytest.raises(ValueError):
        RateMeter(window=0)


def test_snapshot_fraction():
    assert Snapshot(50, 200, 0, 2).fraction == 0.25
    assert Snapshot(300, 200, 0, 2).fraction == 1.0  # a replica that shrank (retention) never shows > 100 %
    assert Snapshot(0, 0, 1, 2).fraction == 0.5  # nothing to copy: count moves instead
    assert Snapshot(0, 0, 0, 0).fraction == 1.0


def test_plain_lines_at_most_once_per_interval_and_a_final_line():
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, label="moving", item_name="moves", tty=False, interval=5, clock=clock)
    progress.update(Snapshot(0, 10 * 2**20, 0, 2))
    for step in range(1, 10):  # one update per second, 1 MiB each
        clock.now += 1
        progress.update(Snapshot(step * 2**20, 10 * 2**20, 0, 2, extra="offset lag 7"))
    progress.note("  done: t-0")
    progress.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert lines[0] == "moving: 0.0% 0 B of 10.0 MiB, -, ETA --, 0/2 moves done (elapsed 0s)"
    assert lines[1] == ("moving: 50.0% 5.0 MiB of 10.0 MiB, 1.0 MiB/s, ETA 5s, 0/2 moves done, offset lag 7 "
                        "(elapsed 5s)")
    assert lines[2] == "  done: t-0"
    # The last state (step 9) had not been printed: close() prints it.
    assert lines[3].startswith("moving: 90.0% 9.0 MiB of 10.0 MiB, 1.0 MiB/s, ETA 1s")
    assert len(lines) == 4


def test_close_does_not_repeat_a_line_just_printed():
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, tty=False, interval=5, clock=clock)
    progress.update(Snapshot(1, 1, 1, 1))
    progress.close()
    assert len(out.getvalue().splitlines()) == 1
    silent = io.StringIO()
    Progress(silent, tty=False).close()  # nothing happened, nothing to say
    assert silent.getvalue() == ""


def test_plain_lines_per_part_then_overall():
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, label="reassigning", item_name="partitions", tty=False, interval=5, clock=clock)
    for step in range(0, 6):  # one update per second: t-0 copies 1 MiB/s, t-1 2 MiB/s
        progress.update(Snapshot(3 * step * 2**20, 30 * 2**20, 0, 2),
                        {"t-0": Snapshot(step * 2**20, 10 * 2**20, 0, 1),
                         "t-1": Snapshot(2 * step * 2**20, 20 * 2**20, 0, 1)})
        clock.now += 1
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["  t-0: 0.0% 0 B of 10.0 MiB, -, ETA --",
                         "  t-1: 0.0% 0 B of 20.0 MiB, -, ETA --",
                         "reassigning: 0.0% 0 B of 30.0 MiB, -, ETA --, 0/2 partitions done (elapsed 0s)"]
    assert lines[3:6] == ["  t-0: 50.0% 5.0 MiB of 10.0 MiB, 1.0 MiB/s, ETA 5s",
                          "  t-1: 50.0% 10.0 MiB of 20.0 MiB, 2.0 MiB/s, ETA 5s",
                          "reassigning: 50.0% 15.0 MiB of 30.0 MiB, 3.0 MiB/s, ETA 5s, 0/2 partitions done "
                          "(elapsed 5s)"]
    assert len(lines) == 6  # the last update had been printed: close() adds nothing


def _screen(text: str) -> str:
    """The terminal output without its escape sequences."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def test_tty_draws_rich_bars_per_part_and_overall_with_notes_above():
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, label="moving", item_name="moves", tty=True, width=120, clock=clock)
    progress.update(Snapshot(0, 4 * 2**20, 0, 1), {"t-0": Snapshot(0, 4 * 2**20, 0, 1)})
    clock.now += 2
    progress.update(Snapshot(2**20, 4 * 2**20, 0, 1), {"t-0": Snapshot(2**20, 4 * 2**20, 0, 1)})
    progress.note("  done: t-1")
    clock.now += 2
    progress.update(Snapshot(4 * 2**20, 4 * 2**20, 1, 1), {"t-0": Snapshot(4 * 2**20, 4 * 2**20, 1, 1)})
    progress.close()
    text = out.getvalue()
    assert "\x1b[" in text  # drawn in place with escape sequences
    screen = _screen(text)
    assert "1.0 MiB / 4.0 MiB  512.0 KiB/s  ETA 6s  0/1 moves" in screen
    assert "  done: t-1\n" in screen
    # The final frame: both bars full, the part above the overall one, each line within the terminal.
    final = [line for line in screen.splitlines() if line.strip()][-2:]
    assert final[0].startswith("t-0") and "100%" in final[0] and "4.0 MiB / 4.0 MiB" in final[0]
    assert final[1].startswith("moving") and "100%" in final[1] and "1/1 moves" in final[1]
    assert all(len(line) <= 120 for line in screen.splitlines())
    assert "━" in final[0]  # rich's bar


def test_tty_is_detected_from_the_stream():
    class FakeTTY(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert Progress(FakeTTY()).tty is True
    assert Progress(io.StringIO()).tty is False


def test_a_finished_part_keeps_the_rate_it_finished_at():
    """Found trying a reassignment: a partition done early showed its rate falling (6.6, 5.6, ... 1.7 MiB/s) while
    the others went on, because the window kept taking its unchanged byte count."""
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, label="reassigning", item_name="partitions", tty=False, interval=100, clock=clock)
    for step in range(0, 21):  # t-0 copies 2 MiB/s and is done at 4 s; t-1 copies 1 MiB/s for 20 s
        fast = min(2 * step, 8) * 2**20
        progress.update(Snapshot(fast + step * 2**20, 28 * 2**20, int(step >= 4), 2),
                        {"t-0": Snapshot(fast, 8 * 2**20, int(step >= 4), 1),
                         "t-1": Snapshot(step * 2**20, 20 * 2**20, 0, 1)})
        clock.now += 1
    assert progress.rate("t-0") == 2 * 2**20
    assert progress.rate("t-1") == 2**20
    progress.close()
    assert out.getvalue().splitlines()[-3] == "  t-0: 100.0% 8.0 MiB of 8.0 MiB, 2.0 MiB/s, ETA 0s"
