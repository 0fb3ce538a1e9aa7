"""FindCoordinator's answer and log line (kjbod/broker/handlers/find_coordinator.py), in process, for the keys
kjbod has no coordinator for: transaction keys answer COORDINATOR_NOT_AVAILABLE as Kafka does while it cannot
host one, with a message, and warn once per connection and key type, naming the client, the keys and what is not
served; share and unknown key types are INVALID_REQUEST.  Group keys are answered by the group coordinator
(tests/groups)."""

from __future__ import annotations

import asyncio

import pytest

from kjbod.broker.handlers import find_coordinator
from kjbod.broker.router import Request
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FindCoordinatorRequest
from kjbod.wire.handler import RequestContext
from tests.kip113.conftest import captured_logs


def request(version: int, connection_id: int = 1, client_id: str = "kafkajs") -> Request:
    ctx = RequestContext(connection_id=connection_id, peer_host="127.0.0.1", peer_port=40000 + connection_id,
                         listener_name="PLAINTEXT", listener_kind="broker")
    return Request(ctx, 10, version, 7, client_id)


@pytest.fixture
def logs():
    find_coordinator._warned.clear()
    try:
        with captured_logs() as captured:
            yield captured
    finally:
        find_coordinator._warned.clear()


def warnings_of(logs: list[dict]) -> list[tuple]:
    return [(e["key_type"], e["keys"], e["client_id"], e["peer"], e["answer"]) for e in logs
            if e["event"] == "coordinator_not_served"]


def answer_to(version: int, body: FindCoordinatorRequest, connection_id: int = 1):
    # Transaction, share and unknown keys never touch the node (group keys are tested live: tests/groups).
    return asyncio.run(find_coordinator.handle(None, request(version, connection_id), body))


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_transaction_key_before_v4_gets_coordinator_not_available_with_a_message(logs, version):
    answer = answer_to(version, FindCoordinatorRequest(key="tx", key_type=1))
    assert (answer.error_code, answer.node_id, answer.host, answer.port) == (
        ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
    assert "transactions are not served by kjbod yet" in answer.error_message
    assert warnings_of(logs) == [("transaction", ["tx"], "kafkajs", "127.0.0.1:40001", "COORDINATOR_NOT_AVAILABLE")]


def test_batched_transaction_keys_each_get_the_error_and_one_warning(logs):
    answer = answer_to(4, FindCoordinatorRequest(key_type=1, coordinator_keys=["tx-1", "tx-2"]))
    assert [(c.key, c.error_code, c.node_id) for c in answer.coordinators] == [
        ("tx-1", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1), ("tx-2", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)]
    assert all("transactions are not served by kjbod yet" in c.error_message for c in answer.coordinators)
    (line,) = [e for e in logs if e["event"] == "coordinator_not_served"]
    assert (line["key_type"], line["keys"], line["log_level"]) == ("transaction", ["tx-1", "tx-2"], "warning")
    assert "transactions are not served by kjbod yet" in line["reason"]


def test_one_warning_per_connection_and_key_type(logs):
    for _ in range(5):  # a client retrying on its connection
        answer_to(3, FindCoordinatorRequest(key="t", key_type=1), connection_id=1)
    answer_to(3, FindCoordinatorRequest(key="t", key_type=1), connection_id=2)
    assert [(kind, keys, peer) for kind, keys, _c, peer, _a in warnings_of(logs)] == [
        ("transaction", ["t"], "127.0.0.1:40001"), ("transaction", ["t"], "127.0.0.1:40002")]


def test_the_memory_of_warned_connections_is_bounded(logs, monkeypatch):
    monkeypatch.setattr(find_coordinator, "WARNED_LIMIT", 3)
    for connection_id in range(1, 6):
        answer_to(3, FindCoordinatorRequest(key="t", key_type=1), connection_id)
    assert list(find_coordinator._warned) == [(3, 1), (4, 1), (5, 1)]
    answer_to(3, FindCoordinatorRequest(key="t", key_type=1), 1)  # forgotten: warned again
    assert len(warnings_of(logs)) == 6


@pytest.mark.parametrize(("version", "key_type"), [(1, 2), (3, 2), (4, 2), (6, 2), (1, 3), (6, 99)])
def test_share_and_unknown_key_types_are_invalid_request_without_a_warning(logs, version, key_type):
    # Kafka: share keys need v6 and a share coordinator, and CoordinatorType.forId refuses unknown ids.
    body = FindCoordinatorRequest(key="k", key_type=key_type, coordinator_keys=["k", "l"])
    answer = answer_to(version, body)
    if version >= 4:
        assert [(c.key, c.error_code, c.node_id) for c in answer.coordinators] == [
            ("k", ErrorCode.INVALID_REQUEST, -1), ("l", ErrorCode.INVALID_REQUEST, -1)]
    else:
        assert (answer.error_code, answer.node_id, answer.host, answer.port) == (ErrorCode.INVALID_REQUEST, -1, "", -1)
    assert warnings_of(logs) == []
