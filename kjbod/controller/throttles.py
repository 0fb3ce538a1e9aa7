"""KIP-179 on the controller: ReassignPartitions (key 10000), AlterInterbrokerThrottledRates (10001) and
AlterInterbrokerThrottledReplicas (10002), kjbod's own APIs, and the throttles that remove themselves.

Strategy: a throttle is four of Kafka's configs, so the controller writes Kafka's ConfigRecords and brokers
apply them as any other config change: per broker `leader.replication.throttled.rate` and
`follower.replication.throttled.rate`, per topic `leader.replication.throttled.replicas` and
`follower.replication.throttled.replicas` (`partition:broker` lists).  ReassignPartitions throttles the way
Kafka's tool does (leaders: the partition's current replicas, those being added left out; followers: the
target's new replicas; both rates on every broker of those partitions), in the same metadata batch that starts
the moves, and then runs the reassignment as AlterPartitionReassignments does (kjbod.controller.reassignment:
the same per-partition codes, KIP-435 batching included).

What the controller set for a throttle it is to remove (RemoveThrottle) is kept in the metadata log as kjbod's
records, so a restarted controller knows it from the replay: ThrottledReplicasIntentRecord (10001) names, per
partition, the list entries it *added* (an entry that was there already belongs to whoever put it there), and
ThrottledRateIntentRecord (10002), per broker, the rates it set and the values they replaced.  `finish` runs on
every batch the controller writes: when a batch ends a partition's reassignment (completion, cancellation, the
last KIP-435 step, or the topic's deletion) it appends, to that same batch, the removal of that partition's
entries from the lists as they are then (entries others added since stay; a list someone set to `*` is left
alone) and, for each broker with rates of the controller's that no reassignment in progress involves any more,
the rates put back to what they replaced, only where a rate is still the value the controller set (a rate
someone changed meanwhile is theirs).  Kafka's tool overwrites both lists and removes rates only when someone
runs `--verify` after the end.

Error codes where the KIP invented its own: PARTITION_REASSIGNMENT_IN_PROGRESS is REASSIGNMENT_IN_PROGRESS (60),
INVALID_THROTTLE (a throttle or rate ≤ 0) is INVALID_CONFIG (40), an unknown topic or partition is
UNKNOWN_TOPIC_OR_PARTITION (3, as AlterPartitionReassignments; the KIP said INVALID_TOPIC_EXCEPTION), an
unknown broker in replica lists INVALID_REPLICA_ASSIGNMENT (39; the KIP said UNKNOWN_MEMBER_ID) and in the rates
request BROKER_NOT_AVAILABLE (8), a partition or broker named twice INVALID_REQUEST (42), and a throttle to be
removed at the end of a reassignment that is not there NO_REASSIGNMENT_IN_PROGRESS (85).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from typing import Any
from uuid import UUID

from kjbod.controller import reassignment
from kjbod.controller.partition_change import partitions
from kjbod.controller.result import ControllerResult, ControllerSettings
from kjbod.metadata import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    MetadataImage,
    PartitionImage,
    RateIntent,
    TopicImage,
)
from kjbod.metadata.delta import replay
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AlterInterbrokerThrottledRatesRequest,
    AlterInterbrokerThrottledRatesResponse,
    AlterInterbrokerThrottledReplicasRequest,
    AlterInterbrokerThrottledReplicasResponse,
    AlterPartitionReassignmentsRequest,
    ConfigRecord,
    PartitionChangeRecord,
    ReassignmentIntentRecord,
    ReassignPartitionsRequest,
    ReassignPartitionsResponse,
    RemoveTopicRecord,
    ThrottledRateIntentRecord,
    ThrottledReplicasIntentRecord,
)
from kjbod.protocol.generated import alter_interbroker_throttled_rates_response as rates_out
from kjbod.protocol.generated import alter_interbroker_throttled_replicas_response as replicas_out
from kjbod.protocol.generated import alter_partition_reassignments_request as alter_in
from kjbod.protocol.generated import reassign_partitions_response as reassign_out

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
NO_THROTTLE = (1 << 63) - 1  # Long.MAX_VALUE: KIP-179's "not throttled"
ALL_REPLICAS = "*"
IN_PROGRESS_MESSAGE = ("A partition reassignment is in progress; send Additional to start more alongside it "
                       "(kafka-reassign-partitions' --additional).")
_INTENT_TYPES = (ThrottledReplicasIntentRecord, ThrottledRateIntentRecord)

Key = tuple[UUID, int]  # (topic id, partition)
Answer = tuple[int, str | None]
OK: Answer = (ErrorCode.NONE, None)


def moving(p: PartitionImage) -> bool:
    """Whether `p` is being reassigned: a step in progress, or a KIP-435 plan not reached yet."""
    return p.reassigning or (p.intent is not None and p.replicas != p.intent)


def involved_brokers(image: MetadataImage) -> set[int]:
    """Every broker holding, gaining or losing a replica of a partition being reassigned."""
    out: set[int] = set()
    for _topic, p in partitions(image):
        if moving(p):
            out.update(p.replicas)
            out.update(p.intent or ())
    return out


def _partition(image: MetadataImage, key: Key) -> PartitionImage | None:
    topic = image.topic_by_id(key[0])
    return topic.partitions.get(key[1]) if topic is not None else None


def _entries(value: str | None) -> list[str] | None:
    """A throttled-replicas list as its entries; None for `*` (every replica)."""
    if value is None:
        return []
    if value.strip() == ALL_REPLICAS:
        return None
    return [e.strip() for e in value.split(",") if e.strip()]


class Edits:
    """Throttle changes on top of one image: list entries and rates, and the controller's intents, turned into
    records at the end (configs first, each list or rate written once with its final value)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._lists: dict[tuple[str, str], list[str] | None] = {}  # (topic, key) -> entries as they become
        self._lists_changed: set[tuple[str, str]] = set()
        self._rates: dict[tuple[int, str], str | None] = {}  # (broker, key) -> value as it becomes
        self._owned: dict[Key, tuple[set[int], set[int]]] = {}
        self._rate_intents: dict[int, RateIntent] = {}

    # ------------------------------------------------------------------------------------------ lists
    def _list(self, topic: str, key: str) -> list[str] | None:
        if (topic, key) not in self._lists:
            t = self.image.topic(topic)
            self._lists[(topic, key)] = _entries(t.configs.get(key) if t is not None else None)
        return self._lists[(topic, key)]

    def _owned_of(self, key: Key) -> tuple[set[int], set[int]]:
        if key not in self._owned:
            leaders, followers = self.image.throttled_replicas.get(key, ((), ()))
            self._owned[key] = (set(leaders), set(followers))
        return self._owned[key]

    def add_replicas(self, topic: TopicImage, partition: int, leaders: Iterable[int], followers: Iterable[int],
                     *, owned: bool) -> None:
        """Merges `partition:broker` entries into the topic's two lists; with `owned` the controller removes the
        ones it adds when the partition's reassignment ends, without it they stay (and stop being its own)."""
        mine = self._owned_of((topic.topic_id, partition))
        for list_key, brokers, own in ((LEADER_REPLICAS, leaders, mine[0]), (FOLLOWER_REPLICAS, followers, mine[1])):
            entries = self._list(topic.name, list_key)
            for b in brokers:
                entry = f"{partition}:{b}"
                if entries is None or entry in entries:  # `*`, or already listed: the entry is not ours to add
                    if not owned:
                        own.discard(b)
                    continue
                entries.append(entry)
                self._lists_changed.add((topic.name, list_key))
                if owned:
                    own.add(b)

    def end_replicas(self, key: Key) -> None:
        """Removes the entries the controller added for partition `key` and ends its intent."""
        mine = self._owned_of(key)
        topic = self.image.topic_by_id(key[0])
        if topic is not None:
            for list_key, own in ((LEADER_REPLICAS, mine[0]), (FOLLOWER_REPLICAS, mine[1])):
                entries = self._list(topic.name, list_key)
                if entries is None:  # someone made it `*` since: theirs
                    continue
                drop = {f"{key[1]}:{b}" for b in own}
                kept = [e for e in entries if e not in drop]
                if len(kept) != len(entries):
                    self._lists[(topic.name, list_key)] = kept
                    self._lists_changed.add((topic.name, list_key))
        mine[0].clear()
        mine[1].clear()

    # ------------------------------------------------------------------------------------------ rates
    def _rate(self, broker: int, key: str) -> str | None:
        if (broker, key) not in self._rates:
            self._rates[(broker, key)] = self.image.resource_configs(BROKER_RESOURCE, str(broker)).get(key)
        return self._rates[(broker, key)]

    def _rate_intent(self, broker: int) -> RateIntent:
        if broker not in self._rate_intents:
            self._rate_intents[broker] = self.image.throttled_rates.get(broker, RateIntent())
        return self._rate_intents[broker]

    def set_rates(self, broker: int, leader: str, follower: str, *, owned: bool) -> None:
        """Sets both rates of `broker`; with `owned` the controller puts back what they replace when no
        reassignment involves the broker any more (what an earlier throttle of its own replaced, when the rate
        is still that throttle's)."""
        intent = self._rate_intent(broker)
        for key, value, set_field, restore_field in ((LEADER_RATE, leader, "leader_rate", "leader_restore"),
                                                     (FOLLOWER_RATE, follower, "follower_rate", "follower_restore")):
            current = self._rate(broker, key)
            mine, restore = getattr(intent, set_field), getattr(intent, restore_field)
            if not owned:
                mine = restore = None
            else:
                if mine is None or current != mine:  # nothing of ours there: what is there now comes back later
                    restore = current
                mine = value
            intent = replace(intent, **{set_field: mine, restore_field: restore})
            self._rates[(broker, key)] = value
        self._rate_intents[broker] = intent

    def end_rates(self, broker: int) -> None:
        intent = self._rate_intent(broker)
        for key, mine, restore in ((LEADER_RATE, intent.leader_rate, intent.leader_restore),
                                   (FOLLOWER_RATE, intent.follower_rate, intent.follower_restore)):
            if mine is not None and self._rate(broker, key) == mine:
                self._rates[(broker, key)] = restore
        self._rate_intents[broker] = RateIntent()

    # ------------------------------------------------------------------------------------------ records
    def records(self) -> list[Any]:
        out: list[Any] = []
        for topic, list_key in sorted(self._lists_changed):
            entries = self._lists[(topic, list_key)]
            value = ALL_REPLICAS if entries is None else ",".join(entries) or None
            out.append(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=topic, name=list_key, value=value))
        for (broker, rate_key), rate in sorted(self._rates.items()):
            if rate != self.image.resource_configs(BROKER_RESOURCE, str(broker)).get(rate_key):
                out.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=str(broker), name=rate_key,
                                        value=rate))
        for key, (leaders, followers) in sorted(self._owned.items()):
            before = self.image.throttled_replicas.get(key, ((), ()))
            now = (tuple(sorted(leaders)), tuple(sorted(followers)))
            if now != before:
                out.append(ThrottledReplicasIntentRecord(topic_id=key[0], partition_id=key[1], leaders=list(now[0]),
                                                         followers=list(now[1])))
        for broker, intent in sorted(self._rate_intents.items()):
            if intent != self.image.throttled_rates.get(broker, RateIntent()):
                out.append(ThrottledRateIntentRecord(
                    broker_id=broker, leader_rate=intent.leader_rate, leader_restore=intent.leader_restore,
                    follower_rate=intent.follower_rate, follower_restore=intent.follower_restore))
        return out


# ---------------------------------------------------------------------------------------------- auto-removal

def finish(image: MetadataImage, records: list[Any]) -> list[Any]:
    """`records` (a batch about to be written on `image`) followed by the removal of the controller's throttles
    whose reassignments the batch ends."""
    if not records or not (image.throttled_replicas or image.throttled_rates
                           or any(isinstance(r, _INTENT_TYPES) for r in records)):
        return records
    touched: set[Key] = set()
    removed: set[UUID] = set()
    new_rates = False
    for r in records:
        if isinstance(r, PartitionChangeRecord | ReassignmentIntentRecord | ThrottledReplicasIntentRecord):
            touched.add((r.topic_id, r.partition_id))
        elif isinstance(r, RemoveTopicRecord):
            removed.add(r.topic_id)
        elif isinstance(r, ThrottledRateIntentRecord):
            new_rates = True
    if not (touched or removed or new_rates):
        return records
    after = replay(image, records)
    if removed:
        touched.update(k for k in after.throttled_replicas if k[0] in removed)
    edits = Edits(after)
    moves_ended = bool(removed) or new_rates
    for key in sorted(touched):
        now = _partition(after, key)
        if now is not None and moving(now):
            continue
        before = _partition(image, key)
        moves_ended = moves_ended or (before is not None and moving(before))
        if key in after.throttled_replicas:
            edits.end_replicas(key)
    if moves_ended and after.throttled_rates:
        involved = involved_brokers(after)
        for broker in sorted(after.throttled_rates):
            if broker not in involved:
                edits.end_rates(broker)
    extra = edits.records()
    return records + extra if extra else records


# ---------------------------------------------------------------------------------------------- the APIs

def reassignment_in_progress(image: MetadataImage, plans: reassignment.Plans | None) -> bool:
    return bool(plans) or any(moving(p) for _t, p in partitions(image))


def reassign_partitions(image: MetadataImage, req: ReassignPartitionsRequest, settings: ControllerSettings,
                        plans: reassignment.Plans | None = None) -> ControllerResult:
    """KIP-179's ReassignPartitions: the throttle and the reassignment in one batch (see the module doc)."""
    wanted = [(t.topic, p) for t in req.topic_reassignments for p in t.partition_reassignments]
    counts = Counter((name, p.partition_id) for name, p in wanted)
    throttled = req.throttle != NO_THROTTLE
    refused: Answer | None = None
    if throttled and req.throttle <= 0:
        refused = (ErrorCode.INVALID_CONFIG,
                   f"The throttle must be a positive number of bytes per second, not {req.throttle}.")
    elif not req.additional and reassignment_in_progress(image, plans):
        refused = (ErrorCode.REASSIGNMENT_IN_PROGRESS, IN_PROGRESS_MESSAGE)
    answers: dict[tuple[str, int], Answer] = {}
    targets = {(name, p.partition_id): list(p.brokers) for name, p in wanted}
    by_topic: dict[str, list[alter_in.ReassignablePartition]] = {}
    for name, p in wanted:
        if refused is not None:
            answers[(name, p.partition_id)] = refused
        elif counts[(name, p.partition_id)] > 1:
            answers[(name, p.partition_id)] = (ErrorCode.INVALID_REQUEST,
                                               f"Partition {name}-{p.partition_id} appears more than once.")
        else:
            by_topic.setdefault(name, []).append(alter_in.ReassignablePartition(
                partition_index=p.partition_id, replicas=list(p.brokers), target_directories=p.target_directories))
    records: list[Any] = []
    if by_topic:
        alter = AlterPartitionReassignmentsRequest(
            timeout_ms=req.timeout_ms, allow_replication_factor_change=req.allow_replication_factor_change,
            topics=[alter_in.ReassignableTopic(name=n, partitions=ps) for n, ps in by_topic.items()])
        scratch = None if plans is None else dict(plans) if req.validate_only else plans
        started = reassignment.alter_partition_reassignments(image, alter, 1, settings, scratch)
        edits = Edits(image)
        rate_brokers: set[int] = set()
        for t in started.response.responses:
            topic = image.topic(t.name)
            for res in t.partitions:
                answers[(t.name, res.partition_index)] = (res.error_code, res.error_message)
                if res.error_code or not throttled or topic is None:
                    continue
                part = topic.partitions[res.partition_index]
                target = targets[(t.name, res.partition_index)]
                if not moving(part) and list(part.replicas) == target:
                    continue  # nothing moves
                current = [r for r in part.replicas if r not in part.adding]
                edits.add_replicas(topic, part.partition, current, [b for b in target if b not in current],
                                   owned=req.remove_throttle)
                rate_brokers.update(current, target)
        for broker in sorted(rate_brokers):
            edits.set_rates(broker, str(req.throttle), str(req.throttle), owned=req.remove_throttle)
        records = edits.records() + started.records
    response = ReassignPartitionsResponse()
    for name, parts in _grouped(wanted):
        response.reassign_partition_results.append(reassign_out.ReassignPartitionResult(topic=name, partition_errors=[
            reassign_out.PartitionError(partition_id=i, error_code=answers[(name, i)][0],
                                        error_message=answers[(name, i)][1]) for i in parts]))
    return ControllerResult([] if req.validate_only else records, response)


def _grouped(wanted: list[tuple[str, Any]]) -> list[tuple[str, list[int]]]:
    """(topic, [partition, ...]) in the request's order, a topic named twice merged, a partition kept once."""
    out: dict[str, list[int]] = {}
    for name, p in wanted:
        parts = out.setdefault(name, [])
        if p.partition_id not in parts:
            parts.append(p.partition_id)
    return list(out.items())


def alter_throttled_rates(image: MetadataImage, req: AlterInterbrokerThrottledRatesRequest) -> ControllerResult:
    counts = Counter(b.broker_id for b in req.broker_throttles)
    involved = involved_brokers(image) if req.remove_throttle else set()
    edits = Edits(image)
    response = AlterInterbrokerThrottledRatesResponse()
    seen: set[int] = set()
    for bt in req.broker_throttles:
        b = bt.broker_id
        code, message = OK
        if counts[b] > 1:
            code, message = ErrorCode.INVALID_REQUEST, f"Broker {b} appears more than once."
        elif b not in image.brokers:
            code, message = ErrorCode.BROKER_NOT_AVAILABLE, f"Broker {b} is not registered."
        elif bt.leader_rate <= 0 or bt.follower_rate <= 0:
            code, message = (ErrorCode.INVALID_CONFIG, "The throttled rates must be positive numbers of bytes per "
                             f"second, not leader {bt.leader_rate} and follower {bt.follower_rate}.")
        elif req.remove_throttle and b not in involved:
            code, message = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"No reassignment in progress involves broker "
                             f"{b}, so nothing would remove its throttle (send RemoveThrottle false to keep one).")
        else:
            edits.set_rates(b, str(bt.leader_rate), str(bt.follower_rate), owned=req.remove_throttle)
        if b not in seen:
            seen.add(b)
            response.broker_errors.append(rates_out.BrokerError(broker_id=b, error_code=code, error_message=message))
    return ControllerResult([] if req.validate_only else edits.records(), response)


def _replicas_problem(image: MetadataImage, name: str, partition: int, leaders: list[int],
                      followers: list[int]) -> str | None:
    if not leaders and not followers:
        return None
    for brokers in (leaders, followers):
        for b, n in sorted(Counter(brokers).items()):
            if b not in image.brokers:
                return f"The throttled replicas of {name}-{partition} include broker {b}, but no such broker is " \
                       "registered."
            if n > 1:
                return f"The throttled replicas of {name}-{partition} include the broker {b} more than once."
    return None


def alter_throttled_replicas(image: MetadataImage, req: AlterInterbrokerThrottledReplicasRequest) -> ControllerResult:
    counts = Counter((t.topic, p.partition_id) for t in req.topic_throttles for p in t.partition_throttles)
    edits = Edits(image)
    response = AlterInterbrokerThrottledReplicasResponse()
    results: dict[str, replicas_out.TopicError] = {}
    answered: set[tuple[str, int]] = set()
    for t in req.topic_throttles:
        topic = image.topic(t.topic)
        result = results.get(t.topic)
        if result is None:
            result = results[t.topic] = replicas_out.TopicError(topic=t.topic)
            response.topic_errors.append(result)
        for pt in t.partition_throttles:
            code, message = OK
            p = topic.partitions.get(pt.partition_id) if topic is not None else None
            problem = _replicas_problem(image, t.topic, pt.partition_id, pt.leaders, pt.followers)
            if counts[(t.topic, pt.partition_id)] > 1:
                code, message = ErrorCode.INVALID_REQUEST, f"Partition {t.topic}-{pt.partition_id} appears more than once."
            elif topic is None:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {t.topic}."
            elif p is None:
                code, message = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"Unable to find partition {t.topic}:{pt.partition_id}.")
            elif not pt.leaders and not pt.followers:
                code, message = ErrorCode.INVALID_REQUEST, f"No replicas to throttle for {t.topic}-{pt.partition_id}."
            elif problem is not None:
                code, message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
            elif req.remove_throttle and not moving(p):
                code, message = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"No reassignment of {t.topic}-"
                                 f"{pt.partition_id} is in progress, so nothing would remove its throttle (send "
                                 "RemoveThrottle false to keep one).")
            else:
                edits.add_replicas(topic, p.partition, pt.leaders, pt.followers, owned=req.remove_throttle)
            if (t.topic, pt.partition_id) not in answered:
                answered.add((t.topic, pt.partition_id))
                result.partition_errors.append(replicas_out.PartitionError(
                    partition_id=pt.partition_id, error_code=code, error_message=message))
    return ControllerResult([] if req.validate_only else edits.records(), response)
