"""Replica placement for new partitions, as Kafka's StripedReplicaPlacer.

Strategy: the usable brokers (registered, not in a controlled shutdown that is still going on: a broker fenced
after one is usable, as any fenced broker) are grouped by rack,
racks sorted by name (no rack last), brokers sorted by id within each rack, each list starting at a random offset.
Each partition's first replica (its leader) is the next unfenced broker, starting from a rack that advances by one
per partition; the other replicas come from the following racks in turn (unfenced brokers first, then fenced
ones), so a partition spans as many racks as it can and leaders stripe over every unfenced broker.  Once as many
partitions as there are unfenced brokers are placed, the racks and brokers are shuffled so the next round does not
repeat the same replica sets.

Errors (InvalidReplicationFactor in Kafka, INVALID_REPLICATION_FACTOR on the wire) are `PlacementError` with
Kafka's texts, checked in Kafka's order: a non-positive factor, no unfenced broker, more replicas than brokers.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from kjbod.metadata import BrokerRegistration


class PlacementError(ValueError):
    pass


class _BrokerList:
    def __init__(self) -> None:
        self.brokers: list[int] = []
        self.index = 0
        self.offset = 0
        self.epoch = 0

    def initialize(self, rng: random.Random) -> None:
        if self.brokers:
            self.brokers.sort()
            self.offset = rng.randrange(len(self.brokers))

    def next(self, epoch: int) -> int:
        if not self.brokers:
            return -1
        if self.epoch != epoch:
            self.epoch, self.index = epoch, 0
            self.offset = (self.offset + 1) % len(self.brokers)
        if self.index >= len(self.brokers):
            return -1
        broker = self.brokers[(self.index + self.offset) % len(self.brokers)]
        self.index += 1
        return broker


class _Rack:
    def __init__(self) -> None:
        self.unfenced = _BrokerList()
        self.fenced = _BrokerList()

    def next(self, epoch: int) -> int:
        found = self.unfenced.next(epoch)
        return found if found >= 0 else self.fenced.next(epoch)


def _check(replication_factor: int, unfenced: int, total: int) -> None:
    if replication_factor <= 0:
        raise PlacementError(f"Invalid replication factor {replication_factor}: the replication factor must be "
                             "positive.")
    if unfenced == 0:
        raise PlacementError("All brokers are currently fenced.")
    if replication_factor > total:
        raise PlacementError(f"The target replication factor of {replication_factor} cannot be reached because "
                             f"only {total} broker(s) are registered.")


class StripedPlacer:
    """Places the partitions of one request (Kafka builds one RackList per placement call)."""

    def __init__(self, brokers: Iterable[BrokerRegistration], rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self.racks: dict[str | None, _Rack] = {}
        self.total = self.unfenced = 0
        for b in brokers:
            if b.in_controlled_shutdown and not b.fenced:
                continue  # shutting down now; once fenced it is usable again (Kafka's heartbeat manager drops the
                # controlled shutdown when it fences a broker, while its registration keeps the flag)
            rack = self.racks.setdefault(b.rack, _Rack())
            (rack.fenced if b.fenced else rack.unfenced).brokers.append(b.broker_id)
            self.total += 1
            self.unfenced += not b.fenced
        for rack in self.racks.values():
            rack.fenced.initialize(self.rng)
            rack.unfenced.initialize(self.rng)
        self.names = sorted(self.racks, key=lambda r: (r is None, r or ""))
        self.epoch = 0
        self.offset = self.rng.randrange(len(self.names)) if self.names else 0

    def check(self, replication_factor: int) -> None:
        _check(replication_factor, self.unfenced, self.total)

    def place(self, partitions: int, replication_factor: int) -> list[list[int]]:
        self.check(replication_factor)
        return [self._one(replication_factor) for _ in range(partitions)]

    def _shuffle(self) -> None:
        self.rng.shuffle(self.names)
        for rack in self.racks.values():
            self.rng.shuffle(rack.fenced.brokers)
            self.rng.shuffle(rack.unfenced.brokers)

    def _one(self, replication_factor: int) -> list[int]:
        if self.epoch == self.unfenced and self.unfenced > 1:
            self._shuffle()
            self.epoch = 0
        if self.offset == len(self.names):
            self.offset = 0
        first = self.offset
        while True:
            leader = self.racks[self.names[first]].unfenced.next(self.epoch)
            if leader >= 0:
                break
            first = (first + 1) % len(self.names)
        out = [leader]
        index = self.offset
        for _ in range(1, replication_factor):
            found = -1
            while found < 0:
                if index == first:
                    first = -1  # the leader's rack gave its one replica for this round
                else:
                    found = self.racks[self.names[index]].next(self.epoch)
                index = (index + 1) % len(self.names)
            out.append(found)
        self.epoch += 1
        self.offset += 1
        return out
