"""Dynamic broker defaults of topic configs on a real cluster (`kjbod cluster up`: a controller alone and two
brokers, each its own process): a broker's own value reaches only the partitions that broker holds, the cluster
default reaches every broker, and deleting either brings the level below back. The controller, in another
process, checks the values (as server.properties would) and each broker applies what the metadata log says,
once it has read it: the tests wait for each change to show (as a Kafka broker, kjbod's answers the change
once the controller has it, not once every broker has applied it).
The single-node view of the same rules, with DescribeConfigs and a restart: tests/datapath/
test_dynamic_log_config_live.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry
from confluent_kafka.admin import ConfigResource as Resource

from kjbod.admin import SyncAdminClient
from kjbod.admin.types import ConfigResource, ConfigResourceType, NewTopic
from tests.cluster.conftest import Cluster, running_cluster, wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError

pytestmark = pytest.mark.slow

BIG = b"b" * 5000  # over the 3000 set below, far under Kafka's default


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("dynlog"), brokers=2, log_dirs=1) as running:
        yield running


def accepted(producer: KafkaProducer, partition: int) -> bool:
    """Whether the partition's leader appends one batch holding BIG (MESSAGE_TOO_LARGE otherwise)."""
    try:
        producer.send("spread", BIG, partition=partition).get(30)
        return True
    except MessageSizeTooLargeError:
        return False


def test_per_broker_value_reaches_that_broker_only_and_the_default_every_broker(cluster: Cluster):
    first, second = sorted(cluster.broker_ids)
    with SyncAdminClient(cluster.bootstrap, request_timeout=30) as kjbod:
        # Partition 0 on the first broker only, partition 1 on the second only.
        kjbod.create_topics([NewTopic("spread", assignments={0: [first], 1: [second]})])
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks=1, linger_ms=0, retries=0)
        try:
            assert accepted(producer, 0) and accepted(producer, 1)

            # The second broker's own value (confluent-kafka sends it to that broker).
            own = Resource("BROKER", str(second), incremental_configs=[
                ConfigEntry("message.max.bytes", "3000", incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([own])[own].result(30)
            wait_for(lambda: not accepted(producer, 1), "the second broker applies its own value")
            assert accepted(producer, 0)

            # The cluster default reaches the first broker too; the second keeps its own value when the default
            # goes, and the default's DELETE frees the first.
            default = ConfigResource(ConfigResourceType.BROKER, "")
            kjbod.incremental_alter_configs({default: {"message.max.bytes": "4000"}})
            wait_for(lambda: not accepted(producer, 0), "the first broker applies the cluster default")
            assert not accepted(producer, 1)
            kjbod.incremental_alter_configs({default: {"message.max.bytes": None}})
            wait_for(lambda: accepted(producer, 0), "the first broker drops the cluster default")
            assert not accepted(producer, 1)

            # Its DELETE brings the second broker back to server.properties / Kafka's default.
            gone = Resource("BROKER", str(second), incremental_configs=[
                ConfigEntry("message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
            admin.incremental_alter_configs([gone])[gone].result(30)
            wait_for(lambda: accepted(producer, 1), "the second broker drops its own value")
        finally:
            producer.close()
