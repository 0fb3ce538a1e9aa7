"""On a real cluster (`kjbod cluster up`, two brokers): the leader counts its follower's fetches as
request="FetchFollower" and a consumer's as "FetchConsumer", both as "Fetch", as Kafka's RequestMetrics do; the
records a follower copies are not BytesOut (Kafka counts those for consumers only)."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import running_cluster

from .scrape import Samples, request_counts, scrape, value, wait_for

TOPIC = "followed"
RECORDS = 20


def _fetches(samples: Samples) -> tuple[float, float, float]:
    counts = request_counts(samples)
    return counts.get("FetchFollower", 0), counts.get("FetchConsumer", 0), counts.get("Fetch", 0)


def test_a_followers_fetches_count_as_fetch_follower_and_a_consumers_as_fetch_consumer(tmp_path):
    with running_cluster(tmp_path / "cluster", {"replica.fetch.wait.max.ms": "100"}, brokers=2,
                         log_dirs=1) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 2)])[TOPIC].result(60)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(RECORDS):
            producer.produce(TOPIC, b"v%d" % i)
        assert producer.flush(60) == 0
        leader = admin.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions[0].leader
        follower = next(b for b in cluster.broker_ids if b != leader)

        def port(broker: int) -> int:
            return int(cluster.properties(f"broker-{broker}")["kjbod.metrics.listener"].rpartition(":")[2])

        # acks=all answered: the follower holds every record, fetched from the leader.
        wait_for(port(follower), lambda s: value(s, "kafka_log_log_logendoffset", topic=TOPIC, partition="0")
                 == RECORDS, "the follower's log end")
        first = scrape(port(leader))
        followers, consumers, fetches = _fetches(first)
        assert followers > 0 and consumers == 0 and fetches == followers, request_counts(first)
        assert value(first, "kafka_network_requestmetrics_totaltimems_count", request="FetchFollower") > 0
        assert value(first, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) == 0
        # The follower keeps polling: only FetchFollower grows.
        later = wait_for(port(leader), lambda s: _fetches(s)[0] > followers, "more follower fetches")
        assert _fetches(later)[1] == 0

        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "metered",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            got = 0
            while got < RECORDS:
                got += sum(1 for m in consumer.consume(RECORDS, 5.0) if m.error() is None)
        finally:
            consumer.close()
        after = scrape(port(leader))
        followers_after, consumers_after, fetches_after = _fetches(after)
        assert consumers_after > 0 and fetches_after == followers_after + consumers_after
        assert value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) > 0
