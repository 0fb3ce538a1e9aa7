"""runtime.uuid_from_bytes: the UUID of 16 bytes, kept and shared for the same bytes (UUIDs are immutable)."""

from __future__ import annotations

import uuid

import pytest

from kjbod.protocol import runtime


def test_the_same_bytes_give_the_same_uuid_object_and_the_right_value():
    raw = uuid.uuid4().bytes
    first = runtime.uuid_from_bytes(raw)
    assert first == uuid.UUID(bytes=raw)
    assert runtime.uuid_from_bytes(bytes(raw)) is first
    other = uuid.uuid4().bytes
    assert runtime.uuid_from_bytes(other) == uuid.UUID(bytes=other) != first


def test_what_it_keeps_is_bounded(monkeypatch):
    monkeypatch.setattr(runtime, "_UUIDS", {})
    monkeypatch.setattr(runtime, "_UUIDS_KEPT", 8)
    for i in range(20):
        assert runtime.uuid_from_bytes(i.to_bytes(16, "big")) == uuid.UUID(int=i)
        assert len(runtime._UUIDS) <= 8


def test_sixteen_bytes_only():
    with pytest.raises(ValueError):
        runtime.uuid_from_bytes(b"short")
