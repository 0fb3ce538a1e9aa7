"""`kjbod configs`: kafka-configs.sh for client quotas (entity types users, clients and ips) and group configs
(entity type groups, KIP-848), with its options, its rules and its output.

Groups: `--describe` prints "Dynamic configs for group G are:" and the group's own configs (with `--all`: every
group config, the broker's defaults too), one "  key=value sensitive=false synonyms={...}" line each, for the
group named or every group of the cluster; `--alter --add-config consumer.session.timeout.ms=50000` and
`--delete-config` go as one IncrementalAlterConfigs of resource type GROUP (32), the broker checking names and
bounds; "Completed updating config for group G.".

Strategy: turn the options into one quota entity as the tool does (`--entity-type` with `--entity-name` or
`--entity-default` in pairs, in the order given, or the shorthands `--user`, `--client`, `--ip`, `--user-defaults`,
`--client-defaults`, `--ip-defaults`; users and clients may be named together, ips only alone), then:

* `--alter`: the entity's current quotas (DescribeClientQuotas, strict), a `--delete-config` key it does not have
  refused as the tool refuses it ("Invalid config(s): k"), then one AlterClientQuotas with the `--add-config`
  values set and the deleted keys removed; "Completed updating config for user alice." (or "Completed updating
  default config for users in the cluster.").
* `--describe`: DescribeClientQuotas with the entity's components (an entity type without a name matches every
  entity of that type) and only those types (strict), one line per entity:
  "Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1024.0"; for users alone
  (no clients, no default) their SCRAM credentials follow, as the tool prints them:
  "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096".

Values print as Java prints a double (1024.0, 1.0E7). A mistake in the options is one line and exit code 2; a
refusal from the cluster prints its message and exits 1, as the tool does. Topic, broker and the other entity
types of kafka-configs.sh are not served by this command (kjbod's topics and brokers take DescribeConfigs and
IncrementalAlterConfigs from any Kafka tool).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from kjbod.cli.command_config import add_command_config, admin_options
from kjbod.cli.main import UserError

__all__ = ["add_subcommand", "java_double", "parse_entity"]

EXIT_FAILED = 1
TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
DESCRIBED_AS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
USER_CLIENT_KEYS = ("consumer_byte_rate", "controller_mutation_rate", "producer_byte_rate", "request_percentage")
IP_KEYS = ("connection_creation_rate",)
KAFKA_ONLY_TYPES = ("topics", "brokers", "broker-loggers", "client-metrics")
GROUP_KEYS = ("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms")
# Java's ConfigEntry.ConfigSource names, as the tool prints synonyms
SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}


class _Named(argparse.Action):
    """--entity-name and --entity-default share one list, in command-line order ("" for the default)."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: str | None = None):
        names = list(getattr(namespace, "entity_names", None) or [])
        names.append("" if option_string == "--entity-default" else values)
        namespace.entity_names = names


def add_subcommand(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "configs", help="describe and alter client quotas (kafka-configs.sh for users, clients and ips)",
        description="Describes and alters client quotas as kafka-configs.sh does with --bootstrap-server: exactly "
                    "one of --describe or --alter, the entity (--entity-type users|clients|ips with --entity-name "
                    "or --entity-default, or --user, --client, --ip and their -defaults), and to alter "
                    "--add-config k=v,... and/or --delete-config k,...")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                   help="a broker to connect to (comma-separated for several)")
    add_command_config(p)
    p.add_argument("--describe", action="store_true", help="list the quotas of the entities named")
    p.add_argument("--alter", action="store_true", help="set or remove quotas of the entity named")
    p.add_argument("--entity-type", action="append", default=[], metavar="TYPE",
                   help="users, clients or ips; users and clients may be given together")
    p.add_argument("--entity-name", action=_Named, metavar="NAME", help="the user, client id or IP of the type "
                   "given in the same position")
    p.add_argument("--entity-default", action=_Named, nargs=0, help="the default entity of that type")
    p.add_argument("--user", metavar="NAME", help="shorthand for --entity-type users --entity-name NAME")
    p.add_argument("--client", metavar="ID", help="shorthand for --entity-type clients --entity-name ID")
    p.add_argument("--ip", metavar="IP", help="shorthand for --entity-type ips --entity-name IP")
    p.add_argument("--user-defaults", action="store_true", help="the default user")
    p.add_argument("--client-defaults", action="store_true", help="the default client id")
    p.add_argument("--ip-defaults", action="store_true", help="the default IP")
    p.add_argument("--add-config", metavar="K=V,...", help="quotas to set: producer_byte_rate, consumer_byte_rate, "
                   "request_percentage, controller_mutation_rate (users, clients); connection_creation_rate (ips)")
    p.add_argument("--add-config-file", metavar="FILE", help="a properties file of quotas to set")
    p.add_argument("--delete-config", metavar="K,...", help="quota keys to remove")
    p.add_argument("--all", action="store_true", help="with --describe of a group: every config, not only the "
                   "group's own")
    p.add_argument("--force", action="store_true", help="accepted for kafka-configs.sh compatibility")
    p.set_defaults(func=_command, entity_names=[])


def parse_entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The (entity type, name) pairs the options name, in the tool's order: None for a name not given (describe
    every entity of the type), "" for the default."""
    types = list(args.entity_type)
    names: list[str | None] = list(args.entity_names or [])
    flags = [("users", args.user), ("clients", args.client), ("ips", args.ip)]
    defaults = [("users", args.user_defaults), ("clients", args.client_defaults), ("ips", args.ip_defaults)]
    shorthand = [t for t, v in flags if v is not None] + [t for t, on in defaults if on]
    if shorthand and (types or names):
        raise UserError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if shorthand:
        types = shorthand
        names = [v for _, v in flags if v is not None] + ["" for _, on in defaults if on]
    for t in types:
        if t in KAFKA_ONLY_TYPES:
            raise UserError(f"entity type {t} is not served by kjbod configs (client quotas: users, clients, ips); "
                            "use any Kafka tool's DescribeConfigs/IncrementalAlterConfigs for topics and brokers")
        if t == "groups":
            if len(types) > 1:
                raise UserError("Only 'users' and 'clients' entity types may be specified together")
            if len(names) > 1:
                raise UserError("More entity names specified than entity types")
            if names and names[0] == "":
                raise UserError("--entity-default is not allowed for groups: each group is configured by name")
            if args.alter and not names:
                raise UserError("--entity-name must be specified with --entity-type groups for --alter")
            return [("groups", names[0] if names else None)]
        if t not in TYPES:
            raise UserError(f"Invalid entity type {t}, the entity type must be one of users, clients, ips with a "
                            "--bootstrap-server argument")
    if not types:
        raise UserError("At least one entity type must be specified")
    if len(types) != len(set(types)):
        dup = sorted({t for t in types if types.count(t) > 1})
        raise UserError(f"Duplicate entity type(s) specified: {','.join(dup)}")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise UserError("Only 'users' and 'clients' entity types may be specified together")
    if len(names) > len(types):
        raise UserError("More entity names specified than entity types")
    if args.alter and len(names) != len(types):
        raise UserError("--entity-name or --entity-default must be specified with each --entity-type for --alter")
    pairs = [(t, names[i] if i < len(names) else None) for i, t in enumerate(types)]
    for t, name in pairs:
        if t == "ips" and name:
            import ipaddress

            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise UserError(f"The entity name for ips must be a valid IP or resolvable host, but it is: "
                                f"{name}") from None
    return pairs


def _configs_to_add(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    if args.add_config_file:
        try:
            text = Path(args.add_config_file).read_text(encoding="utf-8")
        except OSError as e:
            raise UserError(f"--add-config-file: {e.strerror}: {args.add_config_file}") from None
        for line in text.splitlines():
            line = line.strip()
            if not line or line[0] in "#!":
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise UserError(f"--add-config-file: not key=value: {line}")
            out[key.strip()] = value.strip()
    if args.add_config:
        for item in args.add_config.split(","):
            if not item.strip():
                continue
            key, sep, value = item.partition("=")
            if not sep:
                raise UserError("Invalid entity config: all configs to be added must be in the format \"key=val\".")
            out[key.strip()] = value.strip()
    return out


def _check(args: argparse.Namespace) -> tuple[list[tuple[str, str | None]], dict[str, Any], list[str]]:
    if args.alter == args.describe:
        raise UserError("Command must include exactly one action: --describe, --alter")
    if args.describe and (args.add_config or args.add_config_file or args.delete_config):
        raise UserError("--add-config, --add-config-file and --delete-config go with --alter only")
    pairs = parse_entity(args)
    if not args.alter:
        return pairs, {}, []
    adds = _configs_to_add(args)
    deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not adds and not deletes:
        raise UserError("Nothing to alter: give --add-config, --add-config-file or --delete-config")
    if pairs[0][0] == "groups":
        return pairs, adds, deletes  # the broker checks group configs (names, bounds) and answers INVALID_CONFIG
    allowed = IP_KEYS if pairs[0][0] == "ips" else USER_CLIENT_KEYS
    kind = pairs[0][0] if len(pairs) == 1 else "clients"
    unknown = [k for k in [*adds, *deletes] if k not in allowed]
    if unknown:
        what = "connection quota configs" if kind == "ips" else "quota configs"
        raise UserError(f"Only {what} can be added for '{kind}' using --bootstrap-server. Unexpected config names: "
                        f"{','.join(unknown)}")
    values: dict[str, float] = {}
    for key, text in adds.items():
        try:
            values[key] = float(text)
        except ValueError:
            raise UserError(f"Cannot parse quota configuration value for {key}: {text}") from None
    return pairs, values, deletes


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it: 1024.0, 0.5, 1.0E7, 1.5E-4."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))  # Python writes these as Java does: shortest digits, at least one decimal
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) - 1 + int(exponent)
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def _entity_text(entity: dict[str, str | None]) -> str:
    parts = []
    for etype in ("user", "client-id", "ip"):
        if etype in entity:
            name = entity[etype]
            parts.append(f"{DESCRIBED_AS[etype]} '{name}'" if name is not None else f"the default {DESCRIBED_AS[etype]}")
    return ", ".join(parts)


def _components(pairs: list[tuple[str, str | None]]) -> list[tuple[str, int, str | None]]:
    out: list[tuple[str, int, str | None]] = []
    for t, name in pairs:
        if name is None:
            out.append((TYPES[t], 2, None))
        elif name == "":
            out.append((TYPES[t], 1, None))
        else:
            out.append((TYPES[t], 0, name))
    return out


async def _describe_scram(client: Any, users: list[str]) -> None:
    from kjbod.net.scram import MECHANISMS
    from kjbod.protocol.errors import ErrorCode

    names = {m.kafka_type: m.name for m in MECHANISMS.values()}
    for user, (code, message, infos) in (await client.describe_user_scram_credentials(users)).items():
        if code == ErrorCode.RESOURCE_NOT_FOUND:
            continue  # a user without credentials: nothing to say, as the tool
        if code:
            print(f"Error retrieving SCRAM credential configs for user-principal '{user}': "
                  f"{ErrorCode(code).name}: {message or ''}")
            continue
        text = ", ".join(f"{names.get(m, m)}=iterations={i}" for m, i in infos)
        print(f"SCRAM credential configs for user-principal '{user}' are {text}")


def _command(args: argparse.Namespace) -> int:
    checked = _check(args)
    if checked[0][0][0] == "groups":
        return asyncio.run(_run_groups(args, checked[0][0][1], checked[1], checked[2]))
    return asyncio.run(_run(args, *checked))


async def _run_groups(args: argparse.Namespace, name: str | None, adds: dict[str, str], deletes: list[str]) -> int:
    """Group configs (KIP-848) as the tool handles them: DescribeConfigs of type GROUP, only the group's own
    configs unless --all; --alter checks deletes against the group's own configs, then IncrementalAlterConfigs."""
    from kjbod.admin import AdminClient, KafkaError
    from kjbod.admin.types import ConfigResource, ConfigSource

    try:
        client = AdminClient(args.bootstrap_server, client_id="kjbod-configs", **admin_options(args))
    except ValueError as e:
        raise UserError(f"--bootstrap-server: {e}") from None
    try:
        await client.start()

        async def own(group: str, synonyms: bool) -> list[Any]:
            resource = ConfigResource.group(group)
            entries = (await client.describe_configs([resource], include_synonyms=synonyms))[resource]
            return sorted((e for e in entries.values() if args.all or e.source == ConfigSource.GROUP_CONFIG),
                          key=lambda e: e.name)

        if args.describe:
            groups = [name] if name is not None else [g.group_id for g in await client.list_groups()]
            for group in groups:
                print(f"{'All' if args.all else 'Dynamic'} configs for group {group} are:")
                for entry in await own(group, True):
                    synonyms = ", ".join(f"{SOURCE_NAMES.get(int(s.source), s.source)}:{s.name}={s.value}"
                                         for s in entry.synonyms)
                    print(f"  {entry.name}={entry.value} sensitive={'true' if entry.is_sensitive else 'false'} "
                          f"synonyms={{{synonyms}}}")
            return 0
        assert name is not None
        current = {e.name for e in await own(name, False)}
        invalid = [k for k in deletes if k not in current]
        if invalid:
            print(f"Invalid config(s): {','.join(invalid)}", file=sys.stderr)
            return EXIT_FAILED
        ops: dict[str, str | None] = {**dict.fromkeys(deletes), **adds}
        results = await client.incremental_alter_configs({ConfigResource.group(name): ops}, raise_on_error=False)
        for result in results.values():
            if result.error is not None:
                print(f"Error while executing config command: {result.error}", file=sys.stderr)
                return EXIT_FAILED
    except KafkaError as e:
        print(f"Error while executing config command: {e}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        await client.close()
    print(f"Completed updating config for group {name}.")
    return 0


async def _run(args: argparse.Namespace, pairs: list[tuple[str, str | None]], adds: dict[str, float],
               deletes: list[str]) -> int:
    from kjbod.admin import AdminClient, KafkaError

    try:
        client = AdminClient(args.bootstrap_server, client_id="kjbod-configs", **admin_options(args))
    except ValueError as e:
        raise UserError(f"--bootstrap-server: {e}") from None
    try:
        try:
            await client.start()
            if args.describe:
                for entity, values in await client.describe_client_quotas(_components(pairs), strict=True):
                    shown = ", ".join(f"{k}={java_double(v)}" for k, v in values.items())
                    print(f"Quota configs for {_entity_text(entity)} are {shown}")
                # As the tool: users' SCRAM credentials too, unless clients or a default entity are named.
                if all(t == "users" for t, _ in pairs) and all(name != "" for _, name in pairs):
                    await _describe_scram(client, [name for _, name in pairs if name])
                return 0
            current = await client.describe_client_quotas(_components(pairs), strict=True)
            old = current[0][1] if current else {}
            invalid = [k for k in deletes if k not in old]
            if invalid:
                print(f"Invalid config(s): {','.join(invalid)}", file=sys.stderr)
                return EXIT_FAILED
            entity = {TYPES[t]: (name or None) for t, name in pairs}
            ops: dict[str, float | None] = {**dict.fromkeys(deletes), **adds}
            for code, message in await client.alter_client_quotas([(entity, ops)]):
                if code:
                    from kjbod.protocol.errors import ErrorCode

                    try:
                        name = ErrorCode(code).name
                    except ValueError:
                        name = str(code)
                    print(f"Error while executing config command: {name}: {message or ''}".rstrip(": "),
                          file=sys.stderr)
                    return EXIT_FAILED
        except KafkaError as e:
            print(f"Error while executing config command: {e}", file=sys.stderr)
            return EXIT_FAILED
    finally:
        await client.close()
    head_type, head_name = pairs[0]
    if head_name:
        print(f"Completed updating config for {head_type[:-1]} {head_name}.")
    else:
        print(f"Completed updating default config for {head_type} in the cluster.")
    return 0
