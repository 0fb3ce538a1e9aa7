"""DescribeLogDirs (key 35), versions 1-5 (KIP-113).

Version notes: v1 is the oldest served (per log dir: error, path, replicas with size, offset lag and future
flag); v2 flexible; v3 top-level error code; v4 total and usable bytes of each dir's volume (KIP-827); v5
IsCordoned per dir (KIP-1066: named by cordoned.log.dirs, so it takes no new replicas; false below
metadata.version 4.3-IV0, as Kafka's broker reports it, though the broker still places nothing new there). kjbod
extension from v2: a request that sets the tagged IncludeDirectoryIds (tag 10000) gets each log dir's KIP-858
directory id as a tagged field (tag 10000, a uuid); any other request gets Kafka's response byte for byte, so a
client that refuses unknown tags (kio 0.6.5) never meets it. kjbod's admin client asks; v1 has no tagged fields.

Semantics (Kafka's ReplicaManager.describeLogDirs): null topics reports every replica on the node, a list
reports those partitions (a partition this node lacks is simply absent). One result per configured log dir, in
configuration order. Each dir's size probe runs on the dir's own thread and is waited for at most the manager's
probe timeout (the slow threshold), so a slow or hung disk never holds up the answer for the others. A dir whose
probe is late is answered as slow (degraded, sizes as the dir last counted them) until it has left an operation
unanswered for the manager's ``not_answering_after_s``; from then on it is not answering, answered as an offline dir
is: KAFKA_STORAGE_ERROR with no replicas and sizes -1. kjbod extensions (v2+, tagged): DirState (10001: online,
degraded, full, offline, not-answering), RecentLatencyMs (10002: the dir's slowest recent file operation),
FailedAtMs (10003: when an offline dir failed), ReservedBytes (10004: the bytes kept free,
log.dir.reserved.bytes), StateReason (10005: why a dir is not online: the I/O error or the stalled operation
that took it offline, the operation a dir that does not answer is stuck in, a full dir's free bytes) and
FilesystemId (10006: the device id of the dir's filesystem, from the same probe as the sizes; two dirs with one
id share a filesystem and its free space, which `kjbod balance-disks` needs to know). Per
replica:
size = bytes of its ``.log`` files; offset lag = max(0, HW - LEO) for a current replica (always 0 on a single
node) and current LEO - future LEO for a future replica (is_future). A move that is queued or still in its
bulk-copy phase has no open future log yet: it is reported from the mover's progress (bytes copied so far, and the
offset its copied segments reach), so a move is visible as soon as it is accepted, as in Kafka (whose
AlterReplicaLogDirs creates the future log at once): a queued move shows as an empty future replica whose lag is
the current log end offset. A move resumed at startup is reported from the future log the loader opened, until a
thread takes it. Either way each replica, current or future, appears once (see ``collect``).
"""

from __future__ import annotations

import asyncio
from uuid import UUID

import structlog

from kjbod.broker.authz import allowed_cluster
from kjbod.broker.router import api
from kjbod.metadata.acls import DESCRIBE
from kjbod.metadata.features import cordons_supported
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeLogDirsRequest, DescribeLogDirsResponse
from kjbod.protocol.generated.describe_log_dirs_response import (
    DescribeLogDirsPartition as Partition,
)
from kjbod.protocol.generated.describe_log_dirs_response import (
    DescribeLogDirsResult as Result,
)
from kjbod.protocol.generated.describe_log_dirs_response import (
    DescribeLogDirsTopic as Topic,
)
from kjbod.protocol.runtime import ZERO_UUID, gc_pause, gc_resume
from kjbod.storage.health import DirState
from kjbod.storage.ids import uuid_from_str
from kjbod.storage.manager import probe_answer

log = structlog.get_logger("kjbod.describe_log_dirs")
INT32_MAX = (1 << 31) - 1


def _directory_id(text: str | None) -> UUID:
    if not text:
        return ZERO_UUID
    try:
        return UUID(bytes=uuid_from_str(text))
    except ValueError:
        return ZERO_UUID


def _size(plog) -> int:
    segments = plog.segments
    return segments[0].size if len(segments) == 1 else sum([s.size for s in segments])


_ACTIVE = ("queued", "copying", "catching-up")


def collect(node, wanted: dict[str, set[int]] | None) -> dict[str, dict[str, list[Partition]]]:
    """{log dir: {topic: [partition entries]}} for the requested partitions (None: all).

    Each replica is listed once, a future one too: from the log manager when its future log is open there
    (resumed at startup and still queued, or catching up), else from the mover's progress (accepted and queued,
    or in its bulk copy). The mover threads change that while this runs, so the mover is read first and the
    manager second: a move the manager has no future log for by then is reported from the mover only if it
    has not finished meanwhile (its current log is not in its destination yet).

    The hot path of a large broker (20,000 replicas): one pass, local names, and the cyclic GC paused while
    the entries are built (they all survive; scanning them again and again would make the cost superlinear)."""
    manager = node.logs.manager
    mover = node.mover
    moves = [m for m in mover.all_progress() if m.state in _ACTIVE] if mover is not None else []
    if wanted is not None:
        moves = [m for m in moves if m.partition in wanted.get(m.topic, ())]
    out: dict[str, dict[str, list[Partition]]] = {}
    if wanted is None:
        currents = manager.partitions()
        futures = manager.future_logs()
    else:
        currents, futures = [], []
        for topic, parts in wanted.items():
            for p in sorted(parts):
                plog = manager.find(topic, p)
                if plog is not None:
                    currents.append(plog)
                future = manager.get_future(topic, p)
                if future is not None:
                    futures.append(future)
    paused = gc_pause()
    try:
        leo_of: dict[tuple[str, int], int] = {}
        by_dir: dict[str, list[Partition]] = {}
        last_dir = None
        for plog in currents:
            topic, partition, leo = plog.topic, plog.partition, plog.log_end_offset
            leo_of[(topic, partition)] = leo
            path = plog.io.path
            if path != last_dir:
                by_dir = out.setdefault(path, {})
                last_dir = path
            entries = by_dir.get(topic)
            if entries is None:
                entries = by_dir[topic] = []
            lag = plog.high_watermark - leo
            entries.append(Partition(partition, _size(plog), lag if lag > 0 else 0, False))
        for future in futures:
            tp = (future.topic, future.partition)
            current_leo = leo_of.get(tp)
            if current_leo is None:
                current = manager.find(*tp)
                current_leo = current.log_end_offset if current is not None else None
            lag = max(0, current_leo - future.log_end_offset) if current_leo is not None else -1
            out.setdefault(future.log_dir, {}).setdefault(future.topic, []).append(
                Partition(future.partition, _size(future), lag, True))
    finally:
        if paused:
            gc_resume()
    listed = {(future.topic, future.partition) for future in futures}
    current_in: dict[tuple[str, str], set[int]] = {}  # (dir, topic) -> partitions with their current log there
    for m in moves:
        current_leo = leo_of.get((m.topic, m.partition))
        if current_leo is None or (m.topic, m.partition) in listed:
            continue  # the partition went meanwhile (its topic deleted), or its future log is listed already
        here = current_in.get((m.dest_dir, m.topic))
        if here is None:
            entries = out.get(m.dest_dir, {}).get(m.topic) or []
            here = current_in[(m.dest_dir, m.topic)] = {p.partition_index for p in entries if not p.is_future_key}
        if m.partition in here:
            continue  # the move finished meanwhile: its replica is the current one in its destination
        reached = m.future_log_end_offset or 0
        out.setdefault(m.dest_dir, {}).setdefault(m.topic, []).append(
            Partition(m.partition, m.future_size, max(0, current_leo - reached), True))
    return out


async def probe_sizes(manager) -> dict[str, tuple[int, int, int] | None]:
    """Each online dir's sizes, asked on that dir's own probe thread and waited for at most the manager's probe
    timeout: a dir that does not answer in time is reported from what it last counted (slow) or as not answering
    (see ``LogManager.dir_infos``) instead of holding up the others (and the event loop)."""
    probes = manager.start_probes()
    running = [asyncio.wrap_future(f) for f in probes.values() if not f.done()]
    if running:
        await asyncio.wait(running, timeout=manager.probe_timeout_s)
    return {path: probe_answer(f) for path, f in probes.items()}


@api(DescribeLogDirsRequest)
async def handle(node, request, body: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not allowed_cluster(node, request, DESCRIBE):  # Kafka: DESCRIBE on the cluster, else nothing listed
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED if request.api_version >= 3 else 0  # v1-2: no error field
        return DescribeLogDirsResponse(error_code=code, results=[])
    wanted: dict[str, set[int]] | None = None
    if body.topics is not None:
        wanted = {}
        for t in body.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)
    manager = node.logs.manager
    sizes = await probe_sizes(manager)
    by_dir = collect(node, wanted)
    cordons = cordons_supported(getattr(node, "metadata", None))
    results = []
    for info in manager.dir_infos(sizes):
        # kjbod's extensions go only to a request that asks for them (strict decoders refuse unknown tags).
        extra = ({"directory_id": _directory_id(info.directory_id), "dir_state": info.state.value,
                  "recent_latency_ms": min(info.recent_latency_ms, INT32_MAX), "failed_at_ms": info.failed_at_ms,
                  "reserved_bytes": info.reserved_bytes, "state_reason": info.error or "",
                  "filesystem_id": info.device}
                 if body.include_directory_ids and getattr(node, "extensions_enabled", True) else {})
        if not info.online or info.state is DirState.NOT_ANSWERING:
            if info.online:
                log.warning("log_dir_not_answering", log_dir=info.path, reason=info.error,
                            effect="reported as KAFKA_STORAGE_ERROR with no sizes")
            results.append(Result(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=info.path, topics=[],
                                  total_bytes=-1, usable_bytes=-1, is_cordoned=cordons and info.cordoned, **extra))
            continue
        topics = [Topic(name=name, partitions=parts) for name, parts in by_dir.get(info.path, {}).items()]
        results.append(Result(error_code=0, log_dir=info.path, topics=topics, total_bytes=info.total_bytes,
                              usable_bytes=info.usable_bytes, is_cordoned=cordons and info.cordoned, **extra))
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)
