"""`kjbod get-offsets`: kafka-get-offsets.sh (GetOffsetShell), with its options and its output.

Strategy: pick the partitions as the tool does, either `--topic` (a regular expression, Kafka's IncludeList) with
`--partitions` (ids), or `--topic-partitions` (rules `topic-regex:partitions` separated by commas, partitions a
number, `N-M` with M excluded, `N-` or `-M`, or left out for all); internal topics count unless
`--exclude-internal-topics`. Then one ListOffsets per leader for `--time` (latest by default: `-1` or `latest`,
`-2` or `earliest`, `-3` or `max-timestamp`, `-4` or `earliest-local`, `-5` or `latest-tiered`, or a timestamp
in ms), and one line per partition that has an offset, `topic:partition:offset`, sorted as the tool sorts them
(by `topic-partition` as text). A partition whose lookup fails is skipped with a line on standard error; none
matching the filters is an error (exit 1), as in the tool.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Callable
from typing import Any

from kjbod.cli.command_config import add_command_config
from kjbod.cli.log_dirs import _admin, _positive_float
from kjbod.cli.main import UserError
from kjbod.cli.topics import topic_filter

__all__ = ["add_subcommand", "parse_time", "partition_rules"]

EXIT_FAILED = 1
TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
INT_MAX = 2**31 - 1

Rule = tuple[re.Pattern[str], Callable[[int], bool]]


def add_subcommand(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "get-offsets", help="print the offsets of partitions for a time (kafka-get-offsets.sh)",
        description="Prints topic:partition:offset for each partition chosen, the offset ListOffsets gives for "
                    "--time: latest (-1, the default), earliest (-2), max-timestamp (-3), earliest-local (-4), "
                    "latest-tiered (-5) or a timestamp in ms (the first offset at or after it).")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the brokers to connect to. REQUIRED")
    parser.add_argument("--broker-list", dest="bootstrap_server_old", metavar="HOST:PORT",
                        help="the same, under its older name")
    parser.add_argument("--topic", metavar="REGEX", help="the topics, a regular expression (default: all)")
    parser.add_argument("--partitions", metavar="IDS", help="comma-separated partition ids (default: all)")
    parser.add_argument("--topic-partitions", metavar="RULES",
                        help="comma-separated topic:partition rules, e.g. topic1:1,topic2:0-3,topic3,topic4:5-,"
                             "topic5:-3 (not with --topic or --partitions)")
    parser.add_argument("--time", default="-1", metavar="TIME",
                        help="-1 or latest / -2 or earliest / -3 or max-timestamp / -4 or earliest-local / -5 or "
                             "latest-tiered, or a timestamp in ms (default: latest)")
    parser.add_argument("--exclude-internal-topics", action="store_true", help="leave internal topics out")
    add_command_config(parser)
    parser.add_argument("--timeout", metavar="SECONDS", type=_positive_float, default=30.0,
                        help="how long the lookups may take, retries included (default: 30)")
    parser.set_defaults(func=_command)


def parse_time(text: str) -> int:
    """--time as the tool reads it: a name, or a number (-1 to -5 are the same specs as the names)."""
    if text in TIMES:
        return TIMES[text]
    try:
        return int(text)
    except ValueError:
        raise UserError(f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or "
                        "max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a specified long format "
                        "timestamp") from None


def partition_rules(topic: str | None, partitions: str | None, topic_partitions: str | None) -> list[Rule]:
    """The filters the options describe: a partition is chosen when any rule matches its topic and its id."""
    if topic_partitions is not None:
        if topic is not None or partitions is not None:
            raise UserError("--topic-partitions cannot be used with --topic or --partitions")
        rules: list[Rule] = []
        for spec in topic_partitions.split(","):
            m = _RULE.fullmatch(spec)
            if m is None:
                raise UserError(f"Invalid rule specification: {spec}")
            name, one, low, high = (g or None for g in m.groups())
            pattern = topic_filter(name) if name else re.compile(".*")
            if one is not None:
                rules.append((pattern, _between(int(one), int(one) + 1)))
            else:
                rules.append((pattern, _between(int(low) if low else 0, int(high) if high else INT_MAX)))
        return rules
    ids: set[int] = set()
    if partitions:
        try:
            ids = {int(x) for x in partitions.split(",")}
        except ValueError:
            raise UserError("--partitions expects a comma separated list of numeric partition ids, but received: "
                            f"{partitions}") from None
    pattern = topic_filter(topic) if topic else re.compile(".*")
    return [(pattern, lambda p: not ids or p in ids)]


def _between(low: int, high: int) -> Callable[[int], bool]:
    """Partition ids from ``low`` up to ``high``, ``high`` left out."""
    return lambda p: low <= p < high


def _command(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap_server or args.bootstrap_server_old
    if not bootstrap:
        raise UserError("Missing required argument \"[bootstrap-server]\"")
    args.bootstrap_server = bootstrap
    spec = parse_time(args.time)
    rules = partition_rules(args.topic, args.partitions, args.topic_partitions)
    return asyncio.run(_run(args, spec, rules))


async def _run(args: argparse.Namespace, spec: int, rules: list[Rule]) -> int:
    from kjbod.admin import KafkaError

    async with _admin(args, "GetOffsetShell") as client:
        try:
            described = await client.describe_topics(None)
            chosen = [(name, p.partition) for name, t in described.items()
                      if not (args.exclude_internal_topics and t.is_internal)
                      for p in t.partitions
                      if any(pattern.fullmatch(name) and wanted(p.partition) for pattern, wanted in rules)]
            if not chosen:
                print("Error occurred: Could not match any topic-partitions with the specified filters",
                      file=sys.stderr)
                return EXIT_FAILED
            results = await client.list_offsets(dict.fromkeys(chosen, spec), raise_on_error=False)
        except KafkaError as e:
            print(f"Error occurred: {e}", file=sys.stderr)
            return EXIT_FAILED
    lines = []
    for topic, index in chosen:
        r = results[(topic, index)]
        if r.error is not None:
            print(f"Skip getting offsets for topic-partition {topic}-{index} due to error: {r.error}", file=sys.stderr)
        elif r.offset is not None:
            lines.append((f"{topic}-{index}", f"{topic}:{index}:{r.offset}"))
    for _, line in sorted(lines):
        print(line)
    return 0
