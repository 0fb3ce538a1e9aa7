"""The reassignment bench's throttle figure (tools/bench/reassign.py `steady_part`) is read over the steady part of
a copy only: two windows after its first byte to one window before its last.  No timing is measured here: the
samples are made up, each case's expected figure worked by hand."""

from __future__ import annotations

import pytest

from tools.bench.reassign import steady_part

MB = 1_000_000


def copy_samples() -> list[tuple[float, int]]:
    """Every 100 ms from t = 100 s: nothing until 101 s, then 10 MB at once (the first window's allowance), 10 MB/s
    up to 131 s (310 MB), then the last 10 MB at once at 131.5 s (a burst at the ISR join)."""
    out = []
    for tenth in range(400):
        t = 100 + tenth / 10
        if t < 101:
            b = 0
        elif t < 131:
            b = int(10 * MB + (t - 101) * 10 * MB)
        elif t < 131.5:
            b = 310 * MB
        else:
            b = 320 * MB
        out.append((t, b))
    return out


def test_the_first_two_windows_and_the_last_one_are_left_out():
    steady = steady_part(copy_samples(), 320 * MB, 1.0)
    # first byte at 101 s, every byte at 131.5 s: the steady part is 103 s to 130.5 s, 276 samples, at 10 MB/s
    assert steady.rate == pytest.approx(10 * MB, rel=1e-6)
    assert steady.samples == 276
    assert steady.seconds == pytest.approx(27.5)
    assert steady.whole == pytest.approx(320 * MB / 30.5)  # the bursts count in the whole copy's figure


def test_a_copy_too_short_for_a_steady_part_is_refused_by_name():
    with pytest.raises(ValueError, match="has no steady part"):
        steady_part([(0.0, 0), (0.1, MB), (0.2, 2 * MB), (2.0, 3 * MB)], 3 * MB, 1.0)
