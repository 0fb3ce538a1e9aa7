"""`kjbod delete-records`: kafka-delete-records.sh, with its offset JSON file and its output.

Strategy: read and check the whole file first (Kafka's format, version 1: {"partitions": [{"topic": "t",
"partition": 0, "offset": 5}], "version": 1}, where offset -1 means the high watermark), refusing a partition
named twice as Kafka's tool does; then one `AdminClient.delete_records` call, which sends each partition to its
leader; then one line per partition, in the file's order, in the tool's own shape:

    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 5
    partition: t-1	error: OFFSET_OUT_OF_RANGE: ...

The exit code is 1 when any partition failed (Kafka's tool exits 0 either way; a script wants to know).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from kjbod.cli.log_dirs import _admin, _positive_float
from kjbod.cli.main import UserError

__all__ = ["add_subcommand", "parse_offset_json"]

EXIT_FAILED = 1
OFFSET_JSON_VERSION = 1  # the only version Kafka's tool reads; a file without "version" is read as it


def add_subcommand(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "delete-records", help="delete the records of partitions below an offset (kafka-delete-records.sh)",
        description="Moves the log start offset of each listed partition up to the given offset (DeleteRecords, "
                    "sent to each partition's leader), deleting the records below it. The file is "
                    'kafka-delete-records.sh\'s: {"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], '
                    '"version": 1}; offset -1 means the high watermark.')
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                        help="a broker to connect to (comma-separated for several)")
    parser.add_argument("--offset-json-file", metavar="FILE", required=True,
                        help="the JSON file with the offset per partition ('-' reads standard input)")
    parser.add_argument("--timeout", metavar="SECONDS", type=_positive_float, default=30.0,
                        help="how long the deletion may take, retries included (default: 30)")
    parser.set_defaults(func=_command)


def parse_offset_json(text: str) -> dict[tuple[str, int], int]:
    """The offset file -> {(topic, partition): offset}, in the file's order; UserError naming what is wrong."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise UserError(f"the offset file is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise UserError("the offset file must hold a JSON object with a \"partitions\" list")
    version = doc.get("version", OFFSET_JSON_VERSION)
    if version != OFFSET_JSON_VERSION or isinstance(version, bool):
        raise UserError(f"not a supported version field value: {version!r} (only {OFFSET_JSON_VERSION})")
    partitions = doc.get("partitions")
    if partitions is None:
        raise UserError("missing partitions field")
    if not isinstance(partitions, list):
        raise UserError("the partitions field must be a list")
    out: dict[tuple[str, int], int] = {}
    duplicates: list[str] = []
    for i, entry in enumerate(partitions):
        if not isinstance(entry, dict):
            raise UserError(f"partitions[{i}] must be an object with topic, partition and offset")
        topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
        if not isinstance(topic, str) or not topic:
            raise UserError(f"partitions[{i}]: topic must be a non-empty string, not {topic!r}")
        for name, value in (("partition", partition), ("offset", offset)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise UserError(f"partitions[{i}]: {name} must be an integer, not {value!r}")
        assert isinstance(partition, int) and isinstance(offset, int)
        key = (topic, partition)
        if key in out and f"{topic}-{partition}" not in duplicates:
            duplicates.append(f"{topic}-{partition}")
        out[key] = offset
    if duplicates:
        raise UserError("the offset file contains duplicate topic partitions: " + ",".join(duplicates))
    return out


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _command(args: argparse.Namespace) -> int:
    offsets = parse_offset_json(_read(args.offset_json_file))
    return asyncio.run(_delete(args, offsets))


async def _delete(args: argparse.Namespace, offsets: dict[tuple[str, int], int]) -> int:
    from kjbod.admin import KafkaError

    async with _admin(args, "kjbod-delete-records") as client:
        print("Executing records delete operation", flush=True)
        try:
            results = await client.delete_records(offsets, raise_on_error=False)
        except KafkaError as e:
            raise UserError(f"records delete operation failed: {e}") from None
    print("Records delete operation completed:")
    failed = False
    for (topic, partition), result in results.items():
        if result.error is None:
            print(f"partition: {topic}-{partition}\tlow_watermark: {result.low_watermark}")
        else:
            failed = True
            print(f"partition: {topic}-{partition}\terror: {result.error}")
    return EXIT_FAILED if failed else 0
