"""`kjbod transactions`: kafka-transactions.sh's `list`, `describe`, `describe-producers`, `find-hanging` and
`abort`, over kjbod's admin client.

Strategy: the tool's options and tables.  `--bootstrap-server` (and `--command-config`) come before the command,
as for Kafka's tool.  `list` asks every broker (ListTransactions: each lists the transactions it coordinates),
`describe --transactional-id` the id's coordinator (DescribeTransactions), `describe-producers --topic
--partition` the partition's leader or `--broker-id` (DescribeProducers).  Each table is built by a pure function
from plain rows, as Kafka's tool prints it: every value padded to its column's width and followed by a tab, one
line for the headers.  A failed call prints the tool's "Failed to ..." line with the reason on standard error and
exits 1; an option mistake is one line and exit code 2, as for every kjbod command.

`find-hanging` (KIP-664) looks for transactions left open on partitions that no coordinator will end: every
producer with an open transaction on the partitions searched (`--topic`, with `--partition`, and/or the replicas
of `--broker-id`; DescribeProducers in batches of 500) whose last write is older than `--max-transaction-timeout`
minutes (15), kept when ListTransactions knows no transactional id for its producer id, when the coordinator
does not know that id, or when the id's ongoing transaction does not include the partition. `abort` ends one
with an abort marker written by the partition's leader (WriteTxnMarkers), the producer found by `--start-offset`
(DescribeProducers) or given as `--producer-id`, `--producer-epoch` and `--coordinator-epoch`; it prints
nothing when it worked, as the tool.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from typing import Any

from kjbod.cli.command_config import add_command_config

__all__ = ["add_subcommand", "describe_table", "hanging_table", "list_table", "producers_table", "table"]

EXIT_FAILED = 1
DEFAULT_TIMEOUT_S = 30.0
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")
BATCH = 500  # partitions per DescribeProducers, as the tool batches them
TRANSACTIONAL_ID_NOT_FOUND = 105


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
    hanging = commands.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--broker-id", type=int, default=None, help="broker id to search for hanging transactions")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="maximum transaction timeout in minutes to limit the scope of the search (15 minutes "
                              "by default)")
    hanging.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    hanging.add_argument("--partition", type=int, help="partition number")
    abort = commands.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    abort.add_argument("--topic", required=True, help="topic name")
    abort.add_argument("--partition", type=int, required=True, help="partition number")
    abort.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int, help="producer id (without --start-offset)")
    abort.add_argument("--producer-epoch", type=int, help="producer epoch (without --start-offset)")
    abort.add_argument("--coordinator-epoch", type=int, help="coordinator epoch (without --start-offset)")
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


def hanging_table(found: Sequence[tuple[str, int, Any]], now_ms: int) -> str:
    """find-hanging's table: one row per (topic, partition, producer state)."""
    return table(HANGING_HEADERS, [
        (topic, str(partition), str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch),
         str(s.current_txn_start_offset if s.current_txn_start_offset is not None else -1), str(s.last_timestamp),
         str((now_ms - s.last_timestamp) // 60_000))
        for topic, partition, s in found])


def _check(args: argparse.Namespace) -> None:
    from kjbod.cli.main import UserError

    if args.transactions_command == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise UserError("The `find-hanging` command requires either --topic or --broker-id to limit the scope "
                            "of the search")
        if args.partition is not None and args.topic is None:
            raise UserError("The --partition argument requires --topic to be provided")
    elif args.transactions_command == "abort" and args.start_offset is None:
        if args.producer_id is None:
            raise UserError("The transaction to abort must be identified either with --start-offset (for brokers "
                            "on 3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for "
                            "older brokers)")
        if args.producer_epoch is None:
            raise UserError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise UserError("Missing required argument --coordinator-epoch")


def _command(args: argparse.Namespace) -> int:
    _check(args)
    return asyncio.run(_run(args))


async def _find_hanging(client: Any, args: argparse.Namespace) -> int:
    from kjbod.admin import KafkaError

    now_ms = int(time.time() * 1000)
    limit_ms = args.max_transaction_timeout * 60_000
    if args.topic is not None and args.partition is not None:
        searched = [(args.topic, args.partition)]
    else:
        try:
            described = await client.describe_topics([args.topic] if args.topic is not None else None)
        except KafkaError as e:
            return _failed("Failed to describe topics", e)
        searched = [(name, p.partition) for name, t in sorted(described.items()) for p in t.partitions
                    if args.broker_id is None or args.broker_id in p.replicas]
    candidates: list[tuple[str, int, Any]] = []
    for at in range(0, len(searched), BATCH):
        batch = searched[at:at + BATCH]
        try:
            results = await client.describe_producers(batch, broker_id=args.broker_id)
        except KafkaError as e:
            return _failed(f"Failed to describe producers for {len(batch)} partitions on broker "
                           f"{args.broker_id if args.broker_id is not None else 'leaders'}", e)
        for tp in batch:
            candidates += [(tp[0], tp[1], s) for s in results[tp].producers
                           if s.current_txn_start_offset is not None and now_ms - s.last_timestamp > limit_ms]
    hanging: list[tuple[str, int, Any]] = []
    if candidates:
        producer_ids = {s.producer_id for _, _, s in candidates}
        try:
            listings = await client.list_transactions(producer_ids=producer_ids)
        except KafkaError as e:
            return _failed(f"Failed to list transactions for {len(producer_ids)} producers", e)
        ids = {t.producer_id: t.transactional_id for t in listings if t.producer_id in producer_ids}
        try:
            descriptions = await client.describe_transactions(sorted(set(ids.values()))) if ids else {}
        except KafkaError as e:
            return _failed(f"Failed to describe {len(set(ids.values()))} transactions", e)
        for topic, partition, s in candidates:
            tid = ids.get(s.producer_id)
            d = descriptions.get(tid) if tid is not None else None
            if d is not None and d.error is not None:
                if getattr(d.error, "code", None) != TRANSACTIONAL_ID_NOT_FOUND:
                    return _failed(f"Failed to describe {len(set(ids.values()))} transactions", d.error)
                d = None
            if d is None or (topic, partition) not in d.partitions:
                hanging.append((topic, partition, s))
    sys.stdout.write(hanging_table(hanging, now_ms))
    return 0


async def _abort(client: Any, args: argparse.Namespace) -> int:
    from kjbod.admin import KafkaError

    tp = (args.topic, args.partition)
    if args.start_offset is not None:
        try:
            result = (await client.describe_producers([tp], raise_on_error=False))[tp]
        except KafkaError as e:
            return _failed(f"Failed to validate producer state for partition {tp[0]}-{tp[1]}", e)
        if result.error is not None:
            return _failed(f"Failed to validate producer state for partition {tp[0]}-{tp[1]}", result.error)
        found = [s for s in result.producers if s.current_txn_start_offset == args.start_offset]
        if not found:
            print(f"Could not find any open transactions starting at offset {args.start_offset} on partition "
                  f"{tp[0]}-{tp[1]}", file=sys.stderr)
            return EXIT_FAILED
        producer_id, epoch, coordinator_epoch = found[0].producer_id, found[0].producer_epoch, max(
            found[0].coordinator_epoch, 0)
    else:
        producer_id, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, max(args.coordinator_epoch, 0)
    spec = (f"AbortTransactionSpec(topicPartition={tp[0]}-{tp[1]}, producerId={producer_id}, "
            f"producerEpoch={epoch}, coordinatorEpoch={coordinator_epoch})")
    try:
        await client.abort_transaction(tp[0], tp[1], producer_id, epoch, coordinator_epoch)
    except KafkaError as e:
        return _failed(f"Failed to abort transaction {spec}", e)
    return 0


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
        elif command == "find-hanging":
            return await _find_hanging(client, args)
        elif command == "abort":
            return await _abort(client, args)
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
