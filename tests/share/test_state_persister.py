"""The persister over the share coordinator's RPCs, its engine in process: a partition answered with a code a
caller retries is asked again (after a fresh look-up of its coordinator) until it is answered otherwise or the
attempts run out, each partition on its own; partitions are grouped into one request per coordinator.  Then a real node in this process whose persister is its
own coordinator.  The requests themselves are sent to real brokers in tests/share/test_state_cluster_live.py."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from kjbod.broker.share import rpc_persister
from kjbod.broker.share.persister import (
    ACKNOWLEDGED,
    InitializeData,
    PartitionAnswer,
    StateBatch,
    WriteData,
    persister_of,
)
from kjbod.broker.share.rpc_persister import DELETE, MAX_ATTEMPTS, RpcPersister
from kjbod.protocol.errors import ErrorCode

T = uuid.UUID(int=7)


class Scripted(RpcPersister):
    """Coordinators answer from a script: {(topic id, partition): [codes, one per attempt]} (the last repeats)."""

    def __init__(self, script, leaders) -> None:
        super().__init__(SimpleNamespace(node_id=-1, share_coordinator=SimpleNamespace(ensure_topic=self._ready)))
        self.script = script
        self.leaders = leaders  # (topic id, partition) -> [leader per look-up]
        self.sent: list[tuple[int, list]] = []

    async def _ready(self):
        return 0, None

    def _coordinator(self, group_id, key):
        seq = self.leaders[key]
        return seq.pop(0) if len(seq) > 1 else seq[0]

    async def _send(self, broker, api_key, group_id, items, answer):
        self.sent.append((broker, sorted(k for k, _ in items)))
        out = {}
        for key, _ in items:
            codes = self.script[key]
            out[key] = answer(codes.pop(0) if len(codes) > 1 else codes[0], None)
        return out


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(rpc_persister, "RETRY_BACKOFF_S", 0.0)
    monkeypatch.setattr(rpc_persister, "RETRY_BACKOFF_MAX_S", 0.0)


def test_retriable_codes_are_asked_again_at_the_new_coordinator_and_others_are_final():
    p = Scripted({(T, 0): [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 0],
                  (T, 1): [ErrorCode.NOT_COORDINATOR, ErrorCode.FENCED_STATE_EPOCH],
                  (T, 2): [0],
                  (T, 3): [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0]},
                 {(T, 0): [1], (T, 1): [1, 2], (T, 2): [2], (T, 3): [2]})
    got = asyncio.run(p._call(DELETE, "g", [((T, i), None) for i in range(4)], PartitionAnswer))
    assert {k: a.error_code for k, a in got.items()} == {(T, 0): 0, (T, 1): ErrorCode.FENCED_STATE_EPOCH,
                                                         (T, 2): 0, (T, 3): 0}
    # first round: one request per coordinator; then only what is left, at its coordinator of the moment
    assert sorted(p.sent[:2]) == [(1, [(T, 0), (T, 1)]), (2, [(T, 2), (T, 3)])]
    assert sorted(p.sent[2:4]) == [(1, [(T, 0)]), (2, [(T, 1), (T, 3)])]
    assert p.sent[4:] == [(2, [(T, 3)])]


def test_the_attempts_are_bounded_and_the_last_code_is_answered():
    p = Scripted({(T, 0): [ErrorCode.NOT_COORDINATOR]}, {(T, 0): [1]})
    got = asyncio.run(p._call(DELETE, "g", [((T, 0), None)], PartitionAnswer))
    assert got[(T, 0)].error_code == ErrorCode.NOT_COORDINATOR
    assert len(p.sent) == MAX_ATTEMPTS


def test_a_partition_without_a_coordinator_is_not_sent_and_answered_coordinator_not_available():
    p = Scripted({(T, 0): [0]}, {(T, 0): [-1]})
    got = asyncio.run(p._call(DELETE, "g", [((T, 0), None)], PartitionAnswer))
    assert got[(T, 0)].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and p.sent == []


def test_persister_of_a_broker_is_the_rpc_one_and_of_a_stand_in_the_memory_one():
    broker = SimpleNamespace(metadata=None, partition_log=None, controller_request=None)
    assert isinstance(persister_of(broker), RpcPersister)
    assert persister_of(broker) is persister_of(broker)
    assert not isinstance(persister_of(SimpleNamespace()), RpcPersister)


def test_the_persister_of_a_broker_that_is_the_coordinator_serves_itself_in_process(tmp_path):
    """A real node (`kjbod serve`'s own code, in a thread of this process so its persister can be called): the
    broker is the only one, so every key's coordinator is itself and the calls take the in-process path to the
    same handler code a remote request reaches, `__share_group_state` made on the first call."""
    import threading

    from kafka.admin import KafkaAdminClient, NewTopic

    from kjbod.server.app import serve
    from kjbod.server.config import load_config
    from kjbod.server.roles import build_node
    from tests.live import format_storage, free_port, new_cluster_id, write_config

    config_path = write_config(
        tmp_path / "server.properties", node_id=1, port=(port := free_port()), controller_port=free_port(),
        log_dirs=[tmp_path / "logs"], metadata_dir=tmp_path / "meta",
        overrides={"share.coordinator.state.topic.replication.factor": "1",
                   "share.coordinator.state.topic.min.isr": "1",
                   "share.coordinator.state.topic.num.partitions": "2"})
    format_storage(config_path, new_cluster_id())
    config = load_config(str(config_path))
    built: dict = {}
    ready = threading.Event()

    def factory(cfg):
        built["node"] = build_node(cfg)
        return built["node"]

    async def main():
        built["loop"] = asyncio.get_running_loop()
        built["task"] = asyncio.ensure_future(serve(config, factory))
        ready.set()
        try:
            await built["task"]
        except asyncio.CancelledError:
            pass

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    try:
        assert ready.wait(30)
        admin = None
        for _ in range(600):  # until the node listens
            try:
                admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
                break
            except Exception:
                threading.Event().wait(0.1)
        assert admin is not None
        try:
            admin.create_topics([NewTopic("in-process", 2, 1)])
        finally:
            admin.close()
        node = built["node"]

        def on_node(coro):
            return asyncio.run_coroutine_threadsafe(coro, built["loop"]).result(60)

        for _ in range(600):
            if node.metadata.topic("in-process") is not None:
                break
            threading.Event().wait(0.1)
        tid = node.metadata.topic("in-process").topic_id
        persister = persister_of(node)
        assert isinstance(persister, RpcPersister)
        init = on_node(persister.initialize("g", [InitializeData(tid, p, 0, 5) for p in range(2)]))
        assert {k: a.error_code for k, a in init.items()} == {(tid, 0): 0, (tid, 1): 0}
        wrote = on_node(persister.write("g", [WriteData(tid, 1, 0, 2, -1, (StateBatch(5, 9, ACKNOWLEDGED, 1),))]))
        assert wrote[(tid, 1)].error_code == 0
        got = on_node(persister.read("g", [(tid, 1, 2)]))[(tid, 1)]
        assert (got.error_code, got.start_offset, got.batches) == (0, 5, (StateBatch(5, 9, ACKNOWLEDGED, 1),))
        assert node.share_coordinator.book.states[("g", tid, 1)].start_offset == 5  # served by this node
        assert node.metadata.topic("__share_group_state") is not None
    finally:
        loop = built.get("loop")
        if loop is not None:
            loop.call_soon_threadsafe(built["task"].cancel)
        thread.join(60)
    assert not thread.is_alive(), "the node did not stop"
