"""KIP-966 eligible leader replicas on the controller, in process (the managers' context of test_managers.py):
the cases Kafka's PartitionChangeBuilder and ReplicationControlManager tests cover, driven through the same
paths a cluster takes (AlterPartition, fencing and unfencing heartbeats, registrations, config changes), plus
the records' versions, replay and snapshots."""

from __future__ import annotations

import uuid

import pytest

from kjbod.controller import configs
from kjbod.controller.partition_change import change, effective_min_isr
from kjbod.metadata import (
    BROKER_RESOURCE,
    EMPTY_IMAGE,
    RECOVERED,
    RECOVERING,
    TOPIC_RESOURCE,
    image_records,
    replay,
)
from kjbod.metadata import features as ft
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    ClearElrRecord,
    ConfigRecord,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
)
from kjbod.storage.metadata_records import frame_record, record_version, unframe, unframe_record

from .test_managers import Ctx, Policy
from .test_replication import alter, only, part, write

MIN_ISR = "min.insync.replicas"


def cluster(n=4, **kw):
    ctx = Ctx(**kw)
    for b in range(1, n + 1):
        ctx.live_broker(b)
    return ctx


def topic(ctx, name, replicas, min_isr=3, **configs):
    r = ctx.create(name, -1, assignments=[replicas], configs={MIN_ISR: str(min_isr), **configs})
    assert r.error_code == 0, r.error_message
    return ctx.image.topic(name)


def restart(ctx, bid, **kw):
    """A new incarnation of `bid` registers once its old session has expired."""
    ctx.now += 10
    assert ctx.register(bid, incarnation=uuid.uuid4(), **kw).error_code == 0


def state(ctx, name="t"):
    p = part(ctx, name)
    return p.leader, p.isr, p.elr, p.last_known_elr


def changes(ctx, since):
    return [r for r in ctx.log[since:] if isinstance(r, PartitionChangeRecord)]


def test_the_elr_is_on_at_the_latest_level_and_min_isr_is_capped_at_the_replication_factor():
    ctx = cluster()
    assert ft.elr_enabled(ctx.image)
    t = topic(ctx, "t", [1, 2, 3, 4], min_isr=3)
    assert effective_min_isr(ctx.image, t) == 3
    t = topic(ctx, "small", [1, 2], min_isr=3)
    assert effective_min_isr(ctx.image, t) == 2  # Kafka's getTopicEffectiveMinIsr: min(config, RF)
    # Without a topic override: the controller's dynamic value, then the cluster default, then its own config.
    t = ctx.image.topic("t")
    plain = topic(ctx, "plain", [1, 2, 3, 4], min_isr=1)
    assert effective_min_isr(ctx.image, plain, default=2) == 1
    write(ctx, ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="plain", name=MIN_ISR, value=None))
    assert effective_min_isr(ctx.image, ctx.image.topic("plain"), default=2) == 2
    assert effective_min_isr(ctx.image, t, default=2) == 3


def test_replicas_leaving_an_isr_below_min_isr_become_eligible_and_growing_back_clears_them():
    ctx = cluster()
    topic(ctx, "t", [1, 2, 3, 4], min_isr=3)
    only(alter(ctx, 1, "t", [1, 2, 3]))  # 4 falls behind: the ISR is still at min.insync.replicas
    assert state(ctx) == (1, (1, 2, 3), (), ())
    only(alter(ctx, 1, "t", [1, 2]))  # below min ISR: 3 holds every committed record
    assert state(ctx) == (1, (1, 2), (3,), ())
    only(alter(ctx, 1, "t", [1]))
    assert state(ctx) == (1, (1,), (2, 3), ())
    only(alter(ctx, 1, "t", [1, 4]))  # a replica not in the ELR joins: still below min ISR, the ELR stays
    assert state(ctx) == (1, (1, 4), (2, 3), ())
    only(alter(ctx, 1, "t", [1, 2, 4]))  # back at min ISR: nobody needs to be eligible
    assert state(ctx) == (1, (1, 2, 4), (), ())


def test_an_empty_isr_elects_cleanly_from_the_elr_and_remembers_the_last_leader():
    ctx = cluster(3)
    topic(ctx, "t", [1, 2, 3], min_isr=2)
    ctx.heartbeat(3, want_fence=True)  # ISR 1,2: at min ISR
    assert state(ctx) == (1, (1, 2), (), ())
    ctx.heartbeat(2, want_fence=True)  # below: 2 becomes eligible
    assert state(ctx) == (1, (1,), (2,), ())
    before = len(ctx.log)
    ctx.heartbeat(1, want_fence=True)  # the last ISR member goes: the ISR empties, the last leader is kept
    assert state(ctx) == (-1, (), (1, 2), (1,))
    (rec,) = changes(ctx, before)
    assert (rec.isr, rec.leader, rec.eligible_leader_replicas, rec.last_known_elr) == ([], -1, [1, 2], [1])
    ctx.heartbeat(3)  # 3 left the ISR while it was at min ISR: it may have missed records, so it may not lead
    assert state(ctx)[0] == -1
    before = len(ctx.log)
    ctx.heartbeat(2)  # an ELR member comes back: a clean election, it alone is in sync
    p = part(ctx, "t")
    assert state(ctx) == (2, (2,), (1,), ())
    assert p.leader_recovery_state == RECOVERED
    (rec,) = changes(ctx, before)
    assert (rec.leader, rec.isr, rec.eligible_leader_replicas, rec.last_known_elr) == (2, [2], [1], [])


def test_a_broker_that_restarts_uncleanly_leaves_the_elr_and_a_clean_one_stays():
    ctx = cluster(3)
    topic(ctx, "t", [1, 2, 3], min_isr=3)
    only(alter(ctx, 1, "t", [1]))
    assert state(ctx) == (1, (1,), (2, 3), ())
    epoch3 = ctx.image.broker(3).epoch
    # 3 restarts cleanly: its clean-shutdown marker names its last epoch; it stays eligible.
    restart(ctx, 3, previous_broker_epoch=epoch3)
    assert state(ctx) == (1, (1,), (2, 3), ())
    # 2 crashed (no marker: PreviousBrokerEpoch -1): unflushed records may be gone, it is no longer eligible.
    before = len(ctx.log)
    restart(ctx, 2)
    assert state(ctx) == (1, (1,), (3,), ())
    (rec,) = changes(ctx, before)
    assert rec.eligible_leader_replicas == [3] and rec.isr is None
    # The leader crashes: it leaves the ISR and is not eligible either.
    restart(ctx, 1)
    assert state(ctx) == (-1, (), (3,), (1,))


def test_with_the_elr_off_an_unclean_restart_only_leaves_the_isr():
    ctx = cluster(3, elr=False)
    topic(ctx, "t", [1, 2, 3], min_isr=3)
    only(alter(ctx, 1, "t", [1, 2]))
    assert state(ctx) == (1, (1, 2), (), ())
    restart(ctx, 2)
    assert state(ctx) == (1, (1,), (), ())


def test_the_last_known_leader_is_elected_uncleanly_when_nothing_else_is_left():
    ctx = cluster(3)
    topic(ctx, "t", [1, 2, 3], min_isr=2)
    ctx.heartbeat(2, want_fence=True)
    ctx.heartbeat(3, want_fence=True)
    ctx.heartbeat(1, want_fence=True)
    assert state(ctx) == (-1, (), (1, 3), (1,))
    # Both ELR members restarted uncleanly: nothing is eligible, the last leader is remembered.
    restart(ctx, 3)
    restart(ctx, 1)
    assert state(ctx) == (-1, (), (), (1,))
    ctx.heartbeat(2)  # not the last leader: no election
    assert state(ctx)[0] == -1
    ctx.heartbeat(1)  # the last leader is back: KIP-966's balanced recovery elects it, uncleanly
    p = part(ctx, "t")
    assert (p.leader, p.isr, p.elr, p.last_known_elr, p.leader_recovery_state) == (1, (1,), (), (), RECOVERING)


def test_an_unclean_election_clears_the_elr():
    ctx = cluster(3)
    topic(ctx, "t", [1, 2, 3], min_isr=3, **{"unclean.leader.election.enable": "true"})
    only(alter(ctx, 1, "t", [1]))
    restart(ctx, 2)
    restart(ctx, 3)
    ctx.heartbeat(2)
    ctx.heartbeat(3)
    assert state(ctx) == (1, (1,), (), ())
    p = part(ctx, "t")
    # Built by hand: 1 is gone and nothing is eligible; the unclean election picks 2 and leaves no ELR.
    rec = change(ctx.image, ctx.image.topic("t").topic_id, p, remove=1, unclean=True)
    assert (rec.leader, rec.isr, rec.leader_recovery_state) == (2, [2], RECOVERING)
    assert rec.eligible_leader_replicas is None  # it was empty already
    write(ctx, PartitionChangeRecord(topic_id=ctx.image.topic("t").topic_id, partition_id=0,
                                     eligible_leader_replicas=[3]))
    rec = change(ctx.image, ctx.image.topic("t").topic_id, part(ctx, "t"), remove=1, unclean=True)
    assert rec.leader == 3 and rec.isr == [3]  # 3 is eligible: a clean election from the ELR comes first
    rec = change(ctx.image, ctx.image.topic("t").topic_id, part(ctx, "t"), remove=1, unclean=True,
                 unclean_shutdown=3)
    assert (rec.leader, rec.isr, rec.eligible_leader_replicas) == (2, [2], [])


def test_turning_the_elr_off_clears_what_is_left_at_the_next_change():
    ctx = cluster(3)
    topic(ctx, "t", [1, 2, 3], min_isr=3)
    only(alter(ctx, 1, "t", [1, 2]))
    assert state(ctx) == (1, (1, 2), (3,), ())
    write(ctx, FeatureLevelRecord(name=ft.ELR_VERSION, feature_level=0))
    assert not ft.elr_enabled(ctx.image)
    only(alter(ctx, 1, "t", [1]))
    assert state(ctx) == (1, (1,), (), ())


def test_a_min_isr_change_clears_the_elrs_it_governs():
    ctx = cluster(3)
    topic(ctx, "t", [1, 2, 3], min_isr=3)
    topic(ctx, "u", [1, 2, 3], min_isr=3)
    for name in ("t", "u"):
        only(alter(ctx, 1, name, [1]))
    epoch = part(ctx, "t").partition_epoch
    result = configs.alter_configs(ctx.image, [(TOPIC_RESOURCE, "t", [(MIN_ISR, 0, "2")])], Policy(),
                                   replace=False, validate_only=False)
    assert result.records[-1] == ClearElrRecord(topic_name="t")
    ctx.commit(result)
    assert part(ctx, "t").elr == () and part(ctx, "t").partition_epoch == epoch + 1
    assert part(ctx, "u").elr == (2, 3)
    # A broker or cluster default: every topic's ELR goes.
    result = configs.alter_configs(ctx.image, [(BROKER_RESOURCE, "", [(MIN_ISR, 0, "2")])], Policy(),
                                   replace=False, validate_only=False)
    assert result.records[-1] == ClearElrRecord(topic_name="")
    ctx.commit(result)
    assert part(ctx, "u").elr == ()
    # With the ELR off nothing is cleared (there is nothing to clear).
    off = cluster(1, elr=False)
    topic(off, "t", [1], min_isr=1)
    result = configs.alter_configs(off.image, [(TOPIC_RESOURCE, "t", [(MIN_ISR, 0, "1")])], Policy(),
                                   replace=False, validate_only=False)
    assert not any(isinstance(r, ClearElrRecord) for r in result.records)


def test_clear_elr_of_an_unknown_topic_is_dropped_on_replay():
    image = replay(EMPTY_IMAGE, [ClearElrRecord(topic_name="nope"), ClearElrRecord(topic_name="")])
    assert image.topics_by_name == {}


def test_partition_records_are_v1_below_4_0_iv1_and_v2_from_it():
    tid = uuid.uuid4()
    rec = PartitionRecord(partition_id=0, topic_id=tid, replicas=[1, 2], isr=[1], leader=1, leader_epoch=0,
                          partition_epoch=0, directories=[uuid.UUID(int=500), uuid.UUID(int=501)],
                          eligible_leader_replicas=[2], last_known_elr=[])
    change_rec = PartitionChangeRecord(partition_id=0, topic_id=tid, isr=[], leader=-1,
                                       eligible_leader_replicas=[1, 2], last_known_elr=[1])
    for r in (rec, change_rec):
        assert record_version(r, 22) == 1 and record_version(r, 23) == 2 and record_version(r, 29) == 2
        assert record_version(r, None) == 2
        framed = frame_record(r, record_version(r, 23))
        assert unframe(framed)[1] == 2 and unframe_record(framed) == r
    assert record_version(FeatureLevelRecord(name="x", feature_level=1), 22) == 0


@pytest.mark.parametrize("metadata_version", [22, 23, 29])
def test_elr_replay_and_snapshot_round_trip(metadata_version):
    """The image with ELRs replays from its own snapshot records, framed and read back at the version the
    snapshot's metadata.version gives them."""
    elr = metadata_version >= ft.ELR_METADATA_VERSION
    ctx = Ctx(elr=elr)  # a cluster at 4.0-IV0 cannot keep an ELR
    for b in (1, 2, 3):
        ctx.live_broker(b)
    write(ctx, FeatureLevelRecord(name=ft.METADATA_VERSION, feature_level=metadata_version))
    if elr:  # with a metadata.version in the log, a feature it has no level for is at 0
        write(ctx, FeatureLevelRecord(name=ft.ELR_VERSION, feature_level=1))
    topic(ctx, "t", [1, 2, 3], min_isr=3)
    only(alter(ctx, 1, "t", [1]))
    ctx.heartbeat(2, want_fence=True)
    ctx.heartbeat(3, want_fence=True)
    ctx.heartbeat(1, want_fence=True)
    assert state(ctx) == ((-1, (), (1, 2, 3), (1,)) if elr else (-1, (1,), (), ()))
    image = ctx.image
    records = image_records(image)
    assert isinstance(records[0], FeatureLevelRecord) and records[0].name == ft.METADATA_VERSION
    versions = {}
    read_back = []
    for r in records:
        framed = frame_record(r, record_version(r, metadata_version))
        versions.setdefault(type(r).__name__, unframe(framed)[1])
        read_back.append(unframe_record(framed))
    assert versions["PartitionRecord"] == (2 if metadata_version >= 23 else 1)
    again = replay(EMPTY_IMAGE, read_back)
    p, q = again.topic("t").partitions[0], image.topic("t").partitions[0]
    assert (p.leader, p.isr, p.elr, p.last_known_elr, p.partition_epoch) == (
        q.leader, q.isr, q.elr, q.last_known_elr, q.partition_epoch)
    assert again.features == image.features


def test_with_the_elr_on_min_isr_is_cluster_wide_only():
    ctx = cluster(2)
    assert ft.elr_enabled(ctx.image)

    def alter_min_isr(resource, op, value=None):
        return configs.alter_configs(ctx.image, [(BROKER_RESOURCE, resource, [(MIN_ISR, op, value)])], Policy(),
                                     replace=False, validate_only=False)

    result = alter_min_isr("1", 0, "2")
    assert result.records == [] and result.response == [
        (E.INVALID_CONFIG, "Broker-level min.insync.replicas cannot be altered while ELR is enabled.")]
    ctx.commit(alter_min_isr("", 0, "2"))
    result = alter_min_isr("", 1)
    assert result.records == [] and result.response == [
        (E.INVALID_CONFIG, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")]
    assert ctx.image.resource_configs(BROKER_RESOURCE, "") == {MIN_ISR: "2"}
    # With the ELR off a broker may have its own.
    off = cluster(1, elr=False)
    result = configs.alter_configs(off.image, [(BROKER_RESOURCE, "1", [(MIN_ISR, 0, "2")])], Policy(),
                                   replace=False, validate_only=False)
    assert result.response == [(E.NONE, None)]


def test_turning_the_elr_on_makes_min_isr_cluster_wide():
    from kjbod.controller.features import update_features
    from kjbod.protocol.generated import UpdateFeaturesRequest
    from kjbod.protocol.generated.broker_registration_request import Feature
    from kjbod.protocol.generated.update_features_request import FeatureUpdateKey

    ctx = Ctx(elr=False)
    for b in (1, 2):
        ctx.live_broker(b, features=[Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                                     for n, (lo, hi) in ft.SUPPORTED.items()])
    ctx.commit(configs.alter_configs(ctx.image, [(BROKER_RESOURCE, "1", [(MIN_ISR, 0, "2")]),
                                                 (BROKER_RESOURCE, "2", [(MIN_ISR, 0, "1")])], Policy(),
                                     replace=False, validate_only=False))
    req = UpdateFeaturesRequest(feature_updates=[FeatureUpdateKey(feature=ft.ELR_VERSION, max_version_level=1,
                                                                  upgrade_type=1)])
    result = update_features(ctx.image, req, 1, node_id=3000, static_min_isr=3)
    assert result.response.error_code == 0
    assert result.records == [
        ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_ISR, value="3"),
        ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="1", name=MIN_ISR, value=None),
        ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="2", name=MIN_ISR, value=None),
        FeatureLevelRecord(name=ft.ELR_VERSION, feature_level=1)]
    ctx.commit(result)
    assert ft.elr_enabled(ctx.image)
    assert ctx.image.resource_configs(BROKER_RESOURCE, "") == {MIN_ISR: "3"}
    assert ctx.image.resource_configs(BROKER_RESOURCE, "1") == {}
    # A cluster-wide value already set is kept.
    again = update_features(ctx.image, req, 1, node_id=3000, static_min_isr=5)
    assert again.records == [FeatureLevelRecord(name=ft.ELR_VERSION, feature_level=1)]


def _static_min_isr_3_cluster():
    """Three brokers, the ELR on, no min.insync.replicas in the metadata: the controller's own static value (3)
    is every topic's effective one (Kafka's getTopicEffectiveMinIsr)."""
    ctx = cluster(3, min_insync_replicas=3)
    assert ctx.create("t", -1, assignments=[[1, 2, 3]]).error_code == 0
    assert effective_min_isr(ctx.image, ctx.image.topic("t"), ctx.settings.min_insync_replicas) == 3
    return ctx


def test_unregistering_a_broker_keeps_the_elr_against_the_static_min_isr():
    from kjbod.controller import cluster_control

    ctx = _static_min_isr_3_cluster()
    ctx.commit(cluster_control.unregister_broker(ctx.image, 3, min_isr_default=3, node_id=ctx.settings.node_id))
    assert state(ctx) == (1, (1, 2), (3,), ())


def test_elect_leaders_keeps_the_elr_against_the_static_min_isr():
    from kjbod.controller import elections
    from kjbod.protocol.generated import ElectLeadersRequest
    from kjbod.protocol.generated.elect_leaders_request import TopicPartitions

    ctx = _static_min_isr_3_cluster()
    ctx.heartbeat(1, want_fence=True)  # 2 leads
    ctx.heartbeat(1)  # back, and the leader takes it into the ISR again
    only(alter(ctx, 2, "t", [1, 2, 3]))
    ctx.heartbeat(3, want_fence=True)  # ISR 1, 2: below 3, so 3 joins the ELR
    assert state(ctx) == (2, (1, 2), (3,), ())
    req = ElectLeadersRequest(election_type=0, topic_partitions=[TopicPartitions(topic="t", partitions=[0])])
    result = elections.elect_leaders(ctx.image, req, 1, min_isr_default=3, node_id=ctx.settings.node_id)
    ctx.commit(result)
    assert state(ctx) == (1, (1, 2), (3,), ())
