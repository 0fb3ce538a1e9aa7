"""Kafka's controller.quorum.* timing keys: parsed with Kafka's defaults, refused when a quorum cannot run on them
(one line naming the key), and each one changing what a voter does (the state machine built from the parsed
config, as `kjbod serve` builds it: kjbod.server.roles.raft_config)."""

from __future__ import annotations

import random

import pytest

from kjbod.protocol.errors import ErrorCode
from kjbod.raft.log_view import EpochHistory
from kjbod.raft.quorum import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    RaftQuorum,
    Send,
    State,
    VoteRequest,
    VoteResponse,
)
from kjbod.server.config import ConfigError, build_config
from kjbod.server.roles import raft_config

BASE = {"node.id": "1", "process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER", "log.dirs": "/data/meta"}
KEYS = ("controller.quorum.election.timeout.ms", "controller.quorum.election.backoff.max.ms",
        "controller.quorum.fetch.timeout.ms", "controller.quorum.request.timeout.ms",
        "controller.quorum.retry.backoff.ms")


def voter(local: int = 1, **keys: str) -> RaftQuorum:
    props = dict(BASE, **{k.replace("_", "."): v for k, v in keys.items()})
    return RaftQuorum(local, (1, 2, 3), EpochHistory(), stored=None, now_ms=0,
                      config=raft_config(build_config(props)), rng=random.Random(7))


def sent(q: RaftQuorum) -> list[Send]:
    return [e for e in q.take_effects() if isinstance(e, Send)]


def test_kafkas_defaults() -> None:
    c = raft_config(build_config(BASE))
    assert (c.election_timeout_ms, c.election_backoff_max_ms, c.fetch_timeout_ms, c.request_timeout_ms,
            c.retry_backoff_ms) == (1000, 1000, 2000, 2000, 20)


@pytest.mark.parametrize("key", KEYS)
def test_a_value_the_quorum_cannot_run_on_is_refused_naming_the_key(key: str) -> None:
    for bad in ("-1", "soon", "99999999999"):
        with pytest.raises(ConfigError) as info:
            build_config(dict(BASE, **{key: bad}))
        assert key in str(info.value) and "\n" not in str(info.value)


def test_election_timeout_ms_sets_when_an_unattached_voter_stands() -> None:
    q = voter(controller_quorum_election_timeout_ms="5000")
    q.take_effects()
    q.poll(4999)
    assert q.state is State.UNATTACHED and not sent(q)  # never before t
    q.poll(10_000)
    assert q.state is State.PROSPECTIVE and {s.destination for s in sent(q)} == {2, 3}  # by 2t, a pre-vote
    fast = voter(controller_quorum_election_timeout_ms="10")
    fast.poll(20)
    assert fast.state is State.PROSPECTIVE


def test_fetch_timeout_ms_sets_when_a_follower_that_cannot_fetch_stands() -> None:
    q = voter(local=2, controller_quorum_fetch_timeout_ms="3000")
    q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(1, 1), 0)
    q.poll(2999)
    assert q.state is State.FOLLOWER
    q.poll(3000)
    assert q.state is State.PROSPECTIVE and q.epoch == 1  # asks a pre-vote in its epoch


def successor_waits(cap: str) -> list[int]:
    """How long each voter of five waits before asking its pre-vote after the leader (1) resigned naming the
    others as successors, in order 2, 3, 4, 5 (Kafka 4 uses the key only for this: its candidate has no backoff)."""
    waits = []
    for local in (2, 3, 4, 5):
        props = dict(BASE, **{"node.id": str(local), "controller.quorum.election.backoff.max.ms": cap})
        q = RaftQuorum(local, (1, 2, 3, 4, 5), EpochHistory(), stored=None, now_ms=0,
                       config=raft_config(build_config(props)), rng=random.Random(7))
        q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(1, 1), 0)
        q.handle_end_quorum_epoch(EndQuorumEpochRequest(1, 1, (2, 3, 4, 5)), 0)
        wait = q.poll(0)
        waits.append(0 if q.state is State.PROSPECTIVE else wait)
    return waits


def test_election_backoff_max_ms_caps_the_wait_before_standing_again() -> None:
    assert successor_waits("800") == [0, 100, 200, 400]  # strictly growing, the last below the maximum
    assert successor_waits("80") == [0, 10, 20, 40]
    assert successor_waits("0") == [0, 0, 0, 0]


def test_request_timeout_ms_sets_when_an_unanswered_request_is_sent_again() -> None:
    q = voter(controller_quorum_election_timeout_ms="60000", controller_quorum_request_timeout_ms="300",
              controller_quorum_retry_backoff_ms="0")
    q.poll(120_000)
    first = {s.destination for s in sent(q)}
    assert first == {2, 3}
    q.poll(120_299)
    assert not sent(q)  # still waiting for the answers
    q.poll(120_300)
    assert {s.destination for s in sent(q)} == {2, 3}  # given up on and sent again


def test_retry_backoff_ms_sets_the_wait_after_a_failed_request() -> None:
    q = voter(controller_quorum_election_timeout_ms="60000", controller_quorum_retry_backoff_ms="500")
    q.poll(120_000)
    votes = {s.destination: s.correlation_id for s in sent(q)}
    q.request_failed(2, votes[2], 120_000)
    q.handle_vote_response(3, votes[3], VoteResponse(ErrorCode.BROKER_NOT_AVAILABLE, -1, q.epoch, False), 120_000)
    q.poll(120_499)
    assert not sent(q)
    q.poll(120_500)
    again = sent(q)
    assert {s.destination for s in again} == {2, 3} and all(isinstance(s.request, VoteRequest) for s in again)
