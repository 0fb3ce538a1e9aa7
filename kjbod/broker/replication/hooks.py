"""What the Produce and Fetch handlers call when this broker replicates (a broker-only node): small functions so
the handlers stay about their APIs.

* Fetch from a follower (replica id ≥ 0): `prepare_follower_fetch` runs the leader's checks for each partition
  before the read and records the follower's position (manager.follower_fetch: check_follower_fetch, then
  follower_fetched when it passes) and its log start offset (manager.follower_log_start: DeleteRecords' low
  watermark); the partitions it answers (errors, DivergingEpoch) are not read.  Followers
  read up to the LEO; consumers up to the HW.  A parked follower's fetch, woken, is checked again
  (`recheck_follower_fetch`, as Kafka's DelayedFetch): a leadership or leader epoch that changed meanwhile
  answers its error.
* Throttles: `leader_throttled` names the partitions a follower gets no records for now (outside the ISR,
  throttled, the leader quota exceeded); they do not count as data for the long poll, which looks again as
  soon as the quota allows them (`leader_throttle_wait_s`) rather than at the end of its wait; `leader_sent`
  records what was sent of throttled partitions.
* Produce with acks=all: `acks_all_refusal` before the append (NOT_ENOUGH_REPLICAS), `await_replication` after
  it: each appended partition's answer waits for the HW (or its error), up to the request's timeout_ms.
"""

from __future__ import annotations

from typing import Any

from kjbod.broker.replication.partition import LEADER
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.fetch_response import EpochEndOffset
from kjbod.protocol.generated.fetch_response import PartitionData as FetchPart

THROTTLE_RECHECK_S = 0.01  # the shortest wait for a throttled partition's quota (no spinning on one just over)


def follower_id(body: Any, version: int) -> int:
    """The fetching replica's id: ReplicaState from v15, the replica id field before; -1 for consumers."""
    return int(body.replica_state.replica_id if version >= 15 else body.replica_id)


def follower_epoch(body: Any, version: int) -> int:
    return int(body.replica_state.replica_epoch) if version >= 15 else -1


def prepare_follower_fetch(node: Any, resolved: list[tuple[str | None, Any]], body: Any, version: int,
                           replica_id: int) -> dict[tuple[str, int], FetchPart]:
    """The answers decided before any read, keyed by (topic, partition); see the module docstring."""
    manager = getattr(node, "replication", None)
    out: dict[tuple[str, int], FetchPart] = {}
    if manager is None:
        for name, t in resolved:
            if name is not None:
                for p in t.partitions:
                    out[(name, p.partition)] = _part(p.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return out
    _decide(manager, manager.follower_fetch, resolved, body, version, replica_id, out)
    return out


def recheck_follower_fetch(node: Any, resolved: list[tuple[str | None, Any]], body: Any, version: int,
                           replica_id: int, decided: dict[tuple[str, int], FetchPart]) -> bool:
    """A parked follower's fetch, woken, looked at again as Kafka's DelayedFetch is (tryComplete: a broker no
    longer the leader, a leader epoch that moved on, a partition gone or offline complete it at once, with the
    errors its read then answers): the leader's checks again (check_follower_fetch, the follower's position
    not moved again), what they now refuse added to `decided`. Returns whether they added anything. Without
    it, a fetch parked before this broker lost the leadership (or started a new leader epoch) was answered
    with records read from a log that may since have been truncated and refilled from the new leader, with no
    error to send the follower looking for its new leader."""
    manager = getattr(node, "replication", None)
    if manager is None:
        return False
    return _decide(manager, manager.check_follower_fetch, resolved, body, version, replica_id, decided)


def _decide(manager: Any, check: Any, resolved: list[tuple[str | None, Any]], body: Any, version: int,
            replica_id: int, decided: dict[tuple[str, int], FetchPart]) -> bool:
    """`check` (the manager's follower_fetch or check_follower_fetch) on each partition not decided yet; the
    answers of those it refuses added to `decided`. Returns whether it added any."""
    epoch = follower_epoch(body, version)
    added = False
    records_log_start = check == manager.follower_fetch  # the fetch itself, not a parked one's recheck
    for name, t in resolved:
        if name is None:
            continue
        for p in t.partitions:
            key = (name, p.partition)
            if key in decided:
                continue
            verdict = check(name, p.partition, replica_id, epoch, p.current_leader_epoch, p.fetch_offset,
                            p.last_fetched_epoch)
            if verdict.error_code or verdict.diverging is not None:
                decided[key] = _decided(manager, name, p, verdict, version)
                added = True
            elif records_log_start:
                manager.follower_log_start(name, p.partition, replica_id, p.log_start_offset)
    return added


def _decided(manager: Any, name: str, p: Any, check: Any, version: int) -> FetchPart:
    """The answer of a partition its checks refused (an error, or where the follower's log diverges)."""
    code = check.error_code
    if code == ErrorCode.KAFKA_STORAGE_ERROR and version < 6:  # as Kafka maps it for old versions
        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    part = _part(p.partition, code)
    plog = manager._local_log(name, p.partition)
    if plog is not None and check.error_code in (0, ErrorCode.OFFSET_OUT_OF_RANGE):
        part.high_watermark = part.last_stable_offset = plog.high_watermark
        part.log_start_offset = plog.log_start_offset
    if check.diverging is not None:
        part.diverging_epoch = EpochEndOffset(epoch=check.diverging[0], end_offset=check.diverging[1])
    return part


def leader_throttled(node: Any, resolved: list[tuple[str | None, Any]], replica_id: int) -> frozenset[tuple[str, int]]:
    """The partitions of a follower's fetch this leader answers with no records now (the leader throttle:
    kjbod.broker.replication.throttle); empty at once when no topic is throttled here."""
    manager = getattr(node, "replication", None)
    if manager is None or not manager.throttles.leader.throttled:
        return frozenset()
    return frozenset((name, p.partition) for name, t in resolved if name is not None for p in t.partitions
                     if manager.leader_throttled(name, p.partition, replica_id))


def leader_throttling(node: Any) -> bool:
    """Whether this leader's throttle holds back some topic now (a follower's fetch then takes the long way)."""
    manager = getattr(node, "replication", None)
    return manager is not None and bool(manager.throttles.leader.throttled)


def leader_throttle_wait_s(node: Any) -> float:
    """Seconds until the leader quota allows the partitions it holds back now (at least THROTTLE_RECHECK_S)."""
    manager = getattr(node, "replication", None)
    if manager is None:
        return THROTTLE_RECHECK_S
    return max(THROTTLE_RECHECK_S, manager.throttles.leader.ms_until_within(manager.clock()) / 1000)


def leader_sent(node: Any, resolved: list[tuple[str | None, Any]], response: Any) -> None:
    """After answering a follower: the record bytes of its throttled partitions count against the leader quota
    (in sync or not, as Kafka counts them)."""
    manager = getattr(node, "replication", None)
    if manager is None or not manager.throttles.leader.throttled:
        return
    for (name, _t), topic in zip(resolved, response.responses, strict=True):
        if name is None:
            continue
        for p in topic.partitions:
            records = p.records
            size = sum(len(r) for r in records) if records.__class__ is list else len(records or b"")
            if size:
                manager.leader_sent(name, p.partition_index, size)


def _part(index: int, code: int) -> FetchPart:
    return FetchPart(partition_index=index, error_code=code, high_watermark=-1, last_stable_offset=-1,
                     log_start_offset=-1, records=b"")


def acks_all_refusal(node: Any, topic: str, partition: int) -> int:
    manager = getattr(node, "replication", None)
    return manager.check_acks_all(topic, partition) if manager is not None else 0


def appended(node: Any, topic: str, partition: int) -> None:
    manager = getattr(node, "replication", None)
    if manager is not None:
        manager.leader_appended(topic, partition)


def leader_state(node: Any, topic: str, partition: int) -> Any:
    """See ReplicaManager.leader_state (None on a node without replication)."""
    manager = getattr(node, "replication", None)
    return manager.leader_state(topic, partition) if manager is not None else None


def lost_leadership(state: Any) -> bool:
    """Whether this broker no longer leads a partition whose append it took with `state` (leader_state, at the
    hand-off): asked once the append is done, since the metadata may have moved the leadership, or the replica
    itself, while the append waited for its dir's worker. The batch then went into a follower's log (the
    fetcher truncates it away: it diverges from the new leader's epoch), or into a replica about to be deleted
    (a completed reassignment moved the partition off this broker). Kafka refuses such an append (it checks the
    leadership under the partition's lock, and a removed partition is not found); the answer is
    NOT_LEADER_OR_FOLLOWER, never a success the producer would count on: an acks=all record no replica the
    partition keeps has, or an idempotent producer's batch the new leader lacks (a fatal
    OUT_OF_ORDER_SEQUENCE_NUMBER for its next one). Still the leader in a later epoch (a reassignment re-elects
    it: the same state), the append is in the leader's log: a success."""
    return state is not None and state.role != LEADER


def needs_replication(node: Any, topic: str, partition: int, required_offset: int) -> bool:
    """Whether an acks=all answer must wait: a replicated leader whose HW is not yet at `required_offset` (a
    partition without followers has its HW at the LEO already, and answers at once)."""
    manager = getattr(node, "replication", None)
    return manager is not None and manager.must_wait(topic, partition, required_offset)


def await_replication(node: Any, response: Any, waits: list[tuple[str, Any, int]], timeout_ms: int) -> Any:
    """A Later (kjbod.wire.handler) of the Produce `response` once its acks=all partitions are replicated (or
    answered an error): completed by the HW move itself, with no task of its own (one per acks=all request cost
    a task's steps and a loop pass between the follower's fetch and the producer's answer), and the answer
    encoded and queued for writing in that same callback (an asyncio future's callbacks wait a loop pass)."""

    def answer(codes: list[int]) -> Any:
        for (_name, part, _required), code in zip(waits, codes, strict=True):
            if code:
                part.error_code = code
        return response

    return node.replication.delay_produce([(name, part.index, required) for name, part, required in waits],
                                          max(timeout_ms, 0) / 1000, answer, later=True)


def preferred_read_replicas(node: Any, resolved: list[tuple[str | None, Any]], rack: str,
                            listener: str) -> dict[tuple[str, int], int]:
    """KIP-392, with replica.selector.class set to Kafka's RackAwareReplicaSelector: for the partitions a
    consumer in `rack` fetches from this leader, the replica it should read instead (its answer then carries no
    records, only PreferredReadReplica, as Kafka's ReplicaManager.readFromLog skips the read).

    As Kafka's findPreferredReadReplica and RackAwareReplicaSelector: the candidates are the leader and the ISR
    members whose log holds the fetch offset (end offset at or past it, start at or before it); a candidate's
    rack is its broker's, known only if it has an endpoint on the consumer's listener; the leader stays the
    answer (no entry) when it is in the consumer's rack or no candidate is; otherwise the one there with the
    highest end offset, then the least time since it was last caught up, is named."""
    manager = getattr(node, "replication", None)
    if manager is None or not rack:
        return {}
    me, brokers, now = node.node_id, node.metadata.brokers, manager.clock()

    def rack_of(broker_id: int) -> str | None:
        reg = brokers.get(broker_id)
        return reg.rack if reg is not None and reg.endpoint(listener) is not None else None

    if rack_of(me) == rack:
        return {}
    out: dict[tuple[str, int], int] = {}
    for name, t in resolved:
        if name is None:
            continue
        for p in t.partitions:
            state = manager.states.get((name, p.partition))
            if state is None or state.role != LEADER:
                continue
            offset = p.fetch_offset
            best: tuple[int, int, int] | None = None  # (end offset, -time since caught up, -broker id)
            for r in sorted(state.isr):
                f = state.followers.get(r)
                if r == me or f is None or rack_of(r) != rack:
                    continue
                if f.log_end_offset >= offset and f.log_start_offset <= offset:
                    key = (f.log_end_offset, -(now - f.last_caught_up_ms), -r)
                    best = key if best is None or key > best else best
            if best is not None:
                out[(name, p.partition)] = -best[2]
    return out
