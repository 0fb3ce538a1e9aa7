"""`kjbod reassign-partitions`: kafka-reassign-partitions.sh's --execute, --verify, --cancel and --list, with its
flags, its JSON (`{"version": 1, "partitions": [{"topic", "partition", "replicas", "log_dirs"}]}`) and its
messages.

Strategy: the file is read and checked whole before anything is sent (Kafka's messages for an empty list, an
empty replica list, a partition twice, a broker twice in one list; unknown brokers against DescribeCluster; a
log dir path that is not a dir of its broker), so a bad entry starts nothing.  --execute refuses to run while any
reassignment is in progress unless --additional, prints the current assignment to save for a rollback, and
starts every move with one AlterPartitionReassignments; `log_dirs` other than "any" travel in kjbod's
TargetDirectories extension, so each new replica is created in its dir in one step (no AlterReplicaLogDirs
loop).  --verify and --list read ListPartitionReassignments and Metadata; --cancel cancels the file's
partitions.  Errors are one line and a non-zero exit (kjbod.cli.main's boundary).

--generate reads `{"topics": [{"topic": ...}]}` and --broker-list and prints the current assignment and a
disk-aware proposal (kjbod.cli.reassign_plan: balanced by usable bytes across brokers and their dirs, with
`log_dirs` filled in).  --throttle (bytes/s; a plain number as Kafka's tool takes, or 10MB / 10MiB style) goes with
the moves in KIP-179's ReassignPartitions where the cluster serves it (kjbod: the controller removes the throttle
when the reassignment ends); elsewhere, and for --replica-alter-log-dirs-throttle, the throttles are set as
Kafka's tool sets them (IncrementalAlterConfigs of the rates on the brokers involved and the throttled-replica
lists on the topics), but merged into the lists others set instead of overwriting them, and --verify, once
nothing is in progress, deletes exactly the throttle configs it finds (unless --preserve-throttles).  --progress follows an --execute until every partition is done: bytes
copied of total, rate and ETA per partition and overall (kjbod.cli.progress).

"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from kjbod.admin.types import ConfigResource, ConfigResourceType, ConfigSource
from kjbod.cli.command_config import add_command_config, admin_options
from kjbod.cli.main import UserError
from kjbod.protocol.errors import KafkaError

CLIENT_ID = "reassign-partitions-tool"
EXISTING = ("Cannot execute because there is an existing partition assignment.  Use --additional to override this "
            "and create a new partition assignment in addition to the existing one. The --additional flag can also "
            "be used to change the throttle by resubmitting the current reassignment.")

Moves = dict[tuple[str, int], tuple[list[int], list[str]]]  # (topic, partition) -> (replicas, log dirs)


def add_subcommand(sub: Any) -> None:
    p = sub.add_parser("reassign-partitions", help="move partitions between brokers (kafka-reassign-partitions.sh)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap-server", required=True, help="host:port of a broker")
    add_command_config(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the reassignment in the JSON file")
    action.add_argument("--verify", action="store_true", help="report the state of the file's reassignments")
    action.add_argument("--cancel", action="store_true", help="cancel the file's reassignments")
    action.add_argument("--list", action="store_true", help="list every reassignment in progress")
    action.add_argument("--generate", action="store_true",
                        help="propose an assignment of --topics-to-move-json-file's topics onto --broker-list")
    p.add_argument("--reassignment-json-file", help="the reassignment JSON (--execute, --verify, --cancel)")
    p.add_argument("--topics-to-move-json-file", help='--generate\'s topics: {"topics": [{"topic": "t"}]}')
    p.add_argument("--broker-list", help='--generate\'s brokers, as "1,2,3"')
    p.add_argument("--throttle", type=parse_rate, default=None,
                   help="inter-broker replication throttle in bytes/s for --execute (a number, or e.g. 10MB, 10MiB)")
    p.add_argument("--replica-alter-log-dirs-throttle", type=parse_rate, default=None,
                   help="throttle in bytes/s of moves between log dirs of one broker, for --execute")
    p.add_argument("--preserve-throttles", action="store_true", help="--verify leaves the throttles in place")
    p.add_argument("--progress", action="store_true",
                   help="--execute then shows bytes copied, rate and ETA per partition until every move is done")
    p.add_argument("--additional", action="store_true", help="execute while other reassignments run")
    p.add_argument("--disallow-replication-factor-change", action="store_true",
                   help="refuse targets that change a partition's replica count")
    p.add_argument("--timeout", type=int, default=10000, help="ms to wait for the cluster (default 10000)")
    p.set_defaults(func=run)


_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?)?\s*(?:/s)?\s*", re.IGNORECASE)
_UNIT = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
         "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_rate(text: str) -> int:
    """A throttle in bytes/s: "10000000" (Kafka's form), "10MB" / "10M" (decimal) or "10MiB" (binary)."""
    match = _RATE.fullmatch(text)
    if match is None and _RATE.fullmatch(text.strip().removeprefix("-")) is not None:
        raise argparse.ArgumentTypeError(f"the throttle must be a positive number of bytes/s: {text!r}")
    if match is None:
        raise argparse.ArgumentTypeError(f"not a rate in bytes/s: {text!r} (a number, or e.g. 10MB, 10MiB)")
    unit = (match.group(2) or "").lower().rstrip("b")
    value = int(float(match.group(1)) * _UNIT[unit])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the throttle must be a positive number of bytes/s: {text!r}")
    return value


def parse_topics(text: str, source: str = "the topics-to-move JSON file") -> list[str]:
    """--topics-to-move-json-file's topic names; raises UserError naming the first bad entry."""
    try:
        data = json.loads(text)
    except ValueError as bad:
        raise UserError(f"{source} is not valid JSON: {bad}") from None
    entries = data.get("topics") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UserError('the topics-to-move JSON needs a non-empty "topics" list')
    names = []
    for i, e in enumerate(entries):
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and e["topic"]):
            raise UserError(f"topics[{i}] needs a topic name: {json.dumps(e)}")
        names.append(e["topic"])
    twice = sorted(n for n, c in Counter(names).items() if c > 1)
    if twice:
        raise UserError("List of topics to reassign contains duplicate entries: " + ",".join(twice))
    return names


def parse_broker_list(text: str | None) -> list[int]:
    if not text:
        raise UserError("--broker-list is required with --generate")
    try:
        ids = [int(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"--broker-list must be broker ids separated by commas: {text!r}") from None
    twice = sorted(b for b, c in Counter(ids).items() if c > 1)
    if twice:
        raise UserError("Broker list contains duplicate entries: " + ",".join(str(b) for b in twice))
    return ids


def parse_moves(text: str, source: str = "the reassignment JSON file") -> Moves:
    """The file's moves; raises UserError naming the first bad entry."""
    try:
        data = json.loads(text)
    except ValueError as bad:
        raise UserError(f"{source} is not valid JSON: {bad}") from None
    entries = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise UserError('the reassignment JSON needs a "partitions" list')
    if not entries:
        raise UserError("Partition reassignment list cannot be empty")
    moves: Moves = {}
    seen: Counter[tuple[str, int]] = Counter()
    for i, e in enumerate(entries):
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and type(e.get("partition")) is int
                and isinstance(e.get("replicas"), list) and all(type(r) is int for r in e["replicas"])):
            raise UserError(f"partitions[{i}] needs a string topic, an integer partition and a list of integer "
                            f"replicas: {json.dumps(e)}")
        key = (e["topic"], e["partition"])
        seen[key] += 1
        replicas = list(e["replicas"])
        if not replicas:
            raise UserError(f"Partition replica list cannot be empty: {key[0]}-{key[1]}")
        dirs = e.get("log_dirs", ["any"] * len(replicas))
        if not (isinstance(dirs, list) and len(dirs) == len(replicas) and all(isinstance(d, str) for d in dirs)):
            raise UserError(f"{key[0]}-{key[1]}: log_dirs must list one dir (or \"any\") per replica")
        moves[key] = (replicas, dirs)
    twice = sorted(k for k, n in seen.items() if n > 1)
    if twice:
        raise UserError("Reassignment JSON file contains duplicate topic partitions: "
                        + ",".join(f"{t}-{p}" for t, p in twice))
    repeated = [f"{t}-{p} contains {','.join(str(b) for b, n in sorted(Counter(r).items()) if n > 1)}"
                for (t, p), (r, _) in sorted(moves.items()) if len(set(r)) != len(r)]
    if repeated:
        raise UserError("Partition replica lists may not contain duplicate entries: " + "; ".join(repeated))
    return moves


def _names(keys: Any) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(keys))


def run(args: argparse.Namespace) -> int:
    from kjbod.admin import SyncAdminClient

    topics: list[str] = []
    brokers: list[int] = []
    if args.generate:
        if not args.topics_to_move_json_file:
            raise UserError("--topics-to-move-json-file is required with --generate")
        topics = parse_topics(_read(args.topics_to_move_json_file), args.topics_to_move_json_file)
        brokers = parse_broker_list(args.broker_list)
    elif not args.list and not args.reassignment_json_file:
        raise UserError("--reassignment-json-file is required with --execute, --verify and --cancel")
    moves: Moves = {}
    if args.reassignment_json_file and not args.generate:
        moves = parse_moves(_read(args.reassignment_json_file), args.reassignment_json_file)
    try:
        with SyncAdminClient(args.bootstrap_server, client_id=CLIENT_ID,
                             request_timeout=args.timeout / 1000, **admin_options(args)) as admin:
            if args.list:
                return _list(admin)
            if args.generate:
                return _generate(admin, topics, brokers)
            if args.verify:
                return _verify(admin, moves, preserve_throttles=args.preserve_throttles)
            if args.cancel:
                return _cancel(admin, moves)
            return _execute(admin, moves, args)
    except KafkaError as e:  # the cluster refused or could not be reached: one line
        raise UserError(str(e)) from None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None


def _list(admin: Any) -> int:
    ongoing = admin.list_partition_reassignments()
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (t, p), r in sorted(ongoing.items()):
        print(f"{t}-{p}: replicas: {_ids(r.replicas)}. adding: {_ids(r.adding_replicas)}. "
              f"removing: {_ids(r.removing_replicas)}.")
    return 0


def _ids(ids: Any) -> str:
    return ",".join(str(i) for i in ids)


def _current(admin: Any, moves: Moves) -> dict[tuple[str, int], tuple[int, ...]]:
    topics = admin.describe_topics()  # every topic: a missing one is named below, not an error of the call
    out = {}
    for (t, p) in moves:
        parts = {d.partition: d for d in topics[t].partitions} if t in topics else {}
        if p not in parts:
            raise UserError(f"Unable to find partition {t}:{p}.")
        out[(t, p)] = parts[p].replicas
    return out


NO_KIP179 = ("Note: the cluster does not serve KIP-179's ReassignPartitions (kjbod's extension): the throttle is "
             "set the Kafka way, and --verify removes it once the reassignment is done.")
FALLBACK = ("Note: the cluster does not take log dirs in a reassignment (kjbod's extension): the replicas are "
            "moved to their log_dirs with AlterReplicaLogDirs afterwards, as Kafka's tool does.")


def _dir_ids(admin: Any, moves: Moves) -> dict[tuple[str, int], list[UUID]] | None:
    """TargetDirectories for the moves that name dirs; raises UserError for a path its broker does not have.
    None when a broker reports no dir ids (Apache Kafka, or kjbod.extensions.enable=false): the dirs are then
    reached with AlterReplicaLogDirs, as Kafka's tool does."""
    named = {k: d for k, (_, d) in moves.items() if any(x != "any" for x in d)}
    if not named:
        return {}
    brokers = sorted({b for k in named for b in moves[k][0]})
    by_path = {(info.broker_id, info.path): info.directory_id
               for infos in admin.describe_log_dirs(brokers, topics=[]).values() for info in infos
               if info.error is None}
    for (broker, path), dir_id in by_path.items():
        if dir_id is None:
            by_path[(broker, path)] = UUID(int=0)  # known path, no id: the Kafka way below
    without_ids = any(v == UUID(int=0) for v in by_path.values())
    out = {}
    for key, dirs in named.items():
        ids = []
        for broker, path in zip(moves[key][0], dirs, strict=True):
            if path == "any":
                ids.append(UUID(int=0))
                continue
            dir_id = by_path.get((broker, path))
            if dir_id is None:
                raise UserError(f"{key[0]}-{key[1]}: {path} is not an online log dir of broker {broker}")
            ids.append(dir_id)
        out[key] = ids
    return None if without_ids else out


def _serves_kip179(admin: Any) -> bool:
    """Whether the cluster serves kjbod's ReassignPartitions: an empty validate-only request answers."""
    from kjbod.admin import UnsupportedVersionError

    try:
        admin.reassign_partitions({}, validate_only=True)
    except UnsupportedVersionError:
        return False
    return True


def _move_dirs_kafka_way(admin: Any, moves: Moves, timeout_s: float) -> int:
    """Kafka's loop: AlterReplicaLogDirs for every replica with a named dir until each is accepted
    (REPLICA_NOT_AVAILABLE: not created yet, ask again)."""
    from kjbod.protocol.errors import ErrorCode

    left = {(t, p, b): d for (t, p), (r, dirs) in moves.items() for b, d in zip(r, dirs, strict=True)
            if d != "any"}
    deadline = time.monotonic() + timeout_s
    while left:
        results = admin.alter_replica_log_dirs(left)
        for replica, result in sorted(results.items()):
            key = (replica.topic, replica.partition, replica.broker_id)
            if result.error is None:
                print(f"Successfully started moving log directory to {left.pop(key)} for replica "
                      f"{key[0]}-{key[1]} with broker {key[2]} ")
            elif result.error.code != ErrorCode.REPLICA_NOT_AVAILABLE:
                raise UserError(f"Failed to alter dir for {key[0]}-{key[1]}-{key[2]}: {result.error}")
        if left and time.monotonic() > deadline:
            print("Timed out before log directory move(s) could be started for: "
                  + ",".join(f"{t}-{p}-{b}" for t, p, b in sorted(left)))
            return 1
        if left:
            time.sleep(0.1)
    return 0


def _execute(admin: Any, moves: Moves, args: argparse.Namespace) -> int:
    ongoing = admin.list_partition_reassignments()
    if ongoing and not args.additional:
        raise UserError(EXISTING)
    known = {b.node_id for b in admin.describe_cluster().brokers}
    for _key, (replicas, _dirs) in sorted(moves.items()):
        unknown = [b for b in replicas if b not in known]
        if unknown:
            raise UserError(f"Unknown broker id {unknown[0]}")
    current = _current(admin, moves)
    if args.disallow_replication_factor_change:
        for (t, p), (replicas, _) in sorted(moves.items()):
            if len(replicas) != len(current[(t, p)]):
                raise UserError(f"{t}-{p}: The replication factor is changed from {len(current[(t, p)])} to "
                                f"{len(replicas)}")
    dirs = _dir_ids(admin, moves)
    if dirs is None:
        print(FALLBACK)
    print("Current partition replica assignment\n")
    print(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(current.items())]}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    # KIP-179 (kjbod's ReassignPartitions): the controller sets the throttle with the moves and removes it when
    # they end; elsewhere the Kafka way, which only a later --verify cleans up.
    kip179 = args.throttle is not None and dirs is not None and _serves_kip179(admin)
    if (args.throttle is not None and not kip179) or args.replica_alter_log_dirs_throttle is not None:
        print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
              "throttle is removed.")
    if args.throttle is not None and not kip179:
        if dirs is not None:
            print(NO_KIP179)
        _set_throttles(admin, moves, current, ongoing, args.throttle)
        print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    if args.replica_alter_log_dirs_throttle is not None:
        named = sorted({b for r, d in moves.values() for b, x in zip(r, d, strict=True) if x != "any"})
        if named:
            admin.incremental_alter_configs({ConfigResource.broker(b): {
                LOG_DIRS_RATE: str(args.replica_alter_log_dirs_throttle)} for b in named})
        print(f"The replica-alter-dir throttle limit was set to {args.replica_alter_log_dirs_throttle} B/s")
    # --progress: the sizes to copy are read before the start (a quick move deletes its sources at once).
    before = _replica_sizes(admin, moves, current) if args.progress else {}
    targets = {k: r for k, (r, _) in moves.items()}
    allow = not args.disallow_replication_factor_change
    if kip179:
        results = admin.reassign_partitions(targets, throttle=args.throttle, directories=dirs,
                                            allow_replication_factor_change=allow, additional=args.additional)
        if not any(code for code, _ in results.values()):
            print(f"The inter-broker throttle limit was set to {args.throttle} B/s; the controller removes it "
                  f"when the reassignment completes or is cancelled")
    else:
        results = admin.alter_partition_reassignments(targets, directories=dirs or {},
                                                      allow_replication_factor_change=allow)
    failed = {k: msg or f"error code {code}" for k, (code, msg) in results.items() if code}
    if failed:
        print("Error reassigning partition(s):\n" + "\n".join(f"{t}-{p}: {m}" for (t, p), m in sorted(failed.items())))
        return 1
    print(f"Successfully started partition reassignment(s) for {_names(moves)}")
    if dirs is None and _move_dirs_kafka_way(admin, moves, args.timeout / 1000):
        return 1
    if args.progress:
        _follow(admin, moves, current, before)
        if kip179:
            _report_throttles(admin, moves, current, wait_s=5.0)
    return 0


# ======================================================================================== throttles (Kafka's way)

LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
BROKER_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIRS_RATE)
TOPIC_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)


def throttled_replicas(moves: Moves, current: Mapping[tuple[str, int], Sequence[int]],
                       ongoing: Mapping[tuple[str, int], Any]) -> dict[str, tuple[set[str], set[str]]]:
    """topic -> (leader entries, follower entries) as Kafka's tool computes them: the sources (the replicas
    before the move, or those of the reassignment in progress) lead-throttled, the new replicas follow-throttled;
    reassignments already in progress are included."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    sources: dict[tuple[str, int], list[int]] = {}
    for key, r in ongoing.items():
        sources[key] = [b for b in r.replicas if b not in r.adding_replicas]
        out.setdefault(key[0], (set(), set()))[1].update(f"{key[1]}:{b}" for b in r.adding_replicas)
    for key, (target, _) in moves.items():
        src = sources.get(key, list(current[key]))
        sources[key] = src
        out.setdefault(key[0], (set(), set()))[1].update(f"{key[1]}:{b}" for b in target if b not in src)
    for key, src in sources.items():
        out.setdefault(key[0], (set(), set()))[0].update(f"{key[1]}:{b}" for b in src)
    return out


def _merge(existing: str | None, entries: set[str]) -> str:
    """Kafka's tool overwrites the list; this keeps what others set ("*" stays "*")."""
    have = {e.strip() for e in (existing or "").split(",") if e.strip()}
    if "*" in have:
        return "*"
    return ",".join(sorted(have | entries, key=lambda e: tuple(int(x) for x in e.split(":"))))


def _set_throttles(admin: Any, moves: Moves, current: Mapping[tuple[str, int], Sequence[int]],
                   ongoing: Mapping[tuple[str, int], Any], rate: int) -> None:
    lists = throttled_replicas(moves, current, ongoing)
    have = admin.describe_configs([ConfigResource.topic(t) for t in lists], keys=TOPIC_THROTTLES)
    changes: dict[Any, dict[str, str | None]] = {}
    for topic, (leaders, followers) in sorted(lists.items()):
        now = {k: e.value for k, e in have.get(ConfigResource.topic(topic), {}).items()
               if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG}
        changes[ConfigResource.topic(topic)] = {LEADER_REPLICAS: _merge(now.get(LEADER_REPLICAS), leaders),
                                                FOLLOWER_REPLICAS: _merge(now.get(FOLLOWER_REPLICAS), followers)}
    brokers = sorted({int(e.split(":")[1]) for leaders, followers in lists.values() for e in leaders | followers})
    for b in brokers:
        changes[ConfigResource.broker(b)] = {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)}
    admin.incremental_alter_configs(changes)


def _clear_throttles(admin: Any, moves: Moves) -> None:
    """Deletes the throttle configs that are set on the live brokers, the file's brokers and the file's topics
    (only those found: nothing to refuse on a cluster that never had any).  Not on a cluster that serves KIP-179:
    there this tool never sets a throttle (the controller removes its own), so what is set belongs to others."""
    if _serves_kip179(admin):
        return
    live = sorted(b.node_id for b in admin.describe_cluster().brokers)  # a stopped broker cannot answer
    changes = {resource: dict.fromkeys(found)
               for resource, found in _throttle_configs(admin, live, sorted({t for t, _ in moves})).items()}
    throttled_brokers = sorted(int(r.name) for r in changes if r.type == ConfigResourceType.BROKER)
    throttled_topics = sorted(r.name for r in changes if r.type == ConfigResourceType.TOPIC)
    if throttled_brokers:
        print(f"Clearing broker-level throttles on broker(s) {_ids(throttled_brokers)}")
    if throttled_topics:
        print(f"Clearing topic-level throttles on topic(s) {','.join(throttled_topics)}")
    if changes:
        admin.incremental_alter_configs(changes)


def _throttle_configs(admin: Any, brokers: Sequence[int], topics: Sequence[str]) -> dict[Any, dict[str, str]]:
    """The replication throttle configs set on these brokers and topics themselves: resource -> {key: value}."""
    found = admin.describe_configs([ConfigResource.broker(b) for b in brokers]
                                   + [ConfigResource.topic(t) for t in topics])
    dynamic = (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG)
    out = {}
    for resource, entries in found.items():
        keys = BROKER_THROTTLES if resource.type == ConfigResourceType.BROKER else TOPIC_THROTTLES
        set_here = {k: entries[k].value for k in keys if k in entries and entries[k].source in dynamic}
        if set_here:
            out[resource] = set_here
    return out


def _report_throttles(admin: Any, moves: Moves, current: Mapping[tuple[str, int], Sequence[int]], *,
                      wait_s: float = 0.0, quiet_if_none: bool = False) -> None:
    """Where the controller removes the throttles (KIP-179), says whether any is left on the reassignment's live
    brokers and topics, waiting up to `wait_s` for the brokers to apply the removal (nothing said when none is
    left and `quiet_if_none`: --verify's output stays Kafka's then)."""
    live = {b.node_id for b in admin.describe_cluster().brokers}
    brokers = sorted(live & ({b for r, _ in moves.values() for b in r} | {b for r in current.values() for b in r}))
    topics = sorted({t for t, _ in moves})
    deadline = time.monotonic() + wait_s
    while (left := _throttle_configs(admin, brokers, topics)) and time.monotonic() < deadline:
        time.sleep(0.5)
    where = f"broker(s) {_ids(brokers)} or topic(s) {','.join(topics)}"
    if not left:
        if not quiet_if_none:
            print(f"No replication throttle is left on {where}.")
        return
    kind = {ConfigResourceType.BROKER: "broker", ConfigResourceType.TOPIC: "topic"}
    print("Replication throttles still set (the controller removes only those it set for a reassignment): "
          + "; ".join(f"{kind.get(r.type, r.type)} {r.name}: {k}={v}"
                      for r, found in sorted(left.items(), key=lambda item: (item[0].type, item[0].name))
                      for k, v in found.items()))


# ================================================================================================ progress

POLL_SECONDS = 1.0


def _replica_sizes(admin: Any, moves: Moves,
                   current: Mapping[tuple[str, int], Sequence[int]]) -> dict[tuple[str, int, int], int]:
    """(topic, partition, broker) -> bytes of that replica (not a future one), from the brokers involved."""
    brokers = sorted({b for r, _ in moves.values() for b in r} | {b for r in current.values() for b in r})
    sizes: dict[tuple[str, int, int], int] = {}
    answers = admin.describe_log_dirs(brokers, topics=sorted({t for t, _ in moves}), raise_on_broker_error=False)
    for broker_id, infos in answers.items():
        for info in infos:
            for r in info.replicas:
                if not r.is_future:
                    sizes[(r.topic, r.partition, broker_id)] = r.size
    return sizes


def _follow(admin: Any, moves: Moves, current: Mapping[tuple[str, int], Sequence[int]],
            before: Mapping[tuple[str, int, int], int]) -> None:
    """Polls until no partition of `moves` is being reassigned: each partition's bytes are its new replicas'
    sizes against its largest replica's before the start (or since, if it grew), one bar (or line) per
    partition and one overall."""
    import sys

    from kjbod.cli.progress import Progress, Snapshot, human_bytes, human_duration, human_rate

    started = time.monotonic()
    adding = {k: [b for b in r if b not in current[k]] for k, (r, _) in moves.items()}
    source = {k: max((before.get((*k, b), 0) for b in current[k]), default=0) for k in moves}
    progress = Progress(sys.stdout, label="reassigning", item_name="partitions", interval=5.0)
    try:
        while True:
            ongoing = admin.list_partition_reassignments(
                {t: [p for tt, p in moves if tt == t] for t, _ in moves})
            sizes = _replica_sizes(admin, moves, current)
            parts, done_items = {}, 0
            for key in sorted(moves):
                source[key] = max([source[key], *(sizes.get((*key, b), 0) for b in current[key])])
                total = source[key] * len(adding[key])
                finished = key not in ongoing
                copied = total if finished else min(sum(sizes.get((*key, b), 0) for b in adding[key]), total)
                done_items += finished
                parts[f"{key[0]}-{key[1]}"] = Snapshot(copied, total, int(finished), 1)
            overall = Snapshot(sum(s.done_bytes for s in parts.values()),
                               sum(s.total_bytes for s in parts.values()), done_items, len(moves))
            progress.update(overall, parts)
            if done_items == len(moves):
                break
            time.sleep(POLL_SECONDS)
    finally:
        progress.close()
    took = time.monotonic() - started
    print(f"Reassignment of {len(moves)} partition(s) finished: {human_bytes(overall.done_bytes)} copied in "
          f"{human_duration(took)}, {human_rate(overall.done_bytes / took if took > 0 else None)}.")


# ================================================================================================ generate

def _generate(admin: Any, topics: list[str], brokers: list[int]) -> int:
    from kjbod.cli.reassign_plan import propose

    known = {b.node_id for b in admin.describe_cluster().brokers}
    for b in brokers:
        if b not in known:
            raise UserError(f"Unknown broker id {b}")
    described = admin.describe_topics()
    for t in topics:
        if t not in described:
            raise UserError(f"Topic {t} not found.")
    partitions = {(t, d.partition): d.replicas for t in topics for d in described[t].partitions}
    holders = sorted(known & ({b for r in partitions.values() for b in r} | set(brokers)))
    answers = admin.describe_log_dirs(holders, topics=topics)
    sizes: dict[tuple[str, int], int] = {}
    where: dict[tuple[str, int, int], str] = {}
    rooms: dict[int, list[tuple[str, int]]] = {b: [] for b in brokers}
    for broker_id, infos in answers.items():
        for info in infos:
            if info.error is not None:
                continue
            if broker_id in rooms:
                rooms[broker_id].append((info.path, info.usable_bytes or 0))
            for r in info.replicas:
                if r.is_future:
                    continue
                key = (r.topic, r.partition)
                sizes[key] = max(sizes.get(key, 0), r.size)
                where[(r.topic, r.partition, broker_id)] = info.path
    try:
        plan = propose(partitions, sizes, rooms, where)
    except ValueError as e:
        raise UserError(str(e)) from None
    print("Current partition replica assignment")
    print(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(partitions.items())]}))
    print("\nProposed partition reassignment configuration")
    print(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": d} for (t, p), (r, d) in plan.items()]}))
    return 0


def _verify(admin: Any, moves: Moves, *, preserve_throttles: bool = False) -> int:
    ongoing = admin.list_partition_reassignments({t: [p for tt, p in moves if tt == t] for t, _ in moves})
    current = _current(admin, moves)
    print("Status of partition reassignment:")
    for (t, p) in sorted(moves):
        target = moves[(t, p)][0]
        if (t, p) in ongoing:
            print(f"Reassignment of partition {t}-{p} is still in progress.")
        elif list(current[(t, p)]) == target:
            print(f"Reassignment of partition {t}-{p} is completed.")
        else:
            print(f"There is no active reassignment of partition {t}-{p}, but replica set is "
                  f"{_ids(current[(t, p)])} rather than {_ids(target)}.")
    if not admin.list_partition_reassignments():
        if _serves_kip179(admin):
            _report_throttles(admin, moves, current, quiet_if_none=True)
        elif not preserve_throttles:
            _clear_throttles(admin, moves)
    return 0


def _cancel(admin: Any, moves: Moves) -> int:
    ongoing = admin.list_partition_reassignments({t: [p for tt, p in moves if tt == t] for t, _ in moves})
    active = [k for k in moves if k in ongoing]
    if active:
        results = admin.alter_partition_reassignments(dict.fromkeys(active))
        failed = {k: msg for k, (code, msg) in results.items() if code}
        if failed:
            print("Error cancelling partition reassignment(s):\n"
                  + "\n".join(f"{t}-{p}: {m}" for (t, p), m in sorted(failed.items())))
            return 1
        print(f"Successfully cancelled partition reassignment(s) for: {_names(active)}")
    else:
        print("None of the specified partition reassignments are active.")
    # Kafka's tool prints this line without a line end (the shell prompt then follows it); kjbod ends it.
    print("None of the specified partition moves are active.")
    _clear_throttles(admin, moves)
    return 0
