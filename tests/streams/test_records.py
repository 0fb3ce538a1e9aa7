"""The StreamsGroup* records of `__consumer_offsets` (KIP-1071): our value schemas against Kafka 4.3's facts, the
bytes of keys and values, and a group written as records and read back.

Strategy: schemas/streams/ must say what Kafka's record values say (field order, names, types, versions,
nullability, tags, defaults), compared recursively with tests/kafka_facts (Kafka's JSON without its prose); then a
group driven through joins, a revocation and a leave is turned into records and made again from them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kjbod.broker.groups.records import RecordFormatError
from kjbod.broker.streams import records as sr
from kjbod.broker.streams.groups import MemberState, StreamsGroupConfig, StreamsGroups, StreamsHeartbeat
from kjbod.broker.streams.topology import Subtopology, TopicInfo, Topology

ROOT = Path(__file__).resolve().parents[2]
VALUES = ["StreamsGroupMetadataValue", "StreamsGroupTopologyValue", "StreamsGroupMemberMetadataValue",
          "StreamsGroupTargetAssignmentMetadataValue", "StreamsGroupTargetAssignmentMemberValue",
          "StreamsGroupCurrentMemberAssignmentValue"]
FACT_KEYS = ("name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default", "ignorable")


def _load(path: Path) -> dict:
    return json.loads("\n".join(line for line in path.read_text().splitlines() if not line.strip().startswith("//")))


def _facts(fields: list[dict]) -> list[dict]:
    out = []
    for f in fields:
        entry = {k: "null" if f[k] is None else str(f[k]) for k in FACT_KEYS if k in f}
        entry.setdefault("versions", "0+")  # Kafka leaves it out of a tagged-only field
        if "fields" in f:
            entry["fields"] = _facts(f["fields"])
        out.append(entry)
    return out


@pytest.mark.parametrize("name", VALUES)
def test_value_schemas_match_kafkas(name):
    ours, theirs = _load(ROOT / "schemas" / "streams" / f"{name}.json"), _load(ROOT / "tests" / "kafka_facts" /
                                                                                  f"{name}.json")
    assert (ours["validVersions"], ours["flexibleVersions"]) == (theirs["validVersions"], theirs["flexibleVersions"])
    assert _facts(ours["fields"]) == _facts(theirs["fields"])
    assert {s["name"]: _facts(s["fields"]) for s in ours.get("commonStructs", [])} == {
        s["name"]: _facts(s["fields"]) for s in theirs.get("commonStructs", [])}


def test_key_and_value_bytes():
    assert sr.streams_key(sr.STG_METADATA, "g") == b"\x00\x11\x00\x01g"
    assert sr.streams_key(sr.STG_CURRENT, "g", "m") == b"\x00\x16\x00\x01g\x00\x01m"
    assert sr.read_streams_key(b"\x00\x16\x00\x01g\x00\x01m") == (22, "g", "m")
    assert sr.read_streams_key(b"\x00\x17\x00\x01g") == (23, "g", None)
    # the value's int16 version 0, then the flexible body: the epoch and no tagged fields
    from kjbod.protocol.generated.streams_group_target_assignment_metadata_value import (
        StreamsGroupTargetAssignmentMetadataValue,
    )
    assert sr._value(StreamsGroupTargetAssignmentMetadataValue(assignment_epoch=5)) == (
        b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00")


WORDS = Topology(3, (
    Subtopology("0", source_topics=("input",), repartition_sink_topics=("r",)),
    Subtopology("1", repartition_source_topics=(TopicInfo("r", configs=(("cleanup.policy", "delete"),)),),
                state_changelog_topics=(TopicInfo("c", replication_factor=2),),
                copartition_groups=(((), (0,)),)),
))
IMAGE = {"input": 4, "r": 4, "c": 4}.get


def test_a_group_is_written_and_read_back():
    sg = StreamsGroups(StreamsGroupConfig(initial_rebalance_delay_ms=0), {})
    join = dict(member_epoch=0, rebalance_timeout_ms=30_000, topology=WORDS)
    sg.heartbeat(0, StreamsHeartbeat("g", "m1", process_id="p1", user_endpoint=("h", 1), rack_id="r1",
                                     client_tags=(("zone", "a"),), client_id="c1", client_host="/1.2.3.4", **join),
                 IMAGE)
    sg.heartbeat(0, StreamsHeartbeat("g", "m2", process_id="p2", **join), IMAGE)
    g = sg.groups["g"]
    assert g.members["m1"].state == MemberState.STABLE  # not told to revoke yet
    full = {s: set(ps) for s, ps in g.members["m1"].assigned.active.items()}
    sg.heartbeat(1, StreamsHeartbeat("g", "m1", 1, active_tasks=full, standby_tasks={}, warmup_tasks={}), IMAGE)
    assert g.members["m1"].state == MemberState.UNREVOKED_TASKS
    written = sr.streams_group_records(g)
    kinds = sorted(sr.read_streams_key(k)[0] for k in written)
    assert kinds == [17, 19, 19, 20, 21, 21, 22, 22, 23]
    back = sr.streams_group_of("g", {sr.read_streams_key(k)[0::2]: v for k, v in written.items()})
    assert back is not None
    assert (back.group_epoch, back.assignment_epoch, back.topology, back.validated_topology_epoch) == (
        g.group_epoch, g.assignment_epoch, g.topology, g.validated_topology_epoch)
    for mid, m in g.members.items():
        b = back.members[mid]
        assert (b.member_epoch, b.previous_member_epoch, b.state, b.assigned, b.pending_revocation) == (
            m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation)
        assert (b.process_id, b.user_endpoint, b.client_tags, b.rack_id, b.client_id, b.client_host,
                b.topology_epoch, b.rebalance_timeout_ms) == (
            m.process_id, m.user_endpoint, m.client_tags, m.rack_id, m.client_id, m.client_host, m.topology_epoch,
            m.rebalance_timeout_ms)
    assert back.targets == g.targets
    # a leave: the member's records are tombstoned, the topology's last (Kafka's order, reversed for tombstones)
    sg.heartbeat(2, StreamsHeartbeat("g", "m2", -1), IMAGE)
    pairs = sr.records_between(written, sr.streams_group_records(g))
    gone = [sr.read_streams_key(k) for k, v in pairs if v is None]
    assert gone == [(22, "g", "m2"), (21, "g", "m2"), (19, "g", "m2")]
    assert sr.read_streams_key(pairs[0][0])[0] in (19, 17)  # updates first, in Kafka's writing order
    # the metadata record gone: no group
    assert sr.streams_group_of("g", {}) is None


@pytest.mark.parametrize("key", [
    sr.streams_key(sr.STG_METADATA, "g")[:-1],  # the group id shorter than its length
    sr.streams_key(sr.STG_MEMBER, "g", "member")[:-2],
    sr.streams_key(sr.STG_MEMBER, "g"),  # no member id at all
    b"\x00\x11\xff\xfe",  # a negative length
    b"\x00\x11\x00\x02\xff\xfe",  # not UTF-8
])
def test_a_malformed_key_is_a_record_format_error(key):
    with pytest.raises(RecordFormatError):
        sr.read_streams_key(key)


@pytest.mark.parametrize("value", [b"", b"\x00", b"\x00\x00\x00", b"\x00\x01" + bytes(20)])
def test_a_malformed_value_is_a_record_format_error(value):
    with pytest.raises(RecordFormatError):
        sr.streams_group_of("g", {(sr.STG_METADATA, None): value})
