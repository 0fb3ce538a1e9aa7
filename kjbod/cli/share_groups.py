"""`kjbod share-groups`: kafka-share-groups.sh's actions, tables and messages for KIP-932 share groups, over kjbod's
admin client.

Strategy: as `kjbod consumer-groups` (kjbod.cli.consumer_groups, whose option parsing helpers and reset table this
reuses): parse and check the options before connecting (exactly one action; --describe takes --group or
--all-groups and at most one of --members/--offsets/--state; --reset-offsets and --delete-offsets take one --group;
a reset takes one scenario), then one admin call per question: ListGroups (type share), ShareGroupDescribe,
DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets, and ListOffsets for a reset's new
start offsets.  Tables are built by pure functions from plain rows with the Kafka tool's columns and widths ("-"
for a value not known).  Errors: an option mistake is `kjbod: error: ...` and exit code 2; a group that does not
exist, cannot be reset or deleted, or a failed call prints the tool's "Error: ..." line and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from kjbod.cli.command_config import add_command_config, admin_options
from kjbod.cli.main import UserError

EXIT_FAILED = 1
MISSING = "-"
DEFAULT_TIMEOUT_MS = 5000
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_earliest", "to_latest", "to_datetime")
STATES = ("Empty", "Stable", "Dead")


def add_subcommand(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "share-groups", help="list, describe, delete share groups and reset their offsets (kafka-share-groups.sh)",
        description="kafka-share-groups.sh's actions over kjbod's admin client: --list, --describe (start offsets "
                    "and lag, --members, --state), --delete, --delete-offsets and --reset-offsets (--dry-run or "
                    "--execute), with the Kafka tool's options, tables and messages.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                   help="the server(s) to connect to (comma-separated)")
    add_command_config(p)
    p.add_argument("--timeout", metavar="MS", type=int, default=DEFAULT_TIMEOUT_MS,
                   help=f"how long each call may take, in ms (default: {DEFAULT_TIMEOUT_MS})")
    actions = p.add_argument_group("actions (exactly one)")
    actions.add_argument("--list", action="store_true", help="list all share groups")
    actions.add_argument("--describe", action="store_true",
                         help="describe share groups: start offsets and lag per partition (default), --members or "
                              "--state")
    actions.add_argument("--delete", action="store_true", help="delete empty share groups and their share state")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="reset the start offsets of an empty share group (--dry-run, the default, or "
                              "--execute)")
    actions.add_argument("--delete-offsets", action="store_true",
                         help="delete an empty share group's share state of --topic T (repeatable)")
    scope = p.add_argument_group("scope")
    scope.add_argument("--group", metavar="GROUP", action="append", help="a share group (repeatable)")
    scope.add_argument("--all-groups", action="store_true", help="every share group")
    scope.add_argument("--topic", metavar="TOPIC[:P,...]", action="append",
                       help="a topic, or some of its partitions (repeatable), for --reset-offsets and "
                            "--delete-offsets")
    scope.add_argument("--all-topics", action="store_true",
                       help="every partition the group has share state for (--reset-offsets)")
    describe = p.add_argument_group("--describe and --list")
    describe.add_argument("--offsets", action="store_true", help="partitions with start offsets and lag (default)")
    describe.add_argument("--members", action="store_true", help="the members and their partitions")
    describe.add_argument("--verbose", action="store_true",
                          help="more detail (--offsets: leader epochs; --members: member epochs; --state: epochs)")
    describe.add_argument("--state", metavar="STATES", nargs="?", const="", default=None,
                          help="--describe: the group's coordinator, state and member count; --list: the state "
                               "column, or only groups in STATES (comma-separated)")
    reset = p.add_argument_group("--reset-offsets")
    reset.add_argument("--dry-run", action="store_true", help="show the new start offsets only (the default)")
    reset.add_argument("--execute", action="store_true", help="set the new start offsets")
    reset.add_argument("--to-earliest", action="store_true", help="to the log start offset")
    reset.add_argument("--to-latest", action="store_true", help="to the log end offset")
    reset.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                       help="to the first offset at or after this time (UTC unless it ends in Z or +hh:mm)")
    p.set_defaults(func=_command)


# ================================================================================================ option rules

def check_args(args: argparse.Namespace) -> None:
    """Kafka's option rules, before anything is sent; UserError with the tool's message."""
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise UserError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                        "--delete-offsets")
    action = chosen[0]
    if action == "describe":
        if not args.group and not args.all_groups:
            raise UserError("Option [describe] takes one of these options: [all-groups], [group]")
        if sum(bool(x) for x in (args.members, args.offsets, args.state is not None)) > 1:
            raise UserError("Option [describe] takes at most one of these options: [members], [offsets], [state]")
    if action == "delete" and not args.group and not args.all_groups:
        raise UserError("Option [delete] takes one of these options: [all-groups], [group]")
    if action in ("reset_offsets", "delete_offsets"):
        flag = "reset-offsets" if action == "reset_offsets" else "delete-offsets"
        if not args.group or len(args.group) != 1 or args.all_groups:
            raise UserError(f"Option [{flag}] takes exactly one [group]")
    if action == "delete_offsets" and not args.topic:
        raise UserError("Option [delete-offsets] takes the following options: [topic], [group]")
    if action == "reset_offsets":
        scenarios = [s for s in SCENARIOS if getattr(args, s)]
        if len(scenarios) != 1:
            raise UserError("Option [reset-offsets] takes exactly one of these options: [to-earliest], "
                            "[to-latest], [to-datetime]")
        if bool(args.topic) == bool(args.all_topics):
            raise UserError("Option [reset-offsets] takes one of these options: [all-topics], [topic]")
        if args.dry_run and args.execute:
            raise UserError("Option [reset-offsets] takes at most one of these options: [dry-run], [execute]")
    if action != "reset_offsets" and (args.dry_run or args.execute or any(getattr(args, s) for s in SCENARIOS)):
        raise UserError("Options --dry-run, --execute and the reset scenarios need --reset-offsets")
    if action not in ("describe", "list") and (args.members or args.offsets or args.state is not None
                                               or args.verbose):
        raise UserError("Options --members, --offsets, --state and --verbose need --describe (or --list)")


def _states(text: str | None) -> list[str]:
    if not text:
        return []
    out = []
    for s in text.split(","):
        match = [k for k in STATES if k.lower() == s.strip().lower()]
        if not match:
            raise UserError(f"Invalid state list '{text}'. Valid states are: {', '.join(STATES)}")
        out.append(match[0])
    return out


# ================================================================================================ tables

def _line(widths: Sequence[int], values: Sequence[Any]) -> str:
    cells = [str(v) for v in values]
    return " ".join(c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)) + " " + cells[-1]


def list_table(rows: Iterable[tuple[str, str]]) -> str:
    """--list --state: GROUP STATE."""
    rows = list(rows)
    width = max([15] + [len(g) for g, _ in rows])
    return "".join(_line((width,), r) + "\n" for r in [("GROUP", "STATE"), *rows])


def offsets_table(group: str, rows: Sequence[tuple[str, int, int | None, int | None, int | None]],
                  verbose: bool) -> str:
    """--describe --offsets: GROUP TOPIC PARTITION [LEADER-EPOCH] START-OFFSET LAG, rows sorted."""
    if not rows:
        return f"\nShare group '{group}' has no offset information.\n"
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    widths = [max(15, len(group)), max([15] + [len(r[0]) for r in rows]), 10] + ([13, 13] if verbose else [13])
    head = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if verbose else []) + ["START-OFFSET", "LAG"]
    out = "\n" + _line(widths, head)
    for topic, partition, epoch, start, lag in rows:
        cells = [group, topic, partition] + ([_or_missing(epoch)] if verbose else []) + [
            _or_missing(start), _or_missing(lag)]
        out += "\n" + _line(widths, cells)
    return out + "\n"


def state_table(group: str, coordinator: str, state: str, group_epoch: int, assignment_epoch: int, members: int,
                verbose: bool) -> str:
    """--describe --state: GROUP COORDINATOR (ID) STATE [GROUP-EPOCH ASSIGNMENT-EPOCH] #MEMBERS."""
    widths = [max(15, len(group)), max(25, len(coordinator)), 15] + ([12, 17] if verbose else [])
    head = ["GROUP", "COORDINATOR (ID)", "STATE"] + (["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if verbose else []) + [
        "#MEMBERS"]
    row = [group, coordinator, state] + ([group_epoch, assignment_epoch] if verbose else []) + [members]
    return "\n" + _line(widths, head) + "\n" + _line(widths, row) + "\n"


def members_table(group: str, rows: Sequence[tuple[str, str, str, int, tuple[tuple[str, int], ...]]],
                  verbose: bool) -> str:
    """--describe --members: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS [MEMBER-EPOCH] ASSIGNMENT."""
    rows = sorted(rows)
    widths = [max(15, len(group)), max([15] + [len(r[0]) for r in rows]), max([15] + [len(r[1]) for r in rows]),
              max([15] + [len(r[2]) for r in rows]), 12] + ([13] if verbose else [])
    head = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["MEMBER-EPOCH"] if verbose else []) + [
        "ASSIGNMENT"]
    out = "\n" + _line(widths, head)
    for member, host, client, epoch, assignment in rows:
        cells = [group, member, host, client, len(assignment)] + ([epoch] if verbose else []) + [
            assignment_text(assignment)]
        out += "\n" + _line(widths, cells)
    return out + "\n"


def assignment_text(assignment: Iterable[tuple[str, int]]) -> str:
    """topic:p,p;topic:p as the Kafka tool prints an assignment ("-" when empty)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    if not by_topic:
        return MISSING
    return ";".join(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in sorted(by_topic.items()))


def _or_missing(value: int | None) -> str:
    return MISSING if value is None else str(value)


# ================================================================================================ the command

def _command(args: argparse.Namespace) -> int:
    from kjbod.cli.consumer_groups import parse_datetime, parse_topic_partitions

    check_args(args)
    states = _states(args.state) if args.list else []
    if args.reset_offsets and args.to_datetime is not None:
        args.reset_time_ms = parse_datetime(args.to_datetime)
    if args.reset_offsets:
        for topic_arg in args.topic or ():
            parse_topic_partitions(topic_arg)
    return asyncio.run(_run(args, states))


def _error(message: str) -> None:
    print(f"\nError: {message}", flush=True)


async def _run(args: argparse.Namespace, states: list[str]) -> int:
    from kjbod.admin import AdminClient, KafkaError

    timeout = max(args.timeout, 1) / 1000
    try:
        client = AdminClient(args.bootstrap_server, request_timeout=timeout, connect_timeout=min(timeout, 10.0),
                             client_id="kjbod-share-groups", **admin_options(args))
    except ValueError as e:
        raise UserError(f"--bootstrap-server: {e}") from None
    try:
        try:
            await client.start()
        except KafkaError as e:
            raise UserError(f"cannot reach the cluster: {e}") from None
        try:
            if args.list:
                return await _list(client, args, states, timeout)
            if args.describe:
                return await _describe(client, args, timeout)
            if args.delete:
                return await _delete(client, args, timeout)
            if args.reset_offsets:
                return await _reset(client, args, timeout)
            return await _delete_offsets(client, args, timeout)
        except KafkaError as e:
            _error(f"Executing share group command failed due to {e}")
            return EXIT_FAILED
    finally:
        await client.close()


async def _share_groups(client: Any, timeout: float, states: Iterable[str] = ()) -> list[Any]:
    return await client.list_groups(types=["share"], states=list(states), timeout=timeout)


async def _list(client: Any, args: argparse.Namespace, states: list[str], timeout: float) -> int:
    groups = await _share_groups(client, timeout, states)
    if args.state is None:
        for g in groups:
            print(g.group_id)
    else:
        print(list_table((g.group_id, g.state or "Unknown") for g in groups), end="")
    return 0


async def _group_ids(client: Any, args: argparse.Namespace, timeout: float) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in await _share_groups(client, timeout)]
    return list(dict.fromkeys(args.group or ()))


async def _describe(client: Any, args: argparse.Namespace, timeout: float) -> int:
    groups = await _group_ids(client, args, timeout)
    described = await client.describe_share_groups(groups, timeout=timeout)
    failed = False
    for gid in sorted(described):
        d = described[gid]
        if d.error is not None:
            _error(f"Executing share group command failed due to {d.error}")
            failed = True
            continue
        if d.state == "Dead":
            _error(f"Share group '{gid}' does not exist.")
            failed = True
            continue
        if args.state is not None:
            if d.state == "Empty":
                print(f"\nShare group '{gid}' has no active members.", file=sys.stderr, flush=True)
            c = d.coordinator
            coordinator = f"{c.host}:{c.port}  ({c.node_id})" if c is not None else MISSING
            print(state_table(gid, coordinator, d.state, d.group_epoch, d.assignment_epoch, len(d.members),
                              args.verbose), end="")
        elif args.members:
            if d.state == "Empty" or not d.members:
                print(f"\nShare group '{gid}' has no active members.", file=sys.stderr, flush=True)
                continue
            print(members_table(gid, [(m.member_id, m.host, m.client_id, m.member_epoch, m.assignment)
                                      for m in d.members], args.verbose), end="")
        else:
            offsets = await client.list_share_group_offsets(gid, timeout=timeout)
            print(offsets_table(gid, [(o.topic, o.partition, o.leader_epoch, o.start_offset, o.lag)
                                      for o in offsets.values()], args.verbose), end="")
    return EXIT_FAILED if failed else 0


async def _delete(client: Any, args: argparse.Namespace, timeout: float) -> int:
    listed = {g.group_id: g for g in await _share_groups(client, timeout)}
    wanted = list(listed) if args.all_groups else list(dict.fromkeys(args.group or ()))
    failed: dict[str, str] = {}
    for gid in wanted:
        g = listed.get(gid)
        if g is None:
            failed[gid] = f"java.lang.IllegalArgumentException: Group '{gid}' is not a share group."
        elif g.state == "Dead":
            failed[gid] = f"java.lang.IllegalStateException: Share group '{gid}' group state is DEAD."
        elif g.state != "Empty":
            failed[gid] = (f"org.apache.kafka.common.errors.GroupNotEmptyException: Share group '{gid}' is not "
                           "EMPTY.")
    go = [gid for gid in wanted if gid not in failed]
    deleted = []
    if go:
        results = await client.delete_groups(go, timeout=timeout)
        for gid in go:
            if results[gid].error is not None:
                failed[gid] = str(results[gid].error)
            else:
                deleted.append(gid)
    if not failed:
        print(f"Deletion of requested share groups ({', '.join(repr(g) for g in deleted)}) was successful.")
        return 0
    _error("Deletion of some share groups failed:")
    for gid, why in failed.items():
        print(f"* Group '{gid}' could not be deleted due to: {why}")
    if deleted:
        print(f"\nThese share groups were deleted successfully: {', '.join(repr(g) for g in deleted)}")
    return EXIT_FAILED


async def _reset(client: Any, args: argparse.Namespace, timeout: float) -> int:
    from kjbod.admin import KafkaError, OffsetSpec
    from kjbod.cli.consumer_groups import parse_topic_partitions, reset_table

    gid = args.group[0]
    described = (await client.describe_share_groups([gid], timeout=timeout))[gid]
    if described.error is not None:
        raise described.error
    if described.state not in ("Empty", "Dead"):
        _error(f"Share group '{gid}' is not empty.")
        return EXIT_FAILED
    if args.all_topics:
        partitions = sorted((await client.list_share_group_offsets(gid, timeout=timeout)).keys())
    else:
        partitions = []
        for topic_arg in args.topic:
            topic, numbers = parse_topic_partitions(topic_arg)
            if numbers is None:
                try:
                    described_topics = await client.describe_topics([topic], timeout=timeout)
                except KafkaError as e:
                    _error(f"The partitions of topic '{topic}' could not be found: {e}")
                    return EXIT_FAILED
                numbers = [p.partition for p in described_topics[topic].partitions]
            partitions += [(topic, n) for n in numbers]
    spec = OffsetSpec.EARLIEST if args.to_earliest else OffsetSpec.LATEST if args.to_latest else args.reset_time_ms
    found = await client.list_offsets(dict.fromkeys(partitions, spec), raise_on_error=False, timeout=timeout)
    plan: dict[tuple[str, int], int] = {}
    for tp in partitions:
        r = found[tp]
        if r.error is not None:
            _error(f"Could not find the offset of partition {tp[0]}-{tp[1]}: {r.error}")
            return EXIT_FAILED
        if r.offset is None and args.to_datetime is not None:  # nothing at or after the time: the log end
            latest = await client.list_offsets({tp: OffsetSpec.LATEST}, timeout=timeout)
            plan[tp] = latest[tp].offset or 0
        else:
            plan[tp] = r.offset or 0
    if args.execute:
        result = await client.alter_share_group_offsets(gid, plan, timeout=timeout)
        if result.error is not None:
            _error(f"Executing share group command failed due to {result.error}")
            return EXIT_FAILED
    print(reset_table({gid: plan}), end="")
    return 0


async def _delete_offsets(client: Any, args: argparse.Namespace, timeout: float) -> int:
    gid = args.group[0]
    topics = list(dict.fromkeys(args.topic))
    result = await client.delete_share_group_offsets(gid, topics, timeout=timeout)
    group_level = result.error is not None and not result.items
    if group_level:
        _error(str(result.error))
        return EXIT_FAILED
    width = max([15] + [len(t) for t in topics])
    out = "\n" + _line((width,), ("TOPIC", "STATUS"))
    for topic in sorted(topics):
        error = result.items.get(topic)
        out += "\n" + _line((width,), (topic, f"Error: {error}" if error is not None else "Successful"))
    print(out)
    return EXIT_FAILED if result.error is not None else 0
