"""A share group's settings, as the share-partition leader reads them.

Strategy: one function, `share_group_config(node, group_id)`, answering Kafka 4.3's share group config names with
their values.  This version answers Kafka 4.3's defaults only (a group's own configs and the broker's
group.share.* keys are the group coordinator's part, whose version of this module replaces this one).
"""

from __future__ import annotations

from typing import Any

# Kafka 4.3's defaults (GroupConfig, backed by ShareGroupConfig's broker defaults)
DEFAULTS: dict[str, Any] = {
    "share.record.lock.duration.ms": 30_000,
    "share.delivery.count.limit": 5,
    "share.partition.max.record.locks": 2000,
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
    "share.renew.acknowledge.enable": True,
}


def share_group_config(node: Any, group_id: str) -> dict[str, Any]:
    """The group's share settings by Kafka's config names."""
    return dict(DEFAULTS)
