"""The persister over the share coordinator's RPCs, its engine in process: a partition answered with a code a
caller retries is asked again (after a fresh look-up of its coordinator) until it is answered otherwise or the
attempts run out, each partition on its own; partitions are grouped into one request per coordinator.  The requests
themselves are sent to real brokers in tests/share/test_state_cluster_live.py."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from kjbod.broker.share import rpc_persister
from kjbod.broker.share.persister import PartitionAnswer, persister_of
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
                  (T, 2): [0]},
                 {(T, 0): [1], (T, 1): [1, 2], (T, 2): [2]})
    got = asyncio.run(p._call(DELETE, "g", [((T, i), None) for i in range(3)], PartitionAnswer))
    assert {k: a.error_code for k, a in got.items()} == {(T, 0): 0, (T, 1): ErrorCode.FENCED_STATE_EPOCH,
                                                         (T, 2): 0}
    # first round: one request per coordinator; second round: only what is left, at its new coordinator
    assert sorted(p.sent[:2]) == [(1, [(T, 0), (T, 1)]), (2, [(T, 2)])]
    assert sorted(p.sent[2:]) == [(1, [(T, 0)]), (2, [(T, 1)])]


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
