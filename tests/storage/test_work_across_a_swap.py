"""Work handed to a partition's source dir worker just before a KIP-113 move swaps the replica (the swap runs
on that worker too) finds the old log closed when it runs.

Found in CI: a follower whose fetch answer was queued behind the swap failed the append on the closed log and
dropped the partition until new metadata, so it never rejoined the ISR.  Now the answer is skipped (the next
fetch asks from the moved log's end), and a leader's queued Produce or read uses the moved log, as Kafka's
partition lock orders them and the swap."""

from __future__ import annotations

import asyncio
import os
import threading

from kjbod.broker.handlers.fetch import _close_regions, _read_all
from kjbod.broker.handlers.produce import _append_one
from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.replication.fetcher import Fetcher, FetchState
from kjbod.protocol.generated.fetch_request import FetchPartition
from kjbod.protocol.generated.fetch_response import PartitionData
from kjbod.protocol.generated.produce_request import PartitionProduceData
from kjbod.storage.config import LogConfig
from tests.replication.test_replica_manager import Clock, FakeNode, image
from tests.storage.conftest import kp_batch, kp_records
from tests.storage.test_dir_workers import _Node, _produce

TOPIC_ID = "3uI2M2AbQVO0J2cYw2xvOA"


def moved(make_manager, log_dirs, n: int = 5):
    """A log of topic t-0 with `n` records moved from the first dir to the third: (manager, old log, new log)."""
    lm = make_manager(config=LogConfig(file_delete_delay_ms=60_000))
    old = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    for i in range(n):
        old.append(kp_batch([b"r%d" % i]))
    future = lm.create_future_log("t", 0, log_dirs[2])
    future.append_as_follower(old.read_bytes(0, 1 << 20))
    new = lm.replace_current_with_future("t", 0)
    return lm, old, new


def test_a_swapped_out_log_leads_to_the_moved_one(make_manager, log_dirs):
    lm, old, new = moved(make_manager, log_dirs)
    assert old.closed and not old.online
    assert old.current() is new and new.current() is new
    lm.delete_partition("t", 0)
    assert new.closed and old.current() is new  # deleted, not moved: nothing further to follow


def test_a_produce_queued_before_the_swap_lands_in_the_moved_log(make_manager, log_dirs):
    _lm, old, new = moved(make_manager, log_dirs)
    pd = PartitionProduceData(index=0, records=kp_batch([b"late"]))
    answer, end, count = _append_one(([], 0, "t", pd, old, 0, None, None, None), 0, 9)
    assert answer.error_code == 0 and answer.base_offset == 5 and (end, count) == (6, 1)
    assert [v for _o, v, _t in kp_records(new.read_bytes(0, 1 << 20))][-1] == b"late"


async def test_a_fetch_answer_queued_before_the_swap_keeps_the_partition_fetched(make_manager, log_dirs):
    _lm, old, new = moved(make_manager, log_dirs)
    manager = ReplicaManager(FakeNode(2, new, image()), ReplicationConfig(), clock=Clock())
    fetcher = Fetcher(manager, 1, 0)
    state = fetcher.partitions[("t", 0)] = FetchState("t", 0, 0, in_flight=True)
    part = PartitionData(partition_index=0, high_watermark=6, log_start_offset=0,
                         records=kp_batch([b"from-leader"]))
    item = (state, old, part)
    assert fetcher._apply_on_worker([item]) == [None]  # nothing applied to either log
    assert new.log_end_offset == 5
    loop_time = asyncio.get_running_loop().time()
    fetcher._applied(item, None, loop_time, 0.1)
    assert not state.dropped and not state.in_flight and fetcher.ready(loop_time + 1) == [state]
    # An append that failed on the old log anyway (the error path) does not drop it either: the moved log serves.
    state.in_flight = True
    fetcher._applied(item, RuntimeError("closed"), loop_time, 0.1)
    assert not state.dropped


def test_a_fetch_read_queued_before_the_swap_reads_the_moved_log(make_manager, log_dirs):
    _lm, old, new = moved(make_manager, log_dirs)
    new.append(kp_batch([b"after"]))
    p = FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    ((regions, _hw, _lso),) = _read_all([([], 0, p, old, None)], 1 << 20, None)
    data = b"".join(os.pread(r.fd, r.count, r.offset) for r in regions)
    _close_regions(regions)
    assert [v for _o, v, _t in kp_records(data)] == [b"r0", b"r1", b"r2", b"r3", b"r4", b"after"]


def _on(worker, fn) -> asyncio.Future:
    """`fn` run on a dir's worker, as a future of the loop."""
    future = asyncio.get_running_loop().create_future()
    worker.submit(fn, lambda ok, value: future.set_result(value) if ok else future.set_exception(value))
    return future


async def test_produce_requests_keep_their_order_across_a_swap(make_manager, log_dirs):
    """A Produce queued on the source dir's worker behind the swap lands in the moved log there; one that comes
    after the swap, while that one is still out, must not be appended before it by the destination dir's worker
    (a producer's pipelined requests on one connection). The destination dir's worker is given all the time it
    wants before the source dir's worker runs the first append: the second waits for the first all the same."""
    lm = make_manager(config=LogConfig(file_delete_delay_ms=60_000), stall_timeout_ms=60_000)
    old = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    old.append(kp_batch([b"r0"]))
    node = _Node(lm)
    source, dest = lm.worker(log_dirs[0]), lm.worker(log_dirs[2])
    hold_swap, hold_after = threading.Event(), threading.Event()
    moved: list = []

    def swap() -> None:
        hold_swap.wait()
        future = lm.create_future_log("t", 0, log_dirs[2])
        future.append_as_follower(old.read_bytes(0, 1 << 20))
        moved.append(lm.replace_current_with_future("t", 0))
        hold_after.wait()  # the swap's worker is still busy: what was queued behind it waits

    swapped = _on(source, swap)
    try:
        first = _produce(node, {"t": [0]}, value=b"first")  # queued on the source dir's worker, behind the swap
        hold_swap.set()
        while not moved and not swapped.done():
            await asyncio.sleep(0.005)
        assert lm.get("t", 0) is moved[0] and moved[0].log_dir == lm.dir_io(log_dirs[2]).path
        second = _produce(node, {"t": [0]}, value=b"second")
        await _on(dest, lambda: None)  # whatever the destination dir's worker was handed has run
        assert moved[0].log_end_offset == 1  # the second did not go before the first
        hold_after.set()
        await swapped
        (first_resp, second_resp) = (await first, await second)
        codes = [p.error_code for r in (first_resp, second_resp) for t in r.responses for p in t.partition_responses]
        assert codes == [0, 0]
        assert [v for _o, v, _t in kp_records(moved[0].read_bytes(0, 1 << 20))] == [b"r0", b"first", b"second"]
        assert old.appends_in_flight == 0 and moved[0].appends_in_flight == 0
    finally:
        hold_swap.set()
        hold_after.set()
    third = await _produce(node, {"t": [0]}, value=b"third")  # nothing out on the source: the moved log's own dir
    assert moved[0].moved_from is None and third.responses[0].partition_responses[0].base_offset == 3
