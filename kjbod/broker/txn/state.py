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

Transaction version 2 (KIP-890 part 2), chosen per request as Kafka's coordinator chooses it (EndTxn v5, and the
AddPartitionsToTxn v4+ a partition leader sends for a Produce v12+ or TxnOffsetCommit v5 batch), not by the
finalized level:

* EndTxn bumps the epoch at every transaction end: the Prepare* value carries epoch + 1 (the markers are
  written with it, so a late batch of the ended transaction is refused), and the producer is answered the id and
  epoch it goes on with.  An epoch that has run out (32766 and up) takes a fresh producer id as NextProducerId in
  Prepare*; Complete* then moves to it at epoch 0 (the markers still carry the old id at 32767).
* A retry is told apart by its epoch: one below the current one (or the old id at 32766 after a roll to a new
  id) after Complete* answers success with the current id and epoch; an Abort at the current epoch of an Empty
  or Complete* transaction (a producer aborting before anything was added) is a new, empty transaction aborted
  with the epoch bumped; a Commit there is INVALID_TXN_STATE.  Otherwise an epoch that is not the current one is
  PRODUCER_FENCED.
* The value written keeps the client's transaction version (ClientTransactionVersion), so the Complete* step and
  a coordinator that loads the partition later know which rules the transaction ends by.

Every value carries PreviousProducerId (the producer id before the change), as Kafka writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kjbod.broker.txn.records import TxnState, TxnValue
from kjbod.protocol.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE: an epoch is bumped below it, and a producer at 32766 gets a new id
TV_2 = 2  # transaction.version 2: the epoch bumped at every transaction end

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
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID  # TV2: the id a Prepare* hands over to once its epoch ran out
    client_txn_version: int = 0

    def value(self) -> TxnValue:
        return TxnValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                        tuple(sorted(self.partitions)), self.last_update_ms, self.start_ms, self.prev_producer_id,
                        self.next_producer_id, self.client_txn_version)

    def epoch_exhausted(self) -> bool:
        """Kafka's isProducerEpochExhausted: no epoch left to give a producer (32766 and up)."""
        return self.producer_epoch >= MAX_EPOCH - 1


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

    @property
    def continues_as(self) -> tuple[int, int]:
        """The producer id and epoch the producer goes on with once this change is done (EndTxn v5's answer): a
        transaction.version 2 end that runs out of epochs hands over to its next producer id at epoch 0."""
        v = self.value
        if v.next_producer_id != NO_PRODUCER_ID:
            return v.next_producer_id, 0
        return v.producer_id, v.producer_epoch


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms


class TxnBook:
    def __init__(self, config: TxnConfig | None = None) -> None:
        self.config = config or TxnConfig()
        self.txns: dict[str, TxnMetadata] = {}
        # The finalized transaction.version (the shell keeps it current): the rules the coordinator's own aborts
        # (a timed-out transaction, InitProducerId fencing an Ongoing one) end by, as Kafka's use the server's.
        self.server_tv = 0

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
            return self._fence_and_abort(m, now, fresh_pid)
        # Empty or Complete*: bump the epoch (a new producer id once the epoch runs out).
        if m.producer_epoch >= MAX_EPOCH - 1:
            if fresh_pid < 0:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            pid, epoch = fresh_pid, 0
        else:
            pid, epoch = m.producer_id, m.producer_epoch + 1
        return self._begin(m, TxnValue(pid, epoch, timeout_ms, TxnState.EMPTY, (), now, -1),
                           last_epoch=m.producer_epoch)

    def fence_needs_producer_id(self, m: TxnMetadata) -> bool:
        """Whether fencing `m` (a timeout, or InitProducerId over an Ongoing transaction) hands it over to a
        fresh producer id: transaction.version 2 with its epoch run out (the shell fetches one first)."""
        return self.server_tv >= TV_2 and m.epoch_exhausted()

    def _fence_and_abort(self, m: TxnMetadata, now: int, fresh_pid: int = NO_PRODUCER_ID) -> Transit:
        """Bumps the epoch (fencing the producer) and prepares the abort of the Ongoing transaction.  As Kafka's,
        it ends by the cluster's finalized transaction version (`server_tv`), the coordinator's own request.  At 2
        it ends as an EndTxn v5 does (Kafka's prepareAbortOrCommit): the epoch is bumped, so the markers are above
        the producer's epoch on every partition, as transaction.version 2 leaders require, and an epoch that ran
        out hands the transaction over to `fresh_pid` (`fence_needs_producer_id`), which the Complete* moves to at
        epoch 0.  Without one (none could be had) it stays at the epoch it reached."""
        top = MAX_EPOCH if self.server_tv >= TV_2 else MAX_EPOCH - 1
        epoch = m.producer_epoch + 1 if m.producer_epoch < top else m.producer_epoch
        next_pid = fresh_pid if self.fence_needs_producer_id(m) else NO_PRODUCER_ID
        return self._begin(m, TxnValue(m.producer_id, epoch, m.timeout_ms, TxnState.PREPARE_ABORT,
                                       tuple(sorted(m.partitions)), now, m.start_ms, next_producer_id=next_pid),
                           last_epoch=m.producer_epoch, fenced_abort=True, client_tv=self.server_tv)

    # ------------------------------------------------------------------------------------------ partitions
    def _check_producer(self, tid: str, pid: int, epoch: int) -> int | TxnMetadata:
        m = self.txns.get(tid)
        if m is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        # First, as Kafka checks its pending transition first (a Prepare* here is Kafka's pending Complete*, the
        # markers going out): a transaction.version 2 producer moved to its next producer id asks before the
        # Complete* that moves the transaction to that id is written, and must wait, not be refused.
        if m.pending is not None or m.state in PREPARE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if m.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != m.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if m.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            return ErrorCode.INVALID_TXN_STATE
        return m

    def add_partitions(self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]],
                       now: int, client_tv: int = 0) -> int | Transit | None:
        """An error code, None (nothing to write: every partition is in already), or the change to write.
        `client_tv`: 2 when a partition leader adds the partitions for a transaction.version 2 producer
        (AddPartitionsToTxn v4 and up without VerifyOnly), else 0 (a producer's own AddPartitionsToTxn, v0-3);
        the transaction keeps it, as Kafka's does."""
        m = self._check_producer(tid, pid, epoch)
        if isinstance(m, int):
            return m
        if m.state == TxnState.ONGOING and set(partitions) <= m.partitions:
            return None
        start = m.start_ms if m.state == TxnState.ONGOING else now
        return self._begin(m, TxnValue(m.producer_id, m.producer_epoch, m.timeout_ms, TxnState.ONGOING,
                                       tuple(sorted(m.partitions | set(partitions))), now, start),
                           client_tv=client_tv)

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
    def needs_producer_id_to_end(self, tid: str) -> bool:
        """Whether a transaction.version 2 EndTxn for `tid` would hand over to a fresh producer id (its epoch has
        run out; the shell fetches one first)."""
        m = self.txns.get(tid)
        return m is not None and m.epoch_exhausted()

    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, now: int, client_tv: int = 0,
                fresh_pid: int = NO_PRODUCER_ID) -> int | Transit:
        """An error code (NONE: a retry of what is done already) or the Prepare* change to write.  `client_tv` 2:
        EndTxn v5's rules (the module docstring); `fresh_pid` must be set when `needs_producer_id_to_end` said
        so."""
        if client_tv >= TV_2:
            return self._end_txn_v2(tid, pid, epoch, commit, now, fresh_pid)
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
            # Ended by the older rules: the transaction (and its markers) is at client version 0 from here, as
            # Kafka's endTransactionWithTV1 sets it, whatever added its partitions.
            return self._begin(m, TxnValue(m.producer_id, m.producer_epoch, m.timeout_ms, target,
                                           tuple(sorted(m.partitions)), now, m.start_ms), client_tv=0)
        if state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return ErrorCode.NONE
        if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE  # Empty, the other outcome, Dead, PrepareEpochFence

    def _end_txn_v2(self, tid: str, pid: int, epoch: int, commit: bool, now: int, fresh_pid: int) -> int | Transit:
        m = self.txns.get(tid)
        if m is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        # First (a roll to a new producer id may be what is pending): a Prepare* here is Kafka's pending Complete*.
        if m.pending is not None or m.state in PREPARE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        retry_on_overflow = (m.prev_producer_id == pid and epoch == MAX_EPOCH - 1 and m.producer_epoch == 0)
        retry_on_bump = m.producer_epoch == epoch + 1
        if m.producer_id != pid and not retry_on_overflow:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        state = m.state
        if state in PREPARE:
            valid = retry_on_bump
        elif state in COMPLETE:
            valid = retry_on_bump or retry_on_overflow or epoch == m.producer_epoch
        else:  # Ongoing, Empty
            valid = epoch == m.producer_epoch
        if not valid:
            return ErrorCode.PRODUCER_FENCED
        retry = retry_on_bump or retry_on_overflow
        if state == TxnState.ONGOING:
            return self._prepare_end_v2(m, TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, now,
                                        fresh_pid, empty=False)
        if state in PREPARE:
            same = state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
            return ErrorCode.CONCURRENT_TRANSACTIONS if same else ErrorCode.INVALID_TXN_STATE
        if state in COMPLETE:
            same = state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
            if retry:
                return ErrorCode.NONE if same else ErrorCode.INVALID_TXN_STATE
            if commit:
                return ErrorCode.INVALID_TXN_STATE
            return self._prepare_end_v2(m, TxnState.PREPARE_ABORT, now, fresh_pid, empty=True)
        if state == TxnState.EMPTY and not commit:
            return self._prepare_end_v2(m, TxnState.PREPARE_ABORT, now, fresh_pid, empty=True)
        return ErrorCode.INVALID_TXN_STATE

    def _prepare_end_v2(self, m: TxnMetadata, target: TxnState, now: int, fresh_pid: int, empty: bool) \
            -> int | Transit:
        """Prepare* with the epoch bumped (Kafka's prepareAbortOrCommit for transaction.version 2); an epoch run
        out takes `fresh_pid` as the next producer id.  An abort with nothing added (`empty`) starts now."""
        next_pid = NO_PRODUCER_ID
        if m.epoch_exhausted():
            if fresh_pid < 0:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            next_pid = fresh_pid
        # An epoch at 32767 (only a coordinator's own fencing reaches it) is aborted as it is, to recover.
        epoch = m.producer_epoch + 1 if m.producer_epoch < MAX_EPOCH else m.producer_epoch
        return self._begin(m, TxnValue(m.producer_id, epoch, m.timeout_ms, target, tuple(sorted(m.partitions)),
                                       now, now if empty else m.start_ms, next_producer_id=next_pid),
                           last_epoch=m.producer_epoch, client_tv=TV_2)

    def complete_markers(self, tid: str, now: int) -> Transit | None:
        """Once every marker of a Prepare* transaction is written: the Complete* change (None if it moved on)."""
        m = self.txns.get(tid)
        if m is None or m.pending is not None or m.state not in PREPARE:
            return None
        target = TxnState.COMPLETE_COMMIT if m.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        pid, epoch = m.producer_id, m.producer_epoch
        if m.client_txn_version >= TV_2 and m.next_producer_id != NO_PRODUCER_ID:  # the epoch ran out: the next id
            pid, epoch = m.next_producer_id, 0
        return self._begin(m, TxnValue(pid, epoch, m.timeout_ms, target, (), now, m.start_ms))

    def timing_out(self, now: int) -> list[TxnMetadata]:
        """Ongoing transactions past their timeout, nothing pending."""
        return [m for m in self.txns.values() if m.state == TxnState.ONGOING and m.pending is None
                and m.start_ms >= 0 and now > m.start_ms + m.timeout_ms]

    def timed_out(self, now: int, fresh_pids: dict[str, int] | None = None) -> list[Transit]:
        """The aborts of Ongoing transactions past their timeout, each epoch bumped (pending until written).
        `fresh_pids`: the next producer id of each one `fence_needs_producer_id` names."""
        fresh_pids = fresh_pids or {}
        return [self._fence_and_abort(m, now, fresh_pids.get(m.transactional_id, NO_PRODUCER_ID))
                for m in self.timing_out(now)]

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
               fenced_abort: bool = False, client_tv: int | None = None) -> Transit:
        # As Kafka's transition: the previous producer id is the one before it, the client's transaction version
        # is kept unless the request sets it.
        value = replace(value, prev_producer_id=m.producer_id,
                        client_txn_version=m.client_txn_version if client_tv is None else client_tv)
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
        m.prev_producer_id, m.next_producer_id, m.client_txn_version = v.prev_producer_id, v.next_producer_id, \
            v.client_txn_version

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
