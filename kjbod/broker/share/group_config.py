"""A share group's effective configs, for the share-partition leader and the group coordinator.

Strategy: Kafka's GroupConfig keys of share groups, each the group's own value (a ConfigRecord of resource type 32
in the metadata image, set with IncrementalAlterConfigs on a GROUP resource) or else the broker's key behind it
(group.share.*) or Kafka's default:

  share.session.timeout.ms          int   group.share.session.timeout.ms (45000)
  share.heartbeat.interval.ms       int   group.share.heartbeat.interval.ms (5000)
  share.record.lock.duration.ms     int   group.share.record.lock.duration.ms (30000)
  share.delivery.count.limit        int   group.share.delivery.count.limit (5)
  share.partition.max.record.locks  int   group.share.partition.max.record.locks (2000)
  share.auto.offset.reset           str   "latest" ("earliest", "latest" or "by_duration:<PnDTnHnMn.nS>")
  share.isolation.level             str   "read_uncommitted" (or "read_committed")
  share.renew.acknowledge.enable    bool  True

The values were checked by the controller when they were set (kjbod.broker.broker_config.plan_group_changes);
`auto_offset_reset` reads share.auto.offset.reset's forms.
"""

from __future__ import annotations

from typing import Any

from kjbod.broker import broker_config as bc
from kjbod.broker.broker_config import auto_offset_reset as auto_offset_reset

SHARE_KEYS = tuple(name for name in bc.GROUP_KEYS if name.startswith("share."))


def share_group_config(node: Any, group_id: str) -> dict[str, Any]:
    """The share.* configs of `group_id` on this node: its own values over the broker's keys (see the module)."""
    metadata = getattr(node, "metadata", None)
    overrides = metadata.resource_configs(bc.GROUP, group_id) if metadata is not None else {}
    values = bc.group_values(node.config, overrides)
    out = {k: values[k] for k in SHARE_KEYS}
    c = node.config
    for key, broker_value in (("share.record.lock.duration.ms", c.group_share_record_lock_duration_ms),
                              ("share.delivery.count.limit", c.group_share_delivery_count_limit),
                              ("share.partition.max.record.locks", c.group_share_partition_max_record_locks)):
        if key not in overrides:  # (group_values has the same: named here for readers of the broker keys)
            out[key] = broker_value
    out["share.auto.offset.reset"] = str(out["share.auto.offset.reset"]).lower()
    return out
