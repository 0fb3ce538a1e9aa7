"""`kjbod topics`: kafka-topics.sh, with its flags and its output, for operators without a Java install.

Strategy: one action per run (--list, --describe, --create, --alter, --delete), each a few admin-client calls:

* which topics: every topic name (Metadata), filtered as Kafka's tool filters them: --topic is a regular
  expression matched against the whole name (commas read as "|", quotes and spaces dropped: Kafka's
  IncludeList), internal topics left out only with --exclude-internal; an action that needs a topic and finds
  none fails unless --if-exists;
* --describe prints Kafka's lines, tab-separated, so scripts that read kafka-topics.sh read these:
  ``Topic: T<TAB>TopicId: ID<TAB>PartitionCount: N<TAB>ReplicationFactor: R<TAB>Configs: k=v,...`` (the configs
  set anywhere but Kafka's defaults) and, per partition, ``<TAB>Topic: T<TAB>Partition: P<TAB>Leader: L<TAB>
  Replicas: a,b<TAB>Isr: a,b`` with the reassignment in progress (Adding/Removing Replicas) and KIP-966's
  ``Elr: a,b<TAB>LastKnownElr: c`` (N/A from a broker without DescribeTopicPartitions).  The
  partitions come from DescribeTopicPartitions a page at a time (--partition-size-limit-per-response), as Kafka's
  tool asks since 3.8, or from Metadata when the broker lacks it or --topic-id is given; --under-replicated-partitions, --under-min-isr-partitions,
  --at-min-isr-partitions and --unavailable-partitions print only those partitions, --topics-with-overrides only
  the topic lines of topics with configs of their own (set on the topic: Kafka's tool also counts a
  cluster-wide value, so with ELR on it lists every topic);
* --create takes --partitions and --replication-factor (the brokers' num.partitions and
  default.replication.factor when left out) or --replica-assignment (``0:1,1:2``: partitions by comma, broker ids
  by colon, preferred leader first) and --config key=value; --alter grows the partition count (new partitions
  placed by the controller, or by --replica-assignment's entries past the current count).

Errors are one line and exit 1 (`Error while executing topic command : ...`, as Kafka's tool words it, so a
script that greps for it still works); usage errors exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import Any

from kjbod.cli.command_config import add_command_config
from kjbod.cli.log_dirs import _positive_float
from kjbod.cli.main import UserError

__all__ = ["add_subcommand", "parse_replica_assignment", "topic_filter"]

EXIT_FAILED = 1
ACTIONS = ("list", "describe", "create", "alter", "delete")
REPORTS = ("under_replicated_partitions", "under_min_isr_partitions", "at_min_isr_partitions",
           "unavailable_partitions")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
SHORT_MAX = 32767


class TopicCommandError(Exception):
    """What Kafka's tool reports as "Error while executing topic command"."""


def add_subcommand(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "topics", help="list, describe, create, grow and delete topics (kafka-topics.sh)",
        description="Create, delete, describe, or change a topic, with kafka-topics.sh's options and output.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                        help="a broker to connect to (comma-separated for several)")
    action = parser.add_mutually_exclusive_group(required=True)
    for name, text in (("list", "list the topics"), ("describe", "describe the topics"),
                       ("create", "create a topic"), ("alter", "add partitions to a topic"),
                       ("delete", "delete the topics")):
        action.add_argument(f"--{name}", dest="action", action="store_const", const=name, help=text)
    parser.add_argument("--topic", metavar="TOPIC",
                        help="the topic, or for --list, --describe, --alter and --delete a regular expression "
                             "matched against whole names (commas separate alternatives)")
    parser.add_argument("--topic-id", metavar="ID", help="with --describe: the topic with this id")
    parser.add_argument("--partitions", metavar="N", type=_positive_int,
                        help="partitions of a new topic (--create), or the new count (--alter)")
    parser.add_argument("--replication-factor", metavar="N", type=_int,
                        help="replicas of each partition of a new topic")
    parser.add_argument("--replica-assignment", metavar="0:1,1:2,...",
                        help="broker ids of each partition, by comma; within one, by colon, preferred leader first")
    parser.add_argument("--config", metavar="KEY=VALUE", action="append", default=[],
                        help="a topic config of a new topic (repeatable)")
    parser.add_argument("--exclude-internal", action="store_true",
                        help="leave internal topics (__consumer_offsets, __transaction_state) out")
    parser.add_argument("--if-exists", action="store_true",
                        help="with --alter, --describe or --delete: do nothing when no topic matches")
    parser.add_argument("--if-not-exists", action="store_true",
                        help="with --create: do nothing when the topic exists")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="with --describe: only partitions with fewer in-sync replicas than replicas")
    parser.add_argument("--under-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions with fewer in-sync replicas than min.insync.replicas")
    parser.add_argument("--at-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions with exactly min.insync.replicas in sync")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="with --describe: only partitions whose leader is not a live broker")
    parser.add_argument("--topics-with-overrides", action="store_true",
                        help="with --describe: only topics with configs of their own (no partition lines)")
    parser.add_argument("--partition-size-limit-per-response", metavar="N", type=_int, default=2000,
                        help="with --describe: most partitions in one DescribeTopicPartitions answer (default: "
                             "2000; the broker may cap it lower)")
    parser.add_argument("--timeout", metavar="SECONDS", type=_positive_float, default=30.0,
                        help="how long each request may take, retries included (default: 30)")
    add_command_config(parser)
    parser.set_defaults(func=_command)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


# ================================================================================================ pure parts

def topic_filter(expression: str) -> re.Pattern[str]:
    """--topic as Kafka's IncludeList reads it: spaces and surrounding quotes dropped, commas as "|", matched
    against the whole name."""
    text = expression.strip().replace(",", "|").replace(" ", "")
    text = re.sub(r"^[\"']+", "", text)
    text = re.sub(r"[\"']+$", "", text)
    try:
        return re.compile(text)
    except re.error as e:
        raise UserError(f"--topic {expression!r} is not a valid regular expression: {e}") from None


def matching(names: list[str], expression: str | None, exclude_internal: bool) -> list[str]:
    pattern = topic_filter(expression) if expression else None
    return sorted(n for n in names
                  if (pattern is None or pattern.fullmatch(n)) and not (exclude_internal and n in INTERNAL_TOPICS))


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """``0:1:2,1:2:0`` -> {partition: broker ids}; UserError naming the problem (as Kafka's tool checks it: no
    broker twice in one partition, every partition with as many replicas as the first)."""
    out: dict[int, list[int]] = {}
    for index, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise UserError(f"--replica-assignment: {part!r} (partition {index}) is not broker ids separated by "
                            "colons") from None
        if len(set(brokers)) != len(brokers):
            raise UserError(f"--replica-assignment: partition {index} names a broker twice: {part}")
        if out and len(brokers) != len(out[0]):
            raise UserError(f"--replica-assignment: partition {index} has {len(brokers)} replicas where partition 0 "
                            f"has {len(out[0])}: every partition needs the same number")
        out[index] = brokers
    return out


def parse_configs(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--config {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _ids(ids: Any) -> str:
    return ",".join(str(i) for i in ids)


def describe_lines(td: Any, configs: dict[str, Any], reassignments: dict[tuple[str, int], Any], live: set[int],
                   args: argparse.Namespace, elr_known: bool = False) -> list[str]:
    """The lines --describe prints for one topic (see the module text).  `elr_known`: the partitions came from
    DescribeTopicPartitions, which carries the ELR lists (empty in kjbod); Metadata does not (N/A)."""
    from kjbod.admin import ConfigSource
    from kjbod.storage.ids import uuid_text

    reports = [r for r in REPORTS if getattr(args, r)]
    overridden = {k: e for k, e in configs.items() if e.source != ConfigSource.DEFAULT_CONFIG}
    min_isr_entry = configs.get("min.insync.replicas")
    min_isr = int(min_isr_entry.value) if min_isr_entry is not None and min_isr_entry.value else 1
    lines: list[str] = []
    parts = sorted(td.partitions, key=lambda p: p.partition)

    def replication_factor(p: Any) -> int:
        moving = reassignments.get((td.name, p.partition))
        if moving is not None and (set(moving.adding_replicas) | set(moving.removing_replicas)) & set(p.replicas):
            return len(moving.replicas) - len(moving.adding_replicas)
        return len(p.replicas)

    # --topics-with-overrides asks for the topic's own configs. Kafka's tool also counts values set cluster-wide,
    # so with ELR on (which writes a cluster-wide min.insync.replicas) it lists every topic; kjbod does not.
    own = any(e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG for e in configs.values())
    if not reports and (not args.topics_with_overrides or own) and parts:
        topic_id = f"\tTopicId: {uuid_text(td.topic_id)}" if td.topic_id is not None else ""
        config_text = ",".join(f"{k}={e.value}" for k, e in overridden.items())
        lines.append(f"Topic: {td.name}{topic_id}\tPartitionCount: {len(parts)}\t"
                     f"ReplicationFactor: {replication_factor(parts[0])}\tConfigs: {config_text}")
    if args.topics_with_overrides:
        return lines
    for p in parts:
        has_leader = p.leader is not None
        wanted = not reports or any((
            args.under_replicated_partitions and replication_factor(p) > len(p.isr),
            args.under_min_isr_partitions and (not has_leader or len(p.isr) < min_isr),
            args.at_min_isr_partitions and len(p.isr) == min_isr,
            args.unavailable_partitions and (not has_leader or p.leader not in live)))
        if not wanted:
            continue
        line = (f"\tTopic: {td.name}\tPartition: {p.partition}\tLeader: {p.leader if has_leader else 'none'}\t"
                f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
        moving = reassignments.get((td.name, p.partition))
        if moving is not None:
            line += f"\tAdding Replicas: {_ids(moving.adding_replicas)}\tRemoving Replicas: " \
                    f"{_ids(moving.removing_replicas)}"
        elr = _ids(p.elr) if elr_known and p.elr is not None else "N/A"
        last = _ids(p.last_known_elr) if elr_known and p.last_known_elr is not None else "N/A"
        lines.append(f"{line}\tElr: {elr}\tLastKnownElr: {last}")
    return lines


# ================================================================================================ actions

def _command(args: argparse.Namespace) -> int:
    _check_options(args)
    try:
        return asyncio.run(_run(args))
    except TopicCommandError as e:
        sys.stdout.flush()
        print(f"Error while executing topic command : {e}", file=sys.stderr)
        return EXIT_FAILED


def _check_options(args: argparse.Namespace) -> None:
    """The option combinations Kafka's tool refuses, refused the same way (one line, exit 2)."""
    action = args.action
    if action in ("create", "alter", "delete") and not args.topic:
        raise UserError(f"--{action} needs --topic")
    if args.topic_id is not None and action != "describe":
        raise UserError("--topic-id goes with --describe only")
    if action == "alter" and args.partitions is None:
        raise UserError("--alter changes the partition count: give --partitions (topic configs are changed with "
                        "kafka-configs.sh or AlterConfigs)")
    if args.config and action != "create":
        raise UserError("--config goes with --create only (a topic's configs are changed with kafka-configs.sh or "
                        "AlterConfigs)")
    if args.replication_factor is not None and action != "create":
        raise UserError("--replication-factor goes with --create only")
    if args.replica_assignment is not None:
        if action not in ("create", "alter"):
            raise UserError("--replica-assignment goes with --create or --alter only")
        if action == "create" and (args.partitions is not None or args.replication_factor is not None):
            raise UserError("--replica-assignment gives the partitions and replicas itself: leave out --partitions "
                            "and --replication-factor")
    if args.if_not_exists and action != "create":
        raise UserError("--if-not-exists goes with --create only")
    if args.if_exists and action not in ("alter", "describe", "delete"):
        raise UserError("--if-exists goes with --alter, --describe or --delete only")
    reports = [r for r in REPORTS if getattr(args, r)] + (["topics_with_overrides"] if args.topics_with_overrides
                                                        else [])
    if reports and action != "describe":
        raise UserError(f"--{reports[0].replace('_', '-')} goes with --describe only")
    if len(reports) > 1:
        raise UserError("give at most one of --under-replicated-partitions, --under-min-isr-partitions, "
                        "--at-min-isr-partitions, --unavailable-partitions and --topics-with-overrides")
    if action == "create" and args.replication_factor is not None and not 1 <= args.replication_factor <= SHORT_MAX:
        raise UserError(f"--replication-factor must be between 1 and {SHORT_MAX}, not {args.replication_factor}")
    parse_configs(args.config)  # before connecting: a bad value is named at once
    if args.replica_assignment is not None:
        parse_replica_assignment(args.replica_assignment)
    if args.topic:
        topic_filter(args.topic)


async def _run(args: argparse.Namespace) -> int:
    from kjbod.cli.log_dirs import _admin

    async with _admin(args, "kjbod-topics") as admin:
        if args.action == "create":
            return await _create(admin, args)
        names = await _names(admin)
        if args.action == "list":
            found = matching(names, args.topic, args.exclude_internal)
            if found:
                print("\n".join(found))
            return 0
        if args.action == "describe":
            return await _describe(admin, args, names)
        found = matching(names, args.topic, args.exclude_internal)
        if not found:
            if args.if_exists:
                return 0
            raise TopicCommandError(f"Topic '{args.topic}' does not exist as expected")
        if args.action == "alter":
            return await _alter(admin, args, found)
        await _call(admin.delete_topics(found))
        return 0


async def _call(awaitable: Any) -> Any:
    from kjbod.admin import KafkaError

    try:
        return await awaitable
    except KafkaError as e:
        raise TopicCommandError(str(e)) from None


async def _names(admin: Any) -> list[str]:
    return sorted(await _call(admin.describe_topics(None)))


async def _create(admin: Any, args: argparse.Namespace) -> int:
    from kjbod.admin import KafkaError, NewTopic
    from kjbod.protocol.errors import ErrorCode

    name = args.topic
    configs = parse_configs(args.config)
    if "." in name and "_" in name:
        print("WARNING: '.' and '_' in one topic name: Kafka's metric names turn both into the same character, so "
              "this topic's metrics may be confused with another's. Use one of them, not both.")
    if args.replica_assignment is not None:
        new = NewTopic(name, configs=configs, assignments=parse_replica_assignment(args.replica_assignment))
    else:
        new = NewTopic(name, args.partitions if args.partitions is not None else -1,
                       args.replication_factor if args.replication_factor is not None else -1, configs)
    try:
        await admin.create_topics([new])
    except KafkaError as e:
        if getattr(e, "code", None) == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
            return 0
        raise TopicCommandError(str(e)) from None
    print(f"Created topic {name}.")
    return 0


async def _alter(admin: Any, args: argparse.Namespace, found: list[str]) -> int:
    from kjbod.admin import NewPartitions

    described = await _call(admin.describe_topics(found))
    wanted: dict[str, NewPartitions] = {}
    assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment is not None else None
    for name in found:
        current = len(described[name].partitions)
        if assignment is None:
            wanted[name] = NewPartitions(args.partitions)
            continue
        extra = [ids for p, ids in sorted(assignment.items()) if p >= current]
        if len(extra) != args.partitions - current:
            raise TopicCommandError(f"--replica-assignment names {len(assignment)} partitions: {name} has {current} "
                                    f"and grows to {args.partitions}, so it needs entries for partitions "
                                    f"{current} to {args.partitions - 1}")
        wanted[name] = NewPartitions(args.partitions, extra)
    await _call(admin.create_partitions(wanted))
    return 0


async def _describe(admin: Any, args: argparse.Namespace, names: list[str]) -> int:
    from kjbod.admin import ConfigResource
    from kjbod.storage.ids import uuid_text

    described_all = None
    if args.topic_id is not None:
        described_all = await _call(admin.describe_topics(names))
        wanted = args.topic_id.strip()
        found = [n for n, td in described_all.items() if td.topic_id is not None and wanted in (
            uuid_text(td.topic_id), str(td.topic_id))]
        if not found and not args.if_exists:
            raise TopicCommandError(f"TopicId '{args.topic_id}' does not exist as expected")
    else:
        found = matching(names, args.topic, args.exclude_internal)
        if not found and args.topic and not args.if_exists:
            raise TopicCommandError(f"Topic '{args.topic}' does not exist as expected")
    if not found:
        return 0
    from kjbod.admin import UnsupportedVersionError

    described, elr_known = described_all, False
    if described is None:
        try:  # as Kafka's tool since 3.8: DescribeTopicPartitions, a page at a time; Metadata for older brokers
            described = await _call(admin.describe_topic_partitions(
                found, partition_limit=args.partition_size_limit_per_response))
            elr_known = True
        except UnsupportedVersionError:
            described = await _call(admin.describe_topics(found))
    configs = await _call(admin.describe_configs([ConfigResource.topic(n) for n in found]))
    cluster = await _call(admin.describe_cluster())
    live = {b.node_id for b in cluster.brokers}
    try:
        reassignments = await admin.list_partition_reassignments(
            {n: [p.partition for p in described[n].partitions] for n in found})
    except Exception:  # as Kafka's tool: a cluster that cannot list them is described without them
        reassignments = {}
    for name in found:
        for line in describe_lines(described[name], configs[ConfigResource.topic(name)], reassignments, live, args,
                                   elr_known):
            print(line)
    return 0
