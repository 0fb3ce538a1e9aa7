"""The asyncio shell around the KRaft state machine (kjbod.raft.quorum): one voter of the metadata log's quorum.

Strategy: `RaftDriver` owns a `RaftQuorum`, the voter's MetadataLog (opened `replicated=True`) and its quorum-state
file, and does what the machine asks, in order, under one lock: `Persist` writes the quorum-state file, `Truncate`
cuts the log, `BecomeLeader` appends the LeaderChangeMessage, `HighWatermark` commits the log up to there (the
MetadataLog's commit listeners hear of it), `Send` hands a request to a task that talks to that voter. Every file
operation runs on one worker thread of the metadata dir, never on the event loop. A request from another voter
(`handle_request`: Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch with a replica id, DescribeQuorum) is answered
only after the effects its handling produced are done, so a vote is durable before the candidate hears of it.

Vote goes out at the highest version both sides serve; a pre-vote (KIP-996) needs v2, so toward a voter that serves
only v0-1 it is not sent and the machine hears UNSUPPORTED_VERSION (`handle_vote_unsupported`), as Kafka's network
client reports a version mismatch.

One task drives the clock: it polls the machine, performs the effects and sleeps until the machine's next
deadline or until something wakes it (a response, a request, an append). Voters are reached over their
controller listeners (`controller.quorum.voters`), one SocketControllerChannel each; a request that fails or times
out is reported to the machine, which backs off.

A leader's Fetch answer holds the records from the fetch offset to the log end, committed or not, as Kafka's
KafkaRaftClient sends to voters; with nothing new it waits up to MaxWaitMs for an append or a new high watermark.

The controller above uses `append` (leader only: the records of one write, fsynced; returns its offsets),
`wait_committed`, `add_leader_listener` (the known leader changed) and `resign` (graceful shutdown).

A follower told to fetch the leader's snapshot sends FetchSnapshot for it chunk by chunk (at most
MAX_FETCH_BYTES each), keeps the chunks in memory, and installs the whole snapshot in one step: the metadata log
checks it, writes it as `<end offset>-<epoch>.checkpoint` (temporary file, fsync, rename) and empties the log to
start at its end; the snapshot listeners (the controller) then load its records as their image. A snapshot that
does not read back whole is dropped and asked for again. The leader answers FetchSnapshot from the metadata log's
snapshot files (kjbod.controller.metadata_fetch), and counts a voter fetching one as fetching (check-quorum).

Dynamic voters (KIP-853, kraft.version 1, `dynamic=True`): the voters and their endpoints are the metadata
log's latest VotersRecord, read again after every append, truncation and snapshot install (the state machine
hears of a change through `set_voters`); a voter's channel is opened when it is first needed. A controller that
is not a voter is an observer: it fetches from the leader, found through `bootstrap` (controller.quorum.
bootstrap.servers; Fetch answers name the leader and, from v17, its endpoint). The first leader of a log whose
voter set is only in the bootstrap snapshot writes it into the log, in the LeaderChangeMessage's batch
(KRaftVersionRecord and VotersRecord after it, as Kafka's leader does), so every replica fetches it.

Brokers follow the metadata log through kjbod.controller.metadata_fetch, as do controllers that observe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog

from kjbod.controller.metadata_fetch import MetadataFetchService, hw_behind
from kjbod.net.controller_channel import SocketControllerChannel
from kjbod.net.correlator import PerVersion
from kjbod.net.errors import ClientError, UnsupportedVersionError
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ApiVersionsRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    KRaftVersionRecord,
    VoteRequest,
)
from kjbod.protocol.generated import describe_quorum_response as dqr
from kjbod.protocol.generated import fetch_response as fr
from kjbod.protocol.generated import fetch_snapshot_request as fsq
from kjbod.protocol.generated.fetch_request import FetchPartition, FetchTopic, ReplicaState
from kjbod.raft import messages
from kjbod.raft import quorum as rq
from kjbod.raft.log_view import MetadataLogView
from kjbod.raft.voters import VoterSet, uuid_text
from kjbod.storage.errors import OffsetOutOfRangeError
from kjbod.storage.metadata_log import TOPIC, MetadataLog
from kjbod.storage.metadata_records import KRAFT_VERSION, KRAFT_VOTERS, LEADER_CHANGE
from kjbod.storage.metadata_snapshot import SnapshotFormatError, SnapshotId
from kjbod.storage.quorum_state import QuorumStateStore

log = structlog.get_logger("kjbod.raft")

VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH, FETCH_SNAPSHOT = 52, 53, 54, 55, 1, 59
METADATA_TOPIC_ID_INT = 1  # Kafka's Uuid.METADATA_TOPIC_ID
MAX_FETCH_WAIT_MS = 500  # Kafka's KafkaRaftClient.MAX_FETCH_WAIT_MS
MAX_FETCH_BYTES = 8 << 20
OBSERVER_SESSION_TIMEOUT_MS = 300_000  # Kafka's LeaderState: an observer not heard from this long is forgotten
LeaderListener = Callable[[int, int, bool], None]  # (epoch, leader id or -1, this node leads)
SnapshotListener = Callable[[list[Any], int], None]  # (the snapshot's records, its end offset)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _PendingChange:
    """A voter change the leader is carrying out (one at a time, KIP-853)."""

    kind: str  # "add" | "remove" | "update"
    deadline_ms: int
    future: asyncio.Future[tuple[int, str | None]]
    offset: int | None = None  # of its VotersRecord, once appended
    voter_id: int = -1


class RaftDriver:
    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], mlog: MetadataLog, cluster_id: str, *,
                 config: rq.RaftConfig | None = None, channel_options: dict[str, Any] | None = None,
                 clock: Callable[[], int] = _monotonic_ms, rng: Any = None,
                 on_fatal: Callable[[BaseException], None] | None = None, listener_name: str = "CONTROLLER",
                 dynamic: bool = False, bootstrap: list[tuple[str, int]] | None = None,
                 local_endpoint: tuple[str, int] | None = None) -> None:
        if not mlog.is_open or mlog.io is None:
            raise RuntimeError("the metadata log must be loaded before the quorum starts")
        self.node_id = node_id
        self.dynamic = dynamic
        self.voter_set: VoterSet | None = None  # kraft.version 1: the log's voters (ids, directory ids, endpoints)
        if dynamic:
            record = mlog.voters
            self.voter_set = VoterSet.from_record(record) if record is not None else VoterSet()
            voters = self.voter_set.addresses(listener_name)
        self.voters = dict(voters)
        self.bootstrap = list(bootstrap or [])
        self._learned: dict[int, tuple[str, int]] = {}  # leaders' endpoints named in Fetch answers (observers)
        self.mlog = mlog
        self.cluster_id = cluster_id
        self.listener_name = listener_name  # the voters' controller listener, as DescribeQuorum v2 names it
        self.config = config or rq.RaftConfig()
        self.clock = clock
        self.store = QuorumStateStore(mlog.io, mlog.dir)
        self._io = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kjbod-raft-io")
        self.quorum = rq.RaftQuorum(node_id, tuple(voters), MetadataLogView(mlog), stored=self.store.read(),
                                    now_ms=clock(), config=self.config, rng=rng, dynamic=dynamic,
                                    bootstrap=tuple(-1000 - i for i in range(len(self.bootstrap))))
        options: dict[str, Any] = {"request_timeout": self.config.request_timeout_ms / 1000,
                                   "client_id": f"raft-{node_id}"}
        options.update(channel_options or {})
        self._channel_options = options
        self.channels: dict[int, SocketControllerChannel] = {}
        self._channel_addresses: dict[int, tuple[str, int]] = {}
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._progress_waiters: set[asyncio.Future[None]] = set()  # woken on every append or commit
        self._leader_listeners: list[LeaderListener] = []
        self._voters_listeners: list[Callable[[dict[int, tuple[str, int]]], None]] = []
        self._snapshot_listeners: list[SnapshotListener] = []
        self._snapshot_chunks: list[bytes] = []  # what was fetched so far of quorum.fetching_snapshot
        self._observers: dict[int, tuple[int, int]] = {}  # broker id -> (fetch offset, when), while leading
        self._caught_up: dict[int, int] = {}  # observer -> when it last fetched from the high watermark or above
        self._pending: _PendingChange | None = None  # the voter change in progress (leader only)
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._snapshots = MetadataFetchService(mlog, cluster_id=cluster_id, node_id=node_id,
                                               endpoint=voters.get(node_id) or local_endpoint, leadership=self,
                                               endpoints=voters)
        self._sends: set[asyncio.Task[None]] = set()
        self._stopped = False
        self.leader_epoch_start: int | None = None  # where this node's epoch began, while it leads
        # A failure the quorum cannot go on after (the quorum-state file or the log could not be written): the
        # driver stops acting and tells the node, which shuts down (Kafka's raft client fails the process too).
        self.on_fatal = on_fatal
        self.failed: BaseException | None = None

    # ------------------------------------------------------------------------------------------ reading

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int:
        return self.quorum.leader_id

    @property
    def is_leader(self) -> bool:
        return self.quorum.is_leader

    @property
    def high_watermark(self) -> int:
        return self.mlog.high_watermark

    @property
    def directory_ids(self) -> dict[int, UUID]:
        """The voters' metadata dir ids (kraft.version 1; empty for a static quorum)."""
        return self.voter_set.directory_ids() if self.voter_set is not None else {}

    def _address(self, dest: int) -> tuple[str, int] | None:
        if dest <= -1000:
            i = -1000 - dest
            return self.bootstrap[i] if i < len(self.bootstrap) else None
        return self.voters.get(dest) or self._learned.get(dest)

    def _channel(self, dest: int) -> SocketControllerChannel | None:
        """The channel to a voter, a learned leader or a bootstrap server (opened again if its address moved)."""
        addr = self._address(dest)
        if addr is None:
            return None
        ch = self.channels.get(dest)
        if ch is not None and self._channel_addresses.get(dest) == addr:
            return ch
        if ch is not None:
            ch.close()
        ch = SocketControllerChannel([addr], **self._channel_options)
        self.channels[dest], self._channel_addresses[dest] = ch, addr
        return ch

    def _refresh_voters(self) -> None:
        """kraft.version 1: take the log's voter set again after it may have changed (the caller holds the lock)."""
        if not self.dynamic:
            return
        record = self.mlog.voters
        voter_set = VoterSet.from_record(record) if record is not None else VoterSet()
        if voter_set == self.voter_set:
            return
        self.voter_set = voter_set
        self.voters = voter_set.addresses(self.listener_name)
        self._snapshots.endpoints = dict(self.voters)
        log.info("raft_voters_changed", node=self.node_id, voters=sorted(voter_set))
        self.quorum.set_voters(tuple(voter_set), self.clock())
        for fn in list(self._voters_listeners):
            fn(dict(self.voters))

    def add_voters_listener(self, fn: Callable[[dict[int, tuple[str, int]]], None]) -> None:
        """`fn(addresses)` after the voter set changed (kraft.version 1): {voter id: (host, port)}."""
        self._voters_listeners.append(fn)

    def add_leader_listener(self, fn: LeaderListener) -> None:
        self._leader_listeners.append(fn)

    def add_snapshot_listener(self, fn: SnapshotListener) -> None:
        """`fn(records, end_offset)` after this voter installed a snapshot fetched from the leader."""
        self._snapshot_listeners.append(fn)

    def observer_fetched(self, replica_id: int, fetch_offset: int) -> None:
        """Leader: a broker (an observer of the quorum) fetched the metadata log from `fetch_offset`; DescribeQuorum
        lists it among the observers."""
        if replica_id >= 0 and replica_id not in self.voters and self.quorum.is_leader:
            now = self.clock()
            self._observers[replica_id] = (fetch_offset, now)
            if fetch_offset >= self.mlog.high_watermark:
                self._caught_up[replica_id] = now  # what AddRaftVoter asks of a new voter

    def _live_observers(self) -> dict[int, tuple[int, int]]:
        now = self.clock()
        self._observers = {r: p for r, p in self._observers.items() if now - p[1] < OBSERVER_SESSION_TIMEOUT_MS}
        return self._observers

    def snapshot_fetched(self, replica_id: int) -> None:
        """Leader: a FetchSnapshot from `replica_id` is being answered (it counts for check-quorum). Called from
        the file worker, so the note is made on the event loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.quorum.note_snapshot_fetch, replica_id, self.clock())

    async def fetch_snapshot(self, body: FetchSnapshotRequest, version: int) -> FetchSnapshotResponse:
        """A chunk of one of this voter's snapshots (Kafka's FetchSnapshot rules, kjbod.controller.metadata_fetch),
        read on the file worker."""
        answer: FetchSnapshotResponse = await self._on_worker(self._snapshots.fetch_snapshot, body, version)
        return answer

    # ---------------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        async with self._lock:
            await self._perform()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"kjbod-raft-{self.node_id}")

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self._notify_progress()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for t in list(self._sends):
            t.cancel()
        for t in list(self._sends):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for ch in self.channels.values():
            ch.close()
        self._snapshots.close()
        self._io.shutdown(wait=True)

    async def resign(self, timeout: float = 5.0) -> None:
        """Graceful shutdown: a leader hands over with EndQuorumEpoch and waits (up to `timeout`) until every
        other voter heard it; no election is started by this node afterwards."""
        async with self._lock:
            self.quorum.resign(self.clock())
            await self._perform()
        self._wake.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.quorum.shutdown_complete and loop.time() < deadline:
            await asyncio.sleep(0.02)

    async def _run(self) -> None:
        try:
            while not self._stopped:
                self._wake.clear()
                async with self._lock:
                    wait_ms = self.quorum.poll(self.clock())
                    await self._perform()
                if wait_ms <= 0:
                    await asyncio.sleep(0)
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(wait_ms, 1000) / 1000)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._fail(e)

    def _fail(self, e: BaseException) -> None:
        if self.failed is not None:
            return
        self.failed = e
        self._stopped = True
        log.error("raft_failed", node=self.node_id, error=str(e), exc_info=e)
        if self.on_fatal is not None:
            self.on_fatal(e)

    # ----------------------------------------------------------------------------------------- effects

    async def _on_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def run_on_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a file operation on the metadata dir's worker (the thread every quorum file operation uses)."""
        return await self._on_worker(fn, *args)

    async def _perform(self) -> None:
        """Carry out the machine's effects in order (the caller holds the lock)."""
        while effects := self.quorum.take_effects():
            for e in effects:
                if isinstance(e, rq.Persist):
                    await self._on_worker(self.store.write, e.election)
                elif isinstance(e, rq.Send):
                    task = asyncio.get_running_loop().create_task(self._send(e))
                    self._sends.add(task)
                    task.add_done_callback(self._sends.discard)
                elif isinstance(e, rq.Truncate):
                    await self._on_worker(self.mlog.truncate_to, e.offset)
                    self._refresh_voters()
                elif isinstance(e, rq.BecomeLeader):
                    self.leader_epoch_start = e.epoch_start_offset
                    end = await self._on_worker(self._append_start_of_epoch, e.message, e.epoch)
                    self.quorum.leader_flushed(end, self.clock())
                    self._notify_progress()
                elif isinstance(e, rq.HighWatermark):
                    self.mlog.advance_high_watermark(e.offset)
                    self._notify_progress()
                    self._change_committed(e.offset)
                elif isinstance(e, rq.LeaderChanged):
                    self.leader_epoch_start = None
                    self._observers = {}
                    self._caught_up = {}
                    self._finish_change(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the leader changed before the voter change "
                                                                          "was committed")
                    log.info("raft_leader_changed", node=self.node_id, epoch=e.epoch, leader=e.leader_id,
                             local=e.local)
                    for fn in list(self._leader_listeners):
                        try:
                            fn(e.epoch, e.leader_id, e.local)
                        except Exception:
                            log.exception("raft_leader_listener_failed")

    def _append_start_of_epoch(self, message: Any, epoch: int) -> int:
        """On the file worker: the leader's first batch of `epoch`; with kraft.version 1 and a voter set that is
        only in the bootstrap snapshot, the KRaftVersionRecord and VotersRecord go into the same batch."""
        changes = self.mlog.kraft_changes
        voters_at = [o for o, m in changes if not isinstance(m, KRaftVersionRecord)]
        if self.dynamic and self.mlog.kraft_version > 0 and voters_at and voters_at[-1] < 0:
            voters = self.mlog.voters
            assert voters is not None
            self.mlog.append_control_as_leader([
                (LEADER_CHANGE, message),
                (KRAFT_VERSION, KRaftVersionRecord(version=0, k_raft_version=self.mlog.kraft_version)),
                (KRAFT_VOTERS, voters)], epoch)
            return int(self.mlog.next_offset)
        return int(self.mlog.append_leader_change(message, epoch))

    # ----------------------------------------------------------------------------- voter changes (KIP-853)

    def _finish_change(self, error: int, message: str | None) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and not pending.future.done():
            pending.future.set_result((int(error), message))

    def _change_committed(self, high_watermark: int) -> None:
        """The leader's high watermark moved: a pending change whose VotersRecord it passed is done; a leader that
        removed itself steps down then (Kafka's RemoveVoterHandler)."""
        pending = self._pending
        if pending is None or pending.offset is None or high_watermark <= pending.offset:
            return
        self._finish_change(ErrorCode.NONE, None)
        if pending.kind == "remove" and self.quorum.is_leader and not self.quorum.is_voter:
            log.info("raft_leader_removed_resigns", node=self.node_id, epoch=self.epoch)
            self.quorum.step_down(self.clock())

    def _change_refused(self, what: str) -> tuple[int, str | None] | None:
        """Kafka's checks before any voter change, in its order (the caller holds the lock)."""
        q, now = self.quorum, self.clock()
        if not q.is_leader or q.shutting_down:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        pending = self._pending
        if pending is not None and now >= pending.deadline_ms:
            self._finish_change(ErrorCode.REQUEST_TIMED_OUT, f"the {pending.kind} of voter {pending.voter_id} was "
                                                            "not committed in time")
            pending = None
        if pending is not None:
            return (ErrorCode.REQUEST_TIMED_OUT,
                    "Request timed out waiting for leader to handle previous voter change request")
        if q.high_watermark is None:
            return (ErrorCode.REQUEST_TIMED_OUT,
                    "Request timed out waiting for leader to establish HWM and fence previous voter changes")
        if self.mlog.kraft_version < 1:
            return (ErrorCode.UNSUPPORTED_VERSION,
                    f"Cluster doesn't support {what} voter because the kraft.version feature is "
                    f"{self.mlog.kraft_version}")
        at = [o for o, m in self.mlog.kraft_changes if not isinstance(m, KRaftVersionRecord)]
        if not at or at[-1] >= q.high_watermark:
            return (ErrorCode.REQUEST_TIMED_OUT,
                    f"Request timed out waiting for voters to commit the latest voter change at "
                    f"{at[-1] if at else None} with HWM {q.high_watermark}")
        return None

    async def _append_voters(self, voter_set: VoterSet, kind: str, voter_id: int, timeout_ms: int
                             ) -> asyncio.Future[tuple[int, str | None]]:
        """Append the new voter set (the caller holds the lock and checked `_change_refused`)."""
        fut: asyncio.Future[tuple[int, str | None]] = asyncio.get_running_loop().create_future()
        self._pending = _PendingChange(kind, self.clock() + timeout_ms, fut, voter_id=voter_id)
        offset = await self._on_worker(self.mlog.append_control_as_leader,
                                       [(KRAFT_VOTERS, voter_set.to_record())], self.quorum.epoch)
        self._pending.offset = offset
        log.info("raft_voters_appended", node=self.node_id, change=kind, voter=voter_id, offset=offset,
                 voters=sorted(voter_set))
        self._refresh_voters()
        self.quorum.leader_flushed(self.mlog.next_offset, self.clock())
        await self._perform()
        self._notify_progress()
        self._wake.set()
        return fut

    async def _await_change(self, fut: asyncio.Future[tuple[int, str | None]], timeout_ms: int
                            ) -> tuple[int, str | None]:
        try:
            return await asyncio.wait_for(asyncio.shield(fut), max(0.001, timeout_ms / 1000))
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT, "the new voter set was not committed in time"

    async def add_voter(self, voter_id: int, directory_id: UUID, endpoints: tuple[tuple[str, str, int], ...],
                        timeout_ms: int, ack_when_committed: bool = True) -> tuple[int, str | None]:
        """AddRaftVoter (Kafka's AddVoterHandler): (error code, message), NONE once the new set is committed, or
        (v1's AckWhenCommitted false) once it is appended to the leader's log; the change stays pending until it
        commits either way, so the next one waits for it."""
        async with self._lock:
            if not self.quorum.is_leader or self.quorum.shutting_down:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
            if voter_id < 0 or directory_id == UUID(int=0):
                return ErrorCode.INVALID_REQUEST, "Add voter request didn't include a valid voter"
            address = next(((h, p) for n, h, p in endpoints if n == self.listener_name), None)
            if address is None:
                return (ErrorCode.INVALID_REQUEST,
                        f"Add voter request didn't include the endpoint ({', '.join(n for n, _h, _p in endpoints)}) "
                        f"for the default listener {self.listener_name}")
            refused = self._change_refused("adding")
            if refused is not None:
                return refused
            current = self.voter_set or VoterSet()
            if voter_id in current:
                return (ErrorCode.DUPLICATE_VOTER,
                        f"The voter id for {voter_id} is already part of the set of voters {sorted(current)}.")
        # ask the new voter which kraft.version levels it runs (outside the lock: it is a network round trip)
        supported = await self._kraft_versions_of(address)
        async with self._lock:
            refused = self._change_refused("adding")
            if refused is not None:
                return refused
            if supported is None:
                return (ErrorCode.REQUEST_TIMED_OUT,
                        f"Aborted add voter operation for {voter_id} since API_VERSIONS returned an error")
            level = self.mlog.kraft_version
            if not supported[0] <= level <= supported[1]:
                return (ErrorCode.INVALID_REQUEST,
                        f"Aborted add voter operation for {voter_id} since the kraft.version range (min: "
                        f"{supported[0]}, max: {supported[1]}) doesn't support the finalized version {level}")
            if voter_id not in self._caught_up:
                return (ErrorCode.REQUEST_TIMED_OUT,
                        f"Aborted add voter operation for {voter_id} since it is lagging behind")
            current = self.voter_set or VoterSet()
            if voter_id in current:
                return (ErrorCode.DUPLICATE_VOTER,
                        f"The voter id for {voter_id} is already part of the set of voters {sorted(current)}.")
            from kjbod.raft.voters import VoterNode

            new = VoterSet.of([*current.nodes, VoterNode(voter_id, directory_id, endpoints, supported)])
            fut = await self._append_voters(new, "add", voter_id, timeout_ms)
            if not ack_when_committed and not fut.done():
                return ErrorCode.NONE, None
        return await self._await_change(fut, timeout_ms)

    async def remove_voter(self, voter_id: int, directory_id: UUID) -> tuple[int, str | None]:
        """RemoveRaftVoter (Kafka's RemoveVoterHandler): (error code, message), NONE once the smaller set is
        committed; a leader that removed itself then resigns."""
        timeout_ms = self.config.request_timeout_ms
        async with self._lock:
            if not self.quorum.is_leader or self.quorum.shutting_down:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
            if voter_id < 0 or directory_id == UUID(int=0):
                return ErrorCode.INVALID_REQUEST, "Remove voter request didn't include a valid voter"
            refused = self._change_refused("removing")
            if refused is not None:
                return refused
            current = self.voter_set or VoterSet()
            node = current.get(voter_id)
            if node is None or node.directory_id != directory_id or len(current) == 1:
                keys = ", ".join(f"{n.node_id}:{uuid_text(n.directory_id)}" for n in current.nodes)
                return (ErrorCode.VOTER_NOT_FOUND,
                        f"Cannot remove voter {voter_id}:{uuid_text(directory_id)} from the set of voters [{keys}]")
            new = VoterSet.of([n for n in current.nodes if n.node_id != voter_id])
            fut = await self._append_voters(new, "remove", voter_id, timeout_ms)
        return await self._await_change(fut, timeout_ms)

    async def update_voter(self, voter_id: int, directory_id: UUID, endpoints: tuple[tuple[str, str, int], ...],
                           supported: tuple[int, int]) -> tuple[int, str | None]:
        """UpdateRaftVoter: a voter's new endpoints or kraft.version range, written when they differ."""
        async with self._lock:
            if not self.quorum.is_leader or self.quorum.shutting_down:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
            if voter_id < 0 or directory_id == UUID(int=0):
                return ErrorCode.INVALID_REQUEST, "Update voter request didn't include a valid voter"
            if not any(n == self.listener_name for n, _h, _p in endpoints):
                return ErrorCode.INVALID_REQUEST, f"Update voter request didn't include the endpoint for the " \
                                                  f"default listener {self.listener_name}"
            refused = self._change_refused("updating")
            if refused is not None:
                return refused
            current = self.voter_set or VoterSet()
            node = current.get(voter_id)
            if node is None or node.directory_id != directory_id:
                return ErrorCode.VOTER_NOT_FOUND, f"Voter {voter_id} is not one of the voters {sorted(current)}"
            if not supported[0] <= self.mlog.kraft_version <= supported[1]:
                return ErrorCode.INVALID_REQUEST, "the voter does not run the finalized kraft.version"
            from kjbod.raft.voters import VoterNode

            updated = VoterNode(voter_id, directory_id, endpoints, supported)
            if updated == node:
                return ErrorCode.NONE, None
            new = VoterSet.of([updated if n.node_id == voter_id else n for n in current.nodes])
            await self._append_voters(new, "update", voter_id, self.config.request_timeout_ms)
        return ErrorCode.NONE, None  # Kafka answers an update once it is appended

    async def _kraft_versions_of(self, address: tuple[str, int]) -> tuple[int, int] | None:
        """The kraft.version range a controller at `address` advertises in ApiVersions (None: no answer)."""
        channel = SocketControllerChannel([address], **self._channel_options)
        try:
            resp = await channel.send(ApiVersionsRequest(client_software_name="kjbod-raft",
                                                         client_software_version="1"), 18, 3,
                                      timeout=self.config.request_timeout_ms / 1000)
        except (ClientError, OSError):
            return None
        finally:
            channel.close()
        if resp.error_code:
            return None
        for f in resp.supported_features:
            if f.name == "kraft.version":
                return int(f.min_version), int(f.max_version)
        return 0, 0

    # --------------------------------------------------------------------------------- outgoing requests

    def _wire(self, send: rq.Send) -> tuple[Any, int]:
        req = send.request
        if isinstance(req, rq.VoteRequest):
            return PerVersion(lambda v: self._vote_request(send.destination, req, v)), VOTE
        if isinstance(req, rq.BeginQuorumEpochRequest):
            return messages.begin_quorum_epoch_request(self.cluster_id, send.destination, req), BEGIN_QUORUM_EPOCH
        if isinstance(req, rq.EndQuorumEpochRequest):
            return PerVersion(lambda v: messages.end_quorum_epoch_request(self.cluster_id, req, v)), END_QUORUM_EPOCH
        if isinstance(req, rq.FetchSnapshotRequest):
            return PerVersion(lambda v: self._fetch_snapshot_request(req)), FETCH_SNAPSHOT
        return PerVersion(lambda v: self._fetch_request(req, v)), FETCH

    def _vote_request(self, dest: int, req: rq.VoteRequest, version: int) -> VoteRequest:
        if req.pre_vote and version < 2:
            # the voter runs a version before KIP-996 (Vote v0-1): a pre-vote cannot be asked of it
            raise UnsupportedVersionError(f"voter {dest} serves Vote up to v{version}; a pre-vote needs v2")
        return messages.vote_request(self.cluster_id, dest, req)

    def _fetch_snapshot_request(self, req: rq.FetchSnapshotRequest) -> FetchSnapshotRequest:
        end, epoch = req.snapshot
        return FetchSnapshotRequest(
            cluster_id=self.cluster_id, replica_id=req.replica_id, max_bytes=MAX_FETCH_BYTES, topics=[
                fsq.TopicSnapshot(name=TOPIC, partitions=[fsq.PartitionSnapshot(
                    partition=0, current_leader_epoch=req.current_leader_epoch,
                    snapshot_id=fsq.SnapshotId(end_offset=end, epoch=epoch), position=req.position)])])

    def _fetch_request(self, req: rq.FetchRequest, version: int) -> FetchRequest:
        part = FetchPartition(partition=0, current_leader_epoch=req.current_leader_epoch,
                              fetch_offset=req.fetch_offset, last_fetched_epoch=req.last_fetched_epoch,
                              log_start_offset=-1, partition_max_bytes=MAX_FETCH_BYTES)
        return FetchRequest(
            cluster_id=self.cluster_id, replica_id=req.replica_id if version < 15 else -1,
            replica_state=ReplicaState(replica_id=req.replica_id if version >= 15 else -1),
            max_wait_ms=MAX_FETCH_WAIT_MS, min_bytes=0, max_bytes=MAX_FETCH_BYTES,
            topics=[FetchTopic(topic=TOPIC, topic_id=UUID(int=METADATA_TOPIC_ID_INT), partitions=[part])])

    async def _send(self, send: rq.Send) -> None:
        dest, cid = send.destination, send.correlation_id
        wire, api_key = self._wire(send)
        timeout = self.config.request_timeout_ms / 1000
        if api_key == FETCH:
            timeout += MAX_FETCH_WAIT_MS / 1000
        try:
            channel = self._channel(dest)
            if channel is None:
                raise ClientError(ErrorCode.NETWORK_EXCEPTION, f"no address known for node {dest}")
            response = await channel.send(wire, api_key, timeout=timeout)
        except UnsupportedVersionError as e:
            log.info("raft_request_unsupported", node=self.node_id, to=dest, api_key=api_key, error=str(e))
            async with self._lock:
                if isinstance(send.request, rq.VoteRequest) and send.request.pre_vote:
                    self.quorum.handle_vote_unsupported(dest, cid, self.clock())
                else:
                    self.quorum.request_failed(dest, cid, self.clock())
                await self._perform()
            self._wake.set()
            return
        except (ClientError, OSError) as e:
            log.debug("raft_request_failed", node=self.node_id, to=dest, api_key=api_key, error=str(e))
            async with self._lock:
                self.quorum.request_failed(dest, cid, self.clock())
                await self._perform()
            self._wake.set()
            return
        try:
            async with self._lock:
                await self._handle_response(send, response)
                await self._perform()
        except rq.RaftError as e:
            log.error("raft_inconsistent_response", node=self.node_id, source=dest, error=str(e))
        except Exception as e:
            self._fail(e)
        self._wake.set()

    async def _handle_response(self, send: rq.Send, response: Any) -> None:
        q, now, dest, cid = self.quorum, self.clock(), send.destination, send.correlation_id
        if isinstance(send.request, rq.VoteRequest):
            vote = messages.parse_vote_response(response)
            if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
                q.handle_vote_unsupported(dest, cid, now)  # a prospective stands at once (Kafka)
            elif vote is None:
                q.request_failed(dest, cid, now)
            else:
                q.handle_vote_response(dest, cid, vote, now)
        elif isinstance(send.request, rq.FetchSnapshotRequest):
            await self._handle_fetch_snapshot_response(dest, cid, response)
        elif isinstance(send.request, (rq.BeginQuorumEpochRequest, rq.EndQuorumEpochRequest)):
            epoch_resp = messages.parse_epoch_response(response)
            if epoch_resp is None:
                q.request_failed(dest, cid, now)
            elif isinstance(send.request, rq.BeginQuorumEpochRequest):
                q.handle_begin_quorum_epoch_response(dest, cid, epoch_resp, now)
            else:
                q.handle_end_quorum_epoch_response(dest, cid, epoch_resp, now)
        else:
            await self._handle_fetch_response(dest, cid, response)

    async def _handle_fetch_response(self, dest: int, cid: int, response: FetchResponse) -> None:
        q, now = self.quorum, self.clock()
        if response.error_code or len(response.responses) != 1 or len(response.responses[0].partitions) != 1:
            q.request_failed(dest, cid, now)
            return
        pd = response.responses[0].partitions[0]
        diverging = None
        if pd.diverging_epoch.epoch >= 0:
            diverging = (pd.diverging_epoch.end_offset, pd.diverging_epoch.epoch)
        snapshot = None
        if pd.snapshot_id.end_offset >= 0 or pd.snapshot_id.epoch >= 0:
            snapshot = (pd.snapshot_id.end_offset, pd.snapshot_id.epoch)
        for ne in getattr(response, "node_endpoints", None) or ():
            if ne.node_id >= 0 and ne.node_id != self.node_id:
                self._learned[ne.node_id] = (ne.host, ne.port)  # where the leader is (an observer's only way)
        result = rq.FetchResult(pd.error_code, pd.current_leader.leader_id, pd.current_leader.leader_epoch,
                                pd.high_watermark, diverging, snapshot)
        outcome = q.handle_fetch_response(dest, cid, result, now)
        if outcome.action is rq.FetchAction.SNAPSHOT:
            self._snapshot_chunks = []
            log.info("raft_fetching_snapshot", node=self.node_id, leader=dest, snapshot=outcome.snapshot,
                     log_end_offset=self.mlog.next_offset)
        if outcome.action is rq.FetchAction.APPEND:
            records = bytes(pd.records or b"")
            if records:
                await self._on_worker(self.mlog.append_replicated, records)
                self._refresh_voters()
            q.follower_appended(outcome.high_watermark, self.clock())

    async def _handle_fetch_snapshot_response(self, dest: int, cid: int, response: FetchSnapshotResponse) -> None:
        q, now = self.quorum, self.clock()
        topics = response.topics
        if (response.error_code or len(topics) != 1 or topics[0].name != TOPIC or len(topics[0].partitions) != 1
                or topics[0].partitions[0].index != 0):
            q.request_failed(dest, cid, now)
            return
        ps = topics[0].partitions[0]
        chunk = bytes(ps.unaligned_records or b"")
        result = rq.FetchSnapshotResult(ps.error_code, ps.current_leader.leader_id, ps.current_leader.leader_epoch,
                                        (ps.snapshot_id.end_offset, ps.snapshot_id.epoch), ps.size, ps.position,
                                        len(chunk))
        outcome = q.handle_fetch_snapshot_response(dest, cid, result, now)
        if outcome.action is rq.FetchAction.RESTART:
            self._snapshot_chunks = []
            log.info("raft_snapshot_fetch_restarted", node=self.node_id, snapshot=outcome.snapshot,
                     error=ps.error_code)
        elif outcome.action is rq.FetchAction.CHUNK:
            self._snapshot_chunks.append(chunk)
        elif outcome.action is rq.FetchAction.INSTALL:
            assert outcome.snapshot is not None
            data = b"".join([*self._snapshot_chunks, chunk])
            self._snapshot_chunks = []
            end, epoch = outcome.snapshot
            try:
                records = await self._on_worker(self.mlog.install_snapshot, data, SnapshotId(end, epoch))
            except SnapshotFormatError as e:
                log.warning("raft_fetched_snapshot_refused", node=self.node_id, snapshot=outcome.snapshot,
                            error=str(e))
                q.snapshot_failed()
                return
            q.snapshot_installed(self.clock())
            self._refresh_voters()
            log.info("raft_snapshot_installed", node=self.node_id, snapshot=outcome.snapshot, records=len(records))
            for fn in list(self._snapshot_listeners):
                fn(records, end)
            self._notify_progress()

    # --------------------------------------------------------------------------------- incoming requests

    async def handle_request(self, api_key: int, version: int, request: Any, header: Any = None) -> Any:
        """The answer to a quorum request from another voter (or to DescribeQuorum)."""
        if api_key == FETCH:
            return await self.fetch(request, version)
        if api_key == FETCH_SNAPSHOT:
            return await self.fetch_snapshot(request, version)
        if api_key == DESCRIBE_QUORUM:
            assert isinstance(request, DescribeQuorumRequest)
            described = messages.describe_quorum_response(request, self.quorum, self.clock(), _wall_ms(),
                                                          observers=self._live_observers(),
                                                          directory_ids=self.directory_ids if version >= 2 else None)
            if version >= 2 and self.quorum.is_leader and not described.error_code:
                # v2: where each voter can be reached (the leader's answer only, as Kafka's)
                described.nodes = [dqr.Node(node_id=v, listeners=[dqr.Listener(name=self.listener_name, host=h,
                                                                               port=p)])
                                   for v, (h, p) in sorted(self.voters.items())]
            return described
        async with self._lock:
            now = self.clock()
            if api_key == VOTE:
                assert isinstance(request, VoteRequest)
                parsed = messages.parse_vote_request(request, self.cluster_id)
                if not isinstance(parsed, rq.VoteRequest):
                    return parsed
                answer: Any = messages.vote_response(self.quorum.handle_vote(parsed, now))
            elif api_key == BEGIN_QUORUM_EPOCH:
                assert isinstance(request, BeginQuorumEpochRequest)
                begin = messages.parse_begin_quorum_epoch_request(request, self.cluster_id)
                if not isinstance(begin, rq.BeginQuorumEpochRequest):
                    return begin
                answer = messages.epoch_response(self.quorum.handle_begin_quorum_epoch(begin, now),
                                                 BeginQuorumEpochResponse)
            elif api_key == END_QUORUM_EPOCH:
                assert isinstance(request, EndQuorumEpochRequest)
                end = messages.parse_end_quorum_epoch_request(request, self.cluster_id)
                if not isinstance(end, rq.EndQuorumEpochRequest):
                    return end
                answer = messages.epoch_response(self.quorum.handle_end_quorum_epoch(end, now),
                                                 EndQuorumEpochResponse)
            else:
                raise ValueError(f"api key {api_key} is not a quorum request")
            try:
                await self._perform()  # durable before the answer goes out
            except Exception as e:
                self._fail(e)
                raise
        self._wake.set()
        return answer

    async def fetch(self, body: FetchRequest, version: int) -> FetchResponse:
        """A voter's Fetch of the metadata log (Kafka's checks; a long poll of up to MaxWaitMs when there is
        nothing new)."""
        if body.cluster_id is not None and body.cluster_id != self.cluster_id:
            return FetchResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1 or body.topics[0].partitions[0].partition:
            return FetchResponse(error_code=ErrorCode.INVALID_REQUEST)
        part = body.topics[0].partitions[0]
        replica = body.replica_state.replica_id if version >= 15 else body.replica_id
        req = rq.FetchRequest(replica, part.current_leader_epoch, part.fetch_offset, part.last_fetched_epoch)
        if body.max_wait_ms < 0:
            return self._fetch_response(version, rq.FetchAnswer(ErrorCode.INVALID_REQUEST, self.leader_id,
                                                                 self.epoch))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(body.max_wait_ms, MAX_FETCH_WAIT_MS * 10) / 1000
        first_hw: int | None = None
        while True:
            progress = self._progress_future()
            async with self._lock:
                answer = self.quorum.handle_fetch(req, self.clock())
                await self._perform()
            records = b""
            if answer.read_from is not None:
                try:
                    records = await self._on_worker(self.mlog.read_uncommitted, answer.read_from,
                                                    max(1, min(part.partition_max_bytes, MAX_FETCH_BYTES)))
                except OffsetOutOfRangeError:
                    # a snapshot moved the log start past it meanwhile: the next answer names the snapshot
                    self._progress_waiters.discard(progress)
                    continue
            if first_hw is None:
                first_hw = answer.high_watermark
            if (answer.error_code or records or answer.diverging is not None or answer.snapshot is not None
                    or answer.high_watermark != first_hw or hw_behind(part, version, answer.high_watermark)
                    or self._stopped or loop.time() >= deadline):
                self._progress_waiters.discard(progress)
                return self._fetch_response(version, answer, records)
            # nothing new: wait for an append or a commit (a new high watermark goes out at once)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress, max(0.0, deadline - loop.time()))
            self._progress_waiters.discard(progress)

    def _progress_future(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._progress_waiters.add(fut)
        return fut

    def _notify_progress(self) -> None:
        waiters, self._progress_waiters = self._progress_waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _fetch_response(self, version: int, answer: rq.FetchAnswer, records: bytes = b"") -> FetchResponse:
        pd = fr.PartitionData(partition_index=0, error_code=answer.error_code, high_watermark=answer.high_watermark,
                              log_start_offset=self.mlog.log_start_offset, records=records)
        pd.current_leader = fr.LeaderIdAndEpoch(leader_id=answer.leader_id, leader_epoch=answer.leader_epoch)
        if answer.diverging is not None:
            pd.diverging_epoch = fr.EpochEndOffset(epoch=answer.diverging[1], end_offset=answer.diverging[0])
        if answer.snapshot is not None:
            pd.snapshot_id = fr.SnapshotId(end_offset=answer.snapshot[0], epoch=answer.snapshot[1])
        topic = (fr.FetchableTopicResponse(topic_id=UUID(int=METADATA_TOPIC_ID_INT), partitions=[pd])
                 if version >= 13 else fr.FetchableTopicResponse(topic=TOPIC, partitions=[pd]))
        return FetchResponse(responses=[topic])

    # ------------------------------------------------------------------------------------------ writes

    async def append(self, records: list[Any]) -> tuple[int, int]:
        """Leader only: append `records` as one batch of the current epoch (fsynced). Returns (first offset,
        end offset); the write is committed once `wait_committed(end offset)` returns. Raises NotLeaderError
        when this node does not lead."""
        async with self._lock:
            if not self.quorum.is_leader:
                raise NotLeaderError(self.quorum.leader_id, self.quorum.epoch)
            epoch = self.quorum.epoch
            base = await self._on_worker(self.mlog.append_as_leader, records, epoch)
            end = self.mlog.next_offset
            self.quorum.leader_flushed(end, self.clock())
            await self._perform()
        self._notify_progress()
        self._wake.set()
        return base, end

    async def wait_committed(self, end_offset: int, timeout: float) -> bool:
        """True once the high watermark reached `end_offset`; False on timeout or when leadership was lost."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        epoch = self.quorum.epoch
        while self.mlog.high_watermark < end_offset:
            if self.quorum.epoch != epoch or loop.time() >= deadline:
                return False
            progress = self._progress_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress, min(0.1, max(0.0, deadline - loop.time())))
            self._progress_waiters.discard(progress)
        return True


class NotLeaderError(Exception):
    def __init__(self, leader_id: int, epoch: int) -> None:
        super().__init__(f"this controller does not lead the quorum (leader {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch
