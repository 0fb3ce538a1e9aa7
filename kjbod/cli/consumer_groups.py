"""`kjbod consumer-groups`: kafka-consumer-groups.sh's actions, option rules, tables and messages, over kjbod's
admin client.

Strategy: parse, then check the options with Kafka's rules and Kafka's messages before connecting (exactly one
action; --describe takes --group or --all-groups and at most one of --members/--offsets/--state; one reset
scenario; ...).  Then one admin call per kind of question, for all the groups at once: ListGroups (every broker),
DescribeGroups and OffsetFetch (each group's coordinator), ListOffsets (each partition's leader).  The tables are
built by pure functions (`offsets_table`, `members_table`, `state_table`, `reset_table`, `list_table`) from plain
rows, with the tool's columns, widths and "-" for a missing value, so they are tested without a cluster.  A reset's plan can be printed as CSV (--export) and applied from such a
file (--from-file), clamped to the logs like every other reset.

Streams and exit codes: tables and the tool's "Error: ..." lines go to standard output as the Kafka tool prints
them, its notices (a group with no active members, one that is rebalancing, the reset --dry-run warning) to
standard error.  An option mistake is `kjbod: error: <Kafka's message>` and exit code 2, as for every kjbod
command (Kafka's tool exits 1); a group that does not exist, cannot be reset or deleted, or a failed call
exits 1 (Kafka's tool prints the error and exits 0; a script wants to know).  `--json` prints the data of
--list and --describe as one JSON document instead of the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from kjbod.cli.command_config import add_command_config, admin_options
from kjbod.cli.main import UserError

if TYPE_CHECKING:
    from kjbod.admin import AdminClient, GroupDescription

__all__ = [
    "add_subcommand",
    "check_args",
    "list_table",
    "members_table",
    "offsets_table",
    "parse_datetime",
    "parse_duration",
    "parse_reset_plan",
    "parse_topic_partitions",
    "reset_table",
    "state_table",
]

EXIT_FAILED = 1
MISSING = "-"
DEFAULT_TIMEOUT_MS = 5000
STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
TYPES = ("Consumer", "Classic", "Share")
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_offset", "shift_by", "to_datetime", "by_duration", "to_earliest", "to_latest", "to_current",
             "from_file")
DRY_RUN_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. In a future major release, the default "
    "behavior of this command will be to prompt the user before executing the reset rather than doing a dry run. "
    "You should add the --dry-run option explicitly if you are scripting this command and want to keep the current "
    "default behavior without prompting.")


def add_subcommand(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "consumer-groups", help="list, describe, delete consumer groups and reset their offsets "
                                "(kafka-consumer-groups.sh)",
        description="kafka-consumer-groups.sh's actions over kjbod's admin client: --list, --describe (offsets and "
                    "lag, --members, --state), --delete, --delete-offsets and --reset-offsets (--dry-run or "
                    "--execute), with the Kafka tool's options, tables and messages.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                   help="the server(s) to connect to (comma-separated)")
    add_command_config(p)
    p.add_argument("--timeout", metavar="MS", type=_non_negative_int, default=None,
                   help=f"how long each call may take, in ms (default: {DEFAULT_TIMEOUT_MS})")
    actions = p.add_argument_group("actions (exactly one)")
    actions.add_argument("--list", action="store_true", help="list all consumer groups")
    actions.add_argument("--describe", action="store_true",
                         help="describe groups: committed offsets, log end offsets and lag per partition (default), "
                              "--members or --state")
    actions.add_argument("--delete", action="store_true", help="delete groups and their committed offsets")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="reset the committed offsets of inactive groups (--dry-run, the default, or --execute)")
    actions.add_argument("--delete-offsets", action="store_true",
                         help="delete a group's committed offsets of --topic T[:P,...]")
    scope = p.add_argument_group("scope")
    scope.add_argument("--group", metavar="GROUP", action="append", help="a consumer group (repeatable)")
    scope.add_argument("--all-groups", action="store_true", help="every consumer group")
    scope.add_argument("--topic", metavar="TOPIC[:P,...]", action="append",
                       help="a topic, or some of its partitions (repeatable), for --reset-offsets and "
                            "--delete-offsets")
    scope.add_argument("--all-topics", action="store_true",
                       help="every partition the group has an offset for (--reset-offsets)")
    describe = p.add_argument_group("--describe and --list")
    describe.add_argument("--offsets", action="store_true", help="partitions with offsets and lag (the default)")
    describe.add_argument("--members", action="store_true", help="the members, with --verbose their partitions")
    describe.add_argument("--verbose", action="store_true", help="more detail (--members: the assignment)")
    describe.add_argument("--state", metavar="STATES", nargs="?", const="", default=None,
                          help="--describe: the group's coordinator, assignor, state and member count; "
                               "--list: the state column, or only groups in STATES (comma-separated)")
    describe.add_argument("--type", metavar="TYPES", nargs="?", const="", default=None,
                          help="--list: the type column, or only groups of TYPES (classic, consumer)")
    describe.add_argument("--json", action="store_true", help="--list/--describe: print one JSON document")
    reset = p.add_argument_group("--reset-offsets")
    reset.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.add_argument("--export", action="store_true", help="print the plan as CSV (topic,partition,offset; "
                                                              "group first with several groups)")
    reset.add_argument("--to-offset", metavar="N", type=int, help="to offset N")
    reset.add_argument("--shift-by", metavar="N", type=int, help="the committed offset plus N (N may be negative)")
    reset.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                       help="to the first offset at or after this time (UTC unless it ends in Z or +hh:mm)")
    reset.add_argument("--by-duration", metavar="PnDTnHnMnS",
                       help="to the first offset at or after this long ago (ISO-8601 duration)")
    reset.add_argument("--to-earliest", action="store_true", help="to the log start offset")
    reset.add_argument("--to-latest", action="store_true", help="to the log end offset")
    reset.add_argument("--to-current", action="store_true",
                       help="to the committed offset (the log end offset where there is none)")
    reset.add_argument("--from-file", metavar="CSV",
                       help="to the offsets in a CSV file (what --export prints: topic,partition,offset, or "
                            "group,topic,partition,offset)")
    p.set_defaults(func=_command)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of ms") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


# ================================================================================================ option rules

def _names(*opts: str) -> str:
    return ", ".join(f"[{o}]" for o in opts)


def check_args(args: argparse.Namespace) -> None:
    """Kafka's option rules, in its order, with its messages; UserError for the first one broken."""
    has = {name: bool(getattr(args, name.replace("-", "_"))) or (
        name in ("state", "type") and getattr(args, name) is not None) for name in (
        "list", "describe", "delete", "reset-offsets", "delete-offsets", "group", "all-groups", "topic",
        "all-topics", "members", "verbose", "offsets", "state", "type", "dry-run", "execute", "export",
        "to-earliest", "to-latest", "to-current")}
    for name in ("to-offset", "shift-by", "to-datetime", "by-duration", "from-file"):
        has[name] = getattr(args, name.replace("-", "_")) is not None
    # Options that only make sense with one action (Kafka's parser refuses them otherwise).
    for name, allowed in (("members", ("describe",)), ("verbose", ("describe",)), ("offsets", ("describe",)),
                          ("state", ("describe", "list")), ("type", ("list",))):
        if has[name] and not any(has[a] for a in allowed):
            raise UserError(f"Option(s) [{name}] are unavailable given other options on the command line")
    if args.json and not (args.list or args.describe):
        raise UserError("Option [json] can only be used with [list] or [describe]")
    if has["describe"]:
        if not has["group"] and not has["all-groups"]:
            raise UserError(f"Option [describe] takes one of these options: {_names('group', 'all-groups')}")
        if sum(has[o] for o in ("members", "offsets", "state")) > 1:
            raise UserError("Option [describe] takes at most one of these options: "
                            + _names("members", "offsets", "state"))
        if args.state:
            raise UserError("Option [describe] does not take a value for [state]")
    if has["delete"]:
        if not has["group"] and not has["all-groups"]:
            raise UserError(f"Option [delete] takes one of these options: {_names('group', 'all-groups')}")
        if has["topic"]:
            raise UserError("The consumer does not support topic-specific offset deletion from a consumer group.")
    if has["delete-offsets"] and (not has["group"] or not has["topic"]):
        raise UserError(f"Option [delete-offsets] takes the following options: {_names('group', 'topic')}")
    if has["reset-offsets"]:
        if has["dry-run"] and has["execute"]:
            raise UserError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not has["group"] and not has["all-groups"]:
            raise UserError(f"Option [reset-offsets] takes one of these options: {_names('group', 'all-groups')}")
        scenarios = [s.replace("_", "-") for s in SCENARIOS if has[s.replace("_", "-")]]
        if len(scenarios) > 1:
            raise UserError(f'Option "[{scenarios[0]}]" can\'t be used with option "[{scenarios[1]}]"')
    for used, others in (("group", ("all-groups", "list")), ("topic", ("list", "describe"))):
        if has[used]:
            for other in others:
                if has[other]:
                    raise UserError(f'Option "[{used}]" can\'t be used with option "[{other}]"')
    if sum(has[a.replace("_", "-")] for a in ACTIONS) != 1:
        raise UserError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                        "--delete-offsets")


def _states(text: str | None) -> list[str]:
    if not text:
        return []
    by_key = {s.upper(): s for s in STATES}
    out = []
    for item in text.split(","):
        state = by_key.get(item.strip().upper())
        if state is None:
            raise UserError(f"Invalid state list '{text}'. Valid states are: {', '.join(STATES)}")
        out.append(state)
    return out


def _types(text: str | None) -> list[str]:
    if not text:
        return []
    by_key = {t.lower(): t for t in TYPES}
    out = []
    for item in text.lower().split(","):
        kind = by_key.get(item.strip())
        if kind is None:
            raise UserError(f"Invalid types list '{text}'. Valid types are: {', '.join(TYPES)}")
        out.append(kind)
    return out


def parse_topic_partitions(arg: str) -> tuple[str, list[int] | None]:
    """`topic` -> (topic, None); `topic:0,1,2` -> (topic, [0, 1, 2]); UserError with Kafka's message."""
    if ":" not in arg:
        return arg, None
    parts = arg.split(":")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise UserError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    partitions = []
    for text in parts[1].split(","):
        try:
            partitions.append(int(text))
        except ValueError:
            raise UserError(f"Invalid partition '{text}' specified in topic arg '{arg}'") from None
    return parts[0], partitions


_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_datetime(text: str) -> int:
    """`YYYY-MM-DDTHH:mm:SS.sss`, optionally with `Z` or an offset (`+01:00`, `+0100`, `+01`), in ms since the
    epoch; without an offset the time is UTC, as Kafka reads it.  UserError naming the expected form."""
    if "T" not in text:
        raise UserError(f"Error parsing timestamp '{text}': it does not contain a 'T' according to ISO8601 "
                        "format (expected YYYY-MM-DDTHH:mm:SS.sss)")
    m = _DATETIME.fullmatch(text)
    if m is None:
        raise UserError(f"Unparseable date: '{text}' (expected YYYY-MM-DDTHH:mm:SS.sss, optionally with Z or "
                        "+hh:mm)")
    year, month, day, hour, minute, second, millis = (int(g) for g in m.groups()[:7])
    zone = m.group(8) or "Z"
    offset = timedelta(0)
    if zone != "Z":
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        if zone[0] == "-":
            offset = -offset
    try:
        moment = datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=timezone(offset))
    except ValueError as e:
        raise UserError(f"Unparseable date: '{text}' ({e})") from None
    return int(moment.timestamp() * 1000)


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
                       re.IGNORECASE)


def parse_duration(text: str) -> timedelta:
    """An ISO-8601 duration as Java's Duration.parse reads it: PnDTnHnMn.nS (days, hours, minutes, seconds,
    each optional and signed, a leading sign for the whole)."""
    m = _DURATION.fullmatch(text)
    if m is None or not any(m.group(i) for i in range(2, 6)) or text.upper().endswith("T"):
        raise UserError(f"Text cannot be parsed to a Duration: '{text}' (expected PnDTnHnMnS, e.g. PT1H30M)")
    sign, days, hours, minutes, seconds, fraction = m.groups()
    total = timedelta(days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0),
                      seconds=int(seconds or 0))
    if fraction:
        nanos = int(fraction.ljust(9, "0"))
        total += timedelta(microseconds=(-1 if (seconds or "").startswith("-") else 1) * nanos / 1000)
    return -total if sign == "-" else total


# ================================================================================================ tables

@dataclass(frozen=True, slots=True)
class OffsetRow:
    """One line of --describe --offsets: None prints as "-"."""

    group: str
    topic: str | None
    partition: int | None
    offset: int | None
    log_end_offset: int | None
    consumer_id: str
    host: str
    client_id: str

    @property
    def lag(self) -> int | None:
        if self.offset is None or self.offset == -1 or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.offset


def _text(value: object) -> str:
    return MISSING if value is None else str(value)


def _line(widths: Sequence[int], values: Sequence[object]) -> str:
    """Java's printf("%-w1s %-w2s ... %s"): the first len(widths) values left-aligned in their widths, the rest
    as they are, all separated by one space."""
    cells = [_text(v) for v in values]
    return " ".join([c.ljust(w) for c, w in zip(cells, widths, strict=False)] + cells[len(widths):])


def offsets_table(rows: Sequence[OffsetRow]) -> str:
    """The table --describe prints for one group: a blank line, the header, one line per row."""
    group_w = max([15] + [len(r.group) for r in rows])
    topic_w = max([15] + [len(_text(r.topic)) for r in rows])
    consumer_w = max([15] + [len(r.consumer_id) for r in rows])
    host_w = max([15] + [len(r.host) for r in rows])
    widths = (group_w, topic_w, 10, 15, 15, 15, consumer_w, host_w)
    lines = ["", _line(widths, ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"))]
    lines += [_line(widths, (r.group, r.topic, r.partition, r.offset, r.log_end_offset, r.lag, r.consumer_id,
                             r.host, r.client_id)) for r in rows]
    return "\n".join(lines) + "\n"


def _assignment_text(partitions: Iterable[tuple[str, int]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    if not by_topic:
        return MISSING
    return ", ".join(sorted(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in by_topic.items()))


def members_table(group: str, members: Sequence[Any], verbose: bool) -> str:
    """--describe --members for one group: GROUP CONSUMER-ID [GROUP-INSTANCE-ID] HOST CLIENT-ID #PARTITIONS
    [ASSIGNMENT]; `members` are MemberDescription."""
    with_instance = any(m.group_instance_id for m in members)
    group_w = max([15, len(group)])
    consumer_w = max([15] + [len(m.member_id) for m in members])
    instance_w = max([17] + [len(m.group_instance_id or "") for m in members])
    host_w = max([15] + [len(m.host) for m in members])
    client_w = max([15] + [len(m.client_id) for m in members])
    widths = [group_w, consumer_w] + ([instance_w] if with_instance else []) + [host_w, client_w, 15]
    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
        ["HOST", "CLIENT-ID", "#PARTITIONS"]

    def line(values: list[object], tail: str) -> str:
        return "".join(_text(v).ljust(w) + " " for v, w in zip(values, widths, strict=True)) + tail

    lines = ["", line(list(header), "ASSIGNMENT" if verbose else "")]
    for m in members:
        assignment = m.assignment or ()
        values: list[object] = [group, m.member_id] + ([m.group_instance_id or ""] if with_instance else []) + \
            [m.host, m.client_id, len(assignment)]
        lines.append(line(values, _assignment_text(assignment) if verbose else ""))
    return "\n".join(lines) + "\n"


def state_table(group: str, coordinator: str, assignor: str, state: str, members: int) -> str:
    """--describe --state for one group (Kafka sizes the first column by the coordinator's text)."""
    widths = (max(25, len(coordinator)), 25, 20, 15)
    return "\n" + _line(widths, ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")) + \
        "\n" + _line(widths, (group, coordinator, assignor, state, members)) + "\n"


def list_table(listings: Sequence[Any], with_type: bool, with_state: bool) -> str:
    """--list with --state/--type: GROUP [TYPE] [STATE]; `listings` are GroupListing."""
    width = max([15] + [len(g.group_id) for g in listings]) + 10
    widths = [width] + [20] * (int(with_type) + int(with_state))

    def line(values: list[str]) -> str:
        return " ".join(v.ljust(w) for v, w in zip(values, widths, strict=True))

    header = ["GROUP"] + (["TYPE"] if with_type else []) + (["STATE"] if with_state else [])
    lines = [line(header)]
    for g in listings:
        lines.append(line([g.group_id] + ([(g.type or "Unknown").capitalize()] if with_type else [])
                          + ([g.state or "Unknown"] if with_state else [])))
    return "\n".join(lines) + "\n"


def reset_table(plan: dict[str, dict[tuple[str, int], int]]) -> str:
    """--reset-offsets: GROUP TOPIC PARTITION NEW-OFFSET, each group's partitions in order."""
    widths = (30, 30, 10, 15)
    out = ""
    if plan:
        out += "\n" + _line(widths, ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"))
    for group in sorted(plan):
        for (topic, partition), offset in sorted(plan[group].items()):
            out += "\n" + _line(widths, (group, topic, partition, offset))
    return out + "\n"


def parse_reset_plan(text: str, single_group: str | None) -> dict[str, dict[tuple[str, int], int]]:
    """A --from-file plan: `topic,partition,offset` lines for the one --group given, else
    `group,topic,partition,offset` lines (what --export prints); UserError naming the bad line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    no_group = single_group is not None and bool(lines) and len(lines[0].split(",")) == 3
    plan: dict[str, dict[tuple[str, int], int]] = {}
    for number, line in enumerate(lines, 1):
        fields = line.split(",")
        try:
            if no_group:
                topic, partition, offset = fields
                group = single_group
            else:
                group, topic, partition, offset = fields
            assert group is not None
            plan.setdefault(group, {})[(topic, int(partition))] = int(offset)
        except ValueError:
            expected = "topic,partition,offset" if no_group else "group,topic,partition,offset"
            raise UserError(f"--from-file line {number}: expected {expected}, got {line!r}") from None
    return plan


def _csv(plan: dict[str, dict[tuple[str, int], int]], with_group: bool) -> str:
    lines = []
    for group in sorted(plan):
        for (topic, partition), offset in sorted(plan[group].items()):
            lines.append(f"{group},{topic},{partition},{offset}" if with_group else f"{topic},{partition},{offset}")
    return "".join(line + "\n" for line in lines)


# ================================================================================================ the command

def _command(args: argparse.Namespace) -> int:
    check_args(args)
    states = _states(args.state) if args.list else []
    types = _types(args.type) if args.list else []
    if args.reset_offsets:
        if args.to_datetime is not None:
            args.reset_time_ms = parse_datetime(args.to_datetime)
        elif args.by_duration is not None:
            args.reset_time_ms = int((datetime.now(UTC) - parse_duration(args.by_duration)).timestamp()
                                     * 1000)
    for topic_arg in args.topic or ():
        parse_topic_partitions(topic_arg)  # refuse a bad --topic before connecting
    if args.reset_offsets and not args.dry_run and not args.execute:
        print(DRY_RUN_WARNING, file=sys.stderr)
    return asyncio.run(_run(args, states, types))


class _Failed(Exception):
    """The tool printed its error; the command ends with EXIT_FAILED."""


async def _run(args: argparse.Namespace, states: list[str], types: list[str]) -> int:
    from kjbod.admin import AdminClient, KafkaError

    timeout_ms = DEFAULT_TIMEOUT_MS if args.timeout is None else args.timeout
    timeout = max(timeout_ms, 1) / 1000
    try:
        client = AdminClient(args.bootstrap_server, request_timeout=timeout, connect_timeout=min(timeout, 10.0),
                             client_id="kjbod-consumer-groups", **admin_options(args))
    except ValueError as e:
        raise UserError(f"--bootstrap-server: {e}") from None
    tool = _Tool(client, args, timeout)
    try:
        try:
            await client.start()
        except KafkaError as e:
            raise UserError(f"cannot reach the cluster: {e}") from None
        try:
            if args.list:
                await tool.list_groups(states, types)
            elif args.describe:
                await tool.describe()
            elif args.delete:
                await tool.delete()
            elif args.reset_offsets:
                await tool.reset_offsets()
            else:
                await tool.delete_offsets()
        except KafkaError as e:
            _error(f"Executing consumer group command failed due to {e}")
            return EXIT_FAILED
    finally:
        await client.close()
    return EXIT_FAILED if tool.failed else 0


def _error(message: str) -> None:
    print(f"\nError: {message}", flush=True)


def _notice(message: str) -> None:
    sys.stdout.flush()
    print(f"\n{message}", file=sys.stderr, flush=True)


class _Tool:
    def __init__(self, client: AdminClient, args: argparse.Namespace, timeout: float) -> None:
        self.client = client
        self.args = args
        self.timeout = timeout
        self.failed = False

    # ---------------------------------------------------------------------------------------- helpers

    async def _consumer_groups(self) -> list[str]:
        """Consumer groups (protocol type "consumer", or "" for groups that only commit offsets), as Kafka's
        listConsumerGroups answers."""
        listed = await self.client.list_groups(timeout=self.timeout)
        return [g.group_id for g in listed if g.protocol_type in ("consumer", "")]

    async def _group_ids(self) -> list[str]:
        if self.args.all_groups:
            return await self._consumer_groups()
        return list(dict.fromkeys(self.args.group or ()))

    async def _log_offsets(self, partitions: Iterable[tuple[str, int]], spec: int) -> dict[tuple[str, int], int]:
        """Offsets of `partitions` for `spec` (ListOffsets); partitions without an answer are left out."""
        wanted = list(dict.fromkeys(partitions))
        if not wanted:
            return {}
        results = await self.client.list_offsets(dict.fromkeys(wanted, spec), raise_on_error=False,
                                                 timeout=self.timeout)
        return {tp: r.offset for tp, r in results.items() if r.error is None and r.offset is not None}

    async def _describe(self, group_ids: list[str]) -> dict[str, GroupDescription]:
        described = await self.client.describe_groups(group_ids, timeout=self.timeout)
        out = {}
        for gid in sorted(described):
            d = described[gid]
            if d.error is not None:
                _error(f"Executing consumer group command failed due to {d.error}")
                self.failed = True
            elif d.protocol_type not in ("consumer", ""):
                _error(f"GroupId {gid} is not a consumer group ({d.protocol_type}).")
                self.failed = True
            else:
                out[gid] = d
        return out

    def _should_print(self, group: str, state: str, rows: int) -> bool:
        """Kafka's notices about the group's state; whether there is a table to print."""
        if state == "Dead":
            _error(f"Consumer group '{group}' does not exist.")
            self.failed = True
            return False
        if state == "Empty":
            _notice(f"Consumer group '{group}' has no active members.")
        elif state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
            _notice(f"Warning: Consumer group '{group}' is rebalancing.")
        return rows > 0

    # ---------------------------------------------------------------------------------------- --list

    async def list_groups(self, states: list[str], types: list[str]) -> None:
        with_state, with_type = self.args.state is not None, self.args.type is not None
        if not (with_state or with_type):
            names = await self._consumer_groups()
            if self.args.json:
                print(json.dumps({"groups": [{"group": n} for n in names]}, indent=2))
            else:
                for name in names:
                    print(name)
            return
        # Kafka's names ("Stable", "Classic"), as Kafka's admin client sends them.
        listed = await self.client.list_groups(states=states, types=types, timeout=self.timeout)
        listed = [g for g in listed if g.protocol_type in ("consumer", "")]
        if self.args.json:
            print(json.dumps({"groups": [{"group": g.group_id, "type": (g.type or "unknown").capitalize(),
                                          "state": g.state} for g in listed]}, indent=2))
        else:
            sys.stdout.write(list_table(listed, with_type, with_state))

    # ---------------------------------------------------------------------------------------- --describe

    async def describe(self) -> None:
        groups = await self._describe(await self._group_ids())
        if self.args.members:
            self._print_members(groups)
        elif self.args.state is not None:
            self._print_states(groups)
        else:
            await self._print_offsets(groups)

    async def _print_offsets(self, groups: dict[str, GroupDescription]) -> None:
        committed = await self.client.list_group_offsets(list(groups), timeout=self.timeout) if groups else {}
        plans: dict[str, list[tuple[tuple[str, int], str, str, str]]] = {}
        for gid, d in groups.items():
            fetched = committed[gid]
            if fetched.error is not None:
                _error(f"Executing consumer group command failed due to {fetched.error}")
                self.failed = True
                continue
            rows: list[tuple[tuple[str, int], str, str, str]] = []
            assigned: set[tuple[str, int]] = set()
            members = sorted((m for m in d.members if m.assignment),
                             key=lambda m: len(m.assignment or ()), reverse=True)
            for m in members:
                for tp in sorted(m.assignment or (), key=lambda tp: (tp[1], tp[0])):
                    rows.append((tp, m.member_id, m.host, m.client_id))
                    assigned.add(tp)
            rows += [(tp, MISSING, MISSING, MISSING) for tp in sorted(fetched.offsets) if tp not in assigned]
            plans[gid] = rows
        ends = await self._log_offsets((tp for rows in plans.values() for tp, *_ in rows), -1)
        document = []
        for gid, rows in plans.items():
            offsets = committed[gid].offsets
            table = [OffsetRow(gid, tp[0], tp[1], offsets[tp].offset if tp in offsets else None, ends.get(tp),
                               consumer, host, client) for tp, consumer, host, client in rows]
            if self.args.json:
                document.append({"group": gid, "state": groups[gid].state, "partitions": [
                    {"topic": r.topic, "partition": r.partition, "current_offset": r.offset,
                     "log_end_offset": r.log_end_offset, "lag": r.lag,
                     "consumer_id": None if r.consumer_id == MISSING else r.consumer_id,
                     "host": None if r.host == MISSING else r.host,
                     "client_id": None if r.client_id == MISSING else r.client_id} for r in table]})
            elif self._should_print(gid, groups[gid].state, len(table)):
                sys.stdout.write(offsets_table(table))
        if self.args.json:
            self._json_missing(groups)
            print(json.dumps({"groups": document}, indent=2))

    def _json_missing(self, groups: dict[str, GroupDescription]) -> None:
        """In JSON a group that does not exist is shown as Dead; the exit code still says so."""
        if any(d.state == "Dead" for d in groups.values()):
            self.failed = True

    def _print_members(self, groups: dict[str, GroupDescription]) -> None:
        if self.args.json:
            self._json_missing(groups)
            print(json.dumps({"groups": [{"group": gid, "state": d.state, "members": [
                {"consumer_id": m.member_id, "group_instance_id": m.group_instance_id, "host": m.host,
                 "client_id": m.client_id, "partitions": len(m.assignment or ()),
                 "assignment": [{"topic": t, "partition": p} for t, p in sorted(m.assignment or ())]}
                for m in d.members]} for gid, d in groups.items()]}, indent=2))
            return
        for gid, d in groups.items():
            shown = self._should_print(gid, d.state, len(d.members))
            sys.stdout.write(members_table(gid, d.members if shown else (), self.args.verbose))

    def _print_states(self, groups: dict[str, GroupDescription]) -> None:
        if self.args.json:
            self._json_missing(groups)
            print(json.dumps({"groups": [{"group": gid, "coordinator": None if d.coordinator is None else {
                "id": d.coordinator.node_id, "host": d.coordinator.host, "port": d.coordinator.port},
                "assignment_strategy": d.protocol, "state": d.state, "members": len(d.members)}
                for gid, d in groups.items()]}, indent=2))
            return
        for gid, d in groups.items():
            if self._should_print(gid, d.state, 1):
                c = d.coordinator
                coordinator = MISSING if c is None else f"{c.host}:{c.port}  ({c.node_id})"
                sys.stdout.write(state_table(gid, coordinator, d.protocol, d.state, len(d.members)))

    # ---------------------------------------------------------------------------------------- --delete

    async def delete(self) -> None:
        group_ids = await self._group_ids()
        results = await self.client.delete_groups(group_ids, timeout=self.timeout)
        failed = {g: r.error for g, r in results.items() if r.error is not None}
        deleted = [g for g, r in results.items() if r.error is None]
        if not failed:
            print(f"Deletion of requested consumer groups ('{', '.join(deleted)}') was successful.")
            return
        self.failed = True
        _error("Deletion of some consumer groups failed:")
        for group, error in failed.items():
            print(f"* Group '{group}' could not be deleted due to: {_describe_error(error)}")
        if deleted:
            print("\nThese consumer groups were deleted successfully: " + ", ".join(f"'{g}'" for g in deleted))

    # ---------------------------------------------------------------------------------------- --delete-offsets

    async def delete_offsets(self) -> None:
        from kjbod.admin import ErrorCode, KafkaError

        group = self.args.group[0]
        topics = self.args.topic or []
        partitions: list[tuple[str, int]] = []
        statuses: dict[tuple[str, int], str] = {}
        whole = []
        for arg in topics:
            name, parts = parse_topic_partitions(arg)
            if parts is None:
                whole.append(name)
            else:
                partitions += [(name, p) for p in parts]
        for name in dict.fromkeys(whole):
            try:
                described = await self.client.describe_topics([name], timeout=self.timeout)
            except KafkaError as e:
                statuses[(name, -1)] = f"Error: :{_describe_error(e)}"
                continue
            partitions += [(name, p.partition) for p in described[name].partitions]
        result = await self.client.delete_group_offsets(group, partitions, timeout=self.timeout)
        error = result.error
        code = None if error is None else error.code
        if code is None:
            print(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group}")
        else:
            self.failed = True
            if code == ErrorCode.INVALID_GROUP_ID:
                _error(f"'{group}' is not valid.")
            elif code == ErrorCode.GROUP_ID_NOT_FOUND:
                _error(f"'{group}' does not exist.")
            elif code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                _error(f"Access to '{group}' is not authorized.")
            elif code == ErrorCode.NON_EMPTY_GROUP:
                _error(f"Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty.")
            elif code in (ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                _error("Encounter some partition level error, see the follow-up details:")
            else:
                _error(f"Encounter some unknown error: {_describe_error(error)}")
        for tp, failure in result.partitions.items():
            statuses[tp] = "Successful" if failure is None else f"Error: :{_describe_error(failure)}"
        if any(s != "Successful" for s in statuses.values()):
            self.failed = True
        widths = (30, 15, 15)
        out = "\n" + _line(widths, ("TOPIC", "PARTITION", "STATUS"))
        for (topic, partition), status in sorted(statuses.items(), key=lambda kv: f"{kv[0][0]}{kv[0][1]}"):
            out += "\n" + _line(widths, (topic, partition if partition >= 0 else "Not Provided", status))
        print(out)

    # ---------------------------------------------------------------------------------------- --reset-offsets

    async def reset_offsets(self) -> None:
        args = self.args
        group_ids = await self._group_ids()
        described = await self.client.describe_groups(group_ids, timeout=self.timeout)
        plan: dict[str, dict[tuple[str, int], int]] = {}
        for gid in group_ids:
            d = described[gid]
            if d.error is not None:
                raise d.error
            if d.state not in ("Empty", "Dead"):
                _error(f"Assignments can only be reset if the group '{gid}' is inactive, but the current state "
                       f"is {d.state}.")
                self.failed = True
                plan[gid] = {}
                continue
            partitions = [] if args.from_file is not None else await self._partitions_to_reset(gid)
            plan[gid] = await self._prepare(gid, partitions)
            if args.execute:
                result = await self.client.alter_group_offsets(gid, plan[gid], timeout=self.timeout)
                if result.error is not None:
                    raise result.error
        if args.export:
            sys.stdout.write(_csv(plan, with_group=len(args.group or ()) != 1))
        else:
            sys.stdout.write(reset_table(plan))

    async def _committed(self, gid: str) -> dict[tuple[str, int], int]:
        fetched = (await self.client.list_group_offsets(gid, timeout=self.timeout))[gid]
        if fetched.error is not None:
            raise fetched.error
        return {tp: o.offset for tp, o in fetched.offsets.items()}

    async def _partitions_to_reset(self, gid: str) -> list[tuple[str, int]]:
        if self.args.all_topics:
            return sorted(await self._committed(gid))
        if not self.args.topic:
            raise UserError("One of the reset scopes should be defined: --all-topics, --topic.")
        out: list[tuple[str, int]] = []
        whole = []
        for arg in self.args.topic:
            name, parts = parse_topic_partitions(arg)
            if parts is None:
                whole.append(name)
            else:
                out += [(name, p) for p in parts]
        if whole:
            described = await self.client.describe_topics(list(dict.fromkeys(whole)), timeout=self.timeout)
            for name in dict.fromkeys(whole):
                out += [(name, p.partition) for p in described[name].partitions]
        return list(dict.fromkeys(out))

    async def _prepare(self, gid: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        args = self.args
        if args.to_offset is not None:
            return await self._clamp(dict.fromkeys(partitions, args.to_offset))
        if args.to_earliest or args.to_latest:
            spec = -2 if args.to_earliest else -1
            found = await self._log_offsets(partitions, spec)
            for tp in partitions:
                if tp not in found:
                    kind = "starting" if args.to_earliest else "ending"
                    raise UserError(f"Error getting {kind} offset of topic partition: {tp[0]}-{tp[1]}")
            return {tp: found[tp] for tp in partitions}
        if args.shift_by is not None:
            committed = await self._committed(gid)
            wanted = {}
            for tp in partitions:
                if tp not in committed:
                    raise UserError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no current "
                                    "committed offset")
                wanted[tp] = committed[tp] + args.shift_by
            return await self._clamp(wanted)
        if args.to_datetime is not None or args.by_duration is not None:
            found = await self._log_offsets(partitions, args.reset_time_ms)
            late = [tp for tp in partitions if tp not in found]
            for topic, partition in late:
                print(f"\nWarn: Partition {partition} from topic {topic} is empty. Falling back to latest known "
                      "offset.")
            ends = await self._log_offsets(late, -1)
            for tp in late:
                if tp not in ends:
                    raise UserError(f"Error getting offset by timestamp of topic partition: {tp[0]}-{tp[1]}")
                found[tp] = ends[tp]
            return {tp: found[tp] for tp in partitions}
        if args.from_file is not None:
            from_file = self._plan_from_file()
            if gid not in from_file:
                _error(f"No reset plan for group {gid} found")
                self.failed = True
                return {}
            return await self._clamp(from_file[gid])
        if args.to_current:
            committed = await self._committed(gid)
            ends = await self._log_offsets([tp for tp in partitions if tp not in committed], -1)
            out = {}
            for tp in partitions:
                if tp in committed:
                    out[tp] = committed[tp]
                elif tp in ends:
                    out[tp] = ends[tp]
                else:
                    raise UserError(f"Error getting ending offset of topic partition: {tp[0]}-{tp[1]}")
            return out
        raise UserError("Option '[reset-offsets]' requires one of the following scenarios: "
                        + _names(*(s.replace("_", "-") for s in SCENARIOS)))

    def _plan_from_file(self) -> dict[str, dict[tuple[str, int], int]]:
        path = self.args.from_file
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise UserError(f"--from-file: cannot read {path}: {e.strerror or e}") from None
        return parse_reset_plan(text, self.args.group[0] if len(self.args.group or ()) == 1 else None)

    async def _clamp(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Kafka's range check: above the log end offset -> the end, below the log start offset -> the start."""
        starts = await self._log_offsets(wanted, -2)
        ends = await self._log_offsets(wanted, -1)
        out = {}
        for tp, offset in wanted.items():
            name = f"{tp[0]}-{tp[1]}"
            if tp not in ends:
                raise UserError(f"Error getting ending offset of topic partition: {name}")
            if offset > ends[tp]:
                _warn(f"New offset ({offset}) is higher than latest offset for topic partition {name}. "
                      f"Value will be set to {ends[tp]}")
                offset = ends[tp]
            elif tp in starts and offset < starts[tp]:
                _warn(f"New offset ({offset}) is lower than earliest offset for topic partition {name}. "
                      f"Value will be set to {starts[tp]}")
                offset = starts[tp]
            out[tp] = offset
        return out


def _warn(message: str) -> None:
    print(f"WARN: {message}", file=sys.stderr, flush=True)


def _describe_error(error: BaseException | None) -> str:
    return " ".join(str(error).split())
