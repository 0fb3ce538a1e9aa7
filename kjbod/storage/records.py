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

Validation follows Kafka's ``LogValidator`` in two steps. :func:`validate_batches` checks each batch as a
whole (size, magic, CRC, offset range against the count, base offset 0 from clients, no control batches from
clients). :func:`validate_records` then walks the records of each batch a client sent (decompressing compressed
ones): every record's framing, its offset delta (consecutive from 0), its key, value and headers, the payload
ending with the last record, and each timestamp against the topic's ``message.timestamp.*`` settings; it also
computes the batch's max timestamp and, when the header says otherwise (``-1``, a wrong value, or the topic
uses LogAppendTime), gives a rewritten header with a fresh CRC for the append to write instead.

The record walk is the Produce hot path, so it has two implementations with the same verdicts: a small C
extension (``_recordscan``, built by ``make install``) that only says valid or not, and the pure-Python
:func:`scan_records_python` used when the extension is absent and, on any refusal, to say which record is wrong
and why. Snappy is read the same way (C block reader, Python fallback and explanation: a refusal says why);
gzip, lz4 and zstd use their libraries, and :func:`compress` writes every codec (snappy's blocks with cramjam)
framed as Kafka's producers frame it. :func:`iter_records` decodes records for the few places that need them (timestamp lookups, tests).
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import crc32c

from kjbod.storage.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
)

try:
    from kjbod.storage import _recordscan  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install): the pure-Python scanner gives the same answers
    _recordscan = None

HEADER = struct.Struct(">qiibIhiqqqhii")
LOG_OVERHEAD = 12  # BaseOffset + Length
RECORD_BATCH_OVERHEAD = HEADER.size  # 61
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # smallest legal Length field
CRC_START = 21  # first byte covered by the CRC (Attributes)
MAGIC_OFFSET = 16
CRC_OFFSET = 17
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
    buf: bytes | bytearray | memoryview, *, max_message_bytes: int, from_client: bool = True,
    from_coordinator: bool = False,
) -> list[tuple[int, BatchHeader]]:
    """Check every batch of a produce's records and return (position, header) for each.

    Raises CorruptMessageError (truncated, bad length, bad CRC), InvalidRecordError (not magic 2, empty, an
    offset range below 0 or smaller than the count; from a client: a count other than the offset range (a
    compacted log's batches, appended by followers, have holes), a control batch, a non-zero base offset, or a
    producer id without a sequence) or MessageTooLargeError.  A coordinator's own appends (`from_coordinator`:
    transaction markers, transactional offset commits) may be control batches and carry a producer id without
    a sequence, as Kafka allows appends of the coordinator origin.
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
        if from_client:
            if header.records_count <= 0:
                raise InvalidRecordError(f"record batch has an invalid record count {header.records_count}")
            if header.records_count != header.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"record batch has {header.records_count} records but an offset range of "
                    f"{header.last_offset_delta + 1}"
                )
        elif not 0 <= header.records_count <= header.last_offset_delta + 1:
            # A compacted log's batches (a follower's or a moved copy's) may have fewer records than their offset
            # range, or none: the cleaner keeps a producer's last batch empty (Kafka checks the count on a
            # client's batches only).
            raise InvalidRecordError(
                f"record batch has {header.records_count} records in an offset range of "
                f"{header.last_offset_delta + 1}"
            )
        if from_client:
            if header.base_offset != 0:
                raise InvalidRecordError(f"record batch base offset should be 0, but it is {header.base_offset}")
            if header.is_control and not from_coordinator:
                raise InvalidRecordError("clients are not allowed to write control batches")
            if header.is_transactional and header.producer_id < 0:
                raise InvalidRecordError("a transactional record batch must carry a producer id")
            if header.producer_id >= 0 and header.base_sequence < 0 and not from_coordinator:  # Kafka's LogValidator: an idempotent batch
                raise InvalidRecordError(f"invalid sequence number {header.base_sequence} in record batch with "
                                         f"producer id {header.producer_id}")
        out.append((pos, header))
        pos += size
    return out


def _first_record_key(view: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(key length, where the key starts) of the first record of the uncompressed batch at ``pos``."""
    at = pos + RECORD_BATCH_OVERHEAD
    _length, at = read_varint(view, at)
    at += 1  # attributes
    _ts, at = read_varint(view, at)
    _delta, at = read_varint(view, at)
    return read_varint(view, at)


def control_marker_type(view: bytes | memoryview, pos: int, header: BatchHeader) -> int:
    """The type of the control record a control batch at ``pos`` opens with (Kafka's ControlRecordType: 0 abort,
    1 commit; a transaction marker), or -1 when it is not readable as one.  Control batches are never
    compressed, so the first record starts right after the batch header."""
    try:
        key_length, at = _first_record_key(view, pos)
        if key_length < 4 or at + 4 > pos + header.size:
            return -1
        version = int.from_bytes(view[at:at + 2], "big", signed=True)
        kind = int.from_bytes(view[at + 2:at + 4], "big", signed=True)
    except CorruptMessageError:
        return -1
    return kind if version == 0 and kind in (0, 1) else -1


def marker_coordinator_epoch(view: bytes | memoryview, pos: int, header: BatchHeader) -> int:
    """The coordinator epoch a transaction marker at ``pos`` carries in its value (int16 version, int32 epoch),
    or -1 when the batch's first record is not readable as a marker."""
    try:
        key_length, at = _first_record_key(view, pos)
        at += max(key_length, 0)
        value_length, at = read_varint(view, at)
        if value_length < 6 or at + 6 > pos + header.size:
            return -1
        return int.from_bytes(view[at + 2:at + 6], "big", signed=True)
    except CorruptMessageError:
        return -1


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
    write_uvarint(out, _zigzag(n) & 0xFFFFFFFFFFFFFFFF)


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
    compression: int = CODEC_NONE,
) -> bytes:
    """A magic-2 batch from (key, value, headers, timestamp) tuples, as a producer builds it (the records
    compressed with ``compression`` by :func:`compress`)."""
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
    if compression != CODEC_NONE:
        body = bytearray(compress(compression, bytes(body)))
    attributes = (
        compression
        | (TIMESTAMP_TYPE_MASK if log_append_time else 0)
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


# Kafka's default compression levels (KIP-390; kjbod.storage.config checks the levels a config may set).
GZIP_DEFAULT_LEVEL, LZ4_DEFAULT_LEVEL, ZSTD_DEFAULT_LEVEL = -1, 9, 3
_XERIAL_BLOCK = 32 << 10  # input bytes per block of the snappy stream, as snappy-java writes it


def compress(codec: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """The records section of a batch compressed so that every Kafka reader takes it: what the broker writes
    when a topic's compression.type recompresses a batch, what the cleaner writes for a compacted batch, and
    what the builder gives tests. ``level``: Kafka's level for the codec (None: Kafka's default).

    The framing is the one Kafka's own producers write, not each library's default: lz4 as a frame of
    independent 64 KiB blocks with no content size (Kafka's reader refuses a frame whose blocks depend on each
    other, which is the lz4 library's default), snappy as snappy-java's stream (a header, then blocks of 32 KiB
    of input each)."""
    if codec == CODEC_GZIP:
        return gzip.compress(data, 6 if level is None or level == GZIP_DEFAULT_LEVEL else level, mtime=0)
    if codec == CODEC_LZ4:
        import lz4.frame

        # Kafka compresses with lz4's fast compressor at its default level and with the high-compression one
        # at any other; the library's level 0 is the fast one, 3 and up the high-compression one.
        hc = 0 if level is None or level == LZ4_DEFAULT_LEVEL else max(3, level)
        return lz4.frame.compress(data, compression_level=hc, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                  block_linked=False, content_checksum=False, block_checksum=False,
                                  store_size=False)
    if codec == CODEC_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor(level=ZSTD_DEFAULT_LEVEL if level is None else level).compress(data)
    if codec == CODEC_SNAPPY:
        out = bytearray(_XERIAL_MAGIC)
        out += struct.pack(">ii", 1, 1)  # stream version, oldest compatible version
        view = memoryview(data)
        for start in range(0, len(view), _XERIAL_BLOCK):
            block = _snappy_compress_block(view[start : start + _XERIAL_BLOCK])
            out += _INT32.pack(len(block))
            out += block
        return bytes(out)
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def _snappy_compress_block(chunk: memoryview) -> bytes:
    """One raw snappy block (cramjam's compressor)."""
    import cramjam

    return bytes(cramjam.snappy.compress_raw(bytes(chunk)))


def write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


# --------------------------------------------------------------------------------------------- reading records


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


class UnsupportedCompressionError(Exception):
    """The codec's library is not installed (snappy has no pure-Python fallback here)."""


# The most a batch's records may take once decompressed. Kafka streams records out of a compressed batch; kjbod
# decompresses the whole payload to validate it, so a payload that claims more (a "zip bomb") is refused
# before it is allocated. No producer builds batches anywhere near this.
MAX_DECOMPRESSED_BYTES = 256 << 20
_ZSTD_SLICE = 4 << 10  # zstd input fed at a time: one slice cannot yield more than 128 MiB
_LZ4_CHUNK = 4 << 20


def _too_big(codec: str) -> CorruptMessageError:
    return CorruptMessageError(f"the {codec} payload decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes")


def _decompress(codec: int, data: bytes | memoryview) -> bytes:
    """The records section of a compressed batch; CorruptMessageError (or the codec library's own error) when
    it is not a complete stream of the codec, or decompresses to more than MAX_DECOMPRESSED_BYTES."""
    limit = MAX_DECOMPRESSED_BYTES
    if codec == CODEC_GZIP:
        parts: list[bytes] = []
        rest: bytes | memoryview = data
        total = 0
        while rest:  # gzip members one after the other, as Java's GZIPInputStream reads them
            member = zlib.decompressobj(16 + zlib.MAX_WBITS)
            parts.append(member.decompress(rest, limit + 1 - total))
            total += len(parts[-1])
            if total > limit:
                raise _too_big("gzip")
            if not member.eof:
                raise CorruptMessageError("the gzip payload ends inside a member")
            rest = member.unused_data
        return b"".join(parts)
    if codec == CODEC_LZ4:
        try:
            import lz4.frame
        except ImportError as e:
            raise UnsupportedCompressionError("lz4 is not installed") from e
        # 4 MiB of output at a time: asking for the limit at once would allocate the limit.
        frame = lz4.frame.LZ4FrameDecompressor()
        parts = [frame.decompress(data, max_length=_LZ4_CHUNK)]
        total = len(parts[0])
        while True:
            if total > limit:
                raise _too_big("lz4")
            if frame.eof or frame.needs_input:
                break
            parts.append(frame.decompress(b"", max_length=_LZ4_CHUNK))
            total += len(parts[-1])
        if not frame.eof:
            raise CorruptMessageError("the lz4 payload ends inside its frame")
        return parts[0] if len(parts) == 1 else b"".join(parts)
    if codec == CODEC_ZSTD:
        try:
            import zstandard
        except ImportError as e:
            raise UnsupportedCompressionError("zstandard is not installed") from e
        # Frame by frame, so a truncated frame is an error rather than a short read; a frame that declares its
        # size is judged by it, one that does not is fed a slice at a time.
        parts = []
        view = memoryview(data)
        total = 0
        while view:
            if zstandard.frame_content_size(view) > limit:
                raise _too_big("zstd")
            frame = zstandard.ZstdDecompressor().decompressobj()
            pos = 0
            while not frame.eof and pos < len(view):
                parts.append(frame.decompress(view[pos : pos + _ZSTD_SLICE]))
                pos += _ZSTD_SLICE
                total += len(parts[-1])
                if total > limit:
                    raise _too_big("zstd")
            if not frame.eof:
                raise CorruptMessageError("the zstd payload ends inside a frame")
            # What follows the frame: the unread part of the last slice, then the slices not fed yet.
            view = memoryview(frame.unused_data + bytes(view[pos:])) if frame.unused_data or pos < len(view) \
                else view[len(view):]
        return b"".join(parts)
    if codec == CODEC_SNAPPY:
        return snappy_decompress(data)
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


# --------------------------------------------------------------------------------------------- snappy

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, version, compatible version
_INT32 = struct.Struct(">i")
_LE16 = struct.Struct("<H")
_LE32 = struct.Struct("<I")


def snappy_decompress(data: bytes | memoryview) -> bytes:
    """Kafka's snappy payload: snappy-java's xerial stream (a 16-byte header, then [int32 length][block]...) or
    one raw block, as snappy-java reads both. Raises CorruptMessageError on anything else."""
    if bytes(data[:8]) != _XERIAL_MAGIC:
        block = _snappy_block(data)  # at most 32 times the payload (see snappy_block_python)
        if len(block) > MAX_DECOMPRESSED_BYTES:
            raise _too_big("snappy")
        return block
    out = bytearray()
    pos = _XERIAL_HEADER
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptMessageError("snappy stream ends inside a block length")
        (n,) = _INT32.unpack_from(data, pos)
        if n < 0 or pos + 4 + n > len(data):
            raise CorruptMessageError(f"snappy block of {n} bytes overruns the payload")
        out += _snappy_block(data[pos + 4 : pos + 4 + n])
        if len(out) > MAX_DECOMPRESSED_BYTES:
            raise _too_big("snappy")
        pos += 4 + n
    return bytes(out)


def _snappy_block(data: bytes | memoryview) -> bytes:
    """One raw snappy block: the C reader when built, else (and to say why a block is refused) the Python one."""
    if _recordscan is not None:
        found = _recordscan.snappy_block(data)
        if found is not None:
            return found
    return snappy_block_python(data)


def snappy_block_python(data: bytes | memoryview) -> bytes:
    """One raw snappy block: a varint of the uncompressed length, then literals and back-references (the rules
    of kjbod/storage/_recordscan.c's snappy_block, which gives the same verdicts)."""
    n = len(data)
    expected = shift = pos = 0
    while True:
        if pos >= n or shift > 28:
            raise CorruptMessageError("snappy block has no valid length preamble")
        b = data[pos]
        pos += 1
        expected |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    if expected > 32 * n:  # no element yields more than 32 times its size: a larger claim is a lie
        raise CorruptMessageError(f"snappy block of {n} bytes claims {expected} bytes uncompressed")
    out = bytearray()
    while pos < n:
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal
            length = (tag >> 2) + 1
            if length > 60:
                extra = length - 60
                if pos + extra > n:
                    raise CorruptMessageError("snappy literal length is cut off")
                length = int.from_bytes(data[pos : pos + extra], "little") + 1
                pos += extra
            if pos + length > n:
                raise CorruptMessageError("snappy literal overruns the block")
            out += data[pos : pos + length]
            pos += length
            continue
        if kind == 1:
            if pos + 1 > n:
                raise CorruptMessageError("snappy copy is cut off")
            length = 4 + ((tag >> 2) & 7)
            offset = ((tag >> 5) << 8) | data[pos]
            pos += 1
        elif kind == 2:
            if pos + 2 > n:
                raise CorruptMessageError("snappy copy is cut off")
            length = (tag >> 2) + 1
            (offset,) = _LE16.unpack_from(data, pos)
            pos += 2
        else:
            if pos + 4 > n:
                raise CorruptMessageError("snappy copy is cut off")
            length = (tag >> 2) + 1
            (offset,) = _LE32.unpack_from(data, pos)
            pos += 4
        if offset == 0 or offset > len(out):
            raise CorruptMessageError(f"snappy copy refers {offset} bytes back, before the start of the data")
        start = len(out) - offset
        if offset >= length:
            out += out[start : start + length]
        else:  # overlapping: the copied bytes repeat
            chunk = out[start:]
            out += (chunk * (length // offset + 1))[:length]
        if len(out) > expected:
            raise CorruptMessageError("snappy block decompresses to more than its preamble says")
    if len(out) != expected:
        raise CorruptMessageError(f"snappy block decompresses to {len(out)} bytes, its preamble says {expected}")
    return bytes(out)


# --------------------------------------------------------------------------------------------- record validation

LONG_MAX = (1 << 63) - 1
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}

# Set only by the Produce benchmark (tools/bench), to measure what record validation costs: 1 skips it.
SKIP_RECORD_VALIDATION = os.environ.get("KJBOD_BENCH_SKIP_RECORD_VALIDATION") == "1"


class RecordProblem(Exception):
    """A malformed record: its index in the batch and what is wrong with it."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"record {index}: {reason}")
        self.index = index
        self.reason = reason


def _varint(buf: bytes | memoryview, pos: int, end: int, max_bytes: int, index: int, what: str) -> tuple[int, int]:
    """A zigzag varint of at most ``max_bytes`` bytes (5: int32, 10: int64) ending before ``end``."""
    raw = shift = 0
    bits = 32 if max_bytes == 5 else 64
    for i in range(max_bytes):
        if pos >= end:
            raise RecordProblem(index, f"the {what} varint runs past the end of the record")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            if raw >> bits:
                raise RecordProblem(index, f"the {what} varint does not fit {bits} bits")
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if i == max_bytes - 1:
            break
    raise RecordProblem(index, f"the {what} varint is longer than {max_bytes} bytes")


def scan_records_python(payload: bytes | memoryview, count: int) -> tuple[int, int]:
    """The records section of one batch (decompressed): (smallest, largest) timestamp delta, or RecordProblem.
    The rules are those of the C scanner (kjbod/storage/_recordscan.c), which documents them."""
    buf = payload
    end_all = len(buf)
    if count < 1:
        raise RecordProblem(0, f"the batch claims {count} records")
    pos = 0
    lo = hi = None
    for i in range(count):
        if pos >= end_all:
            raise RecordProblem(i, f"the batch claims {count} records but its payload ends after {i}")
        length, pos = _varint(buf, pos, end_all, 5, i, "length")
        if length < 0:
            raise RecordProblem(i, f"invalid negative record length {length}")
        end = pos + length
        if end > end_all:
            raise RecordProblem(i, f"record length {length} overruns the batch ({end_all - pos} bytes left)")
        if pos >= end:
            raise RecordProblem(i, "the record ends before its attributes")
        pos += 1  # attributes
        ts_delta, pos = _varint(buf, pos, end, 10, i, "timestamp delta")
        offset_delta, pos = _varint(buf, pos, end, 5, i, "offset delta")
        if offset_delta != i:
            raise RecordProblem(i, f"offset delta {offset_delta} where {i} was expected (deltas run 0, 1, 2, ...)")
        for what in ("key", "value"):
            n, pos = _varint(buf, pos, end, 5, i, f"{what} length")
            if n < -1:
                raise RecordProblem(i, f"invalid negative {what} size {n}")
            if n > end - pos:
                raise RecordProblem(i, f"{what} of {n} bytes overruns the record ({end - pos} bytes left)")
            pos += max(n, 0)
        headers, pos = _varint(buf, pos, end, 5, i, "header count")
        if headers < 0:
            raise RecordProblem(i, f"invalid negative header count {headers}")
        if headers > end - pos:
            raise RecordProblem(i, f"header count {headers} is larger than the rest of the record")
        for h in range(headers):
            n, pos = _varint(buf, pos, end, 5, i, "header key length")
            if n < 0:
                raise RecordProblem(i, f"invalid negative header key size {n}")
            if n > end - pos:
                raise RecordProblem(i, f"header {h} key of {n} bytes overruns the record")
            try:
                bytes(buf[pos : pos + n]).decode("utf-8")
            except UnicodeDecodeError:
                raise RecordProblem(i, f"header {h} key is not valid UTF-8") from None
            pos += n
            n, pos = _varint(buf, pos, end, 5, i, "header value length")
            if n < -1:
                raise RecordProblem(i, f"invalid negative header value size {n}")
            if n > end - pos:
                raise RecordProblem(i, f"header {h} value of {n} bytes overruns the record")
            pos += max(n, 0)
        if pos != end:
            raise RecordProblem(i, f"the record's fields end {end - pos} bytes before its length of {length} bytes")
        if lo is None or ts_delta < lo:
            lo = ts_delta
        if hi is None or ts_delta > hi:
            hi = ts_delta
    if pos != end_all:
        raise RecordProblem(count - 1, f"{end_all - pos} bytes follow the last of the batch's {count} records")
    assert lo is not None and hi is not None
    return lo, hi


def scan_records(payload: bytes | memoryview, count: int, *, native: bool = True) -> tuple[int, int]:
    """(smallest, largest) timestamp delta of a batch's records, or RecordProblem naming the first bad record.
    The C scanner when built (``native``), else, and to explain a refusal, the Python one."""
    if native and _recordscan is not None:
        found = _recordscan.scan(payload, count)
        if found is not None:
            return found
    return scan_records_python(payload, count)


class CheckedBatch(NamedTuple):
    """A batch that passed :func:`validate_records`: its header as it will be stored, and the 61 header bytes to
    write instead of the producer's when they changed (max timestamp, timestamp type; CRC recomputed). When the
    topic's compression.type rebuilt the batch in another codec, ``rebuilt`` is the whole new batch (its header
    is ``header``) and ``new_header`` is None."""

    pos: int
    header: BatchHeader
    new_header: bytes | None
    rebuilt: bytes | None = None


def validate_records(
    buf: bytes | bytearray | memoryview,
    batches: list[tuple[int, BatchHeader]],
    *,
    now_ms: int,
    log_append_time: bool = False,
    timestamp_before_max_ms: int = LONG_MAX,
    timestamp_after_max_ms: int = LONG_MAX,
    native: bool = True,
    compacted_partition: str | None = None,
    target_codec: int | None = None,
    target_level: int | None = None,
) -> list[CheckedBatch]:
    """Check the records of every batch (found by :func:`validate_batches`) as Kafka's LogValidator does for a
    client's append, and compute each batch's max timestamp.

    Raises CorruptMessageError (a compressed payload that does not decompress), InvalidRecordError (a malformed
    record) or InvalidTimestampError (a timestamp outside [now - before.max, now + after.max] for CreateTime, or
    a producer that set LogAppendTime itself); both of the latter carry ``record_errors``: (index of the record
    in the append, reason). ``log_append_time``: the topic's message.timestamp.type is LogAppendTime, so every
    batch gets ``now_ms`` as its max timestamp. ``compacted_partition``: the partition's name when its topic is
    compacted, where every record needs a key (InvalidRecordError listing the records without one, Kafka's rule).
    ``target_codec``: the codec the topic's compression.type asks for (None: ``producer``, keep the producer's);
    a batch in another codec is rebuilt in it at ``target_level`` (Kafka's LogValidator: same records, offset
    deltas and timestamps, producer id, epoch, sequence and transactional flag, the new codec's bits), except
    that an uncompressed control batch stays as it is, as in Kafka.
    """
    view = memoryview(buf)
    out: list[CheckedBatch] = []
    keyless: list[tuple[int, str]] = []
    first_index = 0  # index of the batch's first record among all records of the append
    for n, (pos, header) in enumerate(batches):
        payload: bytes | memoryview = view[pos + RECORD_BATCH_OVERHEAD : pos + header.size]
        codec = header.compression
        if codec != CODEC_NONE:
            payload = _decompress_checked(codec, payload, n)
        count = header.records_count
        try:
            lo, hi = scan_records(payload, count, native=native)
        except RecordProblem as e:
            index = first_index + e.index
            where = f"record {index}" if len(batches) == 1 else f"record {index} (batch {n}, record {e.index})"
            raise InvalidRecordError(f"{where} is malformed: {e.reason}",
                                     record_errors=[(index, e.reason)]) from None
        if compacted_partition is not None:
            keyless += [(first_index + i, "Compacted topic cannot accept message without key in topic partition "
                                          f"{compacted_partition}.") for i in _keyless(payload, count)]
        if header.is_log_append_time:
            # A record of a LogAppendTime batch reads as the batch's max timestamp (Kafka's DefaultRecordBatch).
            lo_ts = hi_ts = header.max_timestamp
        else:
            lo_ts, hi_ts = header.base_timestamp + lo, header.base_timestamp + hi
        low, high = now_ms - timestamp_before_max_ms, now_ms + timestamp_after_max_ms
        if header.is_log_append_time or (not log_append_time and (lo_ts < low or hi_ts > high)):
            _check_timestamps(payload, header, first_index, low, high, create_time=not log_append_time)
        max_ts = now_ms if log_append_time else hi_ts
        attributes = (header.attributes | TIMESTAMP_TYPE_MASK) if log_append_time else (
            header.attributes & ~TIMESTAMP_TYPE_MASK)
        if target_codec is not None and target_codec != codec and not (codec == CODEC_NONE and header.is_control):
            out.append(_rebuild(pos, header, payload, (attributes & ~CODEC_MASK) | target_codec, max_ts,
                                target_level))
        elif max_ts == header.max_timestamp and attributes == header.attributes:
            out.append(CheckedBatch(pos, header, None))
        else:
            out.append(_restamp(view, pos, header, attributes, max_ts))
        first_index += count
    if keyless:
        raise InvalidRecordError(
            f"{len(keyless)} record(s) rejected: {compacted_partition} is compacted and record(s) "
            f"{', '.join(str(i) for i, _ in keyless[:3])}{' ...' if len(keyless) > 3 else ''} have no key",
            record_errors=keyless)
    return out


def _keyless(payload: bytes | memoryview, count: int) -> list[int]:
    """Indexes of the records (already found well formed) whose key is null."""
    out = []
    pos = 0
    for i in range(count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        _, p = read_varint(payload, pos + 1)  # timestamp delta
        _, p = read_varint(payload, p)  # offset delta
        key_len, _ = read_varint(payload, p)
        if key_len < 0:
            out.append(i)
        pos = end
    return out


def _decompress_checked(codec: int, data: bytes | memoryview, batch: int) -> bytes:
    try:
        return _decompress(codec, data)
    except UnsupportedCompressionError as e:
        raise CorruptMessageError(f"record batch {batch} uses compression codec {codec}: {e}") from None
    except Exception as e:  # each codec library raises its own types for a corrupt stream
        reason = getattr(e, "message", None) or str(e) or type(e).__name__
        raise CorruptMessageError(
            f"record batch {batch}: the {CODEC_NAMES[codec]} payload does not decompress ({reason})"
        ) from None


def _check_timestamps(
    payload: bytes | memoryview, header: BatchHeader, first_index: int, low: int, high: int, *, create_time: bool
) -> None:
    """The slow path of a batch whose timestamps may be refused: Kafka's per-record rule (LogValidator.
    validateTimestamp: a CreateTime topic checks every timestamp but -1 against the window; otherwise a batch
    the producer marked LogAppendTime is refused), every error listed."""
    errors: list[tuple[int, str]] = []
    lat = header.is_log_append_time
    for i, ts in enumerate(_record_timestamps(payload, header)):
        if create_time and ts != NO_TIMESTAMP:
            if ts < low or ts > high:
                errors.append((first_index + i, f"timestamp {ts} of the record with offset delta {i} is out of "
                                                f"range: it should be within [{low}, {high}]"))
        elif lat:
            errors.append((first_index + i, "the producer set the timestamp type to LogAppendTime, which only "
                                            "the broker may do"))
    if errors:
        shown = "; ".join(f"record {i}: {why}" for i, why in errors[:3])
        raise InvalidTimestampError(f"{len(errors)} record(s) rejected for an invalid timestamp ({shown})",
                                    record_errors=errors)


def _record_timestamps(payload: bytes | memoryview, header: BatchHeader) -> Iterator[int]:
    """Each record's timestamp, from records already found well formed."""
    if header.is_log_append_time:
        yield from (header.max_timestamp for _ in range(header.records_count))
        return
    pos = 0
    end = len(payload)
    for i in range(header.records_count):
        length, pos = _varint(payload, pos, end, 5, i, "length")
        delta, _ = _varint(payload, pos + 1, end, 10, i, "timestamp delta")
        yield header.base_timestamp + delta
        pos += length


def _restamp(view: memoryview, pos: int, header: BatchHeader, attributes: int, max_ts: int) -> CheckedBatch:
    """The header with a new timestamp type and max timestamp, and its CRC recomputed (Kafka's
    DefaultRecordBatch.setMaxTimestamp)."""
    stamped = header._replace(attributes=attributes, max_timestamp=max_ts, crc=0)
    raw = bytearray(HEADER.pack(*stamped))
    crc = crc32c.crc32c(view[pos + RECORD_BATCH_OVERHEAD : pos + header.size], crc32c.crc32c(raw[CRC_START:]))
    struct.pack_into(">I", raw, CRC_OFFSET, crc)
    return CheckedBatch(pos, stamped._replace(crc=crc), bytes(raw))


def _rebuild(pos: int, header: BatchHeader, records: bytes | memoryview, attributes: int, max_ts: int,
             level: int | None) -> CheckedBatch:
    """The batch at ``pos`` in the codec of ``attributes``: its records (``records``, uncompressed, already
    checked) unchanged, compressed anew; the header's other fields kept, its length and CRC recomputed."""
    codec = attributes & CODEC_MASK
    body = compress(codec, records, level) if codec != CODEC_NONE else bytes(records)
    stamped = header._replace(length=MIN_BATCH_LENGTH + len(body), attributes=attributes, max_timestamp=max_ts,
                              crc=0)
    raw = bytearray(HEADER.pack(*stamped))
    raw += body
    crc = crc32c.crc32c(memoryview(raw)[CRC_START:])
    struct.pack_into(">I", raw, CRC_OFFSET, crc)
    return CheckedBatch(pos, stamped._replace(crc=crc), None, bytes(raw))


def stored_records_problem(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> str | None:
    """Why the records of the batch at ``pos`` are malformed, or None: recovery's check of batches it re-reads
    after a crash (the framing rules of :func:`validate_records`; timestamps are not judged again). A codec
    whose library is missing cannot be checked, and is not held against the data."""
    payload: bytes | memoryview = memoryview(buf)[pos + RECORD_BATCH_OVERHEAD : pos + header.size]
    try:
        if header.compression != CODEC_NONE:
            payload = _decompress(header.compression, payload)
        scan_records(payload, header.records_count)
    except UnsupportedCompressionError:
        return None
    except RecordProblem as e:
        return f"record {e.index} of the batch is malformed: {e.reason}"
    except Exception as e:  # the codec libraries' own errors for a corrupt stream
        return f"the {CODEC_NAMES.get(header.compression, '?')} payload does not decompress ({e})"
    return None


def keep_freed_buffers() -> bool:
    """Ask glibc to keep freed buffers of up to 32 MiB in the heap instead of unmapping each one (its default
    for anything over 128 KiB, adapted only slowly). Decompressing a produced batch allocates its whole
    uncompressed size; mapped afresh every time, those pages fault in one by one, which on the VMs measured
    made lz4 validation several times slower than lz4 itself. Called once by the server; False where the C
    library has no mallopt (not glibc)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 32 << 20)) and bool(mallopt(m_trim_threshold, 128 << 20))
