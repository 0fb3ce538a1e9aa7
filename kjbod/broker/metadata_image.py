"""The broker's view of cluster metadata: topics, their ids, partitions, replicas and topic configs.

On the single combined node the image is built from the metadata log at startup and changed only through
`apply_*` calls made by the topic handlers after the change is durable in that log, so the image and the log
never disagree.  Handlers read it directly; it is plain data with no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from uuid import UUID

TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME = 249


def topic_name_problem(name: str | None) -> str | None:
    """Kafka's topic name rules; returns why a name is invalid, or None when it is fine."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME:
        return f"topic name is {len(name)} characters long; the maximum is {MAX_TOPIC_NAME}"
    if not TOPIC_NAME.fullmatch(name):
        return f"topic name {name!r} contains characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


@dataclass(slots=True)
class PartitionState:
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    directories: list[UUID] = field(default_factory=list)


@dataclass(slots=True)
class TopicState:
    name: str
    topic_id: UUID
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)


class MetadataImage:
    def __init__(self) -> None:
        self.by_name: dict[str, TopicState] = {}
        self.by_id: dict[UUID, TopicState] = {}

    def topic(self, name: str) -> TopicState | None:
        return self.by_name.get(name)

    def topic_by_id(self, topic_id: UUID) -> TopicState | None:
        return self.by_id.get(topic_id)

    def topics(self) -> list[TopicState]:
        return list(self.by_name.values())

    def apply_topic(self, topic: TopicState) -> None:
        self.by_name[topic.name] = topic
        self.by_id[topic.topic_id] = topic

    def apply_remove_topic(self, topic_id: UUID) -> TopicState | None:
        topic = self.by_id.pop(topic_id, None)
        if topic is not None:
            self.by_name.pop(topic.name, None)
        return topic
