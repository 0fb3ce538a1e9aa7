"""Leader, ISR and ELR changes for one partition, as Kafka's PartitionChangeBuilder computes them.

A replica may lead when it is not the broker being removed, its broker is active (registered, unfenced, not
in controlled shutdown) or is the broker being added, and its log dir is online (Kafka's LeaderAcceptor).  The
target ISR is the current one less the removed broker, or what an AlterPartition asks for.  Elections:

* ONLINE: keep the leader if it is in the target ISR and may lead, else the first replica (in replica order)
  that is; else, where the topic allows unclean elections (`unclean.leader.election.enable`: topic override,
  then the cluster-wide dynamic default, then the controller's own config), the first replica that may lead at
  all, with the ISR set to it alone and LeaderRecoveryState RECOVERING; else no leader (-1).
* PREFERRED: the first replica if it is in the target ISR and may lead, else as ONLINE without the unclean step.
* UNCLEAN: as ONLINE, the unclean step always allowed (ElectLeaders with UNCLEAN).

With the ELR off the ISR is never written empty: when its last member goes, the record says leader -1 and
leaves the ISR as it was, so the partition waits for that broker (or for an unclean election).  With
eligible.leader.replicas.version 1 (KIP-966) the ISR may empty and the eligible leader replicas say who may
still lead cleanly (see `change`).  Every record bumps the partition
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
from kjbod.metadata.features import elr_enabled
from kjbod.protocol.generated import PartitionChangeRecord

ONLINE, PREFERRED, UNCLEAN = "ONLINE", "PREFERRED", "UNCLEAN"
UNCLEAN_KEY = "unclean.leader.election.enable"
MIN_ISR_KEY = "min.insync.replicas"
NO_CHANGE_LEADER = -2


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


def effective_min_isr(image: MetadataImage, topic: TopicImage | None, default: int = 1,
                      node_id: int | None = None) -> int:
    """The topic's `min.insync.replicas` as Kafka's controller uses it for the ELR (getTopicEffectiveMinIsr): the
    topic's override, this controller's own dynamic value, the cluster-wide dynamic default, then `default` (the
    controller's server.properties), capped at the replication factor of partition 0."""
    value = topic.configs.get(MIN_ISR_KEY) if topic is not None else None
    if value is None and node_id is not None:
        value = image.resource_configs(BROKER_RESOURCE, str(node_id)).get(MIN_ISR_KEY)
    if value is None:
        value = image.resource_configs(BROKER_RESOURCE, "").get(MIN_ISR_KEY)
    try:
        min_isr = default if value is None else int(value)
    except ValueError:
        min_isr = default
    if topic is not None and topic.partitions:
        first = topic.partitions.get(0) or next(iter(topic.partitions.values()))
        min_isr = min(min_isr, len(first.replicas))
    return min_isr


def change(image: MetadataImage, topic_id: UUID, p: PartitionImage, *, remove: int | None = None,
           add: int | None = None, target_isr: Sequence[int] | None = None, election: str = ONLINE,
           unclean: bool = False, recovery_state: int | None = None,
           target_replicas: Sequence[int] | None = None, target_adding: Sequence[int] | None = None,
           target_removing: Sequence[int] | None = None,
           target_dirs: dict[int, UUID] | None = None, unclean_shutdown: int | None = None,
           min_isr_default: int = 1, node_id: int | None = None) -> PartitionChangeRecord | None:
    """The record taking `p` to the target ISR with the leader the election picks; None when nothing changes.
    `unclean` allows the unclean step of an ONLINE election (the topic's config).  The target replicas, adding
    and removing lists default to the partition's; a reassignment they describe completes here when the ISR
    allows it (Kafka's PartitionChangeBuilder.completeReassignmentIfNeeded), whatever asked for the change.
    `target_dirs` names the log dir of some replicas (others keep theirs; new ones get the default).

    With eligible.leader.replicas.version 1 (KIP-966, Kafka's PartitionChangeBuilder with the ELR on):
    `unclean_shutdown` names a broker that restarted without a clean shutdown (it leaves the ISR, the ELR and
    may not lead); while the target ISR is below the topic's min.insync.replicas (`effective_min_isr`), the ELR
    is the old ISR and ELR less the target ISR and that broker, else empty; an election with an empty ISR may
    pick an ELR member (a clean election: the ISR becomes that member alone), else the last known leader when
    it is the only one kept and no ISR or ELR is left (unclean: RECOVERING); the ISR may be written empty; a
    record that leaves the partition leaderless keeps the leader it had in LastKnownElr, and one that gives it
    a leader again clears that.  An unclean election clears the ELR.  With the ELR off, an ELR left over is
    cleared."""
    elr_on = elr_enabled(image)
    gone = {r for r in (remove, unclean_shutdown) if r is not None}
    isr = [r for r in (p.isr if target_isr is None else target_isr) if r not in gone]
    replicas = list(p.replicas if target_replicas is None else target_replicas)
    adding = list(p.adding if target_adding is None else target_adding)
    removing = list(p.removing if target_removing is None else target_removing)
    done = complete_reassignment(replicas, adding, removing, isr)
    if done is not None:
        (replicas, isr), adding, removing = done, [], []
    elr = list(p.elr)
    if elr_on:
        topic = image.topic_by_id(topic_id)
        if len(isr) >= effective_min_isr(image, topic, min_isr_default, node_id):
            elr = []
        else:
            # Whoever was in the ISR or ELR and is not in the new ISR (nor restarted uncleanly) holds every
            # committed record: the high watermark does not move while the ISR is below min.insync.replicas.
            elr = sorted(r for r in {*elr, *p.isr} if r not in isr and r != unclean_shutdown)

    def acceptable(r: int) -> bool:
        return r != unclean_shutdown and may_lead(image, p, r, remove=remove, add=add)

    def valid(r: int) -> bool:
        return (r in isr or (not isr and r in elr)) and acceptable(r)

    leader, is_unclean = NO_LEADER, False
    if election == PREFERRED and replicas and valid(replicas[0]):
        leader = replicas[0]
    elif valid(p.leader):
        leader = p.leader
    else:
        leader = next((r for r in replicas if valid(r)), NO_LEADER)
        if leader == NO_LEADER and elr_on and not isr and not elr and len(p.last_known_elr) == 1 \
                and acceptable(p.last_known_elr[0]):
            leader, is_unclean = p.last_known_elr[0], True  # KIP-966's balanced recovery: the last leader
        elif leader == NO_LEADER and (election == UNCLEAN or (election == ONLINE and unclean)):
            leader = next((r for r in replicas if acceptable(r)), NO_LEADER)
            is_unclean = leader != NO_LEADER
    rec = PartitionChangeRecord(partition_id=p.partition, topic_id=topic_id)
    if leader != p.leader:
        rec.leader = leader
        if leader in elr:  # a clean election from the ELR: that replica alone is in sync
            isr = [leader]
            elr = [r for r in elr if r != leader]
        if is_unclean:
            rec.isr = [leader]  # data the other replicas had may be lost: the new leader alone is in sync
            if p.leader_recovery_state != RECOVERING:
                rec.leader_recovery_state = RECOVERING
    elif not set(p.replicas) <= set(replicas):
        rec.leader = p.leader  # a replica leaves: followers must see a new leader epoch
    if rec.isr is not None or not elr_on:
        elr = []  # an unclean election, or the ELR off: nothing is eligible any more
    if tuple(elr) != p.elr:
        rec.eligible_leader_replicas = elr
    if rec.isr is None and (isr or elr_on) and tuple(isr) != p.isr:
        rec.isr = isr
    if elr_on:
        if rec.leader == NO_LEADER and not p.last_known_elr:
            rec.last_known_elr = [p.leader]  # the partition goes leaderless: remember who led it last
        elif rec.leader >= 0 and p.last_known_elr:
            rec.last_known_elr = []
    if recovery_state is not None and recovery_state != p.leader_recovery_state and rec.leader_recovery_state == -1:
        rec.leader_recovery_state = recovery_state
    changed = (rec.isr is not None or rec.leader != NO_CHANGE_LEADER or rec.leader_recovery_state != -1
               or rec.eligible_leader_replicas is not None or rec.last_known_elr is not None)
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
          add: int | None = None, unclean_default: bool = False, node_id: int | None = None,
          unclean_shutdown: int | None = None, min_isr_default: int = 1) -> PartitionChangeRecord | None:
    """An ONLINE election after `remove` left (or `add` came back, or `unclean_shutdown` restarted without a
    clean shutdown), unclean where the topic allows it."""
    return change(image, topic_id, p, remove=remove, add=add, unclean_shutdown=unclean_shutdown,
                  unclean=unclean_enabled(image, image.topic_by_id(topic_id), unclean_default, node_id),
                  min_isr_default=min_isr_default, node_id=node_id)


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


def remove_from_isrs(image: MetadataImage, broker_id: int, *, unclean_default: bool = False,
                     node_id: int | None = None, min_isr_default: int = 1,
                     unclean_shutdown: bool = False) -> list[PartitionChangeRecord]:
    """Every partition whose ISR holds `broker_id` loses it (and its leadership).  With `unclean_shutdown` (a
    new incarnation of a broker that did not shut down cleanly, the ELR on: Kafka's handleBrokerShutdown) it
    also leaves every ELR it is in."""
    out = []
    for topic, p in partitions(image):
        if broker_id in p.isr or (unclean_shutdown and broker_id in p.elr):
            rec = elect(image, topic.topic_id, p, remove=None if unclean_shutdown else broker_id,
                        unclean_shutdown=broker_id if unclean_shutdown else None,
                        unclean_default=unclean_default, node_id=node_id, min_isr_default=min_isr_default)
            if rec is not None:
                out.append(rec)
    return out


def elect_where_leaderless(image: MetadataImage, broker_id: int, *, unclean_default: bool = False,
                           node_id: int | None = None, min_isr_default: int = 1) -> list[PartitionChangeRecord]:
    """Partitions without a leader that `broker_id`, now unfenced, may lead: from their ISR (or ELR when the ISR
    is empty), or (where the topic allows unclean elections) as any replica."""
    out = []
    for topic, p in partitions(image):
        if p.leader == NO_LEADER and broker_id in p.replicas:
            rec = elect(image, topic.topic_id, p, add=broker_id, unclean_default=unclean_default,
                        node_id=node_id, min_isr_default=min_isr_default)
            if rec is not None:
                out.append(rec)
    return out


def leads_any(image: MetadataImage, broker_id: int) -> bool:
    return any(p.leader == broker_id for _, p in partitions(image))
