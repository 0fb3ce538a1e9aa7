"""The persister over the share coordinator's RPCs: share-partition state kept in `__share_group_state`.

Strategy, Kafka's DefaultStatePersister's: each call takes one group's share-partitions, finds the share
coordinator of each ("group:topicId:partition" hashed onto `__share_group_state`, whose leader is the coordinator:
the answer FindCoordinator gives, the topic made on first use), sends one request per coordinator, and answers
each partition on its own.  A partition answered NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION (or whose coordinator cannot be reached) is asked again,
its coordinator looked up afresh, with a backoff that doubles from RETRY_BACKOFF_S to RETRY_BACKOFF_MAX_S (with
jitter), at most MAX_ATTEMPTS times in all, as Kafka's; then it is answered with the last code.  When this broker is the coordinator the request goes straight to the same
handler code a remote request reaches, without a socket.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any
from uuid import UUID

import structlog

from kjbod.broker.coordinator_host import partition_for
from kjbod.broker.share.coordinator import SHARE_STATE_TOPIC, coordinator_of
from kjbod.broker.share.persister import (
    InitializeData,
    Key,
    PartitionAnswer,
    ReadAnswer,
    StateBatch,
    SummaryAnswer,
    WriteData,
)
from kjbod.broker.share.state_records import coordinator_key
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    DeleteShareGroupStateRequest,
    InitializeShareGroupStateRequest,
    ReadShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest,
    WriteShareGroupStateRequest,
)
from kjbod.protocol.generated import delete_share_group_state_request as delete_req
from kjbod.protocol.generated import initialize_share_group_state_request as init_req
from kjbod.protocol.generated import read_share_group_state_request as read_req
from kjbod.protocol.generated import read_share_group_state_summary_request as summary_req
from kjbod.protocol.generated import write_share_group_state_request as write_req

log = structlog.get_logger("kjbod.share")

# UNKNOWN_TOPIC_OR_PARTITION too, as Kafka's persister: the coordinator's metadata may not have a new topic yet.
RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
# Kafka's persister's: 5 attempts, backoff from 1 s doubling up to 30 s, 20% jitter.
MAX_ATTEMPTS = 5
RETRY_BACKOFF_S = 1.0
RETRY_BACKOFF_MAX_S = 30.0
RETRY_JITTER = 0.2
REQUEST_TIMEOUT_S = 30.0

INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
VERSIONS = {INITIALIZE: 0, READ: 0, WRITE: 1, DELETE: 0, SUMMARY: 1}


def _by_topic(items: list[tuple[Key, Any]]) -> dict[UUID, list[tuple[int, Any]]]:
    out: dict[UUID, list[tuple[int, Any]]] = {}
    for (topic_id, partition), item in items:
        out.setdefault(topic_id, []).append((partition, item))
    return out


def _body(api_key: int, group_id: str, items: list[tuple[Key, Any]]) -> Any:
    topics = _by_topic(items)
    if api_key == INITIALIZE:
        return InitializeShareGroupStateRequest(group_id=group_id, topics=[init_req.InitializeStateData(
            topic_id=t, partitions=[init_req.PartitionData(partition=p, state_epoch=d.state_epoch,
                                                           start_offset=d.start_offset) for p, d in ps])
            for t, ps in topics.items()])
    if api_key == READ:
        return ReadShareGroupStateRequest(group_id=group_id, topics=[read_req.ReadStateData(
            topic_id=t, partitions=[read_req.PartitionData(partition=p, leader_epoch=e) for p, e in ps])
            for t, ps in topics.items()])
    if api_key == WRITE:
        return WriteShareGroupStateRequest(group_id=group_id, topics=[write_req.WriteStateData(
            topic_id=t, partitions=[write_req.PartitionData(
                partition=p, state_epoch=w.state_epoch, leader_epoch=w.leader_epoch, start_offset=w.start_offset,
                delivery_complete_count=w.delivery_complete_count,
                state_batches=[write_req.StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                                                    b.delivery_count) for b in w.batches]) for p, w in ps])
            for t, ps in topics.items()])
    if api_key == DELETE:
        return DeleteShareGroupStateRequest(group_id=group_id, topics=[delete_req.DeleteStateData(
            topic_id=t, partitions=[delete_req.PartitionData(partition=p) for p, _ in ps])
            for t, ps in topics.items()])
    return ReadShareGroupStateSummaryRequest(group_id=group_id, topics=[summary_req.ReadStateSummaryData(
        topic_id=t, partitions=[summary_req.PartitionData(partition=p, leader_epoch=e) for p, e in ps])
        for t, ps in topics.items()])


def _answers(api_key: int, resp: Any) -> dict[Key, PartitionAnswer]:
    out: dict[Key, PartitionAnswer] = {}
    for t in resp.results:
        for r in t.partitions:
            key = (t.topic_id, r.partition)
            if api_key == READ:
                out[key] = ReadAnswer(r.error_code, r.error_message, state_epoch=r.state_epoch,
                                      start_offset=r.start_offset,
                                      batches=tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                                                               b.delivery_count) for b in r.state_batches))
            elif api_key == SUMMARY:
                out[key] = SummaryAnswer(r.error_code, r.error_message, state_epoch=r.state_epoch,
                                         leader_epoch=r.leader_epoch, start_offset=r.start_offset,
                                         delivery_complete_count=r.delivery_complete_count)
            else:
                out[key] = PartitionAnswer(r.error_code, r.error_message)
    return out


async def _serve_here(node: Any, api_key: int, body: Any) -> Any:
    from kjbod.broker.handlers import (
        delete_share_group_state,
        initialize_share_group_state,
        read_share_group_state,
        read_share_group_state_summary,
        write_share_group_state,
    )

    serve: dict[int, Callable[..., Any]] = {
        INITIALIZE: initialize_share_group_state.serve, READ: read_share_group_state.serve,
        WRITE: write_share_group_state.serve, DELETE: delete_share_group_state.serve,
        SUMMARY: read_share_group_state_summary.serve}
    return await serve[api_key](node, body)


class RpcPersister:
    """Share-partition state through the share coordinators (see the module's text)."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self._conns: dict[int, Any] = {}

    # ------------------------------------------------------------------------------------------- the protocol
    async def initialize(self, group_id: str, partitions: list[InitializeData]) -> dict[Key, PartitionAnswer]:
        return await self._call(INITIALIZE, group_id, [((d.topic_id, d.partition), d) for d in partitions],
                                PartitionAnswer)

    async def read(self, group_id: str, partitions: list[tuple[UUID, int, int]]) -> dict[Key, ReadAnswer]:
        return await self._call(READ, group_id, [((t, p), e) for t, p, e in partitions], ReadAnswer)

    async def write(self, group_id: str, partitions: list[WriteData]) -> dict[Key, PartitionAnswer]:
        return await self._call(WRITE, group_id, [((w.topic_id, w.partition), w) for w in partitions],
                                PartitionAnswer)

    async def delete(self, group_id: str, partitions: list[Key]) -> dict[Key, PartitionAnswer]:
        return await self._call(DELETE, group_id, [(k, None) for k in partitions], PartitionAnswer)

    async def read_summary(self, group_id: str, partitions: list[tuple[UUID, int, int]]
                           ) -> dict[Key, SummaryAnswer]:
        return await self._call(SUMMARY, group_id, [((t, p), e) for t, p, e in partitions], SummaryAnswer)

    # ------------------------------------------------------------------------------------------- the engine
    async def _call(self, api_key: int, group_id: str, items: list[tuple[Key, Any]], answer: type) -> Any:
        pending = dict(items)
        out: dict[Key, Any] = {}
        backoff = RETRY_BACKOFF_S
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(backoff * random.uniform(1 - RETRY_JITTER, 1 + RETRY_JITTER))
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
            code, problem = await coordinator_of(self.node).ensure_topic()
            if code:
                for key in pending:
                    out[key] = answer(code, problem)
                continue
            by_node: dict[int, list[tuple[Key, Any]]] = {}
            for key, item in pending.items():
                leader = self._coordinator(group_id, key)
                if leader < 0:
                    out[key] = answer(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      f"{SHARE_STATE_TOPIC} has no leader for {coordinator_key(group_id, *key)}")
                else:
                    by_node.setdefault(leader, []).append((key, item))
            sent = await asyncio.gather(*(self._send(n, api_key, group_id, its, answer)
                                          for n, its in by_node.items()))
            for got in sent:
                out.update(got)
            pending = {k: v for k, v in pending.items() if out[k].error_code in RETRIABLE}
            if not pending:
                break
        if pending:
            log.info("share_state_call_gave_up", api_key=api_key, group_id=group_id, partitions=len(pending),
                     error_codes=sorted({out[k].error_code for k in pending}))
        return {k: out[k] for k, _ in items}

    def _coordinator(self, group_id: str, key: Key) -> int:
        topic = self.node.metadata.topic(SHARE_STATE_TOPIC)
        if topic is None or not topic.partitions:
            return -1
        p = partition_for(coordinator_key(group_id, *key), len(topic.partitions))
        part = topic.partitions.get(p)
        return part.leader if part is not None else -1

    async def _send(self, broker: int, api_key: int, group_id: str, items: list[tuple[Key, Any]],
                    answer: type) -> dict[Key, Any]:
        body = _body(api_key, group_id, items)
        try:
            if broker == self.node.node_id:
                resp = await _serve_here(self.node, api_key, body)
            else:
                conn = await self._connection(broker)
                resp = await conn.request(api_key, VERSIONS[api_key], body, REQUEST_TIMEOUT_S)
        except Exception as e:  # the coordinator is gone or unreachable: asked again after a fresh look-up
            self._conns.pop(broker, None)
            log.info("share_coordinator_unreachable", broker=broker, reason=str(e) or type(e).__name__)
            return {k: answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"share coordinator {broker} unreachable: {e}")
                    for k, _ in items}
        got = _answers(api_key, resp)
        return {k: got.get(k) or answer(ErrorCode.UNKNOWN_SERVER_ERROR, "the coordinator left this partition out")
                for k, _ in items}

    async def _connection(self, broker: int) -> Any:
        from kjbod.broker.txn.coordinator import open_broker_connection

        conn = self._conns.get(broker)
        if conn is not None and not conn.closed:
            return conn
        conn = await open_broker_connection(self.node, broker, f"kjbod-share-persister-{self.node.node_id}",
                                            REQUEST_TIMEOUT_S)
        self._conns[broker] = conn
        return conn

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
