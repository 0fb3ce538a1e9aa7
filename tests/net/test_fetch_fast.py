"""kjbod.net.fetch_fast: a replica fetcher's request, written by the generated codec once per shape and patched
for the next fetches, must be byte for byte what the codec writes for every fetch, at every version a fetcher
sends, and decode back to the fields it was given."""

from __future__ import annotations

import random
import struct
import uuid

import pytest

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
