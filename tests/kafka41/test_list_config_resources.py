"""ListConfigResources (key 74) in process over a real MetadataImage and the real Authorizer: Kafka's type order,
the v0 client-metrics-only answer, the v1 filter, UNSUPPORTED_VERSION for a type Kafka does not list, and
CLUSTER_AUTHORIZATION_FAILED without DESCRIBE_CONFIGS on the cluster."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from kjbod.broker.handlers import list_config_resources as lcr
from kjbod.metadata.acls import (
    ALLOW,
    CLUSTER,
    CLUSTER_NAME,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    LITERAL,
    AclEntry,
    Authorizer,
)
from kjbod.metadata.image import MetadataImage, TopicImage
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import ListConfigResourcesRequest as Req
from kjbod.protocol.generated import ListConfigResourcesResponse as Resp

ALICE = "User:alice"


def _node(authorizer=None):
    topics = {n: TopicImage(name=n, topic_id=uuid.uuid4()) for n in ("b", "a")}
    configs = {(2, "a"): {"retention.ms": "1"}, (32, "g2"): {"consumer.session.timeout.ms": "50000"},
               (32, "g1"): {"consumer.session.timeout.ms": "50000"}, (16, "sub"): {"interval.ms": "1000"},
               (32, "emptied"): {}}
    brokers = [SimpleNamespace(node_id=i) for i in (10, 2)]
    return SimpleNamespace(metadata=MetadataImage(topics_by_name=topics, configs=configs), authorizer=authorizer,
                           cluster_nodes=lambda listener, controllers: brokers)


def _ask(node, version: int, types=()) -> Resp:
    body = Req.decode(Req(resource_types=list(types)).encode(version), version)
    request = SimpleNamespace(api_version=version, ctx=SimpleNamespace(listener_name="PLAINTEXT", principal=ALICE,
                                                                       peer_host="127.0.0.1"))
    return Resp.decode(lcr.handle(node, request, body).encode(version), version)


def _rows(r: Resp) -> list[tuple[int, str]]:
    return [(c.resource_type, c.resource_name) for c in r.config_resources]


def test_v1_lists_every_type_in_kafkas_order():
    assert _rows(_ask(_node(), 1)) == [(32, "g1"), (32, "g2"), (16, "sub"), (8, "2"), (8, "10"), (4, "2"), (4, "10"),
                                       (2, "a"), (2, "b")]
    # the filter keeps Kafka's order, whatever order it is given in; a type named twice lists once
    assert _rows(_ask(_node(), 1, [2, 32, 2])) == [(32, "g1"), (32, "g2"), (2, "a"), (2, "b")]


def test_v0_lists_client_metrics_only():
    r = _ask(_node(), 0)
    assert (r.error_code, [c.resource_name for c in r.config_resources]) == (0, ["sub"])


def test_a_type_kafka_does_not_list_fails_the_request():
    for types in ([1], [2, 64], [0]):
        r = _ask(_node(), 1, types)
        assert (r.error_code, r.config_resources) == (E.UNSUPPORTED_VERSION, [])


def test_describe_configs_on_the_cluster_is_needed():
    def authz(op: int) -> Authorizer:
        acls = {uuid.uuid4(): AclEntry(CLUSTER, CLUSTER_NAME, LITERAL, ALICE, "*", op, ALLOW)}
        return Authorizer(lambda: acls)

    assert _ask(_node(authz(DESCRIBE)), 1).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert _ask(_node(authz(DESCRIBE)), 0).config_resources == []
    assert _ask(_node(authz(DESCRIBE_CONFIGS)), 1).error_code == 0
