"""How records are written in `__cluster_metadata`: metadata record frames and KRaft control records.

Byte layout (Kafka's, so Kafka's tools read kjbod's metadata log and snapshots):

* A **metadata record** is an ordinary v2 record with a null key whose value is a frame: unsigned varint frame
  version (1), unsigned varint api key (the record type, e.g. 3 = PartitionRecord), unsigned varint record
  version, then the record body in that version (all metadata records are flexible).
* A **control record** sits in a control batch (attribute bit 5). Its key is 4 bytes: int16 key version (0) and
  int16 control type; its value is the control message in its current version (0), with no frame. kjbod writes
  LEADER_CHANGE (2) when a controller starts an epoch, SNAPSHOT_HEADER (3) first and SNAPSHOT_FOOTER (4) last in
  every snapshot, and with kraft.version 1 (KIP-853) KRAFT_VERSION (5) and KRAFT_VOTERS (6): the quorum's
  kraft.version level and its voter set, in the log where they change and right after the header of every
  snapshot (in the header's batch, as Kafka's RecordsSnapshotWriter puts them).

Everything here is pure: bytes in, records out.
"""

from __future__ import annotations

import struct
from typing import Any

from kjbod.protocol.generated.k_raft_version_record import KRaftVersionRecord
from kjbod.protocol.generated.leader_change_message import LeaderChangeMessage
from kjbod.protocol.generated.registry import METADATA_RECORDS
from kjbod.protocol.generated.snapshot_footer_record import SnapshotFooterRecord
from kjbod.protocol.generated.snapshot_header_record import SnapshotHeaderRecord
from kjbod.protocol.generated.voters_record import VotersRecord
from kjbod.protocol.runtime import DecodeError, read_uvarint, write_uvarint
from kjbod.storage.records import build_batch, iter_batches, iter_records

FRAME_VERSION = 1

# ControlRecordType ids
ABORT = 0
COMMIT = 1
LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
KRAFT_VERSION = 5
KRAFT_VOTERS = 6
CONTROL_TYPE_NAMES = {ABORT: "ABORT", COMMIT: "COMMIT", LEADER_CHANGE: "LEADER_CHANGE",
                      SNAPSHOT_HEADER: "SNAPSHOT_HEADER", SNAPSHOT_FOOTER: "SNAPSHOT_FOOTER",
                      KRAFT_VERSION: "KRAFT_VERSION", KRAFT_VOTERS: "KRAFT_VOTERS"}
CONTROL_KEY = struct.Struct(">hh")
CONTROL_KEY_VERSION = 0
CONTROL_MESSAGES: dict[int, Any] = {LEADER_CHANGE: LeaderChangeMessage, SNAPSHOT_HEADER: SnapshotHeaderRecord,
                                    SNAPSHOT_FOOTER: SnapshotFooterRecord, KRAFT_VERSION: KRaftVersionRecord,
                                    KRAFT_VOTERS: VotersRecord}
KRAFT_CONTROL_TYPES = (KRAFT_VERSION, KRAFT_VOTERS)
CONTROL_MESSAGE_VERSION = 0


class UnknownRecordTypeError(DecodeError):
    """A metadata frame names a record type this version does not know."""

    def __init__(self, api_key: int) -> None:
        super().__init__(f"unknown metadata record type {api_key}")
        self.api_key = api_key


# Records whose version follows metadata.version, as Kafka writes them (MetadataVersion.partitionRecordVersion,
# partitionChangeRecordVersion and registerBrokerRecordVersion): the partition records at v2, with KIP-966's ELR
# fields, from 4.0-IV1 (level 23), v1 below it; RegisterBrokerRecord at v4 and BrokerRegistrationChangeRecord at
# v3, with KIP-1066's CordonedLogDirs, from 4.3-IV0 (level 30), v3 and v2 below it (kjbod runs no level below
# 3.7-IV2, where those became current).  Every other record is written at its highest version.
PARTITION_RECORD_KEY = 3
PARTITION_CHANGE_RECORD_KEY = 5
# api key -> (version from 4.3-IV0, version below it)
BROKER_RECORD_VERSIONS = {0: (4, 3), 17: (3, 2)}  # RegisterBrokerRecord, BrokerRegistrationChangeRecord
ELR_METADATA_VERSION = 23
CORDON_METADATA_VERSION = 30
METADATA_VERSION_FEATURE = "metadata.version"
FEATURE_LEVEL_RECORD_KEY = 12


def record_version(record: Any, metadata_version: int | None) -> int:
    """The version `record` is written at under `metadata_version` (None: not known, the highest)."""
    if metadata_version is not None:
        if record.API_KEY in (PARTITION_RECORD_KEY, PARTITION_CHANGE_RECORD_KEY):
            return 2 if metadata_version >= ELR_METADATA_VERSION else 1
        broker = BROKER_RECORD_VERSIONS.get(record.API_KEY)
        if broker is not None:
            return broker[0] if metadata_version >= CORDON_METADATA_VERSION else broker[1]
    return int(record.MAX_VERSION)


def metadata_version_of(record: Any) -> int | None:
    """The metadata.version a FeatureLevelRecord sets, or None for any other record."""
    if record.API_KEY == FEATURE_LEVEL_RECORD_KEY and record.name == METADATA_VERSION_FEATURE:
        return int(record.feature_level)
    return None


def frame_record(record: Any, version: int | None = None) -> bytes:
    """The value of a metadata record: frame version, api key, record version, body."""
    v = record.MAX_VERSION if version is None else version
    return b"".join([write_uvarint(FRAME_VERSION), write_uvarint(record.API_KEY), write_uvarint(v),
                     record.encode(v)])


def unframe(value: bytes | memoryview) -> tuple[int, int, int]:
    """(api key, record version, position of the body) of a metadata frame."""
    frame, pos = read_uvarint(value, 0)
    if frame != FRAME_VERSION:
        raise DecodeError(f"unsupported metadata frame version {frame}")
    key, pos = read_uvarint(value, pos)
    version, pos = read_uvarint(value, pos)
    return key, version, pos


def unframe_record(value: bytes | memoryview) -> Any:
    """The metadata record a frame holds; UnknownRecordTypeError or DecodeError when it cannot be read."""
    key, version, pos = unframe(value)
    cls: Any = METADATA_RECORDS.get(key)
    if cls is None:
        raise UnknownRecordTypeError(key)
    return cls.decode(bytes(value[pos:]), version)


def control_type(key: bytes | None) -> int:
    """The control type of a control record's key (Kafka's ControlRecordType.parseTypeId)."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise DecodeError(f"control record key of {0 if key is None else len(key)} bytes, expected 4")
    version, ctype = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise DecodeError(f"invalid control record key version {version}")
    return int(ctype)


def decode_control(ctype: int, value: bytes | None) -> Any:
    """The control message of a control record (LeaderChangeMessage, SnapshotHeaderRecord, ...)."""
    cls = CONTROL_MESSAGES.get(ctype)
    if cls is None:
        raise DecodeError(f"unknown control record type {ctype}")
    if value is None:
        raise DecodeError(f"control record {CONTROL_TYPE_NAMES.get(ctype, ctype)} has no value")
    return cls.decode(value, CONTROL_MESSAGE_VERSION)


def control_batch(ctype: int, message: Any, *, base_offset: int, epoch: int, timestamp_ms: int) -> bytes:
    """One control batch holding one control record, as Kafka's MemoryRecords.with*Message builds it."""
    return control_batch_of([(ctype, message)], base_offset=base_offset, epoch=epoch, timestamp_ms=timestamp_ms)


def control_batch_of(messages: list[tuple[int, Any]], *, base_offset: int, epoch: int, timestamp_ms: int) -> bytes:
    """One control batch holding a control record per (control type, message), in order."""
    return build_batch([(CONTROL_KEY.pack(CONTROL_KEY_VERSION, ctype), message.encode(CONTROL_MESSAGE_VERSION), (),
                         timestamp_ms) for ctype, message in messages],
                       base_offset=base_offset, partition_leader_epoch=epoch, is_control=True)


def kraft_control_records(data: bytes | memoryview) -> list[tuple[int, Any]]:
    """(offset, KRaftVersionRecord or VotersRecord) of every KIP-853 control record in whole batches, in order;
    DecodeError for one that cannot be read."""
    view = memoryview(data)
    out: list[tuple[int, Any]] = []
    for pos, header in iter_batches(view):
        if not header.is_control:
            continue
        for rec in iter_records(view[pos:pos + header.size]):
            ctype = control_type(rec.key)
            if ctype in KRAFT_CONTROL_TYPES:
                out.append((rec.offset, decode_control(ctype, rec.value)))
    return out


def kraft_state(entries: list[tuple[int, Any]], before: int | None = None) -> tuple[int, VotersRecord | None]:
    """(kraft.version level, voter set) after the (offset, record) `entries`, counting only those below offset
    `before` when given: the last KRaftVersionRecord's level (0 without one) and the last VotersRecord."""
    version, voters = 0, None
    for offset, message in entries:
        if before is not None and offset >= before:
            break
        if isinstance(message, KRaftVersionRecord):
            version = message.k_raft_version
        elif isinstance(message, VotersRecord):
            voters = message
    return version, voters


def records_batch(values: list[bytes], *, base_offset: int, epoch: int, timestamp_ms: int) -> bytes:
    """One batch of framed metadata records (null keys) stamped with the controller's epoch."""
    return build_batch([(None, v, (), timestamp_ms) for v in values], base_offset=base_offset,
                       partition_leader_epoch=epoch)


def decode_batches(data: bytes | memoryview) -> list[tuple[int, Any]]:
    """(offset, metadata record) of every record in whole batches (a Fetch response's records, a log read);
    control batches are skipped, an incomplete trailing batch is ignored. Raises UnknownRecordTypeError or
    DecodeError for a record that cannot be read."""
    view = memoryview(data)
    out: list[tuple[int, Any]] = []
    for pos, header in iter_batches(view):
        if header.is_control:
            continue
        for rec in iter_records(view[pos:pos + header.size]):
            if rec.value is None:
                raise DecodeError(f"metadata record at offset {rec.offset} has no value")
            out.append((rec.offset, unframe_record(rec.value)))
    return out
