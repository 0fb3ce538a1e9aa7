"""AlterReplicaLogDirs (key 34), versions 1-2 (KIP-113).

Version notes: v1 is the oldest served (same body as v0; v1 exists to mark throttling after the response);
v2 is flexible.

Per replica, in the order of Kafka's ReplicaManager.alterReplicaLogDirs (the request is flattened to one path
per partition; a partition named twice keeps the last path, and answers once):

1. the future dir name ``<topic>-<partition>.<32 hex>-future`` longer than 255 characters:
   INVALID_TOPIC_EXCEPTION;
2. a path that is not, character for character, one of the configured log dirs (absolute and normalised, as
   DescribeLogDirs prints them): LOG_DIR_NOT_FOUND; a configured dir that is offline: KAFKA_STORAGE_ERROR;
   a hosted partition whose own dir is offline: KAFKA_STORAGE_ERROR; (kjbod) a move into a dir that is not
   answering (an operation outstanding past the size probes' bound, as DescribeLogDirs reports it):
   KAFKA_STORAGE_ERROR, logged with what the dir is stuck in. Making the future dir there would hold the request
   until the stall timeout and past it (a call stuck in the kernel cannot be stopped), where Kafka's handler
   thread would hang; a client retries the error, and the move goes once the dir answers again;
   (KIP-1066) a dir named by cordoned.log.dirs takes no new replica: a move into it, or a dir remembered for a
   replica not here yet, is INELIGIBLE_REPLICA (logged, naming the dir; Kafka 4.3's code for a replica that may
   not go where it is asked to), while moves out of it, and cancelling a move by naming the replica's current
   dir, go on as usual;
3. the dir is remembered for a partition this node does not host yet (created there when it arrives:
   CreateTopics or auto-creation honour it); such a partition answers REPLICA_NOT_AVAILABLE when its topic
   exists and UNKNOWN_TOPIC_OR_PARTITION otherwise (Kafka remembers the dir in both cases);
4. the partition's current dir: cancels a move in progress (that is how a move is cancelled), else nothing;
5. another dir: starts the move, or redirects the one in progress (its future log is discarded first).

NONE means "accepted, or nothing to do", not "moved": DescribeLogDirs shows the progress. It does mean that the
answer survives a crash: a move started or redirected has its ``-future`` dir in the destination, durably, and a
cancelled move has lost its own, before the answer is sent (Kafka creates the future log while it handles the
request, too). That file work is the replica mover's (:meth:`ReplicaMover.request_moves`, one batch per destination
dir: one fsync per log dir, not per partition) and runs in a worker thread while the event loop serves other
requests; a move whose destination fails meanwhile answers KAFKA_STORAGE_ERROR (the dir is offline now), the others
are unaffected. The batches go one per destination dir, each answered on its own: a destination taken offline by a
stall while its batch is stuck in it answers KAFKA_STORAGE_ERROR at once, not when (if ever) the stuck call
returns. A request that changes no move (only errors, remembered dirs, moves already going there) is
answered at once. kjbod extension (KIP-113's original text): the path "any" cancels a move in progress and forgets
a remembered dir.
"""

from __future__ import annotations

import asyncio

import structlog

from kjbod.broker.authz import allowed_cluster
from kjbod.broker.router import api
from kjbod.metadata.acls import ALTER
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse
from kjbod.protocol.generated.alter_replica_log_dirs_response import (
    AlterReplicaLogDirPartitionResult as PartitionResult,
)
from kjbod.protocol.generated.alter_replica_log_dirs_response import (
    AlterReplicaLogDirTopicResult as TopicResult,
)
from kjbod.storage.health import DirState

log = structlog.get_logger("kjbod.alter_replica_log_dirs")

ANY = "any"
DEST_CHECK_S = 0.25  # how often a request waiting for its future dirs looks for a destination that failed
MAX_DIR_NAME = 255
# "-<partition>.<32 hex>-future" around the topic name
_FUTURE_NAME_EXTRA = 1 + 1 + 32 + len("-future")

TopicPartition = tuple[str, int]
Change = tuple[str, int, str | None]  # (topic, partition, destination dir or None to cancel)


def _hosted_elsewhere_code(node, topic: str, partition: int) -> int:
    state = node.metadata.topic(topic)
    if state is not None and partition in state.partitions:
        if node.logs.partition_offline(topic, partition):
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.REPLICA_NOT_AVAILABLE
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _cancel(node, topic: str, partition: int, changes: list[Change]) -> None:
    """A cancel for the mover, when there is something to cancel: a move (being accepted, queued or running), or
    a future log no move owns."""
    mover = node.mover
    if mover is None:
        return
    if mover.destination(topic, partition) is not None or node.logs.manager.get_future(topic, partition) is not None:
        changes.append((topic, partition, None))


def _refuse_cordoned(topic: str, partition: int, path: str) -> int:
    log.warning("replica_move_refused", partition=f"{topic}-{partition}", dest_dir=path, error="INELIGIBLE_REPLICA",
                reason="the destination log dir is cordoned (cordoned.log.dirs): it takes no new replicas")
    return ErrorCode.INELIGIBLE_REPLICA


def alter_one(node, topic: str, partition: int, path: str, online: dict[str, bool], changes: list[Change],
              silent: dict[str, str | None]) -> int:
    """The answer for one partition, from what the event loop can check; a move to start, redirect or cancel is
    added to ``changes`` (the mover's file work may still turn a move's answer into an error)."""
    storage = node.logs
    if len(topic) + len(str(partition)) + _FUTURE_NAME_EXTRA > MAX_DIR_NAME:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    current = storage.manager.find(topic, partition)
    if path == ANY:
        storage.preferred_dirs.pop((topic, partition), None)
        if current is None:
            return _hosted_elsewhere_code(node, topic, partition)
        _cancel(node, topic, partition, changes)
        return ErrorCode.NONE
    if path not in online:
        return ErrorCode.LOG_DIR_NOT_FOUND
    if not online[path]:
        return ErrorCode.KAFKA_STORAGE_ERROR
    cordoned = path in storage.manager.cordoned
    if current is None:
        if cordoned:
            return _refuse_cordoned(topic, partition, path)
        storage.preferred_dirs[(topic, partition)] = path
        return _hosted_elsewhere_code(node, topic, partition)
    if not current.online:
        return ErrorCode.KAFKA_STORAGE_ERROR
    if current.log_dir == path:
        _cancel(node, topic, partition, changes)
        return ErrorCode.NONE
    if cordoned:
        return _refuse_cordoned(topic, partition, path)
    if node.mover is None:
        return ErrorCode.KAFKA_STORAGE_ERROR
    if path in silent:
        log.warning("replica_move_refused", partition=f"{topic}-{partition}", dest_dir=path, reason=silent[path],
                    error="KAFKA_STORAGE_ERROR", effect="the destination dir is not answering; retry once it does")
        return ErrorCode.KAFKA_STORAGE_ERROR
    changes.append((topic, partition, path))  # even one already going there: NONE only once its dir is durable
    return ErrorCode.NONE


def _response(codes: dict[TopicPartition, int]) -> AlterReplicaLogDirsResponse:
    by_topic: dict[str, list[PartitionResult]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(PartitionResult(partition_index=partition, error_code=code))
    return AlterReplicaLogDirsResponse(
        throttle_time_ms=0, results=[TopicResult(topic_name=t, partitions=ps) for t, ps in by_topic.items()])


def _retrieved(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()  # a batch answered without it may fail later: its error is the mover's to log


async def _answer_when_durable(node, codes: dict[TopicPartition, int], changes: list[Change]):
    """Hands the mover one batch per destination dir (cancels in one of their own) and answers each batch when it
    is durable, or, if its destination dir is failed first (a stall: the call stuck in it may never return),
    KAFKA_STORAGE_ERROR for its partitions without waiting for the call any longer."""
    loop = asyncio.get_running_loop()
    batches: dict[str | None, list[Change]] = {}
    for change in changes:
        batches.setdefault(change[2], []).append(change)
    pending: dict[asyncio.Future, str | None] = {}
    for dest, batch in batches.items():
        future = loop.run_in_executor(None, node.mover.request_moves, batch)
        future.add_done_callback(_retrieved)
        pending[future] = dest
    while pending:
        done, _ = await asyncio.wait(pending, timeout=DEST_CHECK_S)
        for future in done:
            pending.pop(future)
            for key, error in future.result().items():
                code = getattr(error, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
                if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                    log.error("replica_move_not_accepted", partition=f"{key[0]}-{key[1]}", error=repr(error))
                codes[key] = code
        if not pending:
            break
        offline = {path for path, online in node.logs.dir_states() if not online}
        for future, dest in list(pending.items()):
            if dest in offline:
                del pending[future]
                for topic, partition, _dest in batches[dest]:
                    codes[(topic, partition)] = ErrorCode.KAFKA_STORAGE_ERROR
                log.warning("replica_moves_answered_without_their_dir", dest_dir=dest, partitions=len(batches[dest]),
                            error="KAFKA_STORAGE_ERROR",
                            effect="the destination dir failed while its future dirs were being made")
    return _response(codes)


@api(AlterReplicaLogDirsRequest)
def handle(node, request, body: AlterReplicaLogDirsRequest):
    wanted: dict[TopicPartition, str] = {}
    for d in body.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted.pop((t.name, p), None)  # the last path named wins, answered in that position
                wanted[(t.name, p)] = d.path
    if not allowed_cluster(node, request, ALTER):  # Kafka: ALTER on the cluster, else every partition refused
        return _response(dict.fromkeys(wanted, ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    infos = node.logs.manager.dir_infos({})  # touches no disk: each dir's state from its outstanding operations
    online = {i.path: i.online for i in infos}
    silent = {i.path: i.error for i in infos if i.online and i.state is DirState.NOT_ANSWERING}
    changes: list[Change] = []
    codes = {key: alter_one(node, key[0], key[1], path, online, changes, silent) for key, path in wanted.items()}
    if not changes:
        return _response(codes)
    return _answer_when_durable(node, codes, changes)
