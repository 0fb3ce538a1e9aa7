"""A follower's append (PartitionLog.append_as_follower) makes a producer-state plan only for batches with a
producer id: whatever mix of batches an append brings, the producer state it leaves (every producer's entry and
the map end offset) must be what replaying the same batches gives (ProducerStateManager.replay, recovery's
way, which knows no plans), after every append, and the appended bytes are stored unchanged."""

from __future__ import annotations

import pytest

from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.log import PartitionLog
from kjbod.storage.producer_state import ProducerStateManager
from kjbod.storage.records import NO_PRODUCER_ID, build_batch, iter_batches

# Each append: its batches as (records, producer id, base sequence); NO_PRODUCER_ID: a plain producer's batch.
PLAIN = (NO_PRODUCER_ID, -1)
CASES = {
    "no producer ids": [[(1, *PLAIN)], [(2, *PLAIN), (1, *PLAIN)]],
    "one idempotent producer": [[(2, 7, 0)], [(1, 7, 2)], [(3, 7, 3)]],
    "mixed within an append": [[(1, *PLAIN), (2, 7, 0), (1, *PLAIN)], [(1, 8, 0), (2, 7, 2)]],
    "a producer, then none": [[(2, 7, 0)], [(3, *PLAIN)], [(1, *PLAIN)]],
    "none, then a producer": [[(3, *PLAIN)], [(1, 9, 0)]],
}


def _batches(spec: list[tuple[int, int, int]], offset: int) -> bytes:
    out = b""
    for n, producer_id, sequence in spec:
        out += build_batch([(None, b"v%d" % (offset + i), (), 1_700_000_000_000) for i in range(n)],
                           base_offset=offset, partition_leader_epoch=0, producer_id=producer_id,
                           producer_epoch=0 if producer_id >= 0 else -1, base_sequence=sequence)
        offset += n
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_follower_append_leaves_the_state_a_replay_of_its_batches_gives(tmp_path, case):
    io = fsio.LogDirIO(str(tmp_path / "d"))
    io.mkdir(io.path, parents=True)
    plog = PartitionLog.create(io, io.join("t-0"), "t", 0, "3uI2M2AbQVO0J2cYw2xvOA", LogConfig())
    try:
        stored = b""
        for spec in CASES[case]:
            data = _batches(spec, plog.log_end_offset)
            plog.append_as_follower(data)
            stored += data
            replayed = ProducerStateManager()
            replayed.replay(header for _pos, header in iter_batches(stored))
            assert plog.producer_state.producers == replayed.producers
            assert plog.producer_state.map_end_offset == replayed.map_end_offset == plog.log_end_offset
        assert plog.read_bytes(0, 1 << 20) == stored
    finally:
        plog.close_quietly()
