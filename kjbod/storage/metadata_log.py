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
import struct
import time
from collections.abc import Iterable

import crc32c
import structlog

from kjbod.protocol.generated.registry import METADATA_RECORDS
from kjbod.protocol.runtime import (
    DecodeError,
    read_uvarint,
    read_varint,
    read_varlong,
    write_uvarint,
    write_varint,
    write_varlong,
)

log = structlog.get_logger("kjbod.metadata_log")

TOPIC_DIR = "__cluster_metadata-0"
FRAME_VERSION = 1

# Record batch v2 header (protocol-encoding-notes §6): base offset, length, leader epoch, magic, crc, then the
# CRC-covered part: attributes, last offset delta, base/max timestamp, producer id/epoch, base sequence, count.
_BATCH_HEAD = struct.Struct(">qiib")
_BATCH_CRC = struct.Struct(">I")
_BATCH_REST = struct.Struct(">hiqqqhii")
HEADER_SIZE = 61


def _encode_record(offset_delta: int, ts_delta: int, value: bytes) -> bytes:
    body = b"".join([
        b"\x00",  # attributes
        write_varlong(ts_delta),
        write_varint(offset_delta),
        write_varint(-1),  # null key
        write_varint(len(value)), value,
        write_varint(0),  # no headers
    ])
    return write_varint(len(body)) + body


def build_batch(base_offset: int, values: list[bytes], timestamp_ms: int) -> bytes:
    records = b"".join(_encode_record(i, 0, v) for i, v in enumerate(values))
    rest = _BATCH_REST.pack(0, len(values) - 1, timestamp_ms, timestamp_ms, -1, -1, -1, len(values)) + records
    crc = crc32c.crc32c(rest)
    length = 4 + 1 + 4 + len(rest)  # leader epoch + magic + crc + rest
    return _BATCH_HEAD.pack(base_offset, length, 0, 2) + _BATCH_CRC.pack(crc) + rest


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
    cls = METADATA_RECORDS.get(key)
    if cls is None:
        raise DecodeError(f"unknown metadata record type {key}")
    return cls.decode(value[pos:], version)


def parse_batches(data: bytes) -> tuple[list[tuple[int, list[bytes]]], int]:
    """Valid batches from the start of `data` as (base offset, record values); also the valid byte length."""
    pos = 0
    out = []
    while pos + HEADER_SIZE <= len(data):
        base, length, _epoch, magic = _BATCH_HEAD.unpack_from(data, pos)
        end = pos + 12 + length
        if magic != 2 or length < HEADER_SIZE - 12 or end > len(data):
            break
        (crc,) = _BATCH_CRC.unpack_from(data, pos + 17)
        if crc32c.crc32c(data[pos + 21:end]) != crc:
            break
        _attrs, _lod, _bt, _mt, _pid, _pe, _bs, count = _BATCH_REST.unpack_from(data, pos + 21)
        rpos = pos + HEADER_SIZE
        values = []
        try:
            for _ in range(count):
                _rlen, rpos = read_varint(data, rpos)
                rpos += 1  # attributes
                _tsd, rpos = read_varlong(data, rpos)
                _od, rpos = read_varint(data, rpos)
                klen, rpos = read_varint(data, rpos)
                rpos += max(klen, 0)
                vlen, rpos = read_varint(data, rpos)
                values.append(bytes(data[rpos:rpos + vlen]))
                rpos += vlen
                hcount, rpos = read_varint(data, rpos)
                if hcount:
                    raise DecodeError("metadata records carry no headers")
        except DecodeError:
            break
        out.append((base, values))
        pos = end
    return out, pos


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
        batch = build_batch(self.next_offset, values, int(time.time() * 1000))
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
