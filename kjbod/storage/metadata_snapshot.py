"""Metadata snapshots: `<end offset, 20 digits>-<epoch, 10 digits>.checkpoint` in `__cluster_metadata-0`.

Byte layout (Kafka's RecordsSnapshotWriter, so Kafka's tools read kjbod's snapshots): record batches whose
offsets start at 0 and whose partition leader epoch is the snapshot's epoch:

    control batch  SnapshotHeaderRecord (control type 3): version 0, LastContainedLogTimestamp; with kraft.version
                   1 (KIP-853) the same batch goes on with a KRaftVersionRecord (type 5) and the VotersRecord
                   (type 6) in force at the snapshot's end
    batches        the metadata records that rebuild the image, framed as in the log (null keys)
    control batch  SnapshotFooterRecord (control type 4): version 0

The end offset is exclusive: a snapshot `00000000000000000100-0000000001` stands for offsets 0..99 of the log,
the last of which was written in epoch 1. A file is complete only with its footer; one that is cut short, fails a
CRC, or does not start with a header is refused as a whole.

`kjbod format --standalone` / `--initial-controllers` writes the bootstrap snapshot `00000000000000000000-
0000000000.checkpoint` (id (0, 0)): header, KRaftVersionRecord and VotersRecord, footer, and no metadata record.

Writing: `<name>.checkpoint.part`, fsync, rename to `<name>.checkpoint`, fsync of the dir (Kafka writes
`.checkpoint.part` too and deletes leftover ones at start, as kjbod does).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kjbod.protocol.generated.feature_level_record import FeatureLevelRecord
from kjbod.protocol.generated.k_raft_version_record import KRaftVersionRecord
from kjbod.protocol.generated.snapshot_footer_record import SnapshotFooterRecord
from kjbod.protocol.generated.snapshot_header_record import SnapshotHeaderRecord
from kjbod.protocol.generated.voters_record import VotersRecord
from kjbod.protocol.runtime import DecodeError
from kjbod.storage.errors import StorageError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.metadata_records import (
    KRAFT_CONTROL_TYPES,
    KRAFT_VERSION,
    KRAFT_VOTERS,
    SNAPSHOT_FOOTER,
    SNAPSHOT_HEADER,
    control_batch,
    control_batch_of,
    control_type,
    decode_control,
    frame_record,
    metadata_version_of,
    record_version,
    records_batch,
    unframe_record,
)
from kjbod.storage.records import crc_matches, iter_batches, iter_records

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETE_SUFFIX = ".checkpoint.deleted"
# Batches of a snapshot stay well under Kafka's 8 MiB limit for a metadata batch.
BATCH_BYTES = 1 << 20
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


class SnapshotFormatError(StorageError):
    """A snapshot file that cannot be used: cut short, a bad CRC, no header or footer, an unreadable record."""


@dataclass(frozen=True, order=True)
class SnapshotId:
    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"


@dataclass(frozen=True)
class Snapshot:
    id: SnapshotId
    path: str
    size: int
    records: list[Any]  # as loaded; emptied once replayed (the image lives elsewhere)
    kraft: tuple[Any, ...] = ()  # its KRaftVersionRecord and VotersRecord (kraft.version 1), in order


def parse_snapshot_name(name: str) -> SnapshotId | None:
    m = _NAME.match(name)
    return SnapshotId(int(m.group(1)), int(m.group(2))) if m else None


def build_snapshot(records: Iterable[Any], *, epoch: int, last_contained_timestamp: int, now_ms: int,
                   kraft_version: int = 0, voters: VotersRecord | None = None) -> bytes:
    """The bytes of a snapshot file holding `records` (metadata record objects); with `kraft_version` 1 the
    header's batch also carries the kraft.version level and `voters`."""
    header: list[tuple[int, Any]] = [(SNAPSHOT_HEADER, SnapshotHeaderRecord(
        version=0, last_contained_log_timestamp=last_contained_timestamp))]
    if kraft_version > 0:
        header.append((KRAFT_VERSION, KRaftVersionRecord(version=0, k_raft_version=kraft_version)))
        if voters is not None:
            header.append((KRAFT_VOTERS, voters))
    out = [control_batch_of(header, base_offset=0, epoch=epoch, timestamp_ms=now_ms)]
    offset = len(header)
    pending: list[bytes] = []
    size = 0
    metadata_version: int | None = None  # the image's level comes first (its FeatureLevelRecords)
    for rec in records:
        level = metadata_version_of(rec)
        if level is not None:
            metadata_version = level
        value = frame_record(rec, record_version(rec, metadata_version))
        pending.append(value)
        size += len(value) + 16
        if size >= BATCH_BYTES:
            out.append(records_batch(pending, base_offset=offset, epoch=epoch, timestamp_ms=now_ms))
            offset += len(pending)
            pending, size = [], 0
    if pending:
        out.append(records_batch(pending, base_offset=offset, epoch=epoch, timestamp_ms=now_ms))
        offset += len(pending)
    out.append(control_batch(SNAPSHOT_FOOTER, SnapshotFooterRecord(version=0), base_offset=offset, epoch=epoch,
                             timestamp_ms=now_ms))
    return b"".join(out)


def parse_snapshot(data: bytes, kraft: list[Any] | None = None) -> list[Any]:
    """The metadata records of a complete snapshot; SnapshotFormatError names what is wrong otherwise. Its
    KRaftVersionRecord and VotersRecord, if any, are appended to `kraft`."""
    view = memoryview(data)
    records: list[Any] = []
    pos_end = 0
    saw_header = saw_footer = False
    for pos, header in iter_batches(view):
        if pos != pos_end:
            raise SnapshotFormatError(f"batch at byte {pos_end} is malformed")
        pos_end = pos + header.size
        if header.magic != 2 or not crc_matches(view, pos, header):
            raise SnapshotFormatError(f"batch at byte {pos} (offset {header.base_offset}) fails its CRC")
        if saw_footer:
            raise SnapshotFormatError(f"batch at byte {pos} follows the SnapshotFooter")
        try:
            batch_records = list(iter_records(view[pos:pos_end]))
            if header.is_control:
                for rec in batch_records:
                    ctype = control_type(rec.key)
                    message = decode_control(ctype, rec.value)
                    if ctype in KRAFT_CONTROL_TYPES and kraft is not None:
                        kraft.append(message)
                    if ctype == SNAPSHOT_HEADER:
                        if pos != 0:
                            raise SnapshotFormatError(f"SnapshotHeader at byte {pos}, not at the start")
                        saw_header = True
                    elif ctype == SNAPSHOT_FOOTER:
                        saw_footer = True
            else:
                if not saw_header:
                    raise SnapshotFormatError("the snapshot does not start with a SnapshotHeader")
                for rec in batch_records:
                    if rec.value is None:
                        raise SnapshotFormatError(f"record at offset {rec.offset} has no value")
                    records.append(unframe_record(rec.value))
        except SnapshotFormatError:
            raise
        except (DecodeError, ValueError, StorageError) as e:
            raise SnapshotFormatError(f"batch at byte {pos}: {e}") from None
    if pos_end != len(data):
        raise SnapshotFormatError(f"cut short: {len(data) - pos_end} bytes after the last whole batch")
    if not saw_header:
        raise SnapshotFormatError("no SnapshotHeader")
    if not saw_footer:
        raise SnapshotFormatError("no SnapshotFooter: the snapshot is incomplete")
    return records


BOOTSTRAP_SNAPSHOT_ID = SnapshotId(0, 0)


def bootstrap_snapshot(voters: VotersRecord, now_ms: int) -> bytes:
    """The bootstrap snapshot `kjbod format` writes for a dynamic quorum (kraft.version 1 and its first voters)."""
    return build_snapshot([], epoch=0, last_contained_timestamp=now_ms, now_ms=now_ms, kraft_version=1,
                          voters=voters)


BOOTSTRAP_FILE = "bootstrap.checkpoint"


def bootstrap_levels_snapshot(levels: dict[str, int], now_ms: int) -> bytes:
    """Kafka's `bootstrap.checkpoint` (in the metadata log dir, written by the storage tool): a snapshot whose
    records are the FeatureLevelRecords a new cluster starts with, metadata.version first."""
    records = [FeatureLevelRecord(name=n, feature_level=v)
               for n, v in sorted(levels.items(), key=lambda kv: (kv[0] != "metadata.version", kv[0]))]
    return build_snapshot(records, epoch=0, last_contained_timestamp=now_ms, now_ms=now_ms)


def write_snapshot_file(io: LogDirIO, dir_path: str, snapshot_id: SnapshotId, data: bytes) -> str:
    """Write a snapshot the crash-safe way (see the module doc); returns its path."""
    path = os.path.join(dir_path, snapshot_id.file_name)
    tmp = os.path.join(dir_path, snapshot_id.file_name[: -len(SUFFIX)] + PARTIAL_SUFFIX)
    fh = io.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        fh.write(data)
        fh.fsync()
    finally:
        fh.close()
    io.rename(tmp, path)
    io.fsync_dir(dir_path)
    return path


def list_snapshots(io: LogDirIO, dir_path: str) -> list[SnapshotId]:
    """The snapshot ids in `dir_path`, oldest first."""
    ids = [parse_snapshot_name(n) for n in io.listdir(dir_path)]
    return sorted(i for i in ids if i is not None)


def snapshot_timestamp(io: LogDirIO, path: str) -> int | None:
    """The LastContainedLogTimestamp of a snapshot's header (the time of the last record it covers), or None when
    the file does not start with a readable SnapshotHeader."""
    try:
        _, head = read_snapshot_range(io, path, 0, 4096)
        view = memoryview(head)
        for pos, header in iter_batches(view):
            if not header.is_control:
                return None
            for rec in iter_records(view[pos:pos + header.size]):
                if control_type(rec.key) == SNAPSHOT_HEADER:
                    return int(decode_control(SNAPSHOT_HEADER, rec.value).last_contained_log_timestamp)
            return None
    except (OSError, DecodeError, ValueError, StorageError):
        return None
    return None


def read_snapshot_range(io: LogDirIO, path: str, position: int, max_bytes: int) -> tuple[int, bytes]:
    """(file size, up to `max_bytes` bytes from `position`) of a snapshot file, for FetchSnapshot."""
    fh = io.open(path, os.O_RDONLY)
    try:
        size = fh.size()
        if position >= size:
            return size, b""
        return size, fh.pread(min(max_bytes, size - position), position)
    finally:
        fh.close()
