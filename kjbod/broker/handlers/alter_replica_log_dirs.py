"""AlterReplicaLogDirs (key 34), versions 1-2 (KIP-113).

Version notes: v1 is the oldest served (same body as v0; v1 exists to mark throttling after the response);
v2 is flexible.

Per replica, in the order of Kafka's ReplicaManager.alterReplicaLogDirs (the request is flattened to one path
per partition; a partition named twice keeps the last path, and answers once):

1. the future dir name ``<topic>-<partition>.<32 hex>-future`` longer than 255 characters:
   INVALID_TOPIC_EXCEPTION;
2. a path that is not, character for character, one of the configured log dirs (absolute and normalised, as
   DescribeLogDirs prints them): LOG_DIR_NOT_FOUND; a configured dir that is offline: KAFKA_STORAGE_ERROR;
   a hosted partition whose own dir is offline: KAFKA_STORAGE_ERROR;
3. the dir is remembered for a partition this node does not host yet (created there when it arrives:
   CreateTopics or auto-creation honour it); such a partition answers REPLICA_NOT_AVAILABLE when its topic
   exists and UNKNOWN_TOPIC_OR_PARTITION otherwise (Kafka remembers the dir in both cases);
4. the partition's current dir: cancels a move in progress (that is how a move is cancelled), else nothing;
5. another dir: starts the move, or redirects the one in progress (its future log is discarded first).

NONE means "accepted, or nothing to do", not "moved": DescribeLogDirs shows the progress. kjbod extension
(KIP-113's original text): the path "any" cancels a move in progress and forgets a remembered dir.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse
from kjbod.protocol.generated.alter_replica_log_dirs_response import (
    AlterReplicaLogDirPartitionResult as PartitionResult,
)
from kjbod.protocol.generated.alter_replica_log_dirs_response import (
    AlterReplicaLogDirTopicResult as TopicResult,
)

ANY = "any"
MAX_DIR_NAME = 255
# "-<partition>.<32 hex>-future" around the topic name
_FUTURE_NAME_EXTRA = 1 + 1 + 32 + len("-future")


def _hosted_elsewhere_code(node, topic: str, partition: int) -> int:
    state = node.metadata.topic(topic)
    if state is not None and partition in state.partitions:
        if node.logs.partition_offline(topic, partition):
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.REPLICA_NOT_AVAILABLE
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def alter_one(node, topic: str, partition: int, path: str, online: dict[str, bool]) -> int:
    storage = node.logs
    manager = storage.manager
    mover = node.mover
    if len(topic) + len(str(partition)) + _FUTURE_NAME_EXTRA > MAX_DIR_NAME:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    current = manager.find(topic, partition)
    if path == ANY:
        storage.preferred_dirs.pop((topic, partition), None)
        if current is None:
            return _hosted_elsewhere_code(node, topic, partition)
        if mover is not None:
            mover.cancel(topic, partition)
        return ErrorCode.NONE
    if path not in online:
        return ErrorCode.LOG_DIR_NOT_FOUND
    if not online[path]:
        return ErrorCode.KAFKA_STORAGE_ERROR
    if current is None:
        storage.preferred_dirs[(topic, partition)] = path
        return _hosted_elsewhere_code(node, topic, partition)
    if not current.online:
        return ErrorCode.KAFKA_STORAGE_ERROR
    if current.log_dir == path:
        if mover is not None:
            mover.cancel(topic, partition)
        if manager.get_future(topic, partition) is not None and (mover is None or
                                                                 mover.destination(topic, partition) is None):
            manager.delete_future_log(topic, partition)
        return ErrorCode.NONE
    if mover is None:
        return ErrorCode.KAFKA_STORAGE_ERROR
    mover.request_move(topic, partition, path)
    return ErrorCode.NONE


@api(AlterReplicaLogDirsRequest)
def handle(node, request, body: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
    wanted: dict[tuple[str, int], str] = {}
    for d in body.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted.pop((t.name, p), None)  # the last path named wins, answered in that position
                wanted[(t.name, p)] = d.path
    online = {info_path: info_online for info_path, info_online in node.logs.dir_states()}
    by_topic: dict[str, list[PartitionResult]] = {}
    for (topic, partition), path in wanted.items():
        code = alter_one(node, topic, partition, path, online)
        by_topic.setdefault(topic, []).append(PartitionResult(partition_index=partition, error_code=code))
    return AlterReplicaLogDirsResponse(
        throttle_time_ms=0, results=[TopicResult(topic_name=t, partitions=ps) for t, ps in by_topic.items()])
