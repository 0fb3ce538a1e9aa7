"""`kjbod balance-disks`: plan, and with --execute run, the moves that even out each broker's log dirs.

Strategy: a pipeline of pure steps around the admin client, as `kjbod log-dirs` (whose throttle guard, move
tracker and progress it reuses):

1. Which brokers: `--broker-list` (each id checked against the cluster, fenced ones included) or every broker.
   A fenced broker, or one that does not answer DescribeLogDirs, is reported and left out (exit 1).
2. DescribeLogDirs per broker -> `broker_dirs` (sizes, usable bytes, the dir's reserve, KIP-1066's IsCordoned,
   kjbod's filesystem id; replicas with a future copy are already moving: pinned) -> `balance_plan.plan_broker`
   (pure, see there for what is balanced and how little it moves).
3. Without --execute: the plan is printed (each move with its size, each dir's use before and after; `--json`
   for programs) and nothing changes.
4. With --execute, one broker at a time (so one broker's disks are busy at once): `--throttle` sets
   replica.alter.log.dirs.io.max.bytes.per.second on that broker for the run and removes it afterwards (or puts
   back the value it had; `ThrottleGuard`, released in a `finally`, so Ctrl-C and SIGTERM remove it too); at most
   `--max-moves-per-broker` moves are submitted (AlterReplicaLogDirs) at a time, the next one as soon as one is
   done; DescribeLogDirs polls follow them (`MoveTracker`), with `--progress` drawing bytes moved, rate and ETA.
   Then the broker's dirs are described again and the spread they reached is printed.

Exit codes: 0 every broker asked for is within the threshold (or will be, for a dry run); 1 a broker could not be
described, a plan cannot reach the goal (a problem line says why), or a move failed; 2 a usage or connection
error; 130 Ctrl-C; 143 SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from kjbod.cli.balance_plan import FILESYSTEM, OFFLINE, BrokerPlan, DirState, Replica, plan_broker
from kjbod.cli.command_config import add_command_config
from kjbod.cli.log_dirs import (
    COPYING,
    DONE,
    FAILED,
    POLL_INTERVAL,
    MoveTracker,
    PlannedMove,
    ThrottleGuard,
    _admin,
    _explain,
    _positive_float,
    _rate_text,
    _run_async,
    _table,
    fenced_brokers,
    parse_id_list,
    parse_rate,
    parse_size,
)
from kjbod.cli.main import UserError
from kjbod.cli.progress import Progress, human_bytes, human_duration

if TYPE_CHECKING:
    from kjbod.admin import AdminClient, LogDirInfo

__all__ = ["add_subcommand", "broker_dirs", "plan_document", "render_plan"]

DOCUMENT_VERSION = 1
DEFAULT_MIN_MOVE = 1 << 20  # evening out less than this is not worth a move (a new cluster's dirs hold a few KB)
EXIT_FAILED = 1


# ================================================================================================ arguments

def _threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of percentage points") from None
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"the threshold must be more than 0 and less than 100 percentage points, "
                                         f"not {text}")
    return value / 100


def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def add_subcommand(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "balance-disks", help="even out the log dirs of each broker, and empty cordoned ones",
        description="Plans the fewest replica moves between each broker's own log dirs that bring every dir's "
                    "use within --threshold of the others and empty every cordoned dir (cordoned.log.dirs), "
                    "then, with --execute, runs them (AlterReplicaLogDirs). Without --execute it only prints the "
                    "plan.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                        help="a broker to connect to (comma-separated for several)")
    parser.add_argument("--broker-list", metavar="IDS", type=parse_id_list,
                        help="comma-separated broker ids (default: every broker)")
    parser.add_argument("--threshold", metavar="POINTS", type=_threshold, default=0.10,
                        help="the largest allowed difference between the used fractions of a broker's dirs, in "
                             "percentage points (default: 10)")
    parser.add_argument("--min-move-bytes", metavar="SIZE", type=parse_size, default=DEFAULT_MIN_MOVE,
                        help="leave a broker's dirs as they are when evening them out would move less than SIZE "
                             "(e.g. 0, 100MB, 64MiB; default: 1MiB); cordoned dirs are emptied whatever their size")
    parser.add_argument("--max-moves-per-broker", metavar="N", type=_positive_int, default=2,
                        help="moves submitted to one broker at a time (default: 2)")
    parser.add_argument("--throttle", metavar="RATE", type=parse_rate,
                        help="limit the copying to RATE bytes/s (e.g. 50MB, 64MiB) while the moves run "
                             "(replica.alter.log.dirs.io.max.bytes.per.second, removed afterwards)")
    parser.add_argument("--execute", action="store_true", help="run the plan (default: only print it)")
    parser.add_argument("--json", action="store_true", help="print the plan (and results) as JSON")
    parser.add_argument("--progress", action="store_true",
                        help="while executing, show bytes moved, rate and ETA")
    parser.add_argument("--report-interval", metavar="SECONDS", type=_positive_float, default=5.0,
                        help="without a terminal, print a progress line this often (default: 5)")
    parser.add_argument("--timeout", metavar="SECONDS", type=_positive_float, default=30.0,
                        help="how long each request may take, retries included (default: 30)")
    parser.add_argument("--watch", metavar="SECONDS", type=_positive_float,
                        help="keep going until stopped: every SECONDS plan again and, with --execute, run what the "
                             "plan says, one broker at a time; a round waits while a partition is under-replicated "
                             "or being reassigned, and a broker with a degraded, offline or unanswering dir is left "
                             "alone; Ctrl-C or SIGTERM stops it (a throttle it set is removed)")
    add_command_config(parser)
    parser.set_defaults(func=_command)


# ================================================================================================ planning

def broker_dirs(dirs: list[LogDirInfo]) -> tuple[list[DirState], set[tuple[str, int]]]:
    """DescribeLogDirs' answer for one broker -> the plan's input, and the replicas already moving (pinned)."""
    out = []
    moving = {(r.topic, r.partition) for d in dirs for r in d.replicas if r.is_future}
    for d in dirs:
        online = d.error is None and d.state != "not-answering"
        replicas = tuple(Replica(r.topic, r.partition, r.size) for r in d.replicas if not r.is_future)
        out.append(DirState(d.path, online=online, cordoned=bool(d.is_cordoned), total_bytes=d.total_bytes,
                            usable_bytes=d.usable_bytes, reserved_bytes=d.reserved_bytes or 0,
                            filesystem_id=d.filesystem_id, replicas=replicas if online else ()))
    return out, moving


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def plan_document(plans: list[BrokerPlan], errors: dict[int, str], *, threshold: float,
                  execute: bool) -> dict[str, Any]:
    """The plan for programs (`--json`): {"version": 1, "threshold", "execute", "brokers": [{"broker", "error",
    "mode", "mode_reason", "spread_before", "spread_after", "least_bytes", "bytes_to_move", "dirs": [{"path",
    "state", "capacity", "before", "after", "fraction_before", "fraction_after", "replicas_before",
    "replicas_after"}], "moves": [{"topic", "partition", "from", "to", "size"}], "problems", "notes"}]}."""
    brokers: list[dict[str, Any]] = []
    for p in plans:
        brokers.append({
            "broker": p.broker, "error": None, "mode": p.mode, "mode_reason": p.mode_reason,
            "spread_before": round(p.spread_before, 6), "spread_after": round(p.spread_after, 6),
            "least_bytes": p.least_bytes, "bytes_to_move": p.bytes_to_move,
            "dirs": [{"path": d.path, "state": d.state, "capacity": d.capacity, "before": d.before, "after": d.after,
                      "fraction_before": d.fraction_before, "fraction_after": d.fraction_after,
                      "replicas_before": d.replicas_before, "replicas_after": d.replicas_after} for d in p.dirs],
            "moves": [{"topic": m.topic, "partition": m.partition, "from": m.source, "to": m.target, "size": m.size}
                      for m in p.moves],
            "problems": list(p.problems), "notes": list(p.notes)})
    for broker, error in errors.items():
        brokers.append({"broker": broker, "error": error, "mode": None, "mode_reason": None, "spread_before": None,
                        "spread_after": None, "least_bytes": 0, "bytes_to_move": 0, "dirs": [], "moves": [],
                        "problems": [error], "notes": []})
    brokers.sort(key=lambda b: b["broker"])
    return {"version": DOCUMENT_VERSION, "threshold": threshold, "execute": execute, "brokers": brokers}


def render_plan(plan: BrokerPlan) -> str:
    """One broker's plan for people: what is balanced and why, each dir before and after, each move."""
    filesystem = plan.mode == FILESYSTEM
    what = "filesystem use" if filesystem else "replica bytes"
    out = [f"Broker {plan.broker}: balancing {what}: {plan.mode_reason}."]
    rows = []
    for d in plan.dirs:
        if d.state == OFFLINE:
            rows.append([d.path, "offline", "-", "-", "-", "-"])
            continue
        amount = (lambda n: human_bytes(n)) if not filesystem else (lambda n: f"{human_bytes(n)} used")
        rows.append([d.path, d.state, f"{d.replicas_before} -> {d.replicas_after}",
                     f"{amount(d.before)} -> {amount(d.after)}",
                     _percent(d.fraction_before), _percent(d.fraction_after)])
    header = ["LOG DIR", "STATE", "REPLICAS", "USED" if filesystem else "DATA",
              "USE% BEFORE" if filesystem else "SHARE BEFORE", "AFTER"]
    out += ["  " + line for line in _table(header, rows, right={4, 5})]
    if plan.moves:
        out.append("")
        move_rows = [[m.name, m.source, m.target, human_bytes(m.size)] for m in plan.moves]
        out += ["  " + line for line in _table(["MOVE", "FROM", "TO", "SIZE"], move_rows, right={3})]
    out.append("")
    least = (f" (the least any plan could move: {human_bytes(plan.least_bytes)})"
             if plan.moves and plan.reaches_goal else "")
    out.append(f"  {len(plan.moves)} move{'s' if len(plan.moves) != 1 else ''}, "
               f"{human_bytes(plan.bytes_to_move)}{least}; spread {plan.spread_before * 100:.1f} -> "
               f"{plan.spread_after * 100:.1f} points (threshold {plan.threshold * 100:g}).")
    out += [f"  Note: {n}." for n in plan.notes]
    return "\n".join(out) + "\n"


# ================================================================================================ the command

def _command(args: argparse.Namespace) -> int:
    if args.watch is not None:
        if args.json:
            raise UserError("--watch prints as it goes: it does not take --json")
        return _run_async(_watch(args, sys.stdout, sys.stderr))
    return _run_async(_run(args, sys.stdout, sys.stderr))


async def _brokers(admin: AdminClient, wanted: list[int] | None) -> tuple[list[int], dict[int, str]]:
    """(brokers to describe, broker -> why it cannot be) for `wanted` (None: every broker)."""
    from kjbod.admin import KafkaError

    try:
        described = await admin.describe_cluster(include_fenced_brokers=True)
        known = sorted(b.node_id for b in described.brokers)
    except KafkaError:
        known = sorted(b.node_id for b in (await admin.describe_cluster()).brokers)
    fenced = await fenced_brokers(admin)
    if wanted is not None:
        unknown = [b for b in wanted if b not in known]
        if unknown:
            raise UserError(f"--broker-list: broker {unknown[0]} is not in the cluster (its brokers: "
                            f"{', '.join(map(str, known)) or 'none'})")
    chosen = known if wanted is None else wanted
    errors = {b: f"broker {b}: {why}" for b, why in fenced.items() if b in chosen}
    return [b for b in chosen if b not in fenced], errors


def cluster_holds(topics: dict[str, Any], reassignments: dict[tuple[str, int], Any]) -> list[str]:
    """Why a --watch round should not move anything now (nothing: it may): partitions whose ISR is short of
    their replicas (a broker is down or behind: copying now competes with catching up) and reassignments in
    progress (their copies already load the disks)."""
    under = sorted(f"{t}-{p.partition}" for t, td in topics.items() for p in td.partitions
                   if len(p.isr) < len(p.replicas))
    reasons = []
    if under:
        shown = ", ".join(under[:3]) + (", ..." if len(under) > 3 else "")
        reasons.append(f"{len(under)} partition{'s are' if len(under) != 1 else ' is'} under-replicated ({shown})")
    if reassignments:
        n = len(reassignments)
        reasons.append(f"{n} partition reassignment{'s are' if n != 1 else ' is'} in progress")
    return reasons


def broker_holds(dirs: list[LogDirInfo]) -> list[str]:
    """Why --watch leaves a broker alone this round: a dir that is degraded (slow), offline or not answering
    (moving data onto a sick disk, or off it, makes it worse; a full dir is what balancing relieves)."""
    out = []
    for d in dirs:
        if d.error is not None:
            out.append(f"{d.path} is offline")
        elif d.state in ("degraded", "not-answering", "offline"):
            out.append(f"{d.path} is {d.state}")
    return out


async def _plans(admin: AdminClient, brokers: list[int], threshold: float, min_move_bytes: int = 0,
                 holds: dict[int, list[str]] | None = None) -> tuple[list[BrokerPlan], dict[int, str]]:
    from kjbod.admin import KafkaError

    errors: dict[int, str] = {}
    if not brokers:
        return [], errors
    try:
        result = await admin.describe_log_dirs(brokers, None, raise_on_broker_error=False)
    except KafkaError as e:
        raise UserError(str(e)) from None
    for b, problem in result.errors.items():
        errors[b] = f"broker {b}: its log dirs could not be described: {problem}"
    plans = []
    for b in sorted(result):
        dirs, moving = broker_dirs(result[b])
        plans.append(plan_broker(b, dirs, threshold, moving, min_move_bytes))
        if holds is not None:
            holds[b] = broker_holds(result[b])
    return plans, errors


async def _run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    def say(text: str) -> None:
        stdout.write(text + "\n")
        stdout.flush()

    def complain(text: str) -> None:
        stdout.flush()
        stderr.write(f"kjbod: error: {text}\n")
        stderr.flush()

    failed = False
    async with _admin(args) as admin:
        brokers, errors = await _brokers(admin, args.broker_list)
        plans, describe_errors = await _plans(admin, brokers, args.threshold, args.min_move_bytes)
        errors.update(describe_errors)
        if args.json and not args.execute:
            say(json.dumps(plan_document(plans, errors, threshold=args.threshold, execute=False), indent=2))
            return EXIT_FAILED if errors or any(p.problems for p in plans) else 0
        if not args.json:
            for i, plan in enumerate(plans):
                if i:
                    say("")
                stdout.write(render_plan(plan))
        for plan in plans:
            for problem in plan.problems:
                complain(problem)
        for error in errors.values():
            complain(error)
        if not args.execute:
            if not args.json and any(p.moves for p in plans):
                say("\nDry run: nothing was moved. Run again with --execute to move these replicas.")
            return EXIT_FAILED if errors or any(p.problems for p in plans) else 0
        results: dict[int, dict[tuple[str, int], tuple[str, str | None]]] = {}
        after: dict[int, BrokerPlan] = {}
        progress_stream = stderr if args.json else stdout
        for plan in plans:
            if not plan.moves:
                continue
            outcome = await _execute(admin, plan, args, progress_stream, say if not args.json else _quiet,
                                     complain)
            results[plan.broker] = outcome
            failed = failed or any(state != DONE for state, _ in outcome.values())
            again, again_errors = await _plans(admin, [plan.broker], args.threshold, args.min_move_bytes)
            if again:
                after[plan.broker] = again[0]
                if not args.json:
                    p = again[0]
                    say(f"Broker {plan.broker}: spread now {p.spread_before * 100:.1f} points "
                        f"(threshold {args.threshold * 100:g}).")
            for error in again_errors.values():
                complain(error)
    if args.json:
        document = plan_document(plans, errors, threshold=args.threshold, execute=True)
        for b in document["brokers"]:
            outcome = results.get(b["broker"], {})
            for m in b["moves"]:
                m["result"], m["error"] = outcome.get((m["topic"], m["partition"]), ("not run", None))
            b["spread_measured_after"] = (round(after[b["broker"]].spread_before, 6)
                                          if b["broker"] in after else None)
        say(json.dumps(document, indent=2))
    return EXIT_FAILED if failed or errors or any(p.problems for p in plans) else 0


def _quiet(text: str) -> None:
    pass


async def _watch(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """--watch: rounds of plan (and, with --execute, run) until stopped; see the option's help."""
    from kjbod.admin import KafkaError

    def say(text: str) -> None:
        stdout.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")
        stdout.flush()

    def complain(text: str) -> None:
        stdout.flush()
        stderr.write(f"kjbod: error: {text}\n")
        stderr.flush()

    last: dict[str, str] = {}  # what was last said of the cluster or a broker: said again only when it changes

    def once(key: str, text: str) -> None:
        if last.get(key) != text:
            last[key] = text
            say(text)

    async def held() -> list[str]:
        topics = await admin.describe_topics(None)
        reassignments = await admin.list_partition_reassignments()
        return cluster_holds(topics, reassignments)

    say(f"Watching every {args.watch:g} s" + (" and moving" if args.execute else " (dry run: nothing is moved)")
        + f"; threshold {args.threshold * 100:g} points. Ctrl-C stops.")
    async with _admin(args) as admin:
        await _brokers(admin, args.broker_list)  # a --broker-list id the cluster does not have stops it at once
        while True:
            try:
                reasons = await held()
                if reasons:
                    once("cluster", "Waiting: " + "; ".join(reasons) + ".")
                else:
                    if last.get("cluster", "").startswith("Waiting"):
                        once("cluster", "Resuming: nothing under-replicated or being reassigned.")
                    brokers, errors = await _brokers(admin, args.broker_list)
                    holds: dict[int, list[str]] = {}
                    plans, describe_errors = await _plans(admin, brokers, args.threshold, args.min_move_bytes,
                                                          holds)
                    for b, error in {**errors, **describe_errors}.items():
                        once(f"error-{b}", f"Broker {b} left out: {error}")
                    for plan in plans:
                        b = plan.broker
                        if holds.get(b):
                            once(f"broker-{b}", f"Broker {b} left alone: {'; '.join(holds[b])}.")
                            continue
                        if not plan.moves:
                            once(f"broker-{b}", f"Broker {b}: balanced (spread {plan.spread_before * 100:.1f} "
                                                f"points, threshold {args.threshold * 100:g}).")
                            continue
                        text = render_plan(plan)
                        if not args.execute:
                            if last.get(f"broker-{b}") != text:
                                last[f"broker-{b}"] = text
                                say(f"Broker {b} would move:")
                                stdout.write(text)
                            continue
                        last.pop(f"broker-{b}", None)
                        say(f"Broker {b} is out of balance:")
                        stdout.write(text)
                        try:
                            await _execute(admin, plan, args, stdout, say, complain)
                        except UserError as e:  # its throttle could not be set: tried again next round
                            complain(str(e))
                        if await held():  # the cluster changed meanwhile: the next broker waits
                            break
            except (KafkaError, UserError) as e:
                once("cluster", f"Cannot read the cluster now ({e}); trying again.")
            await asyncio.sleep(args.watch)


async def _execute(admin: AdminClient, plan: BrokerPlan, args: argparse.Namespace, stream: TextIO,
                   say: Callable[[str], None], complain: Callable[[str], None]
                   ) -> dict[tuple[str, int], tuple[str, str | None]]:
    """Runs one broker's moves, at most --max-moves-per-broker at a time; (topic, partition) -> (state, error)."""
    from kjbod.admin import KafkaError, TopicPartitionReplica

    broker = plan.broker
    loop = asyncio.get_running_loop()
    tracker = MoveTracker(broker)
    queue = [PlannedMove(m.topic, m.partition, m.target) for m in plan.moves]
    sizes = {(m.topic, m.partition): m.size for m in plan.moves}
    sources = {(m.topic, m.partition): m.source for m in plan.moves}
    dirs = [d.path for d in plan.dirs]
    for move in queue:
        entry = tracker.add(move, source_dir=sources[(move.topic, move.partition)], now=loop.time())
        entry.size = sizes[(move.topic, move.partition)]
    submitted: set[tuple[str, int]] = set()
    guard = ThrottleGuard(admin, broker, args.throttle) if args.throttle is not None else None
    progress = Progress(stream, label=f"balancing broker {broker}", item_name="moves", interval=args.report_interval,
                        clock=loop.time) if args.progress else None
    say(f"Broker {broker}: running {len(queue)} move{'s' if len(queue) != 1 else ''} "
        f"({human_bytes(plan.bytes_to_move)}), {args.max_moves_per_broker} at a time.")

    def note(text: str) -> None:
        if progress is not None:
            progress.note(text)
        else:
            say(text)

    async def submit(moves: list[PlannedMove]) -> None:
        replicas: dict[TopicPartitionReplica | tuple[str, int, int], str] = {
            TopicPartitionReplica(m.topic, m.partition, broker): m.log_dir for m in moves}
        try:
            answers = await admin.alter_replica_log_dirs(replicas)
        except KafkaError as e:
            for m in moves:
                entry = tracker.states[(m.topic, m.partition)]
                entry.state, entry.error, entry.finished_at = FAILED, str(e), loop.time()
                complain(f"{m.name} -> {m.log_dir}: {e}")
            return
        for m in moves:
            submitted.add((m.topic, m.partition))
            result = answers[TopicPartitionReplica(m.topic, m.partition, broker)]
            if result.error is not None:
                entry = tracker.states[(m.topic, m.partition)]
                entry.state, entry.finished_at = FAILED, loop.time()
                entry.error = _explain(result.error, m, broker, dirs)
                complain(f"{m.name} -> {m.log_dir}: {entry.error}")
            else:
                tracker.states[(m.topic, m.partition)].started_at = loop.time()

    try:
        if guard is not None:
            try:
                await guard.install()
            except KafkaError as e:
                raise UserError(f"could not set the throttle on broker {broker}: {e}") from None
            say(f"Throttle on broker {broker} set to {_rate_text(guard.rate)} for these moves "
                f"({guard.describe_previous()}).")
        while True:
            running = [k for k in submitted if tracker.states[k].active]
            waiting = [m for m in queue if (m.topic, m.partition) not in submitted
                       and tracker.states[(m.topic, m.partition)].active]
            room = args.max_moves_per_broker - len(running)
            if waiting and room > 0:
                await submit(waiting[:room])
                continue
            if not running:
                break
            try:
                infos = await admin.describe_replica_log_dirs(
                    [TopicPartitionReplica(t, p, broker) for t, p in running])
            except KafkaError as e:
                note(f"could not read progress from broker {broker}: {e}; retrying")
                await asyncio.sleep(POLL_INTERVAL * 4)
                continue
            now = loop.time()
            for replica, info in infos.items():
                entry = tracker.states[(replica.topic, replica.partition)]
                final = tracker.observe(info, entry, now)
                if final == DONE:
                    took = human_duration(now - entry.started_at)
                    note(f"  done: {entry.move.name} -> {entry.move.log_dir} ({human_bytes(entry.size)} in {took})")
                elif final is not None:
                    complain(f"{entry.move.name} -> {entry.move.log_dir}: {entry.error}")
            if progress is not None:
                progress.update(tracker.snapshot())
            if any(tracker.states[k].state == COPYING or tracker.states[k].active for k in running):
                await asyncio.sleep(POLL_INTERVAL)
    finally:
        if progress is not None:
            progress.close()
        if guard is not None and guard.installed:
            try:
                message = await guard.release()
                if message:
                    say(message)
            except (KafkaError, OSError) as e:
                complain(f"could not remove the throttle from broker {broker} ({e}); remove it with: "
                         f"{guard.manual_fix(args.bootstrap_server)}")
    done = [s for s in tracker.states.values() if s.state == DONE]
    say(f"Broker {broker}: {len(done)} of {len(queue)} moves done, {human_bytes(sum(s.size for s in done))}.")
    return {(s.move.topic, s.move.partition): (s.state, s.error) for s in tracker.states.values()}
