"""The transaction coordinator sends WriteTxnMarkers at the highest version the partition leader serves: v2 (with
the markers' transaction version) to a peer that serves it, v1 to one that serves only v1 (Kafka before 4.2)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from handler_server import HandlerServer

from kjbod.broker.txn.coordinator import WRITE_TXN_MARKERS, TxnCoordinator
from kjbod.net.connection import ClientConnection
from kjbod.protocol.generated import RequestHeader, WriteTxnMarkersResponse
from kjbod.protocol.generated.write_txn_markers_response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
)


class Leader:
    """A partition leader that writes every marker it is sent and remembers each request's version."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []  # (version, transaction_version of the first marker)

    async def __call__(self, api_key: int, version: int, request: Any, header: RequestHeader) -> Any:
        assert api_key == WRITE_TXN_MARKERS
        self.seen.append((version, request.markers[0].transaction_version))
        return WriteTxnMarkersResponse(markers=[WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            WritableTxnMarkerTopicResult(name=t.name, partitions=[
                WritableTxnMarkerPartitionResult(partition_index=i, error_code=0) for i in t.partition_indexes])
            for t in m.topics]) for m in request.markers])


@pytest.mark.parametrize(("served", "expected"), [((1, 2), (2, 2)), ((1, 1), (1, 0))])
async def test_markers_go_at_the_version_the_leader_serves(served, expected) -> None:
    leader = Leader()
    server = await HandlerServer(leader).start()
    server.api_versions[WRITE_TXN_MARKERS] = served
    conn = await ClientConnection.open("127.0.0.1", server.port, client_id="t", connect_timeout=5)
    try:
        coordinator = object.__new__(TxnCoordinator)  # only its marker sender: the peer is broker 2
        coordinator.node = SimpleNamespace(node_id=1)
        coordinator._conns = {2: conn}
        out = await coordinator._send_to(2, 1000, 3, True, 0, [("t", 0), ("t", 1)], tv=2)
        assert out == {("t", 0): 0, ("t", 1): 0}
        assert leader.seen == [expected]
    finally:
        conn.close()
        await server.stop()
