"""The controller's side of Kafka 4.3's metadata records, on a real metadata log in a temp dir: the activation
records in a "Bootstrap records" transaction, an open transaction aborted at activation and never in a snapshot,
NoOpRecords while idle, and KIP-919 controller registrations (ControllerRegistration in, RegisterControllerRecord
out; bad inputs answered with an error; UpdateFeatures held to what registered controllers run; the
registration manager registering again when another incarnation took its place)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace

from kjbod.cli.storage_tool import bootstrap_levels
from kjbod.controller import ControllerSettings, QuorumController
from kjbod.metadata import features as ft
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    ControllerRegistrationRequest,
    EndTransactionRecord,
    FeatureLevelRecord,
    NoOpRecord,
    RegisterControllerRecord,
    TopicRecord,
    UpdateFeaturesRequest,
)
from kjbod.protocol.generated.controller_registration_request import Feature, Listener
from kjbod.protocol.generated.register_controller_record import ControllerFeature
from kjbod.protocol.generated.update_features_request import FeatureUpdateKey
from kjbod.server.config import Listener as ConfigListener
from kjbod.server.roles import in_process_registration
from kjbod.storage.meta import format_dirs
from kjbod.storage.metadata_log import TOPIC_DIR, MetadataLog
from kjbod.storage.metadata_records import decode_batches

from .test_managers import CLUSTER, Policy

MV = ft.METADATA_VERSION
REGISTRATION = 70


def formatted(tmp_path) -> str:
    config = SimpleNamespace(node_id=1, log_dirs=[str(tmp_path / "logs")], metadata_log_dir=str(tmp_path / "meta"))
    format_dirs(config, bootstrap_levels=bootstrap_levels(None, []))
    return str(tmp_path / "meta")


def log_records(path: str) -> list:
    """Every metadata record in the log's segments, in order (whatever a snapshot covers too)."""
    out: list = []
    for segment in sorted((Path(path) / TOPIC_DIR).glob("*.log")):
        out += [rec for _, rec in decode_batches(segment.read_bytes())]
    return out


async def until(check, what: str, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


def registration(cid: int = 7, inc: uuid.UUID | None = None, protocol: int = 0, lo: int = 17, hi: int = 29):
    return ControllerRegistrationRequest(
        controller_id=cid, incarnation_id=inc or uuid.uuid4(), zk_migration_ready=False,
        listeners=[Listener(name="CONTROLLER", host="127.0.0.1", port=9093, security_protocol=protocol)],
        features=[Feature(name=MV, min_supported_version=lo, max_supported_version=hi)])


def test_activation_writes_the_bootstrap_levels_in_a_transaction(tmp_path):
    path = formatted(tmp_path)

    async def main():
        c = QuorumController(ControllerSettings(cluster_id=CLUSTER, node_id=1), MetadataLog(path), Policy())
        c.load()
        c.start()
        try:
            await until(lambda: MV in c.image.features, "the bootstrap levels")
            return c.image
        finally:
            await c.stop()
            c.log.close()

    image = asyncio.run(main())
    records = log_records(path)
    assert records[0] == BeginTransactionRecord(name="Bootstrap records")
    end = next(i for i, r in enumerate(records) if isinstance(r, EndTransactionRecord))
    levels = {r.name: r.feature_level for r in records[1:end] if isinstance(r, FeatureLevelRecord)}
    assert levels == dict(image.features) and levels[MV] == ft.LATEST_METADATA_VERSION
    assert image.offset >= end  # the End marker moved the offset too


def test_an_open_transaction_is_never_published_or_snapshotted_and_is_aborted_at_activation(tmp_path):
    path = formatted(tmp_path)
    mlog = MetadataLog(path)
    mlog.load()
    mlog.append([FeatureLevelRecord(name=MV, feature_level=ft.LATEST_METADATA_VERSION)])
    mlog.append([BeginTransactionRecord(name="left open"), TopicRecord(name="half", topic_id=uuid.uuid4())])
    mlog.close()
    settings = ControllerSettings(cluster_id=CLUSTER, node_id=1, max_bytes_between_snapshots=1)

    async def main():
        c = QuorumController(settings, MetadataLog(path), Policy())
        c.load()
        try:
            assert c.loader.in_transaction and c.image.topic("half") is None
            await c._maybe_snapshot()  # due by bytes, but inside a transaction: none
            assert c.log.latest_snapshot() is None
            c.start()
            await until(lambda: not c.loader.in_transaction, "the abort")
            await until(lambda: c.log.latest_snapshot() is not None, "a snapshot once the transaction ended")
            return c.image, c.log.latest_snapshot().end_offset
        finally:
            await c.stop()
            c.log.close()

    image, snapshot_end = asyncio.run(main())
    records = log_records(path)
    assert image.topic("half") is None
    assert AbortTransactionRecord(reason="Controller failover") in records
    assert snapshot_end == image.offset + 1
    assert records.index(AbortTransactionRecord(reason="Controller failover")) > records.index(
        BeginTransactionRecord(name="left open"))
    reopened = MetadataLog(path)
    try:  # the snapshot (and what follows it) holds nothing of the aborted transaction
        loaded = reopened.load()
        assert reopened.latest_snapshot().end_offset == snapshot_end
        assert not any(isinstance(r, TopicRecord | BeginTransactionRecord) for r in loaded)
    finally:
        reopened.close()


def test_the_active_controller_writes_no_ops_while_idle(tmp_path):
    path = formatted(tmp_path)

    async def main():
        settings = ControllerSettings(cluster_id=CLUSTER, node_id=1, max_idle_interval_ms=20)
        c = QuorumController(settings, MetadataLog(path), Policy())
        c.load()
        c.start()
        try:
            await until(lambda: MV in c.image.features, "the bootstrap levels")
            first = c.image.offset
            await until(lambda: c.image.offset >= first + 3, "three NoOpRecords")
            return first, c.image
        finally:
            await c.stop()
            c.log.close()

    first, image = asyncio.run(main())
    records = log_records(path)
    assert sum(isinstance(r, NoOpRecord) for r in records) >= 3
    assert image.topics_by_id == {} and image.brokers == {}  # nothing but the offset changed


def test_controller_registrations_and_their_bad_inputs(tmp_path):
    path = formatted(tmp_path)

    async def main():
        c = QuorumController(ControllerSettings(cluster_id=CLUSTER, node_id=1), MetadataLog(path), Policy())
        c.load()
        c.start()
        try:
            await until(lambda: MV in c.image.features, "the bootstrap levels")
            inc = uuid.uuid4()
            ok = await c.handle_request(REGISTRATION, 0, registration(7, inc))
            assert (ok.error_code, ok.error_message) == (0, None)
            reg = c.image.controllers[7]  # answered once committed and replayed
            assert (reg.incarnation_id, reg.endpoint("CONTROLLER").port, reg.features[MV]) == (inc, 9093, (17, 29))
            # not a voter of this quorum (an observer may register, as in Kafka): accepted
            assert (await c.handle_request(REGISTRATION, 0, registration(42))).error_code == 0
            # what Kafka's own replay of the record would refuse is refused up front
            bad = await c.handle_request(REGISTRATION, 0, registration(8, protocol=9))
            assert bad.error_code == E.INVALID_REQUEST
            assert bad.error_message == "controller 8: listener CONTROLLER has unknown security protocol id 9"
            bad = await c.handle_request(REGISTRATION, 0, registration(8, lo=20, hi=18))
            assert bad.error_code == E.INVALID_REQUEST and "minimum version 20 above its maximum version 18" in \
                bad.error_message
            assert 8 not in c.image.controllers
            # an old incarnation's registration arriving late replaces the newer one (the last record wins)
            old = uuid.uuid4()
            assert (await c.handle_request(REGISTRATION, 0, registration(7, old))).error_code == 0
            assert c.image.controllers[7].incarnation_id == old
            # UpdateFeatures: a registered controller that cannot run a level refuses it
            await c.handle_request(REGISTRATION, 0, registration(42, lo=17, hi=27))
            down = await c.handle_request(57, 1, UpdateFeaturesRequest(timeout_ms=1000, feature_updates=[
                FeatureUpdateKey(feature=MV, max_version_level=28, upgrade_type=2)]))
            return down
        finally:
            await c.stop()
            c.log.close()

    down = asyncio.run(main())
    assert down.error_code == E.INVALID_UPDATE_VERSION
    assert down.error_message == f"Invalid update version 28 for feature {MV}. Controller 42 only supports " \
                                 f"versions {ft.range_text(17, 27)}"
    assert sum(isinstance(r, RegisterControllerRecord) for r in log_records(path)) == 4


def test_update_features_wants_every_voter_registered():
    from kjbod.controller.features import update_features
    from kjbod.metadata import EMPTY_IMAGE, replay

    image = replay(EMPTY_IMAGE, [FeatureLevelRecord(name=MV, feature_level=27)], 0)
    req = UpdateFeaturesRequest(timeout_ms=1000, feature_updates=[
        FeatureUpdateKey(feature=MV, max_version_level=28, upgrade_type=1)])
    refused = update_features(image, req, 1, 1, quorum_ids=(1, 2)).response
    assert (refused.error_code, refused.error_message) == (
        E.INVALID_UPDATE_VERSION, f"Invalid update version 28 for feature {MV}. controller 2 has not registered, "
                                  "and may not support this feature")
    rec = RegisterControllerRecord(controller_id=2, incarnation_id=uuid.uuid4(), features=[
        ControllerFeature(name=MV, min_supported_version=17, max_supported_version=29)])
    accepted = update_features(replay(image, [rec]), req, 1, 1, quorum_ids=(1, 2))
    assert accepted.response.error_code == 0 and accepted.records == [FeatureLevelRecord(name=MV, feature_level=28)]


def test_the_registration_manager_registers_and_registers_again_when_replaced(tmp_path):
    path = formatted(tmp_path)
    config = SimpleNamespace(node_id=1, controller_listener_names=("CONTROLLER",), advertised_listeners=None,
                             listeners=[ConfigListener("CONTROLLER", "127.0.0.1", 19093),
                                        ConfigListener("PLAINTEXT", "127.0.0.1", 19092)], request_timeout_ms=5000)

    async def main():
        c = QuorumController(ControllerSettings(cluster_id=CLUSTER, node_id=1), MetadataLog(path), Policy())
        c.load()
        manager = in_process_registration(c, config)
        c.start()
        try:
            await until(lambda: manager.registered, "the registration")
            mine = c.image.controllers[1]
            assert mine.incarnation_id == manager.incarnation_id and not mine.zk_migration_ready
            assert [(e.name, e.host, e.port, e.security_protocol) for e in mine.listeners] == [
                ("CONTROLLER", "127.0.0.1", 19093, 0)]  # controller listeners only
            assert dict(mine.features) == dict(ft.ADVERTISED)  # kraft.version too, as Kafka's controller
            other = uuid.uuid4()
            assert (await c.handle_request(REGISTRATION, 0, registration(1, other))).error_code == 0
            await until(lambda: c.image.controllers[1].incarnation_id == manager.incarnation_id,
                        "the manager's own registration back")
            return manager.sent
        finally:
            await c.stop()
            c.log.close()

    assert asyncio.run(main()) == 2
