"""The transaction coordinator's asyncio shell: which transactional ids this broker hosts, its log, the markers.

Strategy, the group coordinator's (kjbod.broker.groups.coordinator) applied to `__transaction_state`:

* a transactional id belongs to one partition of `__transaction_state` (the id's Java String.hashCode, made
  non-negative, modulo the topic's partition count), and the broker leading that partition is its coordinator;
  the topic is made on first use with Kafka's keys (transaction.state.log.num.partitions, .replication.factor,
  .min.isr as its min.insync.replicas, .segment.bytes; compacted);
* a partition newly led here is loaded from its log on its dir's worker (COORDINATOR_LOAD_IN_PROGRESS meanwhile);
  transactions found in PrepareCommit or PrepareAbort get their markers sent again, as Kafka's coordinator does
  after a failover; a partition led elsewhere now has its transactions dropped (NOT_COORDINATOR from then on);
* every change the sans-IO `TxnBook` (kjbod.broker.txn.state) decides is written as one record through the
  Produce path with acks=all before it counts (value version 1, the flexible layout, once transaction.version 1 is
  finalized);
* EndTxn: once the Prepare* record is committed the producer is answered, then the markers go to the leaders of
  the transaction's partitions (WriteTxnMarkers v2, each marker with the transaction version it ends by; this
  broker's own partitions are appended in-process), each partition retried until its leader takes it (a deleted
  topic's partitions are dropped), and at last the Complete* record is written.  EndTxn v5 (transaction.version 2)
  bumps the epoch and answers the id and epoch the producer goes on with; one whose epochs ran out gets a fresh
  producer id first;
* every transaction.abort.timed.out.transaction.cleanup.interval.ms the Ongoing transactions past their timeout
  are aborted (the epoch bumped: the producer is fenced);
* every transaction.remove.expired.transaction.cleanup.interval.ms the transactional ids idle past
  transactional.id.expiration.ms are removed, each with a tombstone in its partition (Kafka's expiration).

The coordinator is made on the first transactional request a broker gets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from kjbod.broker.coordinator_host import CoordinatorHost, InternalRequest, now_ms
from kjbod.broker.groups.coordinator import OFFSETS_TOPIC
from kjbod.broker.txn import records as rec
from kjbod.broker.txn.records import TxnState
from kjbod.broker.txn.state import Transit, TxnBook, TxnConfig
from kjbod.metadata import features
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import WriteTxnMarkersRequest
from kjbod.protocol.generated.write_txn_markers_request import WritableTxnMarker, WritableTxnMarkerTopic
from kjbod.storage.records import build_batch

log = structlog.get_logger("kjbod.txn")

TXN_TOPIC = "__transaction_state"
WRITE_TIMEOUT_MS = 5000
MARKER_RETRY_S = 0.1
MARKER_TIMEOUT_S = 10.0
WRITE_TXN_MARKERS = 27
# WriteTxnMarkers v2 carries the markers' transaction version (KIP-1228); a peer that serves only v1 (Kafka before
# 4.2) gets v1, which leaves it out (the field is ignorable), as the version both ends serve is picked per peer.
WRITE_TXN_MARKERS_VERSIONS = (1, 2)


class _TxnLogRequest(InternalRequest):
    client_id = "kjbod-transaction-coordinator"


def coordinator_of(node: Any) -> TxnCoordinator:
    """The node's transaction coordinator, made and started on first use."""
    coordinator = getattr(node, "txn_coordinator", None)
    if coordinator is None:
        coordinator = node.txn_coordinator = TxnCoordinator(node)
        coordinator.start()
    return coordinator


class TxnCoordinator(CoordinatorHost):
    topic = TXN_TOPIC
    kind = "transaction"

    def __init__(self, node: Any) -> None:
        c = node.config
        super().__init__(node, c.transaction_state_log_num_partitions, c.transaction_state_log_replication_factor)
        self.min_isr = c.transaction_state_log_min_isr
        self.segment_bytes = c.transaction_state_log_segment_bytes
        self.abort_interval_ms = c.transaction_abort_timed_out_transaction_cleanup_interval_ms
        self.expiration_ms = c.transactional_id_expiration_ms
        self.expire_interval_ms = c.transaction_remove_expired_transaction_cleanup_interval_ms
        self.book = TxnBook(TxnConfig(max_timeout_ms=c.transaction_max_timeout_ms))
        self._next_abort = now_ms() + self.abort_interval_ms
        self._next_expiry = now_ms() + self.expire_interval_ms
        self._marking: set[str] = set()  # transactional ids whose markers are being sent
        self._conns: dict[int, Any] = {}

    # ------------------------------------------------------------------------------------------- hosting
    def _topic_configs(self) -> list[tuple[str, str]]:
        return [("cleanup.policy", "compact"), ("segment.bytes", str(self.segment_bytes)),
                ("min.insync.replicas", str(self.min_isr))]

    def _unload(self, p: int) -> int:
        gone = [t for t in self.book.txns if self.partition_of(t) == p]
        self.book.unload(gone)
        return len(gone)

    def _sync_server_tv(self) -> None:
        self.book.server_tv = features.finalized(self.node.metadata).get(features.TRANSACTION_VERSION, 0)

    async def _tick(self, now: int) -> None:
        self._sync_server_tv()
        if now >= self._next_abort:
            self._next_abort = now + self.abort_interval_ms
            fresh: dict[str, int] = {}
            for m in self.book.timing_out(now):  # transaction.version 2 moves an epoch run out to a new id
                if self.book.fence_needs_producer_id(m):
                    fresh[m.transactional_id] = await self.node.next_producer_id()
            self._abort_timed_out(now, fresh)
        if now >= self._next_expiry:
            self._next_expiry = now + self.expire_interval_ms
            self._remove_expired(now)
        for m in self.book.preparing():
            if self.partition_of(m.transactional_id) in self.owned:
                self._send_markers_soon(m.transactional_id)

    def _stopped(self) -> None:
        for conn in self._conns.values():
            conn.close()

    def status(self, transactional_id: str) -> int:
        """As the group coordinator's, but COORDINATOR_NOT_AVAILABLE before the topic exists (Kafka's answer
        while __transaction_state is being made)."""
        if self.node.metadata.topic(TXN_TOPIC) is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return super().status(transactional_id)

    # ------------------------------------------------------------------------------------------- loading
    # A load keeps the latest value of each transactional id (None: removed).
    def _new_load(self) -> dict[str, rec.TxnValue | None]:
        return {}

    def _take(self, acc: Any, p: int, header: Any, record: Any) -> None:
        if record.key is None:
            return
        try:
            tid = rec.read_key(bytes(record.key))
            acc[tid] = None if record.value is None else rec.read_value(bytes(record.value))
        except (rec.TxnRecordError, UnicodeDecodeError) as e:
            log.warning("transaction_record_skipped", partition=p, reason=str(e))

    def _loaded_records(self, p: int, acc: Any) -> int:
        for tid, value in acc.items():
            self.book.load(tid, value)
        return len(acc)

    # ------------------------------------------------------------------------------------------- writing
    async def write(self, t: Transit) -> int:
        """Writes a change to the id's partition (acks=all) and applies it once committed; the error code."""
        try:
            # Dead: the id's tombstone. transaction.version 1 and up: the flexible value layout, as Kafka's TV_1.
            value = None if t.state == TxnState.DEAD else rec.txn_value(t.value, self.value_version())
            code = await self._append(t.transactional_id, value)
        except Exception:
            log.exception("transaction_write_failed", transactional_id=t.transactional_id)
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        if code == 0 and self.partition_of(t.transactional_id) in self.owned:
            self.book.complete(t)
        else:
            self.book.fail(t)
            code = code or ErrorCode.NOT_COORDINATOR
        return code

    def value_version(self) -> int:
        """The `__transaction_state` value version the finalized transaction.version asks for."""
        levels = features.finalized(self.node.metadata)
        return 1 if levels.get(features.TRANSACTION_VERSION, 0) >= 1 else 0

    async def _append(self, tid: str, value: bytes | None) -> int:
        batch = build_batch([(rec.txn_key(tid), value, [], now_ms())])
        return await self._produce(self.partition_of(tid), batch, _TxnLogRequest(), WRITE_TIMEOUT_MS, tid)

    # ------------------------------------------------------------------------------------------- requests
    async def init_producer_id(self, tid: str, timeout_ms: int, pid: int, epoch: int) -> tuple[int, int, int]:
        """(error code, producer id, epoch) for InitProducerId with a transactional id."""
        fresh = -1
        if self.book.needs_producer_id(tid):
            fresh = await self.node.next_producer_id()
        if (code := self.status(tid)):
            return code, -1, -1
        self._sync_server_tv()
        t = self.book.init_producer_id(tid, timeout_ms, pid, epoch, now_ms(), fresh_pid=fresh)
        if isinstance(t, int):
            return t, -1, -1
        if self.book.txns[tid].pending is not t:  # a retry answered from what is written already
            return ErrorCode.NONE, t.value.producer_id, t.value.producer_epoch
        code = await self.write(t)
        if code:
            return code, -1, -1
        if t.fenced_abort:  # the Ongoing transaction is being aborted: the producer asks again
            self._send_markers_soon(tid)
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        return ErrorCode.NONE, t.value.producer_id, t.value.producer_epoch

    async def add_partitions(self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]],
                             client_tv: int = 0) -> int:
        if (code := self.status(tid)):
            return code
        t = self.book.add_partitions(tid, pid, epoch, partitions, now_ms(), client_tv)
        if t is None:
            return ErrorCode.NONE
        if isinstance(t, int):
            return t
        return await self.write(t)

    def verify_partitions(self, tid: str, pid: int, epoch: int,
                          partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn with VerifyOnly: per partition, whether it is in the ongoing transaction
        (TxnBook.verify_partitions); NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for all while this broker
        does not hold the id's transactions."""
        if not tid:
            return dict.fromkeys(partitions, ErrorCode.INVALID_REQUEST)
        if (code := self.status(tid)):
            return dict.fromkeys(partitions, code)
        return self.book.verify_partitions(tid, pid, epoch, partitions)

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool,
                      client_tv: int = 0) -> tuple[int, int, int]:
        """(error code, producer id, epoch): the id and epoch the producer goes on with (EndTxn v5), -1 on
        error.  `client_tv` 2 for EndTxn v5 (transaction.version 2's rules, whatever level is finalized, as
        Kafka's coordinator decides by the request's version)."""
        if not tid:
            return ErrorCode.INVALID_REQUEST, -1, -1
        fresh = -1
        if client_tv >= 2 and self.book.needs_producer_id_to_end(tid):
            fresh = await self.node.next_producer_id()
        if (code := self.status(tid)):
            return code, -1, -1
        t = self.book.end_txn(tid, pid, epoch, commit, now_ms(), client_tv, fresh)
        if isinstance(t, int):
            m = self.book.txns.get(tid)
            if t == ErrorCode.NONE and m is not None:  # a retry of what is done: the current id and epoch
                return t, m.producer_id, m.producer_epoch
            return t, -1, -1
        code = await self.write(t)
        if code:
            return code, -1, -1
        self._send_markers_soon(tid)
        return ErrorCode.NONE, *t.continues_as

    def _abort_timed_out(self, now: int, fresh_pids: dict[str, int] | None = None) -> None:
        for t in self.book.timed_out(now, fresh_pids):
            tid = t.transactional_id
            if self.partition_of(tid) not in self.owned:
                self.book.fail(t)
                continue
            log.info("transaction_timed_out", transactional_id=tid, producer_id=t.value.producer_id,
                     epoch=t.value.producer_epoch)
            self._spawn(self._abort(t))

    def _remove_expired(self, now: int) -> None:
        for t in self.book.expired(now, self.expiration_ms):
            if self.partition_of(t.transactional_id) not in self.owned:
                self.book.fail(t)
                continue
            self._spawn(self._remove(t))

    async def _remove(self, t: Transit) -> None:
        if await self.write(t) == 0:
            log.info("transactional_id_expired", transactional_id=t.transactional_id,
                     producer_id=t.value.producer_id, epoch=t.value.producer_epoch)

    async def _abort(self, t: Transit) -> None:
        if await self.write(t) == 0:
            self._send_markers_soon(t.transactional_id)

    # ------------------------------------------------------------------------------------------- markers
    def _send_markers_soon(self, tid: str) -> None:
        if tid not in self._marking:
            self._marking.add(tid)
            self._spawn(self._markers(tid))

    async def _markers(self, tid: str) -> None:
        try:
            await self._send_markers(tid)
        except Exception:
            log.exception("transaction_markers_failed", transactional_id=tid)
        finally:
            self._marking.discard(tid)

    async def _send_markers(self, tid: str) -> None:
        m = self.book.txns.get(tid)
        if m is None:
            return
        commit = m.state == rec.TxnState.PREPARE_COMMIT
        pid, epoch, tv = m.producer_id, m.producer_epoch, m.client_txn_version
        left = set(m.partitions)
        p = self.partition_of(tid)
        while left and not self.node.stopping:
            if p not in self.owned or self.book.txns.get(tid) is not m:
                return  # another broker coordinates it now; it sends them after loading
            coordinator_epoch = self.node.leader_epoch(TXN_TOPIC, p)
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for t, part in sorted(left):
                topic = self.node.metadata.topic(t)
                if topic is None or part not in topic.partitions:
                    left.discard((t, part))  # the topic was deleted: nothing to mark
                    continue
                by_leader.setdefault(topic.partitions[part].leader, []).append((t, part))
            results = await asyncio.gather(*(self._send_to(leader, pid, epoch, commit, coordinator_epoch, parts, tv)
                                              for leader, parts in by_leader.items()))
            for answers in results:
                for tp, code in answers.items():
                    if code in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                        left.discard(tp)
                    elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
                        # Kafka drops such a marker: a newer epoch's marker was written already.
                        log.warning("transaction_marker_refused", transactional_id=tid, partition=tp,
                                    error_code=code)
                        left.discard(tp)
            if left:
                await asyncio.sleep(MARKER_RETRY_S)
        if left:
            return
        done = self.book.complete_markers(tid, now_ms())
        if done is not None:
            await self.write(done)

    async def _send_to(self, leader: int, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                       parts: list[tuple[str, int]], tv: int = 0) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[int]] = {}
        for t, part in parts:
            by_topic.setdefault(t, []).append(part)
        body = WriteTxnMarkersRequest(markers=[WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
            transaction_version=tv, topics=[WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()])])
        try:
            if leader == self.node.node_id:
                from kjbod.broker.handlers import write_txn_markers

                resp = await write_txn_markers.write_markers(self.node, body)
            else:
                conn = await self._connection(leader)
                version = conn.pick_version(WRITE_TXN_MARKERS, *WRITE_TXN_MARKERS_VERSIONS)
                resp = await conn.request(WRITE_TXN_MARKERS, version, body, MARKER_TIMEOUT_S)
        except Exception as e:
            log.info("transaction_markers_not_sent", leader=leader, reason=str(e))
            self._conns.pop(leader, None)
            return {tp: ErrorCode.NOT_LEADER_OR_FOLLOWER for tp in parts}
        out: dict[tuple[str, int], int] = {}
        for marker in resp.markers:
            for tr in marker.topics:
                for r in tr.partitions:
                    out[(tr.name, r.partition_index)] = r.error_code
        return out

    async def _connection(self, broker: int) -> Any:
        conn = self._conns.get(broker)
        if conn is not None and not conn.closed:
            return conn
        conn = await open_broker_connection(self.node, broker, f"kjbod-txn-markers-{self.node.node_id}",
                                            MARKER_TIMEOUT_S)
        self._conns[broker] = conn
        return conn


async def open_broker_connection(node: Any, broker: int, client_id: str, timeout_s: float) -> Any:
    """A connection to another broker on the inter-broker listener (TLS and SASL as replication's)."""
    from kjbod.broker.replication.manager import inter_broker_listener
    from kjbod.net.connection import ClientConnection

    manager = getattr(node, "replication", None)
    listener = manager.listener_name if manager is not None else inter_broker_listener(node.config)
    reg = node.metadata.brokers.get(broker)
    endpoint = reg.endpoint(listener) if reg is not None else None
    if endpoint is None:
        raise ConnectionError(f"broker {broker} has no endpoint on listener {listener}")
    return await ClientConnection.open(
        endpoint.host, endpoint.port, client_id=client_id, connect_timeout=timeout_s,
        ssl_context=getattr(manager, "ssl_context", None), sasl=getattr(manager, "sasl", None))


def offsets_partition(node: Any, group_id: str) -> tuple[str, int]:
    """The `__consumer_offsets` partition AddOffsetsToTxn adds for a group."""
    from kjbod.broker.groups.coordinator import coordinator_of as groups_of

    return OFFSETS_TOPIC, groups_of(node).partition_of(group_id)
