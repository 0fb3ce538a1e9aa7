"""`kjbod leader-election`: kafka-leader-election.sh, with its options, its JSON file and its output.

Strategy: check the options as the tool does (`--bootstrap-server` and `--election-type` required; exactly one of
`--topic` with `--partition`, `--all-topic-partitions` or `--path-to-json-file`), read the file's partitions
({"partitions": [{"topic": "foo", "partition": 1}]}, a partition named twice refused), then one ElectLeaders
through the controller (`AdminClient.elect_leaders`) and the tool's lines, partitions written `topic-partition`:

    Successfully completed leader election (PREFERRED) for partitions foo-0, foo-1
    Valid replica already elected for partitions foo-2
    Error completing leader election (PREFERRED) for partition: foo-3: PREFERRED_LEADER_NOT_AVAILABLE: ...

A partition that needed no election (ELECTION_NOT_NEEDED) is the second line; any other error a line of the third
kind, then "N replica(s) could not be elected" on standard error and exit code 1. `preferred` moves leadership
back to each partition's first replica where that replica is in sync; `unclean` elects any live replica only
where a partition has no leader (see the README's "Partition leadership" for when kjbod's controller does that by
itself).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from kjbod.cli.command_config import add_command_config
from kjbod.cli.log_dirs import _admin, _positive_float
from kjbod.cli.main import UserError, error_text

__all__ = ["add_subcommand", "parse_election_json"]

EXIT_FAILED = 1
ELECTION_TYPES = {"preferred": 0, "unclean": 1}
ELECTION_NOT_NEEDED = 84


def add_subcommand(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "leader-election", help="move partition leadership to the preferred replica, or elect one where there is "
                                "none (kafka-leader-election.sh)",
        description="Holds leader elections (ElectLeaders): --election-type preferred moves each partition's "
                    "leadership to its preferred (first) replica if it is in sync; unclean elects any live replica "
                    "for a partition that has no leader. Exactly one of --topic with --partition, "
                    "--all-topic-partitions or --path-to-json-file ({\"partitions\": [{\"topic\": \"foo\", "
                    "\"partition\": 1}]}).")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="a broker to connect to (comma-separated for several). REQUIRED")
    parser.add_argument("--election-type", metavar="TYPE", type=str.lower,
                        help="preferred or unclean. REQUIRED")
    parser.add_argument("--topic", metavar="NAME", help="the topic of the one partition to elect a leader for")
    parser.add_argument("--partition", metavar="ID", type=int, help="its partition (with --topic)")
    parser.add_argument("--all-topic-partitions", action="store_true",
                        help="every partition the election type applies to")
    parser.add_argument("--path-to-json-file", metavar="FILE", help="a JSON file listing the partitions")
    parser.add_argument("--admin.config", dest="command_config", metavar="FILE",
                        help="Kafka client properties for the connection (as --command-config)")
    add_command_config(parser)
    parser.add_argument("--timeout", metavar="SECONDS", type=_positive_float, default=30.0,
                        help="how long the elections may take, retries included (default: 30)")
    parser.set_defaults(func=_command)


def parse_election_json(text: str) -> list[tuple[str, int]]:
    """The file's partitions, in its order; UserError naming what is wrong (the tool's messages where it has one)."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise UserError(f"the election file is not valid JSON: {e}") from None
    if doc is None or doc == {}:
        raise UserError("Replica election data is empty")
    if not isinstance(doc, dict):
        raise UserError("the election file must hold a JSON object with a \"partitions\" list")
    items = doc.get("partitions")
    if items is None:
        raise UserError("Replica election data is missing \"partitions\" field")
    if not isinstance(items, list):
        raise UserError("\"partitions\" must be a list of {\"topic\": ..., \"partition\": ...}")
    out: list[tuple[str, int]] = []
    for i, item in enumerate(items):
        topic = item.get("topic") if isinstance(item, dict) else None
        index = item.get("partition") if isinstance(item, dict) else None
        if not isinstance(topic, str) or not isinstance(index, int) or isinstance(index, bool):
            raise UserError(f"partitions[{i}]: needs a string \"topic\" and an integer \"partition\"")
        out.append((topic, index))
    twice = sorted({p for p in out if out.count(p) > 1})
    if twice:
        raise UserError("Replica election data contains duplicate partitions: "
                        + ",".join(f"{t}-{p}" for t, p in twice))
    return out


def _check(args: argparse.Namespace) -> tuple[int, list[tuple[str, int]] | None]:
    missing = [name for name, value in (("bootstrap-server", args.bootstrap_server),
                                        ("election-type", args.election_type)) if value is None]
    if missing:
        raise UserError(f"Missing required option(s): {', '.join(missing)}")
    if args.election_type not in ELECTION_TYPES:
        raise UserError(f"--election-type: {args.election_type!r} is not one of preferred, unclean")
    chosen = sum(bool(x) for x in (args.topic is not None, args.all_topic_partitions, args.path_to_json_file))
    if chosen != 1:
        raise UserError("One and only one of the following options is required: topic, all-topic-partitions, "
                        "path-to-json-file")
    if args.topic is not None and args.partition is None:
        raise UserError("Missing required option(s): partition")
    if args.topic is None and args.partition is not None:
        raise UserError("Option partition is only allowed if topic is used")
    kind = ELECTION_TYPES[args.election_type]
    if args.path_to_json_file:
        try:
            with open(args.path_to_json_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise UserError(f"--path-to-json-file: {e.strerror or e}: {args.path_to_json_file}") from None
        return kind, parse_election_json(text)
    if args.topic is not None:
        return kind, [(args.topic, args.partition)]
    return kind, None


def _command(args: argparse.Namespace) -> int:
    kind, partitions = _check(args)
    return asyncio.run(_run(args, kind, partitions))


async def _run(args: argparse.Namespace, kind: int, partitions: list[tuple[str, int]] | None) -> int:
    from kjbod.admin import KafkaError
    from kjbod.protocol.errors import ErrorCode

    label = "PREFERRED" if kind == 0 else "UNCLEAN"
    async with _admin(args, "kjbod-leader-election") as client:
        try:
            results = await client.elect_leaders(kind, partitions)
        except KafkaError as e:
            if getattr(e, "code", None) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
                print("Not authorized to perform leader election")
            elif getattr(e, "code", None) == ErrorCode.REQUEST_TIMED_OUT:
                print("Timeout waiting for election results")
            print(f"Error while making request: {e}", file=sys.stderr)
            return EXIT_FAILED
    order = partitions if partitions is not None else sorted(results)
    done = [p for p in order if p in results and results[p][0] == 0]
    noop = [p for p in order if p in results and results[p][0] == ELECTION_NOT_NEEDED]
    failed = [p for p in order if p in results and results[p][0] not in (0, ELECTION_NOT_NEEDED)]
    if done:
        print(f"Successfully completed leader election ({label}) for partitions "
              + ", ".join(f"{t}-{i}" for t, i in done))
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(f"{t}-{i}" for t, i in noop))
    for t, i in failed:
        print(f"Error completing leader election ({label}) for partition: {t}-{i}: "
              f"{error_text(*results[(t, i)])}")
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return EXIT_FAILED
    return 0
