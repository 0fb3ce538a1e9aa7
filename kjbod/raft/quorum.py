"""The KRaft quorum state machine (KIP-595), sans-IO: elections, leadership and the committed end of the log.

Strategy: one object, `RaftQuorum`, holds a voter's state for the metadata log and changes it only when it is told
something: `poll(now_ms)` for the passing of time, `handle_*` for a request or response that arrived, and a few
notes from the log (`leader_flushed`, `follower_appended`). It never touches a socket, a clock or a file. What it
wants done comes out as ordered *effects* (`take_effects()`): `Persist` (write the quorum-state file), `Send` (a
request to another voter), `Truncate` (cut the local log after a DivergingEpoch), `BecomeLeader` (append the
LeaderChangeMessage control record that opens the epoch), `LeaderChanged` and `HighWatermark` (tell the
controller). The shell performs them in order, and answers a request only after performing the effects that
handling it produced: so a granted vote is on disk before the candidate hears of it.

The rules are Kafka's (KafkaRaftClient, QuorumState and the per-state classes), for a static voter set
(`controller.quorum.voters`):

* States: unattached (no leader known, no vote in this epoch), voted (unattached with a vote cast: Kafka 3.x's
  VotedState), prospective (KIP-996: asking a pre-vote), candidate, leader, follower, resigned. Every change of
  epoch, vote or leader is persisted first (Kafka's durable transitions; becoming prospective or resigned is not).
* Elections, with pre-vote (KIP-996, Kafka 4): an unattached or voted voter that hears nothing for its election
  timeout, a follower that has not fetched successfully for `controller.quorum.fetch.timeout.ms`, or a candidate
  whose election timed out becomes *prospective*: in its current epoch, keeping the leader it knew and its vote,
  writing nothing, it sends Vote requests with PreVote set. A majority of grants (itself included) makes it a
  candidate: epoch + 1, a vote for itself, standard Vote requests. A majority of refusals, or its election
  timeout, sends it back to following the leader it knew in the same epoch, or to unattached (keeping its vote),
  from where it asks again after another timeout. So a voter that was only cut off from a live leader never bumps
  the epoch: the other voters still hear from that leader and refuse. A voter that does not serve Vote v2 (the
  shell reports UNSUPPORTED_VERSION, `handle_vote_unsupported`) cannot answer a pre-vote, and the prospective
  stands at once (Kafka's rule for quorums with older voters). Election timeouts are drawn at random from
  [t, 2t) with t = `controller.quorum.election.timeout.ms`. A candidate with a majority becomes leader; a refused
  one stops asking and waits out its election timeout (Kafka 4 dropped the candidate's own backoff). A resigned
  leader whose election timeout passed moves to unattached in the next epoch, never following itself.
* Votes: a pre-vote binds nobody and changes nothing; it is granted to a log at least as up to date as ours (last
  epoch, then end offset) by any voter but a leader and a follower that has fetched from its leader in this epoch.
  A standard vote: one per epoch, to the first candidate whose log is at least as up to date, never while a
  leader is known; a repeated request from the candidate we voted for is granted again. A request with a higher
  epoch, pre-vote or not, moves us to that epoch first (a leader steps down).
* The leader's first write in its epoch is a LeaderChangeMessage control record. It sends BeginQuorumEpoch to the
  other voters every fetch timeout / 2, serves their Fetch, and its high watermark is the largest offset that a
  majority of voters (itself included) has reached, once that offset is above the start of its epoch: a leader
  commits nothing from an earlier epoch until a record of its own is committed. A leader that has not been
  fetched from by a majority within 1.5 × the fetch timeout resigns (Kafka's check-quorum).
* Fetch: the leader checks the follower's (fetch offset, last fetched epoch) against its own epochs and answers
  DivergingEpoch where they part; the follower truncates there (never below its high watermark) and fetches
  again. The follower's high watermark is min(the leader's, its own end offset).
* Resignation (graceful shutdown, or check-quorum): the leader stops serving, sends EndQuorumEpoch with the other
  voters ordered by how far they have fetched; a follower named n-th in that list waits a strictly growing
  backoff (0 for the first) instead of its full fetch timeout before asking its pre-vote.

* Snapshots: a Fetch from offset 0, or below the leader's log start, or whose last fetched epoch is older than
  the leader's latest snapshot, is answered with that snapshot's id (`FetchAnswer.snapshot`). The follower then
  sends FetchSnapshot (`FetchSnapshotRequest`) instead of Fetch, from position 0, each answer's chunk continuing
  where the last one ended (`FetchAction.CHUNK`); with the last chunk (`FetchAction.INSTALL`) the shell installs
  the snapshot (the log emptied to start at its end) and calls `snapshot_installed`, and Fetch resumes from its
  end. SNAPSHOT_NOT_FOUND (the leader deleted it meanwhile), or an answer for another snapshot or position, drops
  what was fetched (`FetchAction.RESTART`) and the next Fetch asks again. A change of epoch or leader drops it too.

* Voter sets (KIP-853): with kraft.version 1 the voters are the metadata log's latest VotersRecord, which the
  shell passes in at start and again (`set_voters`) whenever an append, a truncation or a snapshot changes it;
  a voter set counts from the moment it is in the log, committed or not (Kafka's rule). A node that is not one
  of the voters is an *observer*: it never stands for election nor counts for the majority; it fetches from the
  leader it knows, and while it knows none (or the leader stopped answering for a fetch timeout) it sends Fetch
  to its bootstrap servers (`bootstrap`, negative destination ids the shell maps to
  controller.quorum.bootstrap.servers) in turn, whose answers name the leader. An observer that a new voter set
  names becomes a voter where it stands (a follower stays a follower).

"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.leader_change_message import LeaderChangeMessage, Voter
from kjbod.raft.log_view import LogView
from kjbod.storage.quorum_state import NO_ID, ElectionState

CHECK_QUORUM_TIMEOUT_FACTOR = 1.5
FOREVER = 1 << 62


class RaftError(Exception):
    """A message or note that contradicts the protocol's guarantees (two leaders in one epoch, truncation below
    the high watermark); the message says what was seen."""


class State(Enum):
    UNATTACHED = "Unattached"
    VOTED = "Voted"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


@dataclass(frozen=True)
class RaftConfig:
    """Kafka's controller.quorum.* timing keys, with Kafka's defaults."""

    election_timeout_ms: int = 1000
    election_backoff_max_ms: int = 1000
    fetch_timeout_ms: int = 2000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20


# ---------------------------------------------------------------------------------------------- messages
# The fields of Kafka's single-partition Vote/BeginQuorumEpoch/EndQuorumEpoch/Fetch messages that the state
# machine reads or writes; the shell maps them to and from the wire messages.

@dataclass(frozen=True)
class VoteRequest:
    """A Vote (v2: ReplicaEpoch, ReplicaId...). A pre-vote (`pre_vote`, KIP-996) asks in the sender's current
    epoch, binds nobody and changes no state; a standard vote asks in the new epoch the candidate stands in."""

    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False


@dataclass(frozen=True)
class VoteResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True)
class BeginQuorumEpochRequest:
    leader_epoch: int
    leader_id: int


@dataclass(frozen=True)
class EndQuorumEpochRequest:
    leader_epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True)
class EpochResponse:
    """BeginQuorumEpoch and EndQuorumEpoch answer alike."""

    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class FetchRequest:
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int


@dataclass(frozen=True)
class FetchAnswer:
    """The leader's answer to a Fetch. `read_from` is where the records to send start (None: send none);
    `diverging` is (end offset, epoch) when the follower's log parts from ours; `snapshot` is the snapshot to fetch
    when the follower is below our log start."""

    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int = -1
    diverging: tuple[int, int] | None = None
    snapshot: tuple[int, int] | None = None
    read_from: int | None = None


@dataclass(frozen=True)
class FetchResult:
    """What a follower heard back from its Fetch (the records, if any, stay with the shell)."""

    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int = -1
    diverging: tuple[int, int] | None = None  # (end offset, epoch)
    snapshot: tuple[int, int] | None = None  # (end offset, epoch): fetch this snapshot


@dataclass(frozen=True)
class FetchSnapshotRequest:
    replica_id: int
    current_leader_epoch: int
    snapshot: tuple[int, int]  # (end offset, epoch)
    position: int


@dataclass(frozen=True)
class FetchSnapshotResult:
    """What a follower heard back from its FetchSnapshot (the chunk's bytes stay with the shell)."""

    error_code: int
    leader_id: int
    leader_epoch: int
    snapshot: tuple[int, int] = (-1, -1)
    size: int = -1
    position: int = -1
    chunk_bytes: int = 0


Request = VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest | FetchSnapshotRequest


class FetchAction(Enum):
    IGNORE = "ignore"  # stale or failed: drop any records
    APPEND = "append"  # append the records, then call follower_appended(high_watermark)
    TRUNCATED = "truncated"  # a Truncate effect was emitted; fetch again
    SNAPSHOT = "snapshot"  # start fetching `snapshot` (drop any earlier partial one)
    CHUNK = "chunk"  # keep the chunk; more follow
    INSTALL = "install"  # keep the chunk, install the whole snapshot, then call snapshot_installed()
    RESTART = "restart"  # drop what was fetched of the snapshot


@dataclass(frozen=True)
class FetchOutcome:
    action: FetchAction
    high_watermark: int = -1
    snapshot: tuple[int, int] | None = None


# ----------------------------------------------------------------------------------------------- effects

@dataclass(frozen=True)
class Persist:
    election: ElectionState


@dataclass(frozen=True)
class Send:
    destination: int
    correlation_id: int
    request: Request


@dataclass(frozen=True)
class Truncate:
    offset: int


@dataclass(frozen=True)
class BecomeLeader:
    """Append `message` as a control batch stamped with `epoch` at `epoch_start_offset`, then call
    `leader_flushed` with the new end offset once it is fsynced."""

    epoch: int
    epoch_start_offset: int
    message: LeaderChangeMessage


@dataclass(frozen=True)
class LeaderChanged:
    """The known leader or epoch changed (leader_id -1: none known). `local` is true when this node leads."""

    epoch: int
    leader_id: int
    local: bool


@dataclass(frozen=True)
class HighWatermark:
    offset: int


Effect = Persist | Send | Truncate | BecomeLeader | LeaderChanged | HighWatermark


# ---------------------------------------------------------------------------------------- request pacing

@dataclass
class _Connection:
    inflight: int | None = None  # correlation id of the request awaiting an answer
    sent_ms: int = 0
    backoff_until_ms: int = 0


class _Requests:
    """One outstanding request per destination, a request timeout, and a retry backoff after a failure (Kafka's
    RequestManager)."""

    def __init__(self, config: RaftConfig) -> None:
        self.config = config
        self.conns: dict[int, _Connection] = {}
        self.next_correlation = 1

    def ready(self, dest: int, now: int) -> bool:
        c = self.conns.get(dest)
        if c is None:
            return True
        if c.inflight is not None:
            if now - c.sent_ms < self.config.request_timeout_ms:
                return False
            c.inflight = None  # timed out: counts as a failure
            c.backoff_until_ms = now + self.config.retry_backoff_ms
        return now >= c.backoff_until_ms

    def wait_ms(self, dest: int, now: int) -> int:
        c = self.conns.get(dest)
        if c is None:
            return 0
        if c.inflight is not None:
            return max(0, c.sent_ms + self.config.request_timeout_ms - now)
        return max(0, c.backoff_until_ms - now)

    def sent(self, dest: int, now: int) -> int:
        cid = self.next_correlation
        self.next_correlation += 1
        self.conns[dest] = _Connection(inflight=cid, sent_ms=now)
        return cid

    def expected(self, dest: int, correlation_id: int) -> bool:
        c = self.conns.get(dest)
        return c is not None and c.inflight == correlation_id

    def answered(self, dest: int, now: int, ok: bool) -> None:
        c = self.conns.setdefault(dest, _Connection())
        c.inflight = None
        c.backoff_until_ms = now if ok else now + self.config.retry_backoff_ms

    def reset(self) -> None:
        self.conns.clear()


# ----------------------------------------------------------------------------------------- per-state data

@dataclass
class _ReplicaProgress:
    end_offset: int | None = None
    last_fetch_ms: int = -1


@dataclass
class _LeaderData:
    epoch_start_offset: int
    granting: frozenset[int]
    progress: dict[int, _ReplicaProgress]
    check_quorum_deadline: int
    fetched_voters: set[int] = field(default_factory=set)
    begin_epoch_due: int = 0
    acknowledged: set[int] = field(default_factory=set)


class RaftQuorum:
    """One voter's view of the quorum for the metadata log (see the module docstring)."""

    def __init__(
        self,
        local_id: int,
        voters: tuple[int, ...] | list[int] | set[int],
        log: LogView,
        *,
        stored: ElectionState | None,
        now_ms: int,
        config: RaftConfig | None = None,
        rng: random.Random | None = None,
        bootstrap: tuple[int, ...] = (),
        dynamic: bool = False,
    ) -> None:
        self.local_id = local_id
        self.voters = tuple(sorted(set(voters)))
        self.dynamic = dynamic  # kraft.version 1: the voter set comes from the log and may change
        self.bootstrap = tuple(bootstrap)  # where an observer that knows no leader sends Fetch (negative ids)
        self._next_bootstrap = 0
        if local_id not in self.voters and not dynamic:
            raise ValueError(f"node {local_id} is not one of the voters {list(self.voters)}")
        if local_id not in self.voters and not (self.bootstrap or self.voters):
            raise ValueError(f"node {local_id} is an observer with no voter and no bootstrap server to fetch from")
        self.log = log
        self.config = config or RaftConfig()
        self.rng = rng or random.Random()
        self.requests = _Requests(self.config)
        self._effects: list[Effect] = []
        self.shutting_down = False
        # the current state
        self.state = State.UNATTACHED
        self.epoch = 0
        self.leader_id = NO_ID
        self.voted_id = NO_ID
        self.high_watermark: int | None = None
        self._election_deadline = FOREVER
        self._fetch_deadline = FOREVER
        self._has_fetched = False  # follower: fetched from the leader since it began following (KIP-996)
        self._votes: dict[int, bool | None] = {}  # prospective or candidate: each voter's answer (None: none yet)
        self._leader: _LeaderData | None = None
        self._unacked: set[int] = set()  # resigned: voters that have not acknowledged EndQuorumEpoch
        self._successors: tuple[int, ...] = ()
        self._announce_pending = False
        self.fetching_snapshot: tuple[int, int] | None = None  # a follower fetching the leader's snapshot
        self._snapshot_position = 0
        self._initialize(stored, now_ms)

    # ------------------------------------------------------------------------------------------ reading

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def is_leader(self) -> bool:
        return self.state is State.LEADER

    @property
    def is_voter(self) -> bool:
        return self.local_id in self.voters

    @property
    def remote_voters(self) -> tuple[int, ...]:
        return tuple(v for v in self.voters if v != self.local_id)

    def election(self) -> ElectionState:
        if self.state is State.PROSPECTIVE:
            # what the state it came from persisted: a prospective never writes the file but to record a vote
            if self.leader_id != NO_ID and self.leader_id != self.local_id:
                return ElectionState(self.epoch, leader_id=self.leader_id, voted_id=self.voted_id, voters=self.voters)
            return ElectionState(self.epoch, voted_id=self.voted_id, voters=self.voters)
        if self.state is State.CANDIDATE:
            return ElectionState(self.epoch, voted_id=self.local_id, voters=self.voters)
        if self.state in (State.LEADER, State.RESIGNED):
            return ElectionState(self.epoch, leader_id=self.local_id, voters=self.voters)
        if self.state is State.FOLLOWER:  # with the vote it gave in this epoch, if any (Kafka keeps it too)
            return ElectionState(self.epoch, leader_id=self.leader_id, voted_id=self.voted_id, voters=self.voters)
        return ElectionState(self.epoch, voted_id=self.voted_id, voters=self.voters)

    def take_effects(self) -> list[Effect]:
        out, self._effects = self._effects, []
        return out

    def replica_progress(self) -> dict[int, tuple[int, int]]:
        """Leader only: {voter: (end offset or -1, last fetch ms or -1)}, the leader's own end included."""
        if self._leader is None:
            return {}
        return {r: (-1 if p.end_offset is None else p.end_offset, p.last_fetch_ms)
                for r, p in self._leader.progress.items()}

    def __repr__(self) -> str:
        return (f"RaftQuorum(node={self.local_id}, {self.state.value}, epoch={self.epoch}, leader={self.leader_id}, "
                f"voted={self.voted_id}, hw={self.high_watermark})")

    # ------------------------------------------------------------------------------------- start-up

    def _initialize(self, stored: ElectionState | None, now: int) -> None:
        election = stored or ElectionState(0, voters=self.voters)
        log_epoch = self.log.last_epoch()
        if not self.is_voter:
            # an observer: it only follows (a node removed from the voters that led or stood is one now too)
            if election.epoch < log_epoch:
                self._become(State.UNATTACHED, log_epoch, now)
            elif election.has_leader and election.leader_id != self.local_id:
                self._become(State.FOLLOWER, election.epoch, now, leader=election.leader_id)
            else:
                self._become(State.UNATTACHED, election.epoch, now)
            self._changed()
            self._persist()
            return
        if election.epoch < log_epoch:
            # the file is older than the log (lost, or written by an older version): start over at the log's epoch
            self._become(State.UNATTACHED, log_epoch, now)
        elif election.leader_id == self.local_id:
            # we led this epoch and stopped: never lead it again (its log may have been lost with us)
            self.epoch, self.leader_id = election.epoch, self.local_id
            self._set_resigned(now, ())
            self._election_deadline = now + self._random_election_timeout()
        elif election.voted_id == self.local_id:
            self.epoch = election.epoch
            self._set_candidate(now)
        elif election.has_leader and election.leader_id in self.voters:
            self._become(State.FOLLOWER, election.epoch, now, leader=election.leader_id, voted=election.voted_id)
        elif election.has_voted:
            # a vote given in this epoch is kept, also when the leader it then learned is no longer a voter
            self._become(State.VOTED, election.epoch, now, voted=election.voted_id)
        else:
            self._become(State.UNATTACHED, election.epoch, now)
        self._changed()
        self._persist()
        if len(self.voters) == 1 and self.state is not State.CANDIDATE:
            # the only voter: elect itself at once, through prospective and candidate (Kafka does the same)
            self._to_prospective(now)
        elif self.state is State.CANDIDATE:
            self._maybe_forward(now)

    # ---------------------------------------------------------------------------------- transitions

    def _random_election_timeout(self) -> int:
        t = self.config.election_timeout_ms
        return 0 if t == 0 else t + self.rng.randrange(t)

    def _persist(self) -> None:
        self._effects.append(Persist(self.election()))
        if self._announce_pending:
            self._announce()

    def _changed(self) -> None:
        """The epoch or leader changed: say so after the next Persist (or at once, for a change never persisted)."""
        self._announce_pending = True

    def _announce(self) -> None:
        self._announce_pending = False
        local = self.state is State.LEADER
        self._effects.append(LeaderChanged(self.epoch, self.leader_id, local))

    def _become(self, state: State, epoch: int, now: int, *, leader: int = NO_ID, voted: int = NO_ID,
                election_deadline: int | None = None) -> None:
        """Unattached, voted or follower (the states a voter takes when told of an epoch)."""
        old = (self.epoch, self.leader_id, self.state)
        self.state, self.epoch, self.leader_id, self.voted_id = state, epoch, leader, voted
        self._leader = None
        self._votes = {}
        self._has_fetched = False
        self._unacked = set()
        self._fetch_deadline = FOREVER
        self.fetching_snapshot = None
        if state is State.FOLLOWER:
            self._fetch_deadline = now + self.config.fetch_timeout_ms
            self._election_deadline = FOREVER
        else:
            self._election_deadline = (election_deadline if election_deadline is not None
                                       else now + self._random_election_timeout())
        self.requests.reset()
        if (old[0], old[1]) != (epoch, leader) or old[2] in (State.LEADER, State.RESIGNED):
            self._changed()

    def _to_unattached(self, epoch: int, now: int) -> None:
        """Unattached in a higher epoch, or (a prospective that lost) in the same one, keeping its vote."""
        if epoch < self.epoch or (epoch == self.epoch and self.state is not State.PROSPECTIVE):
            raise RaftError(f"unattached at epoch {epoch} from {self.state.value} in epoch {self.epoch}")
        # a candidate, resigned or unattached voter keeps the time left on its election timer, as does a prospective
        # whose pre-vote a majority has not refused (Kafka); any other state draws a new one
        keep = self._election_deadline if self.state in (
            State.CANDIDATE, State.UNATTACHED, State.VOTED, State.RESIGNED) else None
        if self.state is State.PROSPECTIVE and not self._vote_rejected():
            keep = self._election_deadline
        voted = self.voted_id if epoch == self.epoch else NO_ID
        self._become(State.VOTED if voted != NO_ID else State.UNATTACHED, epoch, now, voted=voted,
                     election_deadline=keep)
        self._persist()

    def _to_voted(self, epoch: int, candidate: int, now: int) -> None:
        self._become(State.VOTED, epoch, now, voted=candidate)
        self._persist()

    def _to_follower(self, epoch: int, leader: int, now: int) -> None:
        if leader == self.local_id:
            raise RaftError(f"told that this node ({leader}) leads epoch {epoch}, which it does not")
        if epoch < self.epoch or (epoch == self.epoch and self.state in (State.LEADER, State.FOLLOWER)):
            raise RaftError(f"follower of {leader} in epoch {epoch} from {self.state.value} in epoch {self.epoch}")
        # the vote given in this epoch is kept: a voter never votes twice in one epoch (Kafka's transitionToFollower)
        self._become(State.FOLLOWER, epoch, now, leader=leader, voted=self.voted_id if epoch == self.epoch else NO_ID)
        self._persist()

    def _set_candidate(self, now: int) -> None:
        self.state, self.leader_id, self.voted_id = State.CANDIDATE, NO_ID, self.local_id
        self._leader = None
        self._has_fetched = False
        self._fetch_deadline = FOREVER
        self._election_deadline = now + self._random_election_timeout()
        self._votes = {v: None for v in self.voters}
        self._votes[self.local_id] = True
        self.fetching_snapshot = None
        self.requests.reset()
        self._changed()

    def _to_prospective(self, now: int) -> None:
        """KIP-996: before it bumps the epoch a voter asks the others, in its current epoch, whether they would vote
        for it. Nothing is persisted (the epoch, the leader it knew and its vote stay as they were)."""
        if self.state in (State.LEADER, State.PROSPECTIVE):
            raise RaftError(f"a {self.state.value.lower()} cannot become prospective")
        if not self.is_voter:
            # no longer a voter (removed from the voter set): an observer never stands
            self._become(State.UNATTACHED, self.epoch, now)
            self._persist()
            return
        if self.state is State.CANDIDATE:
            self.leader_id = NO_ID  # a candidate keeps its vote for itself, and knows no leader
        self.state = State.PROSPECTIVE
        self._leader = None
        self._has_fetched = False
        self._fetch_deadline = FOREVER
        self._election_deadline = now + self._random_election_timeout()
        self._votes = {v: None for v in self.voters}
        self._votes[self.local_id] = True
        self.fetching_snapshot = None
        self.requests.reset()
        self._maybe_forward(now)

    def _to_candidate(self, now: int) -> None:
        if self.state is not State.PROSPECTIVE or not self.is_voter:
            raise RaftError(f"only a prospective voter can stand for election, not a {self.state.value.lower()}")
        self.epoch += 1
        self._set_candidate(now)
        self._persist()
        self._maybe_forward(now)

    def _maybe_forward(self, now: int) -> None:
        """A majority granted: a prospective stands for election, a candidate leads."""
        if sum(1 for g in self._votes.values() if g) < self.majority:
            return
        if self.state is State.PROSPECTIVE:
            self._to_candidate(now)
        elif self.state is State.CANDIDATE:
            self._to_leader(now)

    def _prospective_lost(self, now: int) -> None:
        """The pre-vote failed (a majority refused, or the election timed out): back to following the leader it
        knew, in the same epoch, or to unattached (keeping its vote)."""
        if self.leader_id != NO_ID and self.leader_id != self.local_id:
            self._to_follower(self.epoch, self.leader_id, now)
        else:
            self._to_unattached(self.epoch, now)

    def _to_leader(self, now: int) -> None:
        granting = frozenset(v for v, g in self._votes.items() if g)
        start = self.log.end_offset()
        self.state, self.leader_id, self.voted_id = State.LEADER, self.local_id, NO_ID
        self.high_watermark = None  # a new leader learns the committed end again (Kafka keeps it monotonic so)
        self._votes = {}
        self._election_deadline = self._fetch_deadline = FOREVER
        self._leader = _LeaderData(
            epoch_start_offset=start, granting=granting,
            progress={v: _ReplicaProgress() for v in self.voters},
            check_quorum_deadline=now + int(self.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR),
            begin_epoch_due=now)
        self.requests.reset()
        self._changed()
        self._persist()
        message = LeaderChangeMessage(
            version=0, leader_id=self.local_id,
            voters=[Voter(voter_id=v) for v in self.voters],
            granting_voters=[Voter(voter_id=v) for v in sorted(granting)])
        self._effects.append(BecomeLeader(self.epoch, start, message))

    def _set_resigned(self, now: int, successors: tuple[int, ...]) -> None:
        self.state, self.leader_id, self.voted_id = State.RESIGNED, self.local_id, NO_ID
        self._leader = None
        self._unacked = set(self.remote_voters)
        self._successors = successors
        self._election_deadline = now + self._random_election_timeout()
        self._fetch_deadline = FOREVER
        self.requests.reset()

    def _to_resigned(self, now: int) -> None:
        assert self._leader is not None
        progress = self._leader.progress
        # the other voters, furthest fetched first (ties by id): the first is the likeliest to win quickly
        def reached(v: int) -> int:
            end = progress[v].end_offset
            return -1 if end is None else end

        successors = tuple(sorted(self.remote_voters, key=lambda v: (-reached(v), v)))
        self._set_resigned(now, successors)
        self._announce()

    # -------------------------------------------------------------------------------------- timers

    def poll(self, now: int) -> int:
        """Act on the time: start elections, back off, send what is due. Returns ms until the next poll."""
        for _ in range(3):  # a transition (a new election, say) is acted on at once: its requests go out now
            before = (self.state, self.epoch)
            wait = self._poll_state(now)
            if wait > 0 or (self.state, self.epoch) == before:
                return wait
        return 0

    def _poll_state(self, now: int) -> int:
        if self.state is State.LEADER:
            return self._poll_leader(now)
        if self.state is State.CANDIDATE:
            return self._poll_candidate(now)
        if self.state is State.PROSPECTIVE:
            return self._poll_prospective(now)
        if self.state is State.FOLLOWER:
            return self._poll_follower(now)
        if self.state is State.RESIGNED:
            return self._poll_resigned(now)
        if self.shutting_down:
            return FOREVER
        if not self.is_voter:
            return self._poll_observer(now)
        if now >= self._election_deadline:
            self._to_prospective(now)
            return 0
        return self._election_deadline - now

    def _poll_observer(self, now: int) -> int:
        """An observer that knows no leader: Fetch from the bootstrap servers (or the voters), one at a time in
        turn; the answer names the leader (Kafka's observer with controller.quorum.bootstrap.servers)."""
        targets = self.bootstrap or self.remote_voters
        if not targets:
            return FOREVER
        for _ in range(len(targets)):
            dest = targets[self._next_bootstrap % len(targets)]
            if self.requests.conns.get(dest) is not None and self.requests.conns[dest].inflight is not None:
                return max(1, min(self.requests.wait_ms(dest, now), self.config.retry_backoff_ms))
            if self.requests.ready(dest, now):
                self._next_bootstrap += 1
                self._send(dest, now, FetchRequest(self.local_id, self.epoch, self.log.end_offset(),
                                                   self.log.last_epoch()))
                return max(1, self.requests.wait_ms(dest, now))
            self._next_bootstrap += 1
        return max(1, self.config.retry_backoff_ms)

    def set_voters(self, voters: tuple[int, ...] | list[int] | set[int], now: int) -> None:
        """The log's voter set changed (an append, a truncation or a snapshot; kraft.version 1)."""
        new = tuple(sorted(set(voters)))
        if new == self.voters:
            return
        was_voter = self.is_voter
        self.voters = new
        lead = self._leader
        if lead is not None:
            for v in new:
                lead.progress.setdefault(v, _ReplicaProgress())
            lead.fetched_voters &= set(new)
            # the new set gets a whole check-quorum period to fetch (a leader that was alone kept no timer)
            lead.check_quorum_deadline = now + int(self.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
            self._update_leader_high_watermark()
        if self.is_voter and not was_voter and self.state in (State.UNATTACHED, State.VOTED):
            self._election_deadline = now + self._random_election_timeout()
        if self.state in (State.PROSPECTIVE, State.CANDIDATE):
            self._votes = {v: self._votes.get(v) for v in new}
            if self.is_voter:
                self._votes[self.local_id] = True
                self._maybe_forward(now)
            elif self.state is State.PROSPECTIVE:
                self._prospective_lost(now)  # removed from the voters: it may no longer stand

    def _send(self, dest: int, now: int, request: Request) -> None:
        cid = self.requests.sent(dest, now)
        self._effects.append(Send(dest, cid, request))

    def _send_to(self, dests: tuple[int, ...] | set[int], now: int, build: Request) -> int:
        wait = FOREVER
        for d in sorted(dests):
            if self.requests.ready(d, now):
                self._send(d, now, build)
            wait = min(wait, self.requests.wait_ms(d, now))
        return wait

    def _poll_leader(self, now: int) -> int:
        lead = self._leader
        assert lead is not None
        if len(self.voters) == 1:
            quorum_left = FOREVER
        else:
            quorum_left = lead.check_quorum_deadline - now
        if self.shutting_down or quorum_left <= 0:
            self._to_resigned(now)
            return 0
        wait = quorum_left
        if now >= lead.begin_epoch_due:
            sent_wait = self._send_to(set(self.remote_voters), now,
                                      BeginQuorumEpochRequest(self.epoch, self.local_id))
            lead.begin_epoch_due = now + self.config.fetch_timeout_ms // 2
            wait = min(wait, sent_wait)
        return max(0, min(wait, lead.begin_epoch_due - now))

    def _poll_candidate(self, now: int) -> int:
        if self.shutting_down:
            return self._send_votes(now)
        if now >= self._election_deadline:
            # not elected in time (or refused, and the rest of the timeout waited out): ask again, with a
            # pre-vote first (Kafka 4's candidate has no backoff of its own)
            self._to_prospective(now)
            return 0
        return min(self._send_votes(now), self._election_deadline - now)

    def _poll_prospective(self, now: int) -> int:
        if self.shutting_down:
            return self._send_votes(now)
        if now >= self._election_deadline:
            self._prospective_lost(now)
            return 0
        return min(self._send_votes(now), self._election_deadline - now)

    def _vote_rejected(self) -> bool:
        granted = sum(1 for g in self._votes.values() if g is True)
        open_ = sum(1 for g in self._votes.values() if g is None)
        return granted + open_ < self.majority

    def _send_votes(self, now: int) -> int:
        if self._vote_rejected():
            return FOREVER
        unrecorded = {v for v, g in self._votes.items() if g is None}
        return self._send_to(unrecorded, now, VoteRequest(
            self.epoch, self.local_id, self.log.last_epoch(), self.log.end_offset(),
            pre_vote=self.state is State.PROSPECTIVE))

    def _poll_follower(self, now: int) -> int:
        if self.shutting_down:
            return FOREVER
        if now >= self._fetch_deadline:
            if not self.is_voter:
                # the leader stopped answering: look for it again through the bootstrap servers
                self._become(State.UNATTACHED, self.epoch, now)
                self._persist()
                return 0
            self._to_prospective(now)  # KIP-996: ask first, so a voter that was only cut off disturbs nobody
            return 0
        wait = self._fetch_deadline - now
        if self.requests.ready(self.leader_id, now):
            if self.fetching_snapshot is not None:
                self._send(self.leader_id, now, FetchSnapshotRequest(
                    self.local_id, self.epoch, self.fetching_snapshot, self._snapshot_position))
            else:
                self._send(self.leader_id, now, FetchRequest(
                    self.local_id, self.epoch, self.log.end_offset(), self.log.last_epoch()))
        return min(wait, self.requests.wait_ms(self.leader_id, now))

    def _poll_resigned(self, now: int) -> int:
        wait = self._send_to(self._unacked, now, EndQuorumEpochRequest(self.epoch, self.local_id, self._successors))
        if self.shutting_down:
            return wait
        if now >= self._election_deadline:
            # leave the epoch this node led: a higher one, so no answer can make it follow itself (Kafka)
            self._to_unattached(self.epoch + 1, now)
            return 0
        return min(wait, self._election_deadline - now)

    # ------------------------------------------------------------------------------------- requests

    def _consistent_leader(self, epoch: int, leader: int) -> bool:
        if leader != NO_ID and leader == self.local_id:
            return self.state is State.LEADER and epoch == self.epoch
        return epoch != self.epoch or leader == NO_ID or self.leader_id == NO_ID or leader == self.leader_id

    def _maybe_transition(self, leader: int, epoch: int, now: int) -> None:
        """A message from `leader` (or NO_ID) in `epoch`: follow it if it is news (Kafka's maybeTransition)."""
        if not self._consistent_leader(epoch, leader):
            raise RaftError(f"told that {leader} leads epoch {epoch}, but this node knows leader "
                            f"{self.leader_id} in epoch {self.epoch}")
        if epoch > self.epoch:
            if leader != NO_ID:
                self._to_follower(epoch, leader, now)
            else:
                self._to_unattached(epoch, now)
        elif leader != NO_ID and self.leader_id == NO_ID:
            self._to_follower(epoch, leader, now)

    def _leader_fields(self) -> tuple[int, int]:
        return self.leader_id, self.epoch

    def handle_vote(self, req: VoteRequest, now: int) -> VoteResponse:
        # a candidate has bumped its epoch past its last record's; a prospective asks in its current epoch, which
        # its log may already hold records of
        if req.pre_vote:
            bad_epoch = req.last_offset_epoch > req.candidate_epoch
        else:
            bad_epoch = req.last_offset_epoch >= req.candidate_epoch
        if req.last_offset < 0 or req.last_offset_epoch < 0 or bad_epoch:
            return self._vote_response(ErrorCode.INVALID_REQUEST, False)
        if req.candidate_epoch < self.epoch:
            return self._vote_response(ErrorCode.FENCED_LEADER_EPOCH, False)
        if req.candidate_id < 0:
            return self._vote_response(ErrorCode.INVALID_REQUEST, False)
        if req.candidate_epoch > self.epoch:
            self._to_unattached(req.candidate_epoch, now)  # a pre-vote from a higher epoch moves us too (Kafka)
        ours = (self.log.last_epoch(), self.log.end_offset())
        up_to_date = (req.last_offset_epoch, req.last_offset) >= ours
        granted = self._can_grant(req.candidate_id, up_to_date, req.pre_vote)
        if granted and not req.pre_vote and self.voted_id == NO_ID:
            if self.state is State.UNATTACHED:
                self._to_voted(req.candidate_epoch, req.candidate_id, now)
            elif self.state is State.PROSPECTIVE:
                # it goes on asking its pre-vote, but keeps (and persists) the vote it gave in this epoch
                self.voted_id = req.candidate_id
                self._election_deadline = now + self._random_election_timeout()
                self._persist()
        return self._vote_response(ErrorCode.NONE, granted)

    def _can_grant(self, candidate: int, up_to_date: bool, pre_vote: bool) -> bool:
        """Kafka's per-state rules (KIP-996): a pre-vote binds nobody, so any voter grants it to a log at least
        as up to date as its own, except a leader and a follower that has heard from its leader in this epoch
        (the leader is alive: nobody needs an election). A standard vote is given once per epoch, never while a
        leader is known."""
        if self.state is State.LEADER:
            return False
        if self.state is State.FOLLOWER:
            return pre_vote and up_to_date and not self._has_fetched
        if self.state in (State.CANDIDATE, State.RESIGNED):
            return pre_vote and up_to_date
        # unattached, voted or prospective
        if pre_vote:
            return up_to_date
        if self.voted_id != NO_ID:
            return self.voted_id == candidate
        if self.leader_id != NO_ID:
            return False
        return up_to_date and candidate != self.local_id

    def _vote_response(self, error: int, granted: bool) -> VoteResponse:
        return VoteResponse(int(error), self.leader_id, self.epoch, granted)

    def _epoch_response(self, error: int) -> EpochResponse:
        return EpochResponse(int(error), self.leader_id, self.epoch)

    def handle_begin_quorum_epoch(self, req: BeginQuorumEpochRequest, now: int) -> EpochResponse:
        if req.leader_epoch < self.epoch:
            return self._epoch_response(ErrorCode.FENCED_LEADER_EPOCH)
        if req.leader_id < 0 or (req.leader_id not in self.voters and not self.dynamic):
            return self._epoch_response(ErrorCode.INVALID_REQUEST)
        try:
            self._maybe_transition(req.leader_id, req.leader_epoch, now)
        except RaftError:
            return self._epoch_response(ErrorCode.INVALID_REQUEST)
        return self._epoch_response(ErrorCode.NONE)

    def handle_end_quorum_epoch(self, req: EndQuorumEpochRequest, now: int) -> EpochResponse:
        if req.leader_epoch < self.epoch:
            return self._epoch_response(ErrorCode.FENCED_LEADER_EPOCH)
        if req.leader_id < 0 or (req.leader_id not in self.voters and not self.dynamic):
            return self._epoch_response(ErrorCode.INVALID_REQUEST)
        try:
            self._maybe_transition(req.leader_id, req.leader_epoch, now)
        except RaftError:
            return self._epoch_response(ErrorCode.INVALID_REQUEST)
        if self.state is State.FOLLOWER and self.leader_id == req.leader_id:
            self._fetch_deadline = now + self._end_epoch_backoff(req.preferred_successors)
        return self._epoch_response(ErrorCode.NONE)

    def _end_epoch_backoff(self, successors: tuple[int, ...]) -> int:
        """0 for the first named successor, a strictly growing wait for the next ones, the maximum for others."""
        top = self.config.election_backoff_max_ms
        n = len(successors)
        position = successors.index(self.local_id) if self.local_id in successors else n
        if position == 0:
            return 0
        if position >= n:
            return top
        base = top >> (n - 1)
        return min(top, base << (position - 1))

    def handle_fetch(self, req: FetchRequest, now: int) -> FetchAnswer:
        """A Fetch of the metadata log from a voter (or an observer, replica id < 0 or not a voter)."""
        if req.fetch_offset < 0 or req.last_fetched_epoch < 0 or req.last_fetched_epoch > req.current_leader_epoch:
            return self._fetch_error(ErrorCode.INVALID_REQUEST)
        if req.current_leader_epoch < self.epoch:
            return self._fetch_error(ErrorCode.FENCED_LEADER_EPOCH)
        if req.current_leader_epoch > self.epoch:
            return self._fetch_error(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if self.state is not State.LEADER:
            return self._fetch_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if self.shutting_down:
            return self._fetch_error(ErrorCode.BROKER_NOT_AVAILABLE)
        lead = self._leader
        assert lead is not None
        hw = -1 if self.high_watermark is None else self.high_watermark
        if req.replica_id == self.local_id:
            return self._fetch_error(ErrorCode.INVALID_REQUEST)
        start = self.log.start_offset()
        snapshot = self.log.snapshot_id()
        if snapshot is not None and (
                req.fetch_offset == 0 or req.fetch_offset < start
                or (req.fetch_offset == start and req.last_fetched_epoch != snapshot[1])
                or req.last_fetched_epoch < snapshot[1]):
            # an empty follower, or one below our log start: the snapshot brings it up (Kafka's rules)
            return FetchAnswer(ErrorCode.NONE, self.local_id, self.epoch, hw, snapshot=snapshot)
        if not (start == 0 and req.fetch_offset == 0):
            end, epoch = self.log.end_offset_for_epoch(req.last_fetched_epoch)
            if epoch != req.last_fetched_epoch or end < req.fetch_offset:
                return FetchAnswer(ErrorCode.NONE, self.local_id, self.epoch, hw, diverging=(end, epoch))
        self._record_fetch(req.replica_id, req.fetch_offset, now)
        hw = -1 if self.high_watermark is None else self.high_watermark
        return FetchAnswer(ErrorCode.NONE, self.local_id, self.epoch, hw, read_from=req.fetch_offset)

    def _fetch_error(self, error: int) -> FetchAnswer:
        return FetchAnswer(int(error), self.leader_id, self.epoch)

    def _record_fetch(self, replica: int, offset: int, now: int) -> None:
        lead = self._leader
        assert lead is not None
        if replica < 0:
            return
        p = lead.progress.setdefault(replica, _ReplicaProgress())
        p.end_offset, p.last_fetch_ms = offset, now
        if replica not in self.voters:
            return  # an observer's progress is kept for DescribeQuorum but counts for nothing
        lead.fetched_voters.add(replica)
        if len(lead.fetched_voters) >= self.majority - 1:
            lead.fetched_voters.clear()
            lead.check_quorum_deadline = now + int(self.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
        self._update_leader_high_watermark()

    def leader_flushed(self, end_offset: int, now: int) -> None:
        """The leader's log is durable up to `end_offset` (after the LeaderChangeMessage, after each append)."""
        if self._leader is None:
            return
        p = self._leader.progress[self.local_id]
        if p.end_offset is not None and end_offset < p.end_offset:
            raise RaftError(f"the leader's end offset went back from {p.end_offset} to {end_offset}")
        p.end_offset, p.last_fetch_ms = end_offset, now
        self._update_leader_high_watermark()

    def _update_leader_high_watermark(self) -> None:
        lead = self._leader
        assert lead is not None
        ends = sorted((lead.progress.get(v, _ReplicaProgress()).end_offset for v in self.voters),
                      key=lambda e: -1 if e is None else e, reverse=True)
        candidate = ends[len(self.voters) // 2]
        if candidate is None or candidate <= lead.epoch_start_offset:
            return  # nothing of this epoch is on a majority yet
        if self.high_watermark is None or candidate > self.high_watermark:
            self.high_watermark = candidate
            self._effects.append(HighWatermark(candidate))

    def resign(self, now: int) -> None:
        """Graceful shutdown: a leader hands over (EndQuorumEpoch); no node starts a new election after this."""
        self.shutting_down = True
        if self.state is State.LEADER:
            self._to_resigned(now)

    def step_down(self, now: int) -> None:
        """A leader that is no longer a voter (its removal is committed, KIP-853) hands over with EndQuorumEpoch;
        unlike `resign` it goes on as an observer afterwards."""
        if self.state is State.LEADER:
            self._to_resigned(now)

    @property
    def shutdown_complete(self) -> bool:
        """True once stopping loses nothing: not leading (or resigned and every other voter acknowledged, or a
        successor is known)."""
        if self.state is State.LEADER:
            return False
        if self.state is State.RESIGNED:
            return not self._unacked or len(self.voters) == 1
        return True

    # ------------------------------------------------------------------------------------ responses

    def request_failed(self, dest: int, correlation_id: int, now: int) -> None:
        """The request could not be sent or got no answer in time: back off before the next to `dest`."""
        if self.requests.expected(dest, correlation_id):
            self.requests.answered(dest, now, ok=False)

    def _common_response(self, error: int, leader: int, epoch: int, now: int) -> bool | None:
        """Kafka's maybeHandleCommonResponse: True/False when the response is dealt with (success or not),
        None when the caller goes on with it."""
        if epoch < self.epoch or error == ErrorCode.UNKNOWN_LEADER_EPOCH:
            return True
        if (epoch > self.epoch or error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER)):
            self._maybe_transition(leader, epoch, now)
            return True
        if epoch == self.epoch and leader != NO_ID and self.leader_id == NO_ID:
            self._to_follower(epoch, leader, now)
            return None if error == ErrorCode.NONE else True
        if error == ErrorCode.BROKER_NOT_AVAILABLE:
            return False
        return None

    def _response(self, src: int, cid: int, now: int, error: int, leader: int, epoch: int) -> bool:
        """Shared opening of every response: is it expected, and does it change the epoch or leader. Returns
        True when the caller should go on with the response's body."""
        if not self.requests.expected(src, cid):
            return False  # an answer to a request of an earlier state
        try:
            handled = self._common_response(error, leader, epoch, now)
        except RaftError:
            self.requests.answered(src, now, ok=False)
            raise
        if handled is not None:
            # a transition may have reset the connections; mark this one answered either way
            if self.requests.expected(src, cid):
                self.requests.answered(src, now, ok=handled)
            return False
        if error != ErrorCode.NONE:
            self.requests.answered(src, now, ok=False)
            return False
        self.requests.answered(src, now, ok=True)
        return True

    def handle_vote_response(self, src: int, cid: int, resp: VoteResponse, now: int) -> None:
        if not self._response(src, cid, now, resp.error_code, resp.leader_id, resp.leader_epoch):
            return
        if self.state not in (State.PROSPECTIVE, State.CANDIDATE) or src not in self._votes:
            return
        if resp.vote_granted:
            if self._votes[src] is not False:
                self._votes[src] = True
            self._maybe_forward(now)
        else:
            if self._votes[src] is not True:
                self._votes[src] = False
            if self.state is State.PROSPECTIVE and self._vote_rejected():
                self._prospective_lost(now)
            # a refused candidate stops asking and waits out its election timeout, then asks a pre-vote again

    def handle_vote_unsupported(self, src: int, cid: int, now: int) -> None:
        """A voter does not serve Vote v2, so it cannot answer a pre-vote: a prospective stands for election at
        once (Kafka's rule while some voters run a version before KIP-996).  In any other state it is an
        unexpected error, retried after the backoff (Kafka's handleVoteResponse), not at once."""
        if not self.requests.expected(src, cid):
            return
        prospective = self.state is State.PROSPECTIVE
        self.requests.answered(src, now, ok=prospective)
        if prospective:
            self._to_candidate(now)

    def handle_begin_quorum_epoch_response(self, src: int, cid: int, resp: EpochResponse, now: int) -> None:
        if not self._response(src, cid, now, resp.error_code, resp.leader_id, resp.leader_epoch):
            return
        if self.state is State.LEADER and self._leader is not None:
            self._leader.acknowledged.add(src)

    def handle_end_quorum_epoch_response(self, src: int, cid: int, resp: EpochResponse, now: int) -> None:
        if not self._response(src, cid, now, resp.error_code, resp.leader_id, resp.leader_epoch):
            return
        if self.state is State.RESIGNED:
            self._unacked.discard(src)

    def handle_fetch_response(self, src: int, cid: int, resp: FetchResult, now: int) -> FetchOutcome:
        """A follower's Fetch came back. APPEND: append the response's records, then `follower_appended`."""
        if not self._response(src, cid, now, resp.error_code, resp.leader_id, resp.leader_epoch):
            return FetchOutcome(FetchAction.IGNORE)
        if self.state is not State.FOLLOWER or src != self.leader_id:
            return FetchOutcome(FetchAction.IGNORE)
        self._fetch_deadline = now + self.config.fetch_timeout_ms
        self._has_fetched = True
        if resp.diverging is not None and resp.diverging[1] >= 0:
            offset = self._truncation_offset(*resp.diverging)
            if self.high_watermark is not None and offset < self.high_watermark:
                raise RaftError(f"the leader asked for truncation to offset {offset}, below the high watermark "
                                f"{self.high_watermark}")
            self._effects.append(Truncate(offset))
            return FetchOutcome(FetchAction.TRUNCATED)
        if resp.snapshot is not None:
            if resp.snapshot[0] < 0 or resp.snapshot[1] < 0:
                return FetchOutcome(FetchAction.IGNORE)  # half a snapshot id: Kafka ignores it too
            self.fetching_snapshot, self._snapshot_position = resp.snapshot, 0
            return FetchOutcome(FetchAction.SNAPSHOT, snapshot=resp.snapshot)
        return FetchOutcome(FetchAction.APPEND, resp.high_watermark)

    def handle_fetch_snapshot_response(self, src: int, cid: int, resp: FetchSnapshotResult,
                                       now: int) -> FetchOutcome:
        """A follower's FetchSnapshot came back with `resp.chunk_bytes` bytes of the snapshot at `resp.position`."""
        # SNAPSHOT_NOT_FOUND and POSITION_OUT_OF_RANGE drop the fetch (below); any other error is the usual kind
        not_found = resp.error_code in (ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE)
        if not self._response(src, cid, now, ErrorCode.NONE if not_found else resp.error_code, resp.leader_id,
                              resp.leader_epoch):
            return FetchOutcome(FetchAction.IGNORE)
        wanted = self.fetching_snapshot
        if self.state is not State.FOLLOWER or src != self.leader_id or wanted is None:
            return FetchOutcome(FetchAction.IGNORE)
        self._fetch_deadline = now + self.config.fetch_timeout_ms
        self._has_fetched = True
        if (not_found or resp.snapshot != wanted or resp.position != self._snapshot_position or resp.size <= 0
                or resp.chunk_bytes <= 0 or resp.position + resp.chunk_bytes > resp.size):
            # the leader no longer has it (or answered about something else): fetch again, which names the
            # snapshot to take now
            self.fetching_snapshot = None
            return FetchOutcome(FetchAction.RESTART, snapshot=wanted)
        self._snapshot_position += resp.chunk_bytes
        if self._snapshot_position < resp.size:
            return FetchOutcome(FetchAction.CHUNK, snapshot=wanted)
        return FetchOutcome(FetchAction.INSTALL, snapshot=wanted)

    def snapshot_installed(self, now: int) -> None:
        """The snapshot being fetched is whole and installed (the log now starts at its end): fetch from there."""
        snapshot, self.fetching_snapshot = self.fetching_snapshot, None
        if snapshot is None:
            return
        self._fetch_deadline = now + self.config.fetch_timeout_ms if self.state is State.FOLLOWER else FOREVER
        if self.high_watermark is None or snapshot[0] > self.high_watermark:
            self.high_watermark = snapshot[0]  # a snapshot holds only committed records

    def snapshot_failed(self) -> None:
        """The fetched snapshot could not be installed (it did not read back whole): ask again."""
        self.fetching_snapshot = None

    def note_snapshot_fetch(self, replica: int, now: int) -> None:
        """Leader: a voter is fetching our snapshot; it counts as fetching for check-quorum (Kafka)."""
        lead = self._leader
        if lead is None or replica not in self.voters or replica == self.local_id:
            return
        p = lead.progress.setdefault(replica, _ReplicaProgress())
        p.last_fetch_ms = now
        lead.fetched_voters.add(replica)
        if len(lead.fetched_voters) >= self.majority - 1:
            lead.fetched_voters.clear()
            lead.check_quorum_deadline = now + int(self.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)

    def _truncation_offset(self, end_offset: int, epoch: int) -> int:
        if epoch == 0:
            return min(end_offset, self.log.end_offset())
        local_end, local_epoch = self.log.end_offset_for_epoch(epoch)
        return min(local_end, end_offset) if local_epoch == epoch else local_end

    def follower_appended(self, high_watermark: int, now: int) -> None:
        """The records of the last APPEND outcome are in the log: take the leader's high watermark, capped at our
        own end offset."""
        if self.state is not State.FOLLOWER or high_watermark < 0:
            return
        new = min(self.log.end_offset(), high_watermark)
        if self.high_watermark is None or new > self.high_watermark:
            self.high_watermark = new
            self._effects.append(HighWatermark(new))
