"""The transaction coordinator's rules without I/O: one `TxnMetadata` per transactional id, driven by `TxnBook`.

Strategy: every request is a method call with the time in milliseconds passed in.  A request that changes a
transaction returns a `Transit`: the value to write to `__transaction_state`; the transaction is marked pending
meanwhile (a second request then answers CONCURRENT_TRANSACTIONS), and the asyncio shell
(kjbod.broker.txn.coordinator) calls `complete(transit)` once the record is committed, or `fail(transit)` when
the write failed.  Nothing here reads a clock, writes a file or sends a request.

The states and moves are Kafka's (transaction.version 1, what every client speaks when the cluster does not
finalize transaction.version 2):

* InitProducerId: a new transactional id gets a fresh producer id at epoch 0; an Empty or Complete* one gets its
  epoch bumped (a fresh producer id once the epoch would pass 32766), which fences the older instance.  An
  Ongoing transaction is aborted first, with the epoch bumped so its producer is fenced, and the caller hears
  CONCURRENT_TRANSACTIONS until the abort completes.  Prepare* answers CONCURRENT_TRANSACTIONS.
* AddPartitionsToTxn (and AddOffsetsToTxn, which adds the group's `__consumer_offsets` partition): Empty or
  Complete* → Ongoing (the start time set), Ongoing → Ongoing with more partitions; nothing is written when every
  partition is already in the transaction.
* EndTxn: Ongoing → PrepareCommit or PrepareAbort (written, then answered), then the markers, then
  CompleteCommit or CompleteAbort with no partitions.  A retried EndTxn of the outcome already reached answers
  success; the other outcome INVALID_TXN_STATE, as does ending an Empty transaction.
* An Ongoing transaction older than its timeout is aborted by the coordinator, the epoch bumped (its producer
  is fenced, as in Kafka before transaction.version 2).
* A transactional id with no transaction under way (Empty or Complete*) whose last change is older than
  transactional.id.expiration.ms is removed: a tombstone (its key, a null value) is written, the id is Dead
  meanwhile (its requests answer CONCURRENT_TRANSACTIONS), and the next InitProducerId for it gets a new
  producer id.

A producer id that does not match answers INVALID_PRODUCER_ID_MAPPING, an older epoch PRODUCER_FENCED (the
handlers turn it into INVALID_PRODUCER_EPOCH for the versions that predate that code).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kjbod.broker.txn.records import TxnState, TxnValue
from kjbod.protocol.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE: an epoch is bumped below it, and a producer at 32766 gets a new id

COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
EXPIRABLE = (TxnState.EMPTY, *COMPLETE)  # Kafka's isExpirationAllowed


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = NO_EPOCH  # the epoch before the last bump (a retried InitProducerId)
    pending: Transit | None = None

    def value(self) -> TxnValue:
        return TxnValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                        tuple(sorted(self.partitions)), self.last_update_ms, self.start_ms)


@dataclass(frozen=True, slots=True)
class Transit:
    """A change of one transaction: what is written, and applied once the write is committed."""

    transactional_id: str
    value: TxnValue
    last_producer_epoch: int = NO_EPOCH
    # Set when this change starts an abort the caller does not wait for (InitProducerId on an Ongoing
    # transaction, a timed-out transaction): the caller answers CONCURRENT_TRANSACTIONS or nothing.
    fenced_abort: bool = False

    @property
    def state(self) -> TxnState:
        return self.value.state


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms


class TxnBook:
    def __init__(self, config: TxnConfig | None = None) -> None:
        self.config = config or TxnConfig()
        self.txns: dict[str, TxnMetadata] = {}

    # ------------------------------------------------------------------------------------------ InitProducerId
    def needs_producer_id(self, tid: str) -> bool:
        """Whether an InitProducerId for `tid` would take a fresh producer id (the shell fetches one first)."""
        m = self.txns.get(tid)
        return m is None or m.producer_epoch >= MAX_EPOCH - 1

    def init_producer_id(self, tid: str, timeout_ms: int, expected_pid: int, expected_epoch: int, now: int,
                         fresh_pid: int = NO_PRODUCER_ID) -> int | Transit:
        """An error code, or the change to write.  `fresh_pid` must be set when `needs_producer_id` said so."""
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT
        m = self.txns.get(tid)
        if m is None:
            if fresh_pid < 0:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            if expected_pid != NO_PRODUCER_ID:  # a producer resuming an id this coordinator never gave out
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING
            m = self.txns[tid] = TxnMetadata(tid, fresh_pid, NO_EPOCH, timeout_ms, last_update_ms=now)
            return self._begin(m, TxnValue(fresh_pid, 0, timeout_ms, TxnState.EMPTY, (), now, -1))
        if m.pending is not None or m.state in PREPARE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if m.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if expected_pid != NO_PRODUCER_ID:
            if expected_pid != m.producer_id:
                return ErrorCode.PRODUCER_FENCED
            if expected_epoch != m.producer_epoch and expected_epoch != m.last_producer_epoch:
                return ErrorCode.PRODUCER_FENCED
            if expected_epoch == m.last_producer_epoch and m.state not in COMPLETE and m.state != TxnState.ONGOING:
                # A retry of the InitProducerId that already bumped: answer what it got, write nothing.
                return Transit(tid, m.value(), m.last_producer_epoch)
        if m.state == TxnState.ONGOING:
            return self._fence_and_abort(m, now)
        # Empty or Complete*: bump the epoch (a new producer id once the epoch runs out).
        if m.producer_epoch >= MAX_EPOCH - 1:
            if fresh_pid < 0:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            pid, epoch = fresh_pid, 0
        else:
            pid, epoch = m.producer_id, m.producer_epoch + 1
        return self._begin(m, TxnValue(pid, epoch, timeout_ms, TxnState.EMPTY, (), now, -1),
                           last_epoch=m.producer_epoch)

    def _fence_and_abort(self, m: TxnMetadata, now: int) -> Transit:
        """Bumps the epoch (fencing the producer) and prepares the abort of the Ongoing transaction."""
        epoch = m.producer_epoch + 1 if m.producer_epoch < MAX_EPOCH - 1 else m.producer_epoch
        return self._begin(m, TxnValue(m.producer_id, epoch, m.timeout_ms, TxnState.PREPARE_ABORT,
                                       tuple(sorted(m.partitions)), now, m.start_ms),
                           last_epoch=m.producer_epoch, fenced_abort=True)

    # ------------------------------------------------------------------------------------------ partitions
    def _check_producer(self, tid: str, pid: int, epoch: int) -> int | TxnMetadata:
        m = self.txns.get(tid)
        if m is None or m.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != m.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if m.pending is not None or m.state in PREPARE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if m.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            return ErrorCode.INVALID_TXN_STATE
        return m

    def add_partitions(self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]],
                       now: int) -> int | Transit | None:
        """An error code, None (nothing to write: every partition is in already), or the change to write."""
        m = self._check_producer(tid, pid, epoch)
        if isinstance(m, int):
            return m
        if m.state == TxnState.ONGOING and set(partitions) <= m.partitions:
            return None
        start = m.start_ms if m.state == TxnState.ONGOING else now
        return self._begin(m, TxnValue(m.producer_id, m.producer_epoch, m.timeout_ms, TxnState.ONGOING,
                                       tuple(sorted(m.partitions | set(partitions))), now, start))

    def check_ongoing(self, tid: str, pid: int, epoch: int, partition: tuple[str, int]) -> int:
        """TxnOffsetCommit's check: the producer holds `tid` and its transaction has `partition` in it."""
        m = self.txns.get(tid)
        if m is None or m.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != m.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if m.state != TxnState.ONGOING or partition not in m.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def verify_partitions(self, tid: str, pid: int, epoch: int,
                          partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn with VerifyOnly (KIP-890, a partition leader asking before it appends a
        transactional batch): per partition NONE when it is in the transaction as written, else
        TRANSACTION_ABORTABLE; the producer's errors (an unknown or other producer id, an older or newer epoch, a
        transaction being prepared) answer every partition. A change still being written is not looked at: the
        partitions count once their record is committed, and the leader checks again as it appends."""
        m = self.txns.get(tid)
        code = ErrorCode.NONE
        if m is None or m.producer_id != pid:
            code = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif epoch != m.producer_epoch:
            code = ErrorCode.PRODUCER_FENCED
        elif m.state in PREPARE:
            code = ErrorCode.CONCURRENT_TRANSACTIONS
        if code or m is None:
            return dict.fromkeys(partitions, code)
        return {tp: ErrorCode.NONE if tp in m.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in partitions}

    # ------------------------------------------------------------------------------------------ ending
    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, now: int) -> int | Transit:
        """An error code (NONE: a retry of what is done already) or the Prepare* change to write."""
        m = self.txns.get(tid)
        if m is None or m.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != m.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if m.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = m.state
        if state == TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return self._begin(m, TxnValue(m.producer_id, m.producer_epoch, m.timeout_ms, target,
                                           tuple(sorted(m.partitions)), now, m.start_ms))
        if state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return ErrorCode.NONE
        if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE  # Empty, the other outcome, Dead, PrepareEpochFence

    def complete_markers(self, tid: str, now: int) -> Transit | None:
        """Once every marker of a Prepare* transaction is written: the Complete* change (None if it moved on)."""
        m = self.txns.get(tid)
        if m is None or m.pending is not None or m.state not in PREPARE:
            return None
        target = TxnState.COMPLETE_COMMIT if m.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        return self._begin(m, TxnValue(m.producer_id, m.producer_epoch, m.timeout_ms, target, (), now,
                                       m.start_ms))

    def timed_out(self, now: int) -> list[Transit]:
        """The aborts of Ongoing transactions past their timeout, each epoch bumped (pending until written)."""
        out = []
        for m in self.txns.values():
            if m.state == TxnState.ONGOING and m.pending is None and m.start_ms >= 0 \
                    and now > m.start_ms + m.timeout_ms:
                out.append(self._fence_and_abort(m, now))
        return out

    def expired(self, now: int, expiration_ms: int) -> list[Transit]:
        """The removals of transactional ids idle for ``expiration_ms`` (transactional.id.expiration.ms): Empty or
        Complete*, nothing pending, last changed that long ago; each is pending (a tombstone to write) until
        written, as Kafka's coordinator moves it to Dead meanwhile."""
        out = []
        for m in self.txns.values():
            if m.pending is None and m.state in EXPIRABLE and m.last_update_ms <= now - expiration_ms:
                out.append(self._begin(m, TxnValue(m.producer_id, m.producer_epoch, m.timeout_ms, TxnState.DEAD,
                                                   (), now, -1)))
        return out

    def preparing(self) -> list[TxnMetadata]:
        """Transactions whose markers are owed (after a load, or a marker round that failed)."""
        return [m for m in self.txns.values() if m.state in PREPARE and m.pending is None]

    # ------------------------------------------------------------------------------------------ applying
    def _begin(self, m: TxnMetadata, value: TxnValue, last_epoch: int = NO_EPOCH,
               fenced_abort: bool = False) -> Transit:
        t = Transit(m.transactional_id, value, last_epoch, fenced_abort)
        m.pending = t
        return t

    def complete(self, t: Transit) -> None:
        """The change's record is committed: it is the transaction's state now."""
        m = self.txns.get(t.transactional_id)
        if m is None:
            return
        if m.pending is t:
            m.pending = None
        if t.state == TxnState.DEAD:  # its tombstone is written: the id is gone (a new InitProducerId starts over)
            del self.txns[t.transactional_id]
            return
        self._apply(m, t.value)
        if t.last_producer_epoch != NO_EPOCH:
            m.last_producer_epoch = t.last_producer_epoch

    def fail(self, t: Transit) -> None:
        """The change's record was not written: the transaction stays as it was (a new id nobody holds goes)."""
        m = self.txns.get(t.transactional_id)
        if m is None or m.pending is not t:
            return
        m.pending = None
        if m.producer_epoch == NO_EPOCH:
            del self.txns[t.transactional_id]

    @staticmethod
    def _apply(m: TxnMetadata, v: TxnValue) -> None:
        m.producer_id, m.producer_epoch, m.timeout_ms, m.state = v.producer_id, v.producer_epoch, v.timeout_ms, \
            v.state
        m.partitions = set(v.partitions)
        m.last_update_ms, m.start_ms = v.last_update_ms, v.start_ms

    def load(self, tid: str, value: TxnValue | None) -> None:
        """A record read back from the log (None: a tombstone)."""
        if value is None:
            self.txns.pop(tid, None)
            return
        m = self.txns.get(tid)
        if m is None:
            m = self.txns[tid] = TxnMetadata(tid, value.producer_id, value.producer_epoch, value.timeout_ms)
        self._apply(m, value)

    def unload(self, tids: list[str]) -> None:
        for tid in tids:
            self.txns.pop(tid, None)
