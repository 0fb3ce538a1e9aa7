"""A replica fetcher's Fetch on the leader by a short way: the request read from the bytes, the plain answer
written by hand (the leader's side of kjbod.net.fetch_fast).

Strategy: a follower sends its leader the same request over and over, and from one to the next only the
correlation id and three fixed-width fields of its partition change (FetchOffset, LastFetchedEpoch,
LogStartOffset). So once the general way (kjbod.broker.handlers.fetch) has decoded a follower's fetch of one
partition and its checks passed, the router keeps, per connection, the request's bytes around those three fields
and what was resolved from them (a `Shape`: the topic, the partition's state and log, the capped sizes, the bytes
of the plain answer around its changing fields). The next request whose bytes equal the last one's outside those
fields is answered here: no decode, no resolution, the fields read with one unpack, and the answer packed behind
the fixed bytes of the shape.

What a shape's checks decided holds only while nothing they read has changed: the metadata image (a new one after
every delta: brokers' epochs, leadership, topics), the partition's leader epoch, partition epoch, ISR and replica
set, its log (closed by a KIP-113 swap or offline) and the leader throttle; when any of these moved, the request
goes the general way, which checks it again and keeps a new shape (and so does a fetch that would wait while the
node shuts down). The per-fetch checks (LastFetchedEpoch against the leader epoch cache, the offset in the log's
range) are made here on every fetch as ReplicaManager._check makes them, and a fetch that fails one goes the general
way too, which answers its error or DivergingEpoch. Then the follower's position moves (ReplicaManager._fetched: the
HW, the acks=all answers it completes), and the answer is read as `_FollowerFetch._answer_single` reads it: from the
page cache on the loop when the dir's worker is idle (PartitionLog.read_to_end_cached, the caught-up follower's
common case), else, and for anything else (a read that is not one pread, a wait that expires, the node stopping),
by `_FollowerFetch` with the checks already made, which stays the only judge of what is not plain.

A fetch at the log end parks (node.parked_fetches, its max_wait_ms watched by one timer per follower connection,
see `_Parked`) and is answered in the callback of the append that wakes it, as `_FollowerFetch` is. So does a
fetch with a small read to send that the loop may not read because the dir's worker is busy with the partition's
next appends, up to APPENDS_WAITED of them (`_append_coming`), waiting for those appends' wake-ups only: the
general way would hand its read to that busy worker, behind them, and answer it with the last one's answers, with
a decode, a hand-off each way and an encode more. The followers one append wakes were parked at the same log end,
so the first one's read answers the others (one pread a record for an RF 3 partition, not two) while the log end,
HW and log start are still those it read.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

from kjbod.broker.dir_work import loop_may_read
from kjbod.broker.handlers import fetch as general
from kjbod.broker.replication import hooks as replication
from kjbod.broker.replication.partition import LEADER
from kjbod.net import trace
from kjbod.protocol.headers import read_request_header
from kjbod.protocol.runtime import UV1, write_uvarint
from kjbod.storage import fsio
from kjbod.wire.handler import Later
from kjbod.wire.region import FileRegion

MIN_VERSION = 12  # LastFetchedEpoch, and the flexible versions, from v12 (as the follower's template)
_BLOCK = struct.Struct(">iiqiqi")  # a FetchPartition's fixed fields as the codec packs them from v12 on
_FIELDS = struct.Struct(">qiq")  # FetchOffset, LastFetchedEpoch, LogStartOffset: bytes 8 to 28 of the block
_FIELDS_AT = 8
_TOP = struct.Struct(">ihi")  # ThrottleTimeMs, ErrorCode, SessionId
_INDEX = struct.Struct(">ih")  # PartitionIndex, ErrorCode
_PREFERRED = struct.Struct(">i")  # PreferredReadReplica
# The most appends in flight a fetch they hold back waits for (`_append_coming`). The worker takes those behind the
# first as one batch, so such a wait mostly ends at the second wake-up; under other load a leader's worker was
# measured with up to 7 small appends of a partition in flight at 500 records/s.
APPENDS_WAITED = 8
SHAPES_LIMIT = 256  # shapes a router keeps (one per follower connection): past it they are all forgotten


class Shape:
    """One follower connection's last plain fetch: the bytes around its changing fields, what was resolved and
    checked from them, and the fixed parts of its answer (see the module docstring)."""

    __slots__ = ("route", "head", "at", "tail", "name", "partition", "follower", "broker_epoch", "min_bytes",
                 "wait_s", "read_limit", "keys", "image", "state", "leader_epoch", "partition_epoch", "isr",
                 "followers", "plog", "epochs", "log_dir", "loop", "answer", "answer_head", "answer_tail", "parked",
                 "timer")

    route: Any  # the router's route (Fetch at one version) its requests come by
    head: bytes  # the request's bytes after the correlation id, up to its FetchOffset (at `at`)
    at: int
    tail: bytes  # its bytes after LogStartOffset
    name: str
    partition: int
    follower: int
    broker_epoch: int
    min_bytes: int  # capped as fetch._capped caps it
    wait_s: float
    read_limit: int  # what one read may carry: the partition's and the response's budget, at most a small read
    keys: list[tuple[str, int]]  # what it parks on
    image: Any  # what its checks read, as they read it
    state: Any
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    followers: dict[int, Any]
    plog: Any
    epochs: Any  # its leader epoch cache (one object for the log's life: PartitionLog.leader_epochs)
    log_dir: str
    loop: asyncio.AbstractEventLoop
    answer: struct.Struct  # the plain answer's fixed parts (`_answer_parts`)
    answer_head: bytes
    answer_tail: bytes
    parked: Any  # its fetch waiting at the log end (a `_Parked`), whose max_wait_ms `timer` watches
    timer: asyncio.TimerHandle | None  # see `_Parked.park`


def learn(router: Any, route: Any, frame: Any, pos: int, body: Any, ctx: Any) -> None:
    """After the general way decoded `body` from `frame` (its header ends at `pos`): keep the shape of a
    follower's plain fetch of one partition whose checks pass now, else forget the connection's."""
    shapes = router.follower_fetch_shapes
    shapes.pop(ctx.connection_id, None)
    version = route.version
    if version < MIN_VERSION or ctx.listener_kind != "broker":
        return
    follower = replication.follower_id(body, version)
    if follower < 0 or general._continues_session(body, version) or body.isolation_level not in \
            general.ISOLATION_LEVELS or len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
        return
    node = router.node
    manager = getattr(node, "replication", None)
    if manager is None or manager.throttles.leader.throttled or node.stopping:
        return
    resolved = general._resolve(node, body, version)
    name, t = resolved[0]
    if name is None:
        return
    p = t.partitions[0]
    broker_epoch = replication.follower_epoch(body, version)
    check, state, plog = manager._check(name, p.partition, follower, broker_epoch, p.current_leader_epoch,
                                        p.fetch_offset, p.last_fetched_epoch)
    if check.error_code or check.diverging is not None or plog is None:
        return
    logs = getattr(node.logs, "manager", None)
    if logs is None or logs.worker(plog.log_dir) is None:  # no workers: the general way reads inline
        return
    max_bytes, min_bytes = general._capped(node, body)
    read_limit = min(p.partition_max_bytes, max_bytes, general.SMALL_FOLLOWER_READ)
    if read_limit <= 0:
        return
    block = _BLOCK.pack(p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch,
                        p.log_start_offset, p.partition_max_bytes)
    found = frame.find(block, pos)
    if found < 0 or frame.find(block, found + 1) >= 0:
        return
    shape = Shape()
    shape.route = route
    shape.at = at = found + _FIELDS_AT
    shape.head = bytes(frame[8:at])
    shape.tail = bytes(frame[at + _FIELDS.size:])
    shape.name, shape.partition, shape.follower, shape.broker_epoch = name, p.partition, follower, broker_epoch
    shape.min_bytes = min_bytes
    shape.wait_s = max(body.max_wait_ms, 0) / 1000.0
    shape.read_limit = read_limit
    shape.keys = [(name, p.partition)]
    shape.image = node.metadata
    shape.state, shape.plog, shape.epochs, shape.log_dir = state, plog, plog.leader_epochs, plog.log_dir
    try:
        shape.loop = asyncio.get_running_loop()  # its waits' timers
    except RuntimeError:  # a handler called off a loop (tests): nothing to wait with
        return
    shape.leader_epoch, shape.partition_epoch = state.leader_epoch, state.partition_epoch
    shape.isr, shape.followers = state.isr, state.followers
    shape.parked = shape.timer = None
    shape.answer, shape.answer_head, shape.answer_tail = _answer_parts(
        version, t.topic, t.topic_id, p.partition, body.isolation_level == general.READ_COMMITTED)
    if len(shapes) >= SHAPES_LIMIT:
        shapes.clear()
    shapes[ctx.connection_id] = shape


def answer(router: Any, route: Any, frame: Any, ctx: Any, corr: int) -> Any:
    """The reply to a follower's fetch of its connection's shape (bytes, or a Later of them), else None: the
    general way answers it."""
    shape = router.follower_fetch_shapes.get(ctx.connection_id)
    if shape is None or shape.route is not route:
        return None
    at = shape.at
    if frame[8:at] != shape.head or frame[at + _FIELDS.size:] != shape.tail:
        return None
    node = router.node
    state = shape.state
    plog = shape.plog
    # What the shape's checks read, unchanged (else the general way checks the fetch again); the node's shutdown
    # is looked at where it matters, before the fetch waits.
    if not (node.metadata is shape.image and state.role is LEADER and state.leader_epoch == shape.leader_epoch
            and state.partition_epoch == shape.partition_epoch and state.isr is shape.isr
            and state.followers is shape.followers and not plog.closed and plog.io.online
            and not node.replication.throttles.leader.throttled):
        return None
    offset, last_epoch, log_start = _FIELDS.unpack_from(frame, at)
    leo = plog.log_end_offset
    if last_epoch >= 0:  # as ReplicaManager._check: a follower whose log parted from ours is told where
        entries = shape.epochs.entries
        # At the latest epoch (the common case) end_offset_for answers (last_epoch, leo), whose check is the
        # range check's below: only an older or unknown epoch needs the lookup.
        if not entries or entries[-1][0] != last_epoch:
            epoch, end = shape.epochs.end_offset_for(last_epoch, leo)
            if epoch < last_epoch or end < offset:
                return None
    if offset < plog.log_start_offset or offset > leo:
        return None
    stats = node.topic_stats
    if stats is not None:  # counted as FetchFollower, as the handler does
        stats.requests.follower_fetch()
    node.replication._fetched(state, plog, shape.follower, shape.broker_epoch, offset, leo)
    follower = state.followers.get(shape.follower)
    if follower is not None and follower.log_start_offset != log_start:  # DeleteRecords' low watermark
        node.replication.follower_log_start(state.topic, state.partition, shape.follower, log_start)
    wait_s = shape.wait_s
    may_wait = shape.min_bytes > 0 and wait_s > 0 and not node.stopping
    if offset == leo and may_wait:
        return _Parked(router, route, shape, frame, ctx, corr, offset, wait_s).park(wait_s)
    started = time.monotonic()
    reply = _read(router, route, shape, offset, corr)
    if reply is not None:
        return reply
    if may_wait and _append_coming(node, shape, plog, offset, APPENDS_WAITED):
        parked = _Parked(router, route, shape, frame, ctx, corr, offset, wait_s)
        parked.waits_for = plog.appends_in_flight
        return parked.park(wait_s)
    return _general(router, route, frame, ctx, corr, started + wait_s)


def _append_coming(node: Any, shape: Shape, plog: Any, offset: int, most: int) -> bool:
    """After a read the loop could not make: whether that is because the dir's worker is busy with the Produce
    appends to the partition whose answers have not reached the loop yet, 1 to `most` of them, and what there is
    to send is a small read. The general way's read would be held behind those appends (kjbod.storage.workers: a
    busy worker is handed small work only once its answers are in, and then with what was held before it) and
    answered with the last one's answers; the fetch waits for their wake-ups instead, the first that finds the
    worker idle reading on the loop, with the appends' records and once for the followers it wakes (see
    `_Parked`). With more appends of the partition in flight, or more bytes than one small read (big Produce
    requests go to the worker at once, and the general way's read with them), the general way reads what is
    there."""
    if not 0 < plog.appends_in_flight <= most or plog.closed:  # none (nothing would wake it), or too many
        return False
    size = plog.bytes_to_end(offset)
    if size is None or not 0 < size <= shape.read_limit:
        return False
    worker = node.logs.manager.worker(shape.log_dir)
    return worker is not None and not worker.idle() and worker.io.online and not fsio.FAULTS.active


def _read(router: Any, route: Any, shape: Shape, offset: int, corr: int,
          shared: dict[Any, Any] | None = None) -> bytes | None:
    """The answer read from the page cache on the loop in one pread, as `_FollowerFetch._answer_single` reads
    it; None when it cannot be (the general way reads it). `shared`: node.parked_fetches.shared while the
    followers an append woke run; the first one's read answers the others at the same offset (see `_read_once`)."""
    node = router.node
    plog = shape.plog
    if plog.closed or not plog.io.online:
        return None
    got = _read_again(shared, plog, offset, shape.read_limit) if shared else None  # the first one woken: none yet
    if got is None:
        got = _read_once(node, shape, plog, offset, shared)
        if got is None:
            return None
    records, hw, lso = got
    size = len(records)
    if size < shape.min_bytes:
        return None
    stats = node.topic_stats
    if stats is not None:  # the metrics endpoint's counters (kjbod.metrics): as fetch._count
        stats.fetched(shape.name, 0, 0)
    manager = node.replication
    if manager.throttles.leader.throttled:  # as hooks.leader_sent
        manager.leader_sent(shape.name, shape.partition, size)
    if trace.ON:
        trace.event("answered", shape.follower, plog.log_end_offset)
    if router.stats is not None and route.has_error_code:
        router.stats.error(route.entry.api_key, 0)
    return _packed(shape.answer, shape.answer_head, shape.answer_tail, corr, hw, lso, records)


def _read_once(node: Any, shape: Shape, plog: Any, offset: int,
               shared: dict[Any, Any] | None) -> tuple[bytes, int, int] | None:
    """(records, HW, log start) from `offset` to the log end in one pread on the loop, when the dir's worker lets
    the loop read; kept in `shared` (if given) with the log end it was read at."""
    logs = node.logs.manager
    log_dir = shape.log_dir
    worker = logs.worker(log_dir)
    if worker is None or not loop_may_read(logs, log_dir, worker):
        return None
    leo = plog.log_end_offset  # before the read: a leader's log end only grows, so an equal one later is the read's
    try:
        got = plog.read_to_end_cached(offset, shape.read_limit)
    except Exception:  # WouldBlock, or a failure the general way reports
        return None
    if got is not None and shared is not None:
        shared[(plog, offset, shape.read_limit)] = (got, leo)
    return got


def _read_again(shared: dict[Any, Any], plog: Any, offset: int, limit: int) -> tuple[bytes, int, int] | None:
    """What another follower woken by the same append read from `offset` with the same limit, while the log end,
    HW and log start are still those it read: then the bytes from `offset` to the log end are the same (a
    leader's log is only appended to; a truncation would have moved its end first), and so is the answer."""
    kept = shared.get((plog, offset, limit))
    if kept is None:
        return None
    got, leo = kept
    if leo != plog.log_end_offset or got[1] != plog.high_watermark or got[2] != plog.log_start_offset:
        return None
    return got  # type: ignore[no-any-return]


def _answer_parts(version: int, name: str, topic_id: Any, partition: int,
                  read_committed: bool) -> tuple[struct.Struct, bytes, bytes]:
    """The fixed parts of the plain answer (one topic, one partition, no error, no aborted transaction, no tagged
    field) at `version` (12+): the struct of the response header (correlation id, no tagged fields), the bytes
    up to the partition's HW and its HW, LSO and log start; those bytes; and the bytes between the log start and
    the records (the aborted transactions, null or empty, and PreferredReadReplica -1)."""
    if version >= 13:
        topic = topic_id.bytes
    else:
        encoded = name.encode()
        topic = write_uvarint(len(encoded) + 1) + encoded
    head = _TOP.pack(0, 0, 0) + b"\x02" + topic + b"\x02" + _INDEX.pack(partition, 0)
    tail = (b"\x01" if read_committed else b"\x00") + _PREFERRED.pack(-1)
    return struct.Struct(f">iB{len(head)}sqqq"), head, tail


def _packed(answer: struct.Struct, head: bytes, tail: bytes, corr: int, hw: int, log_start: int,
            records: bytes) -> bytes:
    """The plain answer's bytes; the records end with the partition's, the topic's and the response's empty
    tagged fields."""
    n = len(records) + 1  # the compact records' length, a varint: two bytes for a batch or two of 1 KiB records
    size = UV1[n] if n < 0x80 else bytes(((n & 0x7F) | 0x80, n >> 7)) if n < 0x4000 else write_uvarint(n)
    return answer.pack(corr, 0, head, hw, hw, log_start) + tail + size + records + b"\x00\x00\x00"


def plain_answer(version: int, name: str, topic_id: Any, partition: int, read_committed: bool, corr: int, hw: int,
                 log_start: int, records: bytes) -> bytes:
    """The reply the short way writes for these fields (its header included): what tests hold against the
    generated encoder."""
    return _packed(*_answer_parts(version, name, topic_id, partition, read_committed), corr, hw, log_start, records)


def _general(router: Any, route: Any, frame: Any, ctx: Any, corr: int, deadline: float, *,
             recheck: bool = False) -> Any:
    """What the general way answers for this fetch, its checks and the follower's position already done here:
    `_FollowerFetch` with nothing decided and the fetch's own deadline, its answer encoded by the router.
    `recheck`: the checks made again first (a parked fetch whose leadership changed: `_Parked.woken`)."""
    from kjbod.broker.router import Request

    client_id, pos = read_request_header(frame, route.header_version)
    body, _end = route.decode_from(frame, pos, route.version)
    request = Request(ctx, route.entry.api_key, route.version, corr, client_id)
    ff = general._FollowerFetch(node=router.node, request=request, body=body,
                                follower=replication.follower_id(body, route.version), decided={},
                                deadline=deadline)
    if recheck:
        ff.recheck()
    result = ff.answer()
    if result.__class__ is Later:
        return result.then(lambda response: router._reply(route, request, response))
    return router._reply(route, request, result)


class _Parked:
    """A shape's fetch at the log end, waiting for the next append to its partition or its max_wait_ms (Kafka's
    DelayedFetch), answered in the callback that wakes it.

    Its max_wait_ms is watched by its shape's timer, one per follower connection, not one made and cancelled per
    fetch: a follower parks a fetch per record (500 a second in the latency rounds), and the append almost always
    wakes it long before max_wait_ms. The timer, armed for the first fetch's wait, is left running when an append
    wakes that fetch; when it fires, it expires the fetch then parked if that one's wait is over, else waits again
    for what is left of it. So each fetch still expires at its own max_wait_ms, and the timer runs about once per
    max_wait_ms. A second fetch parked on the same connection while one is (a client that does not wait for its
    answers) gets a timer of its own.

    A fetch that has a small read to send when it arrives or is woken, but that the loop may not make because the
    dir's worker is busy with the partition's next appends (`_append_coming`), waits for their wake-ups,
    those appends' only: each wake-up while it waits is one of them answered, and one that finds the worker busy
    again with more than what is left of them (a producer keeping it so) takes the general way, so a steady
    stream of appends cannot hold it to its max_wait_ms."""

    __slots__ = ("router", "route", "shape", "frame", "ctx", "corr", "offset", "deadline", "later", "timer",
                 "waits_for")

    def __init__(self, router: Any, route: Any, shape: Shape, frame: Any, ctx: Any, corr: int, offset: int,
                 wait_s: float) -> None:
        self.router, self.route, self.shape, self.frame, self.ctx = router, route, shape, frame, ctx
        self.corr, self.offset = corr, offset
        self.deadline = time.monotonic() + wait_s
        self.later = Later()
        self.timer: asyncio.TimerHandle | None = None  # its own max_wait_ms timer, when not its shape's
        # The appends in flight it still waits for (`_append_coming`); -1 before it has waited for any.
        self.waits_for = -1

    def park(self, wait_s: float) -> Later:
        """Wait for an append to the partition, or `wait_s` (what is left of the fetch's max_wait_ms)."""
        shape = self.shape
        self.router.node.parked_fetches.park(shape.keys, self.woken, follower=True)
        if shape.parked is None or shape.parked is self:
            shape.parked = self
            if shape.timer is None:
                shape.timer = shape.loop.call_later(wait_s, _shape_timer, shape)
            # else the running timer fires at or before this fetch's deadline, and waits again for what is left
        else:
            self.timer = shape.loop.call_later(wait_s, self._expired)
        if trace.ON:
            trace.event("ff_parked", shape.follower)
        return self.later

    def _expired(self) -> None:
        """Its max_wait_ms: no longer parked (node.parked_fetches drops a callback it runs, not this one)."""
        self.router.node.parked_fetches.unpark(self.shape.keys, self.woken, follower=True)
        self.woken()

    def woken(self) -> None:
        """The next append (or every parked fetch woken at shutdown: node.parked_fetches has dropped it), or the
        fetch's max_wait_ms (`_expired`): look again, in that callback."""
        shape = self.shape
        if shape.parked is self:
            shape.parked = None  # its shape's timer, left running, now watches nothing (or the next fetch)
        elif self.timer is not None:
            self.timer.cancel()  # a timer that ran takes a cancel as nothing
            self.timer = None
        later = self.later
        if later.done():  # cancelled: the connection went away
            return
        if self.waits_for > 0:
            self.waits_for -= 1  # one of the appends it waits for answered (any other wake-up only ends it sooner)
        node = self.router.node
        try:
            reply = None
            plog = shape.plog
            state = shape.state
            if state.role is not LEADER or state.leader_epoch != shape.leader_epoch:
                # The leadership or its epoch changed while it waited: the general way checks it again and answers
                # the error (Kafka's DelayedFetch looks at the partition again when it completes).
                reply = _general(self.router, self.route, self.frame, self.ctx, self.corr, 0.0, recheck=True)
            elif self.offset != plog.log_end_offset:  # records to send
                reply = _read(self.router, self.route, shape, self.offset, self.corr, node.parked_fetches.shared)
                most = APPENDS_WAITED if self.waits_for < 0 else self.waits_for
                if (reply is None and not node.stopping
                        and _append_coming(node, shape, plog, self.offset, most)):
                    left = self.deadline - time.monotonic()
                    if left > 0:  # the worker is busy with the next appends: the last one's wake-up reads them all
                        self.waits_for = plog.appends_in_flight
                        self.park(left)
                        return
            elif not node.stopping and not shape.plog.closed:  # a long poll must not hold up a SIGTERM
                left = self.deadline - time.monotonic()
                if left > 0:
                    self.park(left)  # nothing new yet (a wake-up of all, or a truncation's)
                    return
            if reply is None:
                if node.stopping:
                    self.deadline = 0.0  # a long poll must not hold up a SIGTERM
                reply = _general(self.router, self.route, self.frame, self.ctx, self.corr, self.deadline)
        except Exception as e:  # the handler's bug: the connection closes, the append that woke it goes on
            later.fail(e)
            return
        if reply.__class__ is Later:
            reply.on_done(self._copy)
        else:
            later.resolve(reply)

    def _copy(self, done: Later) -> None:
        """The general way's reply, read by the dirs' workers, is this fetch's."""
        try:
            value = done.result()
        except Exception as e:
            self.later.fail(e)
            return
        if self.later.done():  # cancelled meanwhile (the connection went): nobody sends the file regions read
            for part in value if value.__class__ is list else ():
                if part.__class__ is FileRegion:
                    part.close()
            return
        self.later.resolve(value)


def _shape_timer(shape: Shape) -> None:
    """A shape's timer: the fetch parked on it now expires if its max_wait_ms is over, else the timer waits for
    what is left of it (see `_Parked`)."""
    shape.timer = None
    parked = shape.parked
    if parked is None:
        return
    left = parked.deadline - time.monotonic()
    if left > 0:
        shape.timer = shape.loop.call_later(left, _shape_timer, shape)
        return
    parked._expired()
