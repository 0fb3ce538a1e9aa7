"""Followers: fetchers that copy their leaders' logs (Kafka's ReplicaFetcherManager, AbstractFetcherThread,
ReplicaFetcherThread).

Strategy: one asyncio task per (leader broker, fetcher id), the fetcher id being a hash of the partition modulo
`num.replica.fetchers`.  Each sends Fetch v12+ (the highest both sides serve) to its leader over one
ClientConnection on the inter-broker listener, with ReplicaState (this broker's id and broker epoch, v15+; the
replica id field before), CurrentLeaderEpoch, and LastFetchedEpoch = the latest epoch in the local leader
epoch cache, `replica.fetch.wait.max.ms` / `.min.bytes` / `.max.bytes` / `.response.max.bytes`; no fetch
session.  Per partition of the answer:

* throttled partitions (throttle.py) are left out of the request while the follower quota is exceeded and
  they are not in sync; their appended bytes count against it.  A request that leaves one out waits at the
  leader only until the quota allows it again, not `replica.fetch.wait.max.ms`, and so does the fetcher when
  nothing else is left to ask for, not `replica.fetch.backoff.ms`: waits that long (Kafka's) leave the
  quota's allowance unused for a while, and on a loaded machine that cost 2-3% of a 50 MB/s rate;
* records: appended as they arrived (`append_as_follower`: offsets, epochs and bytes unchanged); the HW
  becomes min(leader HW, local LEO), the log start follows the leader's (up to the HW);
* DivergingEpoch {epoch, end}: truncate to min(end, the local end of that epoch, LEO) when the local log
  knows that epoch, else to the end of its largest smaller epoch (the next fetch asks again);
* OFFSET_OUT_OF_RANGE: below the leader's log start → truncate fully and start there; otherwise truncate to
  the leader's HW (the leader's log is shorter than ours);
* FENCED_LEADER_EPOCH / KAFKA_STORAGE_ERROR: the partition is dropped until new metadata;
* NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_*: the partition waits
  `replica.fetch.backoff.ms`; a failed connection makes the whole fetcher wait as long.

What touches the disk (appends, truncations, the log start, the HW that follows the LEO) runs on the partition's
log dir worker (kjbod.storage.workers, grouped per dir as a handler's work is: kjbod.broker.dir_work), where a
leader's appends and the KIP-113 mover's final step run too, so they keep one order per partition. A partition
whose answer is still on its worker is *in flight* and left out of fetches until the worker is done (its fetch
offset, the LEO, would be stale). The next fetch waits for the last answer's partitions, but at most
IN_FLIGHT_WAIT_S: a fetch sent without them would park at the leader while they are ready again, and the bound
keeps a stalled dir from holding the fetcher's other partitions longer. When the stall detection fails the dir,
its worker answers its partitions with the dir's error and they are dropped.

The task sends the first fetch (and any after a connection, a back-off or an idle wait); from its answer on,
callbacks fetch (`_stream`): the one that brings the last partition's answer back from its worker sends the
next fetch, and the connection's read callback takes its response (ClientConnection.send_to) and hands it to the
workers, so a replicated batch costs the follower's loop two callbacks and no task step, future or timeout
scope (one timer per fetcher times their fetches out, each at its own deadline: `_arm_timeout`). They give the
fetching back to the task for anything else (see `_stream`).

A fetcher with one partition in steady state goes a shorter way still (`_Lane`): an answer that is that
partition's records with no error or tagged field is read for the three things applied (fetch_fast.one_partition)
and handed to the dir's worker as one job, and the job's answer writes the next fetch from the template's bytes
(Template.again) when nothing the general way looks at has changed; everything else goes the general way, with
the same outcome (tests/replication/test_fetch_short_way.py). In --profile of tools/bench/replication.py it
took a follower's loop from 175 Python calls a replicated record to 89-92.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass
from typing import Any

import structlog

from kjbod.broker.dir_work import DirWork
from kjbod.net import trace
from kjbod.net.connection import ClientConnection
from kjbod.net.errors import BrokerConnectionError, ClientError, ProtocolViolation, RequestTimeoutError
from kjbod.net.fetch_fast import (
    ONE_VERSIONS,
    FollowerFetchRequest,
    Template,
    decode_follower_response,
    one_partition,
)
from kjbod.net.tasks import cancel_and_wait, wait_event
from kjbod.protocol.errors import ErrorCode
from kjbod.storage.errors import StorageError

log = structlog.get_logger("kjbod.replication.fetcher")

FETCH = 1
IN_FLIGHT_WAIT_S = 0.5  # how long a fetch waits for the last answer's appends on the dirs' workers
HELD_MIN_MS = 10  # the shortest wait for a throttled partition's quota (no spinning on a quota just over)
LONG_WAIT_MS = 1 << 31  # no throttled partition held: the configured waits apply
MIN_FETCH_VERSION = 12  # truncation on fetch (DivergingEpoch, LastFetchedEpoch)
_BACK_OFF = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH,
                       ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                       ErrorCode.REPLICA_NOT_AVAILABLE})
_DROP = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR})
# what applying an answer did to the log: truncated it, appended records, only moved its high watermark, nothing
_TRUNCATED, _APPENDED, _HW_MOVED, _NOTHING = "truncated", "appended", "hw moved", "nothing"


@dataclass(slots=True)
class FetchState:
    topic: str
    partition: int
    leader_epoch: int
    delayed_until: float = 0.0
    leader_end_offset: int = -1  # the leader's HW as last heard: how far behind this follower is
    dropped: bool = False
    in_flight: bool = False  # its last answer is being applied on its dir's worker: not fetched meanwhile
    log: Any = None  # its local log as last looked up (looked up again once closed or offline: _log)


class Fetcher:
    """Fetches from one leader for a set of partitions (see the module docstring)."""

    def __init__(self, manager: Any, leader_id: int, fetcher_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self._wakeup = asyncio.Event()
        self._applied_waiter: asyncio.Future[None] | None = None  # _answers_applied's wait, when it waits
        self._handoff: asyncio.Future[Any] | None = None  # while the callbacks fetch (_stream)
        self._outstanding: _Answer | None = None  # the fetch they sent, until its response
        self._stall_timer: asyncio.TimerHandle | None = None
        self._timeout_timer: asyncio.TimerHandle | None = None  # at the callbacks' fetch's deadline (_arm_timeout)
        self._timeout_at = 0.0  # when it runs
        self._conn: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._held_ms = LONG_WAIT_MS  # how long the last request's throttled partitions wait for their quota
        self._template = Template()  # the last fetch's bytes, patched for the next (kjbod.net.fetch_fast)
        self._picked: tuple[ClientConnection, int] | None = None  # the connection and its Fetch version
        self._lane: _Lane | None = None  # the one partition's short way, while it holds (see _Lane)

    @property
    def node(self) -> Any:
        return self.manager.node

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{self.fetcher_id}-leader-{self.leader_id}")

    @property
    def dead(self) -> bool:
        """Whether its task ended on an error (a bug: a fetcher otherwise runs until closed)."""
        task = self._task
        return task is not None and task.done() and not task.cancelled() and task.exception() is not None

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._timeout_timer is not None:
            self._timeout_timer.cancel()
            self._timeout_timer = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def add(self, tp: tuple[str, int], leader_epoch: int) -> None:
        old = self.partitions.get(tp)
        # An answer of the old state still on the worker: the LEO is not known until it is applied (or skipped).
        self.partitions[tp] = FetchState(tp[0], tp[1], leader_epoch, in_flight=old is not None and old.in_flight)
        self._wake()

    def _wake(self) -> None:
        """Something changed (a partition added, an answer applied): the task or the callbacks look again."""
        self._wakeup.set()
        waiter = self._applied_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._handoff is not None:
            self._try_send()

    def _log(self, s: FetchState) -> Any:
        """The partition's local log when online (ReplicaManager._local_log), kept in its state between fetches:
        a log that a delete, a failed dir or a KIP-113 swap takes away is closed or offline, and looked up again."""
        plog = s.log
        if plog is None or plog.closed or not plog.io.online:
            plog = s.log = self.manager._local_log(s.topic, s.partition)
        return plog

    def _version(self, conn: ClientConnection) -> int:
        """The Fetch version for `conn`, picked once per connection (its peer's ranges do not change)."""
        picked = self._picked
        if picked is None or picked[0] is not conn:
            picked = self._picked = (conn, conn.pick_version(FETCH, MIN_FETCH_VERSION))
        return picked[1]

    def ready(self, now: float) -> list[FetchState]:
        """The partitions the next fetch asks for: not dropped, not backing off, none still on its worker."""
        return [s for s in self.partitions.values() if not s.dropped and not s.in_flight and s.delayed_until <= now]

    # ------------------------------------------------------------------------------------------ the task

    async def _run(self) -> None:
        cfg = self.manager.config
        backoff = cfg.fetch_backoff_ms / 1000
        loop = asyncio.get_running_loop()
        stalled = False  # the callbacks gave back with an answer still on a worker after IN_FLIGHT_WAIT_S
        while True:
            if not stalled:
                await self._answers_applied(loop)
            stalled = False
            now = loop.time()
            ready = self.ready(now)
            if not ready:
                self._wakeup.clear()
                waits = [s.delayed_until - now for s in self.partitions.values() if not s.dropped and not s.in_flight]
                await wait_event(self._wakeup, min(waits) if waits else None)
                continue
            outcome: Any
            try:
                conn = await self._connection()
                version = self._version(conn)
                request = self._request(ready, version)
                if request is None:
                    trace.event("fetch_held", self.leader_id)
                    await asyncio.sleep(min(backoff, self._held_ms / 1000))
                    continue
                if trace.ON:
                    trace.event("fetch_sent", self.leader_id, request.first_offset)
                response = await conn.request(FETCH, version, request, timeout=self._timeout_s())
            except (ClientError, OSError) as e:
                outcome = e
            else:
                outcome = self._answer(response, version)
                if outcome is None:  # answered: the callbacks fetch on until something needs this task
                    outcome = await self._stream(loop)
            if outcome.__class__ is _Crash:
                raise outcome.error  # a bug: the fetcher is dead (DeadThreadCount), as an exception here made it
            stalled = outcome is _STALLED
            if outcome is not None and not stalled:
                await self._back_off(outcome, backoff)

    def _timeout_s(self) -> float:
        cfg = self.manager.config
        return (cfg.socket_timeout_ms + cfg.fetch_wait_max_ms) / 1000

    def _answer(self, response: Any, version: int) -> Any:
        """A fetch's response: handed to the logs (None), or, refused as a whole, the response."""
        if response.error_code:
            return response
        if trace.ON:
            trace.event("fetch_got", self.leader_id, sum(len(p.records or b"") for t in response.responses
                                                         for p in t.partitions))
        self._process(response, version)
        return None

    async def _back_off(self, outcome: Any, backoff: float) -> None:
        """A failed fetch (an exception: the connection is dropped) or one refused as a whole (its response)."""
        if isinstance(outcome, BaseException):
            log.info("replica_fetch_failed", leader=self.leader_id, error=str(outcome))
            trace.event("fetch_backoff", self.leader_id, "failed")
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        else:
            log.info("replica_fetch_refused", leader=self.leader_id, error=_name(outcome.error_code))
            trace.event("fetch_backoff", self.leader_id, "refused")
        await asyncio.sleep(backoff)

    # ------------------------------------------------------------------------------------------ the callbacks

    async def _stream(self, loop: asyncio.AbstractEventLoop) -> Any:
        """While every fetch can go out as soon as the last answer is applied, callbacks send it (from the
        workers' answers coming back: `_applied`) and take its response (in the connection's read callback:
        `_Answer`), with no task step, future or timeout scope per fetch; this task waits until they give
        back, with what then needs it: None (nothing to fetch now, no connection, the transport full), _STALLED
        (an answer still on its worker after IN_FLIGHT_WAIT_S), a failure or a refused response (back off), or
        a _Crash."""
        handoff = self._handoff = loop.create_future()
        self._try_send()  # every answer may be applied already (or none went to a worker)
        try:
            return await handoff
        finally:
            self._handoff = None
            if self._stall_timer is not None:
                self._stall_timer.cancel()
                self._stall_timer = None

    def _give_back(self, outcome: Any) -> None:
        handoff = self._handoff
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        if handoff is not None and not handoff.done():
            handoff.set_result(outcome)

    def _stalled(self) -> None:
        """IN_FLIGHT_WAIT_S since an answer came and some of it is still on its worker: the task fetches the
        rest (the timer is cancelled as soon as everything is applied, and never runs with a fetch out)."""
        self._stall_timer = None
        if self._outstanding is None:
            self._give_back(_STALLED)

    def _try_send(self) -> None:
        """The next fetch, sent here when nothing is in flight (else back to the task: see _stream)."""
        handoff = self._handoff
        if handoff is None or handoff.done() or self._outstanding is not None:
            return
        try:
            if any(s.in_flight for s in self.partitions.values()):
                if self._stall_timer is None:  # the bound of _answers_applied, from the answer's arrival
                    self._stall_timer = asyncio.get_running_loop().call_later(IN_FLIGHT_WAIT_S, self._stalled)
                return
            if self._stall_timer is not None:  # every answer applied in time
                self._stall_timer.cancel()
                self._stall_timer = None
            conn = self._conn
            if conn is None or conn.closed or conn.write_paused:
                self._give_back(None)
                return
            loop = asyncio.get_running_loop()
            ready = self.ready(loop.time())
            version = self._version(conn)
            request = self._request(ready, version) if ready else None
            if request is None:  # nothing to ask for now, or the throttle holds it all: the task waits
                self._give_back(None)
                return
            if trace.ON:
                trace.event("fetch_sent", self.leader_id, request.first_offset)
            token = _Answer(self, version)
            try:
                conn.send_to(FETCH, version, request, token)
            except (ClientError, OSError) as e:
                self._give_back(e)
                return
            self._arm_timeout(token, loop, self._timeout_s())
            self._outstanding = token
            token.lane = self._lane = self._new_lane(conn, version, ready)
        except Exception as e:  # a bug: the task raises it
            self._give_back(_Crash(e))

    # ------------------------------------------------------------------------------------------ the short way

    def _new_lane(self, conn: ClientConnection, version: int, ready: list[FetchState]) -> _Lane | None:
        """After a fetch the callbacks sent: the short way for its answer and the fetches after it, when it asked
        for the fetcher's one partition, whole (nothing held by the throttle), and its dir has a worker."""
        template = self._template
        if (len(ready) != 1 or len(self.partitions) != 1 or self._held_ms != LONG_WAIT_MS or trace.ON
                or template.places is None or len(template.places) != 1 or not hasattr(conn, "send_body")):
            return None
        s = ready[0]
        plog = s.log
        node = self.node
        manager = getattr(node.logs, "manager", None)
        worker = manager.worker(plog.log_dir) if plog is not None and manager is not None else None
        topic = node.metadata.topic(s.topic)
        if worker is None or topic is None or version not in ONE_VERSIONS:
            return None
        return _Lane(node, s, plog, worker, conn, version, topic.topic_id, template.shape, self._timeout_s())

    def _quick_answer(self, lane: _Lane, version: int, frame: bytes) -> bool:
        """A fetch's answer taken the short way (see _Lane): the one partition's records handed to its dir's
        worker as one job, with no response message, DirWork or future; False (nothing done) when the answer or
        the fetcher's state is anything else, for the general way."""
        s = lane.s
        plog = s.log
        if (plog is not lane.plog or s.dropped or s.in_flight or plog.closed or not plog.io.online
                or len(self.partitions) != 1 or self.partitions.get(lane.tp) is not s or trace.ON):
            return False
        got = one_partition(frame, version, lane.topic_id_bytes, s.partition)
        if got is None:
            return False
        s.in_flight = True
        job = _Apply(self, s, plog, *got)
        lane.worker.submit(job, job.settle, lane.loop)
        return True

    def _quick_applied(self, job: _Apply, ok: bool, result: Any) -> None:
        """On the loop, the short way's job answered: what `_applied` does with a partition's outcome, then the
        next fetch (`_quick_send`)."""
        s = job.s
        s.in_flight = False
        current = self.partitions.get((s.topic, s.partition))
        if current is not None and current is not s:
            current.in_flight = False  # replaced while this answer was on the worker (see add)
        if not ok or isinstance(result, BaseException):
            # The back-off runs from now, when the failure is known (the general way's from the answer's
            # arrival, an append earlier): the short way keeps no clock reading per answer for its rare failures.
            cfg = self.manager.config
            self._apply_failed(s, job.plog, None, result, asyncio.get_running_loop().time(),
                               cfg.fetch_backoff_ms / 1000)
        elif result is not None:
            self._after_apply(s, result, job.hw, job.records)
        # While the callbacks fetch, the task waits for them alone (its event and waiter matter only once it has
        # the fetching back): the next fetch goes out here, else everything that waits is told (_wake).
        if self._handoff is not None:
            try:
                if self._quick_send():
                    return
            except Exception as e:  # a bug: the task raises it
                self._give_back(_Crash(e))
                return
        self._wake()

    def _quick_send(self) -> bool:
        """The next fetch written the short way: the template's bytes with the one partition's fields patched
        (Template.again), when everything the general way (`_try_send`, `_request`) would look at is as it was
        when the lane was made; False (nothing sent) otherwise."""
        lane = self._lane
        handoff = self._handoff
        if lane is None or handoff is None or handoff.done() or self._outstanding is not None:
            return False
        s = lane.s
        plog = s.log
        conn = self._conn
        if (self._stall_timer is not None or conn is not lane.conn or conn.closed or conn.write_paused
                or len(self.partitions) != 1 or self.partitions.get(lane.tp) is not s or s.dropped or s.in_flight
                or plog is not lane.plog or plog.closed or not plog.io.online or trace.ON):
            return False
        loop = lane.loop
        if s.delayed_until and s.delayed_until > loop.time():
            return False
        node = lane.node
        topic = node.metadata.topic(s.topic)
        if (topic is None or (topic.topic_id is not lane.topic_id and topic.topic_id != lane.topic_id)
                or node.broker_epoch != lane.replica_epoch):
            return False
        leo = plog.log_end_offset
        if self.manager.follower_throttled(s.topic, s.partition, 0 <= s.leader_end_offset <= leo):
            return False
        self._held_ms = LONG_WAIT_MS  # as _request leaves it when nothing is held
        body = self._template.again(lane.shape, leo, plog.leader_epochs.latest_epoch, plog.log_start_offset)
        if body is None:
            return False
        token = _Answer(self, lane.version)
        token.lane = lane
        try:
            conn.send_body(FETCH, lane.version, body, token)
        except (ClientError, OSError) as e:
            self._give_back(e)
            return True
        self._arm_timeout(token, loop, lane.timeout_s)
        self._outstanding = token
        return True

    def _arm_timeout(self, token: _Answer, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        """A fetch the callbacks sent times out `timeout_s` from now, as ClientConnection.request's would. One
        timer per fetcher serves every fetch: it runs at the deadline of the fetch that was out when it was set,
        and finding that one answered and a later fetch out, waits again until the later one's deadline. A fetch
        answered in time (every one in steady state) thus costs a clock reading, not a timer made and cancelled."""
        deadline = token.deadline = loop.time() + timeout_s
        timer = self._timeout_timer
        if timer is None or deadline < self._timeout_at:  # (earlier only if the timeout was made shorter)
            if timer is not None:
                timer.cancel()
            self._timeout_at = deadline
            self._timeout_timer = loop.call_at(deadline, self._timeout_check)

    def _timeout_check(self) -> None:
        """The timer of _arm_timeout: the fetch out now timed out, or it is set again for that fetch's deadline."""
        self._timeout_timer = None
        token = self._outstanding
        if token is None or token.settled:
            return  # none out: the next fetch sets the timer again
        loop = asyncio.get_running_loop()
        if loop.time() >= token.deadline:
            token.time_up()
        else:
            self._timeout_at = token.deadline
            self._timeout_timer = loop.call_at(token.deadline, self._timeout_check)

    def _answered(self, token: _Answer, result: Any) -> None:
        """The connection's read callback: the response frame (or the failure) of the fetch `_try_send` sent."""
        if self._outstanding is not token:
            return
        self._outstanding = None  # its deadline no longer counts (_timeout_check)
        conn = self._conn
        if isinstance(result, BaseException):
            self._give_back(result)
            return
        try:
            if token.lane is not None and self._quick_answer(token.lane, token.version, result):
                return
            assert conn is not None
            try:
                response = decode_follower_response(result, token.version, conn.host, conn.port)
            except ProtocolViolation as e:
                conn.close(e)
                self._give_back(e)
                return
            refused = self._answer(response, token.version)
            if refused is not None:
                self._give_back(refused)
                return
            self._try_send()
        except Exception as e:  # a bug: the task raises it
            self._give_back(_Crash(e))

    async def _answers_applied(self, loop: asyncio.AbstractEventLoop) -> None:
        """Waits (up to IN_FLIGHT_WAIT_S) until the last answer's partitions are applied on their dirs' workers.
        A fetch sent meanwhile would leave them out and, with nothing new for the rest, park at the leader for
        replica.fetch.wait.max.ms while they are ready again: a busy partition would fetch every other wait
        (half its rate). The bound keeps a stalled dir's partitions from holding the others for longer."""
        deadline = loop.time() + IN_FLIGHT_WAIT_S
        waited = False
        while any(s.in_flight for s in self.partitions.values()) and (left := deadline - loop.time()) > 0:
            if not waited and trace.ON:
                waited = True
                trace.event("in_flight_wait+", self.leader_id)
            # A future that _wake resolves, bounded by a timer: this wait comes once per replicated batch, and
            # an event wait in a timeout scope costs several times as much.
            waiter = self._applied_waiter = loop.create_future()
            timer = loop.call_later(left, _resolve, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._applied_waiter = None
        if waited:
            trace.event("in_flight_wait-", self.leader_id)

    async def _connection(self) -> ClientConnection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        reg = self.node.metadata.brokers.get(self.leader_id)
        endpoint = reg.endpoint(self.manager.listener_name) if reg is not None else None
        if endpoint is None and reg is not None and reg.listeners:
            endpoint = reg.listeners[0]
        if endpoint is None:
            raise BrokerConnectionError("?", 0, f"broker {self.leader_id} has no endpoint on listener "
                                        f"{self.manager.listener_name}")
        self._conn = await ClientConnection.open(
            endpoint.host, endpoint.port, client_id=f"kjbod-replica-fetcher-{self.node.node_id}-{self.fetcher_id}",
            connect_timeout=self.manager.config.socket_timeout_ms / 1000, ssl_context=self.manager.ssl_context,
            sasl=self.manager.sasl)
        return self._conn

    def _request(self, ready: list[FetchState], version: int) -> FollowerFetchRequest | None:
        """The next fetch of `ready`'s partitions (kjbod.net.fetch_fast: written by the codec once per shape,
        then patched), or None when the throttle holds back every one of them."""
        cfg = self.manager.config
        image = self.node.metadata
        entries = []
        held = False
        for s in ready:
            plog = self._log(s)
            topic = image.topic(s.topic)
            if plog is None or topic is None:
                s.dropped = True
                continue
            if self._throttled(s, plog):
                held = True
                continue
            entries.append((s.topic, topic.topic_id, s.partition, s.leader_epoch, plog.log_end_offset,
                            plog.leader_epochs.latest_epoch, plog.log_start_offset))
        # A partition held back by the throttle is asked for again as soon as the quota allows: the fetch that
        # leaves it out waits at the leader (or, empty, here) no longer than that, not replica.fetch.wait.max.ms.
        self._held_ms = max(HELD_MIN_MS, self.manager.follower_throttle_wait_ms()) if held else LONG_WAIT_MS
        if not entries:
            return None
        if len(entries) > 1:  # one topic's partitions together, in the order first met (as the codec groups them)
            order = {name: i for i, name in enumerate(dict.fromkeys(e[0] for e in entries))}
            entries.sort(key=lambda e: order[e[0]])
        return FollowerFetchRequest(self.node.node_id, self.node.broker_epoch,
                                    min(cfg.fetch_wait_max_ms, self._held_ms), cfg.fetch_min_bytes,
                                    cfg.fetch_response_max_bytes, cfg.fetch_max_bytes, entries, self._template)

    def _throttled(self, s: FetchState, plog: Any) -> bool:
        """Left out of this fetch by the follower throttle (throttle.py): not in sync (behind the leader's HW as
        last heard, or not heard yet), throttled here, and the follower quota exceeded."""
        in_sync = 0 <= s.leader_end_offset <= plog.log_end_offset
        return self.manager.follower_throttled(s.topic, s.partition, in_sync)

    # ------------------------------------------------------------------------------------------ answers

    def _process(self, response: Any, version: int) -> None:
        image = self.node.metadata
        loop_time = asyncio.get_running_loop().time()
        backoff = self.manager.config.fetch_backoff_ms / 1000
        work = DirWork(self.node, lambda item, result: self._applied(item, result, loop_time, backoff),
                       lambda item, e: self._applied(item, e if e is not None else TimeoutError(), loop_time, backoff))
        for t in response.responses:
            name = t.topic
            if version >= 13:
                topic = image.topic_by_id(t.topic_id)
                name = topic.name if topic is not None else ""
            for part in t.partitions:
                s = self.partitions.get((name, part.partition_index))
                if s is None or s.dropped or s.in_flight:
                    continue
                plog = self._log(s)
                if plog is None:
                    s.dropped = True
                    continue
                if self._answer_on_loop(s, part, loop_time, backoff):
                    continue
                s.in_flight = True
                work.add(plog.log_dir, (s, plog, part))
        if work:
            work.run(self._apply_on_worker, None)  # not awaited: each dir's answers come back on their own

    def _apply_on_worker(self, items: list[tuple[FetchState, Any, Any]]) -> list[Any]:
        """On the dir's worker: each partition's answer applied to its log, in the order fetched; a partition's
        failure (its exception) is its result, so one bad partition does not fail its dir's others."""
        out: list[Any] = []
        for s, plog, part in items:
            if self.partitions.get((s.topic, s.partition)) is not s:
                out.append(None)  # no longer fetched here (a new leader, a delete) since the answer came
                continue
            if plog.closed and plog.replaced_by is not None:
                # A KIP-113 move swapped the replica (on this worker) since the answer came: nothing applied,
                # the next fetch asks from the moved log's end.  Failing here would drop the partition for good.
                out.append(None)
                continue
            try:
                out.append(self._apply_answer(s, plog, part))
            except Exception as e:
                out.append(e)
            if trace.ON:
                trace.event("f_appended", plog.log_end_offset, s.topic)
        return out

    def _applied(self, item: tuple[FetchState, Any, Any], result: Any, loop_time: float, backoff: float) -> None:
        """On the loop, once the worker has applied (or failed) one partition's answer."""
        s, plog, part = item
        s.in_flight = False
        if trace.ON:
            trace.event("f_applied", plog.log_end_offset, s.topic)
        current = self.partitions.get((s.topic, s.partition))
        if current is not None and current is not s:
            current.in_flight = False  # replaced while this answer was on the worker (see add)
        if isinstance(result, BaseException):
            self._apply_failed(s, plog, part, result, loop_time, backoff)
        elif result is not None:
            self._after_apply(s, result, part.high_watermark, part.records)
        self._wake()  # last: the callbacks may send the next fetch from here, with this answer's outcome in it

    def _apply_failed(self, s: FetchState, plog: Any, part: Any, e: BaseException, loop_time: float,
                      backoff: float) -> None:
        if isinstance(e, StorageError):
            log.warning("replica_fetch_append_failed", topic=s.topic, partition=s.partition, error=str(e))
        else:
            log.error("replica_fetch_answer_failed", topic=s.topic, partition=s.partition, error=repr(e))
        current = self.manager._local_log(s.topic, s.partition)  # plog, or the log a KIP-113 move swapped in
        s.dropped = current is None or not current.online  # the log is gone or its dir failed
        s.delayed_until = loop_time + backoff

    def _answer_on_loop(self, s: FetchState, part: Any, loop_time: float, backoff: float) -> bool:
        """An answer that touches no log (an error other than OFFSET_OUT_OF_RANGE), handled here; False when the
        log must take it (records, a truncation, the HW and log start that follow)."""
        code = part.error_code
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            return False
        if code in _DROP:
            log.info("replica_fetch_partition_dropped", topic=s.topic, partition=s.partition, error=_name(code))
            s.dropped = True
            return True
        if code:
            trace.event("fetch_backoff", self.leader_id, _name(code))
            s.delayed_until = loop_time + backoff
            return True
        return False

    def _partition_answer(self, s: FetchState, plog: Any, part: Any, loop_time: float, backoff: float) -> None:
        """One partition's answer, all of it in the calling thread (KJBOD_DIR_WORKERS=0's path, and tests)."""
        if self._answer_on_loop(s, part, loop_time, backoff):
            return
        self._after_apply(s, self._apply_answer(s, plog, part), part.high_watermark, part.records)

    def _after_apply(self, s: FetchState, outcome: str, high_watermark: int, records: Any) -> None:
        """On the loop, what follows a partition's answer applied to its log (`high_watermark` and `records`:
        the answer's)."""
        if outcome is _TRUNCATED:
            return
        if outcome is _APPENDED:
            self.node.notify_append(s.topic, s.partition)
            # the follower quota counts what was appended (on the loop: the quota is the loop's)
            self.manager.follower_appended(s.topic, s.partition, len(records))
        elif outcome is _HW_MOVED:
            # a consumer may read this follower up to its high watermark (Fetch v11+): its long poll looks again,
            # as Kafka's fetcher completes the delayed fetches of partitions whose high watermark moved
            self.node.notify_high_watermark(s.topic, s.partition)
        if high_watermark >= 0:
            s.leader_end_offset = high_watermark

    def _apply_answer(self, s: FetchState, plog: Any, part: Any) -> str:
        """The log's side of one partition's answer (a truncation, or the records, HW and log start): truncated,
        appended or nothing. Runs where the partition's appends run (its dir's worker)."""
        if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leo = plog.log_end_offset
            if 0 <= part.log_start_offset and leo < part.log_start_offset:
                plog.truncate_fully_and_start_at(part.log_start_offset)
                self._truncate_future(s, part.log_start_offset, fully=True)
            elif 0 <= part.high_watermark < leo:
                plog.truncate_to(max(part.high_watermark, plog.high_watermark))
                self._truncate_future(s, plog.log_end_offset)
            log.info("replica_offset_out_of_range", topic=s.topic, partition=s.partition, log_end_offset=leo,
                     truncated_to=plog.log_end_offset)
            return _TRUNCATED
        if part.diverging_epoch.epoch >= 0 or part.diverging_epoch.end_offset >= 0:
            self._truncate_on_divergence(s, plog, part.diverging_epoch.epoch, part.diverging_epoch.end_offset)
            return _TRUNCATED
        return _apply_records(plog, part.records, part.high_watermark, part.log_start_offset)

    def _truncate_on_divergence(self, s: FetchState, plog: Any, epoch: int, end_offset: int) -> None:
        leo = plog.log_end_offset
        local_epoch, local_end = plog.leader_epochs.end_offset_for(epoch, leo)
        if local_epoch == epoch:
            target = min(local_end, end_offset, leo)
        elif local_epoch >= 0:
            target = min(local_end, leo)  # the end of our largest smaller epoch: the next fetch asks again
        else:
            target = min(plog.high_watermark, leo)
        plog.truncate_to(target)
        self._truncate_future(s, target)
        log.info("replica_truncated", topic=s.topic, partition=s.partition, diverging_epoch=epoch,
                 leader_end_offset=end_offset, from_offset=leo, to_offset=target)


    def _truncate_future(self, s: FetchState, offset: int, *, fully: bool = False) -> None:
        """A KIP-113 move of this replica in progress: its future log must not keep what the current one lost
        (Kafka truncates the future replica the same way)."""
        logs = getattr(self.node, "logs", None)
        future = logs.manager.get_future(s.topic, s.partition) if logs is not None else None
        if future is None or not future.online:
            return
        if fully or offset < future.log_start_offset:
            future.truncate_fully_and_start_at(offset)
        elif future.log_end_offset > offset:
            future.truncate_to(offset)


def _apply_records(plog: Any, data: Any, high_watermark: int, log_start_offset: int) -> str:
    """An answer's records (if any), high watermark and log start applied to `plog` (on its dir's worker):
    appended, the HW moved, or nothing."""
    hw = -1
    if data:
        if data.__class__ is not memoryview and not isinstance(data, bytes | bytearray | memoryview):
            data = bytes(data)
        info = plog.append_as_follower(data)
        log_start = info.log_start_offset
    else:
        log_start, hw = plog.log_start_offset, plog.high_watermark
    if high_watermark >= 0:
        plog.high_watermark = high_watermark  # the log clamps it to its end: min(the leader's HW, the LEO)
    if log_start_offset > log_start:
        plog.advance_log_start_offset(min(log_start_offset, plog.high_watermark))
    if data:
        return _APPENDED
    return _HW_MOVED if plog.high_watermark != hw else _NOTHING


class _Lane:
    """The short way of a fetcher with one partition in steady state (Fetcher._quick_answer, _quick_send): what
    the general way looked up for the fetch it sent, kept while it holds. An answer that is one partition's
    records with no error or tagged field (fetch_fast.one_partition) goes to the partition's dir worker as one
    job (_Apply) in the connection's read callback, and the job's answer writes the next fetch from the
    template's bytes: no response message, DirWork, closure or future per fetch, and the next fetch's request
    object is not built. Anything else (an error, a divergence, a throttle, another partition, a new leader
    epoch, connection, broker epoch or topic id, a log swapped or offline, tracing on) goes the general way,
    which makes a new lane after its next fetch."""

    __slots__ = ("node", "s", "tp", "plog", "worker", "conn", "version", "topic_id", "topic_id_bytes",
                 "replica_epoch", "shape", "loop", "timeout_s")

    def __init__(self, node: Any, s: FetchState, plog: Any, worker: Any, conn: Any, version: int, topic_id: Any,
                 shape: Any, timeout_s: float) -> None:
        self.node = node
        self.s = s
        self.tp = (s.topic, s.partition)
        self.plog = plog
        self.worker = worker
        self.conn = conn
        self.version = version
        self.topic_id = topic_id
        self.topic_id_bytes = topic_id.bytes
        self.replica_epoch = node.broker_epoch
        self.shape = shape  # the template's when the lane was made (Template.again)
        self.loop = asyncio.get_running_loop()
        self.timeout_s = timeout_s


class _Apply:
    """One answer of the short way on its dir's worker (kjbod.storage.workers: called there, `settle` called
    with its outcome on the loop): what `_apply_on_worker` does for one partition."""

    __slots__ = ("fetcher", "s", "plog", "hw", "log_start", "records")
    together = None  # never run with other jobs (kjbod.storage.workers)
    at_once = False

    def __init__(self, fetcher: Fetcher, s: FetchState, plog: Any, hw: int, log_start: int, records: Any) -> None:
        self.fetcher = fetcher
        self.s = s
        self.plog = plog
        self.hw = hw
        self.log_start = log_start
        self.records = records

    def __call__(self) -> str | None:
        s, plog = self.s, self.plog
        if self.fetcher.partitions.get((s.topic, s.partition)) is not s:
            return None  # no longer fetched here (a new leader, a delete) since the answer came
        if plog.closed and plog.replaced_by is not None:
            return None  # a KIP-113 swap since the answer came: see _apply_on_worker
        return _apply_records(plog, self.records, self.hw, self.log_start)

    def settle(self, ok: bool, result: Any) -> None:
        self.fetcher._quick_applied(self, ok, result)


class _Answer:
    """The token of a fetch the callbacks sent (ClientConnection.send_to): its response frame, or the connection's
    failure, goes to the fetcher in the read callback itself; `time_up` is its timeout (the connection is
    closed then, as ClientConnection.request does), run by the fetcher's timer at `deadline` (Fetcher._arm_timeout).
    `lane`: the short way's, when its answer may take it."""

    __slots__ = ("fetcher", "version", "deadline", "settled", "lane")

    def __init__(self, fetcher: Fetcher, version: int) -> None:
        self.fetcher = fetcher
        self.version = version
        self.deadline = 0.0  # the loop's time at which it times out
        self.settled = False
        self.lane: _Lane | None = None

    def done(self) -> bool:
        return self.settled

    def set_result(self, frame: bytes) -> None:
        self.settled = True
        self.fetcher._answered(self, frame)

    def set_exception(self, error: BaseException) -> None:
        self.settled = True
        self.fetcher._answered(self, error)

    def time_up(self) -> None:
        if self.settled:
            return
        self.settled = True  # before the close below, which fails what is pending (this fetch: dropped there)
        conn = self.fetcher._conn
        error = RequestTimeoutError(f"Fetch v{self.version} to leader {self.fetcher.leader_id}: no response within "
                                    f"{self.fetcher._timeout_s():.3g}s")
        if conn is not None:
            conn.close(BrokerConnectionError(conn.host, conn.port, "closed after a request timed out"))
        self.fetcher._answered(self, error)


class _Crash:
    """A bug met in the callbacks, for the task to raise."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


_STALLED = object()  # see Fetcher._stream


class FetcherManager:
    """The fetchers of this broker: partitions added and removed as the metadata says (see the docstring)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.fetchers: dict[tuple[int, int], Fetcher] = {}
        self._closing: set[asyncio.Task[None]] = set()  # fetchers left without partitions, being closed
        self._closed = False

    def _fetcher_id(self, tp: tuple[str, int]) -> int:
        return zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % self.manager.config.num_fetchers

    def add(self, tp: tuple[str, int], leader_id: int, leader_epoch: int) -> None:
        if self._closed:
            return
        key = (leader_id, self._fetcher_id(tp))
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = self.fetchers[key] = Fetcher(self.manager, leader_id, key[1])
            fetcher.start()
        fetcher.add(tp, leader_epoch)

    def remove(self, tp: tuple[str, int]) -> None:
        for key, fetcher in list(self.fetchers.items()):
            if fetcher.partitions.pop(tp, None) is not None and not fetcher.partitions:
                del self.fetchers[key]
                task = asyncio.get_running_loop().create_task(fetcher.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    def lag(self, topic: str, partition: int) -> int | None:
        for fetcher in self.fetchers.values():
            s = fetcher.partitions.get((topic, partition))
            if s is not None and s.leader_end_offset >= 0:
                plog = self.manager._local_log(topic, partition)
                return max(0, s.leader_end_offset - plog.log_end_offset) if plog is not None else None
        return None

    def max_lag(self) -> int:
        most = 0
        for fetcher in self.fetchers.values():
            for (topic, partition), s in fetcher.partitions.items():
                if s.dropped or s.leader_end_offset < 0:
                    continue
                plog = self.manager._local_log(topic, partition)
                if plog is not None:
                    most = max(most, s.leader_end_offset - plog.log_end_offset)
        return most

    def failed_partitions(self) -> int:
        return sum(1 for fetcher in self.fetchers.values() for s in fetcher.partitions.values() if s.dropped)

    def dead_fetchers(self) -> int:
        return sum(1 for fetcher in self.fetchers.values() if fetcher.dead)

    async def close(self) -> None:
        self._closed = True
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        for fetcher in fetchers:
            await fetcher.close()
        for task in list(self._closing):
            await task



def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
