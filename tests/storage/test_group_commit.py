"""Group commit (PartitionLog.append_validated_together) against the same appends one by one.

Random mixes, from seeded generators: several idempotent producers sending in sequence, retrying (duplicates of
one of their last five batches, and of older ones), skipping sequences, bumping their epoch (from 0 as they must,
or not), going back to an older epoch, producers the log has never seen starting anywhere, batches without a
producer id, appends of two batches, leader epoch changes, and configs small enough that groups cross every kind
of roll (segment.bytes, a full index, segment.ms). Each group goes to one log together and to another one at a
time; every answer (offsets, duplicates, the error and its message), the producer state, the segments and their
indexes must be the same, and, after both logs are closed, every file of both partition dirs byte for byte.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from kjbod.storage.config import LogConfig
from kjbod.storage.errors import StorageError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.log import AppendInfo, PartitionLog
from kjbod.storage.producer_state import ProducerEntry
from tests.storage.conftest import T0, FakeClock, kp_batch

SEEDS = range(40)


@dataclass
class _Producer:
    pid: int
    epoch: int = 0
    next_seq: int = 0
    sent: list[tuple[int, int, int]] = field(default_factory=list)  # (epoch, first sequence, record count)


class _Mix:
    """Appends as clients send them, with every way an idempotent producer's batch can go wrong now and then."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.producers = [_Producer(pid) for pid in (1000, 1001, 1002)]
        self.ts = T0

    def _values(self) -> list[bytes]:
        rnd = self.rnd
        return [rnd.randbytes(rnd.choice((1, 10, 60, 150))) for _ in range(rnd.randint(1, 4))]

    def _timestamp(self) -> int:
        rnd = self.rnd
        # mostly moving forward a little, sometimes far (segment.ms), sometimes back (an older clock)
        self.ts += rnd.choice((0, 1, 5, 5, 5, 400, -3))
        return self.ts

    def batch(self) -> bytes:
        rnd = self.rnd
        values = self._values()
        ts = self._timestamp()
        kind = rnd.random()
        if kind < 0.15:
            return kp_batch(values, timestamp=ts)  # no producer id
        p = rnd.choice(self.producers)
        epoch, seq = p.epoch, p.next_seq
        in_order = False
        if kind < 0.27 and p.sent:  # a retry: one of the last five (a duplicate) or an older one
            epoch, seq, n = rnd.choice(p.sent[-7:])
            values = values[:1] * n
        elif kind < 0.33:  # a gap in the sequence
            seq = (seq + rnd.randint(1, 3)) & 0x7FFFFFFF
        elif kind < 0.36:  # an epoch bump, from sequence 0 as it must be
            p.epoch, p.next_seq = p.epoch + 1, 0
            epoch, seq, in_order = p.epoch, 0, True
        elif kind < 0.38:  # a new epoch that does not start at 0
            epoch, seq = p.epoch + 1, 3
        elif kind < 0.41 and p.epoch > 0:  # a fenced zombie: an older epoch
            epoch = p.epoch - 1
        elif kind < 0.43:  # a producer the log has never seen, starting anywhere (near the wrap too)
            p = _Producer(rnd.randint(2000, 1 << 40), next_seq=rnd.choice((0, 17, 0x7FFFFFFF - 2)))
            self.producers.append(p)
            epoch, seq, in_order = p.epoch, p.next_seq, True
        else:
            in_order = True
        if in_order:
            p.next_seq = (seq + len(values)) & 0x7FFFFFFF
            p.sent.append((epoch, seq, len(values)))
        return kp_batch(values, timestamp=ts, producer_id=p.pid, producer_epoch=epoch, base_sequence=seq)

    def append(self) -> bytes:
        return self.batch() + self.batch() if self.rnd.random() < 0.08 else self.batch()

    def group(self) -> list[bytes]:
        return [self.append() for _ in range(self.rnd.choice((1, 2, 3, 5, 8, 12)))]


def _config(rnd: random.Random) -> LogConfig:
    return LogConfig(
        segment_bytes=rnd.choice((1500, 3000, 8000)),
        index_interval_bytes=rnd.choice((0, 100, 400)),
        segment_index_bytes=rnd.choice((48, 96, 4096)),  # 6 or 12 offset index entries: rolls for a full index
        segment_ms=rnd.choice((300, 2000, 7 * 24 * 3600 * 1000)),
    )


def _scenario(seed: int) -> tuple[LogConfig, list[tuple[list[bytes], int, int]]]:
    """A config and 40 groups, each with the milliseconds the clock moves before it and its leader epoch."""
    rnd = random.Random(seed)
    config = _config(rnd)
    mix = _Mix(rnd)
    steps = []
    epoch = 0
    for _ in range(40):
        group = mix.group()
        epoch += int(rnd.random() < 0.05)
        steps.append((group, rnd.choice((0, 1, 250)), epoch))
    return config, steps


def _log(base: Path, name: str, config: LogConfig, clock: FakeClock) -> PartitionLog:
    io = LogDirIO(str(base / name))
    io.mkdir(io.path, parents=True)
    return PartitionLog.create(io, io.join("t-0"), "t", 0, "3uI2M2AbQVO0J2cYw2xvOA", config, clock=clock)


def _answer(outcome: AppendInfo | StorageError) -> object:
    if isinstance(outcome, StorageError):
        return (type(outcome).__name__, outcome.error_code, str(outcome))
    return outcome


def _together(plog: PartitionLog, group: list[bytes], now: int, epoch: int) -> list[object]:
    outcomes = plog.append_validated_together([plog.validate(r, now_ms=now) for r in group], leader_epoch=epoch)
    assert outcomes is not None  # no size or space problem in these configs
    return [_answer(o) for o in outcomes]


def _one_by_one(plog: PartitionLog, group: list[bytes], now: int, epoch: int) -> list[object]:
    out = []
    for records in group:
        try:
            out.append(_answer(plog.append_validated(plog.validate(records, now_ms=now), leader_epoch=epoch)))
        except StorageError as e:
            out.append(_answer(e))
    return out


def _state(plog: PartitionLog) -> object:
    def entry(e: ProducerEntry) -> tuple:
        return (e.producer_id, e.epoch, list(e.batches), e.last_timestamp, e.coordinator_epoch)

    ps = plog.producer_state
    segments = [(s.base_offset, s.size, list(s.index._offsets), list(s.index._positions),
                 list(s.time_index._timestamps), list(s.time_index._offsets)) for s in plog.segments]
    return (sorted(entry(e) for e in ps.producers.values()), ps.map_end_offset, ps.snapshot_bytes(), segments,
            plog.log_end_offset, plog.high_watermark, plog.leader_epochs.entries)


def _files(plog: PartitionLog) -> dict[str, bytes]:
    return {name: Path(plog.dir, name).read_bytes() for name in sorted(os.listdir(plog.dir))}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_mix_appended_together_equals_one_by_one(tmp_path, seed):
    config, steps = _scenario(seed)
    clock = FakeClock()
    together, alone = _log(tmp_path, "together", config, clock), _log(tmp_path, "alone", config, clock)
    answers: list[object] = []
    try:
        for group, advance, epoch in steps:
            now = clock.advance(advance)
            expected = _one_by_one(alone, group, now, epoch)
            assert _together(together, group, now, epoch) == expected
            assert _state(together) == _state(alone)
            answers.extend(expected)
        kinds = {a[0] if isinstance(a, tuple) else ("duplicate" if a.duplicate else "appended") for a in answers}
        assert {"appended", "duplicate", "OutOfOrderSequenceError"} <= kinds
        assert len(together.segments) > 1
    finally:
        together.close()
        alone.close()
    assert _files(together) == _files(alone)


def test_the_mixes_cross_every_kind_of_roll_and_refusal_inside_a_group(tmp_path):
    """The seeds above are not idle: across them, each roll reason and each refusal happens inside a group of
    several appends."""
    reasons: set[str] = set()
    refused: set[object] = set()
    for seed in SEEDS:
        config, steps = _scenario(seed)
        clock = FakeClock()
        plog = _log(tmp_path, f"s{seed}", config, clock)
        try:
            for group, advance, epoch in steps:
                with capture_logs() as logs:
                    answers = _together(plog, group, clock.advance(advance), epoch)
                if len(group) > 1:
                    reasons |= {e["reason"] for e in logs if e["event"] == "segment_rolled"}
                    refused |= {a[0] if isinstance(a, tuple) else a.duplicate for a in answers}
        finally:
            plog.close()
    assert {"segment.bytes", "index full", "segment.ms"} <= reasons
    assert {"OutOfOrderSequenceError", "InvalidProducerEpochError", True} <= refused
