"""`kjbod client-metrics`: kafka-client-metrics.sh for KIP-714 client metrics subscriptions (CLIENT_METRICS config
resources): --list, --describe [--name], --alter (--name or --generate-name) with --metrics, --interval and
--match, and --delete --name, with the tool's checks, messages and output. An empty --metrics, --interval or
--match value removes that config, as the tool does."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from kjbod.cli.command_config import add_command_config
from kjbod.cli.main import UserError

EXIT_FAILED = 1
DEFAULT_TIMEOUT_S = 30.0  # each request's, retries included
SELECTORS = ("client_id", "client_instance_id", "client_software_name", "client_software_version",
             "client_source_address", "client_source_port")


def add_subcommand(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "client-metrics", help="list, describe and alter client metrics subscriptions (kafka-client-metrics.sh)",
        description="Manages the client metrics subscriptions clients push their metrics for (KIP-714), as "
                    "kafka-client-metrics.sh does: exactly one of --list, --describe, --alter, --delete.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True, help="a broker to connect to")
    add_command_config(p)
    p.add_argument("--alter", action="store_true", help="create or change the subscription named")
    p.add_argument("--delete", action="store_true", help="delete the subscription named")
    p.add_argument("--describe", action="store_true", help="show the configs of one subscription, or of all")
    p.add_argument("--list", action="store_true", help="list the subscriptions' names")
    p.add_argument("--name", help="the subscription's name")
    p.add_argument("--generate-name", action="store_true", help="with --alter: name it with a new random id")
    p.add_argument("--interval", metavar="MS", help="how often matching clients push, in ms (100 to 3600000)")
    p.add_argument("--metrics", metavar="M1,M2", help="metric name prefixes to push ('*' for all)")
    p.add_argument("--match", metavar="K1=V1,K2=V2",
                   help="selectors a client must all match (regexes): " + ", ".join(SELECTORS))
    p.set_defaults(func=_command)


def _check(args: argparse.Namespace) -> None:
    if sum(map(bool, (args.alter, args.delete, args.describe, args.list))) != 1:
        raise UserError("Command must include exactly one action: --alter, --delete, --describe or --list.")
    alter_only = [f"--{n.replace('_', '-')}" for n in ("generate_name", "interval", "match", "metrics")
                  if getattr(args, n) not in (None, False)]
    if not args.alter and alter_only:
        action = "--delete" if args.delete else "--describe" if args.describe else "--list"
        raise UserError(f"Option \"[{action[2:]}]\" can't be used with option \"[{alter_only[0][2:]}]\"")
    if args.list and args.name is not None:
        raise UserError("Option \"[list]\" can't be used with option \"[name]\"")
    if args.alter and (args.name is not None) == args.generate_name:
        raise UserError("One of --name or --generate-name must be specified with --alter.")
    if args.delete and args.name is None:
        raise UserError("A client metrics resource name must be specified with --delete.")
    if args.interval not in (None, ""):
        try:
            int(args.interval)
        except ValueError:
            raise UserError(f"Cannot parse argument '{args.interval}' of option interval") from None


def _command(args: argparse.Namespace) -> int:
    _check(args)
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    from kjbod.admin import KafkaError
    from kjbod.admin.types import AlterConfigOp, AlterConfigOpType, ConfigResource
    from kjbod.cli.log_dirs import _admin

    async with _admin(args, "kjbod-client-metrics", timeout=DEFAULT_TIMEOUT_S) as client:
        try:
            if args.list:
                print("\n".join(await client.list_client_metrics_resources()))
                return 0
            if args.describe:
                names = [args.name] if args.name is not None else await client.list_client_metrics_resources()
                for name in names:
                    resource = ConfigResource.client_metrics(name)
                    entries = (await client.describe_configs([resource]))[resource]
                    print(f"Client metrics configs for {name} are:")
                    for key in sorted(entries):
                        print(f"  {key}={entries[key].value}")
                return 0
            if args.alter:
                from kjbod.storage.ids import uuid_to_str

                name = args.name if args.name is not None else uuid_to_str(os.urandom(16))
                wanted = {"interval.ms": args.interval, "metrics": args.metrics, "match": args.match}
                ops = [AlterConfigOp(k, v, AlterConfigOpType.SET) if v else AlterConfigOp(k, None, AlterConfigOpType.DELETE)
                       for k, v in wanted.items() if v is not None]
                resource = ConfigResource.client_metrics(name)
                results = await client.incremental_alter_configs({resource: ops})
                _raise_first(results)
                print(f"Altered client metrics config for {name}.")
                return 0
            resource = ConfigResource.client_metrics(args.name)
            current = (await client.describe_configs([resource]))[resource]
            results = await client.incremental_alter_configs(
                {resource: [AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in sorted(current)]})
            _raise_first(results)
            print(f"Deleted client metrics config for {args.name}.")
            return 0
        except KafkaError as e:
            print(f"Error while executing client metrics command : {e}", file=sys.stdout)
            return EXIT_FAILED


def _raise_first(results: Any) -> None:
    for result in results.values():
        if result.error is not None:
            raise result.error
