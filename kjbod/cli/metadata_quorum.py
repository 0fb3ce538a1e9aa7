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

Not served: `--bootstrap-server` (asking a broker to forward DescribeQuorum), and add-controller /
remove-controller (KIP-853 dynamic membership: kjbod's quorum is the static `controller.quorum.voters`).
Exit codes: 0; 2 a usage error or no controller answered (one line, from kjbod.cli.main).
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
    p.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT[,HOST:PORT...]",
                   help="controller listeners to ask (any controller of the quorum)")
    actions = p.add_subparsers(dest="quorum_command", metavar="ACTION", required=True)
    d = actions.add_parser("describe", help="the quorum's status or its replication",
                           description="Print the quorum's status (--status) or each replica's progress "
                                       "(--replication).")
    which = d.add_mutually_exclusive_group(required=True)
    which.add_argument("--status", action="store_true", help="a short summary of the quorum")
    which.add_argument("--replication", action="store_true", help="each voter's and observer's progress")
    d.add_argument("--human-readable", action="store_true",
                   help="with --replication: the times as 'N ms ago'")
    d.set_defaults(func=run_describe)


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
    addresses = parse_addresses(args.bootstrap_controller)

    async def go() -> str:
        info, address = await describe_quorum(addresses)
        if args.replication:
            return render_replication(info, human_readable=args.human_readable)
        return render_status(info, await cluster_id(address))

    print(asyncio.run(go()))
    return 0
