"""The KRaft quorum state machine, in process: Kafka's election, vote, fetch and high-watermark rules, one rule per
test, then whole runs of three voters (tests/raft/sim.py) through elections, failures and restarts."""

from __future__ import annotations

import random

import pytest

from kjbod.protocol.errors import ErrorCode
from kjbod.raft.log_view import EpochHistory
from kjbod.raft.quorum import (
    BecomeLeader,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    EpochResponse,
    FetchAction,
    FetchRequest,
    FetchResult,
    FetchSnapshotRequest,
    FetchSnapshotResult,
    HighWatermark,
    LeaderChanged,
    Persist,
    RaftConfig,
    RaftError,
    RaftQuorum,
    Send,
    State,
    Truncate,
    VoteRequest,
    VoteResponse,
)
from kjbod.storage.quorum_state import ElectionState
from tests.raft.sim import Sim

VOTERS = (1, 2, 3)
CONFIG = RaftConfig()


def quorum(local: int = 1, log: EpochHistory | None = None, stored: ElectionState | None = None, now: int = 0,
           voters: tuple[int, ...] = VOTERS, seed: int = 0) -> RaftQuorum:
    return RaftQuorum(local, voters, log if log is not None else EpochHistory(), stored=stored, now_ms=now,
                      config=CONFIG, rng=random.Random(seed))


def sends(effects: list) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)]


def prevoted(q: RaftQuorum, now: int, granter: int = 2) -> list:
    """Poll `q` until it asks its pre-vote (KIP-996), grant it from `granter`: `q` stands for election. Returns
    the candidate's effects (its vote for itself persisted, then its Vote requests)."""
    q.poll(now)
    pre = sends(q.take_effects())
    assert q.state is State.PROSPECTIVE and pre and all(s.request.pre_vote for s in pre)
    ask = next(s for s in pre if s.destination == granter)
    q.handle_vote_response(granter, ask.correlation_id, VoteResponse(0, q.leader_id, q.epoch, True), now)
    assert q.state is State.CANDIDATE
    q.poll(now)
    return q.take_effects()


def elected(local: int = 1, log: EpochHistory | None = None, now: int = 0) -> RaftQuorum:
    """A leader of epoch 1 (granted by 2), its LeaderChangeMessage appended and flushed."""
    log = log if log is not None else EpochHistory()
    q = quorum(local, log)
    votes = sends(prevoted(q, now + 2 * CONFIG.election_timeout_ms, granter=2 if local != 2 else 1))
    vote_to_2 = next(s for s in votes if s.destination == 2)
    q.handle_vote_response(2, vote_to_2.correlation_id, VoteResponse(0, -1, q.epoch, True), now)
    assert q.state is State.LEADER
    became = [e for e in q.take_effects() if isinstance(e, BecomeLeader)]
    log.append(became[0].epoch, 1)
    q.leader_flushed(log.end_offset(), now)
    q.take_effects()
    return q


# ---------------------------------------------------------------------------------------------- start-up

def test_a_fresh_voter_is_unattached_and_persists_that_first() -> None:
    q = quorum()
    assert (q.state, q.epoch, q.leader_id, q.voted_id) == (State.UNATTACHED, 0, -1, -1)
    assert q.take_effects()[0] == Persist(ElectionState(0, voters=VOTERS))


def test_the_only_voter_elects_itself_at_once_and_commits_its_leader_change() -> None:
    log = EpochHistory()
    q = quorum(voters=(1,), log=log)
    assert (q.state, q.epoch) == (State.LEADER, 1)
    effects = q.take_effects()
    became = next(e for e in effects if isinstance(e, BecomeLeader))
    assert became.epoch_start_offset == 0
    assert became.message.leader_id == 1
    assert [v.voter_id for v in became.message.voters] == [1]
    assert [v.voter_id for v in became.message.granting_voters] == [1]
    # the vote for itself is durable, then the leadership, then the LeaderChangeMessage is appended
    voted = effects.index(Persist(ElectionState(1, voted_id=1, voters=(1,))))
    leading = effects.index(Persist(ElectionState(1, leader_id=1, voters=(1,))))
    assert voted < leading < effects.index(became)
    assert q.high_watermark is None
    log.append(1, 1)
    q.leader_flushed(1, 0)
    assert q.high_watermark == 1 and q.take_effects() == [HighWatermark(1)]
    q.poll(10**9)
    assert q.state is State.LEADER  # a lone leader never resigns for want of fetches


@pytest.mark.parametrize(("stored", "log_epoch", "state", "epoch"), [
    (ElectionState(4, voted_id=2, voters=VOTERS), 3, State.VOTED, 4),
    (ElectionState(4, leader_id=2, voters=VOTERS), 3, State.FOLLOWER, 4),
    (ElectionState(4, leader_id=1, voters=VOTERS), 3, State.RESIGNED, 4),  # it led epoch 4: never again
    (ElectionState(4, voted_id=1, voters=VOTERS), 3, State.CANDIDATE, 4),  # stands again in the same epoch
    (ElectionState(4, voters=VOTERS), 3, State.UNATTACHED, 4),
    (ElectionState(2, leader_id=2, voters=VOTERS), 3, State.UNATTACHED, 3),  # the file is behind the log
    (ElectionState(4, leader_id=9, voters=VOTERS), 3, State.UNATTACHED, 4),  # a leader that is not a voter
])
def test_restart_takes_kafkas_state_from_the_quorum_state_file(stored: ElectionState, log_epoch: int,
                                                               state: State, epoch: int) -> None:
    q = quorum(log=EpochHistory([(log_epoch, 0)], end=5), stored=stored)
    assert (q.state, q.epoch) == (state, epoch)


def test_a_restarted_voter_does_not_vote_twice_in_one_epoch() -> None:
    q = quorum(stored=ElectionState(4, voted_id=2, voters=VOTERS))
    assert not q.handle_vote(VoteRequest(4, 3, 3, 100), 0).vote_granted
    assert q.handle_vote(VoteRequest(4, 2, 0, 0), 0).vote_granted  # the same candidate asking again


def test_a_vote_is_kept_once_the_epochs_leader_is_known_also_across_a_restart() -> None:
    q = quorum()
    assert q.handle_vote(VoteRequest(1, 2, 0, 0), 0).vote_granted
    q.take_effects()
    assert q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(1, 2), 1).error_code == 0
    assert q.state is State.FOLLOWER
    # the follower's file keeps the vote it gave in this epoch beside the leader (Kafka's transitionToFollower)
    assert q.election() == ElectionState(1, leader_id=2, voted_id=2, voters=VOTERS)
    assert Persist(q.election()) in q.take_effects()
    # restarted with that file: a follower of 2 again, and it still refuses a second vote in epoch 1
    again = quorum(stored=q.election())
    assert (again.state, again.epoch, again.leader_id) == (State.FOLLOWER, 1, 2)
    # restarted after the leader left the voters (KIP-853): no leader to follow, but the vote is kept
    removed = quorum(stored=ElectionState(1, leader_id=4, voted_id=2, voters=VOTERS))
    assert (removed.state, removed.epoch) == (State.VOTED, 1)
    assert not removed.handle_vote(VoteRequest(1, 3, 0, 0), 0).vote_granted
    assert removed.handle_vote(VoteRequest(1, 2, 0, 0), 0).vote_granted


def test_a_node_outside_the_voters_is_refused() -> None:
    with pytest.raises(ValueError, match="node 4 is not one of the voters"):
        quorum(local=4)


# ------------------------------------------------------------------------------------------------ timers

@pytest.mark.parametrize("seed", range(20))
def test_election_timeouts_are_drawn_from_t_to_2t(seed: int) -> None:
    q = quorum(seed=seed)
    wait = q.poll(0)
    assert CONFIG.election_timeout_ms <= wait < 2 * CONFIG.election_timeout_ms
    assert q.poll(wait - 1) == 1 and q.state is State.UNATTACHED
    q.poll(wait)
    assert (q.state, q.epoch, q.voted_id) == (State.PROSPECTIVE, 0, -1)  # a pre-vote first: no new epoch


def test_timeouts_differ_between_voters() -> None:
    waits = {quorum(local=v, seed=v).poll(0) for v in VOTERS for _ in range(1)}
    assert len(waits) > 1


def test_a_prospective_asks_its_pre_vote_in_its_epoch_and_persists_nothing() -> None:
    q = quorum(log=EpochHistory([(3, 0)], end=10), stored=ElectionState(3, voters=VOTERS))
    q.take_effects()
    q.poll(10_000)
    effects = q.take_effects()
    assert (q.state, q.epoch, q.voted_id) == (State.PROSPECTIVE, 3, -1)
    assert not [e for e in effects if isinstance(e, Persist)]
    assert [(s.destination, s.request) for s in sends(effects)] == [
        (2, VoteRequest(3, 1, 3, 10, pre_vote=True)), (3, VoteRequest(3, 1, 3, 10, pre_vote=True))]


def test_a_candidate_persists_its_own_vote_before_asking_for_votes() -> None:
    q = quorum(log=EpochHistory([(3, 0)], end=10), stored=ElectionState(3, voters=VOTERS))
    q.take_effects()
    effects = prevoted(q, 10_000)
    assert effects[0] == Persist(ElectionState(4, voted_id=1, voters=VOTERS))
    # the voter that granted the pre-vote is asked for its vote as well: a pre-vote binds nobody
    assert [(s.destination, s.request) for s in sends(effects)] == [
        (2, VoteRequest(4, 1, 3, 10)), (3, VoteRequest(4, 1, 3, 10))]


def test_a_refused_candidate_waits_out_its_election_timeout_then_asks_a_pre_vote_again() -> None:
    q = RaftQuorum(1, VOTERS, EpochHistory(), stored=None, now_ms=0, config=CONFIG, rng=random.Random(3))
    votes = {s.destination: s.correlation_id for s in sends(prevoted(q, 5000))}
    q.handle_vote_response(2, votes[2], VoteResponse(0, -1, 1, False), 5000)
    assert q.state is State.CANDIDATE  # one rejection of two: still possible
    q.handle_vote_response(3, votes[3], VoteResponse(0, -1, 1, False), 5000)
    assert q.state is State.CANDIDATE
    deadline = q._election_deadline
    q.poll(deadline - 1)
    assert not sends(q.take_effects())  # refused by a majority: no more vote requests
    q.poll(deadline)
    assert (q.state, q.epoch, q.voted_id) == (State.PROSPECTIVE, 1, 1)  # its vote for itself is kept
    assert {(s.destination, s.request) for s in sends(q.take_effects())} == {
        (2, VoteRequest(1, 1, 0, 0, pre_vote=True)), (3, VoteRequest(1, 1, 0, 0, pre_vote=True))}


def test_a_candidate_whose_election_times_out_becomes_prospective_without_a_new_epoch() -> None:
    config = RaftConfig(election_timeout_ms=100)
    q = RaftQuorum(1, VOTERS, EpochHistory(), stored=None, now_ms=0, config=config, rng=random.Random(1))
    prevoted(q, 1000)
    assert (q.state, q.epoch) == (State.CANDIDATE, 1)
    q.poll(q._election_deadline)  # nobody answered
    assert (q.state, q.epoch) == (State.PROSPECTIVE, 1)
    q.take_effects()
    q.poll(q._election_deadline)  # nor to the pre-vote: unattached in the same epoch, keeping its vote ...
    assert Persist(ElectionState(1, voted_id=1, voters=VOTERS)) in q.take_effects()
    # ... with the time left on the prospective's timer (none), so it asks again at once, still in epoch 1
    assert (q.state, q.epoch, q.voted_id) == (State.PROSPECTIVE, 1, 1)


def test_a_follower_that_cannot_fetch_stands_after_the_fetch_timeout() -> None:
    q = quorum()
    q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(1, 2), 0)
    assert (q.state, q.leader_id) == (State.FOLLOWER, 2)
    q.poll(CONFIG.fetch_timeout_ms - 1)
    assert q.state is State.FOLLOWER
    q.poll(CONFIG.fetch_timeout_ms)
    # KIP-996: it asks first, in the same epoch, still knowing its leader
    assert (q.state, q.epoch, q.leader_id) == (State.PROSPECTIVE, 1, 2)
    assert {s.request for s in sends(q.take_effects()) if isinstance(s.request, VoteRequest)} == {
        VoteRequest(1, 1, 0, 0, pre_vote=True)}


def test_a_follower_fetches_from_its_leader_with_its_log_end_and_last_epoch() -> None:
    q = quorum(log=EpochHistory([(1, 0), (2, 5)], end=9))
    q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(3, 2), 0)
    q.take_effects()
    q.poll(1)
    [send] = sends(q.take_effects())
    assert (send.destination, send.request) == (2, FetchRequest(1, 3, 9, 2))
    q.poll(2)
    assert not sends(q.take_effects())  # one fetch in flight at a time


# ------------------------------------------------------------------------------------------------- votes

@pytest.mark.parametrize(("ours", "theirs", "granted"), [
    ((2, 10), (2, 10), True),  # as up to date
    ((2, 10), (2, 11), True),  # longer in the same epoch
    ((2, 10), (3, 1), True),  # a later last epoch wins whatever the length
    ((2, 10), (2, 9), False),  # shorter in the same epoch
    ((2, 10), (1, 50), False),  # an earlier last epoch loses whatever the length
])
def test_votes_go_only_to_logs_at_least_as_up_to_date(ours: tuple[int, int], theirs: tuple[int, int],
                                                      granted: bool) -> None:
    q = quorum(log=EpochHistory([(ours[0], 0)], end=ours[1]))
    q.take_effects()
    resp = q.handle_vote(VoteRequest(5, 2, theirs[0], theirs[1]), 0)
    assert resp == VoteResponse(0, -1, 5, granted)
    effects = q.take_effects()
    # the epoch moves first; a granted vote is durable before the answer goes out
    assert effects[0] == Persist(ElectionState(5, voters=VOTERS))
    if granted:
        assert Persist(ElectionState(5, voted_id=2, voters=VOTERS)) in effects
        assert q.state is State.VOTED
    else:
        assert q.state is State.UNATTACHED


def test_one_vote_per_epoch() -> None:
    q = quorum()
    assert q.handle_vote(VoteRequest(1, 2, 0, 0), 0).vote_granted
    assert not q.handle_vote(VoteRequest(1, 3, 0, 0), 0).vote_granted
    assert q.handle_vote(VoteRequest(1, 2, 0, 0), 0).vote_granted  # a retry from the same candidate
    assert q.handle_vote(VoteRequest(2, 3, 0, 0), 0).vote_granted  # a new epoch, a new vote


@pytest.mark.parametrize(("request_", "error"), [
    (VoteRequest(3, 2, 3, 0), ErrorCode.INVALID_REQUEST),  # last epoch not below the candidate's
    (VoteRequest(3, 2, -1, 0), ErrorCode.INVALID_REQUEST),
    (VoteRequest(3, 2, 0, -5), ErrorCode.INVALID_REQUEST),
    (VoteRequest(3, -1, 0, 0), ErrorCode.INVALID_REQUEST),
    (VoteRequest(1, 2, 0, 0), ErrorCode.FENCED_LEADER_EPOCH),  # older than ours
])
def test_bad_or_stale_vote_requests_get_kafkas_errors(request_: VoteRequest, error: int) -> None:
    q = quorum(stored=ElectionState(2, voters=VOTERS))
    resp = q.handle_vote(request_, 0)
    assert (resp.error_code, resp.vote_granted, resp.leader_epoch) == (error, False, 2)


def test_leaders_followers_and_candidates_refuse_votes_in_their_epoch() -> None:
    leader = elected()
    assert not leader.handle_vote(VoteRequest(1, 3, 0, 5), 0).vote_granted
    follower = quorum()
    follower.handle_begin_quorum_epoch(BeginQuorumEpochRequest(1, 2), 0)
    assert not follower.handle_vote(VoteRequest(1, 3, 0, 5), 0).vote_granted
    candidate = quorum()
    prevoted(candidate, 5000)
    assert not candidate.handle_vote(VoteRequest(1, 3, 0, 5), 0).vote_granted


def test_a_leader_steps_down_for_a_higher_epoch_and_says_so() -> None:
    q = elected()
    resp = q.handle_vote(VoteRequest(2, 3, 1, 1), 0)
    assert resp.vote_granted and q.state is State.VOTED and q.epoch == 2
    assert LeaderChanged(2, -1, False) in q.take_effects()


def test_a_majority_elects_and_the_leader_change_names_the_granting_voters() -> None:
    q = quorum(log=EpochHistory([(4, 0)], end=7), stored=ElectionState(4, voters=VOTERS))
    votes = {s.destination: s.correlation_id for s in sends(prevoted(q, 5000))}
    q.handle_vote_response(3, votes[3], VoteResponse(0, -1, 5, True), 5000)
    assert q.state is State.LEADER
    effects = q.take_effects()
    assert Persist(ElectionState(5, leader_id=1, voters=VOTERS)) in effects
    assert LeaderChanged(5, 1, True) in effects
    became = next(e for e in effects if isinstance(e, BecomeLeader))
    assert (became.epoch, became.epoch_start_offset) == (5, 7)
    assert [v.voter_id for v in became.message.voters] == [1, 2, 3]
    assert [v.voter_id for v in became.message.granting_voters] == [1, 3]
    # a late answer from 2 changes nothing
    q.handle_vote_response(2, votes[2], VoteResponse(0, -1, 5, True), 5000)
    assert q.state is State.LEADER


def test_an_answer_to_a_request_of_an_earlier_state_is_ignored() -> None:
    q = quorum()
    votes = {s.destination: s.correlation_id for s in sends(prevoted(q, 5000))}
    q.poll(10**6)  # times out: a pre-vote again
    prevoted(q, 10**6 + 1)  # a new election: epoch 2
    assert q.epoch == 2
    q.handle_vote_response(2, votes[2], VoteResponse(0, -1, 1, True), 10**6)
    q.handle_vote_response(3, votes[3], VoteResponse(0, -1, 1, True), 10**6)
    assert q.state is State.CANDIDATE


def test_a_response_naming_a_newer_leader_makes_the_candidate_follow() -> None:
    q = quorum()
    q.poll(5000)
    votes = {s.destination: s.correlation_id for s in sends(q.take_effects())}
    q.handle_vote_response(2, votes[2], VoteResponse(0, 3, 4, False), 5000)
    assert (q.state, q.epoch, q.leader_id) == (State.FOLLOWER, 4, 3)


# ------------------------------------------------------------------------------------- begin / end epoch

def test_begin_quorum_epoch_makes_voters_follow_and_old_epochs_are_fenced() -> None:
    q = quorum(stored=ElectionState(3, voters=VOTERS))
    assert q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(2, 2), 0) == EpochResponse(
        ErrorCode.FENCED_LEADER_EPOCH, -1, 3)
    assert q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(3, 2), 0) == EpochResponse(0, 2, 3)
    assert (q.state, q.leader_id) == (State.FOLLOWER, 2)
    assert q.take_effects()[-2:] == [Persist(ElectionState(3, leader_id=2, voters=VOTERS)),
                                     LeaderChanged(3, 2, False)]
    # a second leader in the same epoch is refused, not followed
    assert q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(3, 3), 0).error_code == ErrorCode.INVALID_REQUEST
    assert q.leader_id == 2
    assert q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(4, 9), 0).error_code == ErrorCode.INVALID_REQUEST


def test_the_leader_sends_begin_quorum_epoch_every_half_fetch_timeout() -> None:
    q = elected()
    q.poll(0)
    assert {(s.destination, s.request) for s in sends(q.take_effects())} == {
        (2, BeginQuorumEpochRequest(1, 1)), (3, BeginQuorumEpochRequest(1, 1))}
    # answered: the next round is due at fetch timeout / 2
    wait = q.poll(10)
    assert wait <= CONFIG.fetch_timeout_ms // 2
    q.poll(CONFIG.fetch_timeout_ms // 2)
    assert len(sends(q.take_effects())) == 0  # still in flight, not timed out
    q.poll(CONFIG.request_timeout_ms)  # unanswered: timed out, backing off
    assert len(sends(q.take_effects())) == 0
    q.poll(3 * CONFIG.fetch_timeout_ms // 2)
    assert len(sends(q.take_effects())) == 2  # sent again at the next round


@pytest.mark.parametrize(("successors", "waits"), [
    ((2, 3), {2: 0, 3: 500}),  # the first named stands at once; the next waits backoff.max >> (n-1) << 0
    ((3, 2, 4, 5), {3: 0, 2: 125}),
    ((3,), {2: 1000}),  # not named: the full maximum
])
def test_end_quorum_epoch_shortens_the_wait_of_named_successors(successors: tuple[int, ...],
                                                                waits: dict[int, int]) -> None:
    for local, wait in waits.items():
        q = quorum(local=local, voters=(1, 2, 3, 4, 5))
        q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(1, 1), 100)
        assert q.handle_end_quorum_epoch(EndQuorumEpochRequest(1, 1, successors), 100).error_code == 0
        if wait:
            q.poll(100 + wait - 1)
            assert q.state is State.FOLLOWER
        q.poll(100 + wait)
        assert (q.state, q.epoch) == (State.PROSPECTIVE, 1), (local, wait)


def test_a_resigning_leader_names_successors_by_progress_and_stops_serving() -> None:
    log = EpochHistory()
    q = elected(log=log)
    log.append(1, 5)
    q.leader_flushed(6, 0)
    q.handle_fetch(FetchRequest(3, 1, 6, 1), 0)
    q.handle_fetch(FetchRequest(2, 1, 1, 1), 0)
    q.take_effects()
    q.resign(10)
    assert q.state is State.RESIGNED and not q.shutdown_complete
    q.poll(10)
    effects = q.take_effects()
    assert {(s.destination, s.request) for s in sends(effects)} == {
        (2, EndQuorumEpochRequest(1, 1, (3, 2))), (3, EndQuorumEpochRequest(1, 1, (3, 2)))}
    assert LeaderChanged(1, 1, False) in effects
    assert q.handle_fetch(FetchRequest(2, 1, 6, 1), 10).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    for s in sends(effects):
        q.handle_end_quorum_epoch_response(s.destination, s.correlation_id, EpochResponse(0, 1, 1), 20)
    assert q.shutdown_complete
    q.poll(10**6)
    assert q.state is State.RESIGNED  # shutting down: no new election


# ------------------------------------------------------------------------------------ fetch and the HW

def test_the_leader_commits_nothing_until_a_majority_holds_a_record_of_its_epoch() -> None:
    log = EpochHistory([(1, 0)], end=10)  # ten records from epoch 1, not known to be committed
    q = quorum(log=log, stored=ElectionState(1, voters=VOTERS))
    votes = {s.destination: s.correlation_id for s in sends(prevoted(q, 5000))}
    q.handle_vote_response(2, votes[2], VoteResponse(0, -1, 2, True), 5000)
    assert q.state is State.LEADER and q.epoch == 2
    # a follower that has all of epoch 1 does not commit it: nothing of epoch 2 is replicated yet
    assert q.handle_fetch(FetchRequest(2, 2, 10, 1), 5000).high_watermark == -1
    log.append(2, 1)  # the LeaderChangeMessage at offset 10
    q.leader_flushed(11, 5000)
    assert q.high_watermark is None
    answer = q.handle_fetch(FetchRequest(2, 2, 11, 2), 5001)
    assert q.high_watermark == 11 and answer.high_watermark == 11
    assert HighWatermark(11) in q.take_effects()
    # the majority's offset, not the furthest: 3 lags at 0, 2 at 11, the leader at 15
    log.append(2, 4)
    q.leader_flushed(15, 5002)
    assert q.high_watermark == 11
    q.handle_fetch(FetchRequest(2, 2, 13, 2), 5003)
    assert q.high_watermark == 13


def test_fetch_errors_are_kafkas() -> None:
    q = elected()
    assert q.handle_fetch(FetchRequest(2, 0, 0, 0), 0).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert q.handle_fetch(FetchRequest(2, 2, 0, 0), 0).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert q.handle_fetch(FetchRequest(2, 1, -1, 0), 0).error_code == ErrorCode.INVALID_REQUEST
    assert q.handle_fetch(FetchRequest(2, 1, 0, 2), 0).error_code == ErrorCode.INVALID_REQUEST
    follower = quorum(local=2)
    follower.handle_begin_quorum_epoch(BeginQuorumEpochRequest(1, 1), 0)
    answer = follower.handle_fetch(FetchRequest(3, 1, 0, 0), 0)
    assert (answer.error_code, answer.leader_id, answer.leader_epoch) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, 1, 1)


def test_the_leader_answers_diverging_epoch_where_the_logs_part() -> None:
    # leader: epoch 1 on [0, 5), epoch 3 from 5; the follower has epoch 2 records the leader never had
    log = EpochHistory([(1, 0), (3, 5)], end=8)
    q = quorum(log=log, stored=ElectionState(3, voted_id=1, voters=VOTERS))
    votes = {s.destination: s.correlation_id for s in sends(q.take_effects())} or None
    q.poll(0)
    votes = {s.destination: s.correlation_id for s in sends(q.take_effects())}
    q.handle_vote_response(2, votes[2], VoteResponse(0, -1, 3, True), 0)
    assert q.state is State.LEADER and q.epoch == 3
    answer = q.handle_fetch(FetchRequest(2, 3, 9, 2), 0)
    assert answer.diverging == (5, 1) and answer.read_from is None
    assert q.handle_fetch(FetchRequest(2, 3, 7, 1), 0).diverging == (5, 1)  # beyond epoch 1's end
    assert q.handle_fetch(FetchRequest(2, 3, 4, 1), 0).read_from == 4  # within it: valid
    assert q.handle_fetch(FetchRequest(2, 3, 0, 0), 0).read_from == 0


def test_a_leader_with_a_snapshot_sends_empty_or_lagging_followers_to_it() -> None:
    log = EpochHistory([(2, 100)], end=120, start=100, snapshot=(100, 1))
    q = quorum(log=log, stored=ElectionState(2, voted_id=1, voters=VOTERS))
    q.poll(0)
    votes = {s.destination: s.correlation_id for s in sends(q.take_effects())}
    q.handle_vote_response(2, votes[2], VoteResponse(0, -1, 2, True), 0)
    assert q.handle_fetch(FetchRequest(2, 2, 0, 0), 0).snapshot == (100, 1)
    assert q.handle_fetch(FetchRequest(2, 2, 50, 1), 0).snapshot == (100, 1)
    assert q.handle_fetch(FetchRequest(2, 2, 100, 1), 0).read_from == 100


def following(log: EpochHistory) -> tuple[RaftQuorum, Send]:
    """Voter 2 following leader 1 in epoch 3, with its first Fetch sent."""
    q = quorum(local=2, log=log)
    q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(3, 1), 0)
    q.poll(1)
    [fetch] = sends(q.take_effects())
    return q, fetch


def test_a_follower_sent_to_a_snapshot_fetches_it_in_chunks_then_fetches_from_its_end() -> None:
    log = EpochHistory([(1, 0)], end=4)
    q, fetch = following(log)
    assert isinstance(fetch.request, FetchRequest) and fetch.request.fetch_offset == 4
    outcome = q.handle_fetch_response(1, fetch.correlation_id, FetchResult(0, 1, 3, 50, snapshot=(40, 2)), 2)
    assert (outcome.action, outcome.snapshot) == (FetchAction.SNAPSHOT, (40, 2))
    q.poll(3)
    [first] = sends(q.take_effects())
    assert first.request == FetchSnapshotRequest(2, 3, (40, 2), 0)
    chunk = q.handle_fetch_snapshot_response(1, first.correlation_id,
                                             FetchSnapshotResult(0, 1, 3, (40, 2), size=100, position=0,
                                                                 chunk_bytes=60), 4)
    assert chunk.action is FetchAction.CHUNK
    q.poll(5)
    [second] = sends(q.take_effects())
    assert second.request == FetchSnapshotRequest(2, 3, (40, 2), 60)  # continues where the first chunk ended
    last = q.handle_fetch_snapshot_response(1, second.correlation_id,
                                            FetchSnapshotResult(0, 1, 3, (40, 2), size=100, position=60,
                                                                chunk_bytes=40), 6)
    assert (last.action, last.snapshot) == (FetchAction.INSTALL, (40, 2))
    log.entries, log.end, log.start, log.snapshot = [], 40, 40, (40, 2)  # what the shell's install does
    q.snapshot_installed(7)
    assert q.fetching_snapshot is None and q.high_watermark == 40
    q.poll(8)
    [again] = sends(q.take_effects())
    assert isinstance(again.request, FetchRequest) and again.request.fetch_offset == 40


@pytest.mark.parametrize("answer", [
    FetchSnapshotResult(ErrorCode.SNAPSHOT_NOT_FOUND, 1, 3),
    FetchSnapshotResult(ErrorCode.POSITION_OUT_OF_RANGE, 1, 3),
    FetchSnapshotResult(0, 1, 3, (30, 2), size=100, position=0, chunk_bytes=10),  # another snapshot
    FetchSnapshotResult(0, 1, 3, (40, 2), size=100, position=20, chunk_bytes=10),  # another position
])
def test_a_snapshot_the_leader_no_longer_has_or_a_wrong_chunk_starts_over_with_a_fetch(answer) -> None:
    q, fetch = following(EpochHistory([(1, 0)], end=4))
    q.handle_fetch_response(1, fetch.correlation_id, FetchResult(0, 1, 3, 50, snapshot=(40, 2)), 2)
    q.poll(3)
    [first] = sends(q.take_effects())
    outcome = q.handle_fetch_snapshot_response(1, first.correlation_id, answer, 4)
    assert outcome.action is FetchAction.RESTART and q.fetching_snapshot is None
    q.poll(5)
    [again] = sends(q.take_effects())
    assert isinstance(again.request, FetchRequest) and again.request.fetch_offset == 4


def test_a_new_leader_drops_the_snapshot_being_fetched_and_a_stale_chunk_is_ignored() -> None:
    q, fetch = following(EpochHistory([(1, 0)], end=4))
    q.handle_fetch_response(1, fetch.correlation_id, FetchResult(0, 1, 3, 50, snapshot=(40, 2)), 2)
    q.poll(3)
    [first] = sends(q.take_effects())
    q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(4, 3), 4)
    assert q.fetching_snapshot is None
    stale = q.handle_fetch_snapshot_response(1, first.correlation_id,
                                             FetchSnapshotResult(0, 1, 3, (40, 2), size=10, position=0,
                                                                 chunk_bytes=10), 5)
    assert stale.action is FetchAction.IGNORE


def test_the_leader_counts_a_voter_fetching_its_snapshot_for_check_quorum() -> None:
    q = elected()
    quorum_timeout = int(CONFIG.fetch_timeout_ms * 1.5)
    q.note_snapshot_fetch(2, quorum_timeout - 1)
    q.poll(quorum_timeout + 10)
    assert q.state is State.LEADER  # voter 2's snapshot fetch renewed the deadline
    q.poll(2 * quorum_timeout + 10)
    assert q.state is State.RESIGNED


def test_the_follower_truncates_on_diverging_epoch_but_never_below_its_high_watermark() -> None:
    log = EpochHistory([(1, 0), (2, 5)], end=9)
    q = quorum(local=2, log=log)
    q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(3, 1), 0)
    q.poll(1)
    [fetch] = sends(q.take_effects())
    outcome = q.handle_fetch_response(1, fetch.correlation_id, FetchResult(0, 1, 3, 4, diverging=(5, 1)), 2)
    assert outcome.action is FetchAction.TRUNCATED
    assert q.take_effects() == [Truncate(5)]
    log.truncate_to(5)
    q.poll(3)
    [fetch] = sends(q.take_effects())
    assert fetch.request == FetchRequest(2, 3, 5, 1)
    outcome = q.handle_fetch_response(1, fetch.correlation_id, FetchResult(0, 1, 3, 7), 4)
    assert outcome.action is FetchAction.APPEND and outcome.high_watermark == 7
    log.append(3, 1)  # one record came: the follower's HW is capped at its own end
    q.follower_appended(7, 4)
    assert q.high_watermark == 6 and q.take_effects() == [HighWatermark(6)]
    q.poll(5)
    [fetch] = sends(q.take_effects())
    with pytest.raises(RaftError, match="below the high watermark 6"):
        q.handle_fetch_response(1, fetch.correlation_id, FetchResult(0, 1, 3, 7, diverging=(3, 1)), 6)


def test_a_fetch_answer_from_a_newer_epoch_moves_the_follower() -> None:
    q = quorum(local=2)
    q.handle_begin_quorum_epoch(BeginQuorumEpochRequest(1, 1), 0)
    q.poll(1)
    [fetch] = sends(q.take_effects())
    outcome = q.handle_fetch_response(1, fetch.correlation_id,
                                      FetchResult(ErrorCode.FENCED_LEADER_EPOCH, 3, 2), 2)
    assert outcome.action is FetchAction.IGNORE
    assert (q.state, q.epoch, q.leader_id) == (State.FOLLOWER, 2, 3)


def test_a_leader_that_loses_its_majority_resigns_after_one_and_a_half_fetch_timeouts() -> None:
    q = elected()
    deadline = int(CONFIG.fetch_timeout_ms * 1.5)
    q.handle_fetch(FetchRequest(2, 1, 1, 1), deadline - 10)  # one fetch of two: a majority with the leader
    q.poll(deadline + 10)
    assert q.state is State.LEADER
    q.poll(deadline - 10 + deadline)
    assert q.state is State.RESIGNED
    assert not q.shutting_down
    q.poll(10**7)
    # out of the epoch it led, with no leader known; it asks a pre-vote in epoch 2 (never follows itself in 1)
    assert q.state is State.PROSPECTIVE and q.epoch == 2 and q.leader_id == -1


def test_observer_fetches_count_for_nothing() -> None:
    q = elected()
    q.handle_fetch(FetchRequest(7, 1, 1, 1), 10)
    q.handle_fetch(FetchRequest(-1, 1, 1, 1), 10)
    assert q.high_watermark is None
    assert q.replica_progress()[7][0] == 1


# -------------------------------------------------------------------------------------------- whole runs

@pytest.mark.parametrize("seed", range(8))
def test_three_voters_elect_one_leader_and_replicate(seed: int) -> None:
    sim = Sim(seed=seed)
    leader = sim.run_until_leader()
    sim.write(leader, 3)
    sim.run(200)
    assert {n.log.records == leader.log.records for n in sim.nodes.values()} == {True}
    assert all(n.hw == leader.log.end_offset() for n in sim.nodes.values())
    # every voter has the leader on disk; the leader no vote (as Kafka's leader state), a follower the vote it
    # gave in this epoch, if it gave one: the leader's (a voter never votes twice in one epoch, after a restart too)
    assert {(n.disk.epoch, n.disk.leader_id, n.disk.voters) for n in sim.nodes.values()} == {
        (leader.quorum.epoch, leader.node_id, VOTERS)}
    assert leader.disk.voted_id == -1
    assert {n.disk.voted_id for n in sim.nodes.values() if n is not leader} <= {-1, leader.node_id}


@pytest.mark.parametrize("seed", range(8))
def test_a_killed_leader_is_replaced_and_rejoins_and_catches_up(seed: int) -> None:
    sim = Sim(seed=seed)
    first = sim.run_until_leader()
    sim.write(first, 5)
    sim.run(100)
    committed = list(sim.committed)
    sim.kill(first.node_id)
    second = sim.run_until_leader()
    assert second.node_id != first.node_id and second.quorum.epoch > first.quorum.epoch
    assert second.log.records[:len(committed)] == committed
    sim.write(second, 4)
    sim.run(100)
    back = sim.restart(first.node_id)
    assert back.quorum.state is State.RESIGNED  # its file says it led: it will not lead that epoch again
    sim.run(3000)
    leader = sim.leader()
    assert leader is not None
    assert back.log.records == leader.log.records
    assert back.hw == leader.hw == leader.log.end_offset()


@pytest.mark.parametrize("seed", range(6))
def test_a_partitioned_leader_with_unreplicated_records_loses_them_to_the_new_leader(seed: int) -> None:
    sim = Sim(seed=seed)
    first = sim.run_until_leader()
    sim.write(first, 2)
    sim.run(100)
    sim.cut_off.add(first.node_id)
    sim.write(first, 3)  # written while cut off: never committed
    assert first.hw < first.log.end_offset()
    sim.run(CONFIG.fetch_timeout_ms * 2)
    assert first.quorum.state is not State.LEADER  # check-quorum: it resigned
    others = [n for n in sim.nodes.values() if n is not first]
    second = max(others, key=lambda n: (n.quorum.state is State.LEADER, n.quorum.epoch))
    second = sim.run_until_leader() if second.quorum.state is not State.LEADER else second
    sim.write(second, 1)
    sim.cut_off.clear()
    sim.run(4000)
    leader = sim.leader()
    assert leader is not None
    # the old leader's uncommitted tail is gone, replaced by the new leader's log
    assert first.log.records == leader.log.records
    assert sim.committed == leader.log.records[:len(sim.committed)]


def test_a_graceful_resignation_hands_over_quickly() -> None:
    sim = Sim(seed=1)
    first = sim.run_until_leader()
    sim.write(first, 2)
    sim.run(100)
    first.quorum.resign(sim.now)
    sim.effects(first)
    start = sim.now
    sim.run(20)
    assert first.quorum.shutdown_complete
    sim.kill(first.node_id)
    second = sim.run_until_leader()
    # the first named successor stood at once instead of waiting out its fetch timeout
    assert sim.now - start < CONFIG.fetch_timeout_ms
    assert second.node_id != first.node_id
