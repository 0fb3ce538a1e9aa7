"""Committed metadata records in, published images out, with KIP-868's metadata transactions honoured.

Strategy (Kafka's MetadataBatchLoader): one `MetadataDelta` collects records as they are read; `load()` takes the
records of one or more committed batches with their offsets and returns the (delta, image) pairs a reader may
publish, in order.  Outside a transaction everything read in one call becomes one image.  A
BeginTransactionRecord first publishes what came before it; the records after it are held in the delta, across
calls, until the EndTransactionRecord, and then published with whatever follows in the same call; an
AbortTransactionRecord throws them away and publishes an image that differs from the last one only in its offset.
So no reader (a broker, a controller's listeners, DescribeCluster) ever sees half a transaction, and a snapshot is
never written while one is open (`in_transaction`).

Every record moves the offset, transaction markers and NoOpRecords included: the image's offset is the offset of
the last record read (once published), which is what a broker reports as its metadata offset.

A marker out of place (a Begin inside a transaction, an End or Abort outside one) is ignored and noted in
`faults` for the caller to log, as Kafka's loader reports it to its fault handler and goes on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kjbod.metadata.delta import MetadataDelta
from kjbod.metadata.image import MetadataImage
from kjbod.protocol.generated import AbortTransactionRecord, BeginTransactionRecord, EndTransactionRecord

__all__ = ["NO_TRANSACTION", "MetadataLoader"]

NO_TRANSACTION = -1


class MetadataLoader:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._delta = MetadataDelta(image)
        self._pending = False  # the delta holds records (or an offset) not published yet
        self.transaction_start = NO_TRANSACTION  # offset of the open BeginTransactionRecord
        self.faults: list[str] = []

    @property
    def in_transaction(self) -> bool:
        return self.transaction_start != NO_TRANSACTION

    @property
    def offset(self) -> int:
        """The offset of the last record read, published or not."""
        return self._delta.offset

    @property
    def dropped(self) -> int:
        """Records of the delta being built that named something the image does not have."""
        return self._delta.dropped

    def reset(self, image: MetadataImage) -> None:
        """Starts over from `image` (a snapshot was installed): whatever was held is discarded."""
        self.image = image
        self._delta = MetadataDelta(image)
        self._pending = False
        self.transaction_start = NO_TRANSACTION

    def load(self, records: Iterable[tuple[Any, int]]) -> list[tuple[MetadataDelta, MetadataImage]]:
        """Reads (record, offset) pairs; returns the deltas to publish with the image each one makes."""
        out: list[tuple[MetadataDelta, MetadataImage]] = []
        for rec, offset in records:
            kind = type(rec)
            if kind is BeginTransactionRecord:
                if self.in_transaction:
                    self.faults.append(f"BeginTransactionRecord at offset {offset} inside the transaction begun "
                                       f"at {self.transaction_start}: ignored")
                else:
                    self._flush(out)
                    self.transaction_start = offset
                self._delta.offset = offset
            elif kind is EndTransactionRecord:
                if not self.in_transaction:
                    self.faults.append(f"EndTransactionRecord at offset {offset} without a transaction: ignored")
                self.transaction_start = NO_TRANSACTION
                self._delta.offset = offset
                self._pending = True
            elif kind is AbortTransactionRecord:
                if not self.in_transaction:
                    self.faults.append(f"AbortTransactionRecord at offset {offset} without a transaction: ignored")
                    self._delta.offset = offset
                else:
                    self._delta = MetadataDelta(self.image)
                    self._delta.offset = offset
                self.transaction_start = NO_TRANSACTION
                self._pending = True
            else:
                self._delta.replay(rec, offset)
                self._pending = True
        if not self.in_transaction:
            self._flush(out)
        return out

    def _flush(self, out: list[tuple[MetadataDelta, MetadataImage]]) -> None:
        if not self._pending:
            return
        delta = self._delta
        image = delta.apply()
        out.append((delta, image))
        self.image = image
        self._delta = MetadataDelta(image)
        self._pending = False
