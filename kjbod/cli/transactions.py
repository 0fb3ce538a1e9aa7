"""`kjbod transactions`: kafka-transactions.sh's `list`, `describe` and `describe-producers`, over kjbod's admin
client.

Strategy: the tool's options and tables.  `--bootstrap-server` (and `--command-config`) come before the command,
as for Kafka's tool.  `list` asks every broker (ListTransactions: each lists the transactions it coordinates),
`describe --transactional-id` the id's coordinator (DescribeTransactions), `describe-producers --topic
--partition` the partition's leader or `--broker-id` (DescribeProducers).  Each table is built by a pure function
from plain rows, as Kafka's tool prints it: every value padded to its column's width and followed by a tab, one
line for the headers.  A failed call prints the tool's "Failed to ..." line with the reason on standard error and
exits 1; an option mistake is one line and exit code 2, as for every kjbod command.  Not served: `abort` and
`find-hanging`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from typing import Any

from kjbod.cli.command_config import add_command_config

__all__ = ["add_subcommand", "describe_table", "list_table", "producers_table", "table"]

EXIT_FAILED = 1
DEFAULT_TIMEOUT_S = 30.0
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset")


def add_subcommand(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "transactions", help="list and describe transactions and producers (kafka-transactions.sh)",
        description="kafka-transactions.sh's list, describe and describe-producers over kjbod's admin client, "
                    "with the Kafka tool's options and tables.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                   help="the server(s) to connect to (comma-separated)")
    add_command_config(p)
    commands = p.add_subparsers(dest="transactions_command", metavar="COMMAND", required=True)
    listing = commands.add_parser("list", help="list transactions")
    listing.add_argument("--duration-filter", metavar="MS", type=int, default=None,
                         help="only transactions running longer than this many ms (negative: all)")
    listing.add_argument("--transactional-id-pattern", metavar="REGEX", default=None,
                         help="only transactional ids this regular expression matches whole (KIP-1152)")
    describe = commands.add_parser("describe", help="describe the state of an active transactional id")
    describe.add_argument("--transactional-id", required=True, help="transactional id")
    producers = commands.add_parser("describe-producers",
                                    help="describe the states of active producers for a topic partition")
    producers.add_argument("--broker-id", type=int, default=None,
                           help="ask this broker (a replica of the partition) instead of the leader")
    producers.add_argument("--topic", required=True, help="topic name")
    producers.add_argument("--partition", type=int, required=True, help="partition number")
    p.set_defaults(func=_command)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Kafka's ToolsUtils.prettyPrintTable: each value padded to its column's width, then a tab."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    return "".join("".join(v.ljust(w) + "\t" for v, w in zip(row, widths, strict=True)) + "\n"
                   for row in [list(headers), *rows])


def list_table(listings: Sequence[Any]) -> str:
    return table(LIST_HEADERS, [(t.transactional_id, str(t.coordinator), str(t.producer_id), t.state)
                                for t in listings])


def describe_table(d: Any, now_ms: int) -> str:
    start = "None" if d.start_time_ms is None else str(d.start_time_ms)
    duration = "None" if d.start_time_ms is None else str(now_ms - d.start_time_ms)
    return table(DESCRIBE_HEADERS, [(str(d.coordinator), d.transactional_id, str(d.producer_id),
                                     str(d.producer_epoch), d.state, str(d.timeout_ms), start, duration,
                                     ",".join(f"{t}-{p}" for t, p in d.partitions))])


def producers_table(producers: Sequence[Any]) -> str:
    return table(PRODUCERS_HEADERS, [
        (str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch), str(s.last_sequence),
         str(s.last_timestamp), "None" if s.current_txn_start_offset is None else str(s.current_txn_start_offset))
        for s in producers])


def _command(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


def _failed(message: str, error: BaseException) -> int:
    print(f"{message}: {error}", file=sys.stderr)
    return EXIT_FAILED


async def _run(args: argparse.Namespace) -> int:
    from kjbod.admin import KafkaError
    from kjbod.cli.log_dirs import _admin

    async with _admin(args, "kjbod-transactions", timeout=DEFAULT_TIMEOUT_S) as client:
        command = args.transactions_command
        if command == "list":
            try:
                listings = await client.list_transactions(duration_ms=args.duration_filter,
                                                          transactional_id_pattern=args.transactional_id_pattern)
            except KafkaError as e:
                return _failed("Failed to list transactions", e)
            sys.stdout.write(list_table(listings))
        elif command == "describe":
            tid = args.transactional_id
            failure = f"Failed to describe transaction state of transactional-id `{tid}`"
            try:
                described = (await client.describe_transactions([tid]))[tid]
            except KafkaError as e:
                return _failed(failure, e)
            if described.error is not None:
                return _failed(failure, described.error)
            sys.stdout.write(describe_table(described, int(time.time() * 1000)))
        else:
            tp = (args.topic, args.partition)
            where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
            try:
                result = (await client.describe_producers([tp], broker_id=args.broker_id,
                                                          raise_on_error=False))[tp]
            except KafkaError as e:
                return _failed(f"Failed to describe producers for partition {tp[0]}-{tp[1]} on {where}", e)
            if result.error is not None:
                return _failed(f"Failed to describe producers for partition {tp[0]}-{tp[1]} on {where}",
                               result.error)
            sys.stdout.write(producers_table(result.producers))
        return 0
