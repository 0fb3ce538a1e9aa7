"""The CurrentLeaderEpoch check of the client APIs that read a partition (a consumer's Fetch, ListOffsets,
OffsetForLeaderEpoch): Kafka's Partition.localLogWithEpochOrThrow, shared by their handlers (no API of its own).

Kafka's order: where the partition is hosted first (the storage's errors: KAFKA_STORAGE_ERROR for an offline
replica, NOT_LEADER_OR_FOLLOWER for a partition of the image this broker holds no log for,
UNKNOWN_TOPIC_OR_PARTITION for one the image lacks), then the epoch the client believes current against the one
this broker knows (the image's): older is FENCED_LEADER_EPOCH (the client refreshes its metadata), newer is
UNKNOWN_LEADER_EPOCH (this broker has not caught up: the client retries); only -1 means "no epoch, no check" (any
other value is compared, so -7 is fenced), then leadership for the APIs that read leaders only
(NOT_LEADER_OR_FOLLOWER).  A follower asked with a stale epoch therefore answers FENCED_LEADER_EPOCH, not
NOT_LEADER_OR_FOLLOWER, as Kafka's does.

The common case (an epoch that matches, on the leader) costs one image lookup on top of the log's.
"""

from __future__ import annotations

from typing import Any

from kjbod.protocol.errors import ErrorCode

NO_EPOCH = -1


class LeaderEpochError(Exception):
    """A CurrentLeaderEpoch this broker does not accept, with the Kafka error code for it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = code


def epoch_error(node: Any, topic: str, partition: int, current_leader_epoch: int) -> LeaderEpochError | None:
    """The error for a client's CurrentLeaderEpoch against this broker's, or None when it passes."""
    if current_leader_epoch == NO_EPOCH:
        return None
    local = node.leader_epoch(topic, partition)
    if current_leader_epoch < local:
        return LeaderEpochError(ErrorCode.FENCED_LEADER_EPOCH,
                                f"{topic}-{partition}: leader epoch {current_leader_epoch} is older than this "
                                f"broker's {local}")
    if current_leader_epoch > local:
        return LeaderEpochError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                                f"{topic}-{partition}: leader epoch {current_leader_epoch} is newer than this "
                                f"broker's {local}")
    return None


def checked_log(node: Any, topic: str, partition: int, current_leader_epoch: int, *, leader_only: bool = True) -> Any:
    """The partition's log for a client that believes `current_leader_epoch` is current: the leader's
    (`node.partition_log`) or, with ``leader_only=False``, any local replica's (`node.local_log`); raises the
    storage's error, a LeaderEpochError or NOT_LEADER_OR_FOLLOWER in Kafka's order (see the module docstring)."""
    try:
        plog = node.partition_log(topic, partition) if leader_only else node.local_log(topic, partition)
    except Exception as e:
        if current_leader_epoch != NO_EPOCH and getattr(e, "error_code", None) == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            # Not the leader: a follower that holds the replica checks the epoch first, as Kafka's does.
            try:
                node.local_log(topic, partition)
            except Exception:
                raise e from None
            wrong = epoch_error(node, topic, partition, current_leader_epoch)
            if wrong is not None:
                raise wrong from None
        raise
    if current_leader_epoch != NO_EPOCH:
        wrong = epoch_error(node, topic, partition, current_leader_epoch)
        if wrong is not None:
            raise wrong
    return plog
