"""A data dir whose metadata log has kjbod 0.1's layout starts under this version and keeps its topics and data.

kjbod 0.1 wrote `__cluster_metadata-0/00000000000000000000.log` only: one batch per change, offsets from 0,
partition leader epoch 0, no LeaderChangeMessage, no `.index`/`.timeindex`. The test runs a node, creates topics
and produces, stops it, rewrites the metadata log in exactly that layout (the batches 0.1's writer built from the
same records, byte for byte as its `build_batch` call made them), and starts the node again: the topics, their
partitions and every record are there, and the log has become a Kafka partition (indexes, an epoch opened by a
LeaderChangeMessage).
"""

from __future__ import annotations

import shutil

import pytest
from live import LiveServer

from kjbod.protocol.generated import DeleteTopicsRequest
from kjbod.storage.metadata_log import TOPIC_DIR, MetadataLog
from kjbod.storage.metadata_records import LEADER_CHANGE, control_type, records_batch
from kjbod.storage.records import iter_batches, iter_records

from .support import RawClient, batch, create_topic, fetch_all, metadata, produce

pytestmark = pytest.mark.slow


def rewrite_as_kjbod_0_1(metadata_dir) -> int:
    """Replace the metadata log with kjbod 0.1's layout holding the same metadata records; returns their count."""
    part = metadata_dir / TOPIC_DIR
    batches = []
    for seg in sorted(part.glob("*.log")):
        data = seg.read_bytes()
        for pos, h in iter_batches(data):
            if not h.is_control:
                recs = list(iter_records(data[pos:pos + h.size]))
                batches.append(([r.value for r in recs], h.base_timestamp))
    shutil.rmtree(part)
    part.mkdir()
    out, offset = [], 0
    for values, ts in batches:
        out.append(records_batch(values, base_offset=offset, epoch=0, timestamp_ms=ts))
        offset += len(values)
    (part / "00000000000000000000.log").write_bytes(b"".join(out))
    return offset


def test_a_kjbod_0_1_metadata_log_keeps_topics_and_data(kjbod_server: LiveServer) -> None:
    server = kjbod_server
    produced = {}
    with RawClient.to(server) as raw:
        assert create_topic(raw, "orders", 3, {"retention.ms": "86400000"}).error_code == 0
        assert create_topic(raw, "gone", 1).error_code == 0
        assert create_topic(raw, "events", 1).error_code == 0
        for p in range(3):
            values = [f"orders-{p}-{i}".encode() for i in range(20)]
            assert produce(raw, "orders", p, batch(values)).error_code == 0
            produced[("orders", p)] = values
        produce(raw, "events", 0, batch([b"e1", b"e2"]))
        produced[("events", 0)] = [b"e1", b"e2"]
        deleted = raw.call(DeleteTopicsRequest(topic_names=["gone"], timeout_ms=10_000), 4)
        assert [r.error_code for r in deleted.responses] == [0]
    assert server.stop() == 0

    count = rewrite_as_kjbod_0_1(server.metadata_dir)
    assert count >= 3 + 5 + 1 + 1  # three TopicRecords, their partitions, the config, the RemoveTopicRecord
    part = server.metadata_dir / TOPIC_DIR
    assert sorted(p.name for p in part.iterdir()) == ["00000000000000000000.log"]

    server.start()
    with RawClient.to(server) as raw:
        topics = {t.name: len(t.partitions) for t in metadata(raw, None).topics}
        assert topics == {"orders": 3, "events": 1}
        for (topic, p), values in produced.items():
            assert [r.value for r in fetch_all(raw, topic, p)] == values
    assert server.stop() == 0

    names = {p.name for p in part.iterdir()}
    assert {"00000000000000000000.index", "00000000000000000000.timeindex"} <= names
    data = (part / "00000000000000000000.log").read_bytes()
    headers = [(pos, h) for pos, h in iter_batches(data)]
    assert [h.partition_leader_epoch for _, h in headers[:3]] == [0, 0, 0]
    pos, lcm = next((pos, h) for pos, h in headers if h.is_control)
    assert lcm.base_offset == count and lcm.partition_leader_epoch == 1
    assert control_type(next(iter_records(data[pos:pos + lcm.size])).key) == LEADER_CHANGE
    mlog = MetadataLog(str(server.metadata_dir), writer=False)
    kinds = [type(r).__name__ for r in mlog.load()]
    assert kinds.count("TopicRecord") == 3 and kinds.count("RemoveTopicRecord") == 1
    mlog.close()
