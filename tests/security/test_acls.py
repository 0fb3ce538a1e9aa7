"""ACLs in process: the authorizer's matching rules (Kafka's StandardAuthorizer), filters, the controller's
CreateAcls/DeleteAcls records and their replay into an image, snapshots, the config keys and the TLS principal."""

from __future__ import annotations

import uuid

import pytest

from kjbod.controller.acls import create_acls, delete_acls
from kjbod.metadata import EMPTY_IMAGE, MetadataDelta, image_records
from kjbod.metadata.acls import (
    ALL,
    ALLOW,
    ALTER,
    ALTER_CONFIGS,
    ANY,
    CLUSTER,
    CREATE,
    DELETE,
    DENY,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    LITERAL,
    MATCH,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    AclEntry,
    AclFilter,
    Authorizer,
    describe_acls,
)
from kjbod.net.tls import certificate_principal
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import CreateAclsRequest, DeleteAclsRequest
from kjbod.protocol.generated.create_acls_request import AclCreation
from kjbod.protocol.generated.delete_acls_request import DeleteAclsFilter
from kjbod.server.config import ConfigError, build_config

ALICE, BOB = "User:alice", "User:bob"
HOST = "127.0.0.1"


def acl(rtype: int, name: str, principal: str = ALICE, op: int = READ, perm: int = ALLOW, *,
        pattern: int = LITERAL, host: str = "*") -> AclEntry:
    return AclEntry(rtype, name, pattern, principal, host, op, perm)


def authorizer(*entries: AclEntry, **kw: object) -> Authorizer:
    acls = {uuid.uuid4(): e for e in entries}
    return Authorizer(lambda: acls, **kw)  # type: ignore[arg-type]


# -- the decision ---------------------------------------------------------------------------------------------------


def test_no_acl_denies_unless_allow_everyone_if_no_acl_found() -> None:
    assert not authorizer().allowed(ALICE, HOST, READ, TOPIC, "t")
    assert authorizer(allow_if_no_acl=True).allowed(ALICE, HOST, READ, TOPIC, "t")
    # an entry on the resource for someone else: no longer "no ACL found"
    assert not authorizer(acl(TOPIC, "t", BOB), allow_if_no_acl=True).allowed(ALICE, HOST, READ, TOPIC, "t")
    # an entry on another resource leaves this one without any
    assert authorizer(acl(TOPIC, "u", BOB), allow_if_no_acl=True).allowed(ALICE, HOST, READ, TOPIC, "t")


def test_literal_wildcard_and_prefixed_resources() -> None:
    a = authorizer(acl(TOPIC, "orders"), acl(TOPIC, "*", BOB), acl(TOPIC, "logs-", pattern=PREFIXED))
    assert a.allowed(ALICE, HOST, READ, TOPIC, "orders")
    assert not a.allowed(ALICE, HOST, READ, TOPIC, "orders2")  # literal is exact
    assert a.allowed(ALICE, HOST, READ, TOPIC, "logs-app")
    assert a.allowed(ALICE, HOST, READ, TOPIC, "logs-")
    assert not a.allowed(ALICE, HOST, READ, TOPIC, "logs")
    assert a.allowed(BOB, HOST, READ, TOPIC, "anything")
    assert not a.allowed(BOB, HOST, READ, GROUP, "anything")  # per resource type


def test_deny_wins_over_allow_and_all() -> None:
    a = authorizer(acl(TOPIC, "*", op=ALL), acl(TOPIC, "secret", op=READ, perm=DENY))
    assert a.allowed(ALICE, HOST, WRITE, TOPIC, "secret")
    assert not a.allowed(ALICE, HOST, READ, TOPIC, "secret")
    assert a.allowed(ALICE, HOST, READ, TOPIC, "public")
    b = authorizer(acl(TOPIC, "t", op=READ), acl(TOPIC, "t", "User:*", op=ALL, perm=DENY))
    assert not b.allowed(ALICE, HOST, READ, TOPIC, "t")


def test_implied_operations_for_allow_only() -> None:
    for op in (READ, WRITE, DELETE, ALTER):
        assert authorizer(acl(TOPIC, "t", op=op)).allowed(ALICE, HOST, DESCRIBE, TOPIC, "t")
    assert not authorizer(acl(TOPIC, "t", op=CREATE)).allowed(ALICE, HOST, DESCRIBE, TOPIC, "t")
    assert authorizer(acl(TOPIC, "t", op=ALTER_CONFIGS)).allowed(ALICE, HOST, DESCRIBE_CONFIGS, TOPIC, "t")
    assert not authorizer(acl(TOPIC, "t", op=DESCRIBE)).allowed(ALICE, HOST, READ, TOPIC, "t")
    # a DENY of READ does not deny DESCRIBE
    a = authorizer(acl(TOPIC, "t", op=DESCRIBE), acl(TOPIC, "t", op=READ, perm=DENY))
    assert a.allowed(ALICE, HOST, DESCRIBE, TOPIC, "t")


def test_principal_wildcard_host_and_super_users() -> None:
    a = authorizer(acl(TOPIC, "t", "User:*", host="10.0.0.1"), super_users=["User:admin"])
    assert a.allowed(ALICE, "10.0.0.1", READ, TOPIC, "t")
    assert not a.allowed(ALICE, HOST, READ, TOPIC, "t")
    assert a.allowed("User:admin", HOST, ALTER, CLUSTER, "kafka-cluster")


def test_decisions_follow_the_image_the_authorizer_reads() -> None:
    current: dict[uuid.UUID, AclEntry] = {}
    a = Authorizer(lambda: current)
    assert not a.allowed(ALICE, HOST, READ, TOPIC, "t")
    current = {uuid.uuid4(): acl(TOPIC, "t")}  # a new image: a new map
    assert a.allowed(ALICE, HOST, READ, TOPIC, "t")
    current = {}
    assert not a.allowed(ALICE, HOST, READ, TOPIC, "t")


# -- filters --------------------------------------------------------------------------------------------------------


def test_filters_match_as_kafkas() -> None:
    lit, pre, star = acl(TOPIC, "orders"), acl(TOPIC, "ord", pattern=PREFIXED), acl(TOPIC, "*")
    entries = [lit, pre, star, acl(GROUP, "g")]
    assert AclFilter(TOPIC, "orders", MATCH).matches(lit)
    assert AclFilter(TOPIC, "orders", MATCH).matches(pre)
    assert AclFilter(TOPIC, "orders", MATCH).matches(star)
    assert not AclFilter(TOPIC, "orders", ANY).matches(pre)  # ANY: the exact name, any pattern type
    assert AclFilter(TOPIC, "ord", ANY).matches(pre)
    assert [r.resource_name for r in describe_acls(entries, AclFilter(TOPIC))] == ["*", "ord", "orders"]
    assert [r.resource_name for r in describe_acls(entries, AclFilter(pattern_type=PREFIXED))] == ["ord"]
    assert not AclFilter(principal=BOB).matches(lit)
    assert AclFilter(operation=READ, permission_type=ALLOW, host="*").matches(lit)
    assert AclFilter(operation=99).unknown_element() == "operation"


# -- the controller, replay, snapshots ------------------------------------------------------------------------------


def creation(rtype: int = TOPIC, name: str = "t", pattern: int = LITERAL, principal: str = ALICE, op: int = READ,
             perm: int = ALLOW, host: str = "*") -> AclCreation:
    return AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern, principal=principal,
                       host=host, operation=op, permission_type=perm)


def applied(image, records):  # type: ignore[no-untyped-def]
    delta = MetadataDelta(image)
    for i, rec in enumerate(records):
        delta.replay(rec, image.offset + 1 + i)
    return delta.apply()


def test_create_checks_each_entry_and_skips_existing_ones() -> None:
    req = CreateAclsRequest(creations=[
        creation(), creation(),  # the same entry twice: one record
        creation(rtype=ANY), creation(op=ANY), creation(pattern=MATCH), creation(perm=ANY),
        creation(name=""), creation(rtype=CLUSTER, name="other"), creation(principal="alice"),
        creation(rtype=CLUSTER, name="kafka-cluster", op=ALTER)])
    result = create_acls(EMPTY_IMAGE, req)
    answers = [(r.error_code, r.error_message) for r in result.response.results]
    assert answers == [
        (0, None), (0, None),
        (ErrorCode.INVALID_REQUEST, "Invalid resourceType ANY"),
        (ErrorCode.INVALID_REQUEST, "Invalid operation ANY"),
        (ErrorCode.INVALID_REQUEST, "Invalid patternType MATCH"),
        (ErrorCode.INVALID_REQUEST, "Invalid permissionType ANY"),
        (ErrorCode.INVALID_REQUEST, "Invalid empty resource name"),
        (ErrorCode.INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (ErrorCode.INVALID_REQUEST, "expected a string in format principalType:principalName but got alice"),
        (0, None)]
    assert len(result.records) == 2
    image = applied(EMPTY_IMAGE, result.records)
    assert sorted(a.resource_type for a in image.acls.values()) == [TOPIC, CLUSTER]
    again = create_acls(image, CreateAclsRequest(creations=[creation()]))
    assert again.records == [] and again.response.results[0].error_code == 0


def test_delete_removes_what_each_filter_matches_and_survives_a_snapshot() -> None:
    made = create_acls(EMPTY_IMAGE, CreateAclsRequest(creations=[
        creation(name="a"), creation(name="b", op=WRITE), creation(rtype=GROUP, name="g")]))
    image = applied(EMPTY_IMAGE, made.records)
    # a snapshot's records rebuild the same ACLs
    assert applied(EMPTY_IMAGE, image_records(image)).acls == image.acls

    def flt(rtype: int = ANY, name: str | None = None, op: int = ANY, pattern: int = ANY) -> DeleteAclsFilter:
        return DeleteAclsFilter(resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern,
                                principal_filter=None, host_filter=None, operation=op, permission_type=ANY)

    result = delete_acls(image, DeleteAclsRequest(filters=[flt(TOPIC), flt(TOPIC, "a"), flt(pattern=0)]))
    first, second, bad = result.response.filter_results
    assert sorted(m.resource_name for m in first.matching_acls) == ["a", "b"]
    assert [m.resource_name for m in second.matching_acls] == ["a"]
    assert (bad.error_code, bad.error_message) == (ErrorCode.INVALID_REQUEST, "Unknown patternFilter.")
    assert len(result.records) == 2  # "a" once
    after = applied(image, result.records)
    assert [a.resource_name for a in after.acls.values()] == ["g"]


# -- config and principals ------------------------------------------------------------------------------------------


BASE = {"node.id": "1", "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "log.dirs": "/tmp/x"}


def test_authorizer_keys() -> None:
    config = build_config({**BASE, "authorizer.class.name":
                               "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                               "super.users": "User:admin; User:CN=broker,O=acme", "allow.everyone.if.no.acl.found":
                               "true"})
    assert config.super_users == ("User:admin", "User:CN=broker,O=acme")
    assert config.allow_everyone_if_no_acl_found is True
    assert build_config(BASE).authorizer_class_name == ""
    with pytest.raises(ConfigError, match="kafka.security.authorizer.AclAuthorizer"):
        build_config({**BASE, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    with pytest.raises(ConfigError, match="super.users"):
        build_config({**BASE, "super.users": "admin"})


def test_certificate_principal_is_rfc2253() -> None:
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                        (("commonName", "alice"),))}
    assert certificate_principal(cert) == "User:CN=alice,O=Acme\\, Inc,C=US"
    assert certificate_principal({}) is None
    assert certificate_principal(None) is None


# -- the router's check of inter-broker APIs -------------------------------------------------------------------------


def test_inter_broker_apis_need_cluster_action_before_their_handler_runs() -> None:
    import struct
    from types import SimpleNamespace

    from kjbod.broker.router import Router
    from kjbod.protocol.generated import BrokerHeartbeatRequest, BrokerHeartbeatResponse
    from kjbod.wire.handler import RequestContext

    reached: list[object] = []

    def controller_call(body: object, version: int) -> BrokerHeartbeatResponse:
        reached.append(body)
        return BrokerHeartbeatResponse(error_code=0)

    node = SimpleNamespace(authorizer=authorizer(super_users=["User:broker"]), controller_call=controller_call)
    router = Router(node)
    body = BrokerHeartbeatRequest(broker_id=1, broker_epoch=5, current_metadata_offset=0)
    frame = struct.pack(">hhih", 63, 1, 7, 1) + b"x" + b"\x00" + body.encode(1)

    def answer(principal: str) -> int:
        ctx = RequestContext(1, "127.0.0.1", 5000, "CONTROLLER", "controller", principal=principal)
        reply = b"".join(router.handle(frame, ctx))
        return BrokerHeartbeatResponse.decode(reply[5:], 1).error_code

    assert answer("User:alice") == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and reached == []
    assert answer("User:broker") == 0 and len(reached) == 1


def test_prefixes_match_the_same_whether_few_or_many() -> None:
    """Few prefixes are tried one by one, many by looking up each start of the name: the same answers."""
    many = [acl(TOPIC, f"team{i}-", pattern=PREFIXED) for i in range(40)] + [
        acl(TOPIC, "team7-secret", pattern=PREFIXED, perm=DENY)]
    few = [acl(TOPIC, "team7-", pattern=PREFIXED), acl(TOPIC, "team7-secret", pattern=PREFIXED, perm=DENY)]
    for entries in (many, few):
        a = authorizer(*entries)
        assert a.allowed(ALICE, HOST, READ, TOPIC, "team7-app")
        assert not a.allowed(ALICE, HOST, READ, TOPIC, "team7-secret-2")
        assert not a.allowed(ALICE, HOST, READ, TOPIC, "team7")
        assert not a.allowed(ALICE, HOST, READ, TOPIC, "x")


# -- the initial ACL load (Kafka's AuthorizerNotReadyException) -----------------------------------------------------


def test_before_the_initial_load_only_super_users_are_served() -> None:
    import struct
    from types import SimpleNamespace

    from kjbod.broker.router import Router
    from kjbod.metadata.acls import Authorizer
    from kjbod.protocol.generated import BrokerHeartbeatRequest, BrokerHeartbeatResponse
    from kjbod.wire.handler import CloseConnection, RequestContext

    loaded = [False]
    asked: list[bool] = []

    def load_state() -> bool:
        asked.append(loaded[0])
        return loaded[0]

    authz = Authorizer(lambda: {}, super_users=["User:broker"], loaded=load_state)
    node = SimpleNamespace(authorizer=authz, controller_call=lambda body, version: BrokerHeartbeatResponse())
    router = Router(node)
    body = BrokerHeartbeatRequest(broker_id=1, broker_epoch=5, current_metadata_offset=0)
    frame = struct.pack(">hhih", 63, 1, 7, 1) + b"x" + b"\x00" + body.encode(1)

    def answer(principal: str) -> int:
        ctx = RequestContext(1, "127.0.0.1", 5000, "CONTROLLER", "controller", principal=principal)
        reply = b"".join(router.handle(frame, ctx))
        return BrokerHeartbeatResponse.decode(reply[5:], 1).error_code

    # not loaded: Kafka's authorizer throws, which clients see as UNKNOWN_SERVER_ERROR; super users pass
    assert not authz.ready
    assert answer("User:alice") == ErrorCode.UNKNOWN_SERVER_ERROR
    assert answer("User:broker") == 0
    # an API without a whole-request error answer closes the connection instead
    from kjbod.protocol.generated import DescribeQuorumRequest

    snap = struct.pack(">hhih", 55, 0, 8, 1) + b"x" + b"\x00" + DescribeQuorumRequest().encode(0)
    with pytest.raises(CloseConnection):
        router.handle(snap, RequestContext(1, "127.0.0.1", 5000, "CONTROLLER", "controller", principal="User:a"))
    # loaded: the ACLs decide (no ACL: CLUSTER_ACTION refused), and the load is not asked again
    loaded[0] = True
    assert answer("User:alice") == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    count = len(asked)
    assert answer("User:alice") == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and len(asked) == count


def test_the_initial_load_is_the_high_watermark_seen_first() -> None:
    from types import SimpleNamespace

    from kjbod.broker.remote import RemoteBrokerNode
    from kjbod.server.roles import ControllerNode

    follower = SimpleNamespace(high_watermark=-1, last_applied_offset=-1)
    broker = SimpleNamespace(follower=follower, _loaded_target=None)
    assert not RemoteBrokerNode.metadata_loaded(broker)  # no answer from the controller yet
    follower.high_watermark = 10
    assert not RemoteBrokerNode.metadata_loaded(broker) and broker._loaded_target == 10
    follower.last_applied_offset, follower.high_watermark = 8, 20  # a later high watermark does not move the goal
    assert not RemoteBrokerNode.metadata_loaded(broker)
    follower.last_applied_offset = 9
    assert RemoteBrokerNode.metadata_loaded(broker)

    raft = SimpleNamespace(leader_id=-1, high_watermark=5)
    controller = SimpleNamespace(applied_end=0)
    voter = SimpleNamespace(raft=raft, controller=controller, _loaded_target=None)
    assert not ControllerNode.metadata_loaded(voter)  # no leader known yet
    raft.leader_id = 2
    assert not ControllerNode.metadata_loaded(voter) and voter._loaded_target == 5
    controller.applied_end = 5
    assert ControllerNode.metadata_loaded(voter)
    assert ControllerNode.metadata_loaded(SimpleNamespace(raft=None, controller=controller, _loaded_target=None))


def test_early_start_listeners_default_to_the_controller_listeners() -> None:
    base = {"node.id": "1", "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "log.dirs": "/data/a"}
    assert build_config(base).early_start_listeners == ("CONTROLLER",)
    assert build_config({**base, "early.start.listeners": "plaintext,CONTROLLER"}).early_start_listeners == (
        "PLAINTEXT", "CONTROLLER")
    with pytest.raises(ConfigError, match="early.start.listeners contains listener OTHER, but this is not "
                                          "contained in listeners or controller.listener.names"):
        build_config({**base, "early.start.listeners": "OTHER"})
