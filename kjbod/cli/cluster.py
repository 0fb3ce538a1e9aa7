"""`kjbod cluster up` / `kjbod cluster down`: a controller and N brokers as separate processes on one machine.

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
CONTROLLER_NODE_ID = 1000
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
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config key for every node's server.properties (new clusters only), e.g. "
                         "broker.session.timeout.ms=3000")
    up.set_defaults(func=run_up)
    down = actions.add_parser("down", help="stop a cluster started with --detach (or some of its nodes)",
                              description="Stop every node of the cluster in --dir (brokers first), or only the "
                                          "nodes named with --node; 'kjbod cluster up' starts them again.")
    down.add_argument("--dir", default="kjbod-cluster", metavar="PATH", help="the cluster's directory")
    down.add_argument("--node", action="append", default=[], metavar="NAME",
                      help="stop only this node: broker-N (or N) or controller; repeatable")
    down.set_defaults(func=run_down)


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


def node_dirs(root: Path) -> list[Path]:
    """The nodes of the cluster in `root`: the controller first, then the brokers by id."""
    brokers = sorted((p for p in root.glob("broker-*") if (p / "server.properties").is_file()),
                     key=lambda p: int(p.name.rpartition("-")[2]) if p.name.rpartition("-")[2].isdigit() else 0)
    controller = root / CONTROLLER
    return ([controller] if (controller / "server.properties").is_file() else []) + brokers


def create_cluster(root: Path, brokers: int, log_dirs: int, extra: dict[str, str],
                   base_port: int = DEFAULT_BASE_PORT, racks: tuple[str, ...] = ()) -> None:
    """Writes every node's server.properties and formats its dirs with one new cluster id; `racks` are the
    brokers' broker.rack in turn."""
    from kjbod.server.config import load_config
    from kjbod.storage.ids import random_directory_id
    from kjbod.storage.meta import format_dirs

    ports = PortCounter(base_port)
    broker_ports = [ports.take() for _ in range(brokers)]
    cport = ports.take()
    common = {"controller.listener.names": "CONTROLLER",
              "controller.quorum.bootstrap.servers": f"{HOST}:{cport}",
              "broker.heartbeat.interval.ms": "2000", "broker.session.timeout.ms": "9000"}
    nodes = {root / CONTROLLER / "server.properties": {
        "process.roles": "controller", "node.id": str(CONTROLLER_NODE_ID),
        "listeners": f"CONTROLLER://{HOST}:{cport}",
        "controller.quorum.voters": f"{CONTROLLER_NODE_ID}@{HOST}:{cport}",
        "kjbod.metrics.listener": f"{HOST}:{ports.take()}",
        "log.dirs": str(root / CONTROLLER / "metadata"), **common, **extra}}
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
        format_dirs(load_config(str(path), []), cluster_id=cluster_id)


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
    the controller last; SIGKILL to one that does not stop within STOP_TIMEOUT_S.  Returns what was stopped."""
    homes = [home for home in node_dirs(root) if only is None or home in only]
    stopped = []
    brokers = [h for h in homes if h.name != CONTROLLER]
    for group in (brokers, [h for h in homes if h.name == CONTROLLER]):
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
        try:
            create_cluster(root, args.brokers, args.log_dirs, extra, args.base_port, args.racks)
        except BaseException:  # a bad --set: leave the dir as it was (empty), not a half-made cluster
            for child in root.iterdir() if root.exists() else ():
                shutil.rmtree(child, ignore_errors=True)
            raise
        print(f"formatted a new cluster in {root}: a controller and {args.brokers} brokers, "
              f"{args.log_dirs} log dirs each")
    elif not node_dirs(root):
        raise UserError(f"{root} is neither empty nor a cluster made by kjbod cluster up")
    homes = node_dirs(root)
    if not homes or homes[0].name != CONTROLLER:
        raise UserError(f"{root} has no controller/server.properties")
    running = {home: pid for home in homes if (pid := node_pid(home)) is not None}
    missing = [home for home in homes if home not in running]
    if running:
        print(f"already running: {', '.join(f'{home.name} (pid {pid})' for home, pid in running.items())}")
    if not missing:
        print("nothing to start")
    elif not new and not running:
        print(f"starting the cluster in {root} again with its data (its own node count and log dirs; --brokers, "
              "--log-dirs and --set apply to new clusters)")
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
            if home.name == CONTROLLER:
                wait_listening(home, processes[home], deadline)
        for home in missing:
            wait_listening(home, processes[home], deadline)
    except BaseException:
        stop_nodes(root, only=set(processes))  # what this run started; the nodes that were running stay
        raise
    if processes:
        print(f"started: {', '.join(f'{home.name} (pid {process.pid})' for home, process in processes.items())}",
              flush=True)
    print(f"bootstrap.servers={','.join(f'{HOST}:{listen_port(h)}' for h in homes[1:])}", flush=True)
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
