"""`kjbod metadata-quorum describe --status|--replication`: what kafka-metadata-quorum.sh prints about the KRaft
controller quorum, from DescribeQuorum (and DescribeCluster for the cluster id) sent to a controller listener.

Strategy: `describe_quorum` asks the controllers of `--bootstrap-controller` (a comma-separated list, as Kafka's
tool takes) one after another until one answers; a controller that does not lead answers NOT_LEADER_OR_FOLLOWER
naming the leader, whose address it then gives in DescribeCluster (KIP-919: the controllers and the active one),
and the leader is asked next. The answer becomes a `QuorumInfo`, and
two pure functions render it as Kafka's tool does: `render_status` (ClusterId, LeaderId, LeaderEpoch,
HighWatermark, MaxFollowerLag, MaxFollowerLagTimeMs, CurrentVoters, CurrentObservers) and `render_replication`
(one row per replica: NodeId, DirectoryId, LogEndOffset, Lag, LastFetchTimestamp, LastCaughtUpTimestamp, Status
Leader/Follower/Observer, columns padded and tab-separated; `--human-readable` prints the times as "N ms ago").

`add-controller` (with `--command-config`, the new controller's own server.properties: its node.id, the
directory id in the meta.properties of its metadata log dir, and its controller listeners) and `remove-controller
--controller-id N --controller-directory-id UUID` send AddRaftVoter / RemoveRaftVoter (KIP-853) to the quorum's
leader, found as `describe` finds it, and print what kafka-metadata-quorum.sh prints ("Added controller 2 with
directory id ... and endpoints: CONTROLLER://host:port", "Removed KRaft controller 2 with directory id ...");
`--dry-run` prints it without sending.

Not served: `--bootstrap-server` (asking a broker to forward DescribeQuorum or a voter change).
Exit codes: 0; 2 a usage error, a refused change (the error's name and Kafka's message) or no controller answered
(one line, from kjbod.cli.main).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from kjbod.cli.main import UserError

METADATA_TOPIC = "__cluster_metadata"
ZERO_UUID_TEXT = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID as text
NOT_LEADER_OR_FOLLOWER = 6
TIMEOUT_S = 10.0


def add_subcommand(sub: Any) -> None:
    p = sub.add_parser("metadata-quorum", help="describe the KRaft controller quorum (kafka-metadata-quorum.sh)",
                       description="Describe the KRaft controller quorum, as kafka-metadata-quorum.sh does.")
    _connection_options(p, argparse.SUPPRESS)
    actions = p.add_subparsers(dest="quorum_command", metavar="ACTION", required=True)
    d = actions.add_parser("describe", help="the quorum's status or its replication",
                           description="Print the quorum's status (--status) or each replica's progress "
                                       "(--replication).")
    which = d.add_mutually_exclusive_group(required=True)
    which.add_argument("--status", action="store_true", help="a short summary of the quorum")
    which.add_argument("--replication", action="store_true", help="each voter's and observer's progress")
    d.add_argument("--human-readable", action="store_true",
                   help="with --replication: the times as 'N ms ago'")
    _connection_options(d, argparse.SUPPRESS)
    d.set_defaults(func=run_describe)
    a = actions.add_parser("add-controller", help="add a controller to the KRaft controller quorum",
                           description="Make the controller whose server.properties --command-config names (it "
                                       "must already run and follow the quorum as an observer) a voter.")
    a.add_argument("--dry-run", action="store_true", help="print what would be done, but do not do it")
    _connection_options(a, argparse.SUPPRESS)
    a.set_defaults(func=run_add_controller)
    r = actions.add_parser("remove-controller", help="remove a controller from the KRaft controller quorum",
                           description="Remove a voter from the KRaft controller quorum.")
    r.add_argument("--controller-id", "-i", type=int, required=True, help="the id of the controller to remove")
    r.add_argument("--controller-directory-id", "-d", required=True,
                   help="the directory id of the controller to remove")
    r.add_argument("--dry-run", action="store_true", help="print what would be done, but do not do it")
    _connection_options(r, argparse.SUPPRESS)
    r.set_defaults(func=run_remove_controller)


def _connection_options(parser: Any, default: Any) -> None:
    """--bootstrap-controller and --command-config, taken before the action (as Kafka's tool takes them) or after
    it (kept by whichever parser saw them: the defaults are suppressed)."""
    parser.add_argument("--bootstrap-controller", metavar="HOST:PORT[,HOST:PORT...]", default=default,
                        help="controller listeners to ask (any controller of the quorum)")
    parser.add_argument("--command-config", "-c", metavar="FILE", default=default,
                        help="with add-controller: the server.properties of the controller to add")


def _bootstrap(args: argparse.Namespace) -> list[tuple[str, int]]:
    text = getattr(args, "bootstrap_controller", None)
    if not text:
        raise UserError("the following arguments are required: --bootstrap-controller")
    return parse_addresses(text)


# ------------------------------------------------------------------------------------------------ the answer

@dataclass(frozen=True)
class Replica:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1
    directory_id: str = ZERO_UUID_TEXT


@dataclass(frozen=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[Replica]
    observers: list[Replica] = field(default_factory=list)
    endpoints: dict[int, list[str]] = field(default_factory=dict)  # voter id -> ["NAME://host:port", ...]


def parse_addresses(text: str) -> list[tuple[str, int]]:
    out = []
    for item in text.split(","):
        item = item.strip()
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UserError(f"--bootstrap-controller {text!r}: {item!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    return out


def _uuid_text(value: Any) -> str:
    import base64

    raw = getattr(value, "bytes", None)
    if not isinstance(raw, bytes):
        return ZERO_UUID_TEXT
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def quorum_info(response: Any) -> QuorumInfo | tuple[int, int, str]:
    """The leader's answer as a QuorumInfo, or (error code, leader id, message) when it is an error."""
    if response.error_code:
        return response.error_code, -1, response.error_message or ""
    parts = [p for t in response.topics if t.topic_name == METADATA_TOPIC for p in t.partitions
             if p.partition_index == 0]
    if not parts:
        return -1, -1, "the answer does not describe __cluster_metadata partition 0"
    p = parts[0]
    if p.error_code:
        return p.error_code, p.leader_id, p.error_message or ""

    def replica(r: Any) -> Replica:
        return Replica(r.replica_id, r.log_end_offset, r.last_fetch_timestamp, r.last_caught_up_timestamp,
                       _uuid_text(getattr(r, "replica_directory_id", None)))

    endpoints = {n.node_id: [f"{ln.name}://{ln.host}:{ln.port}" for ln in n.listeners]
                 for n in getattr(response, "nodes", [])}
    return QuorumInfo(p.leader_id, p.leader_epoch, p.high_watermark, [replica(r) for r in p.current_voters],
                      [replica(r) for r in p.observers], endpoints)


async def _ask(address: tuple[str, int], body: Any, api_key: int, timeout: float) -> Any:
    from kjbod.net.controller_channel import SocketControllerChannel

    # one plain connection attempt first: a controller that is down is reported at once, not retried until the
    # timeout as the channel does
    _reader, writer = await asyncio.wait_for(asyncio.open_connection(*address), timeout)
    writer.close()
    channel = SocketControllerChannel([address], client_id="kjbod-metadata-quorum")
    try:
        return await channel.send(body, api_key, timeout=timeout)
    finally:
        channel.close()


async def describe_quorum(addresses: list[tuple[str, int]], timeout: float = TIMEOUT_S
                          ) -> tuple[QuorumInfo, tuple[str, int]]:
    """The quorum leader's DescribeQuorum answer, and the address that gave it (see the module docstring)."""
    from kjbod.protocol.generated import DescribeQuorumRequest
    from kjbod.protocol.generated import describe_quorum_request as dq

    body = DescribeQuorumRequest(topics=[dq.TopicData(topic_name=METADATA_TOPIC,
                                                      partitions=[dq.PartitionData(partition_index=0)])])
    problems = []
    queue = list(addresses)
    asked: set[tuple[str, int]] = set()
    leader_hint: int | None = None
    while queue:
        address = queue.pop(0)
        if address in asked:
            continue
        asked.add(address)
        try:
            answer = quorum_info(await _ask(address, body, 55, timeout))
        except Exception as e:  # connection refused, timed out, not a controller listener
            problems.append(f"{address[0]}:{address[1]}: {e}")
            continue
        if isinstance(answer, QuorumInfo):
            return answer, address
        code, leader, message = answer
        if code == NOT_LEADER_OR_FOLLOWER and leader >= 0:
            leader_hint = leader
            where = (await controllers(address, timeout)).get(leader)
            if where is not None and where not in asked:
                queue.insert(0, where)
        problems.append(f"{address[0]}:{address[1]}: {_error_name(code)}" + (f" ({message})" if message else ""))
    hint = f"; the quorum's leader is node {leader_hint}: add its controller listener" if leader_hint else ""
    raise UserError(f"no controller in --bootstrap-controller described the quorum: {'; '.join(problems)}{hint}")


def _error_name(code: int) -> str:
    from kjbod.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


async def controllers(address: tuple[str, int], timeout: float = TIMEOUT_S) -> dict[int, tuple[str, int]]:
    """The controllers a controller lists in DescribeCluster (endpoint type 2), by node id; {} when it cannot."""
    from kjbod.protocol.generated import DescribeClusterRequest

    try:
        response = await _ask(address, DescribeClusterRequest(endpoint_type=2), 60, timeout)
    except Exception:
        return {}
    if response.error_code:
        return {}
    return {b.broker_id: (b.host, b.port) for b in response.brokers}


async def cluster_id(address: tuple[str, int], timeout: float = TIMEOUT_S) -> str:
    from kjbod.protocol.generated import DescribeClusterRequest

    try:
        response = await _ask(address, DescribeClusterRequest(endpoint_type=2), 60, timeout)
    except Exception:
        return ""
    return str(response.cluster_id or "")


# ------------------------------------------------------------------------------------------------ rendering

def _leader(info: QuorumInfo) -> Replica:
    for r in info.voters:
        if r.replica_id == info.leader_id:
            return r
    raise UserError(f"the quorum's answer has no voter for its leader {info.leader_id}")


def _node_text(info: QuorumInfo, r: Replica) -> str:
    directory = "null" if r.directory_id == ZERO_UUID_TEXT else f'"{r.directory_id}"'
    text = f'{{"id": {r.replica_id}, "directoryId": {directory}'
    endpoints = info.endpoints.get(r.replica_id) or []
    if endpoints:
        text += ', "endpoints": [' + ", ".join(f'"{e}"' for e in endpoints) + "]"
    return text + "}"


def render_status(info: QuorumInfo, cluster: str) -> str:
    leader = _leader(info)
    laggard = min(info.voters, key=lambda r: r.log_end_offset)
    lag = leader.log_end_offset - laggard.log_end_offset
    if laggard is leader or laggard.log_end_offset == leader.log_end_offset:
        lag_ms = 0
    elif leader.last_caught_up_timestamp >= 0 and laggard.last_caught_up_timestamp >= 0:
        lag_ms = leader.last_caught_up_timestamp - laggard.last_caught_up_timestamp
    else:
        lag_ms = -1
    rows = [("ClusterId", cluster), ("LeaderId", info.leader_id), ("LeaderEpoch", info.leader_epoch),
            ("HighWatermark", info.high_watermark), ("MaxFollowerLag", lag), ("MaxFollowerLagTimeMs", lag_ms),
            ("CurrentVoters", "[" + ", ".join(_node_text(info, r) for r in info.voters) + "]"),
            ("CurrentObservers", "[" + ", ".join(_node_text(info, r) for r in info.observers) + "]")]
    return "\n".join(f"{name + ':':<24}{value}" for name, value in rows)


def render_replication(info: QuorumInfo, *, human_readable: bool = False, now_ms: int | None = None) -> str:
    leader = _leader(info)
    now = int(time.time() * 1000) if now_ms is None else now_ms

    def when(ts: int) -> str:
        if ts < 0:
            return "-1"
        return f"{max(0, now - ts)} ms ago" if human_readable else str(ts)

    def rows(replicas: list[Replica], status: str) -> list[list[str]]:
        return [[str(r.replica_id), r.directory_id, str(r.log_end_offset),
                 str(leader.log_end_offset - r.log_end_offset), when(r.last_fetch_timestamp),
                 when(r.last_caught_up_timestamp), status] for r in replicas]

    table = [["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp",
              "Status"]]
    table += rows([leader], "Leader")
    table += rows([r for r in info.voters if r.replica_id != info.leader_id], "Follower")
    table += rows(info.observers, "Observer")
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("".join(f"{cell:<{w}}\t" for cell, w in zip(row, widths, strict=True)) for row in table)


# ------------------------------------------------------------------------------------------------ command

def run_describe(args: argparse.Namespace) -> int:
    if args.human_readable and not args.replication:
        raise UserError("the option --human-readable is only supported along with --replication")
    addresses = _bootstrap(args)

    async def go() -> str:
        info, address = await describe_quorum(addresses)
        if args.replication:
            return render_replication(info, human_readable=args.human_readable)
        return render_status(info, await cluster_id(address))

    print(asyncio.run(go()))
    return 0


# ------------------------------------------------------------------------------------------------ voter changes

def _controller_properties(path: str) -> dict[str, str]:
    import os

    from kjbod.storage.meta import parse_properties

    if not os.path.isfile(path):
        raise UserError(f"Properties file {path} does not exists!")
    with open(path, encoding="utf-8") as f:
        return parse_properties(f.read())


def controller_to_add(props: dict[str, str]) -> tuple[int, str, list[tuple[str, str, int]]]:
    """(node id, metadata dir's directory id, controller endpoints) of the controller a server.properties
    describes, with kafka-metadata-quorum.sh's checks and messages."""
    from kjbod.storage.fsio import LogDirIO
    from kjbod.storage.meta import read_meta_properties

    if "node.id" not in props:
        raise UserError("node.id not found in configuration file. Is this a valid controller configuration file?")
    try:
        node_id = int(props["node.id"])
    except ValueError:
        raise UserError(f"node.id {props['node.id']!r} is not a number in configuration file") from None
    if node_id < 0:
        raise UserError("node.id was negative in configuration file. Is this a valid controller configuration file?")
    if "controller" not in props.get("process.roles", ""):
        raise UserError("process.roles did not contain 'controller' in configuration file. Is this a valid "
                        "controller configuration file?")
    directory = props.get("metadata.log.dir") or (props.get("log.dirs") or props.get("log.dir") or "").split(",")[0]
    if not directory.strip():
        raise UserError("Neither metadata.log.dir nor log.dirs were found. Is this a valid controller "
                        "configuration file?")
    try:
        meta = read_meta_properties(LogDirIO(directory.strip()))
    except Exception as e:  # unreadable: the tool's own message
        raise UserError(f"Unable to read meta.properties from {directory.strip()}: {e}") from None
    if meta is None:
        raise UserError(f"Unable to read meta.properties from {directory.strip()}")
    if not meta.directory_id:
        raise UserError(f"No directory id found in {directory.strip()}")
    listeners: dict[str, tuple[str, int]] = {}
    for key in ("listeners", "advertised.listeners"):
        for item in (props.get(key) or "").split(","):
            name, sep, rest = item.strip().partition("://")
            host, _, port = rest.rpartition(":")
            if sep and port.isdigit():
                listeners[name.strip().upper()] = (host.strip("[]") or "localhost", int(port))
    if "controller.listener.names" not in props:
        raise UserError("controller.listener.names was not found. Is this a valid controller configuration file?")
    endpoints = []
    for name in props["controller.listener.names"].split(","):
        name = name.strip().upper()
        if name not in listeners:
            raise UserError(f"Cannot find information about controller listener name: {name}")
        endpoints.append((name, *listeners[name]))
    return node_id, meta.directory_id, endpoints


def _endpoint_text(endpoints: list[tuple[str, str, int]]) -> str:
    return ", ".join(f"{n}://[{h}]:{p}" if ":" in h else f"{n}://{h}:{p}" for n, h, p in endpoints)


async def _to_leader(addresses: list[tuple[str, int]], body: Any, api_key: int, timeout: float) -> Any:
    """`body` sent to the quorum's leader (found with DescribeQuorum); asked again once if the leader moved."""
    for attempt in range(2):
        _info, address = await describe_quorum(addresses)
        response = await _ask(address, body, api_key, timeout)
        if response.error_code != NOT_LEADER_OR_FOLLOWER or attempt == 1:
            return response
    raise AssertionError("not reached")


def _refusal(response: Any) -> str | None:
    if not response.error_code:
        return None
    message = getattr(response, "error_message", None)
    return _error_name(response.error_code) + (f": {message}" if message else "")


def run_add_controller(args: argparse.Namespace) -> int:
    from kjbod.raft.voters import parse_uuid

    if not getattr(args, "command_config", None):
        raise UserError("You must supply the configuration file of the controller you are adding when using "
                        "add-controller.")
    node_id, directory_id, endpoints = controller_to_add(_controller_properties(args.command_config))
    addresses = _bootstrap(args)
    if not args.dry_run:
        from kjbod.protocol.generated import AddRaftVoterRequest
        from kjbod.protocol.generated import add_raft_voter_request as arv

        # as kafka-metadata-quorum.sh (the Admin client): the highest version both sides serve, answered once the
        # new voter set is committed (AckWhenCommitted true, v1's default)
        body = AddRaftVoterRequest(cluster_id=None, timeout_ms=int(TIMEOUT_S * 1000), voter_id=node_id,
                                   voter_directory_id=parse_uuid(directory_id),
                                   listeners=[arv.Listener(name=n, host=h, port=p) for n, h, p in endpoints],
                                   ack_when_committed=True)
        response = asyncio.run(_to_leader(addresses, body, 80, TIMEOUT_S * 2))
        refused = _refusal(response)
        if refused is not None:
            raise UserError(f"could not add controller {node_id}: {refused}")
    print(f"{'DRY RUN of adding' if args.dry_run else 'Added'} controller {node_id} with directory id "
          f"{directory_id} and endpoints: {_endpoint_text(endpoints)}")
    return 0


def run_remove_controller(args: argparse.Namespace) -> int:
    from kjbod.raft.voters import parse_uuid

    if args.controller_id < 0:
        raise UserError(f"Invalid negative --controller-id: {args.controller_id}")
    try:
        directory = parse_uuid(args.controller_directory_id)
    except ValueError as e:
        raise UserError(f"Failed to parse --controller-directory-id: {e}") from None
    addresses = _bootstrap(args)
    if not args.dry_run:
        from kjbod.protocol.generated import RemoveRaftVoterRequest

        body = RemoveRaftVoterRequest(cluster_id=None, voter_id=args.controller_id, voter_directory_id=directory)
        response = asyncio.run(_to_leader(addresses, body, 81, TIMEOUT_S * 2))
        refused = _refusal(response)
        if refused is not None:
            raise UserError(f"could not remove controller {args.controller_id}: {refused}")
    print(f"{'DRY RUN of removing ' if args.dry_run else 'Removed '} KRaft controller {args.controller_id} with "
          f"directory id {args.controller_directory_id}")
    return 0
