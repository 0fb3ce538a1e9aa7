"""UpdateFeatures (API 57) on the controller: Kafka's FeatureControlManager rules, records in the metadata log.

Each update, in request order, is checked (the first refusal refuses the whole request, nothing written): an
unknown upgrade type, a level below 0, a level the controller itself or any registered broker cannot run
("Local controller N only supports versions 17-22", "Broker 2 does not support this feature."), or any
other controller registered in the metadata (KIP-919: "Controller 3 ..."; a voter that has not registered yet
refuses it too: "controller 3 has not registered, and may not support this feature"), a lower level
without a downgrade type ("Can't downgrade ... without setting the upgrade type ..."), a higher level with one
("Can't downgrade to a newer version."), a feature above 0 while metadata.version is below 3.3-IV0 (Kafka's
dependency rules, kjbod.metadata.features.dependency_refusal: eligible.leader.replicas.version 1 needs
metadata.version 4.0-IV1, counting the levels the same request sets); for metadata.version also a level kjbod
does not know and a downgrade across levels that changed the metadata records ("Unsupported metadata.version
downgrade from 29 to 22. ...": information could be lost; an unsafe downgrade is not supported, as in Kafka). Each refusal is INVALID_UPDATE_VERSION with Kafka's message. Accepted updates become
FeatureLevelRecords, written together (ValidateOnly: checked only). Answer: the error at the top and, before v2,
each named feature with it on success (Kafka's UpdateFeaturesResponse.createWithErrors).  An accepted update that
sets eligible.leader.replicas.version above 0 writes, before the levels, the config records that make the ELR safe
(kjbod.controller.configs.elr_safety_records).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kjbod.controller.configs import elr_safety_records
from kjbod.controller.result import ControllerResult
from kjbod.metadata import features as ft
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FeatureLevelRecord, UpdateFeaturesRequest, UpdateFeaturesResponse
from kjbod.protocol.generated.update_features_response import UpdatableFeatureResult

__all__ = ["update_features"]

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def _refusal(feature: str, level: int, why: str) -> tuple[int, str]:
    return ErrorCode.INVALID_UPDATE_VERSION, f"Invalid update version {level} for feature {feature}. {why}"


def _check(feature: str, level: int, kind: int, current: dict[str, int], proposed: dict[str, int], node_id: int,
           brokers: Mapping[int, Mapping[str, tuple[int, int]]],
           controllers: Mapping[int, Mapping[str, tuple[int, int]]] = {},  # noqa: B006 (read only)
           quorum_ids: tuple[int, ...] = ()) -> tuple[int, str] | None:
    if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return _refusal(feature, level, "The controller does not support the given upgrade type.")
    now = current.get(feature, 0)
    if level < 0:
        return _refusal(feature, level, "A feature version cannot be less than 0.")
    why = ft.unsupported_reason(level, f"Local controller {node_id}", ft.SUPPORTED, feature)
    for broker_id, ranges in sorted(brokers.items()):
        why = why or ft.unsupported_reason(level, f"Broker {broker_id}", ranges, feature)
    for controller_id, ranges in sorted(controllers.items()):
        if controller_id != node_id:  # this controller was checked first, against what it runs
            why = why or ft.unsupported_reason(level, f"Controller {controller_id}", ranges, feature)
    for voter in quorum_ids:
        if voter != node_id and voter not in controllers:
            why = why or f"controller {voter} has not registered, and may not support this feature"
    if why is not None:
        return _refusal(feature, level, why)
    if level < now and kind == UPGRADE:
        return _refusal(feature, level, "Can't downgrade the version of this feature without setting the upgrade "
                                        "type to either safe or unsafe downgrade.")
    if level > now and kind != UPGRADE:
        return _refusal(feature, level, "Can't downgrade to a newer version.")
    if (why := ft.dependency_refusal(feature, level, proposed)) is not None:
        return _refusal(feature, level, why)
    if feature == ft.METADATA_VERSION and level < now and ft.metadata_changed_between(now, level):
        why = ("Unsafe metadata downgrade is not supported in this version." if kind == UNSAFE_DOWNGRADE else
               "Refusing to perform the requested downgrade because it might delete metadata information.")
        return ErrorCode.INVALID_UPDATE_VERSION, f"Unsupported metadata.version downgrade from {now} to {level}. {why}"
    return None


def update_features(image: Any, req: UpdateFeaturesRequest, version: int, node_id: int,
                    quorum_ids: tuple[int, ...] = (), static_min_isr: int = 1) -> ControllerResult:
    """`quorum_ids`: the voters of the controller quorum, each of which must have registered (KIP-919);
    `static_min_isr`: the controller's own min.insync.replicas (for the ELR's safety records)."""
    current = ft.finalized(image)
    # Dependencies are checked against every level the request asks for at once (Kafka's proposed levels), so
    # metadata.version and eligible.leader.replicas.version may go up together.
    proposed = {**current, **{u.feature: u.max_version_level for u in req.feature_updates}}
    brokers = {b: dict(reg.features) for b, reg in image.brokers.items()}
    controllers = {c: dict(reg.features) for c, reg in image.controllers.items()}
    records: list[Any] = []
    error: tuple[int, str] | None = None
    for u in req.feature_updates:
        kind = u.upgrade_type if version >= 1 else (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE)
        error = _check(u.feature, u.max_version_level, kind, current, proposed, node_id, brokers, controllers,
                       quorum_ids)
        if error is not None:
            break
        records.append(FeatureLevelRecord(name=u.feature, feature_level=max(u.max_version_level, 0)))
    code, message = error if error is not None else (ErrorCode.NONE, None)
    results = [] if error is not None or version >= 2 else [
        UpdatableFeatureResult(feature=u.feature, error_code=0, error_message=None) for u in req.feature_updates]
    response = UpdateFeaturesResponse(error_code=code, error_message=message, results=results)
    if error is not None or (version >= 1 and req.validate_only):
        return ControllerResult([], response)
    if any(r.name == ft.ELR_VERSION and r.feature_level > 0 for r in records):
        records = elr_safety_records(image, static_min_isr) + records
    return ControllerResult(records, response)
