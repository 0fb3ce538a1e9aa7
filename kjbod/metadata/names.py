"""Kafka's rules for topic names: what a name may contain, and which names collide in metrics."""

from __future__ import annotations

import re
from collections.abc import Iterable

TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME = 249
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


def topic_name_problem(name: str | None) -> str | None:
    """Why a name is invalid, or None when it is fine."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME:
        return f"topic name is {len(name)} characters long; the maximum is {MAX_TOPIC_NAME}"
    if not TOPIC_NAME.fullmatch(name):
        return f"topic name {name!r} contains characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


def collision_index(names: Iterable[str]) -> dict[str, str]:
    """{name with '.' as '_': name} for the names that contain either character."""
    return {n.replace(".", "_"): n for n in names if "." in n or "_" in n}


def collision_problem(name: str, index: dict[str, str]) -> str | None:
    """Why `name` may not be created next to the topics in `index` (see collision_index), or None."""
    if "." not in name and "_" not in name:
        return None
    other = index.get(name.replace(".", "_"))
    if other is None or other == name:
        return None
    return f"topic {name!r} collides with existing topic {other!r} ('.' and '_' map to the same metric names)"
