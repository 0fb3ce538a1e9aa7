"""The partitions of a Fetch as Kafka answers them (kjbod.broker.handlers.fetch._resolve), in process: a partition
named twice is answered once where first named with what it was last asked; unknown topics and partitions come
after the others; consecutive partitions of a topic share an entry; a request without any of that is kept as it
came (the follower's hot path builds nothing).  The live answers: tests/robustness/test_fetch_edges_live.py."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from kjbod.broker.handlers.fetch import _resolve
from kjbod.protocol.generated import FetchRequest

A_ID, B_ID = uuid.uuid4(), uuid.uuid4()
TOPICS = {"a": SimpleNamespace(name="a", topic_id=A_ID, partitions={0: None, 1: None}),
          "b": SimpleNamespace(name="b", topic_id=B_ID, partitions={0: None})}


def node() -> Any:
    by_id = {t.topic_id: t for t in TOPICS.values()}
    return SimpleNamespace(metadata=SimpleNamespace(topic=TOPICS.get, topic_by_id=by_id.get))


def at(partition: int, offset: int = 0) -> FetchRequest.FetchPartition:
    return FetchRequest.FetchPartition(partition=partition, fetch_offset=offset)


def request(*topics: tuple[Any, list[FetchRequest.FetchPartition]]) -> FetchRequest:
    return FetchRequest(topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) if isinstance(t, str)
                                else FetchRequest.FetchTopic(topic_id=t, partitions=ps) for t, ps in topics])


def shape(resolved: list) -> list[tuple[Any, Any, list[tuple[int, int]]]]:
    return [(name, t.topic or t.topic_id, [(p.partition, p.fetch_offset) for p in t.partitions])
            for name, t in resolved]


def test_a_request_kafka_would_answer_as_it_came_is_kept_as_it_came():
    body = request(("a", [at(0), at(1)]), ("b", [at(0)]))
    resolved = _resolve(node(), body, 12)
    assert [(name, t) for name, t in resolved] == [("a", body.topics[0]), ("b", body.topics[1])]
    assert all(a is b for (_, a), b in zip(resolved, body.topics, strict=True))


def test_partitions_named_twice_unknown_ones_and_split_topics_are_answered_as_kafka():
    body = request(("a", [at(0, 1), at(7)]), ("nope", [at(0)]), ("a", [at(0, 5)]), ("b", [at(0)]), ("a", []),
                   ("b", [at(0, 9)]), ("a", [at(1)]))
    assert shape(_resolve(node(), body, 12)) == [
        ("a", "a", [(0, 5)]), ("b", "b", [(0, 9)]), ("a", "a", [(1, 0), (7, 0)]), (None, "nope", [(0, 0)])]
    body = request(("a", [at(0)]), ("a", [at(1)]))
    assert shape(_resolve(node(), body, 12)) == [("a", "a", [(0, 0), (1, 0)])]
    assert _resolve(node(), request(("a", [])), 12) == []


def test_from_v13_topics_are_told_apart_by_id():
    unknown = uuid.uuid4()
    body = request((unknown, [at(0)]), (A_ID, [at(0, 1)]), (unknown, [at(0, 2)]), (uuid.UUID(int=0), [at(0)]),
                   (A_ID, [at(0, 3)]))
    assert shape(_resolve(node(), body, 13)) == [
        ("a", A_ID, [(0, 3)]), (None, unknown, [(0, 2)]), (None, uuid.UUID(int=0), [(0, 0)])]
