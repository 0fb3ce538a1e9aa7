"""DescribeTransactions (key 65), version 0 (KIP-664: `kafka-transactions.sh describe`).

Version notes: v0 is the only version, flexible.

Each transactional id is described by its coordinator: its state's name, the producer id and epoch, the
transaction timeout, when the current transaction began (-1: none) and its partitions.  A broker that does not
coordinate the id answers NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading it, COORDINATOR_NOT_AVAILABLE
before `__transaction_state` exists); an id it coordinates but does not know, TRANSACTIONAL_ID_NOT_FOUND.  With an
authorizer, as in Kafka: an id the caller may not DESCRIBE answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and the
partitions of topics it may not DESCRIBE are left out.  An id not described has the other fields at the schema's
defaults (zero, an empty state name), as Kafka's.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.router import api
from kjbod.broker.txn.coordinator import coordinator_of
from kjbod.broker.txn.records import STATE_NAMES
from kjbod.metadata.acls import DESCRIBE, TOPIC, TRANSACTIONAL_ID
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeTransactionsRequest, DescribeTransactionsResponse
from kjbod.protocol.generated.describe_transactions_response import TopicData, TransactionState


def _failed(tid: str, code: int) -> TransactionState:
    """An id not described: the code, and the other fields at the schema's defaults, as Kafka answers it."""
    return TransactionState(error_code=code, transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
                            transaction_start_time_ms=0, producer_id=0, producer_epoch=0, topics=[])


@api(DescribeTransactionsRequest)
async def handle(node, request, body: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    coordinator = coordinator_of(node)
    out = []
    for tid in body.transactional_ids:
        if not allowed(node, request, DESCRIBE, TRANSACTIONAL_ID, tid):
            out.append(_failed(tid, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        code = coordinator.status(tid)
        m = coordinator.book.txns.get(tid) if code == 0 else None
        if m is None:
            out.append(_failed(tid, code or ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
            continue
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(m.partitions):
            if allowed(node, request, DESCRIBE, TOPIC, t):  # only the topics the caller may describe
                by_topic.setdefault(t, []).append(p)
        out.append(TransactionState(
            error_code=0, transactional_id=tid, transaction_state=STATE_NAMES[m.state],
            transaction_timeout_ms=m.timeout_ms, transaction_start_time_ms=m.start_ms, producer_id=m.producer_id,
            producer_epoch=m.producer_epoch, topics=[TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return DescribeTransactionsResponse(transaction_states=out)
