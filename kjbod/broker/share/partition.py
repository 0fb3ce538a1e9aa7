"""The share-partition state machine (KIP-932): one share group's view of one topic-partition, on its leader.

Strategy: sans-IO.  The leader reads record batches from the log and the persisted state through the persister;
this module only decides.  It keeps the share-partition start offset (everything below it is done with), the end
offset (one past the last offset ever acquired), and between them the in-flight records, one entry per offset:

    AVAILABLE    may be acquired (again); an offset in [start, end) with no entry is available, never delivered
    ACQUIRED     locked to one member until a deadline (share.record.lock.duration.ms); counted as delivered
    ACKNOWLEDGED accepted by its member: never delivered again
    ARCHIVED     rejected, a gap, past the delivery count limit, or below the log start: never delivered again

A release, a lock timeout or the member's session closing makes an acquired record AVAILABLE again, or ARCHIVED
once its delivery count has reached share.delivery.count.limit.  The start offset moves past every leading
ACKNOWLEDGED or ARCHIVED offset.  Acquisition stops at MaxRecords (whole log batches, as Kafka's batch-optimized
mode: the last batch may take it past; exactly at it in record-limit mode) and at share.partition.max.record.locks offsets in flight.  Offsets the log
lacks between two batches read (compaction) are acquired with the batch after them, as Kafka's (the client
acknowledges them as GAP), so the start offset never waits on them.

Acknowledgements of one partition are all or nothing: every batch is checked (offsets in order, not overlapping,
types valid, each offset acquired by this member) before any state changes, so a bad request changes nothing.
`state_batches` is what the leader writes through the persister (ACQUIRED is written as AVAILABLE with its delivery
count, the persisted states being Kafka's Available, Acknowledged and Archived).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kjbod.broker.share.persister import ACKNOWLEDGED, ARCHIVED, AVAILABLE, ReadAnswer, StateBatch
from kjbod.protocol.errors import ErrorCode

ACQUIRED = 1  # Kafka's RecordState id; never persisted

# Acknowledgement types (the AcknowledgeTypes values)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4

# Kafka 4.3's defaults (ShareGroupConfig)
DEFAULT_LOCK_MS = 30_000
DEFAULT_DELIVERY_COUNT_LIMIT = 5
DEFAULT_MAX_RECORD_LOCKS = 2000


@dataclass
class Record:
    state: int
    delivery_count: int
    member: str | None = None
    deadline: float = 0.0  # a monotonic second: when an ACQUIRED record's lock runs out


@dataclass(frozen=True)
class AckBatch:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass
class Undo:
    """The records one held transition (an acknowledgement, a member's release) changed, as they were before it:
    what a failed state write puts back.  True when it changed any."""
    before: list[tuple[int, Record]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.before)


class AckError(Exception):
    """An acknowledgement refused, with the Kafka error code to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_batches(batches: list[AckBatch], *, renew_allowed: bool) -> None:
    """The request-level checks of one partition's acknowledgement batches (INVALID_REQUEST), Kafka's: first <=
    last, none starting before the previous one's last offset (sharing that one offset is allowed), one type for
    the whole batch or one per offset, types Kafka knows (Renew only when the request says it carries renewals)."""
    previous = -1
    top = RENEW if renew_allowed else REJECT
    for b in batches:
        if b.last_offset < b.first_offset:
            raise AckError(ErrorCode.INVALID_REQUEST,
                           f"acknowledgement batch {b.first_offset}-{b.last_offset}: the last offset is before the first")
        if b.first_offset < previous:
            raise AckError(ErrorCode.INVALID_REQUEST,
                           f"acknowledgement batch {b.first_offset}-{b.last_offset} starts before the one before ends")
        previous = b.last_offset
        if len(b.types) not in (1, b.last_offset - b.first_offset + 1):
            raise AckError(ErrorCode.INVALID_REQUEST,
                           f"acknowledgement batch {b.first_offset}-{b.last_offset} has {len(b.types)} types: one "
                           "for the batch or one per offset is expected")
        for t in b.types:
            if not GAP <= t <= top:
                raise AckError(ErrorCode.INVALID_REQUEST, f"invalid acknowledge type {t}")


class SharePartition:
    """One share group's state of one topic-partition (see the module's docstring).  Times are monotonic seconds,
    passed in."""

    def __init__(self, start_offset: int, *, lock_ms: int = DEFAULT_LOCK_MS,
                 delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT,
                 max_record_locks: int = DEFAULT_MAX_RECORD_LOCKS, state_epoch: int = 0) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.records: dict[int, Record] = {}
        self.lock_ms = lock_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_record_locks = max_record_locks
        self.state_epoch = state_epoch
        # offsets whose acknowledgement waits for its state write: never acquired, and the start offset stops
        # before them, until the write is confirmed or rolled back (as Kafka's ongoing state transitions)
        self.pending: set[int] = set()

    # -- loading ------------------------------------------------------------------------------------------------

    @classmethod
    def loaded(cls, answer: ReadAnswer, start_offset: int, **settings) -> SharePartition:
        """From the persister's state: `start_offset` is the answer's, or the one share.auto.offset.reset chose
        when the answer has none (-1)."""
        sp = cls(start_offset, state_epoch=answer.state_epoch, **settings)
        for b in answer.batches:
            for off in range(max(b.first_offset, start_offset), b.last_offset + 1):
                sp.records[off] = Record(b.delivery_state if b.delivery_state in (ACKNOWLEDGED, ARCHIVED) else AVAILABLE,
                                         b.delivery_count)
            sp.end_offset = max(sp.end_offset, b.last_offset + 1)
        sp._advance()
        return sp

    # -- acquisition --------------------------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where the next read of the log starts: the first available in-flight offset, else the end offset."""
        for off in range(self.start_offset, self.end_offset):
            r = self.records.get(off)
            if (r is None or r.state == AVAILABLE) and off not in self.pending:
                return off
        return self.end_offset

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def acquire(self, member: str, batches: list, max_records: int, now: float, *,
                read_from: int | None = None, record_limit: bool = False) -> list[tuple[int, int, int]]:
        """Acquire for `member` the available offsets of the log batches read (their (base offset, last offset),
        ascending; a third element true marks an aborted transaction's batch, archived instead), up to
        `max_records` (finishing the batch that reaches it) and the record-lock limit.  Returns the acquired
        ranges (first offset, last offset, delivery count), consecutive offsets of one count merged.  With
        `record_limit` (ShareFetch v2's ShareAcquireMode 1) never more than `max_records` offsets: the batch that
        reaches it is split, its other offsets left available.

        Offsets the log no longer holds (compacted away, or never records) are handled as Kafka does: those
        between two batches are acquired with the batch after them (the client acknowledges them as GAP), so the
        start offset can pass them; those between `read_from` (where the read began) and the first batch move the
        start offset up when nothing is in flight, and are archived otherwise."""
        out: list[tuple[int, int, int]] = []
        got = 0
        deadline = now + self.lock_ms / 1000
        previous = None if read_from is None else read_from - 1  # the last offset the read covered so far
        for i, entry in enumerate(batches):
            base, last = entry[0], entry[1]
            if previous is not None and base > previous + 1:
                if i == 0:  # nothing of the log between where the read began and its first batch
                    if self.start_offset == self.end_offset and self.start_offset <= base:
                        self.records = {o: r for o, r in self.records.items() if o >= base}
                        self.pending = {o for o in self.pending if o >= base}
                        self.start_offset = self.end_offset = base
                    else:
                        self._archive_range(previous + 1, base - 1)
                else:
                    base = previous + 1  # the gap goes with this batch
            previous = max(last, previous if previous is not None else last)
            if len(entry) > 2 and entry[2]:  # an aborted transaction's batch (read_committed): never delivered
                self._archive_range(base, last)
                continue
            if got >= max_records:
                break
            if last >= self.end_offset and self.in_flight() >= self.max_record_locks:
                if base >= self.end_offset:
                    break
                last = self.end_offset - 1  # the batch's offsets already in flight only
            for off in range(max(base, self.start_offset), last + 1):
                if off >= self.end_offset:
                    self.end_offset = off + 1
                    r = self.records[off] = Record(AVAILABLE, 0)
                else:
                    r = self.records.get(off) or self.records.setdefault(off, Record(AVAILABLE, 0))
                if r.state != AVAILABLE or off in self.pending:
                    continue
                if record_limit and got >= max_records:
                    break
                r.state, r.member, r.deadline = ACQUIRED, member, deadline
                r.delivery_count += 1
                got += 1
                if out and out[-1][1] == off - 1 and out[-1][2] == r.delivery_count:
                    out[-1] = (out[-1][0], off, r.delivery_count)
                else:
                    out.append((off, off, r.delivery_count))
        self._advance()
        return out

    def _archive_range(self, base: int, last: int) -> None:
        for off in range(max(base, self.start_offset), last + 1):
            if off >= self.end_offset:
                self.end_offset = off + 1
                self.records[off] = Record(ARCHIVED, 0)
            else:
                r = self.records.setdefault(off, Record(AVAILABLE, 0))
                if r.state == AVAILABLE:
                    r.state = ARCHIVED

    # -- acknowledgement ----------------------------------------------------------------------------------------

    def acknowledge(self, member: str, batches: list[AckBatch], now: float, *, renew_allowed: bool = False,
                    renew_enabled: bool = True, hold: bool = False) -> Undo:
        """Apply one partition's acknowledgements, all or none (AckError names the refusal).  Offsets below the
        start offset are skipped, as Kafka does (already done with).  With `hold` the changed offsets stay pending
        (not acquirable, the start offset not past them) until `confirm` (the state write succeeded) or `rollback`
        (it failed: the records are acquired by `member` again, as before, unless their lock ran out); renewals change no state and are not
        held.  A renewal when the group's share.renew.acknowledge.enable is false (`renew_enabled`) is
        INVALID_RECORD_STATE, as Kafka's."""
        check_batches(batches, renew_allowed=renew_allowed)
        changes: list[tuple[int, Record, int]] = []
        renewed: set[int] = set()  # offsets a batch before renewed: still acquired for a later batch
        seen: set[int] = set()
        for b in batches:
            if b.last_offset < self.start_offset:
                continue
            if b.first_offset >= self.end_offset:
                raise AckError(ErrorCode.INVALID_REQUEST,
                               f"offsets {b.first_offset}-{b.last_offset} are past the acquired records")
            if b.last_offset >= self.end_offset:
                raise AckError(ErrorCode.INVALID_REQUEST,
                               f"offset {b.last_offset} is past the acquired records (end {self.end_offset})")
            for off in range(max(b.first_offset, self.start_offset), b.last_offset + 1):
                r = self.records.get(off)
                if r is None or r.state != ACQUIRED or (off in seen and off not in renewed):
                    raise AckError(ErrorCode.INVALID_RECORD_STATE, f"offset {off} is not acquired")
                if r.member != member:
                    raise AckError(ErrorCode.INVALID_RECORD_STATE, f"offset {off} is acquired by another member")
                t = b.types[0] if len(b.types) == 1 else b.types[off - b.first_offset]
                if t == RENEW and not renew_enabled:
                    raise AckError(ErrorCode.INVALID_RECORD_STATE,
                                   "renewing acquisition locks is not enabled for the group")
                seen.add(off)
                if t == RENEW:
                    renewed.add(off)
                else:
                    renewed.discard(off)
                changes.append((off, r, t))
        deadline = now + self.lock_ms / 1000
        undo = Undo()
        for off, r, t in changes:
            if t != RENEW:
                undo.before.append((off, replace(r)))
                self.pending.add(off)
            if t == ACCEPT:
                self._settle(r, ACKNOWLEDGED)
            elif t in (REJECT, GAP):
                self._settle(r, ARCHIVED)
            elif t == RELEASE:
                self._release(r)
            else:  # RENEW: the lock starts again
                r.deadline = deadline
        if not hold:
            self.confirm(undo)
        return undo

    def confirm(self, undo: Undo) -> None:
        """The held acknowledgement's state write succeeded: its offsets are done pending."""
        for off, _before in undo.before:
            self.pending.discard(off)
        self._advance()

    def rollback(self, undo: Undo, now: float) -> None:
        """The held transition's state write failed: its records go back to what they were, acquired by their
        member with the same delivery count and lock, as Kafka 4.3 rolls back every transition whose write fails.
        One exception, Kafka's too: a record whose lock ran out while its write was under way (by `now`) is not
        locked again but released at once (AVAILABLE, or ARCHIVED at the delivery count limit), its lock's expiry
        having been held off by the transition and due as soon as the transition ends."""
        for off, before in undo.before:
            self.pending.discard(off)
            if off < self.start_offset:  # cut by a log start move meanwhile: done with, whatever the write did
                continue
            if before.state == ACQUIRED and before.deadline <= now:
                self._release(before)
            self.records[off] = before
        self._advance()

    # -- releases -----------------------------------------------------------------------------------------------

    def release_member(self, member: str, *, hold: bool = False) -> Undo:
        """Release every record `member` holds (its share session closed); the undo is true when some were.
        With `hold` the released offsets stay pending, as an acknowledgement's do, until `confirm` (the state
        write succeeded) or `rollback` (it failed: the records are the member's again until their locks run
        out), as Kafka 4.3's release of a leaving member's records."""
        undo = Undo()
        for off, r in self.records.items():
            if r.state == ACQUIRED and r.member == member and off not in self.pending:
                undo.before.append((off, replace(r)))
                self.pending.add(off)
                self._release(r)
        if not hold:
            self.confirm(undo)
        return undo

    def expire_locks(self, now: float) -> bool:
        """Release the records whose acquisition lock ran out; True when some did.  Unlike an acknowledgement or
        a member's release this is never held nor rolled back: the records stay released whatever becomes of
        the state write that carries them, as Kafka 4.3's lock timeout does."""
        hit = False
        for r in self.records.values():
            if r.state == ACQUIRED and r.deadline <= now:
                self._release(r)
                hit = True
        self._advance()
        return hit

    def next_deadline(self) -> float | None:
        deadlines = [r.deadline for r in self.records.values() if r.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    def update_log_start(self, log_start_offset: int) -> bool:
        """Records below the log start offset (deleted, or cut by DeleteRecords) are archived: the start offset
        moves up to it.  True when it moved."""
        if log_start_offset <= self.start_offset:
            return False
        for off in [o for o in self.records if o < log_start_offset]:
            del self.records[off]
        self.pending = {o for o in self.pending if o >= log_start_offset}
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)
        self._advance()
        return True

    # -- persisted form -----------------------------------------------------------------------------------------

    def state_batches(self) -> tuple[StateBatch, ...]:
        """The in-flight records as persisted batches: consecutive offsets of one state and count merged; an
        offset never delivered is AVAILABLE with count 0."""
        out: list[StateBatch] = []
        for off in range(self.start_offset, self.end_offset):
            r = self.records.get(off)
            state, count = (AVAILABLE, 0) if r is None else (AVAILABLE if r.state == ACQUIRED else r.state,
                                                              r.delivery_count)
            if out and out[-1].last_offset == off - 1 and out[-1].delivery_state == state \
                    and out[-1].delivery_count == count:
                out[-1] = StateBatch(out[-1].first_offset, off, state, count)
            else:
                out.append(StateBatch(off, off, state, count))
        return tuple(out)

    def delivery_complete_count(self) -> int:
        """The in-flight records that will not be delivered again (Kafka's summary count)."""
        return sum(1 for r in self.records.values() if r.state in (ACKNOWLEDGED, ARCHIVED))

    # -- internals ----------------------------------------------------------------------------------------------

    def _release(self, r: Record) -> None:
        if r.delivery_count >= self.delivery_count_limit:
            self._settle(r, ARCHIVED)
        else:
            r.state, r.member = AVAILABLE, None

    @staticmethod
    def _settle(r: Record, state: int) -> None:
        r.state, r.member = state, None

    def _advance(self) -> None:
        while self.start_offset < self.end_offset:
            r = self.records.get(self.start_offset)
            if r is None or r.state not in (ACKNOWLEDGED, ARCHIVED) or self.start_offset in self.pending:
                break
            del self.records[self.start_offset]
            self.start_offset += 1
