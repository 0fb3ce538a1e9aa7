"""UpdateFeatures at the controller, in process (Kafka's FeatureControlManager rules), and the feature levels a
registration must support once finalized.  The live test (tests/cli/test_features_live.py) drives it through
`kjbod features` against a real node."""

from __future__ import annotations

import pytest

from kjbod.controller.features import update_features
from kjbod.metadata import features as ft
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import UpdateFeaturesRequest
from kjbod.protocol.generated.broker_registration_request import Feature
from kjbod.protocol.generated.update_features_request import FeatureUpdateKey

from .test_managers import Ctx

MV = ft.METADATA_VERSION


def request(*updates: tuple[str, int, int], validate_only: bool = False) -> UpdateFeaturesRequest:
    return UpdateFeaturesRequest(validate_only=validate_only, feature_updates=[
        FeatureUpdateKey(feature=f, max_version_level=level, upgrade_type=kind, allow_downgrade=kind != 1)
        for f, level, kind in updates])


def supporting(lo: int, hi: int) -> list[Feature]:
    return [Feature(name=MV, min_supported_version=lo, max_supported_version=hi)]


@pytest.fixture
def ctx() -> Ctx:
    c = Ctx()
    c.live_broker(1, features=supporting(17, 21))
    c.live_broker(2, features=supporting(17, 20))
    return c


def update(ctx: Ctx, req: UpdateFeaturesRequest, version: int = 1):
    return ctx.commit(update_features(ctx.image, req, version, node_id=3000))


def test_a_new_cluster_runs_the_newest_level_until_told_otherwise(ctx):
    assert ft.finalized(ctx.image) == {MV: 21}
    resp = update(ctx, request((MV, 20, 2)))  # a safe downgrade: no level between 20 and 21 changed the records
    assert (resp.error_code, [(r.feature, r.error_code) for r in resp.results]) == (0, [(MV, 0)])
    assert ft.finalized(ctx.image) == {MV: 20}
    before = list(ctx.log)
    resp = update(ctx, request((MV, 17, 2), validate_only=True))
    assert resp.error_code == 0 and ctx.log == before and ft.finalized(ctx.image) == {MV: 20}
    assert update(ctx, request((MV, 17, 2)), version=2).results == []  # v2 answers with the top-level error only


@pytest.mark.parametrize(("updates", "message"), [
    ([(MV, 22, 1)], "Invalid update version 22 for feature metadata.version. Local controller 3000 only supports "
                    "versions 17-21"),
    ([(MV, 21, 1)], "Invalid update version 21 for feature metadata.version. Broker 2 only supports versions 17-20"),
    ([(MV, 16, 2)], "Local controller 3000 only supports versions 17-21"),
    ([("group.version", 1, 1)], "Local controller 3000 does not support this feature."),
    ([(MV, 19, 1)], "Can't downgrade the version of this feature without setting the upgrade type"),
    ([(MV, -1, 2)], "A feature version cannot be less than 0."),
    ([(MV, 19, 7)], "The controller does not support the given upgrade type."),
    ([(MV, 19, 2), ("group.version", 1, 1)], "group.version"),  # one refusal refuses the whole request
])
def test_refusals_are_invalid_update_version_with_kafkas_words(ctx, updates, message):
    before = list(ctx.log)
    resp = update(ctx, request(*updates))
    assert resp.error_code == E.INVALID_UPDATE_VERSION and message in resp.error_message
    assert resp.results == [] and ctx.log == before


def test_no_downgrade_across_a_level_that_changed_the_records(monkeypatch):
    assert ft.metadata_changed_between(17, 21) is False and ft.metadata_changed_between(16, 17) is True
    monkeypatch.setitem(ft.SUPPORTED, MV, (16, 21))  # a kjbod that could run 16: 17 changed the records
    ctx = Ctx()
    ctx.live_broker(1, features=supporting(16, 21))
    resp = update(ctx, request((MV, 16, 2)))
    assert resp.error_code == E.INVALID_UPDATE_VERSION and resp.error_message == (
        "Invalid metadata.version 16. Refusing to perform the requested downgrade because it might delete metadata "
        "information.")
    resp = update(ctx, request((MV, 16, 3)))
    assert resp.error_message == "Invalid metadata.version 16. Unsafe metadata downgrade is not supported in this version."
    assert update(ctx, request((MV, 17, 2))).error_code == 0  # 18-21 changed nothing: safe
    assert update(ctx, request((MV, 21, 1))).error_code == 0  # upgrades are always allowed


def test_a_broker_that_cannot_run_the_finalized_level_cannot_register(ctx):
    resp = ctx.register(4, features=supporting(17, 20))
    assert resp.error_code == 0  # nothing finalized in a record yet
    update(ctx, request((MV, 20, 2)))
    assert ctx.register(5, features=supporting(17, 19)).error_code == E.UNSUPPORTED_VERSION
    assert ctx.register(6, features=supporting(17, 21)).error_code == 0


def test_release_names_and_levels():
    assert ft.metadata_version_level("3.9") == 21 and ft.metadata_version_level("3.7") == 19
    assert ft.metadata_version_level("3.7-IV2") == 17 and ft.metadata_version_level("20") == 20
    assert ft.release_name(17) == "3.7-IV2"
    with pytest.raises(ValueError, match="kjbod runs 3.7-IV2 to 3.9-IV0"):
        ft.metadata_version_level("4.2")
