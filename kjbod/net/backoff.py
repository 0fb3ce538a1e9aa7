"""Exponential backoff with jitter, as Kafka's clients compute it (`ExponentialBackoff`).

The n-th retry waits `initial * multiplier**n`, capped at `maximum`, times a random factor in
[1 - jitter, 1 + jitter] (the cap applies after the factor, so no wait ever exceeds `maximum`).  The jitter keeps a
fleet of clients that lost the same peer at the same moment from coming back in lockstep.  Seconds, not ms.
"""

from __future__ import annotations

import random

__all__ = ["ExponentialBackoff"]


class ExponentialBackoff:
    """Delays for retry number 0, 1, 2, ...; `next()` / `reset()` keep the count for one caller."""

    __slots__ = ("attempts", "initial", "jitter", "maximum", "multiplier", "_random")

    def __init__(self, initial: float, maximum: float, *, multiplier: float = 2.0, jitter: float = 0.2,
                 rng: random.Random | None = None) -> None:
        if initial < 0 or maximum < 0 or multiplier < 1 or not 0 <= jitter < 1:
            raise ValueError("backoff needs initial >= 0, maximum >= 0, multiplier >= 1 and 0 <= jitter < 1")
        self.initial = min(initial, maximum)
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
        self.attempts = 0
        self._random = rng or random.Random()

    def delay(self, attempts: int) -> float:
        """The wait before retry number `attempts` (0 for the first retry)."""
        base = self.initial
        # Grow step by step and stop at the cap, so a huge attempt count never overflows a float power.
        for _ in range(attempts):
            base *= self.multiplier
            if base >= self.maximum:
                base = self.maximum
                break
        if self.jitter:
            base *= self._random.uniform(1 - self.jitter, 1 + self.jitter)
        return min(base, self.maximum)

    def next(self) -> float:
        """The delay for the next retry of this caller; counts the attempt."""
        value = self.delay(self.attempts)
        self.attempts += 1
        return value

    def reset(self) -> None:
        self.attempts = 0
