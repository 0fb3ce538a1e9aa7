"""BrokerNode's wake-ups of long polls at each append: the events a consumer's or a follower's long poll waits on
(made only when one asks, set at the next append), and the parked follower fetches' callbacks, each run on its
own so one that raises loses none after it."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from kjbod.broker.remote import RemoteBrokerNode
from kjbod.server.config import build_config

BROKER = {"node.id": "4", "process.roles": "broker", "controller.listener.names": "CONTROLLER",
          "listeners": "PLAINTEXT://127.0.0.1:9092", "log.dirs": "/d",
          "controller.quorum.bootstrap.servers": "10.0.0.3:9095"}


@pytest.fixture
def node() -> RemoteBrokerNode:
    return RemoteBrokerNode(build_config(BROKER))


async def test_a_long_polls_event_is_set_at_the_next_append_and_the_next_poll_gets_a_new_one(node):
    consumer, follower = node.append_event(), node.log_end_event()
    assert node.append_event() is consumer and node.log_end_event() is follower  # one per append, shared
    assert not consumer.is_set() and not follower.is_set()
    node.notify_append()
    assert consumer.is_set() and follower.is_set()
    after = node.append_event()
    assert after is not consumer and not after.is_set()  # waits for the append after that one
    node.notify_append()
    node.notify_append()  # nobody waiting: nothing to set
    assert after.is_set()


async def test_a_high_watermark_move_wakes_consumers_only(node):
    consumer, follower = node.append_event(), node.log_end_event()
    node.notify_high_watermark()
    assert consumer.is_set() and not follower.is_set()
    node.notify_append()
    assert follower.is_set()


async def test_a_parked_fetch_whose_callback_raises_loses_none_of_the_others(node):
    ran: list[str] = []

    def broken() -> None:
        ran.append("broken")
        raise RuntimeError("a parked fetch's bug")

    node.at_log_end(lambda: ran.append("first"))
    node.at_log_end(broken)
    node.at_log_end(lambda: ran.append("last"))
    consumer = node.append_event()
    with capture_logs() as logs:
        node.notify_append()
    assert ran == ["first", "broken", "last"]
    assert consumer.is_set()
    assert [e["event"] for e in logs] == ["parked_fetch_callback_failed"]
    node.notify_append()  # each callback was for that append only
    assert ran == ["first", "broken", "last"]
