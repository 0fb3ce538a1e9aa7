"""A follower's fetches in steady state, in process (kjbod.broker.replication.fetcher): after the task's first
fetch, each next one is sent by the callback that applied the last answer and its response is taken in the
connection's read callback, with the task parked until something needs it (a failure, a refused fetch, nothing
to ask for).  The leader is a scripted connection: each request is checked field by field and answered with the
bytes a leader would send; the follower's log must end up holding exactly the leader's batches."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.replication.fetcher import FETCH, Fetcher
from kjbod.net.errors import BrokerConnectionError
from kjbod.protocol.generated import FetchRequest, FetchResponse
from kjbod.protocol.generated.fetch_response import FetchableTopicResponse
from kjbod.protocol.generated.fetch_response import PartitionData as FetchPart
from tests.replication.conftest import batch
from tests.replication.test_replica_manager import TOPIC_ID, Clock, FakeNode, image

VERSION = 17
LONG_S = 60.0


class ScriptedLeader:
    """What the fetcher's connection does, minus the socket: requests are kept (decoded from the bytes the
    fetcher's message encodes to), answers are given by the test as frames, as the connection's read callback
    gives them."""

    host, port = "127.0.0.1", 1
    write_paused = False

    def __init__(self) -> None:
        self.sent: list[tuple[FetchRequest, Any]] = []  # (request, its token: a future for the task's fetch)
        self.closed = False
        self.asked = asyncio.Event()
        self.picked = 0

    def pick_version(self, api_key: int, *_bounds: int) -> int:
        assert api_key == FETCH
        self.picked += 1
        return VERSION

    def _keep(self, message: Any, token: Any) -> None:
        out: list = []
        message.encode_into(out, VERSION)
        self.sent.append((FetchRequest.decode(b"".join(out), VERSION), token))
        self.asked.set()

    def send_to(self, api_key: int, version: int, message: Any, token: Any, client_id: str | None = None) -> None:
        assert (api_key, version) == (FETCH, VERSION)
        self._keep(message, token)

    async def request(self, api_key: int, version: int, message: Any, timeout: float) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._keep(message, future)
        return FetchResponse.decode(await future, VERSION)

    def close(self, reason: Any = None) -> None:
        self.closed = True
        for _request, token in self.sent:
            if not token.done():
                token.set_exception(reason or BrokerConnectionError(self.host, self.port, "closed"))

    async def next_request(self) -> tuple[FetchRequest, Any]:
        while True:
            self.asked.clear()
            for request, token in self.sent:
                if not token.done():
                    return request, token
            await asyncio.wait_for(self.asked.wait(), LONG_S)

    def answer(self, token: Any, records: bytes, hw: int) -> None:
        body = FetchResponse(error_code=0, session_id=0, responses=[FetchableTopicResponse(
            topic_id=TOPIC_ID, partitions=[FetchPart(partition_index=0, error_code=0, high_watermark=hw,
                                                     last_stable_offset=hw, log_start_offset=0, records=records)])])
        frame = struct.pack(">i", 0) + b"\x00" + body.encode(VERSION)  # correlation id, no header tags
        if isinstance(token, asyncio.Future):
            token.set_result(frame[5:])  # the task's request() decodes the body itself here
        else:
            token.set_result(frame)


async def test_steady_state_fetches_go_out_from_the_callbacks_with_the_log_end_as_the_offset(make_log):
    plog = make_log("t-0")
    node = FakeNode(2, plog, image())
    manager = ReplicaManager(node, ReplicationConfig(), clock=Clock())
    fetcher = Fetcher(manager, 1, 0)
    leader = ScriptedLeader()
    fetcher._conn = leader  # type: ignore[assignment]
    fetcher.add(("t", 0), 0)
    fetcher.start()
    task = fetcher._task
    assert task is not None
    try:
        leader_log = [batch(1 + i % 3, epoch=0, base_offset=0) for i in range(5)]
        sent: list[bytes] = []
        offset = 0
        for i, records in enumerate(leader_log):
            request, token = await leader.next_request()
            (topic,) = request.topics
            (part,) = topic.partitions
            assert topic.topic_id == TOPIC_ID and request.replica_state.replica_id == 2
            assert request.replica_state.replica_epoch == node.broker_epoch
            assert (part.fetch_offset, part.current_leader_epoch) == (offset, 0) == (plog.log_end_offset, 0)
            assert isinstance(token, asyncio.Future) == (i == 0)  # only the first goes through the task
            stamped = bytearray(records)
            stamped[0:8] = struct.pack(">q", offset)  # the leader's offsets
            count = struct.unpack_from(">i", stamped, 57)[0]
            offset += count
            sent.append(bytes(stamped))
            leader.answer(token, sent[-1], hw=offset)
            if i > 0:  # applied, and the next fetch sent, in the read callback itself
                assert plog.log_end_offset == offset and fetcher._outstanding is not None
                assert fetcher._handoff is not None and not fetcher._handoff.done()
        request, _token = await leader.next_request()
        assert request.topics[0].partitions[0].fetch_offset == offset
        assert plog.read_bytes(0, 1 << 20) == b"".join(sent)  # the leader's batches, as they arrived
        assert plog.log_end_offset == offset and plog.high_watermark == offset
        assert not task.done()
        assert leader.picked == 1  # the version is the connection's, picked once
    finally:
        await fetcher.close()


async def test_a_fetch_asks_from_the_log_that_replaced_a_closed_one(make_log):
    """The fetcher keeps each partition's log between fetches; one closed under it (a delete, a KIP-113 swap: the
    moved replica is another log) is looked up again, and the next fetch asks from that log's end."""
    plog, moved = make_log("t-0"), make_log("t-0")
    node = FakeNode(2, plog, image())
    manager = ReplicaManager(node, ReplicationConfig(), clock=Clock())
    fetcher = Fetcher(manager, 1, 0)
    fetcher.add(("t", 0), 0)
    (state,) = fetcher.partitions.values()
    assert fetcher._request([state], VERSION).entries[0][4] == 0 and state.log is plog
    moved.append(batch(3, epoch=0), leader_epoch=0)
    node.logs.manager.find = lambda t, p: moved if (t, p) == ("t", 0) else None
    assert fetcher._request([state], VERSION).entries[0][4] == 0  # the kept log is still open: asked as before
    plog.close_quietly()
    assert fetcher._request([state], VERSION).entries[0][4] == 3 and state.log is moved


async def test_a_failed_fetch_gives_the_task_back_which_drops_the_connection(make_log):
    plog = make_log("t-0")
    node = FakeNode(2, plog, image())
    manager = ReplicaManager(node, ReplicationConfig(fetch_backoff_ms=10), clock=Clock())
    fetcher = Fetcher(manager, 1, 0)
    leader = ScriptedLeader()
    fetcher._conn = leader  # type: ignore[assignment]
    fetcher.add(("t", 0), 0)
    fetcher.start()
    try:
        _request, token = await leader.next_request()
        leader.answer(token, b"", hw=0)  # the task's fetch: nothing yet
        _request, token = await leader.next_request()  # sent by the callbacks
        assert not isinstance(token, asyncio.Future)
        leader.close()  # the leader went away: its read callback fails the fetch
        assert fetcher._handoff is None or fetcher._handoff.done()
        for _ in range(100):
            if fetcher._conn is None:
                break
            await asyncio.sleep(0)
        assert fetcher._conn is None  # dropped by the task's back-off; the next fetch opens a new one
    finally:
        await fetcher.close()


async def test_an_answer_applied_late_sends_the_next_fetch_and_the_stall_bound_goes_with_it(make_log):
    """The bound on an answer still on its worker (IN_FLIGHT_WAIT_S) is dropped once it is applied: it must never
    hand the fetching back to the task while the callbacks' next fetch is out (the task would then send a second
    fetch for the same offsets, whose answer fails to append and backs the partition off)."""
    plog = make_log("t-0")
    manager = ReplicaManager(FakeNode(2, plog, image()), ReplicationConfig(), clock=Clock())
    fetcher = Fetcher(manager, 1, 0)
    leader = ScriptedLeader()
    fetcher._conn = leader  # type: ignore[assignment]
    fetcher.add(("t", 0), 0)
    state = fetcher.partitions[("t", 0)]
    fetcher._handoff = asyncio.get_running_loop().create_future()  # what _stream sets while the callbacks fetch
    state.in_flight = True  # the last answer is on its dir's worker
    fetcher._try_send()
    assert leader.sent == [] and fetcher._stall_timer is not None
    state.in_flight = False  # applied (Fetcher._applied): the next fetch goes out at once
    fetcher._wake()
    assert len(leader.sent) == 1 and fetcher._outstanding is not None
    assert fetcher._stall_timer is None and not fetcher._handoff.done()
    fetcher._stalled()  # even a bound that fired meanwhile gives nothing back with a fetch out
    assert not fetcher._handoff.done()
    fetcher._handoff.cancel()
    leader.close()


async def test_a_callbacks_fetch_times_out_at_its_own_deadline_not_at_an_answered_ones(make_log):
    """The fetcher's one timeout timer (Fetcher._arm_timeout): set for the deadline of a fetch that was then
    answered in time, it must find the next fetch out and wait for that one's deadline; a fetch never answered
    is timed out (the connection closed, the task backing off) no earlier than its own deadline."""
    plog = make_log("t-0")
    manager = ReplicaManager(FakeNode(2, plog, image()),
                             ReplicationConfig(socket_timeout_ms=250, fetch_wait_max_ms=50, fetch_backoff_ms=10),
                             clock=Clock())
    fetcher = Fetcher(manager, 1, 0)
    leader = ScriptedLeader()
    closed_at: list[float] = []
    close = leader.close
    loop = asyncio.get_running_loop()

    def closing(reason: Any = None) -> None:
        closed_at.append(loop.time())
        close(reason)

    leader.close = closing  # type: ignore[method-assign]
    fetcher._conn = leader  # type: ignore[assignment]
    fetcher.add(("t", 0), 0)
    fetcher.start()
    try:
        _request, token = await leader.next_request()
        leader.answer(token, b"", hw=0)  # the task's fetch: nothing yet; the callbacks fetch from here
        _request, second = await leader.next_request()
        assert not isinstance(second, asyncio.Future)
        assert fetcher._timeout_at == second.deadline
        leader.answer(second, b"", hw=0)  # in time: the third fetch goes out from the read callback
        _request, third = await leader.next_request()
        assert not isinstance(third, asyncio.Future) and third.deadline >= second.deadline
        timer = fetcher._timeout_timer
        assert timer is not None and fetcher._timeout_at == second.deadline  # still the answered one's
        timer.cancel()
        fetcher._timeout_check()  # as it runs at that deadline (here at once: before the third's for sure)
        if not closed_at:  # (a machine that stalled 0.3 s right here has timed the third out: also right)
            assert fetcher._timeout_timer is not None and fetcher._timeout_at == third.deadline
        while not closed_at:  # the third is never answered
            await asyncio.sleep(0.01)
        assert closed_at[0] >= third.deadline - 0.002  # its own deadline (the loop's clock counts in ms)
        assert third.done()
        for _ in range(100):
            if fetcher._conn is None:
                break
            await asyncio.sleep(0.01)
        assert fetcher._conn is None  # the task backed off and dropped the connection
    finally:
        await fetcher.close()
    assert fetcher._timeout_timer is None
