"""AlterConfigs and IncrementalAlterConfigs on the controller: ConfigRecords for topics, brokers by id, the
cluster default broker resource "", client metrics subscriptions (KIP-714, kjbod.metadata.client_metrics) and
groups (type 32, KIP-848: a group need not exist to be configured, as in Kafka; the empty name is
INVALID_REQUEST).

Each resource is checked whole before any record of it is written; resources are independent (Kafka's rule).
A resource named twice, or a key named twice in one resource, is INVALID_REQUEST; an unknown topic
UNKNOWN_TOPIC_OR_PARTITION; other resource types INVALID_REQUEST; keys and values as the config policy says;
then, as Kafka's existence check, a broker id that is not registered BROKER_ID_NOT_REGISTERED.
`validate_only` checks and writes nothing.  With eligible.leader.replicas.version 1, a change to
min.insync.replicas also writes a ClearElrRecord (for that topic, or for every topic when a broker or cluster
default changed), as Kafka's controller does.  While that feature is on, the ELR is kept against one
min.insync.replicas for the whole cluster: a broker's own min.insync.replicas, and removing the cluster-wide
one, are INVALID_CONFIG (Kafka's messages); raising the feature writes the cluster-wide value (the controller's
static one, when none is set) and removes every broker's own (`elr_safety_records`, Kafka's
maybeGenerateElrSafetyRecords).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kjbod.controller.result import ConfigPolicy, ControllerResult, PolicyError
from kjbod.metadata import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE, MetadataImage, client_metrics
from kjbod.metadata.client_metrics import CLIENT_METRICS_RESOURCE
from kjbod.metadata.features import elr_enabled
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ClearElrRecord, ConfigRecord

MIN_ISR_KEY = "min.insync.replicas"

Change = tuple[str, int, str | None]  # (key, operation, value)


def _duplicates(items: list[str]) -> set[str]:
    return {i for i, n in Counter(items).items() if n > 1}


def _registered(image: MetadataImage, name: str) -> None:
    """Kafka's ConfigResourceExistenceChecker for a broker resource."""
    try:
        broker_id = int(name)
    except ValueError:
        raise PolicyError(ErrorCode.INVALID_REQUEST, f"Invalid broker name {name}") from None
    if broker_id not in image.brokers:
        raise PolicyError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"No node with id {broker_id} found.")


def elr_safety_records(image: MetadataImage, static_min_isr: int) -> list[Any]:
    """What makes turning the ELR on safe: a cluster-wide min.insync.replicas (`static_min_isr` when none is
    set) and no broker's own."""
    records: list[Any] = []
    if MIN_ISR_KEY not in image.resource_configs(BROKER_RESOURCE, ""):
        records.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_ISR_KEY,
                                    value=str(static_min_isr)))
    for (rtype, name), configs in sorted(image.configs.items()):
        if rtype == BROKER_RESOURCE and name and MIN_ISR_KEY in configs:
            records.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=name, name=MIN_ISR_KEY,
                                        value=None))
    return records


def _elr_min_isr_refusal(records: list[Any]) -> None:
    """Kafka's isDisallowedBrokerMinIsrTransition and isDisallowedClusterMinIsrTransition (the ELR is on)."""
    for r in records:
        if r.name != MIN_ISR_KEY:
            continue
        if r.resource_name:
            raise PolicyError(ErrorCode.INVALID_CONFIG,
                              f"Broker-level {MIN_ISR_KEY} cannot be altered while ELR is enabled.")
        if r.value is None:
            raise PolicyError(ErrorCode.INVALID_CONFIG,
                              f"Cluster-level {MIN_ISR_KEY} cannot be removed while ELR is enabled.")


def alter_configs(image: MetadataImage, resources: list[tuple[int, str, list[Change]]], policy: ConfigPolicy, *,
                  replace: bool, validate_only: bool,
                  canonical: dict[str, str] | None = None) -> ControllerResult:
    """Records and one (error code, message) per resource.  `canonical` maps key aliases to their names."""
    aliases = canonical or {}
    dup_resources = _duplicates([f"{t}\0{n}" for t, n, _ in resources])
    records: list[Any] = []
    answers: list[tuple[int, str | None]] = []
    for rtype, name, changes in resources:
        try:
            if f"{rtype}\0{name}" in dup_resources:
                raise PolicyError(ErrorCode.INVALID_REQUEST, f"resource {name!r} appears more than once")
            dup_keys = _duplicates([aliases.get(k, k) for k, _, _ in changes])
            if dup_keys:
                raise PolicyError(ErrorCode.INVALID_REQUEST,
                                  f"duplicate config keys in one resource: {', '.join(sorted(dup_keys))}")
            if rtype == BROKER_RESOURCE:
                current = dict(image.resource_configs(BROKER_RESOURCE, name))
                planned = policy.plan_broker(current, name, changes, replace=replace)
                if name:
                    _registered(image, name)
                new_records = [ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=name, name=k, value=v)
                               for k, v in sorted(planned.items())]
                if elr_enabled(image):
                    _elr_min_isr_refusal(new_records)
            elif rtype == TOPIC_RESOURCE:
                topic = image.topic(name)
                if topic is None:
                    raise PolicyError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
                old = dict(topic.configs)
                new = policy.plan_topic(old, changes, replace=replace)
                new_records = [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=k, value=None)
                               for k in sorted(old) if k not in new]
                new_records += [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=k, value=v)
                                for k, v in sorted(new.items()) if old.get(k) != v]
            elif rtype == CLIENT_METRICS_RESOURCE:
                old = dict(image.resource_configs(CLIENT_METRICS_RESOURCE, name))
                try:
                    new = client_metrics.plan(old, name, changes, replace=replace)
                except client_metrics.ClientMetricsConfigError as e:
                    raise PolicyError(e.code, e.message) from None
                new_records = [ConfigRecord(resource_type=CLIENT_METRICS_RESOURCE, resource_name=name, name=k,
                                            value=None) for k in sorted(old) if k not in new]
                new_records += [ConfigRecord(resource_type=CLIENT_METRICS_RESOURCE, resource_name=name, name=k,
                                             value=v) for k, v in sorted(new.items()) if old.get(k) != v]
            elif rtype == GROUP_RESOURCE:
                if not name:
                    raise PolicyError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
                old = dict(image.resource_configs(GROUP_RESOURCE, name))
                new = policy.plan_group(old, changes, replace=replace)
                new_records = [ConfigRecord(resource_type=GROUP_RESOURCE, resource_name=name, name=k, value=None)
                               for k in sorted(old) if k not in new]
                new_records += [ConfigRecord(resource_type=GROUP_RESOURCE, resource_name=name, name=k, value=v)
                                for k, v in sorted(new.items()) if old.get(k) != v]
            else:
                raise PolicyError(ErrorCode.INVALID_REQUEST, f"resource type {rtype} is not supported (kjbod serves "
                                  "topics (2), brokers (4), client metrics (16) and groups (32))")
            if not validate_only:
                records += new_records
            answers.append((ErrorCode.NONE, None))
        except PolicyError as e:
            answers.append((e.code, e.message))
    if elr_enabled(image):
        # KIP-966: an ELR was kept against the old min.insync.replicas; a change to it (a topic's, or a broker or
        # cluster default) empties the ELRs it may govern (Kafka's createClearElrRecordsAsNeeded).
        records += [ClearElrRecord(topic_name=r.resource_name if r.resource_type == TOPIC_RESOURCE else "")
                    for r in list(records) if r.name == MIN_ISR_KEY]
    return ControllerResult(records, answers)
