"""The long-polling Fetch requests a broker holds, keyed by partition (Kafka's DelayedFetch purgatory, watched
per TopicPartition).

Strategy: a fetch that has to wait parks a one-shot callback under each partition it asks for; an append to a
partition runs the callbacks parked under that partition only, a high watermark move those of the consumers
parked under it.  A fetch of many partitions is parked under each of them and woken by whichever moves first;
its callback takes it out from under the others (``unpark``), so it runs once per wake-up however many of its
partitions moved together.  A callback that wants to wait again parks again: it is not run a second time by the
wake-up that is running it.

Followers read up to the log end, so only appends wake them (a high watermark move, which every acks=all answer
makes, would wake them for nothing); consumers read up to the high watermark, which an append moves on a
partition without followers and a follower's fetch moves on a leader, so both wake them.  Kafka completes a
DelayedFetch on the same two events (ReplicaManager.tryCompleteDelayedFetch after an append and after a high
watermark increase).

The followers woken by one append usually all read the same bytes (each was parked at the log end that the
append moved): while they run, ``shared`` is a dict they may keep what they read in, so that the first one's read
serves the others (kjbod.broker.handlers.follower_fetch_fast); it is dropped once they have all run, so nothing
kept in it outlives the wake-up.

Everything runs on the event loop; a callback that raises is logged and the others still run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import structlog

log = structlog.get_logger("kjbod.node")

TopicPartition = tuple[str, int]
Callback = Callable[[], Any]


class ParkedFetches:
    """Callbacks of parked fetches by partition: the followers' (woken by appends) and the consumers' (woken by
    appends and high watermark moves)."""

    __slots__ = ("_followers", "_consumers", "shared")

    def __init__(self) -> None:
        self._followers: dict[TopicPartition, dict[Callback, None]] = {}
        self._consumers: dict[TopicPartition, dict[Callback, None]] = {}
        self.shared: dict[Any, Any] | None = None  # while an append's followers run: see the module docstring

    def park(self, keys: Iterable[TopicPartition], callback: Callback, *, follower: bool) -> None:
        """``callback()`` at the next append to any of ``keys`` (for a consumer also at the next high watermark
        move of one), or at ``wake_all``."""
        by_partition = self._followers if follower else self._consumers
        for key in keys:
            parked = by_partition.get(key)
            if parked is None:
                by_partition[key] = {callback: None}
            else:
                parked[callback] = None

    def unpark(self, keys: Iterable[TopicPartition], callback: Callback, *, follower: bool) -> None:
        """Takes ``callback`` out from under ``keys`` (woken by one of them, or its wait is over)."""
        by_partition = self._followers if follower else self._consumers
        for key in keys:
            parked = by_partition.get(key)
            if parked is not None:
                parked.pop(callback, None)
                if not parked:
                    del by_partition[key]

    def appended(self, key: TopicPartition) -> None:
        """Records were appended to the partition: its parked followers' and consumers' fetches look again."""
        followers = self._followers.pop(key, None)
        if followers is not None:
            if len(followers) == 1:
                _run(followers)
            else:
                outer, self.shared = self.shared, {}
                try:
                    _run(followers)
                finally:
                    self.shared = outer
        consumers = self._consumers.pop(key, None)
        if consumers is not None:
            _run(consumers)

    def high_watermark_moved(self, key: TopicPartition) -> None:
        """The partition's high watermark moved: its parked consumers' fetches look again."""
        consumers = self._consumers.pop(key, None)
        if consumers is not None:
            _run(consumers)

    def wake_all(self) -> None:
        """Every parked fetch looks again (the broker is shutting down: a long poll must not hold up a SIGTERM)."""
        every: dict[Callback, None] = {}
        for by_partition in (self._followers, self._consumers):
            for parked in by_partition.values():
                every.update(parked)
            by_partition.clear()
        _run(every)

    def count(self, key: TopicPartition | None = None) -> int:
        """How many callbacks are parked (under ``key`` only, when given): for tests and metrics."""
        if key is not None:
            return len(self._followers.get(key, ())) + len(self._consumers.get(key, ()))
        return len({cb for by in (self._followers, self._consumers) for parked in by.values() for cb in parked})


def _run(callbacks: dict[Callback, None]) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception:
            log.exception("parked_fetch_callback_failed", callback=repr(callback))
