"""FetchSnapshot (key 59), versions 0-1, on the controller listener only.

Version notes: v0 baseline (a chunk of a metadata snapshot from Position); v1 adds the replica directory id and
the leader's endpoint.  Served from the metadata log of the controller in this process
(kjbod.controller.metadata_fetch); brokers use it when the log they follow starts with a snapshot, and the voters
of a controller quorum when they are behind the leader's log start (kjbod.controller.raft_driver, which reads the
snapshot on its file worker).
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import FetchSnapshotRequest, FetchSnapshotResponse


@api(FetchSnapshotRequest)
async def handle(node, request, body: FetchSnapshotRequest) -> FetchSnapshotResponse:
    raft = getattr(node, "raft", None)
    if raft is not None:
        return await raft.fetch_snapshot(body, request.api_version)
    return node.metadata_fetch.fetch_snapshot(body, request.api_version)
