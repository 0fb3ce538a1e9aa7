"""A streams group's topology and what the metadata image makes of it (KIP-1071), without I/O.

Strategy: the first member to join gives the group its topology (sub-topologies, their source, repartition and
changelog topics, copartition groups); the coordinator then *configures* it against the topics that exist, as
Kafka's InternalTopicManager does:

1. every user source topic must exist, else the group is not ready (status MISSING_SOURCE_TOPICS);
2. repartition topics without a fixed partition count take the largest count among the source topics of the
   sub-topologies that write to them (repeated until nothing changes, since repartition topics feed each other);
3. the topics of each copartition group must agree: user source topics with different counts, or a fixed
   repartition topic differing from them, is INCORRECTLY_PARTITIONED_TOPICS; flexible repartition topics of the
   group take the group's count;
4. a sub-topology has one task per partition of its widest input; its changelog topics get that many partitions;
5. repartition and changelog topics missing from the image are returned for the broker to create (status
   MISSING_INTERNAL_TOPICS until they exist); an existing one with another partition count is
   INCORRECTLY_PARTITIONED_TOPICS.

A topology is *ready* (tasks can be assigned) only when none of these statuses is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# Kafka's StreamsGroupHeartbeatResponse.Status codes
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5

PartitionCount = Callable[[str], "int | None"]  # a topic's partition count in the image, None when it does not exist


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int = 0  # 0: left to the coordinator (always for changelog topics)
    replication_factor: int = 0  # 0: the broker's default
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    # each group: indexes into source_topics, then into repartition_source_topics
    copartition_groups: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = ()
    source_topic_regex: tuple[str, ...] = ()  # refused: Kafka 4.3 serves no regular expressions yet

    @property
    def stateful(self) -> bool:
        return bool(self.state_changelog_topics)


@dataclass(frozen=True, slots=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def required_topics(self) -> list[str]:
        """Every topic the topology names, each once, in the order Kafka's broker authorizes them."""
        out: dict[str, None] = {}
        for s in self.subtopologies:
            for name in (*s.source_topics, *s.repartition_sink_topics,
                         *(t.name for t in s.repartition_source_topics),
                         *(t.name for t in s.state_changelog_topics)):
                out.setdefault(name)
        return list(out)


@dataclass(frozen=True, slots=True)
class Configured:
    """A topology configured against the image: the tasks of each sub-topology when ready, else the status."""

    epoch: int
    tasks: Mapping[str, int] = field(default_factory=dict)  # sub-topology id -> number of tasks (empty: not ready)
    to_create: Mapping[str, TopicInfo] = field(default_factory=dict)  # internal topics to create (partitions set)
    status: tuple[int, str] | None = None
    internal: Mapping[str, TopicInfo] = field(default_factory=dict)  # when ready: every internal topic, counts set

    @property
    def ready(self) -> bool:
        return self.status is None


class _Misconfigured(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def summarize(names: list[str] | set[str]) -> str:
    return ", ".join(sorted(names))


def configure(topology: Topology, partitions_of: PartitionCount) -> Configured:
    try:
        missing = sorted({t for s in topology.subtopologies for t in s.source_topics if partitions_of(t) is None})
        if missing:
            raise _Misconfigured(MISSING_SOURCE_TOPICS, f"Source topics {summarize(missing)} are missing.")
        decided: dict[str, int] = {}

        def count(topic: str) -> int | None:
            n = partitions_of(topic)
            return n if n is not None else decided.get(topic)

        _decide_repartition_counts(topology, decided, count)
        _enforce_copartitioning(topology, decided, count)
        tasks: dict[str, int] = {}
        for s in topology.subtopologies:
            inputs = [count(t) for t in (*s.source_topics, *(r.name for r in s.repartition_source_topics))]
            known = [n for n in inputs if n is not None]
            tasks[s.subtopology_id] = max(known) if known else 0
            for c in s.state_changelog_topics:
                decided[c.name] = tasks[s.subtopology_id]
        wanted: dict[str, TopicInfo] = {}
        for s in topology.subtopologies:
            for t in (*s.repartition_source_topics, *s.state_changelog_topics):
                n = t.partitions or decided.get(t.name) or count(t.name) or 0
                wanted[t.name] = TopicInfo(t.name, n, t.replication_factor, t.configs)
        to_create: dict[str, TopicInfo] = {}
        for name, info in wanted.items():
            existing = partitions_of(name)
            if existing is None:
                to_create[name] = info
            elif existing != info.partitions:
                raise _Misconfigured(INCORRECTLY_PARTITIONED_TOPICS, f"Existing topic {name} has different number of "
                                     f"partitions: expected {info.partitions}, found {existing}")
    except _Misconfigured as e:
        return Configured(topology.epoch, status=(e.status, e.detail))
    if to_create:
        return Configured(topology.epoch, tasks=tasks, to_create=to_create,
                          status=(MISSING_INTERNAL_TOPICS, f"Internal topics are missing: {summarize(set(to_create))}"))
    return Configured(topology.epoch, tasks=tasks, internal=wanted)


def _decide_repartition_counts(topology: Topology, decided: dict[str, int],
                               count: Callable[[str], int | None]) -> None:
    for s in topology.subtopologies:
        for r in s.repartition_source_topics:
            if r.partitions:
                decided[r.name] = r.partitions
    flexible = {r.name for s in topology.subtopologies for r in s.repartition_source_topics if not r.partitions}
    changed = True
    while changed:
        changed = False
        for name in sorted(flexible):
            if name in decided:
                continue
            writers = [s for s in topology.subtopologies if name in s.repartition_sink_topics]
            counts = [count(t) for s in writers for t in (*s.source_topics, *(r.name for r in s.repartition_source_topics))]
            if counts and all(n is not None for n in counts) and not any(w for w in writers if any(
                    r.name in flexible and r.name not in decided for r in w.repartition_source_topics)):
                decided[name] = max(n for n in counts if n is not None)
                changed = True
    undecided = sorted(n for n in flexible if n not in decided)
    if undecided:
        raise _Misconfigured(MISSING_SOURCE_TOPICS,
                             f"The number of partitions of repartition topics {summarize(undecided)} cannot be "
                             "derived from the topology.")


def _enforce_copartitioning(topology: Topology, decided: dict[str, int],
                            count: Callable[[str], int | None]) -> None:
    fixed = {r.name for s in topology.subtopologies for r in s.repartition_source_topics if r.partitions}
    for s in topology.subtopologies:
        for sources, repartitions in s.copartition_groups:
            users = [s.source_topics[i] for i in sources if i < len(s.source_topics)]
            reps = [s.repartition_source_topics[i].name for i in repartitions if i < len(s.repartition_source_topics)]
            user_counts = {t: count(t) for t in users}
            if len(set(user_counts.values())) > 1:
                raise _Misconfigured(INCORRECTLY_PARTITIONED_TOPICS,
                                     "Following topics do not have the same number of partitions: "
                                     f"[{summarize(set(users))}]")
            target = next(iter(user_counts.values()), None)
            fixed_here = [t for t in reps if t in fixed]
            for t in fixed_here:
                if target is not None and decided[t] != target:
                    raise _Misconfigured(INCORRECTLY_PARTITIONED_TOPICS,
                                         f"Number of partitions [{decided[t]}] of repartition topic [{t}] doesn't "
                                         f"match number of partitions [{target}] of the source topic.")
                target = decided[t] if target is None else target
            if target is None:
                known = [n for t in reps if (n := count(t)) is not None]
                target = max(known) if known else None
            if target is not None:
                for t in reps:
                    if t not in fixed:
                        decided[t] = target
