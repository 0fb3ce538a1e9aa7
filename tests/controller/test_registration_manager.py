"""The controller registration manager (KIP-919) against stand-in images: when it sends, and when it does not."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from kjbod.controller.registration import ControllerRegistrationManager
from kjbod.metadata import features as ft
from kjbod.protocol.generated import ControllerRegistrationRequest, ControllerRegistrationResponse

MV = ft.LATEST_METADATA_VERSION


def image(mv: int | None, registered: uuid.UUID | None = None) -> Any:
    """Only what the manager reads: the finalized levels and the controller registrations."""
    return SimpleNamespace(features={} if mv is None else {ft.METADATA_VERSION: mv},
                           controllers={} if registered is None else {3: SimpleNamespace(incarnation_id=registered)})


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)


async def test_sends_once_per_change_and_not_before_a_metadata_version() -> None:
    me = uuid.uuid4()
    sent: list[Any] = []

    async def send(request: Any) -> Any:
        sent.append(request)
        return ControllerRegistrationResponse(error_code=0)

    manager = ControllerRegistrationManager(ControllerRegistrationRequest(controller_id=3, incarnation_id=me), send)
    manager.start()
    try:
        manager.on_metadata(image(None))  # no metadata.version in the log yet: Kafka waits, so does the manager
        await settle()
        assert sent == []
        manager.on_metadata(image(MV))
        await settle()
        assert len(sent) == 1
        # Images that change nothing of this registration (NoOpRecords, a follower's replay lagging behind the
        # commit) do not send it again while its record is on its way.
        for _ in range(5):
            manager.on_metadata(image(MV))
            await settle()
        assert len(sent) == 1 and not manager.registered
        manager.on_metadata(image(MV, registered=me))
        assert manager.registered
        # Another incarnation's record (an older process's, written late) replaces it: register again, once.
        manager.on_metadata(image(MV, registered=uuid.uuid4()))
        await settle()
        manager.on_metadata(image(MV, registered=uuid.uuid4()))  # and again for a further change
        await settle()
        assert len(sent) == 3 and not manager.registered
    finally:
        await manager.stop()


async def test_a_refused_registration_is_retried_after_a_backoff() -> None:
    codes = [7, 0]  # REQUEST_TIMED_OUT, then success
    sent: list[int] = []

    async def send(request: Any) -> Any:
        sent.append(codes[0])
        return ControllerRegistrationResponse(error_code=codes.pop(0))

    manager = ControllerRegistrationManager(
        ControllerRegistrationRequest(controller_id=3, incarnation_id=uuid.uuid4()), send)
    manager.start()
    try:
        manager.on_metadata(image(MV))
        for _ in range(100):
            if len(sent) == 2:
                break
            await asyncio.sleep(0.02)
        assert sent == [7, 0] and manager.failed == 1
    finally:
        await manager.stop()
