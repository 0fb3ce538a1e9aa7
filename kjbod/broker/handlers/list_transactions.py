"""ListTransactions (key 66), versions 0-2 (KIP-664: `kafka-transactions.sh list`).

Version notes: v0 flexible; v1 adds the duration filter (KIP-994); v2 the transactional id pattern (KIP-1152): a
regular expression the whole id must match (null or empty: every id); one that does not compile answers
INVALID_REGULAR_EXPRESSION with no transactions.

The transactions this broker coordinates, kept by the filters as Kafka keeps them: state names (a name that is
no state is listed back in UnknownStateFilters), producer ids, and (v1) only transactions begun more than
DurationFilter ms ago.  COORDINATOR_LOAD_IN_PROGRESS while some partition of `__transaction_state` is loading.
With an authorizer, the ids the caller may not DESCRIBE are left out, as Kafka leaves them out.
"""

from __future__ import annotations

import re

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import now_ms
from kjbod.broker.router import api
from kjbod.broker.txn.coordinator import TXN_TOPIC, coordinator_of
from kjbod.broker.txn.records import STATE_NAMES, TxnState
from kjbod.metadata.acls import DESCRIBE, TRANSACTIONAL_ID
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ListTransactionsRequest, ListTransactionsResponse
from kjbod.protocol.generated.list_transactions_response import TransactionState

BY_NAME = {name: state for state, name in STATE_NAMES.items()}


def id_pattern(request, body: ListTransactionsRequest) -> re.Pattern[str] | None:
    """The v2 transactional id pattern compiled, None when there is none; re.error when it does not compile."""
    text = body.transactional_id_pattern if request.api_version >= 2 else None
    return re.compile(text) if text else None


@api(ListTransactionsRequest)
async def handle(node, request, body: ListTransactionsRequest) -> ListTransactionsResponse:
    unknown = [s for s in body.state_filters if s not in BY_NAME]
    bad_pattern = ListTransactionsResponse(error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                                           unknown_state_filters=unknown, transaction_states=[])
    if node.metadata.topic(TXN_TOPIC) is None:  # nothing coordinated here yet: an empty list
        try:
            id_pattern(request, body)
        except re.error:
            return bad_pattern
        return ListTransactionsResponse(error_code=0, unknown_state_filters=unknown, transaction_states=[])
    coordinator = coordinator_of(node)
    coordinator.status("")  # brings the partitions led here up to date
    if coordinator.loading:
        return ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                        unknown_state_filters=unknown, transaction_states=[])
    try:
        pattern = id_pattern(request, body)
    except re.error:
        return bad_pattern
    states = {BY_NAME[s] for s in body.state_filters if s in BY_NAME}
    pids = set(body.producer_id_filters)
    duration = body.duration_filter if request.api_version >= 1 else -1
    now = now_ms()
    out = []
    for tid, m in sorted(coordinator.book.txns.items()):
        if m.state == TxnState.DEAD or (pids and m.producer_id not in pids) or \
                (body.state_filters and m.state not in states) or (duration >= 0 and now - m.start_ms <= duration) \
                or (pattern is not None and not pattern.fullmatch(tid)):
            continue
        if not allowed(node, request, DESCRIBE, TRANSACTIONAL_ID, tid):
            continue  # as Kafka: the ids the caller may not DESCRIBE are left out silently
        out.append(TransactionState(transactional_id=tid, producer_id=m.producer_id,
                                    transaction_state=STATE_NAMES[m.state]))
    return ListTransactionsResponse(error_code=0, unknown_state_filters=unknown, transaction_states=out)
