"""FindCoordinator in process (kjbod/broker/handlers/find_coordinator.py): the warning a coordinator that cannot
be hosted yet logs (once per connection and key type, naming the client, the keys and why), and share and unknown
key types (and malformed share keys) answered INVALID_REQUEST.  Group and transaction keys are answered by their coordinators (tests/groups,
tests/txn)."""

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
    # Share and unknown keys never touch the node (group and transaction keys are tested live).
    return asyncio.run(find_coordinator.handle(None, request(version, connection_id), body))


def warn(connection_id: int, keys: list[str], key_type: int = 1) -> None:
    find_coordinator._warn_once(request(3, connection_id), key_type, "transaction", "why not", keys)


def test_the_warning_names_the_client_the_keys_and_the_reason(logs):
    warn(1, ["tx-1", "tx-2"])
    (line,) = [e for e in logs if e["event"] == "coordinator_not_served"]
    assert (line["key_type"], line["keys"], line["log_level"], line["reason"]) == (
        "transaction", ["tx-1", "tx-2"], "warning", "why not")
    assert warnings_of(logs) == [("transaction", ["tx-1", "tx-2"], "kafkajs", "127.0.0.1:40001",
                                  "COORDINATOR_NOT_AVAILABLE")]


def test_one_warning_per_connection_and_key_type(logs):
    for _ in range(5):  # a client retrying on its connection
        warn(1, ["t"])
    warn(2, ["t"])
    assert [(kind, keys, peer) for kind, keys, _c, peer, _a in warnings_of(logs)] == [
        ("transaction", ["t"], "127.0.0.1:40001"), ("transaction", ["t"], "127.0.0.1:40002")]


def test_the_memory_of_warned_connections_is_bounded(logs, monkeypatch):
    monkeypatch.setattr(find_coordinator, "WARNED_LIMIT", 3)
    for connection_id in range(1, 6):
        warn(connection_id, ["t"])
    assert list(find_coordinator._warned) == [(3, 1), (4, 1), (5, 1)]
    warn(1, ["t"])  # forgotten: warned again
    assert len(warnings_of(logs)) == 6


@pytest.mark.parametrize(("version", "key_type"), [(1, 2), (3, 2), (4, 2), (6, 2), (1, 3), (6, 99)])
def test_share_and_unknown_key_types_are_invalid_request_without_a_warning(logs, version, key_type):
    # Kafka: share keys need v6 and the form group:topicId:partition, and CoordinatorType.forId refuses unknown
    # ids (well-formed share keys are answered by the share coordinator: tests/share).
    body = FindCoordinatorRequest(key="k", key_type=key_type, coordinator_keys=["k", "l"])
    answer = answer_to(version, body)
    if version >= 4:
        assert [(c.key, c.error_code, c.node_id) for c in answer.coordinators] == [
            ("k", ErrorCode.INVALID_REQUEST, -1), ("l", ErrorCode.INVALID_REQUEST, -1)]
    else:
        assert (answer.error_code, answer.node_id, answer.host, answer.port) == (ErrorCode.INVALID_REQUEST, -1, "", -1)
    assert warnings_of(logs) == []


@pytest.mark.parametrize(("key", "problem"), [
    ("g:AAAAAAAAAAAAAAAAAAAAAA:0", None), ("a:b:AAAAAAAAAAAAAAAAAAAAAA:7", None),  # a group id may hold colons
    ("g:AAAAAAAAAAAAAAAAAAAAAA:-1", None), ("", "not groupId"), ("g:0", "not groupId"),
    (" :AAAAAAAAAAAAAAAAAAAAAA:0", "empty group id"), ("g:xyz:0", "invalid topic id"),
    ("g:AAAAAAAAAAAAAAAAAAAAAA:", "invalid partition"), ("g:AAAAAAAAAAAAAAAAAAAAAA:2147483648", "invalid partition"),
    ("g:AAAAAAAAAAAAAAAAAAAAAA:1_0", "invalid partition")])
def test_share_keys_are_checked_as_kafkas_share_partition_key(key, problem):
    found = find_coordinator.share_key_problem(key)
    assert (found is None) if problem is None else (problem in found)
