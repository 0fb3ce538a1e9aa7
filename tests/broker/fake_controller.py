"""A scripted in-process controller for the broker's lifecycle tests: Kafka's registration checks and heartbeat
state table in a few lines, and hooks to make it misbehave.

It keeps a pretend log end offset: each registration takes the next offset as the broker's epoch (as Kafka's
controller does) and the broker is caught up once its CurrentMetadataOffset reaches it.  `leads[id]` says whether
the broker still leads partitions (a controlled shutdown waits until it does not).  `away` makes every request
fail as an unreachable controller would; `script[api_key]` holds error codes (or "hang") used one per request.
Every request is recorded, and `wait_until(predicate)` waits for the state a test expects.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kjbod.net.errors import BrokerConnectionError
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    RequestHeader,
)


class Session(enum.Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled shutdown"
    SHUTDOWN_NOW = "shutdown now"


@dataclass
class Registration:
    epoch: int
    incarnation: Any
    state: Session = Session.FENCED


class FakeController:
    def __init__(self, cluster_id: str = "fake-cluster") -> None:
        self.cluster_id = cluster_id
        self.next_offset = 100
        self.brokers: dict[int, Registration] = {}
        self.leads: dict[int, bool] = {}
        self.away = False
        self.script: dict[int, deque[Any]] = {}
        self.requests: list[tuple[int, int, Any]] = []
        self._changed = asyncio.Condition()

    def registrations(self) -> list[Any]:
        return [r for k, _, r in self.requests if k == 62]

    def heartbeats(self) -> list[Any]:
        return [r for k, _, r in self.requests if k == 63]

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(predicate)

    async def __call__(self, api_key: int, version: int, request: Any, header: RequestHeader) -> Any:
        try:
            if self.away:
                raise BrokerConnectionError("127.0.0.1", 9093, "connection refused")
            self.requests.append((api_key, version, request))
            queue = self.script.get(api_key)
            action = queue.popleft() if queue else None
            if action == "hang":
                await asyncio.sleep(3600)
            if api_key == 62:
                return self._register(request, action)
            if api_key == 63:
                return self._heartbeat(request, action)
            raise AssertionError(f"unexpected api {api_key}")
        finally:
            async with self._changed:
                self._changed.notify_all()

    def _register(self, r: Any, error: int | None) -> BrokerRegistrationResponse:
        if error:
            return BrokerRegistrationResponse(error_code=error)
        if r.cluster_id != self.cluster_id:
            return BrokerRegistrationResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        old = self.brokers.get(r.broker_id)
        if old is not None and old.incarnation != r.incarnation_id and old.state != Session.FENCED:
            return BrokerRegistrationResponse(error_code=ErrorCode.DUPLICATE_BROKER_REGISTRATION)
        if old is not None and old.incarnation == r.incarnation_id:
            return BrokerRegistrationResponse(broker_epoch=old.epoch)
        epoch = self.next_offset
        self.next_offset += 1
        self.brokers[r.broker_id] = Registration(epoch, r.incarnation_id)
        return BrokerRegistrationResponse(broker_epoch=epoch)

    def _heartbeat(self, r: Any, error: int | None) -> BrokerHeartbeatResponse:
        if error:
            return BrokerHeartbeatResponse(error_code=error)
        reg = self.brokers.get(r.broker_id)
        if reg is None or reg.epoch != r.broker_epoch:
            return BrokerHeartbeatResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        caught_up = r.current_metadata_offset >= reg.epoch
        leads = self.leads.get(r.broker_id, False)
        s = reg.state
        if s == Session.FENCED:
            if r.want_shut_down:
                s = Session.SHUTDOWN_NOW
            elif not r.want_fence and caught_up:
                s = Session.UNFENCED
        elif s == Session.UNFENCED:
            if r.want_fence:
                s = Session.SHUTDOWN_NOW if r.want_shut_down else Session.FENCED
            elif r.want_shut_down:
                s = Session.CONTROLLED_SHUTDOWN if leads else Session.SHUTDOWN_NOW
        elif s == Session.CONTROLLED_SHUTDOWN and not leads:
            s = Session.SHUTDOWN_NOW
        reg.state = s
        return BrokerHeartbeatResponse(
            is_caught_up=caught_up, is_fenced=s in (Session.FENCED, Session.SHUTDOWN_NOW),
            should_shut_down=s == Session.SHUTDOWN_NOW)
