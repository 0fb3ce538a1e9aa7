"""KIP-853 voter sets: who votes in the quorum when the voters live in the metadata log (kraft.version 1).

Strategy: a voter is a replica key (node id, directory id of its metadata log dir) plus where it can be reached
(one endpoint per controller listener) and the kraft.version levels it runs. `VoterSet` is an immutable mapping
from node id to `VoterNode`, read from and written as a VotersRecord; `parse_dynamic_voters` reads the
`--initial-controllers` text of `kjbod format` (Kafka's DynamicVoters format `id@host:port:directoryId,...`,
a host in brackets for IPv6), with Kafka's rules: ids unique, directory ids unique, none of them the zero Uuid.

kraft.version 0 is a static voter set (`controller.quorum.voters`, nothing of this module in the log); 1 is a
voter set in the log, changed with AddRaftVoter / RemoveRaftVoter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from uuid import UUID

from kjbod.protocol.generated.voters_record import Endpoint, KRaftVersionFeature, Voter, VotersRecord
from kjbod.storage import ids

KRAFT_VERSION = "kraft.version"
KRAFT_VERSION_0 = 0  # static voters (controller.quorum.voters)
KRAFT_VERSION_1 = 1  # voters in the log (KIP-853)
SUPPORTED_KRAFT_VERSIONS = (KRAFT_VERSION_0, KRAFT_VERSION_1)
ZERO_UUID = UUID(int=0)

_ENTRY = re.compile(r"^(?P<id>[0-9]+)@(?:\[(?P<host6>[^\]]+)\]|(?P<host>[^:\[\]]+)):(?P<port>[0-9]+):(?P<dir>.+)$")


def uuid_text(u: UUID) -> str:
    """Kafka's Uuid text of `u`."""
    return ids.uuid_to_str(u.bytes)


def parse_uuid(text: str) -> UUID:
    """Kafka's Uuid text -> UUID; ValueError naming the text when it is not one."""
    return UUID(bytes=ids.uuid_from_str(text.strip()))


@dataclass(frozen=True)
class VoterNode:
    node_id: int
    directory_id: UUID
    endpoints: tuple[tuple[str, str, int], ...]  # (listener name, host, port)
    supported: tuple[int, int] = (KRAFT_VERSION_0, KRAFT_VERSION_1)

    def endpoint(self, listener: str | None = None) -> tuple[str, int] | None:
        """(host, port) on `listener`, or on the first listener when none is named or it is not there."""
        for name, host, port in self.endpoints:
            if listener is None or name == listener:
                return host, port
        return (self.endpoints[0][1], self.endpoints[0][2]) if self.endpoints else None


@dataclass(frozen=True)
class VoterSet(Mapping[int, VoterNode]):
    """The voters of the quorum by node id."""

    nodes: tuple[VoterNode, ...] = field(default=())

    def __post_init__(self) -> None:
        ids = [n.node_id for n in self.nodes]
        if len(set(ids)) != len(ids):
            raise ValueError(f"a node id appears twice among the voters {ids}")
        object.__setattr__(self, "nodes", tuple(sorted(self.nodes, key=lambda n: n.node_id)))

    def __getitem__(self, node_id: int) -> VoterNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)

    def __iter__(self) -> Iterator[int]:
        return (n.node_id for n in self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def addresses(self, listener: str | None = None) -> dict[int, tuple[str, int]]:
        """{node id: (host, port)} on `listener` (the voters without an endpoint left out)."""
        out: dict[int, tuple[str, int]] = {}
        for n in self.nodes:
            ep = n.endpoint(listener)
            if ep is not None:
                out[n.node_id] = ep
        return out

    def directory_ids(self) -> dict[int, UUID]:
        return {n.node_id: n.directory_id for n in self.nodes}

    def to_record(self) -> VotersRecord:
        return VotersRecord(version=0, voters=[
            Voter(voter_id=n.node_id, voter_directory_id=n.directory_id,
                  endpoints=[Endpoint(name=name, host=host, port=port) for name, host, port in n.endpoints],
                  k_raft_version_feature=KRaftVersionFeature(min_supported_version=n.supported[0],
                                                             max_supported_version=n.supported[1]))
            for n in self.nodes])

    @classmethod
    def from_record(cls, record: VotersRecord) -> VoterSet:
        return cls(tuple(VoterNode(
            v.voter_id, v.voter_directory_id, tuple((e.name, e.host, e.port) for e in v.endpoints),
            (v.k_raft_version_feature.min_supported_version, v.k_raft_version_feature.max_supported_version))
            for v in record.voters))

    @classmethod
    def of(cls, nodes: Iterable[VoterNode]) -> VoterSet:
        return cls(tuple(nodes))


def parse_dynamic_voters(text: str, listener: str) -> VoterSet:
    """`id@host:port:directoryId,...` (kafka-storage.sh's --initial-controllers) -> the voters, each reached on
    `listener`; ValueError naming the entry that is wrong."""
    entries = [e.strip() for e in text.split(",")]
    if not text.strip() or any(not e for e in entries):
        raise ValueError("the list of initial controllers is empty, or has an empty entry")
    nodes: list[VoterNode] = []
    dirs: set[UUID] = set()
    for entry in entries:
        m = _ENTRY.match(entry)
        if m is None:
            raise ValueError(f"invalid initial controller {entry!r}: expected id@host:port:directoryId")
        port = int(m.group("port"))
        if port > 65535:
            raise ValueError(f"invalid port {port} in initial controller {entry!r}")
        try:
            directory = parse_uuid(m.group("dir"))
        except ValueError as e:
            raise ValueError(f"invalid directory id in initial controller {entry!r}: {e}") from None
        if directory == ZERO_UUID:
            raise ValueError(f"initial controller {entry!r} has the zero directory id")
        if directory in dirs:
            raise ValueError(f"directory id {m.group('dir')} appears twice among the initial controllers")
        node_id = int(m.group("id"))
        if any(n.node_id == node_id for n in nodes):
            raise ValueError(f"node id {node_id} appears twice among the initial controllers")
        dirs.add(directory)
        host = m.group("host6") or m.group("host")
        nodes.append(VoterNode(node_id, directory, ((listener, host, port),)))
    return VoterSet.of(nodes)
