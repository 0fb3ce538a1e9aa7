"""Leader and ISR changes for one partition, as Kafka's PartitionChangeBuilder computes them (election ONLINE).

A replica may lead when it is not the broker being removed, its broker is active (registered, unfenced, not
in controlled shutdown) or is the broker being added, and its log dir is online.  The ISR loses the removed
broker, but is never written empty: when its last member goes, the record says leader -1 and leaves the ISR
as it was (no ELR, no unclean election), so the partition waits for that broker.  Returns None when nothing
changes (Kafka drops no-op records).
"""

from __future__ import annotations

from uuid import UUID

from kjbod.metadata import DIR_LOST, DIR_MIGRATING, DIR_UNASSIGNED, NO_LEADER, MetadataImage, PartitionImage
from kjbod.protocol.generated import PartitionChangeRecord


def has_online_dir(image: MetadataImage, broker_id: int, dir_id: UUID | None) -> bool:
    reg = image.brokers.get(broker_id)
    if reg is None:
        return False
    if not reg.log_dirs or dir_id is None or dir_id in (DIR_UNASSIGNED, DIR_MIGRATING):
        return True
    if dir_id == DIR_LOST:
        return False
    return dir_id in reg.log_dirs


def elect(image: MetadataImage, topic_id: UUID, p: PartitionImage, *, remove: int | None = None,
          add: int | None = None) -> PartitionChangeRecord | None:
    def acceptable(r: int) -> bool:
        if r == remove:
            return False
        reg = image.brokers.get(r)
        active = r == add or (reg is not None and reg.active)
        return active and has_online_dir(image, r, p.directory_of(r))

    target_isr = [r for r in p.isr if r != remove]
    if p.leader in target_isr and acceptable(p.leader):
        leader = p.leader
    else:
        leader = next((r for r in p.replicas if r in target_isr and acceptable(r)), NO_LEADER)
    rec = PartitionChangeRecord(partition_id=p.partition, topic_id=topic_id)
    changed = False
    if target_isr and tuple(target_isr) != p.isr:
        rec.isr = target_isr
        changed = True
    if leader != p.leader:
        rec.leader = leader
        changed = True
    return rec if changed else None


def with_directory(topic_id: UUID, p: PartitionImage, broker_id: int, dir_id: UUID) -> PartitionChangeRecord | None:
    """The record moving `broker_id`'s replica of `p` to `dir_id` (Kafka's PartitionChangeBuilder.setDirectory),
    Directories written for the whole replica list; None when the metadata already says so."""
    if p.directory_of(broker_id) == dir_id:
        return None
    dirs = list(p.directories) if len(p.directories) == len(p.replicas) else [DIR_UNASSIGNED] * len(p.replicas)
    dirs[p.replicas.index(broker_id)] = dir_id
    return PartitionChangeRecord(topic_id=topic_id, partition_id=p.partition, directories=dirs)


def remove_from_isrs(image: MetadataImage, broker_id: int) -> list[PartitionChangeRecord]:
    """Every partition whose ISR holds `broker_id` loses it (and its leadership)."""
    out = []
    for topic in image.topics_by_id.values():
        for p in topic.partitions.values():
            if broker_id in p.isr:
                rec = elect(image, topic.topic_id, p, remove=broker_id)
                if rec is not None:
                    out.append(rec)
    return out


def elect_where_leaderless(image: MetadataImage, broker_id: int) -> list[PartitionChangeRecord]:
    """Partitions without a leader that `broker_id`, now unfenced, may lead."""
    out = []
    for topic in image.topics_by_id.values():
        for p in topic.partitions.values():
            if p.leader == NO_LEADER and broker_id in p.isr:
                rec = elect(image, topic.topic_id, p, add=broker_id)
                if rec is not None:
                    out.append(rec)
    return out


def leads_any(image: MetadataImage, broker_id: int) -> bool:
    return any(p.leader == broker_id for t in image.topics_by_id.values() for p in t.partitions.values())
