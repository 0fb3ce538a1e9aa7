"""DescribeClientQuotas and AlterClientQuotas on a real `kjbod serve`: kjbod's admin client and kafka-python's
protocol messages (its admin client has no quota calls; confluent-kafka 2.16 has none either), the controller's
validation, validateOnly, and the quotas surviving a restart (the metadata log)."""

from __future__ import annotations

import pytest
from live import LiveServer, kjbod_server, kjbod_server_factory  # noqa: F401

from kjbod.admin import SyncAdminClient
from kjbod.protocol.errors import ErrorCode

kafka_admin = pytest.importorskip("kafka.admin")
kp_quotas = pytest.importorskip("kafka.protocol.admin.client_quotas")


def norm(entries: list) -> set:
    return {(frozenset(e.items()), frozenset(v.items())) for e, v in entries}


def test_alter_describe_with_kjbod_admin_and_restart(kjbod_server: LiveServer) -> None:  # noqa: F811
    with SyncAdminClient(kjbod_server.bootstrap, request_timeout=10) as admin:
        results = admin.alter_client_quotas([
            ({"client-id": "slow-app"}, {"producer_byte_rate": 2048, "consumer_byte_rate": 4096}),
            ({"user": "alice", "client-id": None}, {"request_percentage": 25.5}),
            ({"ip": None}, {"connection_creation_rate": 100}),
            ({"user": "bob"}, {"producer_byte_rate": -5}),
            ({"ip": "10.0.0.1", "user": "x"}, {"connection_creation_rate": 3}),
        ])
        assert results[:3] == [(0, None)] * 3
        assert results[3] == (ErrorCode.INVALID_REQUEST, "Quota producer_byte_rate must be greater than 0")
        assert results[4][0] == ErrorCode.INVALID_REQUEST
        assert admin.alter_client_quotas([({"client-id": "other"}, {"producer_byte_rate": 10})],
                                         validate_only=True) == [(0, None)]
        described = admin.describe_client_quotas()
        assert norm(described) == norm([
            ({"client-id": "slow-app"}, {"producer_byte_rate": 2048.0, "consumer_byte_rate": 4096.0}),
            ({"user": "alice", "client-id": None}, {"request_percentage": 25.5}),
            ({"ip": None}, {"connection_creation_rate": 100.0}),
        ])
        assert admin.describe_client_quotas([("client-id", 0, "slow-app")], strict=True) == [
            ({"client-id": "slow-app"}, {"producer_byte_rate": 2048.0, "consumer_byte_rate": 4096.0})]
        assert admin.describe_client_quotas([("user", 2, None)]) == [
            ({"user": "alice", "client-id": None}, {"request_percentage": 25.5})]
        with pytest.raises(Exception, match="Unsupported entity type group"):
            admin.describe_client_quotas([("group", 2, None)])
        assert admin.alter_client_quotas([({"client-id": "slow-app"}, {"consumer_byte_rate": None})]) == [(0, None)]
    kjbod_server.stop()
    kjbod_server.start()
    with SyncAdminClient(kjbod_server.bootstrap, request_timeout=10) as admin:
        assert admin.describe_client_quotas([("client-id", 0, "slow-app")]) == [
            ({"client-id": "slow-app"}, {"producer_byte_rate": 2048.0})]


@pytest.mark.parametrize("version", [0, 1])
def test_kafka_python_protocol_messages(kjbod_server: LiveServer, version: int) -> None:  # noqa: F811
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=kjbod_server.bootstrap, request_timeout_ms=10000)
    try:
        manager = admin._manager
        alter_cls = kp_quotas.AlterClientQuotasRequest[version]
        req = alter_cls(entries=[alter_cls.EntryData(
            entity=[alter_cls.EntryData.EntityData(entity_type="user", entity_name="carol")],
            ops=[alter_cls.EntryData.OpData(key="producer_byte_rate", value=1000.0, remove=False)])],
            validate_only=False)
        resp = manager.run(manager.send, req)
        assert [(e.error_code, [(p.entity_type, p.entity_name) for p in e.entity]) for e in resp.entries] == [
            (0, [("user", "carol")])]
        desc_cls = kp_quotas.DescribeClientQuotasRequest[version]
        resp = manager.run(manager.send, desc_cls(components=[
            desc_cls.ComponentData(entity_type="user", match_type=0, match="carol")], strict=False))
        assert resp.error_code == 0
        assert [[(v.key, v.value) for v in e.values] for e in resp.entries] == [[("producer_byte_rate", 1000.0)]]
    finally:
        admin.close()


def test_alter_on_the_controller_listener(kjbod_server: LiveServer) -> None:  # noqa: F811
    """AlterClientQuotas is served on the controller listener too (kafka-configs.sh --bootstrap-controller);
    DescribeClientQuotas only on broker listeners, as Kafka's listeners say."""
    from kjbod.protocol.generated import AlterClientQuotasRequest
    from kjbod.protocol.generated.alter_client_quotas_request import EntityData, EntryData, OpData
    from tests.datapath.support import RawClient

    with RawClient("127.0.0.1", kjbod_server.controller_port) as raw:
        resp = raw.call(AlterClientQuotasRequest(entries=[EntryData(
            entity=[EntityData(entity_type="client-id", entity_name=None)],
            ops=[OpData(key="consumer_byte_rate", value=5e6, remove=False)])]), 1)
    assert [(e.error_code, [(p.entity_type, p.entity_name) for p in e.entity]) for e in resp.entries] == [
        (0, [("client-id", None)])]
    with SyncAdminClient(kjbod_server.bootstrap, request_timeout=10) as admin:
        assert admin.describe_client_quotas([("client-id", 1, None)]) == [
            ({"client-id": None}, {"consumer_byte_rate": 5e6})]
