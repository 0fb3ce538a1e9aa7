"""DescribeTransactions (key 65), version 0 (KIP-664: `kafka-transactions.sh describe`).

Version notes: v0 is the only version, flexible.

Each transactional id is described by its coordinator: its state's name, the producer id and epoch, the
transaction timeout, when the current transaction began (-1: none) and its partitions.  A broker that does not
coordinate the id answers NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading it, COORDINATOR_NOT_AVAILABLE
before `__transaction_state` exists); an id it coordinates but does not know, TRANSACTIONAL_ID_NOT_FOUND.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.broker.txn.coordinator import coordinator_of
from kjbod.broker.txn.records import STATE_NAMES
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeTransactionsRequest, DescribeTransactionsResponse
from kjbod.protocol.generated.describe_transactions_response import TopicData, TransactionState


@api(DescribeTransactionsRequest)
async def handle(node, request, body: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    coordinator = coordinator_of(node)
    out = []
    for tid in body.transactional_ids:
        code = coordinator.status(tid)
        m = coordinator.book.txns.get(tid) if code == 0 else None
        if m is None:
            out.append(TransactionState(error_code=code or ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id=tid,
                                        transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                                        producer_id=-1, producer_epoch=-1, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(m.partitions):
            by_topic.setdefault(t, []).append(p)
        out.append(TransactionState(
            error_code=0, transactional_id=tid, transaction_state=STATE_NAMES[m.state],
            transaction_timeout_ms=m.timeout_ms, transaction_start_time_ms=m.start_ms, producer_id=m.producer_id,
            producer_epoch=m.producer_epoch, topics=[TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return DescribeTransactionsResponse(transaction_states=out)
