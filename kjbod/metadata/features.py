"""Feature levels (KIP-584, KIP-778, KIP-1022): what this kjbod can run, and what a cluster has finalized.

kjbod serves these features:

* `metadata.version`, at Kafka's levels (1 = 3.0-IV1 ... 30 = 4.3-IV0).  kjbod runs 17 (3.7-IV2, the first with
  KIP-858's directory assignments, which every kjbod partition record carries) to 30.  What each level after 22
  brings, as Kafka 4.3 ties it to the level:
  - 23 (4.0-IV1): PartitionRecord and PartitionChangeRecord v2 (EligibleLeaderReplicas, LastKnownElr) and
    ClearElrRecord (KIP-966); the metadata records changed, so no downgrade below it.  Below 23 the partition
    records are written at v1 (kjbod.storage.metadata_records.record_versions).
  - 24 (4.0-IV2): the bootstrap level of transaction.version 1 and 2.
  - 25 (4.0-IV3): ListOffsets v10 between brokers (KIP-1075); kjbod's brokers already pick the highest version
    both ends serve.
  - 26 (4.1-IV0): eligible.leader.replicas.version 1 becomes the bootstrap level: new clusters keep an ELR.
  - 27 (4.1-IV1): Fetch v18 in the replica fetcher (KIP-1166); kjbod's fetcher picks the highest version served.
  - 28 (4.2-IV0) and 29 (4.2-IV1): the bootstrap levels of share.version 1 (share groups on in a new cluster)
    and streams.version 1 (streams groups on in a new cluster), and ListOffsets v11 between brokers.
  - 30 (4.3-IV0, Kafka 4.3's latest production level, what a new cluster starts at): KIP-1066's cordoned log
    dirs reach the controller.  Brokers send them in BrokerHeartbeat v2 once caught up; the controller keeps them
    in RegisterBrokerRecord v4 and BrokerRegistrationChangeRecord v3 (CordonedLogDirs) and places no new replica
    on a broker whose every dir is cordoned.  Below 30, as in Kafka, a broker still honours its own
    cordoned.log.dirs when it picks a dir, but sends nothing, reports IsCordoned false in DescribeLogDirs, and the
    controller ignores any cordon a heartbeat carries and writes the broker records at v3 and v2.  The records
    changed, so no downgrade below it.
* `eligible.leader.replicas.version` 0-1 (KIP-966): 1 has the controller keep each partition's eligible leader
  replicas (kjbod.controller.partition_change).  It depends on metadata.version 23 (4.0-IV1).
* `group.version` 0-1: 1 turns on KIP-848's consumer group protocol (ConsumerGroupHeartbeat,
  ConsumerGroupDescribe); at 0 those answer UNSUPPORTED_VERSION, as Kafka 4.0's do.
* `share.version` 0-1: 1 turns on KIP-932's share groups (ShareGroupHeartbeat, ShareGroupDescribe and the other
  share APIs); at 0 those answer UNSUPPORTED_VERSION, as Kafka's broker answers them.  ApiVersions lists the share
  APIs at either level, as Kafka's does.  A cluster formatted below metadata.version 28 (4.2-IV0) starts at 0.
* `streams.version` 0-1: 1 turns on KIP-1071's streams groups (StreamsGroupHeartbeat, StreamsGroupDescribe); at 0
  those answer UNSUPPORTED_VERSION.  As in Kafka 4.3, ApiVersions lists both APIs at either level (they are stable
  APIs there, gated by the handler, not by the listing).  A cluster formatted below metadata.version 29 (4.2-IV1)
  starts at 0; level 1 needs nothing beyond metadata.version 4, as Kafka's has no dependency.
* `transaction.version` 0-2: 1 has the transaction coordinator write its `__transaction_state` values in the
  flexible layout (value version 1), as Kafka's TV_1; 2 (KIP-890 part 2) tells producers they may speak it:
  EndTxn v5 (an epoch bump at every transaction end), Produce v12 and TxnOffsetCommit v5 adding partitions to the
  transaction through the leader.  As in Kafka, the coordinator answers each request by its version; the level
  picks the value layout and the rules of the coordinator's own aborts (kjbod.broker.txn).
* `kraft.version` 0-1 (KIP-853), which is not in the image: it is the metadata log's own level (0, static voters;
  1, voters in the log, set by `kjbod format --standalone` / `--initial-controllers`), which ApiVersions reports
  as Kafka does (finalized from the node's log); UpdateFeatures does not change it.

A new cluster runs at the metadata.version `kjbod format --release-version` names (the latest by default) and,
for the others, the level Kafka derives from that metadata.version (each feature level names the metadata.version
it is a bootstrap default from: group.version 1 from 4.0-IV0, transaction.version 1 and 2 from 4.0-IV2,
eligible.leader.replicas.version 1 from 4.1-IV0, share.version 1 from 4.2-IV0, streams.version 1 from 4.2-IV1),
capped at what kjbod runs.  `kjbod format` writes them
to the bootstrap file and the first active controller writes them as FeatureLevelRecords, the first batch of the
log (`activation_levels`).  From then on a level comes from the log only: a feature the log has no level for is at 0,
whatever kjbod's latest level is.  A log an older kjbod wrote without a metadata.version keeps the levels it ran at
(LEGACY_LEVELS, 4.2-IV1's; the controller writes them down when it activates).  Other features Kafka knows are left at 0, as a Kafka broker that does not support them would be.

Kafka's rules between them: a feature other than metadata.version may be above 0 only while metadata.version is
at least 4 (3.3-IV0), and each feature level may name further levels it needs (`DEPENDENCIES`: only
eligible.leader.replicas.version 1 has one, metadata.version 23).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

METADATA_VERSION = "metadata.version"
GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"
ELR_VERSION = "eligible.leader.replicas.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"

# Kafka's metadata.version levels: level -> (release, whether it changed the metadata records). A downgrade across a
# level that changed them could lose information and is refused, as Kafka refuses it.
RELEASES: dict[int, tuple[str, bool]] = {
    1: ("3.0-IV1", True), 2: ("3.1-IV0", False), 3: ("3.2-IV0", True), 4: ("3.3-IV0", False),
    5: ("3.3-IV1", True), 6: ("3.3-IV2", True), 7: ("3.3-IV3", True), 8: ("3.4-IV0", True),
    9: ("3.5-IV0", False), 10: ("3.5-IV1", False), 11: ("3.5-IV2", True), 12: ("3.6-IV0", False),
    13: ("3.6-IV1", True), 14: ("3.6-IV2", True), 15: ("3.7-IV0", True), 16: ("3.7-IV1", False),
    17: ("3.7-IV2", True), 18: ("3.7-IV3", False), 19: ("3.7-IV4", False), 20: ("3.8-IV0", False),
    21: ("3.9-IV0", False), 22: ("4.0-IV0", False), 23: ("4.0-IV1", True), 24: ("4.0-IV2", False),
    25: ("4.0-IV3", False), 26: ("4.1-IV0", False), 27: ("4.1-IV1", False), 28: ("4.2-IV0", False),
    29: ("4.2-IV1", False), 30: ("4.3-IV0", True),
}
LATEST_METADATA_VERSION = 30
CORDON_METADATA_VERSION = 30  # 4.3-IV0: cordoned log dirs in heartbeats and broker records (isCordonedLogDirsSupported)
ELR_METADATA_VERSION = 23  # 4.0-IV1: the ELR fields in the partition records (Kafka's isElrSupported)
# Kafka makes share.version 1 the bootstrap default from metadata.version 4.2-IV0 (its dependency map is empty): a
# cluster formatted at an older metadata.version starts with share groups off.
SHARE_VERSION_BOOTSTRAP_METADATA_VERSION = 28  # 4.2-IV0
STREAMS_VERSION_BOOTSTRAP_METADATA_VERSION = 29  # 4.2-IV1: Kafka's bootstrap default for streams.version 1
MINIMUM_METADATA_VERSION = 17  # 3.7-IV2: JBOD in KRaft (directory ids in partition records)
# NoOpRecord from 3.3-IV1 (Kafka 3.x's isNoOpRecordSupported; 4.x dropped the check, its minimum being above it),
# KIP-868 metadata transactions (Begin/End/AbortTransactionRecord) from 3.6-IV1, KIP-919 controller registrations
# (ControllerRegistration, RegisterControllerRecord) from 3.7-IV0: all below MINIMUM_METADATA_VERSION, so every
# level kjbod runs has them; the checks name them all the same, as Kafka's MetadataVersion does.
NO_OP_METADATA_VERSION = 5  # 3.3-IV1
TRANSACTIONS_METADATA_VERSION = 13  # 3.6-IV1
CONTROLLER_REGISTRATION_METADATA_VERSION = 15  # 3.7-IV0
TV_BOOTSTRAP_METADATA_VERSION = 24  # 4.0-IV2: Kafka's bootstrap default for transaction.version 1 and 2
# The metadata.version from which Kafka makes each level of a feature the bootstrap default (its
# FeatureVersion.bootstrapMetadataVersion; level 0's is Kafka's first KRaft level).
BOOTSTRAP_FROM: dict[str, dict[int, int]] = {
    GROUP_VERSION: {0: 1, 1: 22},  # 1: 4.0-IV0
    TRANSACTION_VERSION: {0: 1, 1: TV_BOOTSTRAP_METADATA_VERSION, 2: TV_BOOTSTRAP_METADATA_VERSION},
    ELR_VERSION: {0: 1, 1: 26},  # 1: 4.1-IV0
    SHARE_VERSION: {0: 1, 1: SHARE_VERSION_BOOTSTRAP_METADATA_VERSION},
    STREAMS_VERSION: {0: 1, 1: STREAMS_VERSION_BOOTSTRAP_METADATA_VERSION},
}
# The levels each feature level needs (Kafka's FeatureVersion.dependencies): feature -> level -> {feature: level}.
DEPENDENCIES: dict[str, dict[int, dict[str, int]]] = {
    ELR_VERSION: {1: {METADATA_VERSION: ELR_METADATA_VERSION}},
}
FEATURES_NEED_METADATA_VERSION = 4  # 3.3-IV0: the first level that keeps feature levels in the metadata log
SUPPORTED: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION),
    GROUP_VERSION: (0, 1),
    TRANSACTION_VERSION: (0, 2),
    ELR_VERSION: (0, 1),
    SHARE_VERSION: (0, 1),
    STREAMS_VERSION: (0, 1),
}


def default_level(feature: str, metadata_version: int) -> int:
    """The level of `feature` a cluster bootstrapped at `metadata_version` starts at (Kafka's
    Features.defaultValue: the highest level whose bootstrap metadata.version is not above it), within what kjbod
    supports."""
    level = 0
    for lvl, mv in sorted(BOOTSTRAP_FROM.get(feature, {}).items()):
        if mv > metadata_version:
            break
        level = lvl
    return min(level, SUPPORTED.get(feature, (0, 0))[1])


def bootstrap_levels(metadata_version: int) -> dict[str, int]:
    return {METADATA_VERSION: metadata_version,
            **{f: default_level(f, metadata_version) for f in BOOTSTRAP_FROM}}


BOOTSTRAP: dict[str, int] = bootstrap_levels(LATEST_METADATA_VERSION)
# What a log without a metadata.version record runs at: kjbod before it wrote its levels at activation (up to
# 4.2-IV1) read such a log as the bootstrap levels of 4.2-IV1, so that log keeps them (pinned: a later latest level
# must not raise an old cluster's levels), except streams.version, which no such kjbod served (0).  The active
# controller writes them as records (`activation_levels`).
LEGACY_METADATA_VERSION = 29
LEGACY_LEVELS: dict[str, int] = {**bootstrap_levels(LEGACY_METADATA_VERSION), STREAMS_VERSION: 0}


def dependency_refusal(feature: str, level: int, levels: Mapping[str, int]) -> str | None:
    """Why `feature` cannot be at `level` beside the other finalized `levels` (Kafka's
    Features.validateVersion), or None."""
    if feature != METADATA_VERSION and level >= 1 and levels.get(METADATA_VERSION, 0) < FEATURES_NEED_METADATA_VERSION:
        return (f"{feature} could not be set to {level} because it depends on metadata.version="
                f"{FEATURES_NEED_METADATA_VERSION} ({release_name(FEATURES_NEED_METADATA_VERSION)})")
    for needed, needed_level in DEPENDENCIES.get(feature, {}).get(level, {}).items():
        if levels.get(needed, 0) < needed_level:
            return f"{feature} could not be set to {level} because it depends on {needed} level {needed_level}"
    return None


def elr_enabled(image: Any) -> bool:
    """Whether the controller keeps eligible leader replicas (Kafka's isElrFeatureEnabled)."""
    return image is not None and finalized(image).get(ELR_VERSION, 0) >= 1


def activation_levels(image: Any, bootstrap: Mapping[str, int] | None, *, log_has_records: bool = False
                      ) -> dict[str, int] | None:
    """The levels the active controller writes, as the log's first batch, while the log holds no metadata.version
    (Kafka's activation records); None once it holds one.  Those `bootstrap.checkpoint` names (`kjbod format`
    writes it; `--release-version` and `--feature` choose them); without the file, a log that already has records
    (an older kjbod wrote it) keeps what it ran at (`finalized`: LEGACY_LEVELS under its own records), and an empty
    one starts at the bootstrap levels of the latest metadata.version."""
    if METADATA_VERSION in image.features:
        return None
    if bootstrap and METADATA_VERSION in bootstrap:
        return {**bootstrap_levels(bootstrap[METADATA_VERSION]), **bootstrap}
    if log_has_records:
        return finalized(image)
    return dict(BOOTSTRAP)


KRAFT_VERSION = "kraft.version"
KRAFT_VERSION_RANGE = (0, 1)  # 0: static voters; 1: KIP-853 voters in the metadata log
ADVERTISED: dict[str, tuple[int, int]] = {**SUPPORTED, KRAFT_VERSION: KRAFT_VERSION_RANGE}  # ApiVersions


def finalized(image: Any) -> dict[str, int]:
    """The cluster's finalized levels: every FeatureLevelRecord replayed; a feature the log has no level for is at
    0, as in Kafka.  A log with no metadata.version record at all (written by a kjbod before the controller wrote
    its levels, or not activated yet) reads as LEGACY_LEVELS under what it holds."""
    levels = dict(image.features)
    return levels if METADATA_VERSION in levels else {**LEGACY_LEVELS, **levels}


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


def cordons_supported(image: Any) -> bool:
    """Whether the finalized metadata.version carries KIP-1066's cordoned log dirs to the controller (Kafka's
    isCordonedLogDirsSupported, 4.3-IV0)."""
    return image is not None and finalized(image).get(METADATA_VERSION, 0) >= CORDON_METADATA_VERSION


def consumer_protocol_enabled(image: Any) -> bool:
    """Whether the finalized group.version turns on KIP-848's consumer group protocol (Kafka 4.0's
    isConsumerRebalanceProtocolSupported)."""
    return image is not None and finalized(image).get(GROUP_VERSION, 0) >= 1


def share_groups_enabled(image: Any) -> bool:
    """Whether the finalized share.version turns on KIP-932's share groups (Kafka's ShareVersion.supportsShareGroups);
    every share API answers UNSUPPORTED_VERSION while it is 0."""
    return image is not None and finalized(image).get(SHARE_VERSION, 0) >= 1


def streams_groups_enabled(image: Any) -> bool:
    """Whether the finalized streams.version turns on KIP-1071's streams groups (Kafka's
    StreamsVersion.streamsGroupSupported); StreamsGroupHeartbeat and StreamsGroupDescribe answer UNSUPPORTED_VERSION
    while it is 0."""
    return image is not None and finalized(image).get(STREAMS_VERSION, 0) >= 1
