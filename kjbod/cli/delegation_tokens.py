"""`kjbod delegation-tokens`: kafka-delegation-tokens.sh, with its options and its output.

Strategy: exactly one of --create, --renew, --expire or --describe, checked as the tool checks them (--create needs
--max-life-time-period, --renew needs --hmac and --renew-time-period, --expire needs --hmac and
--expiry-time-period; options of another action are refused), then one admin call. The output is the tool's:

    Calling create token operation with renewers :[User:bob] , max-life-time-period :-1
    Created delegation token with tokenId : 9f1c...

    TOKENID         HMAC                           OWNER           REQUESTER       RENEWERS    ISSUEDATE ...

Dates are printed as the tool prints them (yyyy-MM-ddTHH:mm, local time). A mistake in the options is one line and
exit code 2; a refusal from the cluster prints its error on stderr and exits 1. Unlike Kafka's tool,
--command-config is optional (a PLAINTEXT client is refused by the broker with DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
which is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import sys
import time
from typing import Any

from kjbod.cli.command_config import add_command_config, admin_options
from kjbod.cli.main import UserError

__all__ = ["add_subcommand"]

EXIT_FAILED = 1


def add_subcommand(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "delegation-tokens", help="create, renew, expire and describe delegation tokens (kafka-delegation-tokens.sh)",
        description="Creates, renews, expires or describes delegation tokens, as kafka-delegation-tokens.sh does. "
                    "A client authenticates with a token over SASL/SCRAM: user name the token id, password the "
                    "HMAC, and tokenauth=true.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                   help="a broker to connect to (comma-separated for several)")
    add_command_config(p)
    action = p.add_argument_group("actions")
    action.add_argument("--create", action="store_true", help="create a token (--max-life-time-period required)")
    action.add_argument("--renew", action="store_true", help="renew a token (--hmac, --renew-time-period)")
    action.add_argument("--expire", action="store_true", help="expire a token (--hmac, --expiry-time-period)")
    action.add_argument("--describe", action="store_true",
                        help="describe the tokens one may see (of the --owner-principal given, else all)")
    p.add_argument("--max-life-time-period", type=int, metavar="MS",
                   help="the token's longest life in ms; -1: the broker's delegation.token.max.lifetime.ms")
    p.add_argument("--renewer-principal", action="append", default=[], metavar="TYPE:NAME",
                   help="a principal that may renew the token (repeatable)")
    p.add_argument("--owner-principal", action="append", default=[], metavar="TYPE:NAME",
                   help="--create: the owner to make the token for (needs CREATE_TOKENS on that user); "
                        "--describe: list these owners' (or renewers') tokens (repeatable)")
    p.add_argument("--hmac", metavar="HMAC", help="the token's HMAC, base64 (as --create printed it)")
    p.add_argument("--renew-time-period", type=int, metavar="MS",
                   help="how far from now to push the expiry; -1: the broker's delegation.token.expiry.time.ms")
    p.add_argument("--expiry-time-period", type=int, metavar="MS",
                   help="expire the token this many ms from now; -1: at once")
    p.set_defaults(func=_command)


def _check(args: argparse.Namespace) -> None:
    if sum((args.create, args.renew, args.expire, args.describe)) != 1:
        raise UserError("Command must include exactly one action: --create, --renew, --expire or --describe")
    given = {name for name in ("max_life_time_period", "renew_time_period", "expiry_time_period", "hmac")
             if getattr(args, name) is not None}
    if args.renewer_principal:
        given.add("renewer_principal")
    if args.owner_principal:
        given.add("owner_principal")
    required = {"create": ["max_life_time_period"], "renew": ["hmac", "renew_time_period"],
                "expire": ["hmac", "expiry_time_period"], "describe": []}
    invalid = {"create": {"hmac", "renew_time_period", "expiry_time_period"},
               "renew": {"renewer_principal", "max_life_time_period", "expiry_time_period", "owner_principal"},
               "expire": {"renewer_principal", "max_life_time_period", "renew_time_period", "owner_principal"},
               "describe": {"renewer_principal", "max_life_time_period", "hmac", "renew_time_period",
                            "expiry_time_period"}}
    act = next(a for a in ("create", "renew", "expire", "describe") if getattr(args, a))
    for name in required[act]:
        if name not in given:
            raise UserError(f"Missing required argument \"[{name.replace('_', '-')}]\"")
    for name in sorted(invalid[act] & given):
        raise UserError(f"Option \"[{act}]\" can't be used with option \"[{name.replace('_', '-')}]\"")
    for p in (*args.renewer_principal, *args.owner_principal):
        kind, sep, name = p.partition(":")
        if not sep or not kind or not name:
            raise UserError(f"expected a string in format principalType:principalName but got {p}")
    if args.hmac is not None:
        try:
            base64.b64decode(args.hmac, validate=True)
        except (binascii.Error, ValueError):
            raise UserError(f"--hmac: {args.hmac!r} is not base64") from None


def _command(args: argparse.Namespace) -> int:
    _check(args)
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    from kjbod.admin import AdminClient, KafkaError

    try:
        client = AdminClient(args.bootstrap_server, client_id="kjbod-delegation-tokens", **admin_options(args))
    except ValueError as e:
        raise UserError(f"--bootstrap-server: {e}") from None
    try:
        try:
            await client.start()
            if args.create:
                await _create(client, args)
            elif args.renew:
                await _renew(client, args)
            elif args.expire:
                await _expire(client, args)
            else:
                await _describe(client, args)
            return 0
        except KafkaError as e:
            print(f"Error while executing delegation token command: {e}", file=sys.stderr)
            return EXIT_FAILED
    finally:
        await client.close()


def _date(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M", time.localtime(ms / 1000))


def _principals(names: list[str]) -> str:
    return "[" + ", ".join(names) + "]"


def _print_tokens(tokens: list[Any]) -> None:
    row = "\n{:<15} {:<30} {:<15} {:<15} {:<25} {:<15} {:<15} {:<15}"
    print(row.format("TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE", "EXPIRYDATE", "MAXDATE"))
    for t in tokens:
        print(row.format(t.token_id, t.hmac_base64, t.owner, t.requester, _principals(list(t.renewers)),
                         _date(t.issue_timestamp), _date(t.expiry_timestamp), _date(t.max_timestamp)))


async def _create(client: Any, args: argparse.Namespace) -> None:
    print(f"Calling create token operation with renewers :{_principals(args.renewer_principal)} , "
          f"max-life-time-period :{args.max_life_time_period}")
    token = await client.create_delegation_token(
        owner=args.owner_principal[0] if args.owner_principal else None, renewers=args.renewer_principal,
        max_lifetime_ms=args.max_life_time_period)
    print(f"Created delegation token with tokenId : {token.token_id}")
    _print_tokens([token])


async def _renew(client: Any, args: argparse.Namespace) -> None:
    print(f"Calling renew token operation with hmac :{args.hmac} , renew-time-period :{args.renew_time_period}")
    expiry = await client.renew_delegation_token(base64.b64decode(args.hmac),
                                                 renew_period_ms=args.renew_time_period)
    print(f"Completed renew operation. New expiry date : {_date(expiry)}")


async def _expire(client: Any, args: argparse.Namespace) -> None:
    print(f"Calling expire token operation with hmac :{args.hmac} , expire-time-period :{args.expiry_time_period}")
    expiry = await client.expire_delegation_token(base64.b64decode(args.hmac),
                                                  expiry_time_period_ms=args.expiry_time_period)
    print(f"Completed expire operation. New expiry date : {_date(expiry)}")


async def _describe(client: Any, args: argparse.Namespace) -> None:
    if args.owner_principal:
        print(f"Calling describe token operation for owners: {_principals(args.owner_principal)}")
    else:
        print("Calling describe token operation for current user.")
    tokens = await client.describe_delegation_tokens(args.owner_principal or None)
    print(f"Total number of tokens : {len(tokens)}")
    _print_tokens(tokens)
