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
from kjbod.controller.result import ControllerResult
from kjbod.metadata import BROKER_RESOURCE, EMPTY_IMAGE, MetadataDelta
from kjbod.metadata import features as ft
from kjbod.protocol.generated import BeginTransactionRecord, ConfigRecord, FeatureLevelRecord
from kjbod.storage.meta import format_dirs
from kjbod.storage.metadata_log import MetadataLog

from .test_managers import CLUSTER, Policy

MV, ELR = ft.METADATA_VERSION, ft.ELR_VERSION


def replay(records):
    delta = MetadataDelta(EMPTY_IMAGE)
    for offset, rec in enumerate(records):
        delta.replay(rec, offset)
    return delta.apply()


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
    (None, [f"{ELR}=--1"], "expected NAME=LEVEL"),
    (None, [f"{ELR}=\u00b2"], "expected NAME=LEVEL"),  # a superscript two: a digit to str.isdigit, not to int
    (None, [f"{ELR}=\u0661"], "expected NAME=LEVEL"),  # an Arabic-Indic one: only ASCII digits are levels
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
    # share.version's 0 is kept (an old log reads it as 1); streams.version's 0 is simply not finalized
    assert dict(image.features) == {MV: 27, ft.GROUP_VERSION: 1, ft.TRANSACTION_VERSION: 2, ELR: 1,
                                   ft.SHARE_VERSION: 0}
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
                                      ft.SHARE_VERSION: 0}  # streams.version's 0 is simply not finalized
    assert image.resource_configs(BROKER_RESOURCE, "") == {}


def _run_controller(tmp_path, settings=None, before=None):
    """Starts a controller on tmp_path/meta (after appending `before` to the log, as an older kjbod wrote it) until
    the log holds a metadata.version; returns the image and every record in the log, in order."""
    settings = settings or ControllerSettings(cluster_id=CLUSTER)

    async def run():
        mlog = MetadataLog(str(tmp_path / "meta"))
        if before:
            mlog.load()
            mlog.append(before)
        c = QuorumController(settings, mlog, Policy())
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
    mlog = MetadataLog(str(tmp_path / "meta"))
    try:
        return image, mlog.load()
    finally:
        mlog.close()


def test_a_feature_the_log_has_no_level_for_is_at_0():
    # A log holding metadata.version 3.9 and nothing else (an UpdateFeatures downgrade): no ELR (its partition
    # records are v1, which cannot carry one), no transaction.version 2, no share groups.
    image = replay([FeatureLevelRecord(name=MV, feature_level=21)])
    assert ft.finalized(image) == {MV: 21}
    assert not ft.elr_enabled(image) and not ft.share_groups_enabled(image)
    # A software upgrade does not raise a recorded level either.
    image = replay([FeatureLevelRecord(name=MV, feature_level=27), FeatureLevelRecord(name=ELR, feature_level=1)])
    assert ft.finalized(image) == {MV: 27, ELR: 1}


def test_kjbod_format_without_options_writes_the_latest_levels(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text(f"process.roles=broker,controller\nnode.id=1\nlog.dirs={tmp_path / 'logs'}\n"
                      f"metadata.log.dir={tmp_path / 'meta'}\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
                      "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
                      "controller.listener.names=CONTROLLER\n")
    from kjbod.cli.main import main
    assert main(["format", "-c", str(config)]) == 0
    mlog = MetadataLog(str(tmp_path / "meta"))
    try:
        mlog.load()
        assert mlog.bootstrap_levels == ft.bootstrap_levels(ft.LATEST_METADATA_VERSION)
    finally:
        mlog.close()


def test_an_empty_log_without_a_bootstrap_file_starts_with_the_latest_levels_as_its_first_records(tmp_path):
    image, records = _run_controller(tmp_path, ControllerSettings(cluster_id=CLUSTER, min_insync_replicas=2))
    assert ft.finalized(image) == ft.bootstrap_levels(ft.LATEST_METADATA_VERSION)
    levels = [r for r in records if isinstance(r, FeatureLevelRecord)]
    # inside Kafka's "Bootstrap records" metadata transaction (KIP-868), metadata.version first
    assert records[:2] == [BeginTransactionRecord(name="Bootstrap records"),
                           FeatureLevelRecord(name=MV, feature_level=ft.LATEST_METADATA_VERSION)]
    assert {r.name: r.feature_level for r in levels} == ft.bootstrap_levels(ft.LATEST_METADATA_VERSION)
    assert image.resource_configs(BROKER_RESOURCE, "") == {"min.insync.replicas": "2"}


def test_a_log_an_older_kjbod_wrote_keeps_the_levels_it_ran_at(tmp_path):
    # Before the controller wrote its levels, kjbod read a log without a metadata.version as 4.2-IV1's bootstrap
    # levels under what it held (here the ELR turned off by UpdateFeatures); that log is written down as such.
    before = [ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="log.retention.ms", value="1000"),
              FeatureLevelRecord(name=ELR, feature_level=0)]
    image, records = _run_controller(tmp_path, before=before)
    # 4.2-IV1's levels but streams.version, which no such kjbod served (its 0 is written, and not finalized)
    assert ft.finalized(image) == {k: v for k, v in {**ft.bootstrap_levels(29), ELR: 0}.items()
                                   if k != ft.STREAMS_VERSION}
    assert records[:2] == before
    assert {r.name: r.feature_level for r in records[2:] if isinstance(r, FeatureLevelRecord)} == {
        **ft.bootstrap_levels(29), ELR: 0, ft.STREAMS_VERSION: 0}
    assert image.resource_configs(BROKER_RESOURCE, "") == {"log.retention.ms": "1000"}


def test_no_write_goes_before_the_levels(tmp_path):
    async def run():
        mlog = MetadataLog(str(tmp_path / "meta"))
        c = QuorumController(ControllerSettings(cluster_id=CLUSTER), mlog, Policy())
        c.load()
        c.start()
        try:
            await c.submit(lambda image, _o: ControllerResult(
                [ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="log.retention.ms",
                              value="5")], None))
            return c.image
        finally:
            await c.stop()
            mlog.close()

    image = asyncio.run(run())
    assert ft.finalized(image)[MV] == ft.LATEST_METADATA_VERSION
    mlog = MetadataLog(str(tmp_path / "meta"))
    try:
        records = mlog.load()
    finally:
        mlog.close()
    assert isinstance(records[0], BeginTransactionRecord)  # the activation records' transaction comes first
    assert isinstance(records[1], FeatureLevelRecord) and records[1].name == MV
    assert records[-1].name == "log.retention.ms"
