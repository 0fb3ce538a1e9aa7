"""FindCoordinator's answers, in process: Kafka's error codes for each key type, and the warning that tells a
user why a group consumer or a transactional producer waits (clients retry COORDINATOR_NOT_AVAILABLE, some
without a limit).  tests/compat/test_aiokafka.py sees the same from a real client."""

from __future__ import annotations

import itertools

import pytest
from structlog.testing import capture_logs

from kjbod.broker.handlers import find_coordinator
from kjbod.broker.router import Request
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FindCoordinatorRequest, FindCoordinatorResponse
from kjbod.wire.handler import RequestContext

_connections = itertools.count(1_000_000)


def ask(version: int, body: FindCoordinatorRequest, connection_id: int | None = None) -> FindCoordinatorResponse:
    """The handler's answer, through the wire encoding of `version` both ways."""
    ctx = RequestContext(connection_id or next(_connections), "127.0.0.1", 40000, "PLAINTEXT", "broker")
    request = Request(ctx, FindCoordinatorRequest.API_KEY, version, 7, "test-client")
    decoded = FindCoordinatorRequest.decode(body.encode(version), version)
    answer = find_coordinator.handle(None, request, decoded)
    return FindCoordinatorResponse.decode(answer.encode(version), version)


def warnings_in(logs: list[dict]) -> list[dict]:
    return [e for e in logs if e["event"] == "coordinator_not_available"]


@pytest.mark.parametrize("version", range(4))
def test_a_group_key_is_coordinator_not_available_with_no_node(version):
    answer = ask(version, FindCoordinatorRequest(key="g", key_type=0))
    assert (answer.error_code, answer.node_id, answer.host, answer.port) == (
        ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
    if version >= 1:  # v0 has no message field
        assert answer.error_message == find_coordinator.REASONS[0]


@pytest.mark.parametrize("version", [4, 5, 6])
def test_batched_keys_each_get_their_own_answer(version):
    answer = ask(version, FindCoordinatorRequest(key_type=1, coordinator_keys=["tx-a", "tx-b"]))
    assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in answer.coordinators] == [
        (key, ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1) for key in ("tx-a", "tx-b")]


@pytest.mark.parametrize(("version", "key_type", "name", "reason_says"), [
    (0, 0, "GROUP", "consumer groups"),  # v0 has no key type: always a group
    (2, 0, "GROUP", "consumer groups"),
    (2, 1, "TRANSACTION", "transactions"),
    (4, 1, "TRANSACTION", "transactions"),
])
def test_a_warning_names_the_key_and_what_to_do_once_per_connection(version, key_type, name, reason_says):
    key = f"key-{version}-{key_type}"
    if version >= 4:
        body = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
    else:
        body = FindCoordinatorRequest(key=key, key_type=key_type)
    connection = next(_connections)
    with capture_logs() as logs:
        for _ in range(3):  # a client retrying on one connection
            ask(version, body, connection)
        ask(version, body)  # another connection
    lines = warnings_in(logs)
    assert len(lines) == 2, lines
    line = lines[0]
    assert (line["log_level"], line["key_type"], line["key"], line["client_id"]) == ("warning", name, key,
                                                                                       "test-client")
    assert reason_says in line["reason"]
    assert line["answer"] == "COORDINATOR_NOT_AVAILABLE"


@pytest.mark.parametrize("version", [1, 3, 4, 6])
@pytest.mark.parametrize("key_type", [2, 3, -1], ids=["share", "unknown", "negative"])
def test_share_and_unknown_key_types_are_invalid_request(version, key_type):
    # Kafka: a share key before v6, or with share groups not enabled, is INVALID_REQUEST, and so is a key type
    # CoordinatorType.forId does not know.  No warning: this is not a client waiting for a coordinator.
    if version >= 4:
        body = FindCoordinatorRequest(key_type=key_type, coordinator_keys=["s1", "s2"])
    else:
        body = FindCoordinatorRequest(key="s1", key_type=key_type)
    with capture_logs() as logs:
        answer = ask(version, body)
    if version >= 4:
        assert [(c.key, c.error_code, c.node_id) for c in answer.coordinators] == [
            ("s1", ErrorCode.INVALID_REQUEST, -1), ("s2", ErrorCode.INVALID_REQUEST, -1)]
    else:
        assert (answer.error_code, answer.node_id, answer.host, answer.port) == (ErrorCode.INVALID_REQUEST, -1, "", -1)
    assert warnings_in(logs) == []
