"""The replication keys take effect: each reaches the replica manager or the fetcher and changes what it does."""

from __future__ import annotations

from types import SimpleNamespace

from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.replication.fetcher import Fetcher, FetcherManager, FetchState
from kjbod.broker.replication.manager import inter_broker_listener
from kjbod.protocol.errors import ErrorCode
from kjbod.server.config import build_config
from tests.replication.test_replica_manager import Clock, FakeNode, image

BASE = {"node.id": "2", "process.roles": "broker", "controller.listener.names": "CONTROLLER",
        "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9094",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093", "log.dirs": "/d"}
KEYS = {"replica.fetch.max.bytes": "2097152", "replica.fetch.min.bytes": "10", "replica.fetch.wait.max.ms": "250",
        "replica.fetch.response.max.bytes": "4194304", "replica.fetch.backoff.ms": "100",
        "replica.socket.timeout.ms": "5000", "replica.lag.time.max.ms": "1000", "num.replica.fetchers": "4",
        "min.insync.replicas": "3", "inter.broker.listener.name": "INTERNAL"}


def test_the_replication_keys_reach_the_fetchers(make_log):
    default = ReplicationConfig.from_config(build_config(BASE))
    assert default == ReplicationConfig()  # Kafka's defaults
    cfg = ReplicationConfig.from_config(build_config({**BASE, **KEYS}))
    assert (cfg.fetch_max_bytes, cfg.fetch_min_bytes, cfg.fetch_wait_max_ms, cfg.fetch_response_max_bytes,
            cfg.fetch_backoff_ms, cfg.socket_timeout_ms, cfg.num_fetchers) == (
        2097152, 10, 250, 4194304, 100, 5000, 4)
    assert inter_broker_listener(build_config(BASE)) == "PLAINTEXT"
    assert inter_broker_listener(build_config({**BASE, **KEYS})) == "INTERNAL"
    plog = make_log("t-0")
    node = FakeNode(2, plog, image())
    manager = ReplicaManager(node, cfg, clock=Clock())
    request = Fetcher(manager, 1, 0)._request([FetchState("t", 0, 0)], 12)
    assert request is not None
    assert (request.max_wait_ms, request.min_bytes, request.max_bytes, request.replica_id) == (250, 10, 4194304, 2)
    assert request.topics[0].partitions[0].partition_max_bytes == 2097152
    spread = FetcherManager(SimpleNamespace(config=cfg))
    assert {spread._fetcher_id(("t", p)) for p in range(64)} == {0, 1, 2, 3}
    one = FetcherManager(SimpleNamespace(config=default))
    assert {one._fetcher_id(("t", p)) for p in range(64)} == {0}


def test_lag_time_and_min_isr_change_what_a_leader_does(make_log):
    def leader(keys: dict[str, str]) -> tuple[ReplicaManager, Clock]:
        clock = Clock()
        node = FakeNode(1, make_log("t-0"), image(configs={}))
        manager = ReplicaManager(node, ReplicationConfig.from_config(build_config({**BASE, **keys})), clock=clock)
        manager.sync(node.metadata)
        return manager, clock

    short, clock = leader({"replica.lag.time.max.ms": "1000"})
    clock.ms += 1_500
    state = short.states[("t", 0)]
    assert state.shrink(0, clock.ms, short.config.lag_time_max_ms) == (1,)
    default, clock = leader({})
    clock.ms += 1_500
    assert default.states[("t", 0)].shrink(0, clock.ms, default.config.lag_time_max_ms) is None
    strict, _ = leader({"min.insync.replicas": "3"})
    strict.sync(image(isr=(1, 2), partition_epoch=1, configs={}))
    assert strict.check_acks_all("t", 0) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert default.check_acks_all("t", 0) == 0
