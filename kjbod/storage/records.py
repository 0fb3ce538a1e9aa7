"""Record batches (magic 2): the header layout, validation on append, a small builder and readers.

Strategy: the log stores batches exactly as producers send them; only the two header fields the CRC does not
cover are rewritten (``BaseOffset`` and ``PartitionLeaderEpoch``). So appending needs the 61-byte header of each
batch and one CRC-32C pass, never the records themselves. The header, big-endian, as pinned by :data:`HEADER`::

    offset  size  field
         0     8  BaseOffset             assigned by the leader (producers send 0)
         8     4  Length                 bytes after this field (batch size - 12)
        12     4  PartitionLeaderEpoch   stamped by the leader; not covered by the CRC
        16     1  Magic                  2
        17     4  CRC                    CRC-32C of bytes 21..end (Attributes to the last record)
        21     2  Attributes             bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
        23     4  LastOffsetDelta
        27     8  BaseTimestamp
        35     8  MaxTimestamp
        43     8  ProducerId
        51     2  ProducerEpoch
        53     4  BaseSequence
        57     4  RecordsCount
        61        Records (one compressed blob when the codec is not 0)

Validation follows Kafka's ``LogValidator`` for batches (size, magic, CRC, offset range against the count,
base offset 0 from clients, no control batches from clients) but does not parse the records inside: the CRC
guards their bytes and compressed batches are kept as received. :func:`iter_records` decodes records for the
few places that need them (timestamp lookups, tests).
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import crc32c

from kjbod.storage.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
)

HEADER = struct.Struct(">qiibIhiqqqhii")
LOG_OVERHEAD = 12  # BaseOffset + Length
RECORD_BATCH_OVERHEAD = HEADER.size  # 61
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # smallest legal Length field
CRC_START = 21  # first byte covered by the CRC (Attributes)
MAGIC_OFFSET = 16
PREFIX = struct.Struct(">qii")  # BaseOffset, Length, PartitionLeaderEpoch: the 16 bytes rewritten on append
OFFSET_LENGTH = struct.Struct(">qi")

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4


class BatchHeader(NamedTuple):
    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at int32 max, like Kafka's DefaultRecordBatch.incrementSequence.
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def crc_matches(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    view = memoryview(buf)[pos + CRC_START : pos + header.size]
    return crc32c.crc32c(view) == header.crc


def validate_batches(
    buf: bytes | bytearray | memoryview, *, max_message_bytes: int, from_client: bool = True
) -> list[tuple[int, BatchHeader]]:
    """Check every batch of a produce's records and return (position, header) for each.

    Raises CorruptMessageError (truncated, bad length, bad CRC), InvalidRecordError (not magic 2, empty,
    inconsistent offsets/count, control batch or non-zero base offset from a client) or MessageTooLargeError.
    """
    view = memoryview(buf)
    n = len(view)
    if n == 0:
        raise InvalidRecordError("no record batches in the append")
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < n:
        if n - pos < LOG_OVERHEAD:
            raise CorruptMessageError(f"{n - pos} trailing bytes after the last record batch")
        length = struct.unpack_from(">i", view, pos + 8)[0]
        if length < MIN_BATCH_LENGTH:
            raise CorruptMessageError(f"record batch at byte {pos} has length {length} < {MIN_BATCH_LENGTH}")
        size = length + LOG_OVERHEAD
        if pos + size > n:
            raise CorruptMessageError(f"record batch at byte {pos} is truncated ({n - pos} of {size} bytes)")
        magic = view[pos + MAGIC_OFFSET]
        if magic != 2:
            if magic in (0, 1):
                raise InvalidRecordError(f"record batch with magic {magic}: only magic 2 is accepted")
            raise CorruptMessageError(f"invalid magic {magic} in record batch at byte {pos}")
        header = parse_header(view, pos)
        if size > max_message_bytes:
            raise MessageTooLargeError(
                f"record batch of {size} bytes is larger than max.message.bytes {max_message_bytes}"
            )
        if not crc_matches(view, pos, header):
            raise CorruptMessageError(
                f"record batch at byte {pos} fails its CRC (stored {header.crc:#010x})"
            )
        if header.last_offset_delta < 0:
            raise InvalidRecordError(f"record batch has an invalid offset range (last delta {header.last_offset_delta})")
        if header.records_count <= 0:
            raise InvalidRecordError(f"record batch has an invalid record count {header.records_count}")
        if header.records_count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"record batch has {header.records_count} records but an offset range of "
                f"{header.last_offset_delta + 1}"
            )
        if from_client:
            if header.base_offset != 0:
                raise InvalidRecordError(f"record batch base offset should be 0, but it is {header.base_offset}")
            if header.is_control:
                raise InvalidRecordError("clients are not allowed to write control batches")
        out.append((pos, header))
        pos += size
    return out


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each complete batch in ``buf``; an incomplete trailing batch is ignored (as a
    consumer ignores the partial batch a Fetch may end with)."""
    view = memoryview(buf)
    n = len(view)
    pos = 0
    while n - pos >= RECORD_BATCH_OVERHEAD:
        header = parse_header(view, pos)
        if header.length < MIN_BATCH_LENGTH or pos + header.size > n:
            return
        yield pos, header
        pos += header.size


def split_batches(buf: bytes | bytearray | memoryview) -> list[bytes]:
    view = memoryview(buf)
    return [bytes(view[pos : pos + h.size]) for pos, h in iter_batches(view)]


# --------------------------------------------------------------------------------------------- varints


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def write_varint(out: bytearray, n: int) -> None:
    z = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    z = 0
    while True:
        if pos >= len(buf):
            raise CorruptMessageError("truncated varint in record")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptMessageError("varint too long in record")
    return (z >> 1) ^ -(z & 1), pos


# --------------------------------------------------------------------------------------------- builder

Header = tuple[str, bytes | None]
RecordSpec = tuple[bytes | None, bytes | None, Sequence[Header], int]


def build_batch(
    records: Iterable[RecordSpec],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """An uncompressed magic-2 batch from (key, value, headers, timestamp) tuples, as a producer builds it."""
    specs = list(records)
    if not specs:
        raise ValueError("a record batch needs at least one record")
    base_ts = specs[0][3]
    max_ts = max(s[3] for s in specs)
    body = bytearray()
    for delta, (key, value, headers, ts) in enumerate(specs):
        rec = bytearray(b"\x00")  # attributes
        write_varint(rec, ts - base_ts)
        write_varint(rec, delta)
        for blob in (key, value):
            if blob is None:
                write_varint(rec, -1)
            else:
                write_varint(rec, len(blob))
                rec += blob
        write_varint(rec, len(headers))
        for hkey, hval in headers:
            raw = hkey.encode("utf-8")
            write_varint(rec, len(raw))
            rec += raw
            if hval is None:
                write_varint(rec, -1)
            else:
                write_varint(rec, len(hval))
                rec += hval
        write_varint(body, len(rec))
        body += rec
    attributes = (
        (TIMESTAMP_TYPE_MASK if log_append_time else 0)
        | (TRANSACTIONAL_MASK if is_transactional else 0)
        | (CONTROL_MASK if is_control else 0)
    )
    after_crc = struct.pack(
        ">hiqqqhii", attributes, len(specs) - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
        len(specs),
    ) + bytes(body)
    length = 4 + 1 + 4 + len(after_crc)  # PartitionLeaderEpoch + Magic + CRC + rest
    return (
        struct.pack(">qiibI", base_offset, length, partition_leader_epoch, 2, crc32c.crc32c(after_crc))
        + after_crc
    )


# --------------------------------------------------------------------------------------------- reading records


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


class UnsupportedCompressionError(Exception):
    """The codec's library is not installed (snappy has no pure-Python fallback here)."""


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_GZIP:
        return gzip.decompress(data)
    if codec == CODEC_LZ4:
        try:
            import lz4.frame
        except ImportError as e:
            raise UnsupportedCompressionError("lz4 is not installed") from e
        return lz4.frame.decompress(data)
    if codec == CODEC_ZSTD:
        try:
            import zstandard
        except ImportError as e:
            raise UnsupportedCompressionError("zstandard is not installed") from e
        return zstandard.ZstdDecompressor().stream_reader(data).read()
    if codec == CODEC_SNAPPY:
        try:
            import snappy  # type: ignore[import-not-found]
        except ImportError as e:
            raise UnsupportedCompressionError("python-snappy is not installed") from e
        # Kafka frames snappy with snappy-java's xerial stream: 16-byte header, then [int32 length][block]...
        if data[:8] == b"\x82SNAPPY\x00":
            out = bytearray()
            pos = 16
            while pos < len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                out += snappy.uncompress(data[pos + 4 : pos + 4 + n])
                pos += 4 + n
            return bytes(out)
        return snappy.uncompress(data)
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def iter_records(batch: bytes | memoryview) -> Iterator[Record]:
    """Decode the records of one complete batch (decompressing if needed)."""
    view = memoryview(batch)
    header = parse_header(view)
    payload: bytes | memoryview = view[RECORD_BATCH_OVERHEAD : header.size]
    if header.compression != CODEC_NONE:
        payload = _decompress(header.compression, bytes(payload))
    pos = 0
    for _ in range(header.records_count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        if end > len(payload):
            raise CorruptMessageError("record extends past its batch")
        pos += 1  # attributes
        ts_delta, pos = read_varint(payload, pos)
        off_delta, pos = read_varint(payload, pos)
        blobs: list[bytes | None] = []
        for _blob in range(2):
            n, pos = read_varint(payload, pos)
            if n < 0:
                blobs.append(None)
            else:
                blobs.append(bytes(payload[pos : pos + n]))
                pos += n
        count, pos = read_varint(payload, pos)
        headers: list[Header] = []
        for _h in range(count):
            n, pos = read_varint(payload, pos)
            hkey = bytes(payload[pos : pos + n]).decode("utf-8")
            pos += n
            n, pos = read_varint(payload, pos)
            hval = None if n < 0 else bytes(payload[pos : pos + n])
            pos += max(n, 0)
            headers.append((hkey, hval))
        if pos != end:
            raise CorruptMessageError("record length does not match its fields")
        ts = header.max_timestamp if header.is_log_append_time else header.base_timestamp + ts_delta
        yield Record(header.base_offset + off_delta, ts, blobs[0], blobs[1], headers)


def iter_all_records(buf: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Records of every complete batch in ``buf`` (e.g. the bytes of a read)."""
    view = memoryview(buf)
    for pos, header in iter_batches(view):
        yield from iter_records(view[pos : pos + header.size])
