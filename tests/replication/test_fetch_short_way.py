"""A follower's short way (kjbod.broker.replication.fetcher._Lane), in process with a real dir worker: a fetcher
with one partition in steady state takes its leader's plain answers to the dir's worker as one job each and
writes the next fetch from the template's bytes. The same script of answers is played with the short way and
with it switched off (the general way: the response decoded, DirWork, the request built); the logs, the fetcher's
state and every request the leader got must come out the same, and each answer that is not plain, or a state
the lane did not see, must go the general way."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

import pytest

from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.replication.fetcher import Fetcher
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchRequest, FetchResponse
from kjbod.protocol.generated.fetch_response import EpochEndOffset, FetchableTopicResponse
from kjbod.protocol.generated.fetch_response import PartitionData as FetchPart
from kjbod.storage.errors import StorageError
from kjbod.storage.records import build_batch
from kjbod.storage.workers import DirWorker
from tests.replication.test_fetch_callbacks import VERSION, ScriptedLeader
from tests.replication.test_replica_manager import TOPIC_ID, Clock, FakeNode, image

LONG_S = 60.0


class Leader(ScriptedLeader):
    """The scripted leader, also taking fetches written as bytes (the short way's)."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies = 0  # fetches that came as bytes

    def send_body(self, api_key: int, version: int, body: bytes, token: Any) -> None:
        assert version == VERSION
        self.bodies += 1
        self.sent.append((FetchRequest.decode(body, VERSION), token))
        self.asked.set()


def answer(records: bytes | None = None, *, hw: int, log_start: int = 0, error: int = 0,
           diverging: tuple[int, int] | None = None) -> FetchResponse:
    part = FetchPart(partition_index=0, error_code=error, high_watermark=hw, last_stable_offset=hw,
                     log_start_offset=log_start, aborted_transactions=None, records=records)  # as a leader does
    if diverging is not None:
        part.diverging_epoch = EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
    return FetchResponse(responses=[FetchableTopicResponse(topic_id=TOPIC_ID, partitions=[part])])


def stamped(n: int, offset: int, epoch: int = 0) -> bytes:
    """A batch of the leader's at `offset`, the same bytes in every run (a fixed time)."""
    return build_batch([(None, b"v%d" % (offset + i), (), 1_700_000_000_000) for i in range(n)],
                       base_offset=offset, partition_leader_epoch=epoch)


Step = Callable[[Any, Any], FetchResponse]  # (the request's partition, the fetcher) -> the leader's answer


async def play(make_log, steps: list[Step], *, short: bool, monkeypatch: pytest.MonkeyPatch,
               before: Callable[[int, Any], None] = lambda i, fetcher: None) -> dict[str, Any]:
    """Each step answers the next fetch; what the follower ends with, and what the leader was asked."""
    plog = make_log("t-0")
    worker = DirWorker(plog.io)
    node = FakeNode(2, plog, image())
    node.logs.manager.worker = lambda path: worker if path == plog.log_dir else None
    manager = ReplicaManager(node, ReplicationConfig(fetch_backoff_ms=1), clock=Clock())
    fetcher = Fetcher(manager, 1, 0)
    took = {"short": 0}
    quick = Fetcher._quick_answer

    def counted(self: Fetcher, lane: Any, version: int, frame: bytes) -> bool:
        taken = quick(self, lane, version, frame)
        took["short"] += taken
        return taken

    monkeypatch.setattr(Fetcher, "_quick_answer", counted)
    if not short:
        monkeypatch.setattr(Fetcher, "_new_lane", lambda self, conn, version, ready: None)
    leader = Leader()
    fetcher._conn = leader  # type: ignore[assignment]
    fetcher.add(("t", 0), 0)
    fetcher.start()
    asked: list[FetchRequest] = []
    try:
        for i, step in enumerate(steps):
            request, token = await leader.next_request()
            asked.append(request)
            before(i, fetcher)  # fetch i is out: a change here shows from fetch i + 1 on
            (part,) = request.topics[0].partitions
            response = step(part, fetcher)
            frame = struct.pack(">i", 0) + b"\x00" + response.encode(VERSION)
            if isinstance(token, asyncio.Future):
                token.set_result(frame[5:])  # the task's fetch: its request() decodes the body itself
            else:
                token.set_result(frame)
        request, _token = await leader.next_request()
        asked.append(request)
        state = fetcher.partitions[("t", 0)]
        return {"log": plog.read_bytes(plog.log_start_offset, 1 << 20), "leo": plog.log_end_offset, "hw": plog.high_watermark,
                "log_start": plog.log_start_offset, "leader_end": state.leader_end_offset,
                "dropped": state.dropped, "appends": node.appends, "hw_moves": node.hw_moves, "asked": asked,
                "short": took["short"], "bodies": leader.bodies}
    finally:
        await fetcher.close()
        worker.stop()
        worker.join(LONG_S)


async def both(make_log, monkeypatch, steps: list[Step], **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    general = await play(make_log, steps, short=False, monkeypatch=monkeypatch, **kw)
    monkeypatch.undo()
    fast = await play(make_log, steps, short=True, monkeypatch=monkeypatch, **kw)
    assert general["short"] == general["bodies"] == 0
    for key in ("log", "leo", "hw", "log_start", "leader_end", "dropped", "appends", "hw_moves", "asked"):
        assert fast[key] == general[key], key
    return general, fast


def records(n: int, *, hw_lag: int = 0, log_start: int = 0) -> Step:
    def step(part: Any, fetcher: Any) -> FetchResponse:
        offset = part.fetch_offset
        return answer(stamped(n, offset), hw=offset + n - hw_lag, log_start=log_start)
    return step


def nothing(*, hw: int | None = None) -> Step:
    return lambda part, fetcher: answer(hw=part.fetch_offset if hw is None else hw)


async def test_steady_state_answers_go_the_short_way_with_the_general_ways_outcome(make_log, monkeypatch):
    steps = [records(2), records(1, hw_lag=1), nothing(), records(3, log_start=1), records(1, hw_lag=1),
             nothing(), records(2, log_start=3)]
    general, fast = await both(make_log, monkeypatch, steps)
    assert fast["leo"] == 9 and fast["hw"] == 9 and fast["log_start"] == 3
    assert fast["appends"] == 5 and fast["hw_moves"] >= 1
    # The task's first fetch and the callbacks' first (which makes the lane) are written the general way, the
    # answer to the task's is read the general way; every other is the short way's.
    assert fast["short"] == len(steps) - 1 and fast["bodies"] == len(steps) - 1


@pytest.mark.parametrize("error", [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH])
async def test_a_partitions_error_goes_the_general_way_and_the_lane_comes_back(make_log, monkeypatch, error):
    steps = [records(2), records(1), lambda part, fetcher: answer(hw=-1, error=error), records(2), records(1),
             records(1)]
    _general, fast = await both(make_log, monkeypatch, steps)
    assert fast["leo"] == 7
    assert 0 < fast["short"] < len(steps) - 2  # the error's answer, and the first after its back-off, did not


async def test_a_divergence_is_truncated_the_general_way(make_log, monkeypatch):
    def diverging(part: Any, fetcher: Any) -> FetchResponse:
        return answer(hw=2, diverging=(0, 2))

    steps = [records(2), records(2), records(1), diverging, records(3), records(1)]
    _general, fast = await both(make_log, monkeypatch, steps)
    assert fast["leo"] == 6 and fast["short"] >= 2


async def test_a_failed_append_is_the_general_ways_failure(make_log, monkeypatch):
    def failing(part: Any, fetcher: Any) -> FetchResponse:
        plog = fetcher.partitions[("t", 0)].log

        def refuse(*_a: Any, **_kw: Any) -> None:
            plog.append_as_follower = type(plog).append_as_follower.__get__(plog)  # this once
            raise StorageError("no space left for the test")

        plog.append_as_follower = refuse
        return answer(stamped(1, part.fetch_offset), hw=part.fetch_offset + 1)

    steps = [records(1), records(1), records(1), failing, records(2)]
    _general, fast = await both(make_log, monkeypatch, steps)
    assert fast["leo"] == 5 and not fast["dropped"]


async def test_a_new_broker_epoch_or_a_throttle_sends_the_next_fetch_the_general_way(make_log, monkeypatch):
    """The fetch after a re-registration carries the new broker epoch (written the general way); one that the
    throttle holds (asked by the short way, then by the general way) goes back to the task, which sends it once
    the quota allows (here, the next time it asks)."""
    asks: list[int] = []

    def before(i: int, fetcher: Any) -> None:
        if i == 0:  # each run's own
            asks.clear()
        if i == 4:
            fetcher.node.broker_epoch += 1000
        if i == 6:
            fetcher.manager.follower_throttled = lambda *a: not asks.append(i) and len(asks) <= 2

    steps = [records(1)] * 9
    _general, fast = await both(make_log, monkeypatch, steps, before=before)
    epochs = [r.replica_state.replica_epoch for r in fast["asked"]]
    assert epochs[:5] == [102] * 5 and epochs[5:] == [1102] * 5
    assert len(asks) >= 3  # the short way asked the throttle, then the general way, then the task
    # Answers 0 and 7 (the throttled one) are the task's; fetches 0 and 7, 1, 5 (the new epoch) and 8 (after
    # the task) are written the general way.
    assert (fast["short"], fast["bodies"]) == (7, 5)


async def test_a_second_partition_sends_the_fetches_the_general_way_until_it_goes(make_log, monkeypatch):
    """While the fetcher has two partitions (here one its broker holds no log for: dropped by the general way's
    next request), no answer or fetch takes the short way; once it is removed, a new lane is made."""
    from kjbod.broker.replication.fetcher import FetchState

    def before(i: int, fetcher: Any) -> None:
        if i == 2:
            fetcher.partitions[("t", 1)] = FetchState("t", 1, 0)
        if i == 5:
            del fetcher.partitions[("t", 1)]  # as FetcherManager.remove does

    steps = [records(1)] * 8
    _general, fast = await both(make_log, monkeypatch, steps, before=before)
    assert fast["leo"] == 8
    # Answer 1 goes the short way, answer 2 (its fetch out before the partition came) the general way; fetches
    # 3-6 are written the general way, 6 making the lane again once the partition is gone: answers 6 and 7 and
    # fetches 7 and 8 go the short way again (with fetch 2: three written from the template).
    assert (fast["short"], fast["bodies"]) == (3, 3)
