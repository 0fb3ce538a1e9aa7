"""`kjbod configs`: kafka-configs.sh with --bootstrap-server: topic, broker and broker-logger configs, and client
quotas (entity types users, clients and ips), with its options, its rules and its output.

Topics, brokers, broker loggers, groups (KIP-848's consumer.session.timeout.ms and consumer.heartbeat.interval.ms)
and client-metrics (KIP-714 subscriptions; `kjbod client-metrics` is kafka-client-metrics.sh) are config
resources:

* `--describe`: DescribeConfigs of the entity named, or of every topic (internal ones too) / every broker and the
  cluster-wide broker default when no name is given. Only the dynamic entries are printed (the ones a topic
  overrides, a broker's per-broker or cluster-default settings), all of them with `--all`, and every logger for
  broker-loggers, sorted by name, one line each with its synonyms as the tool prints them:
  "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, DEFAULT_CONFIG:...}".
* `--alter`: the entity's current dynamic entries (all loggers for broker-loggers) first, a `--delete-config` key
  that is not set refused as the tool refuses it ("Invalid config(s): k"; "Invalid broker logger(s): x"), then one
  IncrementalAlterConfigs with SET for `--add-config` and DELETE for `--delete-config` (Kafka 3.9's tool still
  rewrote a broker's whole dynamic config with the older AlterConfigs; KIP-1011 moved it to the incremental API,
  which is what this does for brokers too). `--add-config` takes Kafka's brackets for values with commas:
  `k1=v1,k2=[a,b],k3=v3`.

Client quotas: turn the options into one quota entity as the tool does (`--entity-type` with `--entity-name` or
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
refusal from the cluster prints its message and exits 1, as the tool does. Every entity type of kafka-configs.sh
is served.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from kjbod.cli.command_config import add_command_config
from kjbod.cli.main import UserError, error_text

__all__ = ["add_subcommand", "java_double", "parse_entity", "split_add_config"]

EXIT_FAILED = 1
DEFAULT_TIMEOUT_S = 30.0  # each request's, retries included (the tool's admin client's default)
TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
DESCRIBED_AS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
USER_CLIENT_KEYS = ("consumer_byte_rate", "controller_mutation_rate", "producer_byte_rate", "request_percentage")
IP_KEYS = ("connection_creation_rate",)
# Config resources: entity type -> (ConfigResource type, the source of the entries --describe prints without --all;
# None: every entry, as for loggers).
RESOURCES: dict[str, tuple[int, int | None]] = {"topics": (2, 1), "brokers": (4, 2), "broker-loggers": (8, None),
                                               "client-metrics": (16, 7), "groups": (32, 8)}
DEFAULT_BROKER_SOURCE = 3  # DYNAMIC_DEFAULT_BROKER_CONFIG: what --describe prints of the cluster-wide default
# ConfigSource ids as Java's ConfigEntry.ConfigSource names them in the tool's synonyms.
SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}
CONFIG_KEY = re.compile(r"[a-zA-Z0-9._-]*")
ALL_TYPES = ("topics", "clients", "users", "brokers", "broker-loggers", "ips", "client-metrics", "groups")


class _Named(argparse.Action):
    """--entity-name and --entity-default share one list, in command-line order ("" for the default)."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: str | None = None):
        names = list(getattr(namespace, "entity_names", None) or [])
        names.append("" if option_string == "--entity-default" else values)
        namespace.entity_names = names


def add_subcommand(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "configs", help="describe and alter topic, broker, logger, group and client-metrics configs and client quotas "
             "(kafka-configs.sh)",
        description="Describes and alters configs as kafka-configs.sh does with --bootstrap-server: exactly one of "
                    "--describe or --alter, the entity (--entity-type topics|brokers|broker-loggers|users|clients|"
                    "ips with --entity-name or --entity-default, or --topic, --broker, --broker-logger, --user, "
                    "--client, --ip and the -defaults), and to alter --add-config k=v,... and/or --delete-config "
                    "k,...")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                   help="a broker to connect to (comma-separated for several)")
    add_command_config(p)
    p.add_argument("--describe", action="store_true", help="list the configs of the entities named")
    p.add_argument("--alter", action="store_true", help="set or remove configs of the entity named")
    p.add_argument("--all", action="store_true", help="with --describe: every config of the entity, static and "
                   "default ones too, not only the dynamic ones")
    p.add_argument("--entity-type", action="append", default=[], metavar="TYPE",
                   help="topics, brokers, broker-loggers, groups, client-metrics, users, clients or ips; users and "
                        "clients may be given together")
    p.add_argument("--entity-name", action=_Named, metavar="NAME", help="the topic, broker id, user, client id or "
                   "IP of the type given in the same position")
    p.add_argument("--entity-default", action=_Named, nargs=0, help="the default entity of that type (brokers, "
                   "users, clients, ips)")
    p.add_argument("--topic", metavar="NAME", help="shorthand for --entity-type topics --entity-name NAME")
    p.add_argument("--broker", metavar="ID", help="shorthand for --entity-type brokers --entity-name ID")
    p.add_argument("--broker-defaults", action="store_true", help="the cluster-wide broker defaults")
    p.add_argument("--broker-logger", metavar="ID", help="shorthand for --entity-type broker-loggers "
                   "--entity-name ID")
    p.add_argument("--group", metavar="GROUP", help="shorthand for --entity-type groups --entity-name GROUP")
    p.add_argument("--client-metrics", metavar="NAME", help="shorthand for --entity-type client-metrics "
                   "--entity-name NAME")
    p.add_argument("--user", metavar="NAME", help="shorthand for --entity-type users --entity-name NAME")
    p.add_argument("--client", metavar="ID", help="shorthand for --entity-type clients --entity-name ID")
    p.add_argument("--ip", metavar="IP", help="shorthand for --entity-type ips --entity-name IP")
    p.add_argument("--user-defaults", action="store_true", help="the default user")
    p.add_argument("--client-defaults", action="store_true", help="the default client id")
    p.add_argument("--ip-defaults", action="store_true", help="the default IP")
    p.add_argument("--add-config", metavar="K=V,...", help="configs to set; square brackets group a value with "
                   "commas (k1=v1,k2=[a,b]). Quotas: producer_byte_rate, consumer_byte_rate, request_percentage, "
                   "controller_mutation_rate (users, clients); connection_creation_rate (ips); loggers: a level")
    p.add_argument("--add-config-file", metavar="FILE", help="a properties file of configs to set")
    p.add_argument("--delete-config", metavar="K,...", help="config keys to remove")
    p.add_argument("--force", action="store_true", help="accepted for kafka-configs.sh compatibility")
    p.set_defaults(func=_command, entity_names=[])


def parse_entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The (entity type, name) pairs the options name, in the tool's order: None for a name not given (describe
    every entity of the type), "" for the default."""
    types = list(args.entity_type)
    names: list[str | None] = list(args.entity_names or [])
    flags = [("topics", args.topic), ("users", args.user), ("clients", args.client), ("brokers", args.broker),
             ("broker-loggers", args.broker_logger), ("ips", args.ip), ("client-metrics", args.client_metrics),
             ("groups", args.group)]
    defaults = [("users", args.user_defaults), ("clients", args.client_defaults), ("brokers", args.broker_defaults),
                ("ips", args.ip_defaults)]
    shorthand = [t for t, v in flags if v is not None] + [t for t, on in defaults if on]
    if shorthand and (types or names):
        raise UserError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if shorthand:
        types = shorthand
        names = [v for _, v in flags if v is not None] + ["" for _, on in defaults if on]
    if len(types) != len(set(types)):
        dup = sorted({t for t in types if types.count(t) > 1})
        raise UserError(f"Duplicate entity type(s) specified: {','.join(dup)}")
    for t in types:
        if t not in TYPES and t not in RESOURCES:
            raise UserError(f"Invalid entity type {t}, the entity type must be one of {', '.join(ALL_TYPES)} with "
                            "a --bootstrap-server argument")
    if not types:
        raise UserError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise UserError("Only 'users' and 'clients' entity types may be specified together")
    if len(names) > len(types):
        raise UserError("More entity names specified than entity types")
    head = types[0]
    has_name = any(names)
    has_default = "" in names
    if has_name and head in ("brokers", "broker-loggers"):
        for name in names:
            if name and not _is_int(name):
                raise UserError(f"The entity name for {head} must be a valid integer broker id, but it is: {name}")
    if args.describe:
        if has_default and head not in ("users", "clients", "brokers", "ips"):
            raise UserError(f"--entity-default must not be specified with --describe of {','.join(types)}")
        if head == "broker-loggers" and not has_name:
            raise UserError(f"An entity name must be specified with --describe of {','.join(types)}")
    if args.alter:
        if head in ("users", "clients", "brokers", "ips"):
            if not has_name and not has_default:
                raise UserError("An entity-name or default entity must be specified with --alter of users, clients, "
                                "brokers or ips")
        elif not has_name:
            raise UserError(f"An entity name must be specified with --alter of {','.join(types)}")
        if len(names) != len(types):
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
        if t == "topics" and name is not None:
            from kjbod.metadata.names import topic_name_problem

            problem = topic_name_problem(name)
            if problem:
                raise UserError(problem[0].upper() + problem[1:])
    return pairs


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


# kafka-configs.sh's split of --add-config: at commas outside square brackets, then at the first '=' outside them;
# the brackets themselves are dropped from the value.
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_ITEMS = re.compile("," + _OUTSIDE_BRACKETS)
_KEY_VALUE = re.compile(r"\s*=\s*" + _OUTSIDE_BRACKETS)


def split_add_config(text: str) -> dict[str, str]:
    """`k1=v1,k2=[a,b]` as kafka-configs.sh reads it: {"k1": "v1", "k2": "a,b"}; an item without exactly one '='
    outside brackets is refused with the tool's message."""
    out: dict[str, str] = {}
    for item in _ITEMS.split(text):
        parts = _KEY_VALUE.split(item)
        if len(parts) != 2:
            raise UserError("Invalid entity config: all configs to be added must be in the format \"key=val\".")
        out[parts[0].strip()] = parts[1].replace("[", "").replace("]", "").strip()
    return out


def _configs_to_add(args: argparse.Namespace) -> dict[str, str]:
    if args.add_config and args.add_config_file:
        raise UserError("Only one of --add-config or --add-config-file must be specified")
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
        out.update(split_add_config(args.add_config))
    for key in out:
        if not CONFIG_KEY.fullmatch(key):
            raise UserError(f"Invalid character found for config key: {key}")
    return out


Checked = tuple[list[tuple[str, str | None]], dict[str, Any], list[str]]


def _check(args: argparse.Namespace) -> Checked:
    """The entity pairs, the configs to add (floats for quotas, text for config resources) and the keys to
    delete, or UserError naming the first mistake."""
    if args.alter == args.describe:
        raise UserError("Command must include exactly one action: --describe, --alter")
    if args.describe and (args.add_config or args.add_config_file or args.delete_config):
        raise UserError("--add-config, --add-config-file and --delete-config go with --alter only")
    if args.all and not args.describe:
        raise UserError("--all goes with --describe only")
    pairs = parse_entity(args)
    if not args.alter:
        return pairs, {}, []
    adds = _configs_to_add(args)
    deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not adds and not deletes:
        raise UserError("At least one of --add-config, --add-config-file, or --delete-config must be specified with "
                        "--alter")
    if pairs[0][0] in RESOURCES:
        return pairs, adds, deletes
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
    return asyncio.run(_run(args, *_check(args)))


def _entry_line(entry: Any) -> str:
    """One config as the tool prints it: "  name=value sensitive=false synonyms={SOURCE:name=value, ...}"."""
    synonyms = ", ".join(f"{_source_name(s.source)}:{s.name}={_java(s.value)}" for s in entry.synonyms)
    return f"  {entry.name}={_java(entry.value)} sensitive={str(bool(entry.is_sensitive)).lower()} synonyms={{{synonyms}}}"


def _java(value: str | None) -> str:
    return "null" if value is None else value


def _source_name(source: Any) -> str:
    return SOURCE_NAMES.get(int(source), str(int(source)))


async def _resource_entries(client: Any, etype: str, name: str, *, every: bool, synonyms: bool) -> list[Any]:
    """The entries --describe prints for one entity (every entry with ``every``), sorted by name."""
    from kjbod.admin.types import ConfigResource, ConfigResourceType

    rtype, source = RESOURCES[etype]
    if etype == "brokers" and name == "":
        source = DEFAULT_BROKER_SOURCE
    resource = ConfigResource(ConfigResourceType(rtype), name)
    entries = (await client.describe_configs([resource], include_synonyms=synonyms))[resource]
    return sorted((e for e in entries.values() if every or source is None or int(e.source) == source),
                  key=lambda e: e.name)


async def _resource_names(client: Any, etype: str) -> list[str]:
    """Every entity of a type, as the tool lists them with no name given: all topics (internal ones too), or
    every broker followed by the cluster-wide default ("")."""
    if etype == "topics":
        return sorted(await client.describe_topics(None))
    if etype == "client-metrics":
        return sorted(await client.list_client_metrics_resources())
    if etype == "groups":
        return [g.group_id for g in await client.list_groups()]
    cluster = await client.describe_cluster()
    return [str(b) for b in sorted(node.node_id for node in cluster.brokers)] + [""]


async def _resource_body(client: Any, args: argparse.Namespace, pairs: list[tuple[str, str | None]],
                         adds: dict[str, Any], deletes: list[str]) -> int | None:
    """--describe or --alter of a config resource: the exit code, or None once altered."""
    from kjbod.admin.types import AlterConfigOp, AlterConfigOpType, ConfigResource, ConfigResourceType

    etype, name = pairs[0]
    if args.describe:
        names = [name] if name is not None else await _resource_names(client, etype)
        for entity in names:
            if entity == "":
                print(f"Default configs for {etype} in the cluster are:")
            else:
                print(f"{'All' if args.all else 'Dynamic'} configs for {etype[:-1]} {entity} are:")
            for entry in await _resource_entries(client, etype, entity, every=args.all, synonyms=True):
                print(_entry_line(entry))
        return 0
    assert name is not None
    current = {e.name for e in await _resource_entries(client, etype, name, every=False, synonyms=False)}
    if etype == "broker-loggers":
        invalid = [k for k in [*deletes, *adds] if k not in current]
        if invalid:
            print(f"Invalid broker logger(s): {','.join(invalid)}", file=sys.stderr)
            return EXIT_FAILED
    else:
        invalid = [k for k in deletes if k not in current]
        if invalid:
            print(f"Invalid config(s): {','.join(invalid)}", file=sys.stderr)
            return EXIT_FAILED
    resource = ConfigResource(ConfigResourceType(RESOURCES[etype][0]), name)
    ops = [AlterConfigOp(k, v) for k, v in adds.items()]
    ops += [AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in deletes]
    await client.incremental_alter_configs({resource: ops})
    return None


async def _quota_body(client: Any, args: argparse.Namespace, pairs: list[tuple[str, str | None]],
                      adds: dict[str, Any], deletes: list[str]) -> int | None:
    """--describe or --alter of client quotas: the exit code, or None once altered."""
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
            print(f"Error while executing config command: {error_text(code, message)}", file=sys.stderr)
            return EXIT_FAILED
    return None


async def _run(args: argparse.Namespace, pairs: list[tuple[str, str | None]], adds: dict[str, Any],
               deletes: list[str]) -> int:
    from kjbod.admin import KafkaError
    from kjbod.cli.log_dirs import _admin

    body = _resource_body if pairs[0][0] in RESOURCES else _quota_body
    async with _admin(args, "kjbod-configs", timeout=DEFAULT_TIMEOUT_S) as client:
        try:
            code = await body(client, args, pairs, adds, deletes)
        except KafkaError as e:
            print(f"Error while executing config command: {e}", file=sys.stderr)
            return EXIT_FAILED
    if code is not None:
        return code
    head_type, head_name = pairs[0]
    if head_name:
        print(f"Completed updating config for {head_type[:-1]} {head_name}.")
    else:
        print(f"Completed updating default config for {head_type} in the cluster.")
    return 0
