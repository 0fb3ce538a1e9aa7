"""Share sessions (KIP-932): a share consumer's conversation with one share-partition leader.

Strategy: sans-IO bookkeeping, one session per (group id, member id), as Kafka's ShareSessionCache.  A ShareFetch
with epoch 0 opens a session (replacing the member's old one) with the partitions it names and may not carry
acknowledgements (INVALID_REQUEST); one with epoch -1 closes it; any other epoch must be the session's next
(INVALID_SHARE_SESSION_EPOCH, or SHARE_SESSION_NOT_FOUND with no session) and adds the partitions it names and
drops its forgotten ones.  ShareAcknowledge never opens a session: epoch 0 is INVALID_SHARE_SESSION_EPOCH.  At
most group.share.max.share.sessions sessions live at once (SHARE_SESSION_LIMIT_REACHED).  A session belongs to
the connection that opened it: when that connection closes the session ends, and the caller releases the records
its member held, as Kafka does when a share session is closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from kjbod.protocol.errors import ErrorCode

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
DEFAULT_MAX_SESSIONS = 2000  # Kafka 4.3's group.share.max.share.sessions

Partition = tuple[UUID, int]


class SessionError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`: past the int32 maximum it wraps to 1 (0 and -1 mean open and close)."""
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    connection_id: int
    epoch: int  # the epoch the next request must carry
    partitions: dict[Partition, None] = field(default_factory=dict)  # in the order they were added


class ShareSessions:
    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def for_fetch(self, group_id: str, member_id: str, epoch: int, partitions: list[Partition],
                  forgotten: list[Partition], connection_id: int, *, acknowledging: bool
                  ) -> ShareSession:
        """The session a ShareFetch uses.  Epoch 0 replaces the member's old session (its records stay acquired
        by the member, as in Kafka); epoch -1 returns the session being closed: the caller removes it (`close`)
        and releases its member's records once answered."""
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            session = self.sessions.get(key)
            if session is None:
                raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"no share session for member {member_id}")
            return session
        if epoch == INITIAL_EPOCH:
            if acknowledging:
                raise SessionError(ErrorCode.INVALID_REQUEST,
                                   "a ShareFetch opening a share session (epoch 0) cannot acknowledge records")
            old = self.sessions.pop(key, None)
            if len(self.sessions) >= self.max_sessions:
                if old is not None:
                    self.sessions[key] = old
                raise SessionError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                                   f"the broker holds its limit of {self.max_sessions} share sessions")
            session = ShareSession(group_id, member_id, connection_id, next_epoch(0), dict.fromkeys(partitions))
            self.sessions[key] = session
            return session
        session = self._continued(key, epoch)
        for p in partitions:
            session.partitions.setdefault(p, None)
        for p in forgotten:
            session.partitions.pop(p, None)
        return session

    def for_acknowledge(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a ShareAcknowledge uses (epoch -1: the one it closes; the caller calls `close`)."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                               "ShareAcknowledge cannot open a share session (epoch 0)")
        if epoch == FINAL_EPOCH:
            session = self.sessions.get(key)
            if session is None:
                raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"no share session for member {member_id}")
            return session
        return self._continued(key, epoch)

    def has_group(self, group_id: str) -> bool:
        """True while some member of the group has a share session here."""
        return any(g == group_id for g, _m in self.sessions)

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def connection_closed(self, connection_id: int) -> list[ShareSession]:
        """Ends the sessions the connection opened; returns them (their members' records are to be released)."""
        gone = [s for s in self.sessions.values() if s.connection_id == connection_id]
        for s in gone:
            del self.sessions[(s.group_id, s.member_id)]
        return gone

    def _continued(self, key: tuple[str, str], epoch: int) -> ShareSession:
        session = self.sessions.get(key)
        if session is None:
            raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"no share session for member {key[1]}")
        if session.epoch != epoch:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                               f"share session epoch {epoch} is not the expected {session.epoch}")
        session.epoch = next_epoch(epoch)
        return session
