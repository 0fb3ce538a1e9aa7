"""UpdateFeatures at the controller, in process (Kafka's FeatureControlManager rules), and the feature levels a
registration must support once finalized.  The live test (tests/cli/test_features_live.py) drives it through
`kjbod features` against a real node."""

from __future__ import annotations

import pytest

from kjbod.controller.features import update_features
from kjbod.controller.result import ControllerResult
from kjbod.metadata import EMPTY_IMAGE
from kjbod.metadata import features as ft
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import FeatureLevelRecord, UpdateFeaturesRequest
from kjbod.protocol.generated.broker_registration_request import Feature
from kjbod.protocol.generated.update_features_request import FeatureUpdateKey

from .test_managers import Ctx

MV = ft.METADATA_VERSION
GV = ft.GROUP_VERSION
TV = ft.TRANSACTION_VERSION
SV = ft.SHARE_VERSION
STV = ft.STREAMS_VERSION
ELR = ft.ELR_VERSION


def request(*updates: tuple[str, int, int], validate_only: bool = False) -> UpdateFeaturesRequest:
    return UpdateFeaturesRequest(validate_only=validate_only, feature_updates=[
        FeatureUpdateKey(feature=f, max_version_level=level, upgrade_type=kind, allow_downgrade=kind != 1)
        for f, level, kind in updates])


def supporting(lo: int, hi: int, **others: tuple[int, int]) -> list[Feature]:
    return [Feature(name=MV, min_supported_version=lo, max_supported_version=hi)] + [
        Feature(name=name.replace("_", "."), min_supported_version=a, max_supported_version=b)
        for name, (a, b) in others.items()]


@pytest.fixture
def ctx() -> Ctx:
    c = Ctx()
    c.live_broker(1, features=supporting(17, 21))
    c.live_broker(2, features=supporting(17, 20))
    return c


def update(ctx: Ctx, req: UpdateFeaturesRequest, version: int = 1):
    return ctx.commit(update_features(ctx.image, req, version, node_id=3000))


def new_cluster() -> Ctx:
    """A cluster as a new kjbod cluster starts: the active controller's first records are the bootstrap levels of
    the latest metadata.version (its activation records)."""
    ctx = Ctx()
    ctx.commit(ControllerResult([FeatureLevelRecord(name=n, feature_level=v)
                                 for n, v in ft.activation_levels(EMPTY_IMAGE, None).items()], None))
    return ctx


def every_feature(lo: int, hi: int) -> list[Feature]:
    """A broker offering metadata.version lo-hi and every other feature's range as kjbod serves it."""
    return supporting(lo, hi, **{name.replace(".", "_"): r for name, r in ft.SUPPORTED.items() if name != MV})


def test_a_new_cluster_runs_the_newest_level_until_told_otherwise():
    ctx = new_cluster()
    ctx.live_broker(1, features=every_feature(17, 30))
    # metadata.version 4.3-IV0 (Kafka 4.3's latest production level), and Kafka's defaults at it: group.version 1
    # (from 4.0-IV0), transaction.version 2 (from 4.0-IV2), eligible.leader.replicas.version 1 (from 4.1-IV0),
    # share.version 1 (from 4.2-IV0), streams.version 1 (from 4.2-IV1).
    assert ft.finalized(ctx.image) == {MV: 30, GV: 1, TV: 2, ELR: 1, SV: 1, STV: 1}
    assert ft.cordons_supported(ctx.image)
    resp = update(ctx, request((MV, 29, 2)))  # 4.3-IV0 changed the broker records: no safe way back
    assert resp.error_code == E.INVALID_UPDATE_VERSION and "downgrade from 30 to 29" in resp.error_message
    assert ft.finalized(ctx.image)[MV] == 30


def test_a_cluster_at_4_2_iv1_may_go_down_safely_and_up_to_4_3_iv0():
    ctx = Ctx()
    ctx.commit(ControllerResult([FeatureLevelRecord(name=MV, feature_level=29)], None))
    ctx.live_broker(1, features=supporting(17, 30))
    assert not ft.cordons_supported(ctx.image)
    resp = update(ctx, request((MV, 23, 2)))  # a safe downgrade: no level between 23 and 29 changed the records
    assert (resp.error_code, [(r.feature, r.error_code) for r in resp.results]) == (0, [(MV, 0)])
    assert ft.finalized(ctx.image)[MV] == 23
    before = list(ctx.log)
    resp = update(ctx, request((MV, 24, 1), validate_only=True))
    assert resp.error_code == 0 and ctx.log == before and ft.finalized(ctx.image)[MV] == 23
    assert update(ctx, request((MV, 30, 1)), version=2).results == []  # v2 answers with the top-level error only
    assert ft.finalized(ctx.image)[MV] == 30 and ft.cordons_supported(ctx.image)


@pytest.fixture
def old(ctx) -> Ctx:
    """A cluster formatted at 3.9 (metadata.version 21): the levels bootstrap.checkpoint names, in the log."""
    ctx.commit(ControllerResult([FeatureLevelRecord(name=n, feature_level=v)
                                 for n, v in ft.bootstrap_levels(21).items()], None))
    return ctx


@pytest.mark.parametrize(("updates", "message"), [
    ([(MV, 31, 1)], "Invalid update version 31 for feature metadata.version. Local controller 3000 only supports "
                    "versions 17-30"),
    ([(MV, 22, 1)], "Invalid update version 22 for feature metadata.version. Broker 1 only supports versions 17-21"),
    ([(MV, 16, 2)], "Local controller 3000 only supports versions 17-30"),
    ([("kraft.version", 1, 1)], "Local controller 3000 does not support this feature."),
    ([(TV, 3, 1)], "Invalid update version 3 for feature transaction.version. Local controller 3000 only supports "
                   "versions 0-2"),
    ([(TV, 1, 1)], "Broker 1 does not support this feature."),  # these brokers know metadata.version only
    ([(MV, 19, 1)], "Can't downgrade the version of this feature without setting the upgrade type"),
    ([(MV, -1, 2)], "A feature version cannot be less than 0."),
    ([(MV, 19, 7)], "The controller does not support the given upgrade type."),
    ([(MV, 19, 2), ("kraft.version", 1, 1)], "kraft.version"),  # one refusal refuses the whole request
])
def test_refusals_are_invalid_update_version_with_kafkas_words(old, updates, message):
    before = list(old.log)
    resp = update(old, request(*updates))
    assert resp.error_code == E.INVALID_UPDATE_VERSION and message in resp.error_message
    assert resp.results == [] and old.log == before


def test_no_downgrade_across_a_level_that_changed_the_records():
    assert ft.metadata_changed_between(17, 22) is False and ft.metadata_changed_between(22, 23) is True
    assert ft.metadata_changed_between(23, 29) is False and ft.metadata_changed_between(29, 30) is True
    ctx = Ctx()
    ctx.commit(ControllerResult([FeatureLevelRecord(name=MV, feature_level=29)], None))
    ctx.live_broker(1, features=supporting(17, 29, eligible_leader_replicas_version=(0, 1)))
    # 4.0-IV1 added the ELR fields to the partition records: 29 -> 22 could lose them.
    resp = update(ctx, request((MV, 22, 2)))
    assert resp.error_code == E.INVALID_UPDATE_VERSION and resp.error_message == (
        "Unsupported metadata.version downgrade from 29 to 22. Refusing to perform the requested downgrade because "
        "it might delete metadata information.")
    resp = update(ctx, request((MV, 17, 3)))
    assert resp.error_message == ("Unsupported metadata.version downgrade from 29 to 17. Unsafe metadata downgrade "
                                  "is not supported in this version.")
    assert ft.finalized(ctx.image)[MV] == 29
    assert update(ctx, request((MV, 23, 2))).error_code == 0  # 24-29 changed nothing: safe
    assert update(ctx, request((MV, 29, 1))).error_code == 0  # upgrades are always allowed


def test_the_elr_needs_metadata_version_4_0_iv1(old):
    for b in (1, 2):
        old.register(b, features=supporting(17, 29, eligible_leader_replicas_version=(0, 1)))
    assert ft.finalized(old.image)[ELR] == 0 and not ft.elr_enabled(old.image)
    before = list(old.log)
    resp = update(old, request((ELR, 1, 1)))
    assert resp.error_code == E.INVALID_UPDATE_VERSION and resp.error_message == (
        "Invalid update version 1 for feature eligible.leader.replicas.version. eligible.leader.replicas.version "
        "could not be set to 1 because it depends on metadata.version level 23")
    assert old.log == before
    # Both in one request: the dependency counts the levels the request sets.
    assert update(old, request((MV, 23, 1), (ELR, 1, 1))).error_code == 0
    assert ft.finalized(old.image)[MV] == 23 and ft.elr_enabled(old.image)
    assert update(old, request((ELR, 0, 2))).error_code == 0 and not ft.elr_enabled(old.image)


def test_a_broker_that_cannot_run_the_finalized_level_cannot_register(old):
    assert old.register(4, features=supporting(17, 21)).error_code == 0
    assert old.register(5, features=supporting(17, 20)).error_code == E.UNSUPPORTED_VERSION
    assert old.register(6, features=supporting(17, 22)).error_code == 0


def test_release_names_and_levels():
    assert ft.metadata_version_level("3.9") == 21 and ft.metadata_version_level("3.7") == 19
    assert ft.metadata_version_level("3.7-IV2") == 17 and ft.metadata_version_level("20") == 20
    assert ft.release_name(17) == "3.7-IV2" and ft.release_name(23) == "4.0-IV1"
    assert ft.metadata_version_level("4.0") == 25 and ft.metadata_version_level("4.1") == 27
    assert ft.metadata_version_level("4.2") == 29 and ft.release_name(29) == "4.2-IV1"
    assert ft.metadata_version_level("4.3") == 30 and ft.release_name(30) == "4.3-IV0"
    with pytest.raises(ValueError, match="kjbod runs 3.7-IV2 to 4.3-IV0"):
        ft.metadata_version_level("4.4")


def test_bootstrap_levels_follow_the_release():
    assert ft.bootstrap_levels(21) == {MV: 21, GV: 0, TV: 0, ELR: 0, SV: 0, STV: 0}
    assert ft.bootstrap_levels(22) == {MV: 22, GV: 1, TV: 0, ELR: 0, SV: 0, STV: 0}
    assert ft.bootstrap_levels(24) == {MV: 24, GV: 1, TV: 2, ELR: 0, SV: 0, STV: 0}
    assert ft.bootstrap_levels(26) == {MV: 26, GV: 1, TV: 2, ELR: 1, SV: 0, STV: 0}
    assert ft.bootstrap_levels(28) == {MV: 28, GV: 1, TV: 2, ELR: 1, SV: 1, STV: 0}
    assert ft.bootstrap_levels(29) == {MV: 29, GV: 1, TV: 2, ELR: 1, SV: 1, STV: 1}
    assert ft.bootstrap_levels(30) == {MV: 30, GV: 1, TV: 2, ELR: 1, SV: 1, STV: 1}


def test_group_and_transaction_versions_change_and_their_zero_is_kept():
    ctx = new_cluster()
    ctx.live_broker(1, features=every_feature(17, 30))
    assert update(ctx, request((TV, 1, 2), (GV, 0, 2))).error_code == 0  # both down from a new cluster's levels
    assert ft.finalized(ctx.image) == {MV: 30, GV: 0, TV: 1, ELR: 1, SV: 1, STV: 1}  # group.version 0 stays 0, not the bootstrap 1
    assert not ft.consumer_protocol_enabled(ctx.image)
    assert update(ctx, request((GV, 1, 1))).error_code == 0
    assert ft.consumer_protocol_enabled(ctx.image)
    resp = update(ctx, request((TV, 0, 1)))
    assert resp.error_code == E.INVALID_UPDATE_VERSION and "Can't downgrade" in resp.error_message


def test_kafkas_default_levels_and_dependency_rule():
    # Features.defaultValue: the highest level whose bootstrap metadata.version is not above the given one.
    assert [ft.default_level(GV, mv) for mv in (21, 22, 25)] == [0, 1, 1]
    assert [ft.default_level(TV, mv) for mv in (22, 23, 24)] == [0, 0, 2]  # 4.0-IV2: Kafka's TV_2 default
    assert ft.dependency_refusal(GV, 1, {MV: 3}) == (
        "group.version could not be set to 1 because it depends on metadata.version=4 (3.3-IV0)")
    assert ft.dependency_refusal(GV, 0, {MV: 3}) is None and ft.dependency_refusal(TV, 1, {MV: 17}) is None
