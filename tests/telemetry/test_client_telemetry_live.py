"""Client metrics (KIP-714) on a real `kjbod serve`: a CLIENT_METRICS subscription made with
IncrementalAlterConfigs (through `kjbod client-metrics`), confluent-kafka producers that librdkafka makes push
their metrics when one matches them, the pushed metrics on the Prometheus endpoint labelled with the client's
instance id, a producer no subscription matches pushing nothing, and kafka-python (which has no KIP-714) served
as before.

No timing assertions: the tests wait (with a bound) for what they expect to appear."""

from __future__ import annotations

import time

import pytest
from live import LiveServer, free_port, kjbod_server_factory  # noqa: F401
from quotas.test_client_quotas_live import scrape

confluent = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

WAIT_S = 60


@pytest.fixture
def server(kjbod_server_factory):  # noqa: F811
    port = free_port()
    server = kjbod_server_factory(overrides={"num.partitions": "1", "kjbod.metrics.listener": f"127.0.0.1:{port}"})
    server.metrics_port = port
    return server


def telemetry_series(samples: dict, client_id: str) -> dict:
    return {k: v for k, v in samples.items() if ("client_id", client_id) in k[1]
            and any(label == "client_instance_id" for label, _ in k[1])}


def cli(*args: str) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "kjbod", "client-metrics", *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def test_a_matching_client_pushes_its_metrics_to_the_endpoint_and_others_do_not(server: LiveServer) -> None:
    assert cli("--bootstrap-server", server.bootstrap, "--alter", "--name", "producers",
               "--metrics", "org.apache.kafka.producer.", "--interval", "500",
               "--match", "client_id=watched.*") == "Altered client metrics config for producers.\n"
    assert cli("--bootstrap-server", server.bootstrap, "--list") == "producers\n"
    described = cli("--bootstrap-server", server.bootstrap, "--describe", "--name", "producers")
    assert described.splitlines() == ["Client metrics configs for producers are:",
                                      "  interval.ms=500", "  match=client_id=watched.*",
                                      "  metrics=org.apache.kafka.producer."]
    watched = confluent.Producer({"bootstrap.servers": server.bootstrap, "client.id": "watched-1"})
    other = confluent.Producer({"bootstrap.servers": server.bootstrap, "client.id": "unwatched"})
    plain = kafka.KafkaProducer(bootstrap_servers=server.bootstrap, client_id="watched-python")
    try:
        deadline = time.monotonic() + WAIT_S
        pushed: dict = {}
        while time.monotonic() < deadline:
            for p in (watched, other):
                p.produce("telemetry-topic", b"x")
                p.poll(0.1)
            plain.send("telemetry-topic", b"y").get(timeout=30)
            pushed = telemetry_series(scrape(server.metrics_port), "watched-1")
            if pushed:
                break
            time.sleep(0.5)
        assert pushed, "the matching confluent-kafka producer pushed nothing"
        names = {name for name, _ in pushed}
        assert all(n.startswith("org_apache_kafka_producer_") for n in names), names  # the subscribed prefix
        assert "org_apache_kafka_producer_node_request_latency_avg" in names  # a gauge librdkafka always has
        (instance_id,) = {v for _, labels in pushed for k, v in labels if k == "client_instance_id"}
        assert len(instance_id) == 22  # a Kafka Uuid, as the broker gave it
        samples = scrape(server.metrics_port)
        assert telemetry_series(samples, "unwatched") == {}  # no subscription matched: nothing pushed
        assert telemetry_series(samples, "watched-python") == {}  # kafka-python has no KIP-714
        assert watched.flush(30) == 0 and other.flush(30) == 0
        # Both librdkafka clients have an instance (the unmatched one too: it asked, and was given nothing to push).
        while samples[("kafka_server_client_metrics_instance_count", frozenset())] < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            samples = scrape(server.metrics_port)
        assert samples[("kafka_server_client_metrics_instance_count", frozenset())] == 2
    finally:
        plain.close()
    # The subscription deleted: the clients are told at their next request (nothing more is wanted).
    assert cli("--bootstrap-server", server.bootstrap, "--delete", "--name", "producers") == \
        "Deleted client metrics config for producers.\n"
    assert cli("--bootstrap-server", server.bootstrap, "--list") == "\n"


def test_bad_subscriptions_are_refused_with_kafkas_errors(server: LiveServer) -> None:
    import subprocess
    import sys

    from kjbod.admin import SyncAdminClient
    from kjbod.admin.types import ConfigResource

    resource = ConfigResource.client_metrics("subs")
    with SyncAdminClient(server.bootstrap, request_timeout=10) as admin:
        for changes, code in (({"interval.ms": "50"}, 42), ({"colour": "red"}, 42), ({"match": "client=x"}, 40),
                              ({"interval.ms": "soon"}, 40)):
            result = admin.incremental_alter_configs({resource: changes}, raise_on_error=False)[resource]
            assert result.error is not None and result.error.code == code, (changes, result.error)
        assert admin.describe_configs([resource])[resource] == {}  # nothing was written
        assert admin.list_client_metrics_resources() == []
        empty = ConfigResource.client_metrics("")
        with pytest.raises(Exception, match="must not be empty"):
            admin.describe_configs([empty])
    done = subprocess.run([sys.executable, "-m", "kjbod", "client-metrics", "--bootstrap-server", server.bootstrap,
                           "--alter", "--name", "subs", "--interval", "50"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert done.stdout.startswith("Error while executing client metrics command : ")
    assert "interval must be between 100 and 3600000" in done.stdout
    done = subprocess.run([sys.executable, "-m", "kjbod", "client-metrics", "--bootstrap-server", server.bootstrap,
                           "--list", "--describe"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "Command must include exactly one action: --alter, --delete, --describe or --list." in done.stderr


def test_software_and_address_selectors_match_what_the_client_said_and_where_it_is(server: LiveServer) -> None:
    """client_software_name comes from the client's ApiVersions (confluent-kafka names itself
    confluent-kafka-python), the source address and port from its connection."""
    from kjbod.admin import SyncAdminClient
    from kjbod.admin.types import ConfigResource

    with SyncAdminClient(server.bootstrap, request_timeout=10) as admin:
        admin.incremental_alter_configs({ConfigResource.client_metrics("rdkafka"): {
            "metrics": "org.apache.kafka.producer.node.", "interval.ms": "500",
            "match": r"client_software_name=confluent-kafka-.*,client_source_address=127\.0\.0\.1,client_source_port=\d+"}})
        admin.incremental_alter_configs({ConfigResource.client_metrics("java-only"): {
            "metrics": "*", "interval.ms": "100", "match": "client_software_name=apache-kafka-java"}})
    producer = confluent.Producer({"bootstrap.servers": server.bootstrap, "client.id": "by-software"})
    deadline = time.monotonic() + WAIT_S
    pushed: dict = {}
    while time.monotonic() < deadline and not pushed:
        producer.produce("software-topic", b"x")
        producer.poll(0.5)
        pushed = telemetry_series(scrape(server.metrics_port), "by-software")
    assert pushed, "confluent-kafka matched by its software name pushed nothing"
    names = {name for name, _ in pushed}
    assert all(n.startswith("org_apache_kafka_producer_node_") for n in names), names  # not '*': no Java match
    assert producer.flush(30) == 0
