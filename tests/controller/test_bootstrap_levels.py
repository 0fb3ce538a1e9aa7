"""The feature levels a new cluster starts at: `kjbod format --release-version/--feature` (kafka-storage.sh's
options) write Kafka's bootstrap.checkpoint, the metadata log reads it, and the first active controller writes
its levels (and, with the ELR on, the cluster-wide min.insync.replicas) as the log's first records."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from kjbod.cli.main import UserError
from kjbod.cli.storage_tool import bootstrap_levels
from kjbod.controller import ControllerSettings
from kjbod.controller.quorum import QuorumController
from kjbod.metadata import BROKER_RESOURCE
from kjbod.metadata import features as ft
from kjbod.storage.meta import format_dirs
from kjbod.storage.metadata_log import MetadataLog

from .test_managers import CLUSTER, Policy

MV, ELR = ft.METADATA_VERSION, ft.ELR_VERSION


def test_release_and_feature_options():
    assert bootstrap_levels(None, []) == ft.bootstrap_levels(ft.LATEST_METADATA_VERSION)
    assert bootstrap_levels("3.9", []) == {MV: 21, ft.GROUP_VERSION: 0, ft.TRANSACTION_VERSION: 0, ELR: 0,
                                             ft.SHARE_VERSION: 0, ft.STREAMS_VERSION: 0}
    assert bootstrap_levels("4.0-IV1", [f"{ELR}=1"])[ELR] == 1
    assert bootstrap_levels("4.2", [f"{ELR}=0"]) == {**ft.bootstrap_levels(29), ELR: 0}
    assert bootstrap_levels("4.3", []) == ft.bootstrap_levels(30) == bootstrap_levels(None, [])


@pytest.mark.parametrize(("release", "features", "message"), [
    ("5.0", [], "--release-version: unknown metadata.version '5.0' (kjbod runs 3.7-IV2 to 4.3-IV0)"),
    ("3.6", [], "metadata.version 14 is not one kjbod runs"),
    ("16", [], "metadata.version 16 is not one kjbod runs (17 = 3.7-IV2 to 30 = 4.3-IV0)"),
    ("31", [], "metadata.version 31 is not one kjbod runs"),
    ("4.0-IV0", [f"{ELR}=1"], "--release-version 4.0-IV0: eligible.leader.replicas.version could not be set to 1 "
                              "because it depends on metadata.version level 23"),
    (None, [f"{ELR}=2"], "eligible.leader.replicas.version level 2 is not one kjbod runs (0-1)"),
    (None, ["streams.version=2"], "streams.version level 2 is not one kjbod runs (0-1)"),
    (None, ["other.version=1"], "unknown feature 'other.version'"),
    (None, [f"{ELR}"], "expected NAME=LEVEL"),
    (None, [f"{ELR}=one"], "expected NAME=LEVEL"),
    (None, [f"{MV}=22"], "use --release-version"),
])
def test_bad_options_name_the_problem(release, features, message):
    with pytest.raises(UserError) as e:
        bootstrap_levels(release, features)
    assert message in str(e.value)


def _config(tmp_path):
    return SimpleNamespace(node_id=1, log_dirs=[str(tmp_path / "logs")], metadata_log_dir=str(tmp_path / "meta"))


def test_format_writes_the_levels_and_the_first_controller_writes_them_to_the_log(tmp_path):
    levels = bootstrap_levels("4.1", [])
    format_dirs(_config(tmp_path), bootstrap_levels=levels)
    assert (tmp_path / "meta" / "bootstrap.checkpoint").exists()

    async def run(settings):
        mlog = MetadataLog(str(tmp_path / "meta"))
        c = QuorumController(settings, mlog, Policy())
        c.load()
        assert mlog.bootstrap_levels == levels
        c.start()
        try:
            for _ in range(200):
                if MV in c.image.features:
                    break
                await asyncio.sleep(0.01)
            return c.image, mlog.metadata_version
        finally:
            await c.stop()
            mlog.close()

    image, written_at = asyncio.run(run(ControllerSettings(cluster_id=CLUSTER, min_insync_replicas=2)))
    assert dict(image.features) == {MV: 27, ft.GROUP_VERSION: 1, ft.TRANSACTION_VERSION: 2, ELR: 1,
                                   ft.SHARE_VERSION: 0, ft.STREAMS_VERSION: 0}
    assert written_at == 27  # the partition records follow it (v2 from 4.0-IV1)
    assert image.resource_configs(BROKER_RESOURCE, "") == {"min.insync.replicas": "2"}
    # A restart finds the levels in the log and writes nothing more.
    again, _ = asyncio.run(run(ControllerSettings(cluster_id=CLUSTER, min_insync_replicas=3)))
    assert again.features == image.features and again.offset == image.offset
    assert again.resource_configs(BROKER_RESOURCE, "") == {"min.insync.replicas": "2"}


def test_a_cluster_formatted_without_the_elr_gets_no_min_isr_record(tmp_path):
    format_dirs(_config(tmp_path), bootstrap_levels=bootstrap_levels("4.0-IV0", []))

    async def run():
        mlog = MetadataLog(str(tmp_path / "meta"))
        c = QuorumController(ControllerSettings(cluster_id=CLUSTER), mlog, Policy())
        c.load()
        c.start()
        try:
            for _ in range(200):
                if MV in c.image.features:
                    break
                await asyncio.sleep(0.01)
            return c.image
        finally:
            await c.stop()
            mlog.close()

    image = asyncio.run(run())
    assert ft.finalized(image) == {MV: 22, ft.GROUP_VERSION: 1, ft.TRANSACTION_VERSION: 0, ELR: 0,
                                      ft.SHARE_VERSION: 0, ft.STREAMS_VERSION: 0}
    assert image.resource_configs(BROKER_RESOURCE, "") == {}
