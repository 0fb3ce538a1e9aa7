"""KIP-996 pre-vote in the quorum state machine, in process: who grants a pre-vote and who refuses it, what a
prospective voter does with the answers, Kafka's rule for voters that do not serve Vote v2, and whole runs of three
voters (tests/raft/sim.py) where a voter cut off from a live leader comes back without disturbing it."""

from __future__ import annotations

import random

import pytest

from kjbod.protocol.errors import ErrorCode
from kjbod.raft.log_view import EpochHistory
from kjbod.raft.quorum import (
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchResult,
    LeaderChanged,
    Persist,
    RaftConfig,
    RaftQuorum,
    Send,
    State,
    VoteRequest,
    VoteResponse,
)
from kjbod.storage.quorum_state import ElectionState
from tests.raft.sim import Sim

VOTERS = (1, 2, 3)
CONFIG = RaftConfig()


def quorum(local: int = 1, log: EpochHistory | None = None, stored: ElectionState | None = None,
           voters: tuple[int, ...] = VOTERS) -> RaftQuorum:
    return RaftQuorum(local, voters, log if log is not None else EpochHistory(), stored=stored, now_ms=0,
                      config=CONFIG, rng=random.Random(0))


def sends(q: RaftQuorum) -> list[Send]:
    return [e for e in q.take_effects() if isinstance(e, Send)]


def pre_vote(epoch: int, candidate: int, last_epoch: int, last_offset: int) -> VoteRequest:
    return VoteRequest(epoch, candidate, last_epoch, last_offset, pre_vote=True)


def follower_of(leader: int, epoch: int, local: int = 1, fetched: bool = True,
                log: EpochHistory | None = None) -> RaftQuorum:
    """A voter following `leader` in `epoch`; `fetched`: it has had one successful Fetch answer."""
    q = quorum(local, log=log, stored=ElectionState(epoch - 1, voters=VOTERS))
    q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(epoch, leader), 0)
    assert q.state is State.FOLLOWER
    if fetched:
        q.poll(1)
        [fetch] = sends(q)
        end = q.log.end_offset()
        q.handle_fetch_response(leader, fetch.correlation_id, FetchResult(0, leader, epoch, end), 1)
    q.take_effects()
    return q


def prospective(q: RaftQuorum, now: int) -> dict[int, int]:
    """Poll `q` into prospective; returns {voter: correlation id} of its pre-votes."""
    q.poll(now)
    assert q.state is State.PROSPECTIVE
    asked = {s.destination: s.correlation_id for s in sends(q)
             if isinstance(s.request, VoteRequest) and s.request.pre_vote}
    assert asked
    return asked


# ------------------------------------------------------------------------------------- granting a pre-vote

def test_an_unattached_voter_grants_a_pre_vote_and_changes_nothing() -> None:
    q = quorum(log=EpochHistory([(2, 0)], end=10), stored=ElectionState(3, voters=VOTERS))
    q.take_effects()
    resp = q.handle_vote(pre_vote(3, 2, 2, 10), 0)
    assert resp == VoteResponse(0, -1, 3, True)
    assert (q.state, q.epoch, q.voted_id) == (State.UNATTACHED, 3, -1)
    assert q.take_effects() == []  # nothing persisted: a pre-vote binds nobody
    # so it can grant another prospective's pre-vote, then a real vote to a third
    assert q.handle_vote(pre_vote(3, 3, 2, 10), 0).vote_granted
    assert q.handle_vote(VoteRequest(4, 2, 2, 10), 0).vote_granted and q.voted_id == 2


@pytest.mark.parametrize(("theirs", "granted"), [((2, 10), True), ((2, 9), False), ((1, 50), False),
                                                 ((3, 1), True)])
def test_a_pre_vote_needs_a_log_at_least_as_up_to_date(theirs: tuple[int, int], granted: bool) -> None:
    q = quorum(log=EpochHistory([(2, 0)], end=10), stored=ElectionState(3, voters=VOTERS))
    assert q.handle_vote(pre_vote(3, 2, *theirs), 0).vote_granted is granted


def test_a_follower_that_hears_from_its_leader_refuses_a_pre_vote() -> None:
    q = follower_of(leader=2, epoch=3)
    resp = q.handle_vote(pre_vote(3, 3, 0, 0), 10)
    assert resp == VoteResponse(0, 2, 3, False)  # and it names the live leader
    assert (q.state, q.epoch, q.leader_id) == (State.FOLLOWER, 3, 2)
    assert q.take_effects() == []


def test_a_follower_that_has_not_fetched_yet_grants_a_pre_vote() -> None:
    q = follower_of(leader=2, epoch=3, fetched=False)
    assert q.handle_vote(pre_vote(3, 3, 0, 0), 10) == VoteResponse(0, 2, 3, True)
    assert q.state is State.FOLLOWER
    # but never a standard vote while it knows a leader
    assert not q.handle_vote(VoteRequest(3, 3, 0, 0), 10).vote_granted  # same epoch: refused


def test_a_leader_refuses_pre_votes_candidates_and_resigned_voters_grant_them() -> None:
    leader = quorum(voters=(1,))  # the only voter leads at once
    assert leader.state is State.LEADER
    assert not leader.handle_vote(pre_vote(1, 2, 1, 10), 0).vote_granted
    candidate = quorum()
    asked = prospective(candidate, 5000)
    candidate.handle_vote_response(2, asked[2], VoteResponse(0, -1, 0, True), 5000)
    assert (candidate.state, candidate.epoch) == (State.CANDIDATE, 1)
    assert candidate.handle_vote(pre_vote(1, 3, 0, 0), 5000).vote_granted
    assert not candidate.handle_vote(VoteRequest(1, 3, 0, 0), 5000).vote_granted  # its vote is its own
    resigned = quorum(stored=ElectionState(4, leader_id=1, voters=VOTERS), log=EpochHistory([(4, 0)], end=3))
    assert resigned.state is State.RESIGNED
    assert resigned.handle_vote(pre_vote(4, 2, 4, 3), 0).vote_granted
    assert not resigned.handle_vote(pre_vote(4, 2, 4, 2), 0).vote_granted  # behind


def test_a_pre_vote_may_carry_its_own_epoch_as_last_epoch_a_vote_may_not() -> None:
    q = quorum(stored=ElectionState(3, voters=VOTERS))
    assert q.handle_vote(pre_vote(3, 2, 3, 5), 0) == VoteResponse(0, -1, 3, True)
    assert q.handle_vote(pre_vote(3, 2, 4, 5), 0).error_code == ErrorCode.INVALID_REQUEST
    assert q.handle_vote(VoteRequest(3, 2, 3, 5), 0).error_code == ErrorCode.INVALID_REQUEST


def test_a_pre_vote_from_a_higher_epoch_moves_the_voter_there_without_a_vote() -> None:
    q = follower_of(leader=2, epoch=3)
    resp = q.handle_vote(pre_vote(5, 3, 0, 0), 10)
    assert resp == VoteResponse(0, -1, 5, True)
    assert (q.state, q.epoch, q.voted_id) == (State.UNATTACHED, 5, -1)
    assert q.take_effects()[0] == Persist(ElectionState(5, voters=VOTERS))


def test_a_prospective_gives_a_standard_vote_and_persists_it_before_answering() -> None:
    q = quorum(stored=ElectionState(2, voters=VOTERS))
    prospective(q, 5000)
    resp = q.handle_vote(VoteRequest(3, 2, 0, 0), 5000)
    assert resp.vote_granted
    # the higher epoch made it unattached, so the vote is an unattached voter's
    assert (q.state, q.epoch, q.voted_id) == (State.VOTED, 3, 2)
    # a candidate of its own epoch (which stood without asking it first): it votes and goes on asking its
    # pre-vote, with its vote on disk before the answer goes out
    same_epoch = quorum(stored=ElectionState(2, voters=VOTERS))
    prospective(same_epoch, 5000)
    same_epoch.take_effects()
    assert same_epoch.handle_vote(VoteRequest(2, 3, 0, 0), 5000) == VoteResponse(0, -1, 2, True)
    assert (same_epoch.state, same_epoch.epoch, same_epoch.voted_id) == (State.PROSPECTIVE, 2, 3)
    assert same_epoch.take_effects() == [Persist(ElectionState(2, voted_id=3, voters=VOTERS))]
    assert not same_epoch.handle_vote(VoteRequest(2, 2, 0, 0), 5000).vote_granted  # one vote per epoch
    assert same_epoch.handle_vote(pre_vote(2, 2, 0, 0), 5000).vote_granted  # pre-votes bind nobody


# ------------------------------------------------------------------------------------------ a prospective

def test_a_majority_of_pre_votes_makes_a_candidate_in_the_next_epoch() -> None:
    q = quorum(log=EpochHistory([(2, 0)], end=4), stored=ElectionState(2, voters=VOTERS))
    q.take_effects()
    asked = prospective(q, 5000)
    assert q.epoch == 2
    q.handle_vote_response(3, asked[3], VoteResponse(0, -1, 2, True), 5000)
    assert (q.state, q.epoch, q.voted_id) == (State.CANDIDATE, 3, 1)
    assert q.take_effects()[0] == Persist(ElectionState(3, voted_id=1, voters=VOTERS))
    q.poll(5000)
    assert {(s.destination, s.request) for s in sends(q)} == {(2, VoteRequest(3, 1, 2, 4)),
                                                              (3, VoteRequest(3, 1, 2, 4))}


def test_a_follower_cut_off_goes_back_to_its_leader_when_the_pre_vote_is_refused() -> None:
    q = follower_of(leader=2, epoch=3)
    asked = prospective(q, CONFIG.fetch_timeout_ms + 1)
    assert (q.epoch, q.leader_id) == (3, 2)  # it still knows its leader, and says nothing new
    q.handle_vote_response(3, asked[3], VoteResponse(0, 2, 3, False), 3000)
    assert q.state is State.PROSPECTIVE  # one refusal of two: it could still win
    q.handle_vote_response(2, asked[2], VoteResponse(0, 2, 3, False), 3000)
    assert (q.state, q.epoch, q.leader_id) == (State.FOLLOWER, 3, 2)
    assert not [e for e in q.take_effects() if isinstance(e, LeaderChanged)]  # the controller above saw nothing
    q.poll(3001)
    assert [s.request for s in sends(q)] == [FetchRequest(1, 3, 0, 0)]  # fetching again


def test_a_prospective_that_learns_of_a_leader_follows_it_without_an_epoch_bump() -> None:
    q = quorum(stored=ElectionState(3, voters=VOTERS))
    asked = prospective(q, 5000)
    q.take_effects()
    q.handle_vote_response(2, asked[2], VoteResponse(0, 3, 3, False), 5000)
    assert (q.state, q.epoch, q.leader_id) == (State.FOLLOWER, 3, 3)
    assert q.take_effects()[:2] == [Persist(ElectionState(3, leader_id=3, voters=VOTERS)),
                                    LeaderChanged(3, 3, False)]
    # BeginQuorumEpoch does the same
    other = quorum(stored=ElectionState(3, voters=VOTERS))
    prospective(other, 5000)
    assert other.handle_begin_quorum_epoch(BeginQuorumEpochRequest(3, 2), 5000).error_code == 0
    assert (other.state, other.epoch, other.leader_id) == (State.FOLLOWER, 3, 2)


def test_a_prospective_whose_pre_vote_times_out_asks_again_in_the_same_epoch() -> None:
    q = follower_of(leader=2, epoch=3)
    prospective(q, CONFIG.fetch_timeout_ms + 1)
    q.poll(q._election_deadline)  # no answers at all (the others are unreachable)
    assert (q.state, q.epoch, q.leader_id) == (State.FOLLOWER, 3, 2)
    assert q.election() == ElectionState(3, leader_id=2, voters=VOTERS)


def test_a_voter_without_vote_v2_makes_the_prospective_stand_at_once() -> None:
    q = quorum(stored=ElectionState(3, voters=VOTERS))
    asked = prospective(q, 5000)
    q.handle_vote_unsupported(2, asked[2], 5000)  # the shell could not send a pre-vote to voter 2 (Vote v0-1)
    assert (q.state, q.epoch, q.voted_id) == (State.CANDIDATE, 4, 1)
    q.poll(5000)
    votes = sends(q)
    # the standard vote goes to the old voter too (at v0-1 it needs no PreVote field)
    assert {(s.destination, s.request.pre_vote) for s in votes} == {(2, False), (3, False)}
    # an answer about a request of an earlier state does nothing
    q.handle_vote_unsupported(3, asked[3], 5000)
    assert (q.state, q.epoch) == (State.CANDIDATE, 4)
    # a candidate's standard vote answered UNSUPPORTED_VERSION is an error: asked again after the backoff only
    standard = {s.destination: s.correlation_id for s in votes}
    q.handle_vote_unsupported(2, standard[2], 5010)
    assert (q.state, q.epoch) == (State.CANDIDATE, 4)
    q.poll(5011)
    assert 2 not in {s.destination for s in sends(q)}
    q.poll(5010 + CONFIG.retry_backoff_ms)
    assert {(s.destination, s.request.pre_vote) for s in sends(q)} == {(2, False)}


# -------------------------------------------------------------------------------------------- whole runs

@pytest.mark.parametrize("seed", range(6))
def test_a_follower_paused_past_its_fetch_timeout_rejoins_without_disturbing_the_leader(seed: int) -> None:
    """What SIGSTOP then SIGCONT does to a follower: it stops polling and answering, then comes back to a clock
    far past its fetch timeout."""
    sim = Sim(seed=seed)
    leader = sim.run_until_leader()
    epoch = leader.quorum.epoch
    follower = next(n for n in sim.nodes.values() if n is not leader)
    follower.up = False  # paused: no polls, requests to it fail
    sim.run(CONFIG.fetch_timeout_ms * 3)
    sim.write(leader, 2)  # the other follower keeps the leader's majority
    follower.up = True
    sim.run(CONFIG.fetch_timeout_ms * 3)
    assert sim.leader() is leader and leader.quorum.epoch == epoch
    assert all(n.quorum.epoch == epoch for n in sim.nodes.values())
    assert follower.quorum.state is State.FOLLOWER and follower.log.records == leader.log.records


@pytest.mark.parametrize("seed", range(6))
def test_a_follower_partitioned_away_never_bumps_the_epoch(seed: int) -> None:
    sim = Sim(seed=seed)
    leader = sim.run_until_leader()
    epoch = leader.quorum.epoch
    follower = next(n for n in sim.nodes.values() if n is not leader)
    sim.cut_off.add(follower.node_id)
    sim.run(CONFIG.fetch_timeout_ms * 5)
    assert follower.quorum.epoch == epoch  # it kept asking pre-votes nobody could answer
    assert all(p.epoch == epoch for p in follower.persisted[-3:])
    sim.cut_off.clear()
    sim.run(CONFIG.fetch_timeout_ms * 2)
    assert sim.leader() is leader and leader.quorum.epoch == epoch
    assert follower.quorum.state is State.FOLLOWER and follower.quorum.leader_id == leader.node_id


@pytest.mark.parametrize("seed", range(4))
def test_a_killed_leader_is_still_replaced(seed: int) -> None:
    sim = Sim(seed=seed)
    first = sim.run_until_leader()
    sim.kill(first.node_id)
    second = sim.run_until_leader()
    assert second is not first and second.quorum.epoch == first.quorum.epoch + 1  # one election, one bump
