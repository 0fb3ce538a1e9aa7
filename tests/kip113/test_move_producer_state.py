"""A KIP-113 move keeps an idempotent producer's state: after the swap, the moved replica (leading) answers a
retry of any of the producer's last five batches as a duplicate with its original offsets and writes nothing,
and takes the producer's next batch at the log end (in process: a real LogManager and ReplicaMover).

Kafka's future replica replays every batch from the current one (ReplicaAlterLogDirsThread), so its state is
the source's. kjbod's bulk copy moves whole segments and the producer snapshots, and a snapshot holds only each
producer's last batch: without more, the batches before the newest copied snapshot were forgotten, and a retry of
one of them was refused with OUT_OF_ORDER_SEQUENCE_NUMBER, which an idempotent client answers by bumping its
epoch and sending the batch again: a record written twice."""

from __future__ import annotations

from kjbod.storage.config import LogConfig
from tests.storage.conftest import kp_batch

from .conftest import TOPIC_ID, wait_for

PID = 7001


def idem(seq: int) -> bytes:
    return kp_batch([b"v%05d" % seq + b"x" * 100], producer_id=PID, producer_epoch=0, base_sequence=seq)


def test_a_moved_replica_answers_retries_of_the_producers_last_five_batches_as_duplicates(make_rig, log_dirs):
    rig = make_rig(config=LogConfig(segment_bytes=4096, file_delete_delay_ms=0))
    rig.manager.create_partition("ps", 0, TOPIC_ID, dir=log_dirs[0])
    source = rig.manager.get("ps", 0)
    offsets = [source.append(idem(seq)).base_offset for seq in range(40)]  # several rolls, a snapshot at each
    source.roll()  # the newest snapshot falls inside the last five batches: 3 before it, 2 after
    offsets += [source.append(idem(seq)).base_offset for seq in (40, 41)]
    rig.mover.request_move("ps", 0, log_dirs[1])
    wait_for(lambda: rig.moved("ps", 0, log_dirs[1]), what="the move")
    moved = rig.manager.get("ps", 0)
    end = moved.log_end_offset
    for seq in range(37, 42):
        retry = moved.append(idem(seq), leader_epoch=1)
        assert retry.duplicate and retry.base_offset == offsets[seq], seq
    assert moved.log_end_offset == end  # nothing written
    assert moved.append(idem(42), leader_epoch=1).base_offset == end
