"""Is a replica move gaining on its source? The judgement behind ``replica_move_not_converging``.

Strategy: a move copies while its source keeps taking appends, and the mover runs as background work (SCHED_BATCH,
nice 10), so on a busy machine or under a low throttle the source can grow faster than the copy for good: the
catch-up then never ends. What tells the two apart is the distance still to copy (bytes behind: the source's
size minus what the future replica holds): a move that converges, however slowly, is less far behind now than a
while ago. :class:`ConvergenceWatch` keeps a few (time, bytes copied, source size, bytes behind) samples over a
window and calls a move not converging when it has been watched for a whole window, over several samples, and is
no nearer at the end than at the start (and still more than a little behind: a move at the log end only waits
for its swap).

The thresholds: a 120 s window, at least 3 samples in it (one every 4 s at most are kept), a floor of 1 MiB
behind; the warning is logged at most once a minute per move. A slow move that converges is nearer after two
minutes, however slowly it gains, so it is never flagged, and neither is one that a burst of appends set back
for less than it makes up within the window. One flagged has lost ground over two whole minutes. Pure logic: the caller passes the clock, so tests drive it with numbers, and
the same watch judges a move on the broker (from the mover's counters; its judgement is the warning, the move's
progress and the ``kjbod_replica_moves_not_converging`` gauge of kjbod.metrics) and in ``kjbod log-dirs move``
(from DescribeLogDirs' sizes)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

WINDOW_SECONDS = 120.0
MIN_SAMPLES = 3
MIN_BYTES_BEHIND = 1 << 20
REPEAT_SECONDS = 60.0  # how often the warning may be logged again for one move


@dataclass(frozen=True)
class NotConverging:
    """A move that has not gained on its source over the window: the figures an operator needs."""

    bytes_behind: int
    copy_rate: float  # bytes per second copied over the window
    growth_rate: float  # bytes per second the source grew over the window
    seconds: float  # the window the figures cover

    def describe(self, human_rate: Callable[[float], str]) -> str:
        """The words of a progress line, e.g. "not converging: source grows 3.1 MiB/s, copy 2.4 MiB/s"."""
        return f"not converging: source grows {human_rate(self.growth_rate)}, copy {human_rate(self.copy_rate)}"


class ConvergenceWatch:
    """Samples of one move; :meth:`observe` after each pass (a copied segment, a catch-up read, a poll)."""

    def __init__(self, *, window: float = WINDOW_SECONDS, min_samples: int = MIN_SAMPLES,
                 min_behind: int = MIN_BYTES_BEHIND, repeat: float = REPEAT_SECONDS) -> None:
        self.window = window
        self.min_samples = max(2, min_samples)
        self.min_behind = min_behind
        self.repeat = repeat
        self._spacing = window / 30  # at most ~30 samples in a window, however often a pass comes
        self._samples: deque[tuple[float, int, int, int]] = deque()
        self._warned_at: float | None = None
        self.state: NotConverging | None = None

    def due(self, now: float) -> bool:
        """Whether a pass at ``now`` would be kept as a sample (passes closer together than the spacing are
        not): a caller can skip measuring sizes for nothing."""
        samples = self._samples
        return not samples or now - samples[-1][0] >= self._spacing

    def observe(self, now: float, copied: int, source_size: int, held: int) -> NotConverging | None:
        """Record a pass: ``copied`` bytes copied so far, the source's size, what the future holds. Returns the
        current judgement (also in :attr:`state`): None while the move gains, or cannot be judged yet."""
        if not self.due(now):
            return self.state
        samples = self._samples
        samples.append((now, copied, source_size, max(0, source_size - held)))
        # Keep one sample at least a window old as the reference, none older than that.
        while len(samples) > 2 and now - samples[1][0] >= self.window:
            samples.popleft()
        t0, copied0, size0, behind0 = samples[0]
        span = now - t0
        behind = samples[-1][3]
        if span < self.window or len(samples) < self.min_samples or behind < self.min_behind or behind < behind0:
            self.state = None
        else:
            self.state = NotConverging(behind, (copied - copied0) / span, (source_size - size0) / span, span)
        return self.state

    def should_warn(self, now: float) -> bool:
        """True when the move is not converging and was not warned about within ``repeat`` seconds (then
        counted as warned now)."""
        if self.state is None:
            return False
        if self._warned_at is not None and now - self._warned_at < self.repeat:
            return False
        self._warned_at = now
        return True
