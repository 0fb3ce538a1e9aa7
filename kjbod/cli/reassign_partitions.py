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

Not here yet: --generate, --throttle and --replica-alter-log-dirs-throttle (no inter-broker throttles yet),
--progress, and the fallback for an Apache Kafka cluster (it would ignore the dirs extension).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any
from uuid import UUID

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
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the reassignment in the JSON file")
    action.add_argument("--verify", action="store_true", help="report the state of the file's reassignments")
    action.add_argument("--cancel", action="store_true", help="cancel the file's reassignments")
    action.add_argument("--list", action="store_true", help="list every reassignment in progress")
    p.add_argument("--reassignment-json-file", help="the reassignment JSON (--execute, --verify, --cancel)")
    p.add_argument("--additional", action="store_true", help="execute while other reassignments run")
    p.add_argument("--disallow-replication-factor-change", action="store_true",
                   help="refuse targets that change a partition's replica count")
    p.add_argument("--timeout", type=int, default=10000, help="ms to wait for the cluster (default 10000)")
    p.set_defaults(func=run)


def parse_moves(text: str) -> Moves:
    """The file's moves; raises UserError naming the first bad entry."""
    try:
        data = json.loads(text)
    except ValueError as bad:
        raise UserError(f"the reassignment JSON file is not valid JSON: {bad}") from None
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

    if not args.list and not args.reassignment_json_file:
        raise UserError("--reassignment-json-file is required with --execute, --verify and --cancel")
    moves: Moves = {}
    if args.reassignment_json_file:
        with open(args.reassignment_json_file, encoding="utf-8") as f:
            moves = parse_moves(f.read())
    try:
        with SyncAdminClient(args.bootstrap_server, client_id=CLIENT_ID,
                             request_timeout=args.timeout / 1000) as admin:
            if args.list:
                return _list(admin)
            if args.verify:
                return _verify(admin, moves)
            if args.cancel:
                return _cancel(admin, moves)
            return _execute(admin, moves, args)
    except KafkaError as e:  # the cluster refused or could not be reached: one line
        raise UserError(str(e)) from None


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


def _dir_ids(admin: Any, moves: Moves) -> dict[tuple[str, int], list[UUID]]:
    """TargetDirectories for the moves that name dirs; raises UserError for a path its broker does not have."""
    named = {k: d for k, (_, d) in moves.items() if any(x != "any" for x in d)}
    if not named:
        return {}
    brokers = sorted({b for k in named for b in moves[k][0]})
    by_path = {(info.broker_id, info.path): info.directory_id
               for infos in admin.describe_log_dirs(brokers, topics=[]).values() for info in infos
               if info.error is None}
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
    return out


def _execute(admin: Any, moves: Moves, args: argparse.Namespace) -> int:
    if admin.list_partition_reassignments() and not args.additional:
        raise UserError(EXISTING)
    known = {b.node_id for b in admin.describe_cluster().brokers}
    for _key, (replicas, _dirs) in sorted(moves.items()):
        unknown = [b for b in replicas if b not in known]
        if unknown:
            raise UserError(f"Unknown broker id {unknown[0]}")
    current = _current(admin, moves)
    dirs = _dir_ids(admin, moves)
    print("Current partition replica assignment\n")
    print(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(current.items())]}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    results = admin.alter_partition_reassignments(
        {k: r for k, (r, _) in moves.items()}, directories=dirs,
        allow_replication_factor_change=not args.disallow_replication_factor_change)
    failed = {k: msg or f"error code {code}" for k, (code, msg) in results.items() if code}
    if failed:
        print("Error reassigning partition(s):\n" + "\n".join(f"{t}-{p}: {m}" for (t, p), m in sorted(failed.items())))
        return 1
    print(f"Successfully started partition reassignment(s) for {_names(moves)}")
    return 0


def _verify(admin: Any, moves: Moves) -> int:
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
    print("None of the specified partition moves are active.", end="")
    return 0
