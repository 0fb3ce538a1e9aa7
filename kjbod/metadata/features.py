"""Feature levels (KIP-584, KIP-778): what this kjbod can run, and what a cluster has finalized.

`metadata.version` is the one feature kjbod finalizes in the metadata image. Its levels are Kafka's (1 = 3.0-IV1 ... 21 = 3.9-IV0); kjbod
runs 17 (3.7-IV2, the first that has KIP-858's directory assignments, which every kjbod partition record carries)
to 21. A new cluster runs at 21: `finalized(image)` reports it until a FeatureLevelRecord says otherwise
(UpdateFeatures writes one; kjbod.controller.features). Other features Kafka knows (kraft.version, group.version,
transaction.version, ...) are left at 0, as a Kafka broker that does not support them would be, so clients keep to
what kjbod serves. `kraft.version` (KIP-853) is not in the image: it is the metadata log's own level (0, static
voters; 1, voters in the log, set by `kjbod format --standalone` / `--initial-controllers`), which ApiVersions
reports as Kafka does (supported 0-1; finalized from the node's log); UpdateFeatures does not change it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

METADATA_VERSION = "metadata.version"

# Kafka's metadata.version levels: level -> (release, whether it changed the metadata records). A downgrade across a
# level that changed them could lose information and is refused, as Kafka refuses it.
RELEASES: dict[int, tuple[str, bool]] = {
    1: ("3.0-IV1", True), 2: ("3.1-IV0", False), 3: ("3.2-IV0", True), 4: ("3.3-IV0", False),
    5: ("3.3-IV1", True), 6: ("3.3-IV2", True), 7: ("3.3-IV3", True), 8: ("3.4-IV0", True),
    9: ("3.5-IV0", False), 10: ("3.5-IV1", False), 11: ("3.5-IV2", True), 12: ("3.6-IV0", False),
    13: ("3.6-IV1", True), 14: ("3.6-IV2", True), 15: ("3.7-IV0", True), 16: ("3.7-IV1", False),
    17: ("3.7-IV2", True), 18: ("3.7-IV3", False), 19: ("3.7-IV4", False), 20: ("3.8-IV0", False),
    21: ("3.9-IV0", False),
}
LATEST_METADATA_VERSION = 21
MINIMUM_METADATA_VERSION = 17  # 3.7-IV2: JBOD in KRaft (directory ids in partition records)
SUPPORTED: dict[str, tuple[int, int]] = {METADATA_VERSION: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION)}
BOOTSTRAP: dict[str, int] = {METADATA_VERSION: LATEST_METADATA_VERSION}
KRAFT_VERSION = "kraft.version"
KRAFT_VERSION_RANGE = (0, 1)  # 0: static voters; 1: KIP-853 voters in the metadata log
ADVERTISED: dict[str, tuple[int, int]] = {**SUPPORTED, KRAFT_VERSION: KRAFT_VERSION_RANGE}  # ApiVersions


def finalized(image: Any) -> dict[str, int]:
    """The cluster's finalized levels: the bootstrap levels, then every FeatureLevelRecord replayed."""
    return {**BOOTSTRAP, **dict(image.features)}


def release_name(level: int) -> str:
    known = RELEASES.get(level)
    return known[0] if known is not None else str(level)


def metadata_version_level(text: str) -> int:
    """A release ("3.9", "3.7-IV2") or a level ("21") -> the metadata.version level; ValueError naming the
    releases this kjbod runs.  A release without an IV is its latest level, as Kafka's tools read it."""
    text = text.strip()
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    matches = [lvl for lvl, (name, _) in RELEASES.items() if name == text or name.split("-")[0] == text]
    if not matches:
        lo, hi = SUPPORTED[METADATA_VERSION]
        raise ValueError(f"unknown metadata.version {text!r} (kjbod runs {release_name(lo)} to {release_name(hi)})")
    return max(matches)


def metadata_changed_between(a: int, b: int) -> bool:
    """Whether some level in (low, high] changed the metadata records (Kafka's checkIfMetadataChanged)."""
    low, high = min(a, b), max(a, b)
    return any(RELEASES.get(lvl, ("", True))[1] for lvl in range(low + 1, high + 1))


def range_text(lo: int, hi: int) -> str:
    """Kafka's VersionRange text."""
    return str(lo) if lo == hi else f"{lo}-{hi}"


def unsupported_reason(level: int, who: str, ranges: Mapping[str, tuple[int, int]], feature: str) -> str | None:
    """Why `who` (a node whose supported ranges are `ranges`) cannot run `feature` at `level`, or None."""
    lo, hi = ranges.get(feature, (0, 0))
    if lo <= level <= hi:
        return None
    if hi == 0:
        return f"{who} does not support this feature."
    return f"{who} only supports versions {range_text(lo, hi)}"
