"""The controller mutation quota (KIP-599) as CreateTopics, CreatePartitions and DeleteTopics apply it on the
broker that receives them.

Strategy: each topic of a request takes as many tokens as partitions it creates or deletes from its client's
bucket (kjbod.broker.client_quotas.MutationQuotaType), in the request's order, before the request goes to the
controller. Under a strict quota (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+) a topic met with an
empty bucket is answered THROTTLING_QUOTA_EXCEEDED here and never sent on; older versions let everything through.
Either way the response carries the throttle time and the router mutes the connection for it.

Kafka counts a topic only once the controller has validated it; here the count comes first, so a topic the
controller refuses (it exists already, the partition count is not larger, ...) gives its tokens back when the
answer arrives. Topics the broker's image already shows will be refused (a name that exists, for CreateTopics;
a topic it does not know, for the other two) take nothing in the first place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from kjbod.broker.client_quotas import MutationQuota

__all__ = ["THROTTLED_MESSAGE", "Admission", "admit", "quota_for"]

THROTTLED_MESSAGE = "The throttling quota has been exceeded."

T = TypeVar("T")


def quota_for(node: Any, request: Any, strict_since: int) -> MutationQuota | None:
    """The request's quota; None when no controller_mutation_rate was ever set, and for a request on a controller
    listener (a broker forwarding what it has counted already)."""
    quotas = getattr(node, "client_quotas", None)
    if quotas is None or request.ctx.listener_kind != "broker":
        return None
    return quotas.mutation_quota(request.ctx.principal, request.client_id, request.api_version >= strict_since)


class Admission:
    """What one request took: per topic key, its permits, so refused topics can give them back."""

    def __init__(self, quota: MutationQuota) -> None:
        self.quota = quota
        self.taken: dict[Hashable, int] = {}

    def settle(self, response: Any, failed: Iterable[Hashable]) -> None:
        """Gives back the permits of the topics the controller refused and sets the response's throttle time."""
        for key in failed:
            permits = self.taken.pop(key, 0)
            self.quota.give_back(permits)
        throttle = self.quota.throttle_ms()
        if throttle > response.throttle_time_ms:
            response.throttle_time_ms = throttle
        self.quota.note_throttled(throttle)


def admit(quota: MutationQuota, items: list[T], key: Callable[[T], Hashable],
          permits: Callable[[T], int | None]) -> tuple[Admission, list[T], list[T]]:
    """Runs the items through the quota in order: (the admission, the items admitted, the items refused).
    `permits` is None for an item the controller is sure to refuse (it takes nothing and goes on)."""
    admission = Admission(quota)
    kept: list[T] = []
    refused: list[T] = []
    counts = Counter(key(item) for item in items)
    for item in items:
        k = key(item)
        n = None if counts[k] > 1 else permits(item)  # a duplicate: the controller refuses every copy
        if n is None:
            kept.append(item)
        elif quota.admit(n):
            admission.taken[k] = n
            kept.append(item)
        else:
            refused.append(item)
    return admission, kept, refused
