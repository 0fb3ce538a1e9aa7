"""kjbod.net.fetch_fast: a replica fetcher's request, written by the generated codec once per shape and patched
for the next fetches, must be byte for byte what the codec writes for every fetch, at every version a fetcher
sends, and decode back to the fields it was given."""

from __future__ import annotations

import random
import struct
import uuid

import pytest

from kjbod.net.correlator import decode_response
from kjbod.net.fetch_fast import FollowerFetchRequest, Template
from kjbod.protocol.generated import FetchRequest

VERSIONS = range(12, 18)
TOPICS = [("t", uuid.UUID(int=7)), ("other", uuid.UUID(int=99))]


def request(template: Template, entries, *, epoch: int = 40, wait: int = 500) -> FollowerFetchRequest:
    return FollowerFetchRequest(3, epoch, wait, 1, 10 << 20, 1 << 20, entries, template)


def encoded(message, version: int) -> bytes:
    out: list = []
    message.encode_into(out, version)
    return b"".join(out)


def entries_of(rng: random.Random, partitions: list[tuple[int, int]]):
    """(topic index, partition) pairs with random offsets and epochs, grouped by topic as a fetcher asks."""
    out = []
    for ti, p in partitions:
        name, topic_id = TOPICS[ti]
        out.append((name, topic_id, p, 5, rng.randrange(1 << 40), rng.randrange(-1, 1 << 20),
                    rng.randrange(-1, 1 << 30)))
    return out


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("partitions", [[(0, 0)], [(0, 0), (0, 1), (1, 0)], [(1, 4), (0, 2)]])
def test_patched_fetches_are_the_codecs_bytes(version, partitions):
    rng = random.Random(version * 100 + len(partitions))
    template = Template()
    for _ in range(20):
        r = request(template, entries_of(rng, partitions))
        assert encoded(r, version) == encoded(r.as_request(version), version)
    assert template.encoded == 1 and template.patched == 19  # one shape: the codec wrote its first fetch only


def test_the_bytes_decode_to_the_fields_given():
    rng = random.Random(1)
    template = Template()
    for version in VERSIONS:
        entries = entries_of(rng, [(0, 0), (0, 1), (1, 3)])
        body = encoded(request(template, entries), version)
        decoded, end = FetchRequest.decode_from(body, 0, version)
        assert end == len(body)
        got = [(p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset)
               for t in decoded.topics for p in t.partitions]
        assert got == [e[2:] for e in entries]
        assert decoded.max_wait_ms == 500 and decoded.max_bytes == 10 << 20
        replica = decoded.replica_state.replica_id if version >= 15 else decoded.replica_id
        assert replica == 3
        assert [t.topic_id if version >= 13 else t.topic for t in decoded.topics] == (
            [TOPICS[0][1], TOPICS[1][1]] if version >= 13 else ["t", "other"])


@pytest.mark.parametrize("change", ["epoch", "wait", "leader_epoch", "partitions", "version"])
def test_a_new_shape_is_written_by_the_codec_again(change):
    rng = random.Random(2)
    template = Template()
    entries = entries_of(rng, [(0, 0), (0, 1)])
    encoded(request(template, entries), 16)
    kw: dict = {}
    version = 16
    if change == "epoch":
        kw["epoch"] = 41
    elif change == "wait":
        kw["wait"] = 10
    elif change == "leader_epoch":
        entries = [e[:3] + (6,) + e[4:] for e in entries]
    elif change == "partitions":
        entries = entries[:1]
    else:
        version = 13
    r = request(template, entries, **kw)
    assert encoded(r, version) == encoded(r.as_request(version), version)
    assert template.encoded == 2 and template.patched == 0


def test_blocks_not_found_leave_every_fetch_to_the_codec(monkeypatch):
    """Should the codec ever put a partition's fields elsewhere, nothing is patched: each fetch is the codec's."""
    from kjbod.net import fetch_fast

    monkeypatch.setattr(fetch_fast, "_BLOCK", struct.Struct("<iiqiqi"))  # a block the codec never writes
    rng = random.Random(3)
    template = Template()
    for _ in range(3):
        r = request(template, entries_of(rng, [(0, 0)]))
        assert encoded(r, 17) == encoded(r.as_request(17), 17)
    assert template.patched == 0 and template.encoded == 3 and template.places is None


# ----------------------------------------------------------------------------------------------- the response

from kjbod.net import fetch_fast  # noqa: E402
from kjbod.net.errors import ProtocolViolation  # noqa: E402
from kjbod.protocol.generated import FetchResponse  # noqa: E402
from kjbod.protocol.generated.fetch_response import (  # noqa: E402
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
)

RECORDS = bytes(range(256)) * 3  # a length whose varint takes two bytes


def frame(response: FetchResponse, version: int, correlation_id: int = 9) -> bytes:
    return struct.pack(">i", correlation_id) + b"\x00" + response.encode(version)


def part(index: int = 0, **kw) -> PartitionData:
    fields = dict(partition_index=index, error_code=0, high_watermark=40, last_stable_offset=40, log_start_offset=3,
                  aborted_transactions=None, records=RECORDS)
    fields.update(kw)
    return PartitionData(**fields)


def response(*partitions: PartitionData, topics: int = 1, **kw) -> FetchResponse:
    return FetchResponse(responses=[
        FetchableTopicResponse(topic=TOPICS[i][0], topic_id=TOPICS[i][1], partitions=list(partitions))
        for i in range(topics if partitions else 0)], **kw)


def for_version(r: FetchResponse, version: int) -> FetchResponse:
    for t in r.responses:
        if version >= 13:
            t.topic = ""
        else:
            t.topic_id = fetch_fast.ZERO_UUID
    return r


@pytest.fixture
def slow(monkeypatch):
    """Counts the frames left to the generated decoder."""
    calls: list[int] = []
    real = fetch_fast.decode_response

    def counted(*a):
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(fetch_fast, "decode_response", counted)
    return calls


PLAIN = {
    "one partition": lambda: response(part()),
    "no records": lambda: response(part(records=None)),
    "empty records": lambda: response(part(records=b"")),
    "a partition's error": lambda: response(part(error_code=6, high_watermark=-1, records=b"")),
    "several": lambda: response(part(0), part(1, records=b"x" * 5), topics=2),
    "throttled": lambda: response(part(), throttle_time_ms=30),
}
NOT_PLAIN = {
    "diverging epoch": lambda v: response(part(diverging_epoch=EpochEndOffset(epoch=3, end_offset=17))),
    "current leader": lambda v: response(part(current_leader=LeaderIdAndEpoch(leader_id=2, leader_epoch=4))),
    "aborted transactions": lambda v: response(part(aborted_transactions=[AbortedTransaction(7, 1)])),
    "an empty aborted list": lambda v: response(part(aborted_transactions=[])),
    "a partition's unknown tag": lambda v: response(part(unknown_tagged_fields=((9, b"z"),))),
    "node endpoints": lambda v: response(part(), node_endpoints=[NodeEndpoint(node_id=2, host="h", port=1)])
    if v >= 16 else response(part(), unknown_tagged_fields=((5, b"q"),)),
    "a top-level error": lambda v: response(error_code=7),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(PLAIN))
def test_a_plain_response_is_read_by_the_short_path_as_the_codec_reads_it(version, case, slow):
    data = frame(for_version(PLAIN[case](), version), version)
    fast = fetch_fast.decode_follower_response(data, version, "h", 1)
    assert not slow
    assert fast == decode_response(data, 1, version, "h", 1)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(NOT_PLAIN))
def test_anything_else_is_left_to_the_codec(version, case, slow):
    data = frame(for_version(NOT_PLAIN[case](version), version), version)
    got = fetch_fast.decode_follower_response(data, version, "h", 1)
    assert got == decode_response(data, 1, version, "h", 1)
    assert slow or case == "a top-level error"  # no topics and no tag: plain, and read as the codec reads it


@pytest.mark.parametrize("cut", [1, 5, 30, len(RECORDS) // 2])
def test_a_short_or_long_frame_is_the_codecs_violation(cut, slow):
    data = frame(for_version(response(part()), 17), 17)
    with pytest.raises(ProtocolViolation):
        fetch_fast.decode_follower_response(data[:-cut], 17, "h", 1)
    with pytest.raises(ProtocolViolation):
        fetch_fast.decode_follower_response(data + b"\x00" * cut, 17, "h", 1)
    assert len(slow) == 2


# ----------------------------------------------------------------------------------------------- the short way

def one(frame_bytes: bytes, version: int, topic: int = 0, partition: int = 0):
    return fetch_fast.one_partition(frame_bytes, version, TOPICS[topic][1].bytes, partition)


ONE = {
    "one partition": lambda: response(part()),
    "small records": lambda: response(part(records=b"x" * 5)),
    "no records": lambda: response(part(records=None)),
    "empty records": lambda: response(part(records=b"")),
    "throttled": lambda: response(part(), throttle_time_ms=30),
    "a read replica named": lambda: response(part(preferred_read_replica=2)),
}
NOT_ONE = {
    **{name: (lambda v, make=make: make()) for name, make in PLAIN.items() if name not in ONE},
    **NOT_PLAIN,
    "another topic": lambda v: FetchResponse(responses=[FetchableTopicResponse(
        topic_id=TOPICS[1][1], partitions=[part()])]),
    "another partition": lambda v: response(part(1)),
    "records past a two-byte length": lambda v: response(part(records=b"r" * (1 << 14))),
    "no topic": lambda v: response(),
}


@pytest.mark.parametrize("version", fetch_fast.ONE_VERSIONS)
@pytest.mark.parametrize("case", sorted(ONE))
def test_one_partitions_answer_is_read_as_the_codec_reads_it(version, case):
    data = frame(for_version(ONE[case](), version), version)
    (topic,) = decode_response(data, 1, version, "h", 1).responses
    (p,) = topic.partitions
    hw, log_start, records = one(data, version)
    assert (hw, log_start) == (p.high_watermark, p.log_start_offset)
    assert (records is None, bytes(records or b"")) == (p.records is None, bytes(p.records or b""))


@pytest.mark.parametrize("version", fetch_fast.ONE_VERSIONS)
@pytest.mark.parametrize("case", sorted(NOT_ONE))
def test_anything_else_is_not_one_partitions_answer(version, case):
    assert one(frame(for_version(NOT_ONE[case](version), version), version), version) is None


def test_one_partitions_answer_cut_or_grown_or_at_v12_is_not_read():
    data = frame(for_version(response(part()), 17), 17)
    for cut in (1, 3, 30, len(RECORDS) // 2, len(data) - 10):
        assert one(data[:-cut], 17) is None
    assert one(data + b"\x00", 17) is None
    assert one(frame(for_version(response(part()), 12), 12), 12) is None  # topics by name: the general way


@pytest.mark.parametrize("version", VERSIONS)
def test_again_writes_what_the_codec_writes_and_nothing_for_another_shape(version):
    rng = random.Random(version)
    template = Template()
    first = entries_of(rng, [(0, 0)])
    encoded(request(template, first), version)
    shape = template.shape
    for _ in range(5):
        (name, topic_id, p, epoch, _o, _l, _s), = first
        offset, last, start = rng.randrange(1 << 40), rng.randrange(-1, 1 << 20), rng.randrange(-1, 1 << 30)
        expected = encoded(request(Template(), [(name, topic_id, p, epoch, offset, last, start)]).as_request(
            version), version)
        assert template.again(shape, offset, last, start) == expected
    encoded(request(template, entries_of(rng, [(0, 0), (1, 1)])), version)  # a new shape: the old one is gone
    assert template.again(shape, 1, 1, 1) is None
    assert template.again(template.shape, 1, 1, 1) is None  # two partitions: not the short way's
