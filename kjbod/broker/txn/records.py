"""The records of `__transaction_state` and the transaction markers, in Kafka's byte layouts.

Strategy: the coordinator keeps one record per transactional id, the latest state winning (the topic is
compacted).  Key and value each start with an int16 version:

  key version 0    TransactionLogKey:   transactional id (string)
  value version 0  TransactionLogValue: producer id (int64), producer epoch (int16), transaction timeout ms
                   (int32), status (int8), partitions (nullable int32-count array of: topic (string),
                   partition ids (int32-count array of int32)), last update timestamp (int64), start
                   timestamp (int64)

Version 1 of the value is the flexible form (compact strings and arrays, a tag buffer after each partition entry
and at the end); Kafka writes it once transaction.version 1 is finalized, and so does kjbod (version 0 below that);
both are read.  Its tagged fields, each written only when it is not its default:

  tag 0  PreviousProducerId (int64, default -1): the producer id before the change this value records
  tag 1  NextProducerId (int64, default -1): the id a transaction.version 2 end hands over to when the epoch has
         run out (set in Prepare*, gone in Complete*)
  tag 2  ClientTransactionVersion (int16, default 0): the transaction version the producer speaks (2: EndTxn v5)
  tag 3  NextProducerEpoch (int16, default -1): in Kafka's schema, never set by its coordinator (nor by kjbod)

Status numbers are Kafka's TransactionState ids.  An Empty transaction is written with a null partition array,
every other state with an array (empty for Complete*), as Kafka's TransactionLog writes them.

A transaction marker is a control batch (attributes transactional and control) holding one record:

  key    version (int16, 0), type (int16: 0 abort, 1 commit)
  value  version (int16, 0), coordinator epoch (int32)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from kjbod.protocol.runtime import write_uvarint

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_B = struct.Struct(">b")

KEY_VERSION = 0
VALUE_VERSION = 0
TAG_PREVIOUS_PRODUCER_ID, TAG_NEXT_PRODUCER_ID, TAG_CLIENT_TRANSACTION_VERSION, TAG_NEXT_PRODUCER_EPOCH = 0, 1, 2, 3
ABORT_MARKER, COMMIT_MARKER = 0, 1


class TxnState(IntEnum):
    """Kafka's TransactionState ids (the status byte of a value)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


# The names DescribeTransactions and ListTransactions use (Kafka's state names).
STATE_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}


class TxnRecordError(ValueError):
    """A key or value of `__transaction_state` (or a marker) that does not decode."""


@dataclass(frozen=True, slots=True)
class TxnValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, int], ...]  # sorted
    last_update_ms: int
    start_ms: int
    # Version 1's tagged fields (see the module docstring); version 0 has none of them.
    prev_producer_id: int = -1
    next_producer_id: int = -1
    client_txn_version: int = 0
    next_producer_epoch: int = -1


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _H.pack(len(raw)) + raw


def txn_key(transactional_id: str) -> bytes:
    return _H.pack(KEY_VERSION) + _str(transactional_id)


def txn_value(v: TxnValue, version: int = VALUE_VERSION) -> bytes:
    """The value in `version` 0, or 1 (the flexible layout, written once transaction.version 1 is finalized, with
    the tagged fields that are not at their defaults)."""
    flexible = version == 1
    out = [_H.pack(version), _Q.pack(v.producer_id), _H.pack(v.producer_epoch), _I.pack(v.timeout_ms),
           _B.pack(int(v.state))]
    if v.state == TxnState.EMPTY:
        out.append(write_uvarint(0) if flexible else _I.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for t, p in v.partitions:
            by_topic.setdefault(t, []).append(p)
        out.append(write_uvarint(len(by_topic) + 1) if flexible else _I.pack(len(by_topic)))
        for t, ps in by_topic.items():
            if flexible:
                raw = t.encode("utf-8")
                out += [write_uvarint(len(raw) + 1), raw, write_uvarint(len(ps) + 1), *(_I.pack(p) for p in ps),
                        b"\x00"]
            else:
                out += [_str(t), _I.pack(len(ps)), *(_I.pack(p) for p in ps)]
    out += [_Q.pack(v.last_update_ms), _Q.pack(v.start_ms)]
    if flexible:
        tags = []
        if v.prev_producer_id != -1:
            tags.append((TAG_PREVIOUS_PRODUCER_ID, _Q.pack(v.prev_producer_id)))
        if v.next_producer_id != -1:
            tags.append((TAG_NEXT_PRODUCER_ID, _Q.pack(v.next_producer_id)))
        if v.client_txn_version != 0:
            tags.append((TAG_CLIENT_TRANSACTION_VERSION, _H.pack(v.client_txn_version)))
        if v.next_producer_epoch != -1:
            tags.append((TAG_NEXT_PRODUCER_EPOCH, _H.pack(v.next_producer_epoch)))
        out.append(write_uvarint(len(tags)))
        for tag, raw in tags:
            out += [write_uvarint(tag), write_uvarint(len(raw)), raw]
    return b"".join(out)


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.buf):
            raise TxnRecordError("truncated record")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return int(v)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise TxnRecordError("bad length")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(b)

    def varint(self) -> int:
        shift = value = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise TxnRecordError("bad varint")
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self, compact: bool) -> str:
        n = self.varint() - 1 if compact else self.take(_H)
        if n < 0:
            raise TxnRecordError("null string where one is required")
        return self.raw(n).decode("utf-8")

    def count(self, compact: bool) -> int:
        return self.varint() - 1 if compact else self.take(_I)

    def skip_tags(self) -> None:
        for _ in range(self.varint()):
            self.varint()
            self.raw(self.varint())


def read_key(buf: bytes) -> str:
    """The transactional id of a key (TxnRecordError for another key version)."""
    r = _Reader(buf)
    version = r.take(_H)
    if version != KEY_VERSION:
        raise TxnRecordError(f"unknown __transaction_state key version {version}")
    return r.string(False)


def read_value(buf: bytes) -> TxnValue:
    r = _Reader(buf)
    version = r.take(_H)
    if version not in (0, 1):
        raise TxnRecordError(f"unknown __transaction_state value version {version}")
    compact = version == 1
    pid, epoch, timeout = r.take(_Q), r.take(_H), r.take(_I)
    status = r.take(_B)
    try:
        state = TxnState(status)
    except ValueError:
        raise TxnRecordError(f"unknown transaction status {status}") from None
    partitions: list[tuple[str, int]] = []
    n = r.count(compact)
    for _ in range(max(n, 0)):
        topic = r.string(compact)
        for _ in range(max(r.count(compact), 0)):
            partitions.append((topic, r.take(_I)))
        if compact:
            r.skip_tags()
    update_ms, start_ms = r.take(_Q), r.take(_Q)
    tagged = {TAG_PREVIOUS_PRODUCER_ID: -1, TAG_NEXT_PRODUCER_ID: -1, TAG_CLIENT_TRANSACTION_VERSION: 0,
              TAG_NEXT_PRODUCER_EPOCH: -1}
    if compact:
        for _ in range(r.varint()):
            tag = r.varint()
            raw = r.raw(r.varint())
            if tag in (TAG_PREVIOUS_PRODUCER_ID, TAG_NEXT_PRODUCER_ID):
                if len(raw) != 8:
                    raise TxnRecordError(f"tagged field {tag} of {len(raw)} bytes (int64 expected)")
                tagged[tag] = _Q.unpack(raw)[0]
            elif tag in (TAG_CLIENT_TRANSACTION_VERSION, TAG_NEXT_PRODUCER_EPOCH):
                if len(raw) != 2:
                    raise TxnRecordError(f"tagged field {tag} of {len(raw)} bytes (int16 expected)")
                tagged[tag] = _H.unpack(raw)[0]
    return TxnValue(pid, epoch, timeout, state, tuple(sorted(partitions)) if state != TxnState.EMPTY else (),
                    update_ms, start_ms, tagged[TAG_PREVIOUS_PRODUCER_ID], tagged[TAG_NEXT_PRODUCER_ID],
                    tagged[TAG_CLIENT_TRANSACTION_VERSION], tagged[TAG_NEXT_PRODUCER_EPOCH])


def marker_key(commit: bool) -> bytes:
    return _H.pack(0) + _H.pack(COMMIT_MARKER if commit else ABORT_MARKER)


def marker_value(coordinator_epoch: int) -> bytes:
    return _H.pack(0) + _I.pack(coordinator_epoch)


def read_marker(key: bytes, value: bytes | None) -> tuple[bool, int]:
    """(commit, coordinator epoch) of a control record that is a transaction marker."""
    if len(key) < 4:
        raise TxnRecordError("control record key too short")
    version, kind = struct.unpack_from(">hh", key)
    if version != 0 or kind not in (ABORT_MARKER, COMMIT_MARKER):
        raise TxnRecordError(f"not a transaction marker (key version {version}, type {kind})")
    epoch = struct.unpack_from(">i", value, 2)[0] if value is not None and len(value) >= 6 else -1
    return kind == COMMIT_MARKER, epoch
