"""`kjbod dump-log --files F[,F...]`: print log segments, indexes and snapshots as `kafka-dump-log.sh` does.

Strategy: the output lines are Kafka's DumpLogSegments lines, field for field, so scripts written against Kafka's
tool read kjbod's output: `Dumping <file>`, then for a segment (`.log`) or a metadata snapshot (`.checkpoint`) a
line per batch (`baseOffset: ... isvalid: true`), with `--deep-iteration` a line per record under it (`| offset:
...`), with `--print-data-log` the record's key and value as text, with `--cluster-metadata-decoder` the value
as a metadata record in Kafka's JSON (`payload: {"type":"PARTITION_RECORD","version":1,"data":{...}}`), with
`--offsets-decoder` or `--share-group-state-decoder` the key and value as `__consumer_offsets` or
`__share_group_state` records in Kafka's JSON. An
`.index` prints `offset: O position: P` per entry, a `.timeindex` `timestamp: T offset: O`, a producer state
`.snapshot` a line per producer id. Problems Kafka's tool reports on stderr (index entries that do not match the
log, offsets that do not follow each other) are reported there too.

With `--bootstrap-server` (and the decoder) each record that names log dirs (PartitionRecord and
PartitionChangeRecord `Directories`, broker registrations' `LogDirs` and KIP-1066's `CordonedLogDirs`) is followed
by a line resolving every id to its broker and path (`|   Directories: [<id> (broker 1 /data/a), ...]`), from DescribeLogDirs with kjbod's
directory-id extension asked of every broker.  Without the option the output is Kafka's, line for line.

Files are read whole and parsed here, with no LogDirIO: the tool only reads, and must work on a copy of a
segment anywhere. A file that cannot be dumped (missing, unreadable, a name that is neither a segment, an index
nor a snapshot) is one line on stderr and exit code 2; a segment with bytes that are not batches gets Kafka's
`Found N invalid bytes at the end of F` line and exit code 1.
"""

from __future__ import annotations

import os
import struct
import sys
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TextIO

from kjbod.cli.command_config import add_command_config, admin_options
from kjbod.cli.main import UserError

SEGMENT_SUFFIXES = (".log", ".checkpoint", ".index", ".timeindex", ".snapshot")
_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_DELETE_HORIZON_MASK = 0x40
_INT32_MAX = 0x7FFFFFFF
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_END_TXN = struct.Struct(">hi")


def add_subcommand(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "dump-log", help="print log segments, indexes and metadata snapshots as kafka-dump-log.sh does",
        description="Print log segments (.log), offset and time indexes (.index, .timeindex) and metadata "
                    "snapshots (.checkpoint) as Kafka's kafka-dump-log.sh does: a line per batch, a line per "
                    "record with --deep-iteration.")
    p.add_argument("--files", required=True, metavar="F[,F...]",
                   help="comma-separated files to dump")
    p.add_argument("--cluster-metadata-decoder", action="store_true",
                   help="decode record values as metadata records (Kafka's JSON); implies --print-data-log")
    p.add_argument("--offsets-decoder", action="store_true",
                   help="decode records as __consumer_offsets records (committed offsets and group metadata, "
                        "Kafka's JSON); implies --print-data-log")
    p.add_argument("--share-group-state-decoder", action="store_true",
                   help="decode records as __share_group_state records (ShareSnapshot and ShareUpdate, Kafka's "
                        "JSON); implies --print-data-log")
    p.add_argument("--print-data-log", action="store_true",
                   help="print each record's key and value (as UTF-8 text); implies --deep-iteration")
    p.add_argument("--deep-iteration", action="store_true", help="print a line per record, not only per batch")
    p.add_argument("--skip-record-metadata", action="store_true",
                   help="on record lines, print only the key and value (offsets, sizes and control records left out)")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="with --cluster-metadata-decoder: resolve the log dir ids records name (Directories, "
                        "LogDirs) to broker and path, asking the cluster's brokers (DescribeLogDirs)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds the brokers may take to answer, with --bootstrap-server")
    add_command_config(p)
    p.set_defaults(func=run)


def run(args: Any) -> int:
    files = [f for f in args.files.split(",") if f]
    if not files:
        raise UserError("--files names no file")
    for f in files:
        _check_file(f)
    bootstrap = getattr(args, "bootstrap_server", None)
    if bootstrap is not None and not args.cluster_metadata_decoder:
        raise UserError("--bootstrap-server resolves the log dir ids of metadata records: it needs "
                        "--cluster-metadata-decoder")
    offsets = getattr(args, "offsets_decoder", False)
    if offsets and args.cluster_metadata_decoder:
        raise UserError("--offsets-decoder and --cluster-metadata-decoder read different topics: give one")
    share = getattr(args, "share_group_state_decoder", False)
    if sum(map(bool, (offsets, args.cluster_metadata_decoder, share))) > 1:
        raise UserError("--offsets-decoder, --cluster-metadata-decoder and --share-group-state-decoder read "
                        "different topics: give one")
    print_data = args.print_data_log or args.cluster_metadata_decoder or offsets or share
    deep = args.deep_iteration or print_data
    decoder: Callable[[Any], tuple[str | None, str | None]] = _text_payload
    if args.cluster_metadata_decoder:
        dirs = (directory_map(bootstrap, getattr(args, "timeout", 30.0), admin_options(args))
                if bootstrap is not None else None)
        decoder = partial(_metadata_payload, dirs=dirs)
    elif offsets:
        decoder = _offsets_payload
    elif share:
        decoder = _share_state_payload
    invalid = False
    gaps: dict[str, list[tuple[int, int]]] = {}
    for f in files:
        out = sys.stdout
        print(f"Dumping {f}", file=out)
        name = os.path.basename(f)
        if name.endswith((".log", ".checkpoint")):
            invalid |= not dump_log(f, out, deep=deep, print_data=print_data, decode=decoder, gaps=gaps,
                                    skip_metadata=args.skip_record_metadata)
        elif name.endswith(".timeindex"):
            dump_time_index(f, out)
        elif name.endswith(".snapshot"):
            dump_producer_snapshot(f, out, sys.stderr)
        else:
            dump_index(f, out, sys.stderr)
    for path, pairs in gaps.items():
        print(f"Non-consecutive offsets in {path}", file=sys.stderr)
        for first, second in reversed(pairs):  # Kafka's tool lists them newest first
            print(f"  {first} is followed by {second}", file=sys.stderr)
    return 1 if invalid else 0


def _check_file(f: str) -> None:
    name = os.path.basename(f)
    if not name.endswith(SEGMENT_SUFFIXES):
        raise UserError(f"{f} is not a log segment, index or snapshot (expected a .log, .index, .timeindex, "
                        ".checkpoint or .snapshot file)")
    if not os.path.exists(f):
        raise UserError(f"{f} does not exist")
    if not os.path.isfile(f):
        raise UserError(f"{f} is not a file")
    stem = name.split(".")[0]
    if name.endswith(".checkpoint"):
        from kjbod.storage.metadata_snapshot import parse_snapshot_name

        if parse_snapshot_name(name) is None:
            raise UserError(f"{f}: a snapshot is named <20-digit end offset>-<10-digit epoch>.checkpoint")
    elif not stem.isdigit():
        raise UserError(f"{f}: a segment file is named <base offset>{name[len(stem):]}")


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


# ------------------------------------------------------------------------------------------------ segments


def dump_log(path: str, out: TextIO, *, deep: bool, print_data: bool,
             decode: Callable[[Any], tuple[str | None, str | None]],
             gaps: dict[str, list[tuple[int, int]]] | None = None, skip_metadata: bool = False) -> bool:
    """Print a segment or snapshot; False when it ends in bytes that are not whole batches. With `deep`,
    records whose offset does not follow the previous one are added to `gaps` (by absolute path)."""
    from kjbod.storage.metadata_snapshot import parse_snapshot_name
    from kjbod.storage.records import crc_matches, iter_batches, iter_records

    name = os.path.basename(path)
    if name.endswith(".log"):
        print(f"Log starting offset: {int(name.split('.')[0])}", file=out)
    else:
        sid = parse_snapshot_name(name)
        assert sid is not None
        print(f"Snapshot end offset: {sid.end_offset}, epoch: {sid.epoch}", file=out)
    data = _read(path)
    view = memoryview(data)
    valid = 0
    last_offset = -1
    for pos, h in iter_batches(view):
        if pos != valid or h.magic != 2:
            break
        print(_batch_line(h, pos, crc_matches(view, pos, h)), file=out)
        if deep:
            try:
                records = list(iter_records(view[pos:pos + h.size]))
            except Exception as e:  # a damaged batch: Kafka's tool would stop with an exception
                print(f"| could not read the records of this batch: {e}", file=out)
                records = []
            for rec in records:
                if last_offset != -1 and rec.offset != last_offset + 1 and gaps is not None:
                    gaps.setdefault(os.path.abspath(path), []).append((last_offset, rec.offset))
                last_offset = rec.offset
                print(_record_line(h, rec, print_data, decode, skip_metadata), file=out)
        valid = pos + h.size
    trailing = len(data) - valid
    if trailing > 0:
        print(f"Found {trailing} invalid bytes at the end of {name}", file=out)
    return trailing == 0


def _batch_line(h: Any, position: int, crc_ok: bool) -> str:
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.attributes & _DELETE_HORIZON_MASK else "OptionalLong.empty"
    ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
            f"deleteHorizonMs: {horizon} position: {position} {ts_type}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {_CODECS.get(h.compression, str(h.compression))} crc: {h.crc} "
            f"isvalid: {_bool(crc_ok)}")


def _record_line(h: Any, rec: Any, print_data: bool, decode: Callable[[Any], tuple[str | None, str | None]],
                 skip_metadata: bool = False) -> str:
    """Kafka's record line; with `skip_metadata` only the key and payload (a control record: an empty line)."""
    line, prefix = "", "| "
    if not skip_metadata:
        ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
        seq = -1 if h.base_sequence < 0 else (h.base_sequence + rec.offset - h.base_offset) % (_INT32_MAX + 1)
        key_size = -1 if rec.key is None else len(rec.key)
        value_size = -1 if rec.value is None else len(rec.value)
        header_keys = ",".join(k for k, _ in rec.headers)
        line = (f"| offset: {rec.offset} {ts_type}: {rec.timestamp} keySize: {key_size} valueSize: {value_size} "
                f"sequence: {seq} headerKeys: [{header_keys}]")
        prefix = " "
        if h.is_control:
            line += _control_text(rec)
    if print_data and not h.is_control:
        key, payload = decode(rec)
        if key is not None:
            line += f"{prefix}key: {key}"
        if payload is not None:
            line += f" payload: {payload}"
    return line


def _control_text(rec: Any) -> str:
    from kjbod.cli.record_json import dumps, message_json
    from kjbod.storage import metadata_records as mr

    try:
        ctype = mr.control_type(rec.key)
    except Exception as e:
        return f" controlType: unreadable ({e})"
    name = mr.CONTROL_TYPE_NAMES.get(ctype, "UNKNOWN")
    try:
        if ctype in (mr.ABORT, mr.COMMIT):
            _version, coordinator_epoch = _END_TXN.unpack_from(rec.value or b"")
            return f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
        if ctype == mr.SNAPSHOT_HEADER:
            return f" SnapshotHeader {dumps(message_json(mr.decode_control(ctype, rec.value), 0))}"
        if ctype == mr.SNAPSHOT_FOOTER:
            return f" SnapshotFooter {dumps(message_json(mr.decode_control(ctype, rec.value), 0))}"
    except Exception as e:
        return f" controlType: {name}({ctype}) unreadable: {e}"
    return f" controlType: {name}({ctype})"


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def _text_payload(rec: Any) -> tuple[str | None, str | None]:
    """Kafka's default StringDecoder for keys and values."""
    return _text(rec.key), _text(rec.value)


def _camel_json(obj: Any) -> Any:
    """A generated message as Kafka's JSON converters write it: camelCase field names, nested structs and lists."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            if f.name == "unknown_tagged_fields":
                continue
            head, *rest = f.name.split("_")
            out[head + "".join(w.capitalize() for w in rest)] = _camel_json(getattr(obj, f.name))
        return out
    if isinstance(obj, list):
        return [_camel_json(x) for x in obj]
    return obj


def _streams_group_payload(key: bytes, value: Any) -> tuple[str, str | None] | None:
    """A KIP-1071 StreamsGroup* record as Kafka's OffsetsMessageParser prints it, or None for another kind."""
    import json

    from kjbod.broker.groups.records import RecordFormatError
    from kjbod.broker.streams import records as streams_rec
    from kjbod.protocol.generated import (
        StreamsGroupCurrentMemberAssignmentValue,
        StreamsGroupMemberMetadataValue,
        StreamsGroupMetadataValue,
        StreamsGroupTargetAssignmentMemberValue,
        StreamsGroupTargetAssignmentMetadataValue,
        StreamsGroupTopologyValue,
    )

    if len(key) < 2 or int.from_bytes(key[:2], "big", signed=True) not in streams_rec.STREAMS_KINDS:
        return None
    try:
        kind, group, member = streams_rec.read_streams_key(key)
    except (RecordFormatError, UnicodeDecodeError) as e:
        return f"<unknown key: {e}>", _text(value)
    data = {"groupId": group, **({"memberId": member} if member is not None else {})}
    key_text = json.dumps({"type": str(kind), "data": data}, separators=(",", ":"))
    if value is None:
        return key_text, "<DELETE>"
    cls = {streams_rec.STG_METADATA: StreamsGroupMetadataValue, streams_rec.STG_MEMBER: StreamsGroupMemberMetadataValue,
           streams_rec.STG_TARGET_METADATA: StreamsGroupTargetAssignmentMetadataValue,
           streams_rec.STG_TARGET_MEMBER: StreamsGroupTargetAssignmentMemberValue,
           streams_rec.STG_CURRENT: StreamsGroupCurrentMemberAssignmentValue,
           streams_rec.STG_TOPOLOGY: StreamsGroupTopologyValue}[kind]
    raw = bytes(value)
    try:
        decoded = streams_rec._decode(cls, raw)
    except Exception as e:  # noqa: BLE001  (a damaged value is shown, not fatal to the dump)
        return key_text, f"<unknown value: {e}>"
    version = int.from_bytes(raw[:2], "big", signed=True)
    return key_text, json.dumps({"version": str(version), "data": _camel_json(decoded)}, separators=(",", ":"))


def _offsets_payload(rec: Any) -> tuple[str | None, str | None]:
    """Kafka's OffsetsMessageParser: the key as `{"type":"<key version>","data":{...}}`, the value as
    `{"version":"<value version>","data":{...}}` (bytes in base64), a tombstone as `<DELETE>`; a record that
    does not decode is shown as text with the reason."""
    import base64
    import json

    from kjbod.broker.groups import records as rec_format

    if rec.key is None:
        return None, _text(rec.value)
    key = bytes(rec.key)
    streams = _streams_group_payload(key, rec.value)
    if streams is not None:
        return streams
    try:
        parsed = rec_format.read_key(key)
    except (rec_format.RecordFormatError, UnicodeDecodeError) as e:
        return f"<unknown key: {e}>", _text(rec.value)
    version = int.from_bytes(key[:2], "big", signed=True)
    if isinstance(parsed, rec_format.OffsetKey):
        key_json = {"group": parsed.group, "topic": parsed.topic, "partition": parsed.partition}
    else:
        key_json = {"group": parsed.group}
    key_text = json.dumps({"type": str(version), "data": key_json}, separators=(",", ":"))
    if rec.value is None:
        return key_text, "<DELETE>"
    value = bytes(rec.value)
    value_version = int.from_bytes(value[:2], "big", signed=True)
    try:
        if isinstance(parsed, rec_format.OffsetKey):
            c = rec_format.read_offset_value(value)
            data: dict[str, Any] = {"offset": c.offset}
            if value_version >= 3:
                data["leaderEpoch"] = c.leader_epoch
            data.update(metadata=c.metadata, commitTimestamp=c.commit_timestamp_ms)
            if value_version == 1:
                data["expireTimestamp"] = c.expire_timestamp_ms
        else:
            g = rec_format.read_group_value(value)
            data = {"protocolType": g.protocol_type, "generation": g.generation, "protocol": g.protocol,
                    "leader": g.leader}
            if value_version >= 2:
                data["currentStateTimestamp"] = g.current_state_timestamp
            data["members"] = [
                {"memberId": m.member_id, **({"groupInstanceId": m.group_instance_id} if value_version >= 3 else {}),
                 "clientId": m.client_id, "clientHost": m.client_host,
                 **({"rebalanceTimeout": m.rebalance_timeout_ms} if value_version >= 1 else {}),
                 "sessionTimeout": m.session_timeout_ms,
                 "subscription": base64.b64encode(m.subscription).decode(),
                 "assignment": base64.b64encode(m.assignment).decode()} for m in g.members]
    except (rec_format.RecordFormatError, UnicodeDecodeError) as e:
        return key_text, f"<unknown value: {e}>"
    return key_text, json.dumps({"version": str(value_version), "data": data}, separators=(",", ":"))


def _share_state_payload(rec: Any) -> tuple[str | None, str | None]:
    """Kafka's ShareGroupStateMessageParser: the key as `{"type":"<record type>","data":{...}}` (0 ShareSnapshot,
    1 ShareUpdate), the value as `{"version":"<value version>","data":{...}}`, a tombstone as `<DELETE>`; a record
    that does not decode is shown with the reason."""
    import json

    from kjbod.broker.share import state_records as share_records
    from kjbod.storage.ids import uuid_to_str

    if rec.key is None:
        return f"<no key: not a __share_group_state record at offset {rec.offset}>", _text(rec.value)
    try:
        kind, (group_id, topic_id, partition) = share_records.decode_key(bytes(rec.key))
    except share_records.ShareRecordError as e:
        return f"<unknown key at offset {rec.offset}: {e}>", _text(rec.value)
    key_text = json.dumps({"type": str(kind), "data": {"groupId": group_id, "topicId": uuid_to_str(topic_id.bytes),
                                                       "partition": partition}}, separators=(",", ":"))
    if rec.value is None:
        return key_text, "<DELETE>"
    value = bytes(rec.value)
    try:
        v = share_records.decode_value(kind, value)
    except share_records.ShareRecordError as e:
        return key_text, f"<unknown value: {e}>"
    data: dict[str, Any] = {"snapshotEpoch": v.snapshot_epoch}
    if isinstance(v, share_records.ShareState):
        data.update(stateEpoch=v.state_epoch, leaderEpoch=v.leader_epoch, startOffset=v.start_offset)
    else:
        data.update(leaderEpoch=v.leader_epoch, startOffset=v.start_offset)
    if v.delivery_complete_count != -1:  # a tagged field, shown only when it is not its default
        data["deliveryCompleteCount"] = v.delivery_complete_count
    if isinstance(v, share_records.ShareState):
        data.update(createTimestamp=v.create_ms, writeTimestamp=v.write_ms)
    data["stateBatches"] = [{"firstOffset": b.first_offset, "lastOffset": b.last_offset,
                             "deliveryState": b.delivery_state, "deliveryCount": b.delivery_count}
                            for b in v.batches]
    version = int.from_bytes(value[:2], "big", signed=True)
    return key_text, json.dumps({"version": str(version), "data": data}, separators=(",", ":"))


def directory_map(bootstrap: str, timeout: float,
                  options: dict[str, Any] | None = None) -> dict[uuid.UUID, tuple[int, str]]:
    """{dir id: (broker id, path)} of every log dir the cluster's brokers report (offline ones too).  A broker
    that does not answer is named on stderr; its dirs stay unresolved."""
    import asyncio

    from kjbod.admin import AdminClient, KafkaError, parse_bootstrap_servers

    try:
        parse_bootstrap_servers(bootstrap)
    except ValueError as e:
        raise UserError(f"--bootstrap-server: {e}") from None
    if timeout <= 0:
        raise UserError("--timeout must be positive")
    async def ask() -> Any:
        async with AdminClient(bootstrap, request_timeout=timeout, **(options or {})) as admin:
            return await admin.describe_log_dirs(None, [], raise_on_broker_error=False)

    try:
        result = asyncio.run(ask())
    except KafkaError as e:
        raise UserError(f"--bootstrap-server {bootstrap}: could not read the cluster's log dirs: {e}") from None
    for broker_id, error in sorted(result.errors.items()):
        print(f"broker {broker_id} did not describe its log dirs, its dir ids stay unresolved: {error}",
              file=sys.stderr)
    return {d.directory_id: (broker_id, d.path) for broker_id, dirs in result.items() for d in dirs
            if d.directory_id is not None}


_RESERVED_DIRS = {uuid.UUID(int=0): "MIGRATING", uuid.UUID(int=1): "UNASSIGNED", uuid.UUID(int=2): "LOST"}


def _resolved(message: Any, dirs: Mapping[uuid.UUID, tuple[int, str]]) -> str:
    """Lines after a record resolving the dir ids it names (nothing when it names none)."""
    from kjbod.storage.ids import uuid_to_str

    out = ""
    for field, name in (("directories", "Directories"), ("log_dirs", "LogDirs"),
                        ("cordoned_log_dirs", "CordonedLogDirs")):
        ids = getattr(message, field, None)
        if not ids:
            continue
        parts = []
        for d in ids:
            where = dirs.get(d)
            if where is not None:
                what = f"broker {where[0]} {where[1]}"
            elif d in _RESERVED_DIRS:
                what = _RESERVED_DIRS[d]
            else:
                what = "no broker reports it"
            parts.append(f"{uuid_to_str(d.bytes)} ({what})")
        out += f"\n|   {name}: [{', '.join(parts)}]"
    return out


def _metadata_payload(rec: Any, dirs: Mapping[uuid.UUID, tuple[int, str]] | None = None
                      ) -> tuple[str | None, str | None]:
    """ClusterMetadataLogMessageParser: no key; the value as `{"type":...,"version":...,"data":{...}}` (with
    `dirs`, followed by the lines resolving the log dir ids it names)."""
    from kjbod.cli.record_json import metadata_record_json
    from kjbod.protocol.generated.registry import METADATA_RECORDS
    from kjbod.storage.metadata_records import unframe

    if rec.value is None:
        return None, None
    try:
        key, version, pos = unframe(rec.value)
        cls: Any = METADATA_RECORDS.get(key)
        if cls is None:
            raise ValueError(f"Unknown metadata id {key}")
        message = cls.decode(rec.value[pos:], version)
        text = metadata_record_json(message, version)
        return None, text if dirs is None else text + _resolved(message, dirs)
    except Exception as e:
        return None, f"Error at {rec.offset}, skipping. {e}"


def _bool(b: bool) -> str:
    return "true" if b else "false"


# ------------------------------------------------------------------------------------------------ indexes


def dump_index(path: str, out: TextIO, err: TextIO) -> None:
    """Offset index entries; entries that do not name a batch's last offset are reported on stderr."""
    from kjbod.storage.records import RECORD_BATCH_OVERHEAD, parse_header

    base = int(os.path.basename(path).split(".")[0])
    data = _read(path)
    count = len(data) // _OFFSET_ENTRY.size
    if count == 0:
        print(f"{path} is empty.", file=out)
        return
    log_path = os.path.join(os.path.dirname(path), os.path.basename(path).split(".")[0] + ".log")
    log_data = _read(log_path) if os.path.isfile(log_path) else None
    mismatches = []
    for i in range(count):
        rel, position = _OFFSET_ENTRY.unpack_from(data, i * _OFFSET_ENTRY.size)
        if rel == 0 and i > 0:
            break  # the preallocated, never written part of the index
        offset = base + rel
        if log_data is not None and position + RECORD_BATCH_OVERHEAD <= len(log_data):
            last = parse_header(log_data, position).last_offset
            if last != offset:
                mismatches.append((offset, last))
        print(f"offset: {offset} position: {position}", file=out)
    if mismatches:
        print(f"Mismatches in :{os.path.abspath(path)}", file=err)
        for index_offset, log_offset in mismatches:
            print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=err)


def dump_time_index(path: str, out: TextIO) -> None:
    base = int(os.path.basename(path).split(".")[0])
    data = _read(path)
    for i in range(len(data) // _TIME_ENTRY.size):
        ts, rel = _TIME_ENTRY.unpack_from(data, i * _TIME_ENTRY.size)
        if rel == 0 and i > 0:
            break
        print(f"timestamp: {ts} offset: {base + rel}", file=out)


def dump_producer_snapshot(path: str, out: TextIO, err: TextIO) -> None:
    """A producer state snapshot (`<offset>.snapshot`): a line per producer, as Kafka's tool prints it."""
    from kjbod.storage.producer_state import ProducerStateManager, SnapshotFormatError

    try:
        producers = ProducerStateManager.parse_snapshot(_read(path))
    except SnapshotFormatError as e:
        print(f"{path}: {e}", file=err)
        return
    for pid, entry in producers.items():
        txn = f"OptionalLong[{entry.txn_first_offset}]" if entry.txn_first_offset >= 0 else "OptionalLong.empty"
        line = (f"producerId: {pid} producerEpoch: {entry.epoch} coordinatorEpoch: {entry.coordinator_epoch} "
                f"currentTxnFirstOffset: {txn} lastTimestamp: {entry.last_timestamp} ")
        if entry.batches:
            b = entry.batches[0]
            line += (f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
                     f"offsetDelta: {b.last_offset - b.first_offset} timestamp: {b.timestamp}")
        print(line, file=out)
