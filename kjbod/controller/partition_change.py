"""Leader and ISR changes for one partition, as Kafka's PartitionChangeBuilder computes them (without ELR).

A replica may lead when it is not the broker being removed, its broker is active (registered, unfenced, not
in controlled shutdown) or is the broker being added, and its log dir is online (Kafka's LeaderAcceptor).  The
target ISR is the current one less the removed broker, or what an AlterPartition asks for.  Elections:

* ONLINE: keep the leader if it is in the target ISR and may lead, else the first replica (in replica order)
  that is; else, where the topic allows unclean elections (`unclean.leader.election.enable`: topic override,
  then the cluster-wide dynamic default, then the controller's own config), the first replica that may lead at
  all, with the ISR set to it alone and LeaderRecoveryState RECOVERING; else no leader (-1).
* PREFERRED: the first replica if it is in the target ISR and may lead, else as ONLINE without the unclean step.
* UNCLEAN: as ONLINE, the unclean step always allowed (ElectLeaders with UNCLEAN).

The ISR is never written empty: when its last member goes, the record says leader -1 and leaves the ISR as it
was, so the partition waits for that broker (or for an unclean election).  Every record bumps the partition
epoch on replay; one that sets Leader bumps the leader epoch too.  Returns None when nothing changes (Kafka drops
no-op records).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from uuid import UUID

from kjbod.metadata import (
    BROKER_RESOURCE,
    DIR_UNASSIGNED,
    NO_LEADER,
    RECOVERING,
    MetadataImage,
    PartitionImage,
    TopicImage,
)
from kjbod.protocol.generated import PartitionChangeRecord

ONLINE, PREFERRED, UNCLEAN = "ONLINE", "PREFERRED", "UNCLEAN"
UNCLEAN_KEY = "unclean.leader.election.enable"


def has_online_dir(image: MetadataImage, broker_id: int, dir_id: UUID | None) -> bool:
    reg = image.brokers.get(broker_id)
    return reg is not None and reg.has_online_dir(dir_id)


def unclean_enabled(image: MetadataImage, topic: TopicImage | None, default: bool = False) -> bool:
    """`unclean.leader.election.enable` for `topic`: its override, the cluster-wide dynamic default, `default`."""
    value = topic.configs.get(UNCLEAN_KEY) if topic is not None else None
    if value is None:
        value = image.resource_configs(BROKER_RESOURCE, "").get(UNCLEAN_KEY)
    return default if value is None else value.strip().lower() == "true"


def may_lead(image: MetadataImage, p: PartitionImage, r: int, *, remove: int | None = None,
             add: int | None = None) -> bool:
    if r == remove:
        return False
    reg = image.brokers.get(r)
    active = r == add or (reg is not None and reg.active)
    return active and has_online_dir(image, r, p.directory_of(r))


def change(image: MetadataImage, topic_id: UUID, p: PartitionImage, *, remove: int | None = None,
           add: int | None = None, target_isr: Sequence[int] | None = None, election: str = ONLINE,
           unclean: bool = False, recovery_state: int | None = None) -> PartitionChangeRecord | None:
    """The record taking `p` to the target ISR with the leader the election picks; None when nothing changes.
    `unclean` allows the unclean step of an ONLINE election (the topic's config)."""
    isr = [r for r in (p.isr if target_isr is None else target_isr) if r != remove]

    def valid(r: int) -> bool:
        return r in isr and may_lead(image, p, r, remove=remove, add=add)

    leader, is_unclean = NO_LEADER, False
    if election == PREFERRED and p.replicas and valid(p.replicas[0]):
        leader = p.replicas[0]
    elif valid(p.leader):
        leader = p.leader
    else:
        leader = next((r for r in p.replicas if valid(r)), NO_LEADER)
        if leader == NO_LEADER and (election == UNCLEAN or (election == ONLINE and unclean)):
            leader = next((r for r in p.replicas if may_lead(image, p, r, remove=remove, add=add)), NO_LEADER)
            is_unclean = leader != NO_LEADER
    rec = PartitionChangeRecord(partition_id=p.partition, topic_id=topic_id)
    changed = False
    if leader != p.leader:
        rec.leader = leader
        changed = True
        if is_unclean:
            rec.isr = [leader]  # data the other replicas had may be lost: the new leader alone is in sync
            if p.leader_recovery_state != RECOVERING:
                rec.leader_recovery_state = RECOVERING
    if rec.isr is None and isr and tuple(isr) != p.isr:
        rec.isr = isr
        changed = True
    if recovery_state is not None and recovery_state != p.leader_recovery_state and rec.leader_recovery_state == -1:
        rec.leader_recovery_state = recovery_state
        changed = True
    return rec if changed else None


def elect(image: MetadataImage, topic_id: UUID, p: PartitionImage, *, remove: int | None = None,
          add: int | None = None, unclean_default: bool = False) -> PartitionChangeRecord | None:
    """An ONLINE election after `remove` left (or `add` came back), unclean where the topic allows it."""
    return change(image, topic_id, p, remove=remove, add=add,
                  unclean=unclean_enabled(image, image.topic_by_id(topic_id), unclean_default))


def with_directory(topic_id: UUID, p: PartitionImage, broker_id: int, dir_id: UUID) -> PartitionChangeRecord | None:
    """The record moving `broker_id`'s replica of `p` to `dir_id` (Kafka's PartitionChangeBuilder.setDirectory),
    Directories written for the whole replica list; None when the metadata already says so."""
    if p.directory_of(broker_id) == dir_id:
        return None
    dirs = list(p.directories) if len(p.directories) == len(p.replicas) else [DIR_UNASSIGNED] * len(p.replicas)
    dirs[p.replicas.index(broker_id)] = dir_id
    return PartitionChangeRecord(topic_id=topic_id, partition_id=p.partition, directories=dirs)


def partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, PartitionImage]]:
    for topic in image.topics_by_id.values():
        for p in topic.partitions.values():
            yield topic, p


def remove_from_isrs(image: MetadataImage, broker_id: int, *,
                     unclean_default: bool = False) -> list[PartitionChangeRecord]:
    """Every partition whose ISR holds `broker_id` loses it (and its leadership)."""
    out = []
    for topic, p in partitions(image):
        if broker_id in p.isr:
            rec = elect(image, topic.topic_id, p, remove=broker_id, unclean_default=unclean_default)
            if rec is not None:
                out.append(rec)
    return out


def elect_where_leaderless(image: MetadataImage, broker_id: int, *,
                           unclean_default: bool = False) -> list[PartitionChangeRecord]:
    """Partitions without a leader that `broker_id`, now unfenced, may lead: from their ISR, or (where the topic
    allows unclean elections) as any replica."""
    out = []
    for topic, p in partitions(image):
        if p.leader == NO_LEADER and broker_id in p.replicas:
            rec = elect(image, topic.topic_id, p, add=broker_id, unclean_default=unclean_default)
            if rec is not None:
                out.append(rec)
    return out


def leads_any(image: MetadataImage, broker_id: int) -> bool:
    return any(p.leader == broker_id for _, p in partitions(image))
