"""The consumer protocol's assignment bytes, both ways, against bytes a real client wrote."""

from __future__ import annotations

import pytest
from kafka.coordinator.assignors.abstract import ConsumerProtocolAssignment

from kjbod.admin.consumer_protocol import decode_assignment, encode_assignment


def test_decodes_what_kafka_python_encodes() -> None:
    data = ConsumerProtocolAssignment(0, [("a", [0, 2]), ("b", [1])], b"user").encode()
    assert decode_assignment(data) == (("a", 0), ("a", 2), ("b", 1))


def test_round_trip_and_empty() -> None:
    parts = [("t", 3), ("t", 1), ("u", 0)]
    assert decode_assignment(encode_assignment(parts)) == tuple(parts)
    assert decode_assignment(encode_assignment([], version=3)) == ()


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x00\x00\x00\x01\x00\x05ab", b"\x00\x00\xff\xff\xff\xff",
                                  b"\x00\x00\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x09\x00"])
def test_bytes_that_are_not_an_assignment_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_assignment(data)
