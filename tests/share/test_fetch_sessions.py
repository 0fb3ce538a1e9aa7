"""Share sessions (kjbod.broker.share.sessions), in process: epochs, limits, closing, connections."""

from __future__ import annotations

from uuid import uuid4

import pytest

from kjbod.broker.share.sessions import SessionError, ShareSessions, next_epoch
from kjbod.protocol.errors import ErrorCode

T = uuid4()


def test_open_continue_close():
    s = ShareSessions()
    session = s.for_fetch("g", "m", 0, [(T, 0)], [], 7, acknowledging=False)
    assert session.epoch == 1 and list(session.partitions) == [(T, 0)]
    assert s.for_fetch("g", "m", 1, [(T, 1)], [(T, 0)], 7, acknowledging=True) is session
    assert session.epoch == 2 and list(session.partitions) == [(T, 1)]
    assert s.for_acknowledge("g", "m", 2) is session and session.epoch == 3
    assert s.for_fetch("g", "m", -1, [], [], 7, acknowledging=True) is session
    assert s.close("g", "m") is session and s.get("g", "m") is None


@pytest.mark.parametrize("call, code", [
    (lambda s: s.for_fetch("g", "other", 1, [], [], 1, acknowledging=False), ErrorCode.SHARE_SESSION_NOT_FOUND),
    (lambda s: s.for_fetch("g", "m", 5, [], [], 1, acknowledging=False), ErrorCode.INVALID_SHARE_SESSION_EPOCH),
    (lambda s: s.for_fetch("g", "m", 0, [], [], 1, acknowledging=True), ErrorCode.INVALID_REQUEST),
    (lambda s: s.for_fetch("g", "other", -1, [], [], 1, acknowledging=False), ErrorCode.SHARE_SESSION_NOT_FOUND),
    (lambda s: s.for_acknowledge("g", "m", 0), ErrorCode.INVALID_SHARE_SESSION_EPOCH),
    (lambda s: s.for_acknowledge("g", "m", 3), ErrorCode.INVALID_SHARE_SESSION_EPOCH),
    (lambda s: s.for_acknowledge("h", "m", 1), ErrorCode.SHARE_SESSION_NOT_FOUND),
])
def test_errors(call, code):
    s = ShareSessions()
    s.for_fetch("g", "m", 0, [], [], 1, acknowledging=False)
    with pytest.raises(SessionError) as e:
        call(s)
    assert e.value.code == code
    assert s.get("g", "m").epoch == 1  # a refused request moves nothing


def test_limit_and_reopen():
    s = ShareSessions(max_sessions=1)
    first = s.for_fetch("g", "m", 0, [], [], 1, acknowledging=False)
    with pytest.raises(SessionError) as e:
        s.for_fetch("g", "n", 0, [], [], 1, acknowledging=False)
    assert e.value.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    again = s.for_fetch("g", "m", 0, [], [], 2, acknowledging=False)  # a member reopens its own: within the limit
    assert again is not first and s.get("g", "m") is again


def test_connection_closed_ends_its_sessions_only():
    s = ShareSessions()
    s.for_fetch("g", "a", 0, [], [], 1, acknowledging=False)
    s.for_fetch("g", "b", 0, [], [], 2, acknowledging=False)
    assert [x.member_id for x in s.connection_closed(1)] == ["a"]
    assert s.get("g", "a") is None and s.get("g", "b") is not None


def test_epoch_wraps_to_one():
    assert next_epoch(0x7FFFFFFF) == 1 and next_epoch(5) == 6
