"""Each controller's registration with the active controller (KIP-919; Kafka's ControllerRegistrationManager).

Strategy: the manager watches the images its controller publishes.  Once the controller has caught up with the
log (`caught_up`, the same test as the authorizer's initial load) and the image's metadata.version has controller
registrations (3.7-IV0; every level kjbod runs has them), it sends one ControllerRegistration: this node's id,
this process's incarnation id, ZkMigrationReady false, its controller listeners and the feature ranges it runs.
The active controller writes a RegisterControllerRecord; when an image shows this id with this incarnation the
manager is done.  When an image shows the id with another incarnation (an older process's record written late,
or a newer one's) or without it, it registers again, as Kafka's does.  A failed send (no active controller yet,
an error code) is retried after an exponential backoff (Kafka's 100 ms doubling, capped here at 5 s).  An answered
send is not repeated while the manager waits for its record to reach this controller's image (a follower replays
it a fetch later): only an image that changes this id's registration or the metadata.version, or AWAIT_S without
the record, sends again, as Kafka's manager sends on such changes only.  Nothing is sent before the log has a
metadata.version (Kafka waits for it too).

Only one request is in flight at a time; the manager never blocks its controller: it runs as its own task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import structlog

from kjbod.metadata import MetadataImage
from kjbod.metadata import features as ft
from kjbod.net.backoff import ExponentialBackoff
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ControllerRegistrationRequest

__all__ = ["ControllerRegistrationManager"]

log = structlog.get_logger("kjbod.controller.registration")

RETRY_INITIAL_S = 0.1
RETRY_MAX_S = 5.0
RECHECK_S = 1.0  # catching up is not announced by an image: look again this often while waiting
AWAIT_S = 30.0  # an answered registration whose record no image has shown by then is sent again


class ControllerRegistrationManager:
    def __init__(self, request: ControllerRegistrationRequest, send: Callable[[Any], Awaitable[Any]], *,
                 caught_up: Callable[[], bool] = lambda: True) -> None:
        self.request = request
        self.node_id = request.controller_id
        self.incarnation_id: UUID = request.incarnation_id
        self._send = send
        self._caught_up = caught_up
        self.registered = False  # the last image showed this id with this incarnation
        self._awaiting_since: float | None = None  # answered; waiting for an image to show the record
        self._seen: tuple[Any, int] | None = None  # this id's registration and the metadata.version last seen
        self.metadata_version = 0
        self.sent = 0
        self.failed = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._backoff = ExponentialBackoff(RETRY_INITIAL_S, RETRY_MAX_S)

    def on_metadata(self, image: MetadataImage) -> None:
        """A published image: is this controller's registration in it, and may it register yet?"""
        self.metadata_version = image.features.get(ft.METADATA_VERSION, 0)  # 0 until the log has one
        mine = image.controllers.get(self.node_id)
        seen = (mine.incarnation_id if mine is not None else None, self.metadata_version)
        if seen != self._seen:
            self._seen = seen
            self._awaiting_since = None  # a change that may call for another registration
        registered = mine is not None and mine.incarnation_id == self.incarnation_id
        if registered and not self.registered:
            log.info("controller_registered", node_id=self.node_id, incarnation_id=str(self.incarnation_id))
        elif self.registered and not registered:
            log.info("controller_registration_replaced", node_id=self.node_id,
                     found=str(mine.incarnation_id) if mine is not None else None, effect="registering again")
        self.registered = registered
        if not registered:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kjbod-controller-registration")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _ready(self) -> bool:
        if self._awaiting_since is not None:
            if asyncio.get_running_loop().time() - self._awaiting_since < AWAIT_S:
                return False
            self._awaiting_since = None
        return (not self.registered and self._caught_up()
                and self.metadata_version >= ft.CONTROLLER_REGISTRATION_METADATA_VERSION)

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RECHECK_S):
                    await self._wake.wait()
            self._wake.clear()
            if not self._ready():
                continue
            self.sent += 1
            try:
                response = await self._send(self.request)
                code = response.error_code
                why = response.error_message
            except Exception as e:  # the channel gave up (no controller reachable): try again later
                code, why = ErrorCode.UNKNOWN_SERVER_ERROR, str(e) or type(e).__name__
            if code == ErrorCode.NONE:
                self._backoff.reset()
                # the record is committed: the image that shows it ends the work
                self._awaiting_since = asyncio.get_running_loop().time()
                continue
            self.failed += 1
            delay = self._backoff.next()
            log.warning("controller_registration_failed", node_id=self.node_id,
                        error=ErrorCode(code).name if code in ErrorCode._value2member_map_ else code,
                        message=why, retry_in_s=round(delay, 3))
            await asyncio.sleep(delay)
            self._wake.set()
