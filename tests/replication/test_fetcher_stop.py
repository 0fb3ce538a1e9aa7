"""A broker's shutdown must not hang on its replica fetchers (kjbod.broker.replication.fetcher): a fetcher
stopped just as the last answer's appends land, or while every partition it has is throttled, ends, and so does
any loop waiting with kjbod.net.tasks.wait_event.

Found in a CI run where a throttle test's cluster took minutes to go down: Python 3.11's
`asyncio.wait_for(event.wait(), timeout)` returns normally when its task is cancelled as the event is set, so
the fetcher's loop went on and the broker's stop waited for it until `kjbod cluster down` killed it.  No timing
is asserted: a stop that hangs is caught by a bound of a minute on what ends at once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.replication.fetcher import Fetcher, FetchState
from kjbod.net.tasks import wait_event
from tests.replication.test_replica_manager import Clock, FakeNode, image
from tests.replication.test_throttle import with_configs

HANG_S = 60.0  # what "never ends" means here; each stop below ends in a few loop iterations


async def ends(stopping: asyncio.Future, *tasks: asyncio.Task) -> bool:
    """Whether `stopping` and `tasks` all end within HANG_S; a task that does not is cancelled until it does, so a
    failing test leaves nothing running."""
    done, _ = await asyncio.wait({stopping}, timeout=HANG_S)
    ended = stopping in done and all(t.done() for t in tasks)
    for task in tasks:
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1)
    return ended


async def test_a_loop_waiting_on_an_event_stops_when_cancelled_as_the_event_is_set():
    event = asyncio.Event()

    async def loop() -> None:
        while True:
            await wait_event(event, 0.5)
            event.clear()

    task = asyncio.create_task(loop())
    for _ in range(2):
        await asyncio.sleep(0)  # the task waits on the event
    event.set()
    task.cancel()  # before the task has woken up
    assert await ends(asyncio.ensure_future(asyncio.wait({task})), task)
    assert task.cancelled()


async def test_wait_event_says_whether_the_event_is_set():
    event = asyncio.Event()
    assert await wait_event(event, 0) is False
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0) is True and await wait_event(event, None) is True


def follower(make_log, img=None) -> tuple[ReplicaManager, Fetcher, FetchState]:
    """Broker 2 following broker 1 for t-0, its fetcher not started."""
    manager = ReplicaManager(FakeNode(2, make_log("t-0"), img or image()), ReplicationConfig(), clock=Clock())
    manager.throttles.update(manager.node.metadata)
    fetcher = Fetcher(manager, 1, 0)
    state = fetcher.partitions[("t", 0)] = FetchState("t", 0, 0)
    return manager, fetcher, state


async def test_a_fetcher_stopped_as_its_last_answer_lands_ends(make_log):
    manager, fetcher, state = follower(make_log)
    state.in_flight = True  # its last answer is on the dir's worker: the next fetch waits for it
    fetcher.start()
    task = fetcher._task
    assert task is not None
    for _ in range(3):
        await asyncio.sleep(0)
    state.in_flight = False  # the worker is done (Fetcher._applied) ...
    fetcher._wakeup.set()
    stopping = asyncio.ensure_future(fetcher.close())  # ... as the broker stops
    assert await ends(stopping, task)
    await manager.close()


async def test_a_fetcher_stopped_while_its_partitions_are_throttled_ends(make_log):
    """Broker 2's follower quota is exceeded and t-0 is behind its leader: the partition is left out of every
    fetch (nothing is sent; the fetcher backs off) until the fetcher is stopped."""
    img = with_configs(image(), {"2": {"follower.replication.throttled.rate": "1000"}},
                       follower_replication_throttled_replicas="0:2")
    manager, fetcher, state = follower(make_log, img)
    manager.follower_appended("t", 0, 1_000_000)  # 1 MB against 1 kB/s
    state.leader_end_offset = 10  # behind the leader's HW: not in sync
    held = asyncio.Event()
    build = fetcher._request

    def request(ready, version):
        made = build(ready, version)
        if made is None:
            held.set()
        return made

    async def refused(*_args, **_kwargs):
        raise AssertionError("a throttled partition was fetched")

    async def connection():
        return SimpleNamespace(pick_version=lambda _key, _lowest: 12, request=refused, closed=False)

    fetcher._request = request  # type: ignore[method-assign]
    fetcher._connection = connection  # type: ignore[method-assign]
    fetcher.start()
    task = fetcher._task
    assert task is not None
    assert await wait_event(held, HANG_S), "the fetcher never built a request"
    assert await ends(asyncio.ensure_future(fetcher.close()), task)
    await manager.close()

