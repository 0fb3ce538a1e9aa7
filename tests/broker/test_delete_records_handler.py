"""DeleteRecords' file work in process (kjbod.broker.handlers.delete_records._delete, what a dir's worker runs):
offset -1 is the high watermark, below -1 or past the high watermark is OFFSET_OUT_OF_RANGE and moves nothing,
an offset at or below the log start changes nothing, and the dir's checkpoint is written once for a batch that
moved a start, never for one that moved none. Real PartitionLogs (tests/replication/conftest.py's make_log)."""

from __future__ import annotations

from types import SimpleNamespace

from kjbod.broker.handlers.delete_records import _delete
from kjbod.protocol.errors import ErrorCode
from tests.replication.conftest import batch, make_log  # noqa: F401  (the fixture)


def node_counting_checkpoints() -> SimpleNamespace:
    written: list[str] = []
    manager = SimpleNamespace(checkpoint_dir=written.append)
    return SimpleNamespace(logs=SimpleNamespace(manager=manager), written=written)


def filled(make, name: str, count: int, hw: int):
    plog = make(name)
    plog.append(batch(count))
    plog.auto_high_watermark = False
    plog.high_watermark = hw
    return plog


def test_offsets_as_kafka_resolves_them(make_log):  # noqa: F811
    node = node_counting_checkpoints()
    a, b, c, d = (filled(make_log, f"t-{i}", 6, 4) for i in range(4))
    results = _delete(node, [(None, a, -1), (None, b, 5), (None, c, -2), (None, d, 2)])
    assert results == [(0, 4), (ErrorCode.OFFSET_OUT_OF_RANGE, 5), (ErrorCode.OFFSET_OUT_OF_RANGE, -2), (0, 2)]
    assert [p.log_start_offset for p in (a, b, c, d)] == [4, 0, 0, 2]
    assert len(node.written) == 1  # one write for the batch (its dir), not one per partition


def test_an_offset_at_or_below_the_log_start_moves_nothing_and_writes_no_checkpoint(make_log):  # noqa: F811
    node = node_counting_checkpoints()
    plog = filled(make_log, "t-0", 6, 6)
    assert _delete(node, [(None, plog, 3)]) == [(0, 3)]
    node.written.clear()
    assert _delete(node, [(None, plog, 3), (None, plog, 1), (None, plog, 0)]) == [(0, 3), (0, 1), (0, 0)]
    assert plog.log_start_offset == 3
    assert node.written == []
