"""The controller mutation quota (KIP-599) on a real `kjbod serve`: kafka-python's admin client (CreateTopics v7,
DeleteTopics v6, CreatePartitions v3: strict versions) over its client id's controller_mutation_rate is refused
THROTTLING_QUOTA_EXCEEDED with a throttle time, another client id is not; confluent-kafka's admin client, whose
CreateTopics is older than v6, is let through and told to back off (its throttle_cb). The broker's ControllerMutation
sensors show on /metrics.

The broker runs with controller.quota.window.num=2 and controller.quota.window.size.seconds=1: a client with a
rate of 1 partition a second may take 2 partitions at once before it is throttled."""

from __future__ import annotations

import logging
import re
import uuid

import pytest
from live import LiveServer, free_port, kjbod_server_factory  # noqa: F401

from kjbod.admin import SyncAdminClient
from quotas.test_client_quotas_live import sample, scrape

kafka_admin = pytest.importorskip("kafka.admin")
kafka = pytest.importorskip("kafka")

THROTTLING_QUOTA_EXCEEDED = 89
_THROTTLED = re.compile(r"(\w+Response)\S* throttled by broker \((\d+) ms\)")


@pytest.fixture
def server(kjbod_server_factory):  # noqa: F811
    port = free_port()
    server = kjbod_server_factory(overrides={"controller.quota.window.num": "2",
                                             "controller.quota.window.size.seconds": "1",
                                             "kjbod.metrics.listener": f"127.0.0.1:{port}"})
    server.metrics_port = port
    return server


def errors(result: dict) -> dict[str, int]:
    return {t["name"]: t["error_code"] for t in result["topics"]}


def throttles(caplog: pytest.LogCaptureFixture, response: str) -> list[int]:
    return [int(m.group(2)) for rec in caplog.records
            if (m := _THROTTLED.search(rec.getMessage())) and m.group(1) == response]


def test_a_client_over_its_mutation_rate_is_refused_and_another_is_not(server: LiveServer,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kafka")
    with SyncAdminClient(server.bootstrap, request_timeout=10) as admin:
        assert admin.alter_client_quotas([({"client-id": "hasty"}, {"controller_mutation_rate": 1.0})]) == [(0, None)]
    hasty = kafka_admin.KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="hasty")
    calm = kafka_admin.KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="calm")
    try:
        created = hasty.create_topics({"h1": {"num_partitions": 2, "replication_factor": 1}}, raise_errors=False)
        assert errors(created) == {"h1": 0}  # the whole burst: bucket at 0
        h1_id = uuid.UUID(str(created["topics"][0]["topic_id"]))
        assert errors(hasty.create_topics({"h2": {"num_partitions": 30, "replication_factor": 1}},
                                          raise_errors=False)) == {"h2": 0}  # checked before taken: bucket at -30
        assert throttles(caplog, "CreateTopicsResponse") == []  # as Kafka: a strict quota throttles what it refuses
        # The next is refused: the bucket stays below zero for about 30 s.
        result = hasty.create_topics({"h3": {"num_partitions": 1, "replication_factor": 1},
                                      "h1": {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False)
        assert errors(result)["h3"] == THROTTLING_QUOTA_EXCEEDED
        assert errors(result)["h1"] == 36  # TOPIC_ALREADY_EXISTS: the controller's answer, it took no tokens
        refused = [t for t in result["topics"] if t["name"] == "h3"][0]
        assert refused["error_message"] == "The throttling quota has been exceeded."
        assert [0 < t <= 30_000 for t in throttles(caplog, "CreateTopicsResponse")] == [True]
        # The same client id on a new connection (the first is muted while throttled): deleting and extending
        # are mutations too.
        again = kafka_admin.KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="hasty")
        try:
            assert errors(again.delete_topics(["h1"], raise_errors=False)) == {"h1": THROTTLING_QUOTA_EXCEEDED}
        finally:
            again.close()
        again = kafka_admin.KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="hasty")
        try:  # named by its id (DeleteTopics v6)
            by_id = again.delete_topics([h1_id], raise_errors=False)["topics"]
            assert [(t["name"], str(t["topic_id"]), t["error_code"]) for t in by_id] == [
                ("h1", str(h1_id), THROTTLING_QUOTA_EXCEEDED)]
        finally:
            again.close()
        again = kafka_admin.KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="hasty")
        try:
            with pytest.raises(kafka.errors.ThrottlingQuotaExceededError):
                again.create_partitions({"h1": kafka_admin.NewPartitions(total_count=3)})
        finally:
            again.close()
        # Another client id has no quota: it creates, extends and deletes as it likes.
        assert errors(calm.create_topics({"c1": {"num_partitions": 8, "replication_factor": 1}},
                                         raise_errors=False)) == {"c1": 0}
        calm.create_partitions({"c1": kafka_admin.NewPartitions(total_count=12)})
        assert errors(calm.delete_topics(["c1"], raise_errors=False)) == {"c1": 0}
        assert len(throttles(caplog, "CreateTopicsResponse")) == 1  # only hasty's
        assert len(throttles(caplog, "DeleteTopicsResponse")) == 2
        assert len(throttles(caplog, "CreatePartitionsResponse")) == 1  # calm was never throttled
    finally:
        hasty.close()
        calm.close()
    samples = scrape(server.metrics_port)
    assert sample(samples, "kafka_server_controllermutation_mutation_rate", user="", client_id="hasty") > 0
    assert sample(samples, "kafka_server_controllermutation_throttle_time", user="", client_id="hasty") > 0
    assert sample(samples, "kjbod_client_quota_limit", quota_type="ControllerMutation", user="",
                  client_id="hasty") == 1.0
    assert ("kafka_server_controllermutation_tokens",
            frozenset({"user": "", "client_id": "hasty"}.items())) in samples


def test_an_older_create_topics_is_let_through_and_throttled(server: LiveServer) -> None:
    confluent_admin = pytest.importorskip("confluent_kafka.admin")
    with SyncAdminClient(server.bootstrap, request_timeout=10) as admin:
        assert admin.alter_client_quotas([({"client-id": "old"}, {"controller_mutation_rate": 1.0})]) == [(0, None)]
    seen: list[float] = []
    admin = confluent_admin.AdminClient({"bootstrap.servers": server.bootstrap, "client.id": "old",
                                         "throttle_cb": lambda event: seen.append(event.throttle_time)})
    for name, partitions in (("o1", 5), ("o2", 1)):
        futures = admin.create_topics([confluent_admin.NewTopic(name, partitions, 1)], request_timeout=30)
        futures[name].result(timeout=60)  # created, over the rate or not
    admin.poll(0)
    assert [t for t in seen if t > 0], seen  # told to back off
    assert {"o1", "o2"} <= set(admin.list_topics(timeout=30).topics)
