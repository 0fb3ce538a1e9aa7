"""DescribeTopicPartitions (key 75) in process: the handler over a real MetadataImage and, where ACLs matter, the
real Authorizer.  Paging, cursors, limits, unknown and refused topics and the replica fields, each as Kafka's
DescribeTopicPartitionsRequestHandler answers them.  The live paging test is in test_describe_topic_partitions_live.py.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from kjbod.broker.handlers import describe_topic_partitions as dtp
from kjbod.metadata.acls import ALLOW, DESCRIBE, LITERAL, TOPIC, AclEntry, Authorizer
from kjbod.metadata.image import (
    DIR_LOST,
    BrokerRegistration,
    Endpoint,
    MetadataImage,
    PartitionImage,
    TopicImage,
)
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import DescribeTopicPartitionsRequest as Req
from kjbod.protocol.generated import DescribeTopicPartitionsResponse as Resp
from kjbod.protocol.runtime import ZERO_UUID

NOT_ASKED = -(2**31)
ALICE = "User:alice"


def _topic(name: str, count: int, replicas=(1, 2), leader: int = 1, dirs=()) -> TopicImage:
    parts = {i: PartitionImage(partition=i, replicas=tuple(replicas), isr=tuple(replicas), leader=leader,
                               leader_epoch=3, directories=tuple(dirs)) for i in range(count)}
    return TopicImage(name=name, topic_id=uuid.uuid4(), partitions=parts)


def _broker(bid: int, *, fenced: bool = False, listener: str = "PLAINTEXT", dirs=()) -> BrokerRegistration:
    return BrokerRegistration(broker_id=bid, epoch=1, incarnation_id=uuid.uuid4(),
                              listeners=(Endpoint(listener, "127.0.0.1", 9000 + bid),), fenced=fenced,
                              log_dirs=tuple(dirs))


def _node(topics, *, limit: int = 2000, brokers=None, authorizer=None):
    image = MetadataImage(topics_by_name={t.name: t for t in topics}, topics_by_id={t.topic_id: t for t in topics},
                          brokers=brokers if brokers is not None else {1: _broker(1), 2: _broker(2)})
    return SimpleNamespace(metadata=image, node_id=1, config=SimpleNamespace(max_request_partition_size_limit=limit),
                           partition_online=lambda name, p: True, authorizer=authorizer)


def _request(principal: str = ALICE):
    return SimpleNamespace(api_version=0, ctx=SimpleNamespace(listener_name="PLAINTEXT", principal=principal,
                                                              peer_host="127.0.0.1"))


def _ask(node, names=(), limit: int = 2000, cursor=None) -> Resp:
    body = Req(topics=[_topic_req(n) for n in names],
               response_partition_limit=limit, cursor=None if cursor is None else _cursor(*cursor))
    # through the codec both ways, as a client's bytes would arrive and the answer would leave
    body = Req.decode(body.encode(0), 0)
    answer = dtp.handle(node, _request(), body)
    return Resp.decode(answer.encode(0), 0)


def _topic_req(name: str):
    from kjbod.protocol.generated.describe_topic_partitions_request import TopicRequest

    return TopicRequest(name=name)


def _cursor(name: str, index: int):
    from kjbod.protocol.generated.describe_topic_partitions_request import Cursor

    return Cursor(topic_name=name, partition_index=index)


def _pages(node, names=(), limit: int = 2000) -> list[Resp]:
    pages, cursor = [], None
    while True:
        page = _ask(node, names, limit, cursor)
        pages.append(page)
        if page.next_cursor is None:
            return pages
        cursor = (page.next_cursor.topic_name, page.next_cursor.partition_index)
        assert len(pages) < 100


def _listed(pages) -> list[tuple[str, int]]:
    return [(t.name, p.partition_index) for page in pages for t in page.topics for p in t.partitions]


def test_every_topic_in_name_order_with_its_partitions():
    node = _node([_topic("b", 2), _topic("a", 3)])
    page = _ask(node)
    assert [t.name for t in page.topics] == ["a", "b"]
    assert page.next_cursor is None
    a = page.topics[0]
    assert (a.error_code, a.is_internal, a.topic_id) == (0, False, node.metadata.topic("a").topic_id)
    assert [p.partition_index for p in a.partitions] == [0, 1, 2]
    p = a.partitions[0]
    assert (p.error_code, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes) == (0, 1, 3, [1, 2], [1, 2])
    # ELR is off in kjbod: empty lists, as Kafka answers with ELR off (not null)
    assert (p.eligible_leader_replicas, p.last_known_elr, p.offline_replicas) == ([], [], [])
    assert a.topic_authorized_operations != NOT_ASKED  # without an authorizer: every operation a topic has


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 7, 100])
def test_paging_walks_every_partition_once(limit):
    node = _node([_topic("a", 3), _topic("b", 1), _topic("c", 4)])
    pages = _pages(node, limit=limit)
    expected = [("a", i) for i in range(3)] + [("b", 0)] + [("c", i) for i in range(4)]
    assert _listed(pages) == expected
    assert all(sum(len(t.partitions) for t in page.topics) <= limit for page in pages)
    assert len(pages) == -(-len(expected) // limit)  # no empty last page


def test_the_cursor_marks_where_a_full_page_stopped():
    node = _node([_topic("a", 3), _topic("b", 2)])
    cut = _ask(node, limit=2)  # inside a topic: that topic's first partition left out
    assert [(t.name, len(t.partitions)) for t in cut.topics] == [("a", 2)]
    assert (cut.next_cursor.topic_name, cut.next_cursor.partition_index) == ("a", 2)
    exact = _ask(node, limit=3)  # full at a topic's end: the next topic's partition 0
    assert [(t.name, len(t.partitions)) for t in exact.topics] == [("a", 3)]
    assert (exact.next_cursor.topic_name, exact.next_cursor.partition_index) == ("b", 0)
    rest = _ask(node, limit=3, cursor=("b", 0))
    assert [(t.name, len(t.partitions)) for t in rest.topics] == [("b", 2)] and rest.next_cursor is None
    later = _ask(node, cursor=("a", 1))  # the cursor's partition for its topic only; topics before it left out
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in later.topics] == [("a", [1, 2]),
                                                                                          ("b", [0, 1])]


def test_the_brokers_limit_caps_the_clients_and_a_zero_limit_is_one():
    node = _node([_topic("a", 10)], limit=4)
    assert len(_ask(node, limit=2000).topics[0].partitions) == 4
    assert len(_ask(node, limit=3).topics[0].partitions) == 3
    assert len(_ask(node, limit=0).topics[0].partitions) == 1
    assert len(_ask(node, limit=-5).topics[0].partitions) == 1


def test_named_topics_unknown_and_invalid_names():
    node = _node([_topic("a", 1), _topic("__consumer_offsets", 2)])
    page = _ask(node, ["zz", "a", "bad name!", "a", "__consumer_offsets"])
    got = {t.name: (t.error_code, t.topic_id, t.is_internal, len(t.partitions)) for t in page.topics}
    assert [t.name for t in page.topics] == ["__consumer_offsets", "a", "bad name!", "zz"]  # each once, sorted
    assert got["zz"] == (E.UNKNOWN_TOPIC_OR_PARTITION, ZERO_UUID, False, 0)
    assert got["bad name!"] == (E.INVALID_TOPIC_EXCEPTION, ZERO_UUID, False, 0)
    assert got["__consumer_offsets"][0::2] == (0, True) and got["a"][0] == 0
    # an unknown topic takes no room in the page
    node = _node([_topic("a", 1), _topic("c", 1)])
    page = _ask(node, ["a", "b0", "c"], limit=2)
    assert [(t.name, t.error_code) for t in page.topics] == [("a", 0), ("b0", 3), ("c", 0)]
    assert page.next_cursor is None
    # a full page stops before the next name, known or not: the cursor names it
    page = _ask(node, ["a", "b0", "c"], limit=1)
    assert [t.name for t in page.topics] == ["a"]
    assert (page.next_cursor.topic_name, page.next_cursor.partition_index) == ("b0", 0)
    page = _ask(node, ["a", "b0", "c"], limit=1, cursor=("b0", 0))
    assert [(t.name, t.error_code) for t in page.topics] == [("b0", 3), ("c", 0)] and page.next_cursor is None


def test_a_bad_cursor_is_invalid_request_for_every_named_topic():
    node = _node([_topic("a", 2), _topic("b", 2)])
    # the cursor's topic must be among the named ones
    page = _ask(node, ["a", "b"], cursor=("c", 0))
    assert [(t.name, t.error_code, t.partitions) for t in page.topics] == [
        ("a", E.INVALID_REQUEST, []), ("b", E.INVALID_REQUEST, [])]
    page = _ask(node, ["b"], cursor=("b", -1))
    assert [(t.name, t.error_code) for t in page.topics] == [("b", E.INVALID_REQUEST)]
    # all topics asked for: nothing named, so an empty answer; a cursor topic that does not exist is fine
    assert _ask(node, cursor=("a", -1)).topics == []
    assert [t.name for t in _ask(node, cursor=("aa", 0)).topics] == ["b"]


def test_a_cursor_past_the_topics_end_answers_it_empty():
    node = _node([_topic("a", 2), _topic("b", 1)])
    page = _ask(node, cursor=("a", 5))
    assert [(t.name, len(t.partitions)) for t in page.topics] == [("a", 0), ("b", 1)]


def test_offline_replicas_and_unreachable_leaders():
    d1, d2 = uuid.uuid4(), uuid.uuid4()
    brokers = {1: _broker(1, dirs=[d1]), 2: _broker(2, dirs=[d2]), 3: _broker(3, fenced=True),
               4: _broker(4, listener="OTHER")}
    topics = [_topic("dirs", 1, replicas=(1, 2), dirs=(d1, DIR_LOST)),  # broker 2's replica in a lost dir
              _topic("fenced", 1, replicas=(3, 1), leader=3),  # a fenced leader is still registered: named
              _topic("nolistener", 1, replicas=(4, 1), leader=4),  # leader without this listener: -1
              _topic("gone", 1, replicas=(5, 1), leader=5)]  # leader not registered: -1
    page = _ask(_node(topics, brokers=brokers))
    got = {t.name: t.partitions[0] for t in page.topics}
    assert (got["dirs"].leader_id, got["dirs"].offline_replicas) == (1, [2])
    assert (got["fenced"].leader_id, got["fenced"].offline_replicas, got["fenced"].error_code) == (3, [3], 0)
    assert (got["nolistener"].leader_id, got["nolistener"].offline_replicas) == (-1, [4])
    assert (got["gone"].leader_id, got["gone"].offline_replicas, got["gone"].error_code) == (-1, [5], 0)
    assert got["gone"].replica_nodes == [5, 1]  # replicas and ISR unfiltered, as Kafka lists them


def _acl(name: str) -> AclEntry:
    return AclEntry(TOPIC, name, LITERAL, ALICE, "*", DESCRIBE, ALLOW)


def test_topics_the_caller_may_not_describe():
    acls = {uuid.uuid4(): _acl("a"), uuid.uuid4(): _acl("c")}
    node = _node([_topic("a", 1), _topic("b", 1), _topic("c", 1)], authorizer=Authorizer(lambda: acls))
    # all topics: the refused ones are left out silently
    assert [t.name for t in _ask(node).topics] == ["a", "c"]
    # named: TOPIC_AUTHORIZATION_FAILED after the others, without id, whether the topic exists or not
    page = _ask(node, ["b", "nope", "c", "a"])
    assert [(t.name, t.error_code) for t in page.topics] == [
        ("a", 0), ("c", 0), ("b", E.TOPIC_AUTHORIZATION_FAILED), ("nope", E.TOPIC_AUTHORIZATION_FAILED)]
    refused = page.topics[2]
    assert (refused.topic_id, refused.partitions, refused.topic_authorized_operations) == (ZERO_UUID, [], NOT_ASKED)
    assert page.topics[0].topic_authorized_operations == 1 << DESCRIBE
    # refused topics are reported on a page that stops early too (Kafka checks them all before the walk)
    page = _ask(node, ["a", "b", "c"], limit=1)
    assert [(t.name, t.error_code) for t in page.topics] == [("a", 0), ("b", E.TOPIC_AUTHORIZATION_FAILED)]
    assert page.next_cursor.topic_name == "c"


def test_paging_equals_one_answer():
    node = _node([_topic(f"t{i}", i + 1) for i in range(6)])
    whole = _listed([_ask(node)])
    for limit in (1, 2, 5, 20):
        assert _listed(_pages(node, limit=limit)) == whole
        assert _listed(_pages(node, [f"t{i}" for i in (5, 1, 3)], limit=limit)) == [
            (t, p) for t, p in whole if t in ("t1", "t3", "t5")]


def test_the_broker_key_sets_the_page_size():
    from kjbod.server.config import ConfigError, build_config

    base = {"node.id": "1", "process.roles": "broker,controller",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER", "log.dirs": "/data/a"}
    assert build_config(base).max_request_partition_size_limit == 2000  # Kafka's default
    node = _node([_topic("a", 2500)])
    node.config = build_config(base)
    assert len(_ask(node, limit=2_000_000).topics[0].partitions) == 2000
    node.config = build_config({**base, "max.request.partition.size.limit": "7"})
    assert len(_ask(node).topics[0].partitions) == 7
    with pytest.raises(ConfigError, match="max.request.partition.size.limit"):
        build_config({**base, "max.request.partition.size.limit": "0"})  # Kafka's atLeast(1)
