"""The share-partition leader (KIP-932): what ShareFetch and ShareAcknowledge act on, one per broker node.

Strategy: the decisions are kjbod.broker.share.partition's (one SharePartition per group and topic-partition led
here) and kjbod.broker.share.sessions'; this module does their I/O on the event loop: loading a share-partition's
state through the persister the first time it is used (or when the leader epoch changed since), resolving a start
offset of -1 by share.auto.offset.reset, reading record batches through the partition's log dir worker (never file
I/O on the loop), and writing the state back through the persister after each change (acknowledgements, releases,
lock timeouts).  As in Kafka 4.3, a write that fails rolls back the acknowledgement or the leaving member's release
it carried, but never a lock timeout's release, which stands whatever the write's answer.

As in Kafka, the leader does not ask the group coordinator whether a member exists: any member id (at most 36
characters) may fetch.  A share-partition with no persisted state yet is initialized here (start offset -1), where
Kafka's leader refuses the fetch: the group coordinator initializes it before it assigns the partition, so only a
member that never heartbeated (this package's raw-request tests) relies on it; to be dropped with those tests.
"""

from __future__ import annotations

import asyncio
import re
import struct
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog

from kjbod.broker.dir_work import DirWork
from kjbod.broker.share.group_config import share_group_config
from kjbod.broker.share.partition import SharePartition, Undo
from kjbod.broker.share.persister import InitializeData, WriteData, persister_of
from kjbod.broker.share.sessions import DEFAULT_MAX_SESSIONS, ShareSessions
from kjbod.protocol.errors import ErrorCode
from kjbod.storage.errors import StorageError

log = structlog.get_logger("kjbod.share")

DIR_WAIT_S = 5.0  # how long a read waits for its dir's worker before the partition answers REQUEST_TIMED_OUT

_HEADER = struct.Struct(">qi")  # base offset, batch length (after these 12 bytes)
_ATTRS = struct.Struct(">hi")  # attributes, last offset delta (at byte 21)
_PID = struct.Struct(">q")  # producer id (at byte 43)
_TRANSACTIONAL, _CONTROL = 0x10, 0x20


class ShareError(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or str(code))
        self.code = code
        self.message = message


@dataclass
class Batch:
    base: int
    last: int
    start: int  # byte positions in the read's bytes
    end: int
    aborted: bool = False


def parse_batches(data: bytes) -> list[Batch]:
    """The record batches (magic 2) in bytes read from a log: offsets and byte ranges; a partial tail is left out."""
    out: list[Batch] = []
    pos, n = 0, len(data)
    while pos + 61 <= n:
        base, length = _HEADER.unpack_from(data, pos)
        end = pos + 12 + length
        if end > n:
            break
        _attrs, delta = _ATTRS.unpack_from(data, pos + 21)
        out.append(Batch(base, base + delta, pos, end))
        pos = end
    return out


def mark_aborted(data: bytes, batches: list[Batch], aborted: list[tuple[int, int]]) -> None:
    """read_committed, as Kafka's consumer filters: a transactional data batch of a producer whose aborted
    transaction (producer id, first offset) began at or before it, until that producer's abort marker, is aborted."""
    pending = sorted(aborted, key=lambda a: a[1])
    open_aborts: set[int] = set()
    i = 0
    for b in batches:
        while i < len(pending) and pending[i][1] <= b.base:
            open_aborts.add(pending[i][0])
            i += 1
        attrs = _ATTRS.unpack_from(data, b.start + 21)[0]
        if not attrs & _TRANSACTIONAL:
            continue
        pid = _PID.unpack_from(data, b.start + 43)[0]
        if attrs & _CONTROL:
            open_aborts.discard(pid)
        elif pid in open_aborts:
            b.aborted = True


_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (share.auto.offset.reset=by_duration:PnDTnHnMn.nS) in milliseconds, or None."""
    m = _DURATION.match(text.strip())
    if m is None or text.strip() in ("P", "PT"):
        return None
    d, h, mi, s = m.groups()
    return int(((int(d or 0) * 24 + int(h or 0)) * 60 + int(mi or 0)) * 60_000 + float(s or 0) * 1000)


async def on_dir(node: Any, plog: Any, fn: Any) -> Any:
    """`fn()` run where reads of the partition's log dir run (its worker; the page cache on the loop when that
    cannot wait); its result or its exception."""
    box: dict[str, Any] = {}

    def fill(_item: Any, result: Any) -> None:
        box["r"] = result

    def fail(_item: Any, e: BaseException | None) -> None:
        box["e"] = e if e is not None else ShareError(ErrorCode.REQUEST_TIMED_OUT,
                                                      f"the log dir of {plog.name} did not answer in time")

    work = DirWork(node, fill, fail)
    work.add(plog.log_dir, None)
    pending = work.run(lambda items: [fn() for _ in items], DIR_WAIT_S, cached_first=True)
    if pending is not None:
        await pending
    if "e" in box:
        raise box["e"]
    r = box["r"]
    if isinstance(r, BaseException):
        raise r
    return r


def persister_error(code: int) -> int:
    """The error a share-partition answers for the persister's `code`, as Kafka's share-partition maps them: a
    fenced leader or state epoch is NOT_LEADER_OR_FOLLOWER (the client looks for the leader again), a coordinator
    moving or loading COORDINATOR_NOT_AVAILABLE, anything else not Kafka's own UNKNOWN_SERVER_ERROR."""
    if code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                ErrorCode.COORDINATOR_NOT_AVAILABLE):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return code
    return ErrorCode.UNKNOWN_SERVER_ERROR


# answers after which the cached share-partition is stale (another leader or state epoch owns the state, or the
# state is gone): it is dropped and loaded afresh on next use, as Kafka's fenced share-partition handler does
FENCED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.GROUP_ID_NOT_FOUND,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


def error_of(e: BaseException) -> tuple[int, str | None]:
    """The error a share-partition answers for an exception raised while serving it, never a traceback to the
    client: a refusal's own code, a log dir failure KAFKA_STORAGE_ERROR (an OSError the seam did not turn into
    one too), anything else UNKNOWN_SERVER_ERROR (logged)."""
    if isinstance(e, ShareError):
        return e.code, e.message
    if isinstance(e, StorageError):
        return e.error_code, e.message
    code = getattr(e, "code", None)
    if isinstance(code, int) and not isinstance(e, OSError):  # AckError and other refusals with a Kafka code
        return code, getattr(e, "message", None) or str(e) or None
    if isinstance(e, OSError):
        return ErrorCode.KAFKA_STORAGE_ERROR, str(e) or None
    log.error("share_partition_failed", exc_info=e)
    return ErrorCode.UNKNOWN_SERVER_ERROR, str(e) or type(e).__name__


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


@dataclass(frozen=True)
class Released:
    """One share-partition's release of a leaving member's records, waiting for its state write."""
    topic_id: UUID
    partition: int
    leader_epoch: int
    sp: SharePartition
    undo: Undo


class ShareLeader:
    """The node's share-partitions and share sessions."""

    def __init__(self, node: Any) -> None:
        self.node = node
        config = getattr(node, "config", None)
        self.sessions = ShareSessions(config.group_share_max_share_sessions if config is not None
                                      else DEFAULT_MAX_SESSIONS)
        self.partitions: dict[tuple[str, UUID, int], tuple[int, SharePartition]] = {}  # -> (leader epoch, state)
        self._loading: dict[tuple[str, UUID, int], asyncio.Future[Any]] = {}
        self._image: Any = None  # the metadata image `prune` last saw
        # per share-partition: one state write at a time, each carrying the state as it is when it goes (so a
        # later state never lands before an earlier one, whatever the persister's retries do); a caller whose
        # change a write that began after it asked already carried shares that write's answer
        self._write_locks: dict[tuple[str, UUID, int], asyncio.Lock] = {}
        self._asked: dict[tuple[str, UUID, int], int] = {}  # writes asked for
        self._answered: dict[tuple[str, UUID, int], tuple[int, tuple[int, str | None]]] = {}  # (covering, answer)
        registry = getattr(node, "connection_registry", None)
        if registry is not None:
            registry.closed_hooks.append(self.connection_closed)

    def settings(self, group_id: str) -> dict[str, Any]:
        return share_group_config(self.node, group_id)

    async def partition(self, group_id: str, topic_id: UUID, partition: int, plog: Any,
                        leader_epoch: int) -> SharePartition:
        """The group's state of a partition this node leads at `leader_epoch`, loaded on first use."""
        key = (group_id, topic_id, partition)
        held = self.partitions.get(key)
        if held is not None and held[0] == leader_epoch:
            return held[1]
        loading = self._loading.get(key)
        if loading is not None:
            await asyncio.shield(loading)
            return await self.partition(group_id, topic_id, partition, plog, leader_epoch)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            sp = await self._load(group_id, topic_id, partition, plog, leader_epoch)
            self.partitions[key] = (leader_epoch, sp)
            return sp
        finally:
            del self._loading[key]
            future.set_result(None)

    async def _load(self, group_id: str, topic_id: UUID, partition: int, plog: Any,
                    leader_epoch: int) -> SharePartition:
        persister = persister_of(self.node)
        answer = (await persister.read(group_id, [(topic_id, partition, leader_epoch)]))[(topic_id, partition)]
        # never initialized (the in-memory persister's UNKNOWN_TOPIC_OR_PARTITION, the share coordinator's
        # INVALID_REQUEST): see the docstring
        if answer.error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST):
            init = await persister.initialize(group_id, [InitializeData(topic_id, partition, 0, -1)])
            if init[(topic_id, partition)].error_code == 0:
                answer = (await persister.read(group_id, [(topic_id, partition, leader_epoch)]))[
                    (topic_id, partition)]
        if answer.error_code:
            raise ShareError(persister_error(answer.error_code), answer.error_message)
        settings = self.settings(group_id)
        start = answer.start_offset
        if start < 0:
            start = await self._reset_offset(plog, str(settings["share.auto.offset.reset"]))
        sp = SharePartition.loaded(answer, start, lock_ms=int(settings["share.record.lock.duration.ms"]),
                                   delivery_count_limit=int(settings["share.delivery.count.limit"]),
                                   max_record_locks=int(settings["share.partition.max.record.locks"]))
        sp.update_log_start(plog.log_start_offset)
        if start != answer.start_offset:
            code, message = await self.persist(group_id, topic_id, partition, sp, leader_epoch)
            if code:
                raise ShareError(code, message)
        return sp

    async def _reset_offset(self, plog: Any, reset: str) -> int:
        """share.auto.offset.reset: latest (the high watermark), earliest (the log start), or
        by_duration:<ISO-8601 duration> (the first record at or after now minus the duration; the high watermark
        when there is none)."""
        if reset == "earliest":
            return int(plog.log_start_offset)
        if reset.startswith("by_duration:"):
            ms = duration_ms(reset.split(":", 1)[1])
            if ms is not None:
                target = int(time.time() * 1000) - ms
                found = await on_dir(self.node, plog, lambda: plog.offset_for_timestamp(target))
                return int(found[0]) if found is not None else int(plog.high_watermark)
        return int(plog.high_watermark)

    async def persist(self, group_id: str, topic_id: UUID, partition: int, sp: SharePartition,
                      leader_epoch: int) -> tuple[int, str | None]:
        """Write the share-partition's state: (0, None), or the error the share-partition answers for the
        refusal (`persister_error`), logged; a fenced share-partition is dropped from the cache (`FENCED`).
        Writes of one share-partition go one at a time, each with the latest state (see `__init__`)."""
        key = (group_id, topic_id, partition)
        asked = self._asked[key] = self._asked.get(key, 0) + 1
        lock = self._write_locks.setdefault(key, asyncio.Lock())
        async with lock:
            done = self._answered.get(key)
            if done is not None and done[0] >= asked:
                return done[1]
            covering = self._asked[key]
            answer = await self._write(group_id, topic_id, partition, sp, leader_epoch)
            self._answered[key] = (covering, answer)
        return answer

    async def _write(self, group_id: str, topic_id: UUID, partition: int, sp: SharePartition,
                     leader_epoch: int) -> tuple[int, str | None]:
        try:
            answer = (await persister_of(self.node).write(group_id, [WriteData(
                topic_id, partition, sp.state_epoch, leader_epoch, sp.start_offset, sp.state_batches(),
                sp.delivery_complete_count())]))[(topic_id, partition)]
            raw, message = answer.error_code, answer.error_message
        except Exception as e:  # a persister fault is this partition's error, never the request's traceback
            log.warning("share_state_write_raised", group=group_id, topic_id=str(topic_id), partition=partition,
                        exc_info=True)
            raw, message = ErrorCode.UNKNOWN_SERVER_ERROR, str(e) or type(e).__name__
        if not raw:
            return 0, None
        code = persister_error(raw)
        log.warning("share_state_write_failed", group=group_id, topic_id=str(topic_id), partition=partition,
                    error=error_name(raw), message=message)
        if code in FENCED:
            self.evict(group_id, topic_id, partition, sp)
        return code, message

    def evict(self, group_id: str, topic_id: UUID, partition: int, sp: SharePartition | None = None) -> None:
        """Drop a cached share-partition (only `sp`, when given, not a newer one loaded meanwhile): the next use
        reads its state from the persister again."""
        key = (group_id, topic_id, partition)
        held = self.partitions.get(key)
        if held is not None and (sp is None or held[1] is sp):
            self._drop(key)

    def _drop(self, key: tuple[str, UUID, int]) -> None:
        del self.partitions[key]
        lock = self._write_locks.get(key)
        if lock is None or not lock.locked():  # a write under way keeps its bookkeeping until the next drop
            self._write_locks.pop(key, None)
            self._asked.pop(key, None)
            self._answered.pop(key, None)

    def release_member(self, group_id: str, member_id: str) -> list[Released]:
        """Release the records `member_id` holds in every share-partition of the group, held until their state
        write answers (`settle_releases`); the partitions changed."""
        changed = []
        for (g, topic_id, p), (epoch, sp) in self.partitions.items():
            if g == group_id and (undo := sp.release_member(member_id, hold=True)):
                changed.append(Released(topic_id, p, epoch, sp, undo))
        return changed

    async def settle_releases(self, group_id: str, released: list[Released]) -> None:
        """Write each released share-partition's state: a write that fails rolls its release back (the records
        are the member's again until their locks run out), as Kafka 4.3's; one that holds confirms it."""
        for r in released:
            code, _message = await self.persist(group_id, r.topic_id, r.partition, r.sp, r.leader_epoch)
            if code:
                r.sp.rollback(r.undo, time.monotonic())
            else:
                r.sp.confirm(r.undo)

    async def close_session(self, group_id: str, member_id: str) -> None:
        if self.sessions.close(group_id, member_id) is not None:
            await self._member_left(group_id, self.release_member(group_id, member_id))

    def connection_closed(self, connection_id: int) -> None:
        for session in self.sessions.connection_closed(connection_id):
            changed = self.release_member(session.group_id, session.member_id)
            task = asyncio.get_running_loop().create_task(self._member_left(session.group_id, changed))
            _background.add(task)
            task.add_done_callback(_background.discard)

    async def _member_left(self, group_id: str, changed: list[Released]) -> None:
        """After a member's session ended: its released records written, and once the group has no share
        session here any more, its share-partitions dropped from the cache (Kafka's onGroupEmpty), so that what
        the group coordinator does to an empty group's state (AlterShareGroupOffsets, DeleteShareGroupOffsets,
        DeleteGroups) is what the next fetch loads."""
        await self.settle_releases(group_id, changed)
        if not self.sessions.has_group(group_id):
            self.evict_group(group_id)

    def evict_group(self, group_id: str) -> None:
        for key in [k for k in self.partitions if k[0] == group_id]:
            self._drop(key)

    def prune(self) -> None:
        """Drop the cached share-partitions of partitions this node no longer leads or whose topic is gone (Kafka's
        partition listener: becoming a follower, deleted, failed); checked once per new metadata image."""
        image = getattr(self.node, "metadata", None)
        if image is None or image is self._image:
            return
        self._image = image
        for key in list(self.partitions):
            topic = image.topic_by_id(key[1])
            info = topic.partitions.get(key[2]) if topic is not None else None
            if info is None or info.leader != self.node.node_id:
                self._drop(key)


_background: set[asyncio.Task[Any]] = set()


def share_leader_of(node: Any) -> ShareLeader:
    leader = getattr(node, "share_leader", None)
    if leader is None:
        leader = node.share_leader = ShareLeader(node)
    return leader
