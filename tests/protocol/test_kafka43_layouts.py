"""Byte layouts of the versions Kafka 4.1-4.3 added that kjbod serves and kafka-python cannot decode.

Strategy: tests/test_schema_structure.py checks our schemas against Kafka's facts field by field; here the
generated codec's bytes are read by hand, as Kafka's layout puts them, so a field in the wrong place or a version
check that lets it leak into an older version shows up as bytes, not as a structure mismatch.
"""

from __future__ import annotations

import struct

import pytest

from kjbod.protocol.generated import ConsumerGroupDescribeResponse
from kjbod.protocol.generated.consumer_group_describe_response import Assignment, DescribedGroup, Member
from kjbod.protocol.runtime import DecodeError


def _one_member(member_type: int) -> ConsumerGroupDescribeResponse:
    return ConsumerGroupDescribeResponse(groups=[DescribedGroup(
        group_id="g", group_state="Stable", group_epoch=3, assignment_epoch=3, assignor_name="uniform",
        members=[Member(member_id="m", member_epoch=3, client_id="c", client_host="/h",
                        subscribed_topic_names=["t"], assignment=Assignment(), target_assignment=Assignment(),
                        member_type=member_type)])])


# The member's last bytes in Kafka's layout: TargetAssignment (an empty TopicPartitions array, compact: 0x01, then
# the struct's tagged-field count 0x00), [v1: MemberType int8], the member's tagged-field count 0x00; then the
# group's AuthorizedOperations int32 and its tagged-field count.
AFTER_MEMBER = struct.pack(">i", -(2**31)) + b"\x00"


@pytest.mark.parametrize("member_type", [0, 1, -1])
def test_member_type_is_one_byte_after_the_target_assignment_from_v1(member_type):
    v1 = _one_member(member_type).encode(1)
    tail = b"\x01\x00" + struct.pack(">b", member_type) + b"\x00" + AFTER_MEMBER
    assert v1.endswith(tail + b"\x00"), v1.hex()  # then the response's own tagged-field count
    assert ConsumerGroupDescribeResponse.decode(v1, 1).groups[0].members[0].member_type == member_type


def test_v0_has_no_member_type_and_decodes_it_as_unknown():
    v0 = _one_member(1).encode(0)
    assert len(v0) == len(_one_member(1).encode(1)) - 1
    assert v0.endswith(b"\x01\x00" + b"\x00" + AFTER_MEMBER + b"\x00"), v0.hex()
    assert ConsumerGroupDescribeResponse.decode(v0, 0).groups[0].members[0].member_type == -1


def test_a_v1_response_cut_before_its_member_type_is_a_decode_error():
    v1 = _one_member(1).encode(1)
    cut = len(v1) - len(AFTER_MEMBER) - 3  # drop MemberType, the member's tags and all after it
    with pytest.raises(DecodeError):
        ConsumerGroupDescribeResponse.decode(v1[:cut], 1)
