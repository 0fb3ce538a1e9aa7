"""The node's metadata log: KRaft metadata records in Kafka's `__cluster_metadata` layout.

Layout: `<metadata.log.dir>/__cluster_metadata-0/00000000000000000000.log`, a sequence of record batches
(magic 2, CRC32C, exactly as in a partition log).  Each batch holds the records of one change (a topic with its
partitions and configs, a removal) so that a change is applied entirely or not at all: a torn batch fails its
CRC and is dropped at load.  Each record's value is Kafka's metadata frame: unsigned varint frame version (1),
unsigned varint api key, unsigned varint record version, then the record body; its key is null.

Every append is fsynced before it returns: a topic exists for clients only once it survives a crash.  A damaged
tail found at load is copied to `<segment>.damaged-<unix ms>` next to the segment, logged, and truncated.

The combined node replays this log into its metadata image at startup; the controller role of a later release
serves the same records to brokers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import structlog

from kjbod.protocol.generated.registry import METADATA_RECORDS
from kjbod.protocol.runtime import DecodeError, read_uvarint, write_uvarint
from kjbod.storage.errors import StorageError
from kjbod.storage.records import build_batch, crc_matches, iter_batches, iter_records

log = structlog.get_logger("kjbod.metadata_log")

TOPIC_DIR = "__cluster_metadata-0"
FRAME_VERSION = 1


def frame_record(record) -> bytes:
    version = record.MAX_VERSION
    return b"".join([write_uvarint(FRAME_VERSION), write_uvarint(record.API_KEY), write_uvarint(version),
                     record.encode(version)])


def unframe_record(value: bytes):
    frame, pos = read_uvarint(value, 0)
    if frame != FRAME_VERSION:
        raise DecodeError(f"unsupported metadata frame version {frame}")
    key, pos = read_uvarint(value, pos)
    version, pos = read_uvarint(value, pos)
    cls: Any = METADATA_RECORDS.get(key)
    if cls is None:
        raise DecodeError(f"unknown metadata record type {key}")
    return cls.decode(value[pos:], version)


def parse_batches(data: bytes) -> tuple[list[tuple[int, list[bytes]]], int]:
    """Valid batches from the start of `data` as (base offset, record values); also the valid byte length.

    Parsing stops at the first batch that is incomplete, not magic 2, fails its CRC, or holds malformed
    records: everything from there on is the damaged tail."""
    view = memoryview(data)
    out = []
    valid = 0
    for pos, header in iter_batches(view):
        if pos != valid or header.magic != 2 or not crc_matches(view, pos, header):
            break
        try:
            records = [r.value for r in iter_records(view[pos:pos + header.size])]
        except (StorageError, ValueError):
            break
        values = [v for v in records if v is not None]
        if len(values) != header.records_count or len(values) != len(records):
            break
        out.append((header.base_offset, values))
        valid = pos + header.size
    return out, valid


class MetadataLog:
    """Append-only, fsynced log of metadata records in `<metadata_dir>/__cluster_metadata-0`."""

    def __init__(self, metadata_dir: str):
        self.dir = os.path.join(metadata_dir, TOPIC_DIR)
        self.path = os.path.join(self.dir, f"{0:020d}.log")
        self.next_offset = 0
        self._fd: int | None = None

    def load(self) -> list:
        """Opens the log and returns every record in order, dropping (and keeping aside) a damaged tail."""
        os.makedirs(self.dir, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            data = _read_all(fd)
            batches, valid = parse_batches(data)
            records = []
            for base, values in batches:
                for value in values:
                    records.append(unframe_record(value))
                self.next_offset = base + len(values)
            if valid < len(data):
                aside = f"{self.path}.damaged-{int(time.time() * 1000)}"
                with open(aside, "wb") as f:
                    f.write(data[valid:])
                    f.flush()
                    os.fsync(f.fileno())
                os.ftruncate(fd, valid)
                os.fsync(fd)
                log.warning("metadata_log_tail_truncated", path=self.path, valid_bytes=valid,
                            dropped_bytes=len(data) - valid, kept_at=aside)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return records

    def append(self, records: Iterable) -> None:
        """Writes one batch holding `records` and fsyncs it: applied as a unit after a crash."""
        if self._fd is None:
            raise RuntimeError("metadata log is not open")
        values = [frame_record(r) for r in records]
        if not values:
            return
        now_ms = int(time.time() * 1000)
        batch = build_batch([(None, v, (), now_ms) for v in values], base_offset=self.next_offset,
                            partition_leader_epoch=0)
        view = memoryview(batch)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)
        self.next_offset += len(values)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    pos = 0
    while pos < size:
        chunk = os.pread(fd, min(size - pos, 1 << 24), pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)
