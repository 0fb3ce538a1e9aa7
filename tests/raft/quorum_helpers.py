"""Voters of a KRaft quorum in this process for the tests: a RaftDriver (and optionally a QuorumController on it)
per voter, each with its own metadata log in a real directory, serving Kafka's quorum APIs on 127.0.0.1 through
the real codec (tests/handler_server.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from handler_server import HandlerServer

from kjbod.controller import QuorumController
from kjbod.controller.raft_driver import RaftDriver
from kjbod.net.backoff import ExponentialBackoff
from kjbod.protocol.generated.topic_record import TopicRecord
from kjbod.raft.quorum import RaftConfig
from kjbod.storage.metadata_log import MetadataLog, unframe_record
from kjbod.storage.records import iter_batches, iter_records

QUORUM_APIS = {1, 52, 53, 54, 55, 59}

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
# shorter than Kafka's defaults, the fetch timeout still well above the leader's 500 ms long poll
CONFIG = RaftConfig(election_timeout_ms=500, election_backoff_max_ms=300, fetch_timeout_ms=1500,
                    request_timeout_ms=1000, retry_backoff_ms=20)
FAST = {"backoff": ExponentialBackoff(0.01, 0.05)}


class Voter:
    def __init__(self, node_id: int, root: str, ports: dict[int, int], *, controller: Any = None,
                 segment_bytes: int | None = None, retention_bytes: int | None = None, dynamic: bool = False) -> None:
        self.segment_bytes = segment_bytes
        self.retention_bytes = retention_bytes
        self.dynamic = dynamic  # kraft.version 1: the voters come from the log (write_bootstrap first)
        self.node_id = node_id
        self.root = root
        self.ports = ports
        self.driver: RaftDriver | None = None
        self.mlog: MetadataLog | None = None
        self.make_controller = controller  # (node id) -> ControllerSettings and Policy, or None: the quorum only
        self.controller: QuorumController | None = None
        self.server = HandlerServer(self._handle, ports[node_id])

    async def _handle(self, api_key: int, version: int, request: Any, header: Any) -> Any:
        if self.driver is None:
            return None
        if api_key in QUORUM_APIS or self.controller is None:
            return await self.driver.handle_request(api_key, version, request, header)
        return await self.controller.handle_request(api_key, version, request, header)

    async def start(self) -> Voter:
        options = {} if self.segment_bytes is None else {"segment_bytes": self.segment_bytes}
        if self.retention_bytes is not None:
            options["retention_bytes"] = self.retention_bytes
        self.mlog = MetadataLog(self.root, node_id=self.node_id, writer=False, replicated=True, **options)
        records = self.mlog.load()
        voters = {v: ("127.0.0.1", p) for v, p in self.ports.items()}
        if self.dynamic:
            self.driver = RaftDriver(self.node_id, {}, self.mlog, CLUSTER, config=CONFIG, channel_options=FAST,
                                     dynamic=True, bootstrap=list(voters.values()),
                                     local_endpoint=voters[self.node_id])
        else:
            self.driver = RaftDriver(self.node_id, voters, self.mlog, CLUSTER, config=CONFIG, channel_options=FAST)
        if self.make_controller is not None:
            settings, policy = self.make_controller(self.node_id)
            self.controller = QuorumController(settings, self.mlog, policy)
            self.controller.attach_quorum(self.driver, records)
            self.controller.start()
        await self.server.start()
        await self.driver.start()
        return self

    async def stop(self) -> None:
        await self.server.stop()
        if self.controller is not None:
            await self.controller.stop()
            self.controller = None
        driver, self.driver = self.driver, None
        if driver is not None:
            await driver.stop()
        if self.mlog is not None:
            self.mlog.close()

    def records(self) -> list[str]:
        """The topic names of the committed TopicRecords in this voter's log, in order."""
        assert self.mlog is not None
        out = []
        offset = 0
        data = self.mlog.read(offset, 1 << 20) if self.mlog.high_watermark > 0 else b""
        for pos, header in iter_batches(memoryview(data)):
            if header.is_control:
                continue
            for rec in iter_records(memoryview(data)[pos:pos + header.size]):
                if rec.offset < self.mlog.high_watermark:
                    out.append(unframe_record(rec.value).name)
        return out


async def until(predicate, timeout: float = 30.0, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"not reached within {timeout}s: {what}")
        await asyncio.sleep(0.02)


def leader_of(voters: list[Voter]) -> Voter | None:
    live = [v for v in voters if v.driver is not None and v.driver.is_leader]
    return max(live, key=lambda v: v.driver.epoch) if live else None  # type: ignore[union-attr]


async def settled_leader(voters: list[Voter], timeout: float = 30.0) -> Voter:
    found: list[Voter] = []

    def settled() -> bool:
        leader = leader_of(voters)
        if leader is None or leader.driver is None or leader.driver.high_watermark == 0:
            return False
        others = [v for v in voters if v.driver is not None and v is not leader]
        if all(v.driver is not None and v.driver.leader_id == leader.node_id for v in others):
            found[:] = [leader]
            return True
        return False

    await until(settled, timeout, "one leader that every running voter follows")
    return found[0]


async def write(leader: Voter, *names: str) -> int:
    assert leader.driver is not None
    _base, end = await leader.driver.append([TopicRecord(name=n, topic_id=uuid.uuid4()) for n in names])
    assert await leader.driver.wait_committed(end, 10.0)
    return end




def write_bootstrap(root: str, voters: Any) -> None:
    """What `kjbod format --initial-controllers` leaves in a metadata dir: the bootstrap snapshot with `voters`
    (a kjbod.raft.voters.VoterSet)."""
    import os

    from kjbod.storage.metadata_snapshot import BOOTSTRAP_SNAPSHOT_ID, bootstrap_snapshot

    topic_dir = os.path.join(root, "__cluster_metadata-0")
    os.makedirs(topic_dir, exist_ok=True)
    with open(os.path.join(topic_dir, BOOTSTRAP_SNAPSHOT_ID.file_name), "wb") as f:
        f.write(bootstrap_snapshot(voters.to_record(), now_ms=1))
