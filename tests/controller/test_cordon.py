"""Cordoned log dirs (KIP-1066) at the controller, in process: the ids a broker sends in BrokerHeartbeat v2's
CordonedLogDirs, the BrokerRegistrationChangeRecord v3 that keeps them (from metadata.version 4.3-IV0; ignored
below it, as Kafka's controller ignores them), which brokers count as fully cordoned, and placement and explicit
assignments around them. Plus the dynamic cordoned.log.dirs value as the config policy checks it."""

from __future__ import annotations

import uuid

import pytest

from kjbod.broker import broker_config as bc
from kjbod.controller import replication_control
from kjbod.controller.result import ControllerResult
from kjbod.metadata import features as ft
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    BrokerHeartbeatRequest,
    BrokerRegistrationChangeRecord,
    CreateTopicsRequest,
    FeatureLevelRecord,
)
from kjbod.protocol.generated.broker_registration_request import Feature

from .test_managers import Ctx, Policy


def dirs(bid: int, n: int = 2) -> list[uuid.UUID]:
    return [uuid.UUID(int=(bid << 64) + 500 + i) for i in range(n)]


def send(ctx: Ctx, bid: int, cordoned: list[uuid.UUID] | None):
    reg = ctx.image.brokers[bid]
    req = BrokerHeartbeatRequest(broker_id=bid, broker_epoch=reg.epoch, current_metadata_offset=ctx.next_offset,
                                 want_fence=False, want_shut_down=False, cordoned_log_dirs=cordoned)
    return ctx.commit(ctx.hb.heartbeat(ctx.image, req, ctx.now, ctx.next_offset))


def beat(ctx: Ctx, bid: int, cordoned: list[uuid.UUID] | None) -> None:
    assert send(ctx, bid, cordoned).error_code == 0


def cordon_records(ctx: Ctx, since: int) -> list[BrokerRegistrationChangeRecord]:
    return [r for r in ctx.log[since:] if isinstance(r, BrokerRegistrationChangeRecord)
            and r.cordoned_log_dirs is not None]


SUPPORTED = [Feature(name=n, min_supported_version=lo, max_supported_version=hi) for n, (lo, hi) in
             ft.SUPPORTED.items()]


def at_metadata_version(level: int) -> Ctx:
    c = Ctx()
    c.commit(ControllerResult([FeatureLevelRecord(name=ft.METADATA_VERSION, feature_level=level)], None))
    for bid in (1, 2, 3):
        c.live_broker(bid, dirs=dirs(bid), features=SUPPORTED)
    return c


@pytest.fixture
def ctx() -> Ctx:
    return at_metadata_version(30)


def test_only_a_broker_whose_every_dir_is_cordoned_counts(ctx):
    beat(ctx, 1, dirs(1)[:1])  # one of two
    beat(ctx, 2, dirs(2))  # both
    assert ctx.hb.fully_cordoned(ctx.image) == frozenset({2})
    beat(ctx, 2, [])  # uncordoned: the next heartbeat says so
    assert ctx.hb.fully_cordoned(ctx.image) == frozenset()


def test_a_heartbeat_records_the_cordon_once_and_only_when_it_changes(ctx):
    assert ctx.image.brokers[2].cordoned_dirs is None  # not known: registration carries none
    start = ctx.next_offset
    beat(ctx, 2, None)  # null: the broker has not caught up yet, nothing to record
    beat(ctx, 2, [])  # the first list, even an empty one, is recorded: the cordons are known now
    beat(ctx, 2, [])
    beat(ctx, 2, list(reversed(dirs(2))))
    beat(ctx, 2, dirs(2))  # the same set in another order: no change
    recorded = [(r.broker_id, r.broker_epoch, r.cordoned_log_dirs, r.fenced, r.log_dirs)
                for r in cordon_records(ctx, start)]
    epoch = ctx.image.brokers[2].epoch
    assert recorded == [(2, epoch, [], 0, []), (2, epoch, sorted(dirs(2)), 0, [])]
    assert ctx.image.brokers[2].cordoned_dirs == tuple(sorted(dirs(2)))
    assert ctx.hb.fully_cordoned(ctx.image) == frozenset({2})


def test_a_new_incarnation_starts_with_its_cordons_unknown(ctx):
    beat(ctx, 2, dirs(2))
    assert ctx.hb.fully_cordoned(ctx.image) == frozenset({2})
    ctx.now += 60  # the old incarnation's session has expired
    assert ctx.register(2, dirs=dirs(2), incarnation=uuid.UUID(int=99), features=SUPPORTED).error_code == 0
    # Kafka's RegisterBrokerRecord carries no cordons from a registration: placement may use the broker again
    # until its first heartbeat after catching up says otherwise.
    assert ctx.image.brokers[2].cordoned_dirs is None
    assert ctx.hb.fully_cordoned(ctx.image) == frozenset()
    beat(ctx, 2, dirs(2))
    assert ctx.hb.fully_cordoned(ctx.image) == frozenset({2})


def test_a_cordoned_dir_the_broker_never_registered_changes_nothing(ctx):
    start = ctx.next_offset
    foreign = dirs(1)[:1]  # broker 1's dir, named by broker 2
    resp = send(ctx, 2, [dirs(2)[0], *foreign])
    assert resp.error_code == E.LOG_DIR_NOT_FOUND
    assert ctx.log[start:] == [] and ctx.image.brokers[2].cordoned_dirs is None
    beat(ctx, 2, dirs(2)[:1])  # the broker's own dir is accepted
    assert ctx.image.brokers[2].cordoned_dirs == tuple(dirs(2)[:1])


def test_below_4_3_iv0_the_controller_ignores_cordons():
    ctx = at_metadata_version(29)
    start = ctx.next_offset
    beat(ctx, 2, dirs(2))
    beat(ctx, 3, [uuid.UUID(int=12345)])  # not even checked: the field means nothing at this level
    assert cordon_records(ctx, start) == []
    assert ctx.image.brokers[2].cordoned_dirs is None
    assert ctx.hb.fully_cordoned(ctx.image) == frozenset()
    result = create(ctx, "t", partitions=12, rf=3)  # every broker still takes replicas
    assert result.error_code == 0


def test_an_upgrade_to_4_3_iv0_makes_the_next_heartbeat_count():
    ctx = at_metadata_version(29)
    beat(ctx, 2, dirs(2))
    ctx.commit(ControllerResult([FeatureLevelRecord(name=ft.METADATA_VERSION, feature_level=30)], None))
    assert ctx.hb.fully_cordoned(ctx.image) == frozenset()
    beat(ctx, 2, dirs(2))
    assert ctx.hb.fully_cordoned(ctx.image) == frozenset({2})


def create(ctx: Ctx, name: str, partitions: int = 6, rf: int = 1, assignments=None):
    from kjbod.protocol.generated.create_topics_request import CreatableReplicaAssignment, CreatableTopic

    t = CreatableTopic(name=name, num_partitions=-1 if assignments else partitions,
                       replication_factor=-1 if assignments else rf,
                       assignments=[CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                                    for i, b in enumerate(assignments or [])])
    body = CreateTopicsRequest(topics=[t], timeout_ms=1000)
    result = replication_control.create_topics(ctx.image, body, ctx.settings, Policy(),
                                               cordoned=ctx.hb.fully_cordoned(ctx.image))
    return ctx.commit(result).topics[0]


def test_placement_leaves_a_fully_cordoned_broker_out(ctx):
    beat(ctx, 2, dirs(2))
    result = create(ctx, "t", partitions=12, rf=2)
    assert result.error_code == 0
    placed = [p.replicas for p in ctx.image.topic("t").partitions.values()]
    assert all(2 not in r for r in placed) and len(placed) == 12


def test_too_few_uncordoned_brokers_is_named(ctx):
    beat(ctx, 2, dirs(2))
    beat(ctx, 3, dirs(3))
    result = create(ctx, "t", rf=2)
    assert result.error_code == E.INVALID_REPLICATION_FACTOR
    assert result.error_message.endswith("(not counting brokers 2, 3: every log dir cordoned)")


def test_an_explicit_assignment_onto_a_fully_cordoned_broker_is_ineligible(ctx):
    beat(ctx, 3, dirs(3))
    result = create(ctx, "named", assignments=[[1, 2], [3, 1]])
    assert (result.error_code, result.error_message) == (
        E.INELIGIBLE_REPLICA, "Broker 3: every log dir is cordoned (cordoned.log.dirs), so it takes no new replicas.")
    assert ctx.image.topic("named") is None


# ------------------------------------------------------------------------------------------ the dynamic config


def plan(name: str, value: str | None, op: int = bc.SET):
    return bc.plan_broker_changes(bc.DynamicBrokerConfigs(1), name, [(bc.CORDON_KEY, op, value)], replace=False)


def test_cordoned_log_dirs_is_dynamic_per_broker():
    assert plan("1", " /data/a , /data/b,/data/a") == {bc.CORDON_KEY: "/data/a,/data/b"}
    assert plan("1", "*") == {bc.CORDON_KEY: "*"}
    assert plan("1", "") == {}  # empty: nothing cordoned, nothing to store


@pytest.mark.parametrize(("name", "value", "code", "fragment"), [
    ("", "/data/a", E.INVALID_REQUEST, "set it for a broker id, not as the cluster-wide default"),
    ("1", "data/a", E.INVALID_CONFIG, "'data/a' is not an absolute path"),
    ("1", "*,/data/a", E.INVALID_CONFIG, "'*' cordons every log dir and cannot be listed with others"),
])
def test_bad_cordon_values_are_refused(name, value, code, fragment):
    with pytest.raises(bc.ConfigProblem) as e:
        plan(name, value)
    assert e.value.code == code and fragment in e.value.message


def test_new_partitions_avoid_a_fully_cordoned_broker_and_may_not_name_it(ctx):
    from kjbod.protocol.generated import CreatePartitionsRequest
    from kjbod.protocol.generated.create_partitions_request import (
        CreatePartitionsAssignment,
        CreatePartitionsTopic,
    )

    assert create(ctx, "grow", partitions=2, rf=1).error_code == 0
    beat(ctx, 1, dirs(1))

    def grow(count: int, assignments=None):
        body = CreatePartitionsRequest(topics=[CreatePartitionsTopic(
            name="grow", count=count,
            assignments=None if assignments is None else [CreatePartitionsAssignment(broker_ids=b)
                                                          for b in assignments])], timeout_ms=1000)
        result = replication_control.create_partitions(ctx.image, body, cordoned=ctx.hb.fully_cordoned(ctx.image))
        return ctx.commit(result).results[0]

    named = grow(3, [[1]])
    assert (named.error_code, named.error_message) == (
        E.INELIGIBLE_REPLICA, "Broker 1: every log dir is cordoned (cordoned.log.dirs), so it takes no new replicas.")
    assert grow(12).error_code == 0
    added = [p.replicas for i, p in ctx.image.topic("grow").partitions.items() if i >= 2]
    assert len(added) == 10 and all(1 not in r for r in added)
