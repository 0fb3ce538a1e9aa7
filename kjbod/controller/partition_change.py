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

Reassignments (KIP-455): every change first checks whether the partition's reassignment can complete (the ISR
less the replicas being removed holds every target replica); if so the replicas become the target, a leader
being removed is replaced, and a change that drops a replica always sets Leader (a leader epoch bump).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from uuid import UUID

from kjbod.metadata import (
    BROKER_RESOURCE,
    DIR_MIGRATING,
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


def unclean_enabled(image: MetadataImage, topic: TopicImage | None, default: bool = False,
                    node_id: int | None = None) -> bool:
    """`unclean.leader.election.enable` for `topic` as Kafka's controller resolves it (KafkaConfigSchema.
    resolveEffectiveTopicConfig): its override, the dynamic value of this controller's own node (`node_id`), the
    cluster-wide dynamic default, then `default` (the controller's server.properties)."""
    value = topic.configs.get(UNCLEAN_KEY) if topic is not None else None
    if value is None and node_id is not None:
        value = image.resource_configs(BROKER_RESOURCE, str(node_id)).get(UNCLEAN_KEY)
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


def default_dir(image: MetadataImage, broker_id: int) -> UUID:
    """Where a replica new to `broker_id` starts (Kafka's ClusterControlManager.defaultDir): the broker's only log
    dir, MIGRATING when it registered none, else UNASSIGNED (the broker picks one and reports it)."""
    reg = image.brokers.get(broker_id)
    if reg is None or len(reg.log_dirs) > 1:
        return DIR_UNASSIGNED
    return reg.log_dirs[0] if reg.log_dirs else DIR_MIGRATING


def complete_reassignment(replicas: Sequence[int], adding: Sequence[int], removing: Sequence[int],
                          isr: Sequence[int]) -> tuple[list[int], list[int]] | None:
    """(replicas, ISR) once a reassignment in progress is done, or None (Kafka's
    PartitionReassignmentReplicas.maybeCompleteReassignment): the ISR less the replicas being removed must be
    non-empty and hold every target replica, the old ones too."""
    if not adding and not removing:
        return None
    new_isr = [r for r in isr if r not in removing]
    target = [r for r in replicas if r not in removing]
    if not new_isr or not target or not set(target) <= set(new_isr):
        return None
    return target, new_isr


def change(image: MetadataImage, topic_id: UUID, p: PartitionImage, *, remove: int | None = None,
           add: int | None = None, target_isr: Sequence[int] | None = None, election: str = ONLINE,
           unclean: bool = False, recovery_state: int | None = None,
           target_replicas: Sequence[int] | None = None, target_adding: Sequence[int] | None = None,
           target_removing: Sequence[int] | None = None,
           target_dirs: dict[int, UUID] | None = None) -> PartitionChangeRecord | None:
    """The record taking `p` to the target ISR with the leader the election picks; None when nothing changes.
    `unclean` allows the unclean step of an ONLINE election (the topic's config).  The target replicas, adding
    and removing lists default to the partition's; a reassignment they describe completes here when the ISR
    allows it (Kafka's PartitionChangeBuilder.completeReassignmentIfNeeded), whatever asked for the change.
    `target_dirs` names the log dir of some replicas (others keep theirs; new ones get the default)."""
    isr = [r for r in (p.isr if target_isr is None else target_isr) if r != remove]
    replicas = list(p.replicas if target_replicas is None else target_replicas)
    adding = list(p.adding if target_adding is None else target_adding)
    removing = list(p.removing if target_removing is None else target_removing)
    done = complete_reassignment(replicas, adding, removing, isr)
    if done is not None:
        (replicas, isr), adding, removing = done, [], []

    def valid(r: int) -> bool:
        return r in isr and may_lead(image, p, r, remove=remove, add=add)

    leader, is_unclean = NO_LEADER, False
    if election == PREFERRED and replicas and valid(replicas[0]):
        leader = replicas[0]
    elif valid(p.leader):
        leader = p.leader
    else:
        leader = next((r for r in replicas if valid(r)), NO_LEADER)
        if leader == NO_LEADER and (election == UNCLEAN or (election == ONLINE and unclean)):
            leader = next((r for r in replicas if may_lead(image, p, r, remove=remove, add=add)), NO_LEADER)
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
    elif not set(p.replicas) <= set(replicas):
        rec.leader = p.leader  # a replica leaves: followers must see a new leader epoch
        changed = True
    if rec.isr is None and isr and tuple(isr) != p.isr:
        rec.isr = isr
        changed = True
    if recovery_state is not None and recovery_state != p.leader_recovery_state and rec.leader_recovery_state == -1:
        rec.leader_recovery_state = recovery_state
        changed = True
    return _assignment_changes(image, p, rec, replicas, adding, removing, target_dirs or {}) or (
        rec if changed else None)


def _assignment_changes(image: MetadataImage, p: PartitionImage, rec: PartitionChangeRecord, replicas: list[int],
                        adding: list[int], removing: list[int],
                        target_dirs: dict[int, UUID]) -> PartitionChangeRecord | None:
    """Sets the replica fields (Kafka's setAssignmentChanges): Directories for the whole new replica list
    whenever it differs; returns `rec` when any was set."""
    if tuple(replicas) == p.replicas and tuple(adding) == p.adding and tuple(removing) == p.removing \
            and not target_dirs:
        return None
    changed = False
    if replicas:
        dirs = [target_dirs.get(r) or (p.directory_of(r) if r in p.replicas else None) or default_dir(image, r)
                for r in replicas]
        if tuple(dirs) != p.directories:
            rec.directories = dirs
            changed = True
        if tuple(replicas) != p.replicas:
            rec.replicas = replicas
            changed = True
    if tuple(removing) != p.removing:
        rec.removing_replicas = removing
        changed = True
    if tuple(adding) != p.adding:
        rec.adding_replicas = adding
        changed = True
    return rec if changed else None


def elect(image: MetadataImage, topic_id: UUID, p: PartitionImage, *, remove: int | None = None,
          add: int | None = None, unclean_default: bool = False,
          node_id: int | None = None) -> PartitionChangeRecord | None:
    """An ONLINE election after `remove` left (or `add` came back), unclean where the topic allows it."""
    return change(image, topic_id, p, remove=remove, add=add,
                  unclean=unclean_enabled(image, image.topic_by_id(topic_id), unclean_default, node_id))


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
                     unclean_default: bool = False, node_id: int | None = None) -> list[PartitionChangeRecord]:
    """Every partition whose ISR holds `broker_id` loses it (and its leadership)."""
    out = []
    for topic, p in partitions(image):
        if broker_id in p.isr:
            rec = elect(image, topic.topic_id, p, remove=broker_id, unclean_default=unclean_default,
                        node_id=node_id)
            if rec is not None:
                out.append(rec)
    return out


def elect_where_leaderless(image: MetadataImage, broker_id: int, *,
                           unclean_default: bool = False,
                           node_id: int | None = None) -> list[PartitionChangeRecord]:
    """Partitions without a leader that `broker_id`, now unfenced, may lead: from their ISR, or (where the topic
    allows unclean elections) as any replica."""
    out = []
    for topic, p in partitions(image):
        if p.leader == NO_LEADER and broker_id in p.replicas:
            rec = elect(image, topic.topic_id, p, add=broker_id, unclean_default=unclean_default,
                        node_id=node_id)
            if rec is not None:
                out.append(rec)
    return out


def leads_any(image: MetadataImage, broker_id: int) -> bool:
    return any(p.leader == broker_id for _, p in partitions(image))
