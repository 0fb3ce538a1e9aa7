"""BrokerNode's wake-ups of long polls (kjbod.broker.parked_fetches): a fetch parked under its partitions is woken
by an append to one of them (a consumer's also by a high watermark move of one), never by another partition's;
one parked under several partitions runs once and leaves the others; a callback that raises loses none after it;
a shutdown wakes every one."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from kjbod.broker.remote import RemoteBrokerNode
from kjbod.server.config import build_config

BROKER = {"node.id": "4", "process.roles": "broker", "controller.listener.names": "CONTROLLER",
          "listeners": "PLAINTEXT://127.0.0.1:9092", "log.dirs": "/d",
          "controller.quorum.bootstrap.servers": "10.0.0.3:9095"}
A, B, C = ("t", 0), ("t", 1), ("u", 0)


@pytest.fixture
def node() -> RemoteBrokerNode:
    return RemoteBrokerNode(build_config(BROKER))


def parked(node, keys, *, follower: bool) -> list[str]:
    """Parks a one-shot callback under `keys` that takes itself out of the others, as a fetch does; the list of
    its runs."""
    ran: list[str] = []

    def woken() -> None:
        node.parked_fetches.unpark(keys, woken, follower=follower)
        ran.append("woken")

    node.parked_fetches.park(keys, woken, follower=follower)
    return ran


async def test_an_append_wakes_the_fetches_parked_on_its_partition_only(node):
    follower_a, consumer_a, follower_b = (parked(node, [A], follower=True), parked(node, [A], follower=False),
                                          parked(node, [B], follower=True))
    node.notify_append(*C)
    assert follower_a == consumer_a == follower_b == []
    node.notify_append(*A)
    assert follower_a == consumer_a == ["woken"] and follower_b == []
    node.notify_append(*A)  # each was parked for that append only
    assert follower_a == consumer_a == ["woken"]
    assert node.parked_fetches.count() == 1 and node.parked_fetches.count(B) == 1


async def test_a_high_watermark_move_wakes_the_consumers_of_its_partition_only(node):
    follower, consumer, other = (parked(node, [A], follower=True), parked(node, [A], follower=False),
                                 parked(node, [B], follower=False))
    node.notify_high_watermark(*A)
    assert consumer == ["woken"] and follower == [] and other == []
    node.notify_append(*A)
    assert follower == ["woken"] and other == []


async def test_a_fetch_parked_on_several_partitions_runs_once_and_leaves_the_others(node):
    ran = parked(node, [A, B, C], follower=False)
    assert all(node.parked_fetches.count(k) == 1 for k in (A, B, C)) and node.parked_fetches.count() == 1
    node.notify_append(*B)
    assert ran == ["woken"] and node.parked_fetches.count() == 0
    node.notify_append(*A)
    node.notify_high_watermark(*C)
    assert ran == ["woken"]


async def test_a_parked_fetch_whose_callback_raises_loses_none_of_the_others(node):
    ran: list[str] = []

    def broken() -> None:
        ran.append("broken")
        raise RuntimeError("a parked fetch's bug")

    node.parked_fetches.park([A], lambda: ran.append("first"), follower=True)
    node.parked_fetches.park([A], broken, follower=True)
    node.parked_fetches.park([A], lambda: ran.append("last"), follower=True)
    consumer = parked(node, [A], follower=False)
    with capture_logs() as logs:
        node.notify_append(*A)
    assert ran == ["first", "broken", "last"]
    assert consumer == ["woken"]
    assert [e["event"] for e in logs] == ["parked_fetch_callback_failed"]
    node.notify_append(*A)  # each callback was for that append only
    assert ran == ["first", "broken", "last"]


async def test_a_shutdown_wakes_every_parked_fetch(node):
    runs = [parked(node, [A], follower=True), parked(node, [B, C], follower=False), parked(node, [C], follower=True)]
    node.begin_shutdown()
    assert runs == [["woken"]] * 3 and node.parked_fetches.count() == 0
