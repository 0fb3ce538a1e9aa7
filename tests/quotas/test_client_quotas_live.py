"""Client quotas enforced on a real `kjbod serve`, driven by kafka-python: a producer and a consumer on a
quota'd client id are throttled (the throttle times the broker reports add up to what holding them at the quota
takes), another client id is not, and removing the quota lifts it without a restart.

The broker runs with quota.window.num=2 and quota.window.size.seconds=1, so a rate is measured over one to two
seconds and the test stays short. Assertions are on the bytes sent and the throttle times kafka-python reports
(it logs each one), never on wall-clock durations."""

from __future__ import annotations

import http.client
import logging
import re

import pytest
from live import LiveServer, free_port, kjbod_server_factory  # noqa: F401
from prometheus_client.parser import text_string_to_metric_families

from kjbod.admin import SyncAdminClient

kafka = pytest.importorskip("kafka")

QUOTA = 100_000  # bytes per second
RECORD = b"x" * 10_000
COUNT = 40
WINDOW_S = 2  # quota.window.num x quota.window.size.seconds: what a client may send before it is throttled
_THROTTLED = re.compile(r"(\w+Response)\S* throttled by broker \((\d+) ms\)")


def throttles(caplog: pytest.LogCaptureFixture, response: str) -> list[int]:
    out = []
    for rec in caplog.records:
        m = _THROTTLED.search(rec.getMessage())
        if m and m.group(1) == response:
            out.append(int(m.group(2)))
    return out


def produce(server: LiveServer, client_id: str, topic: str) -> int:
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap, client_id=client_id, acks=1, linger_ms=0,
                                   batch_size=16_384, max_in_flight_requests_per_connection=1)
    try:
        for _ in range(COUNT):
            producer.send(topic, RECORD, partition=0).get(timeout=60)
    finally:
        producer.close()
    return COUNT * len(RECORD)


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        body = conn.getresponse().read().decode()
    finally:
        conn.close()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def sample(samples: dict, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in samples, f"{name}{labels} not scraped: {sorted(k for k in samples if k[0] == name)}"
    return samples[key]


@pytest.fixture
def server(kjbod_server_factory):  # noqa: F811
    port = free_port()
    server = kjbod_server_factory(overrides={"quota.window.num": "2", "quota.window.size.seconds": "1",
                                             "num.partitions": "1", "kjbod.metrics.listener": f"127.0.0.1:{port}"})
    server.metrics_port = port
    return server


def test_produce_and_fetch_quotas_throttle_their_client_only(server: LiveServer,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kafka")
    with SyncAdminClient(server.bootstrap, request_timeout=10) as admin:
        assert admin.alter_client_quotas([({"client-id": "slow"}, {"producer_byte_rate": QUOTA,
                                                                    "consumer_byte_rate": QUOTA})]) == [(0, None)]
    sent = produce(server, "slow", "quota-events")
    slow = throttles(caplog, "ProduceResponse")
    assert slow, "the quota'd producer was never throttled"
    # Held at the quota: what went beyond the window's allowance waited its turn, and not much longer.
    assert 0.5 * (sent / QUOTA - WINDOW_S) <= sum(slow) / 1000 <= 2 * sent / QUOTA, (sent, slow)
    caplog.clear()
    produce(server, "fast", "quota-events")
    assert throttles(caplog, "ProduceResponse") == []
    # What the broker accounted (Kafka's sensors, on /metrics): every produced byte, the request framing on top;
    # the quota'd client's throttles, none for the other.
    samples = scrape(server.metrics_port)
    for client_id in ("slow", "fast"):
        accounted = sample(samples, "kjbod_client_quota_recorded_total", quota_type="Produce", user="",
                           client_id=client_id)
        assert sent <= accounted <= 1.1 * sent, (client_id, accounted)
    assert sample(samples, "kjbod_client_quota_limit", quota_type="Produce", user="", client_id="slow") == QUOTA
    assert ("kjbod_client_quota_limit", frozenset({"quota_type": "Produce", "user": "",
                                                   "client_id": "fast"}.items())) not in samples
    assert sample(samples, "kafka_server_produce_throttle_time", user="", client_id="fast") == 0
    assert sample(samples, "kafka_server_produce_byte_rate", user="", client_id="fast") > 0

    caplog.clear()
    consumer = kafka.KafkaConsumer(bootstrap_servers=server.bootstrap, client_id="slow", auto_offset_reset="earliest",
                                   enable_auto_commit=False, fetch_max_bytes=1 << 20,
                                   max_partition_fetch_bytes=1 << 20, consumer_timeout_ms=30_000)
    try:
        consumer.assign([kafka.TopicPartition("quota-events", 0)])
        got = 0
        for _ in consumer:
            got += 1
            if got == 2 * COUNT:
                break
    finally:
        consumer.close()
    assert got == 2 * COUNT  # every record arrives, throttled or not
    fetched = throttles(caplog, "FetchResponse")
    assert 0.5 * (2 * sent / QUOTA - WINDOW_S) <= sum(fetched) / 1000 <= 2 * 2 * sent / QUOTA, fetched
    # Only the fetches answered with records count (a throttled one is answered empty and taken back).
    fetched_bytes = sample(scrape(server.metrics_port), "kjbod_client_quota_recorded_total", quota_type="Fetch",
                           user="", client_id="slow")
    assert 2 * sent <= fetched_bytes <= 1.1 * 2 * sent, fetched_bytes

    with SyncAdminClient(server.bootstrap, request_timeout=10) as admin:
        assert admin.alter_client_quotas([({"client-id": "slow"}, {"producer_byte_rate": None,
                                                                    "consumer_byte_rate": None})]) == [(0, None)]
    caplog.clear()
    produce(server, "slow", "quota-events")
    assert throttles(caplog, "ProduceResponse") == []  # lifted at once, no restart


def test_request_percentage_throttles_any_api_of_its_client(server: LiveServer) -> None:
    """request_percentage counts the handler's time for every API (here Metadata, from confluent-kafka's admin
    client, which reports each throttle to its throttle_cb): a tiny quota throttles its client, at most one window
    (1 s) at a time; another client is not."""
    confluent_admin = pytest.importorskip("confluent_kafka.admin")
    with SyncAdminClient(server.bootstrap, request_timeout=10) as admin:
        assert admin.alter_client_quotas([({"client-id": "busy"}, {"request_percentage": 0.0001})]) == [(0, None)]
    for client_id, expect_throttled in (("busy", True), ("idle", False)):
        seen: list[float] = []
        admin = confluent_admin.AdminClient({"bootstrap.servers": server.bootstrap, "client.id": client_id,
                                             "throttle_cb": lambda event, seen=seen: seen.append(event.throttle_time)})
        for _ in range(3):
            admin.list_topics(timeout=30)
        admin.poll(0)
        throttled = [t for t in seen if t > 0]  # librdkafka also reports the 0 that follows a throttle
        if expect_throttled:
            assert throttled and max(throttled) <= 1.0, seen
        else:
            assert throttled == [], seen
    samples = scrape(server.metrics_port)
    assert sample(samples, "kjbod_client_quota_recorded_total", quota_type="Request", user="", client_id="busy") > 0
    assert sample(samples, "kafka_server_request_throttle_time", user="", client_id="busy") > 0
