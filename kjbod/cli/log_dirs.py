"""`kjbod log-dirs describe|move`: KIP-113's kafka-log-dirs.sh and its dir-to-dir moves, plus what operators miss.

Strategy: each command is a thin pipeline of pure steps around the admin client, and only the pipeline does I/O.

* describe: DescribeLogDirs (`AdminClient.describe_log_dirs`) -> `describe_document` (KIP-113's JSON, grouped by
  broker as Kafka's tool does, plus the KIP-858 directory id and the KIP-827 total/usable bytes Kafka's tool
  drops) -> printed as JSON (`--json`) or rendered by `render_table` from that same document, so the table can
  never show something the JSON does not hold.
* move: the assignment file is checked completely before anything is sent (`parse_assignment`: every mistake is
  a `UserError` naming the entry, so exit 2 and one line). Then, on the one broker named: read the current
  placement, set the intra-broker throttle if asked (`ThrottleGuard`), send AlterReplicaLogDirs, print one line
  per partition (failures on stderr, explained), and with `--wait` poll DescribeLogDirs until every accepted move
  is done or has stopped (`MoveTracker` turns each poll into per-move states and a `progress.Snapshot`).
* The throttle's lifetime is the command's (KIP-179's promise, which Kafka never shipped): `ThrottleGuard.release`
  runs in a `finally`, so moves finishing, a failure, Ctrl-C (SIGINT cancels the main task; cleanup still runs)
  and SIGTERM all remove it, or put back the per-broker value that was there before. If someone changed the
  value while the moves ran, theirs is left alone. `--throttle` implies `--wait`: the command has to stay to be
  able to remove it.
* Progress is measured by the broker, not guessed: a move's bytes done are the future replica's size against
  the current replica's size (both from DescribeLogDirs), its lag the future's offset lag. A move is done when
  the replica's current dir is the target and no future replica is left. A move whose current replica has
  outgrown its future one for two minutes is named in the progress line with both rates (the broker's own
  judgement, kjbod.broker.kip113.convergence, from the sizes of successive polls).

Exit codes: 0 all good; 1 a partition failed or stopped, or a broker could not be described (fenced, or not
answering); 2 a usage, file or connection error (one line, from kjbod.cli.main); 130 Ctrl-C; 143 SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from kjbod.cli.command_config import add_command_config, admin_options
from kjbod.cli.main import UserError
from kjbod.cli.progress import Progress, Snapshot, human_bytes, human_duration, human_rate

if TYPE_CHECKING:
    from kjbod.admin import AdminClient, KafkaError, LogDirsByBroker, ReplicaLogDirInfo
    from kjbod.broker.kip113.convergence import ConvergenceWatch

__all__ = [
    "DOCUMENT_VERSION",
    "THROTTLE_KEY",
    "MoveTracker",
    "PlannedMove",
    "ThrottleGuard",
    "add_subcommand",
    "describe_document",
    "parse_assignment",
    "parse_id_list",
    "parse_rate",
    "render_table",
]

DOCUMENT_VERSION = 1
THROTTLE_KEY = "replica.alter.log.dirs.io.max.bytes.per.second"
EXIT_FAILED = 1
EXIT_TERMINATED = 128 + signal.SIGTERM
POLL_INTERVAL = 0.5
# A move whose future replica vanished without the replica arriving counts as stopped only after this many polls
# in a row: for one poll the future can be between the mover's bookkeeping and the log manager.
STOPPED_AFTER_POLLS = 3
WAITING_NOTE_AFTER = 10.0  # seconds with none of our moves copying before saying why moves are not starting

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


# ================================================================================================ arguments

def add_subcommand(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "log-dirs", help="describe log dirs, move replicas between them (KIP-113)",
        description="Describe every log dir of a broker (replicas, sizes, free space) and move replicas "
                    "between the log dirs of one broker.")
    sub = parser.add_subparsers(dest="log_dirs_command", metavar="ACTION", required=True,
                                parser_class=type(parser))

    describe = sub.add_parser(
        "describe", help="replicas, sizes and free space of each log dir",
        description="KIP-113's kafka-log-dirs.sh --describe: every log dir of the brokers, with its directory "
                    "id, total and usable bytes, and its replicas (size, offset lag, future replica).")
    _common(describe)
    describe.add_argument("--broker-list", metavar="IDS", type=parse_id_list,
                          help="comma-separated broker ids (default: every broker)")
    describe.add_argument("--topic-list", metavar="TOPICS", type=_parse_topic_list,
                          help="comma-separated topic names (default: every topic)")
    describe.add_argument("--json", action="store_true",
                          help="print KIP-113's JSON document instead of tables")
    describe.set_defaults(func=_describe_command)

    move = sub.add_parser(
        "move", help="move replicas between the log dirs of one broker",
        description="Moves replicas between the log dirs of one broker (AlterReplicaLogDirs), as listed in "
                    'a JSON file: {"version": 1, "partitions": [{"topic": "t", "partition": 0, '
                    '"log_dir": "/abs/path"}]}. With --wait, shows progress until every move is done.')
    _common(move)
    move.add_argument("--broker", metavar="ID", type=int, required=True, help="the broker whose replicas move")
    move.add_argument("--assignment", metavar="FILE", required=True,
                      help="the JSON file listing the moves ('-' reads standard input)")
    move.add_argument("--throttle", metavar="RATE", type=parse_rate,
                      help="limit the copy to RATE bytes/s (e.g. 50000000, 50MB, 64MiB) while the moves run; "
                           "removed (or the previous value put back) when they finish or the command stops. "
                           "Implies --wait")
    move.add_argument("--wait", action="store_true", help="show progress and wait until every move is done")
    move.add_argument("--report-interval", metavar="SECONDS", type=_positive_float, default=5.0,
                      help="without a terminal, print a progress line this often (default: 5)")
    move.set_defaults(func=_move_command)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                        help="a broker to connect to (comma-separated for several)")
    parser.add_argument("--timeout", metavar="SECONDS", type=_positive_float, default=30.0,
                        help="how long each request may take, retries included (default: 30)")
    add_command_config(parser)


def parse_id_list(text: str) -> list[int]:
    """"1,2, 3" -> [1, 2, 3] (duplicates dropped); argparse turns a ValueError into a usage error."""
    ids: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not re.fullmatch(r"\d+", item):
            raise argparse.ArgumentTypeError(f"{item!r} is not a broker id")
        if int(item) not in ids:
            ids.append(int(item))
    if not ids:
        raise argparse.ArgumentTypeError("no broker ids given")
    return ids


def _parse_topic_list(text: str) -> list[str]:
    names = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not names:
        raise argparse.ArgumentTypeError("no topic names given")
    for name in names:
        if not _TOPIC_NAME.fullmatch(name):
            raise argparse.ArgumentTypeError(f"{name!r} is not a Kafka topic name")
    return names


_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)(b?)(?:/s)?", re.IGNORECASE)
_SCALE = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def _scaled(text: str, example: str) -> int:
    """A byte count written as "1048576", "50MB" or "50M" (10**6) or "64MiB" (2**20), "/s" allowed."""
    match = _RATE.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not {example}")
    number, prefix, binary, _ = match.groups()
    if binary and not prefix:
        raise argparse.ArgumentTypeError(f"{text!r} is not {example}")
    base = 1024 if binary else 1000
    value = int(float(number) * base ** _SCALE[prefix.lower()])
    if value >= 1 << 63:
        raise argparse.ArgumentTypeError(f"{text!r} is too large")
    return value


def parse_rate(text: str) -> int:
    """Bytes per second: "1048576", "50MB" or "50M" (10**6), "64MiB" (2**20), "/s" optional."""
    value = _scaled(text, "a rate (e.g. 10485760, 10MB, 10MiB)")
    if value < 1:
        raise argparse.ArgumentTypeError(f"the throttle must be at least 1 byte/s, not {text!r}")
    return value


def parse_size(text: str) -> int:
    """A number of bytes, 0 or more: "0", "1048576", "50MB" (10**6 each), "64MiB" (2**20 each)."""
    if text.strip().lower().endswith("/s"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 0, 104857600, 100MB, 100MiB)")
    return _scaled(text, "a size (e.g. 0, 104857600, 100MB, 100MiB)")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


# ================================================================================================ describe

def _uuid_text(value: Any) -> str | None:
    if value is None:
        return None
    from kjbod.storage.ids import uuid_to_str

    return uuid_to_str(value.bytes)


def describe_document(result: LogDirsByBroker, behind: dict[tuple[int, str, int], int] | None = None,
                      fenced: dict[int, str] | None = None) -> dict[str, Any]:
    """KIP-113's JSON, one entry per broker (as Kafka's kafka-log-dirs.sh groups it), with kjbod's extra fields.

    {"version": 1, "brokers": [{"broker": 1, "error": null, "fenced": false, "log_dirs": [{"path", "is_live",
    "error", "directory_id", "total_bytes", "usable_bytes", "state", "recent_latency_ms", "failed_at",
    "reserved_bytes", "state_reason", "is_cordoned", "filesystem_id", "partitions": [{"topic", "partition", "size", "offset_lag",
    "behind_leader", "is_temporary"}]}]}]}

    `behind_leader` (kjbod's): for a follower replica, how many offsets its log end is behind its leader's
    (`behind`, keyed by (broker, topic, partition)); null for leaders, futures and unreplicated partitions.
    `is_cordoned`: KIP-1066's flag (DescribeLogDirs v5; null from an older broker). `filesystem_id` (kjbod's): the
    broker's device id of the dir's filesystem; dirs of one broker with the same id share it (null: not reported).
    `fenced` (kjbod's): the brokers the controller has fenced (broker id -> why), listed with that as their error
    and no log dirs rather than left out.
    """
    behind = behind or {}
    fenced = fenced or {}
    brokers = []
    for broker_id in sorted(set(result) | set(result.errors) | set(fenced)):
        if broker_id in fenced and broker_id not in result:  # (unfenced since, and described: shown as it is)
            brokers.append({"broker": broker_id, "error": fenced[broker_id], "fenced": True, "log_dirs": []})
            continue
        if broker_id in result.errors:
            brokers.append({"broker": broker_id, "error": str(result.errors[broker_id]), "fenced": False,
                            "log_dirs": []})
            continue
        dirs = []
        for d in result[broker_id]:
            replicas = sorted(d.replicas, key=lambda r: (r.topic, r.partition, r.is_future))
            dirs.append({
                "path": d.path,
                "is_live": d.error is None,
                "error": None if d.error is None else d.error.name,
                "directory_id": _uuid_text(d.directory_id),
                "total_bytes": d.total_bytes,
                "usable_bytes": d.usable_bytes,
                "state": d.state,
                "recent_latency_ms": d.recent_latency_ms,
                "failed_at": None if d.failed_at_ms is None else _utc(d.failed_at_ms),
                "reserved_bytes": d.reserved_bytes,
                "state_reason": d.state_reason,
                "is_cordoned": d.is_cordoned,
                "filesystem_id": d.filesystem_id,
                "partitions": [
                    {"topic": r.topic, "partition": r.partition, "size": r.size, "offset_lag": r.offset_lag,
                     "behind_leader": None if r.is_future else behind.get((broker_id, r.topic, r.partition)),
                     "is_temporary": r.is_future}
                    for r in replicas],
            })
        brokers.append({"broker": broker_id, "error": None, "fenced": False, "log_dirs": dirs})
    return {"version": DOCUMENT_VERSION, "brokers": brokers}


def _utc(ms: int) -> str:
    """An instant as ISO 8601 UTC to the second, as `date -u +%FT%TZ` prints it."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    """Columns padded to their widest cell; columns in `right` (numbers) right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        out = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(out).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def _state_text(d: dict[str, Any]) -> str:
    """online; degraded (the slow dir's recent latency); FULL (appends refused until space returns); OFFLINE or NOT
    ANSWERING with the error code."""
    state = d.get("state")
    if state == "not-answering":
        return f"NOT ANSWERING ({d['error']})"
    if not d["is_live"]:
        since = d.get("failed_at")
        return f"OFFLINE ({d['error']})" + (f" since {since}" if since else "")
    if state == "full":
        return "FULL (appends refused)"
    if state == "degraded":
        latency = d.get("recent_latency_ms")
        return "degraded" + (f" ({latency / 1000:.1f} s/op)" if latency is not None else "")
    return "online"


def _usage(total: int | None, usable: int | None) -> str:
    if not total or usable is None:
        return "-"
    return f"{(total - usable) / total * 100:.1f}%"


def render_table(document: dict[str, Any]) -> str:
    """The human form of `describe_document`'s output: per broker, a table of dirs, then one of replicas."""
    out: list[str] = []
    for broker in document["brokers"]:
        if out:
            out.append("")
        if broker.get("fenced"):
            out.append(f"Broker {broker['broker']}: FENCED, its log dirs not described: {broker['error']}")
            continue
        if broker["error"] is not None:
            out.append(f"Broker {broker['broker']}: could not describe its log dirs: {broker['error']}")
            continue
        dirs = broker["log_dirs"]
        out.append(f"Broker {broker['broker']}: {len(dirs)} log dir{'s' if len(dirs) != 1 else ''}")
        rows = []
        for d in dirs:
            replicas = d["partitions"]
            current = [p for p in replicas if not p["is_temporary"]]
            moving_in = len(replicas) - len(current)
            state = _state_text(d) + (", cordoned" if d.get("is_cordoned") else "")
            total, usable = d["total_bytes"], d["usable_bytes"]
            rows.append([
                d["path"], state,
                str(len(current)) + (f" +{moving_in}" if moving_in else "") if d["is_live"] else "-",
                human_bytes(sum(p["size"] for p in replicas)) if d["is_live"] else "-",
                human_bytes(total), human_bytes(None if total is None or usable is None else total - usable),
                human_bytes(usable), human_bytes(d.get("reserved_bytes")), _usage(total, usable),
                d["directory_id"] or "-",
            ])
        out += ["  " + line for line in _table(
            ["LOG DIR", "STATE", "REPLICAS", "DATA", "SIZE", "USED", "FREE", "RESERVE", "USE%", "DIRECTORY ID"],
            rows, right={2, 3, 4, 5, 6, 7, 8})]
        reasons = [f"  {d['path']} ({d.get('state') or ('online' if d['is_live'] else 'offline')}): "
                   f"{d['state_reason']}" for d in dirs if d.get("state_reason")]
        if reasons:
            out += ["", *reasons]
        replica_rows = []
        for d in dirs:
            for p in d["partitions"]:
                lag = p["offset_lag"]
                behind = p.get("behind_leader")
                replica_rows.append([
                    f"{p['topic']}-{p['partition']}", d["path"], human_bytes(p["size"]),
                    "-" if lag is None else str(lag), "-" if behind is None else str(behind),
                    "future: moving here" if p["is_temporary"] else "",
                ])
        out.append("")
        if replica_rows:
            replica_rows.sort(key=lambda r: r[0:2])
            out += ["  " + line for line in _table(
                ["PARTITION", "LOG DIR", "SIZE", "OFFSET LAG", "BEHIND LEADER", "NOTE"], replica_rows,
                right={2, 3, 4})]
        else:
            out.append("  (no replicas)")
    return "\n".join(out) + "\n"


async def followers_behind(admin: Any, result: LogDirsByBroker) -> dict[tuple[int, str, int], int]:
    """(broker, topic, partition) -> how far each follower replica listed in `result` is behind its leader's
    log end offset, from each broker's own answer (ListOffsets, debugging replica id); best effort: a replica
    whose leader or itself does not answer is left out (shown as "-")."""
    from kjbod.admin import KafkaError

    listed = {(b, r.topic, r.partition) for b, dirs in result.items() for d in dirs for r in d.replicas
              if not r.is_future}
    topics = sorted({t for _, t, _ in listed})
    if not topics:
        return {}
    try:
        described = await admin.describe_topics(topics)
    except KafkaError:
        return {}
    leaders: dict[tuple[str, int], int] = {}
    for name, t in described.items():
        for p in t.partitions:
            if p.leader is not None and len(p.replicas) > 1:
                leaders[(name, p.partition)] = p.leader
    wanted: dict[int, set[tuple[str, int]]] = {}
    for b, t, p in listed:
        leader = leaders.get((t, p))
        if leader is not None and leader != b:
            wanted.setdefault(b, set()).add((t, p))
            wanted.setdefault(leader, set()).add((t, p))

    async def ends(broker_id: int) -> dict[tuple[str, int], int]:
        try:
            return await admin.replica_end_offsets(broker_id, sorted(wanted[broker_id]))
        except KafkaError:
            return {}

    answers = dict(zip(wanted, await asyncio.gather(*(ends(b) for b in wanted)), strict=True))
    out: dict[tuple[int, str, int], int] = {}
    for b, t, p in listed:
        leader = leaders.get((t, p))
        if leader is None or leader == b:
            continue
        mine, theirs = answers.get(b, {}).get((t, p)), answers.get(leader, {}).get((t, p))
        if mine is not None and theirs is not None:
            out[(b, t, p)] = max(0, theirs - mine)
    return out


def _describe_command(args: argparse.Namespace) -> int:
    return _run_async(_describe(args, sys.stdout))


async def _describe(args: argparse.Namespace, stdout: TextIO) -> int:
    from kjbod.admin import KafkaError

    async with _admin(args) as admin:
        fenced = await fenced_brokers(admin)
        brokers = args.broker_list
        if brokers is not None:
            brokers = [b for b in brokers if b not in fenced]
            fenced = {b: why for b, why in fenced.items() if b in args.broker_list}
        try:
            result = await admin.describe_log_dirs(brokers, args.topic_list, raise_on_broker_error=False)
        except KafkaError as e:
            raise UserError(str(e)) from None
        behind = await followers_behind(admin, result)
    fenced = {b: why for b, why in fenced.items() if b not in result}  # unless unfenced since, and described
    document = describe_document(result, behind, fenced)
    if args.json:
        stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        stdout.write(render_table(document))
    return EXIT_FAILED if result.errors or fenced else 0


async def fenced_brokers(admin: Any) -> dict[int, str]:
    """Broker id -> why it is not described, for each broker the controller has fenced (DescribeCluster with
    KIP-1073's include_fenced_brokers). A fenced broker is not in the Metadata clients see, so asking for "every
    broker" would leave it out without a word, and it cannot be reached through the cluster. Best effort: {} when
    the cluster cannot tell (a broker without DescribeCluster v2 lists the unfenced ones only)."""
    from kjbod.admin import KafkaError

    try:
        described = await admin.describe_cluster(include_fenced_brokers=True)
    except KafkaError:
        return {}
    return {b.node_id: f"fenced by the controller: registered at {b.host}:{b.port} but not serving: stopped or "
                       "shutting down, starting or catching up with the metadata, or cut off from the controller "
                       "(its session expired)"
            for b in described.brokers if b.is_fenced}


# ================================================================================================ assignment

@dataclass(frozen=True, slots=True)
class PlannedMove:
    """One line of the assignment file: move `topic`-`partition` to the log dir `log_dir`."""

    topic: str
    partition: int
    log_dir: str

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


_ENTRY_KEYS = ("topic", "partition", "log_dir")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    if isinstance(value, list):
        return "a list"
    return "an object"


def parse_assignment(text: str, source: str = "assignment") -> list[PlannedMove]:
    """KIP-113's move file -> moves; any mistake raises a UserError that names the entry.

    {"version": 1, "partitions": [{"topic": str, "partition": int, "log_dir": "/absolute/path"}, ...]}
    """
    def fail(message: str) -> UserError:
        return UserError(f"{source}: {message}")

    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise fail(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(document, dict):
        raise fail(f'expected a JSON object {{"version": 1, "partitions": [...]}}, found {_kind(document)}')
    unknown = sorted(set(document) - {"version", "partitions"})
    if unknown:
        raise fail(f"unknown key {json.dumps(unknown[0])} at the top level (expected \"version\" and \"partitions\")")
    if "version" in document:
        version = document["version"]
        if isinstance(version, bool) or version != DOCUMENT_VERSION:
            raise fail(f'"version" must be {DOCUMENT_VERSION}, not {_kind(version)}')
    if "partitions" not in document:
        raise fail('missing key "partitions" (the list of moves)')
    entries = document["partitions"]
    if not isinstance(entries, list):
        raise fail(f'"partitions" must be a list, not {_kind(entries)}')
    if not entries:
        raise fail('"partitions" is empty: nothing to move')

    moves: list[PlannedMove] = []
    seen: dict[tuple[str, int], int] = {}
    for index, entry in enumerate(entries):
        where = f"partitions[{index}]"
        if not isinstance(entry, dict):
            raise fail(f"{where} must be an object with {', '.join(_ENTRY_KEYS)}, not {_kind(entry)}")
        topic, partition = entry.get("topic"), entry.get("partition")
        if isinstance(topic, str) and isinstance(partition, int) and not isinstance(partition, bool):
            where += f" ({topic}-{partition})"
        for key in _ENTRY_KEYS:
            if key not in entry:
                raise fail(f'{where}: missing key "{key}"')
        extra = sorted(set(entry) - set(_ENTRY_KEYS))
        if extra:
            hint = " (this command moves replicas within one broker: one log_dir per partition)" \
                if extra[0] in ("log_dirs", "replicas") else ""
            raise fail(f'{where}: unknown key "{extra[0]}"{hint}')
        if not isinstance(topic, str):
            raise fail(f'{where}: "topic" must be a string, not {_kind(topic)}')
        if not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
            raise fail(f'{where}: "topic" {json.dumps(topic)} is not a Kafka topic name '
                       "(letters, digits, '.', '_', '-'; 1 to 249 characters)")
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise fail(f'{where}: "partition" must be an integer, not {_kind(partition)}')
        if not 0 <= partition < 1 << 31:
            raise fail(f'{where}: "partition" must be between 0 and 2147483647, not {partition}')
        log_dir = entry["log_dir"]
        if not isinstance(log_dir, str):
            raise fail(f'{where}: "log_dir" must be a string, not {_kind(log_dir)}')
        if not log_dir.startswith("/"):
            what = "empty" if not log_dir else f"{json.dumps(log_dir)}, a relative path" \
                if log_dir != "any" else '"any", which names no dir'
            raise fail(f'{where}: "log_dir" must be an absolute path (starting with "/"), not {what}')
        if "\0" in log_dir:
            raise fail(f'{where}: "log_dir" contains a NUL character')
        tp = (topic, partition)
        if tp in seen:
            raise fail(f"{where} repeats partitions[{seen[tp]}]: {topic}-{partition} is listed twice")
        seen[tp] = index
        moves.append(PlannedMove(topic, partition, log_dir))
    return moves


# ================================================================================================ throttle

class ThrottleGuard:
    """Sets the intra-broker throttle of one broker and later removes it, or restores what was there before.

    Only the per-broker dynamic value is touched: a cluster-wide default (dynamic, for every broker) or the
    static value in server.properties applies again as soon as the per-broker value is deleted.
    """

    def __init__(self, admin: AdminClient, broker_id: int, rate: int) -> None:
        self.admin = admin
        self.broker_id = broker_id
        self.rate = rate
        self.previous: str | None = None  # the per-broker dynamic value before ours; None: there was none
        self.installed = False  # release() has work to do: our value may be on the broker
        self.confirmed = False  # the broker said it took our value

    @property
    def _resource(self) -> Any:
        from kjbod.admin import ConfigResource

        return ConfigResource.broker(self.broker_id)

    async def _per_broker_value(self) -> str | None:
        from kjbod.admin import ConfigSource

        configs = await self.admin.describe_configs([self._resource], keys=[THROTTLE_KEY])
        entry = configs[self._resource].get(THROTTLE_KEY)
        if entry is None or entry.source != ConfigSource.DYNAMIC_BROKER_CONFIG:
            return None
        return entry.value

    async def install(self) -> None:
        self.previous = await self._per_broker_value()
        # From the moment the change is sent it may apply, even if its answer never arrives (Ctrl-C, a lost
        # connection): release() must run from here on, and it checks what the broker really has.
        self.installed = True
        await self.admin.incremental_alter_configs({self._resource: {THROTTLE_KEY: str(self.rate)}})
        self.confirmed = True

    def describe_previous(self) -> str:
        if self.previous is None:
            return "no per-broker throttle was set"
        return f"the per-broker throttle was {_rate_text(self.previous)}"

    async def release(self) -> str:
        """Undoes `install`; returns a sentence saying what happened.  Raises if the broker cannot be told."""
        if not self.installed:
            return ""
        now = await self._per_broker_value()
        if now != str(self.rate):
            self.installed = False
            if not self.confirmed:
                return ""  # our change never took effect: nothing to undo
            return (f"The throttle on broker {self.broker_id} was changed to "
                    f"{_rate_text(now) if now is not None else 'its default'} while the moves ran; left as it is.")
        change = {THROTTLE_KEY: self.previous}  # None deletes the per-broker value
        await self.admin.incremental_alter_configs({self._resource: change})
        self.installed = False
        if self.previous is None:
            return f"Throttle removed from broker {self.broker_id}."
        return f"Throttle on broker {self.broker_id} restored to {_rate_text(self.previous)}."

    def manual_fix(self, bootstrap: str) -> str:
        """The command that does by hand what `release` could not."""
        if self.previous is None:
            action = f"--delete-config {THROTTLE_KEY}"
        else:
            action = f"--add-config {THROTTLE_KEY}={self.previous}"
        return (f"kafka-configs.sh --bootstrap-server {bootstrap} --entity-type brokers "
                f"--entity-name {self.broker_id} --alter {action}")


def _rate_text(value: str | int) -> str:
    try:
        number = int(value)
    except ValueError:
        return str(value)
    return f"{human_rate(number)} ({number} bytes/s)"


# ================================================================================================ tracking

WAITING, COPYING, DONE, FAILED, STOPPED = "waiting", "copying", "done", "failed", "stopped"


@dataclass(slots=True)
class MoveState:
    """What is known about one move: its state, and the sizes and lag DescribeLogDirs reported last."""

    move: PlannedMove
    source_dir: str | None = None
    state: str = WAITING
    error: str | None = None
    size: int = 0  # the current replica's size (what has to be copied)
    copied: int = 0  # the future replica's size (what has been)
    offset_lag: int | None = None
    seen_future: bool = False
    missing_polls: int = 0
    started_at: float = 0.0
    finished_at: float | None = None
    watch: ConvergenceWatch | None = None  # is the copy gaining on the source? (made at the first copying poll)

    @property
    def active(self) -> bool:
        return self.state in (WAITING, COPYING)


@dataclass
class MoveTracker:
    """Turns successive DescribeLogDirs answers into per-move states and overall progress."""

    broker_id: int
    states: dict[tuple[str, int], MoveState] = field(default_factory=dict)

    def add(self, move: PlannedMove, state: str = WAITING, *, source_dir: str | None = None,
            error: str | None = None, now: float = 0.0) -> MoveState:
        entry = MoveState(move, source_dir=source_dir, state=state, error=error, started_at=now,
                          finished_at=now if state in (DONE, FAILED) else None)
        self.states[(move.topic, move.partition)] = entry
        return entry

    @property
    def active(self) -> list[MoveState]:
        return [s for s in self.states.values() if s.active]

    def replicas(self) -> list[tuple[str, int, int]]:
        return [(s.move.topic, s.move.partition, self.broker_id) for s in self.active]

    def observe(self, info: ReplicaLogDirInfo, entry: MoveState, now: float) -> str | None:
        """Applies one replica's DescribeLogDirs state; returns the new state if it just changed to a final one."""
        target = entry.move.log_dir
        if info.current_size is not None:
            entry.size = info.current_size
        if info.current_dir == target and info.future_dir is None:
            entry.state, entry.copied, entry.offset_lag = DONE, entry.size, None
        elif info.future_dir == target:
            entry.state, entry.seen_future, entry.missing_polls = COPYING, True, 0
            entry.copied = min(info.future_size or 0, entry.size)
            entry.offset_lag = info.future_offset_lag
            if info.future_size is not None:
                if entry.watch is None:  # the broker's judgement, from the same figures
                    from kjbod.broker.kip113.convergence import ConvergenceWatch

                    entry.watch = ConvergenceWatch()
                entry.watch.observe(now, info.future_size, entry.size, info.future_size)
            return None
        elif info.future_dir is not None:
            entry.state = STOPPED
            entry.error = f"the broker is now moving it to {info.future_dir} instead (another request redirected it)"
        elif info.current_dir is None:
            entry.state = STOPPED
            entry.error = (f"broker {self.broker_id} no longer reports this replica "
                           "(topic deleted, or its log dir went offline)")
        elif entry.seen_future:
            entry.missing_polls += 1
            if entry.missing_polls < STOPPED_AFTER_POLLS:
                return None
            entry.state = STOPPED
            entry.error = (f"the broker stopped this move; the replica stays in {info.current_dir} "
                           "(cancelled by another request, or the copy failed: see the broker's log)")
        else:
            return None  # accepted, not started yet: the broker runs a few moves at a time
        entry.finished_at = now
        return entry.state

    def snapshot(self) -> Snapshot:
        live = [s for s in self.states.values() if s.state in (WAITING, COPYING, DONE)]
        lags = [s.offset_lag for s in live if s.state == COPYING and s.offset_lag is not None]
        extra = f"offset lag {sum(lags)}" if lags else ""
        waiting = sum(1 for s in live if s.state == WAITING)
        if waiting:
            extra = ", ".join(p for p in (extra, f"{waiting} not started") if p)
        stuck = [f"{s.move.name} {s.watch.state.describe(human_rate)}"
                 for s in live if s.state == COPYING and s.watch is not None and s.watch.state is not None]
        if stuck:
            extra = ", ".join(p for p in (extra, *stuck) if p)
        return Snapshot(
            done_bytes=sum(s.copied for s in live), total_bytes=sum(s.size for s in live),
            done_items=sum(1 for s in live if s.state == DONE), total_items=len(live), extra=extra)


# ================================================================================================ move

def _explain(error: KafkaError, move: PlannedMove, broker_id: int, dirs: list[str]) -> str:
    from kjbod.admin import ErrorCode

    code = error.code
    name = code.name if isinstance(code, ErrorCode) else f"error {code}"
    if code == ErrorCode.LOG_DIR_NOT_FOUND:
        known = ", ".join(dirs) if dirs else "none reported"
        return f"{name}: {move.log_dir} is not a log dir of broker {broker_id} (its log dirs: {known})"
    if code == ErrorCode.KAFKA_STORAGE_ERROR:
        return (f"{name}: the target log dir or the replica's current log dir is offline, or the target does not "
                "answer (see kjbod log-dirs describe)")
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return f"{name}: broker {broker_id} knows no partition {move.name}"
    if code == ErrorCode.REPLICA_NOT_AVAILABLE:
        return (f"{name}: broker {broker_id} does not host a replica of {move.name} (it will create it in "
                f"{move.log_dir} if the replica is assigned to it later)")
    if code == ErrorCode.INELIGIBLE_REPLICA:
        return (f"{name}: {move.log_dir} is cordoned on broker {broker_id} (cordoned.log.dirs): it takes no new "
                "replicas; moves out of it are allowed")
    if code == ErrorCode.INVALID_TOPIC_EXCEPTION:
        return f"{name}: the topic name is too long for the future replica's directory name"
    return str(error)


def _move_command(args: argparse.Namespace) -> int:
    if args.assignment == "-":
        text = sys.stdin.read()
        source = "<stdin>"
    else:
        with open(args.assignment, encoding="utf-8") as f:
            text = f.read()
        source = args.assignment
    moves = parse_assignment(text, source)
    return _run_async(_move(args, moves, sys.stdout, sys.stderr))


async def _move(args: argparse.Namespace, moves: list[PlannedMove], stdout: TextIO, stderr: TextIO) -> int:
    from kjbod.admin import KafkaError, TopicPartitionReplica

    def say(text: str) -> None:
        stdout.write(text + "\n")
        stdout.flush()

    def complain(text: str) -> None:
        stdout.flush()
        stderr.write(f"kjbod: error: {text}\n")
        stderr.flush()

    broker_id = args.broker

    def replica(m: PlannedMove) -> TopicPartitionReplica:
        return TopicPartitionReplica(m.topic, m.partition, broker_id)

    wait = args.wait or args.throttle is not None
    loop = asyncio.get_running_loop()
    tracker = MoveTracker(broker_id)
    async with _admin(args) as admin:
        try:
            described = await admin.describe_log_dirs([broker_id], [])
            before = await admin.describe_replica_log_dirs([replica(m) for m in moves])
        except KafkaError as e:
            raise UserError(f"broker {broker_id}: {e}") from None
        dirs = [d.path for d in described[broker_id]]
        guard = ThrottleGuard(admin, broker_id, args.throttle) if args.throttle is not None else None
        interrupted = False
        try:
            if guard is not None:
                try:
                    await guard.install()
                except KafkaError as e:
                    raise UserError(f"could not set the throttle on broker {broker_id}: {e}") from None
                say(f"Throttle on broker {broker_id} set to {_rate_text(guard.rate)} for these moves "
                    f"({guard.describe_previous()}).")
            try:
                results = await admin.alter_replica_log_dirs({replica(m): m.log_dir for m in moves})
            except KafkaError as e:
                raise UserError(f"broker {broker_id}: {e}") from None
            now = loop.time()
            say(f"Broker {broker_id}: {len(moves)} replica{'s' if len(moves) != 1 else ''} to place.")
            for m in moves:
                result, info = results[replica(m)], before[replica(m)]
                if result.error is not None:
                    tracker.add(m, FAILED, error=_explain(result.error, m, broker_id, dirs), now=now)
                    complain(f"{m.name} -> {m.log_dir}: {tracker.states[(m.topic, m.partition)].error}")
                elif info.current_dir == m.log_dir:
                    entry = tracker.add(m, DONE, source_dir=info.current_dir, now=now)
                    entry.size = entry.copied = info.current_size or 0
                    cancelled = f" (cancelled the move to {info.future_dir})" if info.future_dir else ""
                    say(f"  {m.name}: already in {m.log_dir}{cancelled}")
                else:
                    entry = tracker.add(m, WAITING, source_dir=info.current_dir, now=now)
                    entry.size = info.current_size or 0
                    resumed = " (already moving there)" if info.future_dir == m.log_dir else ""
                    say(f"  {m.name}: {info.current_dir} -> {m.log_dir} ({human_bytes(entry.size)}){resumed}")
            if tracker.active and wait:
                await _follow(admin, tracker, args, stdout, stderr)
            elif tracker.active:
                say(f"The moves run in the background. Follow them with `kjbod log-dirs describe "
                    f"--bootstrap-server {args.bootstrap_server} --broker-list {broker_id}`, or run this "
                    "command again with --wait.")
        except asyncio.CancelledError:
            interrupted = True
            raise
        finally:
            if interrupted:
                left = len(tracker.active)
                say(f"Interrupted: {left} move{'s' if left != 1 else ''} still running on broker {broker_id} "
                    "(they go on; to cancel one, move it back to its current log dir).")
            if guard is not None and guard.installed:
                try:
                    message = await guard.release()
                    if message:
                        say(message)
                except (KafkaError, OSError) as e:
                    complain(f"could not remove the throttle from broker {broker_id} ({e}); remove it with: "
                             f"{guard.manual_fix(args.bootstrap_server)}")
    return _summary(tracker, say)


async def _follow(admin: AdminClient, tracker: MoveTracker, args: argparse.Namespace, stdout: TextIO,
                  stderr: TextIO) -> None:
    """Polls DescribeLogDirs until no move of ours is waiting or copying, drawing progress as it goes."""
    from kjbod.admin import KafkaError

    loop = asyncio.get_running_loop()
    progress = Progress(stdout, label="moving", item_name="moves", interval=args.report_interval,
                        clock=loop.time)
    idle_since: float | None = None
    explained_waiting = False
    try:
        while True:
            wanted = tracker.replicas()
            if not wanted:
                break
            try:
                infos = await admin.describe_replica_log_dirs(wanted)
            except KafkaError as e:
                # One failed poll (a broker restart, a slow answer) is not the end of the moves: say so, go on.
                progress.note(f"could not read progress from broker {tracker.broker_id}: {e}; retrying")
                await asyncio.sleep(POLL_INTERVAL * 4)
                continue
            now = loop.time()
            for replica, info in infos.items():
                entry = tracker.states[(replica.topic, replica.partition)]
                final = tracker.observe(info, entry, now)
                if final == DONE:
                    took = human_duration(now - entry.started_at)
                    progress.note(f"  done: {entry.move.name} is in {entry.move.log_dir} "
                                  f"({human_bytes(entry.size)} in {took})")
                elif final is not None:
                    progress.note(f"kjbod: error: {entry.move.name} -> {entry.move.log_dir}: {entry.error}",
                                  stderr)
            progress.update(tracker.snapshot())
            copying = any(s.state == COPYING for s in tracker.states.values())
            if copying or not tracker.active:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif not explained_waiting and now - idle_since >= WAITING_NOTE_AFTER:
                explained_waiting = True
                progress.note("  waiting: the broker has not started these moves yet; it runs "
                              "num.replica.alter.log.dirs.threads moves at a time, and others may be ahead")
            if tracker.active:
                await asyncio.sleep(POLL_INTERVAL)
    finally:
        progress.close()


def _summary(tracker: MoveTracker, say: Callable[[str], None]) -> int:
    states = list(tracker.states.values())
    done = [s for s in states if s.state == DONE]
    bad = [s for s in states if s.state in (FAILED, STOPPED)]
    running = [s for s in states if s.active]
    parts = [f"{len(done)} of {len(states)} in place"]
    if running:
        parts.append(f"{len(running)} still moving")
    if bad:
        parts.append(f"{len(bad)} failed")
    spans = [(s.started_at, s.finished_at, s.size) for s in done
             if s.finished_at is not None and s.finished_at > s.started_at]
    if spans:
        seconds = max(end for _, end, _ in spans) - min(start for start, _, _ in spans)
        size = sum(size for _, _, size in spans)
        rate = f", {human_rate(size / seconds)}" if seconds > 0 else ""
        parts.append(f"moved {human_bytes(size)} in {human_duration(seconds)}{rate}")
    say("Summary: " + "; ".join(parts) + ".")
    if bad:
        say("Failed: " + ", ".join(f"{s.move.name}" for s in bad) + " (errors above).")
        return EXIT_FAILED
    return 0


# ================================================================================================ plumbing

class _AdminContext:
    """`async with _admin(args) as admin`: an AdminClient whose connection problems are one-line user errors (every
    kjbod command that talks to a cluster opens its client this way)."""

    def __init__(self, args: argparse.Namespace, client_id: str, timeout: float) -> None:
        from kjbod.admin import AdminClient

        try:
            self.client = AdminClient(args.bootstrap_server, request_timeout=timeout,
                                      connect_timeout=min(timeout, 10.0), client_id=client_id,
                                      **admin_options(args))
        except ValueError as e:
            raise UserError(f"--bootstrap-server: {e}") from None

    async def __aenter__(self) -> AdminClient:
        from kjbod.admin import KafkaError

        try:
            await self.client.start()
        except KafkaError as e:
            await self.client.close()
            raise UserError(f"cannot reach the cluster: {e}") from None
        return self.client

    async def __aexit__(self, *exc_info: object) -> None:
        await self.client.close()


def _admin(args: argparse.Namespace, client_id: str = "kjbod-log-dirs", timeout: float | None = None
           ) -> _AdminContext:
    """`timeout`: each request's, retries included (default: the command's --timeout)."""
    return _AdminContext(args, client_id, args.timeout if timeout is None else timeout)


def _run_async(coro: Awaitable[int]) -> int:
    """Runs the command's coroutine; Ctrl-C and SIGTERM cancel it, so its cleanup (the throttle) still runs."""
    terminated = False

    async def main() -> int:
        nonlocal terminated
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            if task is not None:
                task.cancel()

        installed = False
        try:
            loop.add_signal_handler(signal.SIGTERM, on_sigterm)
            installed = True
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or no signal support: SIGTERM keeps its default meaning
        try:
            return await coro
        finally:
            if installed:
                loop.remove_signal_handler(signal.SIGTERM)

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if terminated:
            return EXIT_TERMINATED
        raise

