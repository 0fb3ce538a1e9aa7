"""Kafka's ``Uuid`` in its text form: URL-safe base64 of the 16 bytes (most significant half first), no padding.

Strategy: a Kafka Uuid is two int64 halves; its text form is what meta.properties, partition.metadata and the CLI
show (22 characters), its wire form is the 16 bytes. Ids are generated like ``java.util.UUID.randomUUID`` (a
version-4 UUID) and, like Kafka's ``Uuid.randomUuid``, never one whose text starts with ``-`` (unusable on a command
line). Directory ids additionally avoid the reserved range of KIP-858: most significant half 0 and least
significant half below 100 (UNASSIGNED, LOST, MIGRATING and 97 kept for later use).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable, Collection

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid(0, 0): Kafka's ZERO_UUID, also DirectoryId.MIGRATING
UNASSIGNED_DIR = "AAAAAAAAAAAAAAAAAAAAAQ"  # Uuid(0, 1)
LOST_DIR = "AAAAAAAAAAAAAAAAAAAAAg"  # Uuid(0, 2)
RESERVED_LSB_LIMIT = 100


def uuid_to_str(raw: bytes) -> str:
    if len(raw) != 16:
        raise ValueError(f"a Kafka Uuid is 16 bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def uuid_from_str(text: str) -> bytes:
    """Decode a Kafka Uuid text; ValueError unless it is exactly 16 bytes of URL-safe base64."""
    if len(text) != 22:
        raise ValueError(f"not a Kafka Uuid (want 22 base64 characters): {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"not a Kafka Uuid: {text!r}") from e
    if len(raw) != 16 or uuid_to_str(raw) != text:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    return raw


def uuid_text(value: object) -> str:
    """A topic or directory id as Kafka text, from text, 16 bytes, or a ``uuid.UUID`` (anything with ``.bytes``)."""
    if isinstance(value, str):
        uuid_from_str(value)
        return value
    if isinstance(value, (bytes, bytearray)):
        return uuid_to_str(bytes(value))
    raw = getattr(value, "bytes", None)
    if isinstance(raw, bytes):
        return uuid_to_str(raw)
    raise TypeError(f"not a Kafka Uuid: {value!r}")


def uuid_halves(raw: bytes) -> tuple[int, int]:
    """(most significant, least significant) halves as unsigned 64-bit ints."""
    return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")


def is_reserved_directory_id(text_or_raw: str | bytes) -> bool:
    raw = uuid_from_str(text_or_raw) if isinstance(text_or_raw, str) else text_or_raw
    msb, lsb = uuid_halves(raw)
    return msb == 0 and lsb < RESERVED_LSB_LIMIT


def _random_v4(urandom: Callable[[int], bytes]) -> bytes:
    raw = bytearray(urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4, as java.util.UUID.randomUUID
    raw[8] = (raw[8] & 0x3F) | 0x80  # IETF variant
    return bytes(raw)


def random_uuid(*, urandom: Callable[[int], bytes] = os.urandom) -> str:
    """A random Kafka Uuid (for cluster ids and topic ids): never the zero id, never text starting with '-'."""
    while True:
        raw = _random_v4(urandom)
        text = uuid_to_str(raw)
        if raw != bytes(16) and not text.startswith("-"):
            return text


def random_directory_id(
    *, existing: Collection[str] = (), urandom: Callable[[int], bytes] = os.urandom, version4: bool = True
) -> str:
    """A random directory id: not reserved, not starting with '-', not in ``existing`` (this node's other dirs).

    ``version4=False`` draws all 128 bits at random (used by tests to exercise the reserved-range rejection,
    which a version-4 UUID can never hit because its version nibble makes the high half non-zero).
    """
    while True:
        raw = _random_v4(urandom) if version4 else bytes(urandom(16))
        if is_reserved_directory_id(raw):
            continue
        text = uuid_to_str(raw)
        if text.startswith("-") or text in existing:
            continue
        return text
