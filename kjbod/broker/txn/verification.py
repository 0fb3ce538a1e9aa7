"""Partition leaders asking transaction coordinators (KIP-890 part 1): is this partition in the producer's
ongoing transaction?

Strategy, Kafka's AddPartitionsToTxnManager on asyncio: a leader about to append a transactional batch for a
producer with no transaction open on that partition (kjbod.broker.handlers.produce) calls :meth:`verify`. The
question goes to the broker leading the transactional id's `__transaction_state` partition as one transaction
of an AddPartitionsToTxn v5 request with VerifyOnly set: the questions for one coordinator broker wait while a
request to it is out, then go together in the next one (one request in flight per broker). A question for the
same transactional id already waiting is replaced by the one with the newer epoch (the older hears
INVALID_PRODUCER_EPOCH, an equal one NETWORK_EXCEPTION, as in Kafka). When this broker is the coordinator the
question is answered in-process.

KIP-890 part 2: for a transaction.version 2 producer (Produce v12 and up, TxnOffsetCommit v5) the leader does not
only ask, it adds: the same request with VerifyOnly false (:meth:`verify` with ``add``), which the coordinator
answers as a producer's AddPartitionsToTxn (the partition joins the transaction, starting it, at
ClientTransactionVersion 2), so such producers never send AddPartitionsToTxn or AddOffsetsToTxn themselves.

The answer is each partition's code as the coordinator gives it, but PRODUCER_FENCED becomes
INVALID_PRODUCER_EPOCH and a refusal of the whole request (CLUSTER_AUTHORIZATION_FAILED) INVALID_TXN_STATE, as
Kafka maps them; a coordinator that cannot be reached answers NETWORK_EXCEPTION, one that is not known
COORDINATOR_NOT_AVAILABLE. The Produce handler maps these for the producer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import structlog

from kjbod.broker.coordinator_host import partition_for
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AddPartitionsToTxnRequest
from kjbod.protocol.generated.add_partitions_to_txn_request import (
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)

log = structlog.get_logger("kjbod.txn.verification")

ADD_PARTITIONS_TO_TXN = 24
VERIFY_VERSION = 5
TXN_TOPIC = "__transaction_state"

Partitions = list[tuple[str, int]]
Answer = dict[tuple[str, int], int]


VERIFICATION_KEY = "transaction.partition.verification.enable"


def verification_enabled(node: Any) -> bool:
    """Kafka's transaction.partition.verification.enable: the dynamic value (per broker, then cluster default),
    else the server's."""
    dynamic = node.dynamic_configs.effective(VERIFICATION_KEY)
    if dynamic is not None:
        return str(dynamic[0]).strip().lower() == "true"
    return bool(getattr(node.config, "transaction_partition_verification_enable", True))


def verifier_of(node: Any) -> TxnVerifier:
    verifier = getattr(node, "txn_verifier", None)
    if verifier is None:
        verifier = node.txn_verifier = TxnVerifier(node)
    return verifier


@dataclass
class _Question:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: Partitions
    add: bool = False  # KIP-890 part 2: add the partitions (VerifyOnly false) rather than only ask
    answer: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def settle(self, codes: Answer) -> None:
        if not self.answer.done():
            self.answer.set_result(codes)


class TxnVerifier:
    def __init__(self, node: Any) -> None:
        self.node = node
        self._waiting: dict[int, dict[str, _Question]] = {}  # coordinator broker -> transactional id -> question
        self._sending: set[int] = set()  # brokers with a request out
        self._conns: dict[int, Any] = {}
        self._tasks: set[asyncio.Task] = set()

    def run(self, coro: Any) -> None:
        """Runs `coro` as a task kept until it ends (a held Produce, a sender)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def coordinator(self, tid: str) -> int | None:
        """The broker leading the id's `__transaction_state` partition, or None when there is none alive."""
        metadata = self.node.metadata
        topic = metadata.topic(TXN_TOPIC)
        if topic is None or not topic.partitions:
            return None
        part = topic.partitions.get(partition_for(tid, len(topic.partitions)))
        if part is None or part.leader < 0:
            return None
        if part.leader != self.node.node_id and part.leader not in metadata.brokers:
            return None
        return part.leader

    async def verify(self, tid: str, pid: int, epoch: int, partitions: Partitions, add: bool = False) -> Answer:
        """Each partition's code (0: in the transaction; with `add`, added to it, as transaction.version 2
        producers' batches are)."""
        leader = self.coordinator(tid)
        if leader is None:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if leader == self.node.node_id:
            from kjbod.broker.txn.coordinator import coordinator_of

            if add:
                code = await coordinator_of(self.node).add_partitions(tid, pid, epoch, list(partitions), 2) \
                    if tid else ErrorCode.INVALID_REQUEST
                return _mapped(dict.fromkeys(partitions, code))
            return _mapped(coordinator_of(self.node).verify_partitions(tid, pid, epoch, partitions))
        question = _Question(tid, pid, epoch, list(partitions), add)
        waiting = self._waiting.setdefault(leader, {})
        earlier = waiting.get(tid)
        if earlier is not None:
            if earlier.producer_epoch > epoch:
                return dict.fromkeys(partitions, ErrorCode.INVALID_PRODUCER_EPOCH)
            earlier.settle(dict.fromkeys(earlier.partitions, ErrorCode.INVALID_PRODUCER_EPOCH
                                         if earlier.producer_epoch < epoch else ErrorCode.NETWORK_EXCEPTION))
        waiting[tid] = question
        if leader not in self._sending:
            self._sending.add(leader)
            self.run(self._send_loop(leader))
        return await question.answer

    async def _send_loop(self, broker: int) -> None:
        try:
            while (batch := self._waiting.pop(broker, None)) and not self.node.stopping:
                await self._send(broker, list(batch.values()))
        finally:
            self._sending.discard(broker)
            for q in self._waiting.pop(broker, {}).values() if self.node.stopping else ():
                q.settle(dict.fromkeys(q.partitions, ErrorCode.NETWORK_EXCEPTION))

    async def _send(self, broker: int, questions: list[_Question]) -> None:
        body = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnTransaction(
            transactional_id=q.transactional_id, producer_id=q.producer_id, producer_epoch=q.producer_epoch,
            verify_only=not q.add, topics=_topics(q.partitions)) for q in questions])
        try:
            conn = await self._connection(broker)
            resp = await conn.request(ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, body,
                                      self.node.config.request_timeout_ms / 1000)
        except Exception as e:
            log.warning("transaction_verification_not_sent", coordinator=broker, reason=str(e))
            old = self._conns.pop(broker, None)
            if old is not None:
                old.close()
            for q in questions:
                q.settle(dict.fromkeys(q.partitions, ErrorCode.NETWORK_EXCEPTION))
            return
        if resp.error_code:
            log.error("transaction_verification_refused", coordinator=broker,
                      error=ErrorCode(resp.error_code).name)
            code = (ErrorCode.INVALID_TXN_STATE if resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    else resp.error_code)
            for q in questions:
                q.settle(dict.fromkeys(q.partitions, code))
            return
        answers: dict[str, Answer] = {}
        for result in resp.results_by_transaction:
            answers[result.transactional_id] = {(t.name, r.partition_index): r.partition_error_code
                                                for t in result.topic_results for r in t.results_by_partition}
        for q in questions:
            got = answers.get(q.transactional_id, {})
            q.settle(_mapped({tp: got.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in q.partitions}))

    async def _connection(self, broker: int) -> Any:
        conn = self._conns.get(broker)
        if conn is not None and not conn.closed:
            return conn
        from kjbod.broker.txn.coordinator import open_broker_connection

        conn = self._conns[broker] = await open_broker_connection(
            self.node, broker, f"kjbod-txn-verification-{self.node.node_id}", self.node.config.request_timeout_ms / 1000)
        return conn

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


def _topics(partitions: Partitions) -> list[AddPartitionsToTxnTopic]:
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    return [AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()]


def _mapped(codes: Answer) -> Answer:
    return {tp: ErrorCode.INVALID_PRODUCER_EPOCH if c == ErrorCode.PRODUCER_FENCED else c for tp, c in codes.items()}
