"""KIP-858 on the controller: where each replica lives (AssignReplicasToDirs, key 73) and failed log dirs
(BrokerHeartbeat's OfflineLogDirs).

AssignReplicasToDirs follows Kafka's ReplicationControlManager.handleAssignReplicasToDirs: the broker epoch
first (no registration or another epoch: STALE_BROKER_EPOCH for the whole request); then per topic an unknown id
(UNKNOWN_TOPIC_ID for each of its partitions); per partition one that does not exist
(UNKNOWN_TOPIC_OR_PARTITION) or that the broker does not host (NOT_LEADER_OR_FOLLOWER).  A fenced broker is
answered like an unfenced one: a broker with several dirs reports its placements while it is still fenced (the
KIP keeps it fenced until it has).  A partition moved to a dir that is offline (LOST_DIR, or one of this
broker's dirs that has failed) gets its Directories record and then leader/ISR changes that take this broker
out of it, as Kafka does; a leaderless partition moved to an online dir gets a leader again in its record when
one may lead (Kafka's builder elects whenever the leader is not in the ISR).  Beyond Kafka, which treats any dir it does not see online as offline: a dir id this
broker never registered (and no reserved id) is answered LOG_DIR_NOT_FOUND and written nowhere, since
recording a replica in a dir nobody has would hide it from every later dir failure.

OfflineLogDirs (cumulative in every heartbeat): the newly offline dirs' partitions, and only theirs, lose this
broker as leader and ISR member (leader -1 when no other replica may lead), then a
BrokerRegistrationChangeRecord gives the remaining dirs; the broker stays unfenced.  An id this broker never
registered answers LOG_DIR_NOT_FOUND (KIP-858; Kafka's code ignores it) before the heartbeat changes anything.

"Registered" means in the current registration, or in any registration of this broker the controller has
replayed since it started (BrokerDirs), or named by one of the broker's replicas: a failed dir has left the
registration but is resent in every heartbeat and may still hold replicas.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any
from uuid import UUID

from kjbod.controller.partition_change import elect, with_directory
from kjbod.controller.result import ControllerResult
from kjbod.metadata import DIR_LOST, NO_LEADER, MetadataImage, is_reserved_dir
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    BrokerRegistrationChangeRecord,
    RegisterBrokerRecord,
)
from kjbod.protocol.generated import assign_replicas_to_dirs_response as out


class BrokerDirs:
    """Every dir id each broker has registered since this controller started (its memory, not metadata)."""

    def __init__(self) -> None:
        self._dirs: dict[int, set[UUID]] = {}

    def note(self, broker_id: int, dirs: Iterable[UUID]) -> None:
        self._dirs.setdefault(broker_id, set()).update(dirs)

    def note_records(self, records: Iterable[Any]) -> None:
        for rec in records:
            if isinstance(rec, RegisterBrokerRecord):
                self.note(rec.broker_id, rec.log_dirs)

    def unknown(self, image: MetadataImage, broker_id: int, dir_ids: Iterable[UUID]) -> list[UUID]:
        """The ids in `dir_ids` that `broker_id` never registered (reserved ids are never unknown).  The
        registration and this memory answer almost always; only what they do not know costs a pass over the
        partitions (a replica may still name a dir this controller has not seen registered)."""
        reg = image.brokers.get(broker_id)
        current = {*reg.log_dirs, *reg.offline_dirs} if reg is not None else set()
        remembered = self._dirs.get(broker_id, set())
        left = [d for d in dir_ids if not is_reserved_dir(d) and d not in current and d not in remembered]
        if not left:
            return []
        named: set[UUID] = set()
        for topic in image.topics_by_id.values():
            for p in topic.partitions.values():
                d = p.directory_of(broker_id)
                if d is not None:
                    named.add(d)
        return [d for d in left if d not in named]


def offline_dirs(image: MetadataImage, broker_id: int, epoch: int, reported: list[UUID], *,
                 unclean_default: bool = False, node_id: int | None = None, min_isr_default: int = 1) -> list[Any]:
    """Records for the dirs in `reported` that are still in the broker's registration (the newly failed)."""
    reg = image.brokers[broker_id]
    failed = set(reported)
    newly = [d for d in reg.log_dirs if d in failed]
    if not newly:
        return []
    records: list[Any] = []
    for topic in image.topics_by_id.values():
        for p in topic.partitions.values():
            if p.directory_of(broker_id) in newly:
                rec = elect(image, topic.topic_id, p, remove=broker_id, unclean_default=unclean_default,
                            node_id=node_id, min_isr_default=min_isr_default)
                if rec is not None:
                    records.append(rec)
    records.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch,
                                                  log_dirs=[d for d in reg.log_dirs if d not in failed]))
    return records


def _elect_in_new_dir(image: MetadataImage, topic_id: UUID, p: Any, rec: Any, *, min_isr_default: int = 1,
                      node_id: int | None = None) -> None:
    """A leaderless partition whose replica moves to an online dir (a move reverted after its destination failed,
    say) may get its leader back in the same record: Kafka's PartitionChangeBuilder tries an election whenever
    the leader is not in the ISR, with the new directory counted."""
    elected = elect(image, topic_id, replace(p, directories=tuple(rec.directories)), min_isr_default=min_isr_default,
                    node_id=node_id)
    if elected is not None:
        rec.leader = elected.leader
        if elected.isr is not None:
            rec.isr = elected.isr
        rec.eligible_leader_replicas = elected.eligible_leader_replicas
        rec.last_known_elr = elected.last_known_elr
        rec.leader_recovery_state = elected.leader_recovery_state  # an unclean election's RECOVERING


def assign_replicas_to_dirs(image: MetadataImage, req: AssignReplicasToDirsRequest, dirs: BrokerDirs, *,
                            min_isr_default: int = 1, node_id: int | None = None) -> ControllerResult:
    reg = image.brokers.get(req.broker_id)
    if reg is None or reg.epoch != req.broker_epoch:
        return ControllerResult([], AssignReplicasToDirsResponse(error_code=ErrorCode.STALE_BROKER_EPOCH))
    broker_id = req.broker_id
    unknown_ids = set(dirs.unknown(image, broker_id, [d.id for d in req.directories]))
    records: list[Any] = []
    to_elect: dict[tuple[UUID, int], Any] = {}  # partitions placed in an offline dir, in request order
    response = AssignReplicasToDirsResponse(error_code=0)
    for req_dir in req.directories:
        dir_id = req_dir.id
        offline = dir_id == DIR_LOST or (not is_reserved_dir(dir_id) and dir_id not in reg.log_dirs)
        unknown = dir_id in unknown_ids
        res_dir = out.DirectoryData(id=dir_id)
        for req_topic in req_dir.topics:
            topic = image.topic_by_id(req_topic.topic_id)
            res_topic = out.TopicData(topic_id=req_topic.topic_id)
            for index in req_topic.partitions:
                p = topic.partitions.get(index.partition_index) if topic is not None else None
                if topic is None:
                    code = ErrorCode.UNKNOWN_TOPIC_ID
                elif p is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif broker_id not in p.replicas:
                    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif unknown:
                    code = ErrorCode.LOG_DIR_NOT_FOUND
                else:
                    code = ErrorCode.NONE
                    rec = with_directory(topic.topic_id, p, broker_id, dir_id)
                    if rec is not None:
                        if not offline and p.leader == NO_LEADER:
                            _elect_in_new_dir(image, topic.topic_id, p, rec, min_isr_default=min_isr_default,
                                              node_id=node_id)
                        records.append(rec)
                    if offline:
                        to_elect[(topic.topic_id, p.partition)] = p
                res_topic.partitions.append(out.PartitionData(partition_index=index.partition_index,
                                                              error_code=code))
            res_dir.topics.append(res_topic)
        response.directories.append(res_dir)
    for (topic_id, _), p in to_elect.items():
        rec = elect(image, topic_id, p, remove=broker_id, min_isr_default=min_isr_default, node_id=node_id)
        if rec is not None:
            records.append(rec)
    return ControllerResult(records, response)
