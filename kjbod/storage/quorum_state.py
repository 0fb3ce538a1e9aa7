"""The quorum-state file: what a KRaft voter must remember across a restart (its epoch, its vote, the leader).

Strategy: one small JSON object in the metadata log's partition directory (`__cluster_metadata-0/quorum-state`),
rewritten whole on every durable change of the election state with :meth:`LogDirIO.write_atomic` (temp file,
fsync, rename, fsync of the directory), so a crash leaves the old state or the new one, never a torn one. A vote
is durable before the Vote response that grants it is sent (kjbod.raft.quorum asks for the write first).

Layout: Kafka's `QuorumStateData` in its JSON form, version 0 (a static voter set, `controller.quorum.voters`),
with Kafka's extra `data_version` member last; keys in this order, no spaces, UTF-8, no trailing newline::

    {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

(one line in the file). `leaderId` and `votedId` are -1 when unknown; Kafka writes `clusterId` empty and
`appliedOffset` 0 and never reads them. A version 1 file (dynamic quorums, KIP-853: `votedDirectoryId`, no voter
list) is read too, so a state written by a newer Kafka is understood; it is refused if it names a voted directory,
since kjbod does not serve dynamic voter sets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kjbod.storage.errors import StorageError
from kjbod.storage.fsio import LogDirIO

QUORUM_STATE_FILE = "quorum-state"
DATA_VERSION = 0
NO_ID = -1
_ZERO_UUID_B64 = "AAAAAAAAAAAAAAAAAAAAAA"


class QuorumStateError(StorageError):
    """The quorum-state file cannot be read as Kafka's layout; the message names the file and the problem."""


@dataclass(frozen=True)
class ElectionState:
    """A voter's durable election state: the epoch, the leader it knows and the candidate it voted for in that
    epoch (Kafka's ElectionState: a voter that voted keeps its vote once it learns the epoch's leader, so that it
    never votes twice in one epoch, also after a restart)."""

    epoch: int
    leader_id: int = NO_ID
    voted_id: int = NO_ID
    voters: tuple[int, ...] = ()

    @property
    def has_leader(self) -> bool:
        return self.leader_id != NO_ID

    @property
    def has_voted(self) -> bool:
        return self.voted_id != NO_ID

    def render(self) -> bytes:
        obj: dict[str, Any] = {
            "clusterId": "",
            "leaderId": self.leader_id,
            "leaderEpoch": self.epoch,
            "votedId": self.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in sorted(self.voters)],
            "data_version": DATA_VERSION,
        }
        return json.dumps(obj, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, data: bytes, where: str = QUORUM_STATE_FILE) -> ElectionState:
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise QuorumStateError(f"{where} is not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise QuorumStateError(f"{where} holds {type(obj).__name__}, not a JSON object")
        version = obj.get("data_version")
        if type(version) is not int:
            raise QuorumStateError(f"{where} does not have a data_version field")
        if version not in (0, 1):
            raise QuorumStateError(f"{where}: data_version ({version}) is not within the min (0) and max (1) "
                                   "supported version")

        def int_field(name: str, default: int = NO_ID) -> int:
            value = obj.get(name, default)
            if type(value) is not int or not -(1 << 31) <= value < (1 << 31):
                raise QuorumStateError(f"{where}: {name} is {value!r}, not a 32-bit integer")
            return value

        voters: tuple[int, ...] = ()
        if version == 0:
            raw = obj.get("currentVoters")
            if raw is not None:
                if not isinstance(raw, list) or not all(isinstance(v, dict) for v in raw):
                    raise QuorumStateError(f"{where}: currentVoters is not a list of objects")
                ids = []
                for v in raw:
                    vid = v.get("voterId")
                    if type(vid) is not int:
                        raise QuorumStateError(f"{where}: voterId {vid!r} is not an integer")
                    ids.append(vid)
                voters = tuple(sorted(ids))
        else:
            directory = obj.get("votedDirectoryId", _ZERO_UUID_B64)
            if directory not in (_ZERO_UUID_B64, None):
                raise QuorumStateError(f"{where} names a voted directory ({directory}): a dynamic quorum "
                                       "(KIP-853), which kjbod does not serve")
        leader, voted = int_field("leaderId"), int_field("votedId")
        return cls(epoch=int_field("leaderEpoch"), leader_id=leader, voted_id=voted, voters=voters)


class QuorumStateStore:
    """Reads and writes `quorum-state` in one partition directory, through the dir's file-I/O seam (run it on
    the dir's worker: every call here touches the disk)."""

    def __init__(self, io: LogDirIO, partition_dir: str) -> None:
        self.io = io
        self.path = io.join(partition_dir, QUORUM_STATE_FILE)

    def read(self) -> ElectionState | None:
        """The stored state, or None when there is no file yet (a voter that never voted nor knew a leader)."""
        data = self.io.read_bytes_or_none(self.path)
        if data is None:
            return None
        return ElectionState.parse(data, self.path)

    def write(self, state: ElectionState) -> None:
        self.io.write_atomic(self.path, state.render())

    def clear(self) -> None:
        self.io.unlink(self.path, missing_ok=True)
        self.io.unlink(self.path + ".tmp", missing_ok=True)
