"""`kjbod acls`: kafka-acls.sh, with its options, its rules and its output.

Strategy: turn the options into Kafka's resource patterns (or pattern filters) and entries exactly as the tool does
(--topic, --group, --cluster, --transactional-id, --delegation-token and --user-principal name the resources, with
--resource-pattern-type; every --allow-principal and
--deny-principal with every --operation and every host of its --allow-host or --deny-host, `*` by default;
--producer and --consumer stand for their operations), then one admin call per resource: CreateAcls for --add,
DeleteAcls for --remove (after a y/n question unless --force), DescribeAcls for --list. The output is the tool's
(each entry line starts with a space and a tab):

    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
         (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
         (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

A mistake in the options is one line and exit code 2; a refusal from the cluster prints Kafka's "Error while
executing ACL command: ..." and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import Any

from kjbod.cli.command_config import add_command_config, admin_options
from kjbod.cli.main import UserError, error_text

__all__ = ["add_subcommand", "parse_operation"]

EXIT_FAILED = 1


def add_subcommand(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "acls", help="add, remove and list ACLs (kafka-acls.sh)",
        description="Manages the ACLs of Kafka's StandardAuthorizer, as kafka-acls.sh does: exactly one of --add, "
                    "--remove or --list, the resources (--topic, --group, --cluster, --transactional-id, "
                    "--delegation-token, --user-principal) and, to add or remove, the principals (--allow-principal, --deny-principal) with their --operation and hosts.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                   help="a broker to connect to (comma-separated for several)")
    add_command_config(p)
    action = p.add_argument_group("actions")
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true",
                        help="list ACLs (of the resources named, or all of them)")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                   help="a topic the ACLs are for ('*': every topic); repeatable")
    p.add_argument("--group", action="append", default=[], metavar="GROUP",
                   help="a consumer group the ACLs are for ('*': every group); repeatable")
    p.add_argument("--cluster", action="store_true", help="the cluster's ACLs")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                   help="a transactional id the ACLs are for ('*': every one); with --producer, WRITE and DESCRIBE "
                        "on it; repeatable")
    p.add_argument("--delegation-token", action="append", default=[], metavar="TOKEN_ID",
                   help="a delegation token the ACLs are for ('*': every one); repeatable")
    p.add_argument("--user-principal", action="append", default=[], metavar="PRINCIPAL",
                   help="a user as the resource (CreateTokens, DescribeTokens for another user's tokens); "
                        "repeatable")
    p.add_argument("--resource-pattern-type", default="LITERAL", type=_pattern_type, metavar="TYPE",
                   help="literal or prefixed to add; any or match too to list or remove (default: literal)")
    p.add_argument("--operation", action="append", default=[], type=parse_operation, metavar="OPERATION",
                   help="an operation allowed or denied (All, Read, Write, Create, Delete, Alter, Describe, "
                        "ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite); default All; repeatable")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                   help="a principal allowed (User:alice, User:*); repeatable")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                   help="a principal denied; DENY wins over ALLOW; repeatable")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="a host the allowed principals may connect from (default *)")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                   help="a host the denied principals are denied from (default *)")
    p.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                   help="with --list: only the ACLs of this principal; repeatable")
    p.add_argument("--producer", action="store_true",
                   help="the producer's ACLs: WRITE, DESCRIBE and CREATE on the topics")
    p.add_argument("--consumer", action="store_true",
                   help="the consumer's ACLs: READ and DESCRIBE on the topics, READ on the groups")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--force", action="store_true", help="assume yes to every question")
    p.set_defaults(func=_command)


_PATTERN_TYPES = ("ANY", "MATCH", "LITERAL", "PREFIXED")


def _pattern_type(text: str) -> str:
    value = text.strip().upper()
    if value not in _PATTERN_TYPES:
        raise argparse.ArgumentTypeError(f"Unknown resource-pattern-type: {text}")
    return value


def parse_operation(text: str) -> int:
    """An operation by Kafka's names: `IdempotentWrite`, `IDEMPOTENT_WRITE` and `idempotent-write` alike."""
    from kjbod.metadata.acls import ANY, OPERATIONS, UNKNOWN

    words = re.sub(r"([a-z])([A-Z])", r"\1_\2", text.strip()).replace("-", "_").upper()
    by_name = {name: code for code, name in OPERATIONS.items() if code not in (ANY, UNKNOWN)}
    if words not in by_name:
        names = ", ".join(_camel(n) for n in by_name)
        raise argparse.ArgumentTypeError(f"unknown operation {text!r} (one of {names})")
    return by_name[words]


def _camel(name: str) -> str:
    return "".join(w.capitalize() for w in name.split("_"))


# Kafka's operations per resource type (AclEntry.supportedOperations), ALL always allowed.
def _supported() -> dict[int, set[int]]:
    from kjbod.metadata.acls import SUPPORTED_OPERATIONS

    return {rtype: set(ops) for rtype, ops in SUPPORTED_OPERATIONS.items()}


def pattern_text(rtype: int, name: str | None, pattern: int) -> str:
    from kjbod.metadata.acls import PATTERN_TYPES, RESOURCE_TYPES

    return f"ResourcePattern(resourceType={RESOURCE_TYPES[rtype]}, name={name}, patternType={PATTERN_TYPES[pattern]})"


def _check(args: argparse.Namespace) -> None:
    actions = sum((args.add, args.remove, args.list))
    if actions != 1:
        raise UserError("Command must include exactly one action: --list, --add, --remove.")
    if args.list:
        for flag, given in (("--producer", args.producer), ("--consumer", args.consumer),
                            ("--allow-host", args.allow_host), ("--allow-principal", args.allow_principal),
                            ("--deny-host", args.deny_host), ("--deny-principal", args.deny_principal)):
            if given:
                raise UserError(f"Option \"[list]\" can't be used with option \"[{flag.lstrip('-')}]\"")
    for role, given in (("producer", args.producer), ("consumer", args.consumer)):
        if given:
            for flag, other in (("operation", args.operation), ("deny-principal", args.deny_principal),
                                ("deny-host", args.deny_host)):
                if other:
                    raise UserError(f"Option \"[{role}]\" can't be used with option \"[{flag}]\"")
    if args.principal and not args.list:
        raise UserError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise UserError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UserError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group
                          or (not args.producer and (args.cluster or args.transactional_id))):
        raise UserError("With --consumer you must specify a --topic and a --group and no --cluster or "
                        "--transactional-id option should be specified.")
    for p in (*args.allow_principal, *args.deny_principal, *args.principal):
        if ":" not in p:
            raise UserError(f"expected a string in format principalType:principalName but got {p}")


Resource = tuple[int, str, int]  # (resource type, name, pattern type code)


def _resources(args: argparse.Namespace, *, required: bool = True) -> list[Resource]:
    from kjbod.metadata import acls as a

    pattern = {"ANY": a.ANY, "MATCH": a.MATCH, "LITERAL": a.LITERAL, "PREFIXED": a.PREFIXED}[
        args.resource_pattern_type]
    out: list[Resource] = [(a.TOPIC, t.strip(), pattern) for t in args.topic]
    if pattern == a.LITERAL and (args.cluster or args.idempotent):
        out.append((a.CLUSTER, a.CLUSTER_NAME, a.LITERAL))
    out += [(a.GROUP, g.strip(), pattern) for g in args.group]
    out += [(a.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id]
    out += [(a.DELEGATION_TOKEN, t.strip(), pattern) for t in args.delegation_token]
    out += [(a.USER, u.strip(), pattern) for u in args.user_principal]
    out = list(dict.fromkeys(out))
    if not out and required:
        raise UserError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
                        "--delegation-token <Delegation Token ID>")
    return out


def _entries(args: argparse.Namespace, operations: set[int]) -> list[tuple[str, str, int, int]]:
    """(principal, host, operation, permission) for every allowed and denied principal, host and operation."""
    from kjbod.metadata.acls import ALLOW, DENY

    out: list[tuple[str, str, int, int]] = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, ALLOW),
                                          (args.deny_principal, args.deny_host, DENY)):
        for principal in dict.fromkeys(p.strip() for p in principals):
            for host in dict.fromkeys(h.strip() for h in hosts) if hosts else ("*",):
                for op in sorted(operations):
                    out.append((principal, host, op, permission))
    return out


def _resource_entries(args: argparse.Namespace) -> dict[Resource, list[tuple[str, str, int, int]]]:
    from kjbod.metadata import acls as a

    resources = _resources(args)
    plan: dict[Resource, list[tuple[str, str, int, int]]] = {}
    if not args.producer and not args.consumer:
        ops = set(args.operation) or {a.ALL}
        plan = {r: _entries(args, ops) for r in resources}
    if args.producer:
        for r in resources:
            if r[0] == a.TOPIC:
                plan[r] = _entries(args, {a.WRITE, a.DESCRIBE, a.CREATE})
            elif r[0] == a.TRANSACTIONAL_ID:
                plan[r] = _entries(args, {a.WRITE, a.DESCRIBE})
        if args.idempotent:
            plan[(a.CLUSTER, a.CLUSTER_NAME, a.LITERAL)] = _entries(args, {a.IDEMPOTENT_WRITE})
    if args.consumer:
        for r in resources:
            if r[0] == a.TOPIC:
                plan[r] = list(dict.fromkeys(plan.get(r, []) + _entries(args, {a.READ, a.DESCRIBE})))
            elif r[0] == a.GROUP:
                plan[r] = _entries(args, {a.READ})
    supported = _supported()
    for (rtype, _, _), entries in plan.items():
        valid = supported[rtype] | {a.ALL}
        if any(op not in valid for _, _, op, _ in entries):
            names = ", ".join(_camel(a.OPERATIONS[o]) for o in sorted(valid))
            raise UserError(f"ResourceType {a.RESOURCE_TYPES[rtype]} only supports operations {names}")
    return plan


def _entry_text(principal: str, host: str, op: int, permission: int) -> str:
    from kjbod.metadata.acls import OPERATIONS, PERMISSIONS

    return (f"(principal={principal}, host={host}, operation={OPERATIONS[op]}, "
            f"permissionType={PERMISSIONS[permission]})")


def _block(title: str, lines: list[str]) -> str:
    return f"{title}: \n " + "\n".join("\t" + line for line in lines) + " \n"


def _command(args: argparse.Namespace) -> int:
    _check(args)
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    from kjbod.admin import AdminClient, KafkaError

    try:
        client = AdminClient(args.bootstrap_server, client_id="kjbod-acls", **admin_options(args))
    except ValueError as e:
        raise UserError(f"--bootstrap-server: {e}") from None
    try:
        try:
            await client.start()
            if args.add:
                return await _add(client, args)
            if args.remove:
                return await _remove(client, args)
            return await _list(client, args)
        except KafkaError as e:
            print(f"Error while executing ACL command: {e}")
            return EXIT_FAILED
    finally:
        await client.close()


async def _add(client: Any, args: argparse.Namespace) -> int:
    from kjbod.metadata.acls import AclEntry

    if args.resource_pattern_type not in ("LITERAL", "PREFIXED"):
        raise UserError(f"A '--resource-pattern-type' value of '{args.resource_pattern_type}' is not valid when "
                        "adding acls.")
    plan = _resource_entries(args)
    if any(not entries for entries in plan.values()):
        raise UserError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    failed = False
    for (rtype, name, pattern), entries in plan.items():
        print(_block(f"Adding ACLs for resource `{pattern_text(rtype, name, pattern)}`",
                     [_entry_text(*e) for e in entries]))
        results = await client.create_acls([AclEntry(rtype, name, pattern, *e) for e in entries])
        for code, message in results:
            if code:
                failed = True
                print(f"Error while executing ACL command: {error_text(code, message)}")
                break
    return EXIT_FAILED if failed else 0


async def _remove(client: Any, args: argparse.Namespace) -> int:
    from kjbod.metadata.acls import AclFilter

    plan = _resource_entries(args)
    failed = False
    for (rtype, name, pattern), entries in plan.items():
        where = pattern_text(rtype, name, pattern)
        if not entries:
            question = f"Are you sure you want to delete all ACLs for resource filter `{where}`? (y/n)"
            filters = [AclFilter(rtype, name, pattern)]
        else:
            lines = "\n".join("\t" + _entry_text(*e) for e in entries)
            question = f"Are you sure you want to remove ACLs: \n {lines} \n from resource filter `{where}`? (y/n)"
            filters = [AclFilter(rtype, name, pattern, p, h, op, perm) for p, h, op, perm in entries]
        if not args.force:
            print(question, flush=True)
            if sys.stdin.readline().strip().lower() != "y":
                continue
        for code, message, _ in await client.delete_acls(filters):
            if code:
                failed = True
                print(f"Error while executing ACL command: {error_text(code, message)}")
    return EXIT_FAILED if failed else 0


async def _list(client: Any, args: argparse.Namespace) -> int:
    from kjbod.metadata.acls import AclFilter

    resources = _resources(args, required=False)
    found = []
    if not resources:
        found = await client.describe_acls(AclFilter())
    for rtype, name, pattern in resources:
        found += await client.describe_acls(AclFilter(rtype, name, pattern))
    by_resource: dict[Resource, list[Any]] = {}
    for e in found:
        by_resource.setdefault((e.resource_type, e.resource_name, e.pattern_type), [])
        if e not in by_resource[(e.resource_type, e.resource_name, e.pattern_type)]:
            by_resource[(e.resource_type, e.resource_name, e.pattern_type)].append(e)
    principals = [p.strip() for p in args.principal]
    for principal in principals or [None]:
        if principal is not None:
            print(f"ACLs for principal `{principal}`")
        for resource, entries in by_resource.items():
            shown = [e for e in entries if principal is None or e.principal == principal]
            if shown:
                print(_block(f"Current ACLs for resource `{pattern_text(*resource)}`",
                             [_entry_text(e.principal, e.host, e.operation, e.permission_type) for e in shown]))
    return 0


