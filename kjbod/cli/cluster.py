"""`kjbod cluster up` / `down` / `status`: controllers and N brokers as separate processes on one machine.

Strategy: everything lives in one directory (`--dir`), one subdirectory per node holding the node's Kafka-style
`server.properties`, its log dirs, its log (`server.log`: what the process writes) and, while it runs, its pid
(`pid`).  A new or empty directory gets the config files (ports on 127.0.0.1 counted up from `--base-port`, 9092
by default: the brokers' listeners first, then the controller's, then the metrics listeners, each port that
something listens on skipped; chosen once and kept in the files) and is formatted with one cluster id (`kjbod format`'s code); a directory that holds a cluster already is
started again as its files say, with its data.  The nodes are plain `kjbod serve -c FILE` processes.

`up` starts every node that is not running (all of them for a new or stopped cluster; after a broker was killed,
only that broker, with its pid file and log as `up` first gave it) and leaves the running ones alone, saying which
it started and which were running.  It starts the controller first, then the brokers, and waits until each node
it started listens: a broker-only node opens its listener only once it is registered and unfenced
(kjbod.broker.remote), so a topic created right after gets leaders on all of them.  It prints
`bootstrap.servers=HOST:PORT,...` on a line of its own and where the logs are.
With `--controllers N` (N > 1; 3 survives the loss of one) a new cluster has N controllers (`controller-1`,
`controller-2`, ...; node ids 1001, 1002, ...) forming a KRaft quorum (`controller.quorum.voters` names them all,
on every node); one controller keeps the single `controller` directory (node id 1000). `kjbod cluster status`
says which nodes run (with their pids and listeners) and, for controllers, which one leads the quorum.
In the foreground it stops every node (brokers first, with a controlled shutdown, then the controller) on Ctrl-C,
SIGTERM, or SIGHUP (its terminal went away), and the nodes are also told to stop if `up` itself dies (Linux
PR_SET_PDEATHSIG).  With `--detach` it returns once the cluster is ready; `kjbod cluster down --dir PATH` stops it
(`--node broker-N` stops that node only, as a rolling restart does; `up` starts it again).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kjbod.cli.main import UserError

CONTROLLER = "controller"
CONTROLLER_NODE_ID = 1000  # the only controller's node id; a quorum's are 1001, 1002, ...
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
HOST = "127.0.0.1"
DEFAULT_BASE_PORT = 9092  # Kafka's own: a one-broker cluster listens where clients look first
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def add_subcommand(sub: Any) -> None:
    p = sub.add_parser(
        "cluster", help="start or stop a local cluster: a controller and brokers as separate processes",
        description="Run a controller and N brokers as separate kjbod processes on 127.0.0.1.")
    actions = p.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    up = actions.add_parser(
        "up", help="start the cluster's nodes that are not running (format it first if new)",
        description="Start a controller and N brokers; on a cluster that runs already, start only the nodes that "
                    "are not running (a killed broker). Ctrl-C stops every node.")
    up.add_argument("--brokers", type=_positive, default=3, metavar="N", help="number of brokers (default 3)")
    up.add_argument("--controllers", type=_positive, default=1, metavar="N",
                    help="number of controllers (default 1); several form a KRaft quorum (3 survive one failure)")
    up.add_argument("--log-dirs", type=_positive, default=3, metavar="N", help="log dirs per broker (default 3)")
    up.add_argument("--dir", default="kjbod-cluster", metavar="PATH",
                    help="where the nodes keep their configs, data and logs (default ./kjbod-cluster)")
    up.add_argument("--base-port", type=_port, default=DEFAULT_BASE_PORT, metavar="PORT",
                    help="the first port a new cluster's nodes listen on: brokers from PORT up, then the "
                         f"controller, then the metrics listeners; taken ports skipped (default {DEFAULT_BASE_PORT})")
    up.add_argument("--detach", action="store_true",
                    help="return once every broker is registered and unfenced; stop with 'kjbod cluster down'")
    up.add_argument("--racks", type=_racks, default=(), metavar="RACK,...",
                    help="broker.rack of each new broker, in turn (broker 1 the first, and round again when there "
                         "are more brokers than racks), e.g. az-a,az-b,az-c")
    up.add_argument("--release-version", metavar="VERSION",
                    help="the metadata.version a new cluster starts at (as kjbod format --release-version), e.g. "
                         "4.0-IV0; default: the latest kjbod runs")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config key for every node's server.properties (new clusters only), e.g. "
                         "broker.session.timeout.ms=3000")
    up.set_defaults(func=run_up)
    down = actions.add_parser("down", help="stop a cluster started with --detach (or some of its nodes)",
                              description="Stop every node of the cluster in --dir (brokers first), or only the "
                                          "nodes named with --node; 'kjbod cluster up' starts them again.")
    down.add_argument("--dir", default="kjbod-cluster", metavar="PATH", help="the cluster's directory")
    down.add_argument("--node", action="append", default=[], metavar="NAME",
                      help="stop only this node: broker-N (or N), controller, or controller-N of a quorum; "
                           "repeatable")
    down.set_defaults(func=run_down)
    status = actions.add_parser("status", help="which of the cluster's nodes run, and which controller leads",
                                description="List the nodes of the cluster in --dir: role, node id, listener, pid "
                                            "or 'stopped', and for controllers the quorum's leader.")
    status.add_argument("--dir", default="kjbod-cluster", metavar="PATH", help="the cluster's directory")
    status.set_defaults(func=run_status)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def _racks(text: str) -> tuple[str, ...]:
    racks = tuple(r.strip() for r in text.split(","))
    if not racks or any(not r for r in racks):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of rack names")
    return racks


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1-65535)")
    return value


# ------------------------------------------------------------------------------------------------ layout


class PortCounter:
    """A new cluster's ports: counted up from a base, as an operator numbers them (9092, 9093, ...), never from
    the kernel's ephemeral range the way bind(0) picks them (an outgoing connection may take such a port before
    the node binds it). A port something listens on (or cannot be bound now) is skipped."""

    def __init__(self, base: int) -> None:
        self.base = self.next = base

    def take(self) -> int:
        while self.next <= 65535:
            port = self.next
            self.next += 1
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((HOST, port))
                except OSError:
                    continue
            return port
        raise UserError(f"no free port on {HOST} from --base-port {self.base} up to 65535")


def read_properties(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def _write_properties(path: Path, settings: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# written by kjbod cluster up\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))


def _numbered(root: Path, prefix: str) -> list[Path]:
    return sorted((p for p in root.glob(f"{prefix}-*") if (p / "server.properties").is_file()),
                  key=lambda p: int(p.name.rpartition("-")[2]) if p.name.rpartition("-")[2].isdigit() else 0)


def is_controller(home: Path) -> bool:
    return home.name == CONTROLLER or home.name.startswith(f"{CONTROLLER}-")


def node_dirs(root: Path) -> list[Path]:
    """The nodes of the cluster in `root`: the controllers first, then the brokers by id."""
    controller = root / CONTROLLER
    single = [controller] if (controller / "server.properties").is_file() else []
    return single + _numbered(root, CONTROLLER) + _numbered(root, "broker")


def create_cluster(root: Path, brokers: int, log_dirs: int, extra: dict[str, str],
                   base_port: int = DEFAULT_BASE_PORT, controllers: int = 1, racks: tuple[str, ...] = (),
                   levels: dict[str, int] | None = None) -> None:
    """Writes every node's server.properties and formats its dirs with one new cluster id; `racks` are the
    brokers' broker.rack in turn; `levels` the feature levels it starts at (bootstrap.checkpoint)."""
    from kjbod.server.config import load_config
    from kjbod.storage.ids import random_directory_id
    from kjbod.storage.meta import format_dirs

    ports = PortCounter(base_port)
    broker_ports = [ports.take() for _ in range(brokers)]
    if controllers == 1:
        homes = {root / CONTROLLER: CONTROLLER_NODE_ID}
    else:
        homes = {root / f"{CONTROLLER}-{i}": CONTROLLER_NODE_ID + i for i in range(1, controllers + 1)}
    cports = {home: ports.take() for home in homes}
    voters = ",".join(f"{node_id}@{HOST}:{cports[home]}" for home, node_id in homes.items())
    common = {"controller.listener.names": "CONTROLLER",
              "controller.quorum.bootstrap.servers": ",".join(f"{HOST}:{p}" for p in cports.values()),
              "broker.heartbeat.interval.ms": "2000", "broker.session.timeout.ms": "9000"}
    if controllers > 1:
        common["controller.quorum.voters"] = voters  # brokers find the quorum's leader among the voters
    nodes = {}
    for home, node_id in homes.items():
        nodes[home / "server.properties"] = {
            "process.roles": "controller", "node.id": str(node_id),
            "listeners": f"CONTROLLER://{HOST}:{cports[home]}",
            "kjbod.metrics.listener": f"{HOST}:{ports.take()}",
            "log.dirs": str(home / "metadata"), **common, "controller.quorum.voters": voters, **extra}
    for b in range(1, brokers + 1):
        home = root / f"broker-{b}"
        nodes[home / "server.properties"] = {
            "process.roles": "broker", "node.id": str(b), "listeners": f"PLAINTEXT://{HOST}:{broker_ports[b - 1]}",
            "kjbod.metrics.listener": f"{HOST}:{ports.take()}",
            "log.dirs": ",".join(str(home / f"logs-{i}") for i in range(log_dirs)), **common,
            **({"broker.rack": racks[(b - 1) % len(racks)]} if racks else {}), **extra}
    cluster_id = random_directory_id()
    for path, settings in nodes.items():
        _write_properties(path, settings)
        format_dirs(load_config(str(path), []), cluster_id=cluster_id, bootstrap_levels=levels)


def _is_empty(root: Path) -> bool:
    return not root.exists() or not any(root.iterdir())


# ------------------------------------------------------------------------------------------------ processes


def listen_port(home: Path) -> int:
    listener = read_properties(home / "server.properties")["listeners"].split(",")[0]
    return int(listener.rpartition(":")[2])


def node_pid(home: Path) -> int | None:
    """The pid of the process running `kjbod serve` for this node: the one in its pid file, else one started by
    hand from its config (`kjbod serve -c <dir>/<node>/server.properties`, as the README says to restart a node);
    None when none runs."""
    config = str(home / "server.properties").encode()
    try:
        pid = int((home / "pid").read_text().strip())
        if _serves(pid, config):
            return pid
    except (OSError, ValueError):
        pass
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _serves(int(entry.name), config):
            return int(entry.name)
    return None


def _serves(pid: int, config: bytes) -> bool:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"serve" in args and config in args and _state(pid) != "Z"


def _die_with_parent() -> None:
    """In the child, before exec: the signals `up` blocks for itself unblocked again (a blocked mask is
    inherited), and SIGTERM when the `cluster up` that started it dies (Linux only)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_node(home: Path, *, detach: bool) -> subprocess.Popen[bytes]:
    if node_pid(home) is not None:
        raise UserError(f"{home.name} is already running (pid {node_pid(home)}); stop it with kjbod cluster down "
                        f"--dir {home.parent}")
    with open(home / "server.log", "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kjbod", "serve", "-c", str(home / "server.properties")],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=None if detach else _die_with_parent)
    (home / "pid").write_text(f"{process.pid}\n")
    return process


def wait_listening(home: Path, process: subprocess.Popen[bytes], deadline: float) -> None:
    port = listen_port(home)
    while True:
        code = process.poll()
        if code is not None:
            tail = "\n".join((home / "server.log").read_text(errors="replace").splitlines()[-5:])
            raise UserError(f"{home.name} exited with {code} while starting; see {home / 'server.log'}: {tail}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
            return
        if time.monotonic() > deadline:
            raise UserError(f"{home.name} did not get ready within {READY_TIMEOUT_S:g}s; see {home / 'server.log'}")
        time.sleep(0.05)


def stop_nodes(root: Path, only: set[Path] | None = None) -> list[str]:
    """SIGTERM to every running node (or those in `only`), brokers first (each waits for its controlled shutdown),
    the controllers last (together: a quorum's leader hands over as it goes); SIGKILL to one that does not stop
    within STOP_TIMEOUT_S.  Returns what was stopped."""
    homes = [home for home in node_dirs(root) if only is None or home in only]
    stopped = []
    brokers = [h for h in homes if not is_controller(h)]
    for group in (brokers, [h for h in homes if is_controller(h)]):
        running = {home: pid for home in group if (pid := node_pid(home)) is not None}
        for pid in running.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for home, pid in running.items():
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                # Our own child (an `up` in the foreground): reaped now. `_alive` may have seen it a zombie
                # without reaping it, and a SIGKILLed one is reaped once it is gone; either would otherwise stay
                # in the process table until `up` itself exits.
                os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                (home / "pid").unlink()
            stopped.append(home.name)
    return stopped


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)  # our own child: reap it
        if done:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return "Z"


# ------------------------------------------------------------------------------------------------ commands


def run_up(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    extra = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set {item!r}: expected KEY=VALUE")
        extra[key.strip()] = value.strip()
    new = _is_empty(root)
    if new:
        from kjbod.cli.storage_tool import bootstrap_levels

        levels = bootstrap_levels(args.release_version, [])  # the latest without --release-version
        try:
            create_cluster(root, args.brokers, args.log_dirs, extra, args.base_port, args.controllers, args.racks,
                           levels)
        except BaseException:  # a bad --set: leave the dir as it was (empty), not a half-made cluster
            for child in root.iterdir() if root.exists() else ():
                shutil.rmtree(child, ignore_errors=True)
            raise
        controllers = "a controller" if args.controllers == 1 else f"{args.controllers} controllers (a quorum)"
        print(f"formatted a new cluster in {root}: {controllers} and {args.brokers} brokers, "
              f"{args.log_dirs} log dirs each")
    elif not node_dirs(root):
        raise UserError(f"{root} is neither empty nor a cluster made by kjbod cluster up")
    homes = node_dirs(root)
    if not homes or not is_controller(homes[0]):
        raise UserError(f"{root} has no controller/server.properties")
    running = {home: pid for home in homes if (pid := node_pid(home)) is not None}
    missing = [home for home in homes if home not in running]
    if running:
        print(f"already running: {', '.join(f'{home.name} (pid {pid})' for home, pid in running.items())}")
    if not missing:
        print("nothing to start")
    elif not new and not running:
        print(f"starting the cluster in {root} again with its data (its own node count and log dirs; --brokers, "
              "--controllers, --log-dirs and --set apply to new clusters)")
    elif not new:
        print(f"starting {', '.join(home.name for home in missing)} again with "
              f"{'its' if len(missing) == 1 else 'their'} data" + (" (--set applies to new clusters only)"
                                                                     if args.set else ""))
    deadline = time.monotonic() + READY_TIMEOUT_S
    if not args.detach:  # the signals that stop us are taken synchronously below; block them from now on
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    processes: dict[Path, subprocess.Popen[bytes]] = {}
    try:
        for home in missing:
            processes[home] = start_node(home, detach=args.detach)
        for home in missing:
            if is_controller(home):  # every controller listens before a broker starts
                wait_listening(home, processes[home], deadline)
        for home in missing:
            wait_listening(home, processes[home], deadline)
    except BaseException:
        stop_nodes(root, only=set(processes))  # what this run started; the nodes that were running stay
        raise
    if processes:
        print(f"started: {', '.join(f'{home.name} (pid {process.pid})' for home, process in processes.items())}",
              flush=True)
    print(f"bootstrap.servers={','.join(f'{HOST}:{listen_port(h)}' for h in homes if not is_controller(h))}",
          flush=True)
    for home in homes:
        metrics = read_properties(home / "server.properties").get("kjbod.metrics.listener")
        if metrics:
            print(f"metrics of {home.name}: http://{metrics}/metrics", flush=True)
    print(f"logs: {root}/*/server.log", flush=True)
    if args.detach:
        print(f"stop it with: kjbod cluster down --dir {root}", flush=True)
        return 0
    print("Ctrl-C stops every node", flush=True)
    sig = signal.sigwait(STOP_SIGNALS)
    print(f"{signal.Signals(sig).name}: stopping the cluster", flush=True)
    stopped = stop_nodes(root)
    print(f"stopped: {', '.join(stopped)}", flush=True)
    return 0


def run_down(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    homes = {home.name: home for home in node_dirs(root)}
    if not homes:
        raise UserError(f"{root} holds no cluster made by kjbod cluster up")
    only = None
    if args.node:
        only = set()
        for name in args.node:
            home = homes.get(f"broker-{name}" if name.isdigit() else name)
            if home is None:
                raise UserError(f"--node {name!r}: the cluster in {root} has no such node (it has "
                                f"{', '.join(homes)})")
            only.add(home)
    stopped = stop_nodes(root, only)
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def run_status(args: argparse.Namespace) -> int:
    """One line per node (role, node id, listener, pid or stopped), then the quorum's leader as the running
    controllers report it."""
    import asyncio

    from kjbod.cli.metadata_quorum import describe_quorum

    root = Path(args.dir).resolve()
    homes = node_dirs(root)
    if not homes:
        raise UserError(f"{root} holds no cluster made by kjbod cluster up")
    rows = [("NODE", "ROLE", "NODE.ID", "LISTENER", "PID")]
    running_controllers = []
    for home in homes:
        props = read_properties(home / "server.properties")
        pid = node_pid(home)
        rows.append((home.name, props.get("process.roles", "?"), props.get("node.id", "?"),
                     props.get("listeners", "?").split(",")[0], str(pid) if pid is not None else "stopped"))
        if is_controller(home) and pid is not None:
            running_controllers.append((HOST, listen_port(home)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    if not running_controllers:
        print("quorum: no controller is running")
        return 0
    names = {int(read_properties(h / "server.properties").get("node.id", "-1")): h.name
             for h in homes if is_controller(h)}
    try:
        info, _address = asyncio.run(describe_quorum(running_controllers, timeout=5.0))
    except UserError as e:
        print(f"quorum: no leader known ({e})")
        return 0
    print(f"quorum: leader {names.get(info.leader_id, '?')} (node {info.leader_id}), epoch {info.leader_epoch}, "
          f"high watermark {info.high_watermark}, {len(info.voters)} voter(s)")
    return 0
