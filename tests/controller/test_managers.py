"""The controller's managers in Kafka's ReplicationControlTestContext style: requests in, records and responses
out, no sockets and no disk.  A small context replays each result's records into its image, as the
QuorumController does after they are durable."""

from __future__ import annotations

import uuid

import pytest

from kjbod.controller import (
    ControllerSettings,
    PolicyError,
    cluster_control,
    configs,
    producer_ids,
    replication_control,
)
from kjbod.controller.heartbeats import BrokerHeartbeatManager
from kjbod.controller.result import ControllerResult
from kjbod.metadata import BROKER_RESOURCE, DIR_UNASSIGNED, EMPTY_IMAGE, TOPIC_RESOURCE, replay
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationChangeRecord,
    BrokerRegistrationRequest,
    ConfigRecord,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)
from kjbod.protocol.generated.broker_registration_request import Listener
from kjbod.protocol.generated.create_topics_request import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
)

CLUSTER = "kjbod-test-cluster-0000"


class Policy:
    """Topic configs: only retention.ms and min.insync.replicas, numbers, and unclean.leader.election.enable, a
    boolean.  Broker configs: only "k" and min.insync.replicas."""

    def validate_topic(self, overrides):
        for k, v in overrides.items():
            ok = v.isdigit() if k in ("retention.ms", "min.insync.replicas") else \
                k == "unclean.leader.election.enable" and v in ("true", "false")
            if not ok:
                raise PolicyError(E.INVALID_CONFIG, f"bad config {k}")

    def plan_topic(self, overrides, changes, *, replace):
        new = {} if replace else dict(overrides)
        for k, op, v in changes:
            if op == 1:
                new.pop(k, None)
            else:
                new[k] = v
        self.validate_topic(new)
        return new

    def plan_broker(self, current, name, changes, *, replace):
        if any(k not in ("k", "min.insync.replicas") for k, _, _ in changes):
            raise PolicyError(E.INVALID_CONFIG, "unknown broker config")
        return {k: (v if op == 0 else None) for k, op, v in changes}


class Ctx:
    def __init__(self, elr: bool = True, **settings):
        """`elr=False`: the cluster runs with eligible.leader.replicas.version 0 (the ELR off, Kafka before 4.1's
        default); otherwise at the bootstrap levels of the latest metadata.version (the ELR on)."""
        self.settings = ControllerSettings(cluster_id=CLUSTER, broker_session_timeout_ms=9000, **settings)
        self.image = EMPTY_IMAGE
        self.hb = BrokerHeartbeatManager(self.settings)
        self.now = 1000.0
        self.log: list = []
        if not elr:
            self.commit(ControllerResult([FeatureLevelRecord(name="eligible.leader.replicas.version",
                                                             feature_level=0)], None))

    @property
    def next_offset(self):
        return len(self.log)

    def commit(self, result):
        self.image = replay(self.image, result.records, first_offset=self.next_offset)
        self.log += result.records
        return result.response

    def register(self, bid, dirs=None, incarnation=None, rack=None, **kw):
        dirs = dirs if dirs is not None else [uuid.UUID(int=(bid << 64) + 500)]
        req = BrokerRegistrationRequest(
            broker_id=bid, cluster_id=kw.pop("cluster_id", CLUSTER), incarnation_id=incarnation or uuid.UUID(int=bid << 80),
            listeners=[Listener(name="PLAINTEXT", host="127.0.0.1", port=9000 + bid)], rack=rack, log_dirs=dirs, **kw)
        return self.commit(cluster_control.register_broker(self.image, req, self.settings, self.hb, self.now,
                                                           self.next_offset))

    def heartbeat(self, bid, epoch=None, *, offset=None, want_fence=False, want_shut_down=False, offline=()):
        reg = self.image.brokers.get(bid)
        req = BrokerHeartbeatRequest(broker_id=bid, broker_epoch=reg.epoch if epoch is None and reg else epoch or 0,
                                     current_metadata_offset=self.next_offset if offset is None else offset,
                                     want_fence=want_fence, want_shut_down=want_shut_down,
                                     offline_log_dirs=list(offline))
        return self.commit(self.hb.heartbeat(self.image, req, self.now, self.next_offset))

    def live_broker(self, bid, **kw):
        assert self.register(bid, **kw).error_code == 0
        resp = self.heartbeat(bid)
        assert (resp.error_code, resp.is_fenced, resp.is_caught_up) == (0, False, True)

    def create(self, name, partitions=3, rf=-1, configs=None, assignments=None, validate_only=False):
        t = CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf,
                           configs=[CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
                           assignments=[CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                                        for i, b in enumerate(assignments or [])])
        body = CreateTopicsRequest(topics=[t], timeout_ms=1000, validate_only=validate_only)
        return self.commit(replication_control.create_topics(self.image, body, self.settings, Policy())).topics[0]


# ------------------------------------------------------------------------------------------ registration


def test_registration_epoch_is_the_records_offset_and_the_broker_starts_fenced():
    ctx = Ctx()
    ctx.log += [None] * 7  # records before it
    resp = ctx.register(1)
    assert (resp.error_code, resp.broker_epoch) == (0, 7)
    (rec,) = ctx.log[7:]
    assert isinstance(rec, RegisterBrokerRecord) and rec.fenced and rec.broker_epoch == 7
    assert ctx.image.broker(1).fenced and ctx.image.broker(1).record_offset == 7


def test_same_incarnation_keeps_its_epoch_and_state_a_new_one_gets_a_new_epoch():
    ctx = Ctx()
    ctx.live_broker(1)
    epoch = ctx.image.broker(1).epoch
    again = ctx.register(1, rack="r9")
    assert again.broker_epoch == epoch and not ctx.image.broker(1).fenced and ctx.image.broker(1).rack == "r9"
    # A new incarnation while the session is alive: refused.
    assert ctx.register(1, incarnation=uuid.uuid4()).error_code == E.DUPLICATE_BROKER_REGISTRATION
    # Once the session has expired, it may take over, fenced, with a new epoch.
    ctx.now += 10
    fresh = ctx.register(1, incarnation=uuid.uuid4())
    assert fresh.error_code == 0 and fresh.broker_epoch > epoch and ctx.image.broker(1).fenced


@pytest.mark.parametrize(("kw", "code"), [
    ({"cluster_id": "another-cluster"}, E.INCONSISTENT_CLUSTER_ID),
    ({"dirs": []}, E.INVALID_REGISTRATION),
    ({"dirs": [DIR_UNASSIGNED]}, E.INVALID_REGISTRATION),
    ({"dirs": [uuid.UUID(int=7 << 70)] * 2}, E.INVALID_REGISTRATION),
    ({"is_migrating_zk_broker": True}, E.BROKER_ID_NOT_REGISTERED),
])
def test_registration_checks(kw, code):
    ctx = Ctx()
    resp = ctx.register(2, **kw)
    assert (resp.error_code, resp.broker_epoch) == (code, -1)
    assert ctx.log == [] and ctx.image.broker(2) is None


def test_a_dir_another_broker_owns_is_refused_and_checks_run_in_kafkas_order():
    ctx = Ctx()
    shared = uuid.UUID(int=9 << 70)
    assert ctx.register(1, dirs=[shared]).error_code == 0
    problem = cluster_control.registration_problem(
        ctx.image, BrokerRegistrationRequest(broker_id=2, cluster_id=CLUSTER, log_dirs=[shared]), ctx.settings,
        ctx.hb, ctx.now)
    assert problem == (E.INVALID_REGISTRATION,
                       f"Broker 1 is already registered with directory {_b64(shared)}")
    # The cluster id is checked before the dirs.
    assert ctx.register(2, dirs=[], cluster_id="x").error_code == E.INCONSISTENT_CLUSTER_ID


def _b64(u):
    import base64
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def test_unregister():
    ctx = Ctx()
    assert ctx.commit(cluster_control.unregister_broker(ctx.image, 5)).error_code == E.BROKER_ID_NOT_REGISTERED
    ctx.live_broker(1)
    ctx.create("t", 1)
    assert ctx.commit(cluster_control.unregister_broker(ctx.image, 1)).error_code == 0
    assert isinstance(ctx.log[-1], UnregisterBrokerRecord) and ctx.image.broker(1) is None
    assert ctx.image.topic("t").partitions[0].leader == -1


# ------------------------------------------------------------------------------------------ heartbeats


def test_heartbeat_state_table():
    ctx = Ctx()
    ctx.register(1)
    # Stale or unknown epochs.
    assert ctx.heartbeat(1, epoch=99).error_code == E.STALE_BROKER_EPOCH
    assert ctx.heartbeat(3, epoch=0).error_code == E.STALE_BROKER_EPOCH
    # Not caught up to its own registration: stays fenced.
    r = ctx.heartbeat(1, offset=-1)
    assert (r.is_caught_up, r.is_fenced, r.should_shut_down) == (False, True, False)
    # WantFence keeps it fenced even when caught up.
    assert ctx.heartbeat(1, want_fence=True).is_fenced
    # Caught up: unfenced, with the record.
    r = ctx.heartbeat(1)
    assert (r.is_caught_up, r.is_fenced) == (True, False)
    assert isinstance(ctx.log[-1], BrokerRegistrationChangeRecord) and ctx.log[-1].fenced == -1
    # UNFENCED + WantFence: fenced again.
    assert ctx.heartbeat(1, want_fence=True).is_fenced and ctx.image.broker(1).fenced
    # FENCED + WantShutDown: shut down now, no records.
    before = len(ctx.log)
    r = ctx.heartbeat(1, want_shut_down=True)
    assert (r.is_fenced, r.should_shut_down) == (True, True) and len(ctx.log) == before


def test_controlled_shutdown_moves_leadership_first():
    ctx = Ctx(elr=False)
    ctx.live_broker(1)
    ctx.live_broker(2)
    ctx.create("t", 4)
    led_by_1 = [p for p in ctx.image.topic("t").partitions.values() if p.leader == 1]
    assert led_by_1
    r = ctx.heartbeat(1, want_shut_down=True, offset=0)
    assert (r.is_fenced, r.should_shut_down) == (False, False)
    assert ctx.image.broker(1).in_controlled_shutdown
    assert all(ctx.image.topic("t").partitions[p.partition].leader == -1 for p in led_by_1)
    # With the ELR off the ISR is never written empty: the only replica stays in it.
    assert all(ctx.image.topic("t").partitions[p.partition].isr == (1,) for p in led_by_1)
    # Not yet every active broker has applied the shutdown's records: wait.
    ctx.heartbeat(2, offset=0)
    assert not ctx.heartbeat(1, want_shut_down=True).should_shut_down
    ctx.heartbeat(2)
    r = ctx.heartbeat(1, want_shut_down=True)
    assert (r.is_fenced, r.should_shut_down) == (True, True) and ctx.image.broker(1).fenced


def test_session_expiry_fences_one_stale_broker_at_a_time_and_unfencing_elects_again():
    ctx = Ctx(local_broker_id=3)
    for b in (1, 2, 3):
        ctx.live_broker(b)
    ctx.create("t", 3)
    ctx.now += 9.5
    assert ctx.hb.stale_broker(ctx.image, ctx.now).broker_id == 1  # the local broker never expires
    fenced = ctx.commit(ctx.hb.fence_stale(ctx.image, ctx.now))
    assert fenced.broker_id == 1 and ctx.image.broker(1).fenced and not ctx.image.broker(2).fenced
    assert [p.leader for p in ctx.image.topic("t").partitions.values() if 1 in p.replicas] == [-1]
    ctx.commit(ctx.hb.fence_stale(ctx.image, ctx.now))
    assert ctx.image.broker(2).fenced and ctx.hb.stale_broker(ctx.image, ctx.now) is None
    # Broker 1 comes back: unfenced, and leads its partition again.
    r = ctx.heartbeat(1)
    assert not r.is_fenced
    assert [p.leader for p in ctx.image.topic("t").partitions.values() if 1 in p.replicas] == [1]


def test_offline_dirs_move_leadership_off_their_partitions_only():
    ctx = Ctx()
    d1, d2 = uuid.UUID(int=11 << 70), uuid.UUID(int=12 << 70)
    ctx.live_broker(1, dirs=[d1, d2])
    ctx.create("t", 2)
    t = ctx.image.topic("t")
    assert all(p.directories == (DIR_UNASSIGNED,) for p in t.partitions.values())  # several dirs: unassigned
    ctx.commit(replication_control.assign_directories(ctx.image, 1, [(t.topic_id, 0, d1), (t.topic_id, 1, d2)]))
    assert [p.directories for p in ctx.image.topic("t").partitions.values()] == [(d1,), (d2,)]
    ctx.heartbeat(1, offline=[d2])
    parts = ctx.image.topic("t").partitions
    assert (parts[0].leader, parts[1].leader) == (1, -1)
    assert ctx.image.broker(1).log_dirs == (d1,) and not ctx.image.broker(1).fenced
    before = len(ctx.log)
    ctx.heartbeat(1, offline=[d2])  # cumulative: nothing new
    assert len(ctx.log) == before


# ------------------------------------------------------------------------------------------ topics


def test_create_topics_spreads_leaders_over_unfenced_brokers_and_sets_dirs():
    ctx = Ctx()
    for b in (1, 2, 3):
        ctx.live_broker(b)
    ctx.register(4)  # registered but fenced: gets nothing
    r = ctx.create("t", 12, configs={"retention.ms": "5"})
    assert (r.error_code, r.num_partitions, r.replication_factor) == (0, 12, 1)
    t = ctx.image.topic("t")
    assert t.topic_id == r.topic_id and dict(t.configs) == {"retention.ms": "5"}
    leaders = [p.leader for p in t.partitions.values()]
    assert sorted(set(leaders)) == [1, 2, 3] and all(leaders.count(b) == 4 for b in (1, 2, 3))
    for p in t.partitions.values():
        assert p.replicas == p.isr == (p.leader,)
        assert p.directories == (ctx.image.broker(p.leader).log_dirs[0],)  # a one-dir broker: that dir


def test_create_topics_rack_aware_placement_spans_racks():
    ctx = Ctx()
    for b, rack in ((1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, None)):
        ctx.live_broker(b, rack=rack)
    r = ctx.create("t", 20, rf=3)
    assert (r.error_code, r.replication_factor) == (0, 3)
    racks = {b.broker_id: b.rack for b in ctx.image.brokers.values()}
    leaders = []
    for p in ctx.image.topic("t").partitions.values():
        assert len(set(p.replicas)) == 3 and {racks[b] for b in p.replicas} == {"a", "b", None}
        assert p.isr == p.replicas and p.leader == p.replicas[0]
        leaders.append(p.leader)
    assert sorted(set(leaders)) == [1, 2, 3, 4, 5]  # racks take turns leading, so every broker leads some


def test_create_topics_with_replication_factor_3():
    ctx = Ctx()
    for b in (1, 2, 3):
        ctx.live_broker(b)
    ctx.register(4)  # fenced: may hold a follower, never a leader, and is out of the ISR
    r = ctx.create("t", 8, rf=4)
    assert (r.error_code, r.num_partitions, r.replication_factor) == (0, 8, 4)
    for p in ctx.image.topic("t").partitions.values():
        assert sorted(p.replicas) == [1, 2, 3, 4] and p.leader == p.replicas[0] != 4
        assert p.isr == tuple(b for b in p.replicas if b != 4)
        assert len(p.directories) == 4
    r = ctx.create("u", 1, rf=5)
    assert r.error_code == E.INVALID_REPLICATION_FACTOR and r.error_message == (
        "Unable to replicate the partition 5 time(s): The target replication factor of 5 cannot be reached because "
        "only 4 broker(s) are registered.")
    ctx2 = Ctx(default_replication_factor=3)
    for b in (1, 2, 3):
        ctx2.live_broker(b)
    assert ctx2.create("d", 2).replication_factor == 3
    assert all(len(p.replicas) == 3 for p in ctx2.image.topic("d").partitions.values())


def test_create_with_explicit_replicated_assignment():
    ctx = Ctx()
    for b in (1, 2, 3):
        ctx.live_broker(b)
    ctx.register(4)
    r = ctx.create("x", -1, assignments=[[2, 3, 1], [4, 1, 2]])
    assert (r.error_code, r.replication_factor, r.num_partitions) == (0, 3, 2)
    parts = ctx.image.topic("x").partitions
    assert (parts[0].replicas, parts[0].isr, parts[0].leader) == ((2, 3, 1), (2, 3, 1), 2)
    assert (parts[1].replicas, parts[1].isr, parts[1].leader) == ((4, 1, 2), (1, 2), 1)


@pytest.mark.parametrize(("kwargs", "code", "words"), [
    ({"name": "bad name!"}, E.INVALID_TOPIC_EXCEPTION, "characters"),
    ({"name": "__cluster_metadata"}, E.INVALID_REQUEST, "internal topic"),
    ({"name": "exists"}, E.TOPIC_ALREADY_EXISTS, "already exists"),
    ({"name": "a_b"}, E.INVALID_TOPIC_EXCEPTION, "collides"),
    ({"name": "zero", "partitions": 0}, E.INVALID_PARTITIONS, "larger than 0"),
    ({"name": "rf4", "rf": 4}, E.INVALID_REPLICATION_FACTOR, "only 3 broker(s) are registered"),
    ({"name": "rf0", "rf": 0}, E.INVALID_REPLICATION_FACTOR, "larger than 0"),
    ({"name": "rfneg", "rf": -2, "partitions": 0}, E.INVALID_REPLICATION_FACTOR, "or -1 to use the default"),
    ({"name": "cfg", "configs": {"no.such": "1"}}, E.INVALID_CONFIG, "no.such"),
    ({"name": "cfg2", "rf": 9, "configs": {"no.such": "1"}}, E.INVALID_CONFIG, "no.such"),  # configs first
    ({"name": "asg", "partitions": -1, "assignments": [[1], [9]]}, E.INVALID_REPLICA_ASSIGNMENT,
     "includes broker 9, but no such broker is registered"),
    ({"name": "asg2", "partitions": -1, "assignments": [[1, 1]]}, E.INVALID_REPLICA_ASSIGNMENT, "more than once"),
    ({"name": "asg3", "partitions": -1, "assignments": [[1, 2], [2]]}, E.INVALID_REPLICA_ASSIGNMENT,
     "not consistent with previous partitions"),
    ({"name": "asg4", "partitions": -1, "assignments": [[3]]}, E.INVALID_REPLICA_ASSIGNMENT, "fenced"),
    ({"name": "asg5", "partitions": 2, "assignments": [[1]]}, E.INVALID_REQUEST, "numPartitions was not set to -1"),
    ({"name": "asg6", "partitions": -1, "rf": 1, "assignments": [[1]]}, E.INVALID_REQUEST,
     "replication factor was not set to -1"),
    ({"name": "asg7", "partitions": -1, "assignments": [[]]}, E.INVALID_REPLICA_ASSIGNMENT, "empty replica list"),
])
def test_create_topics_errors(kwargs, code, words):
    ctx = Ctx()
    ctx.live_broker(1)
    ctx.live_broker(2)
    ctx.register(3)  # fenced
    assert ctx.create("exists", 1).error_code == 0
    assert ctx.create("a.b", 1).error_code == 0
    before = len(ctx.log)
    r = ctx.create(kwargs.pop("name"), **kwargs)
    assert r.error_code == code and words in r.error_message
    assert len(ctx.log) == before


def test_create_with_explicit_assignment_and_validate_only():
    ctx = Ctx()
    ctx.live_broker(1)
    ctx.live_broker(2)
    assert ctx.create("v", 3, validate_only=True).error_code == 0
    assert ctx.image.topic("v") is None
    r = ctx.create("x", -1, assignments=[[2], [2], [1]])
    assert r.error_code == 0
    assert [p.leader for _, p in sorted(ctx.image.topic("x").partitions.items())] == [2, 2, 1]


def test_no_unfenced_broker_means_no_placement():
    ctx = Ctx()
    ctx.register(1)
    r = ctx.create("t", 1)
    assert r.error_code == E.INVALID_REPLICATION_FACTOR and r.error_message == (
        "Unable to replicate the partition 1 time(s): All brokers are currently fenced.")


def test_delete_topics():
    ctx = Ctx()
    ctx.live_broker(1)
    tid = ctx.create("t", 2).topic_id
    body = DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name="t"),
                                       DeleteTopicsRequest.DeleteTopicState(topic_id=uuid.uuid4()),
                                       DeleteTopicsRequest.DeleteTopicState(name="nope")], timeout_ms=1)
    resp = ctx.commit(replication_control.delete_topics(ctx.image, body, 6))
    assert [r.error_code for r in resp.responses] == [0, E.UNKNOWN_TOPIC_ID, E.UNKNOWN_TOPIC_OR_PARTITION]
    assert ctx.image.topic("t") is None and ctx.image.topic_by_id(tid) is None


def test_fencing_never_writes_an_empty_isr_with_the_elr_off():
    ctx = Ctx(elr=False)
    ctx.live_broker(1)
    ctx.create("t", 1)
    ctx.heartbeat(1, want_fence=True)
    changes = [r for r in ctx.log if isinstance(r, PartitionChangeRecord)]
    assert len(changes) == 1 and changes[0].isr is None and changes[0].leader == -1
    assert ctx.image.topic("t").partitions[0].isr == (1,)
    assert all(not isinstance(r, PartitionRecord) or r.isr for r in ctx.log)


# ------------------------------------------------------------------------------------------ configs, producer ids


def test_configs_for_topics_brokers_and_the_cluster_default():
    ctx = Ctx()
    ctx.live_broker(1)
    ctx.create("t", 1)
    resources = [(TOPIC_RESOURCE, "t", [("retention.ms", 0, "7")]), (BROKER_RESOURCE, "", [("k", 0, "v")]),
                 (BROKER_RESOURCE, "1", [("k", 0, "w")]), (TOPIC_RESOURCE, "nope", [("retention.ms", 0, "1")]),
                 (BROKER_RESOURCE, "2", [("other", 0, "1")]), (3, "x", []),
                 (TOPIC_RESOURCE, "t2", [("a", 0, "1"), ("a", 1, None)])]
    answers = ctx.commit(configs.alter_configs(ctx.image, resources, Policy(), replace=False, validate_only=False))
    assert [a[0] for a in answers] == [0, 0, 0, E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_CONFIG, E.INVALID_REQUEST,
                                       E.INVALID_REQUEST]
    assert dict(ctx.image.topic("t").configs) == {"retention.ms": "7"}
    assert dict(ctx.image.resource_configs(BROKER_RESOURCE, "")) == {"k": "v"}
    assert dict(ctx.image.resource_configs(BROKER_RESOURCE, "1")) == {"k": "w"}
    # AlterConfigs replaces the whole set; validate_only writes nothing.
    before = len(ctx.log)
    ctx.commit(configs.alter_configs(ctx.image, [(TOPIC_RESOURCE, "t", [])], Policy(), replace=True,
                                     validate_only=True))
    assert len(ctx.log) == before
    ctx.commit(configs.alter_configs(ctx.image, [(TOPIC_RESOURCE, "t", [])], Policy(), replace=True,
                                     validate_only=False))
    assert dict(ctx.image.topic("t").configs) == {}
    dup = ctx.commit(configs.alter_configs(ctx.image, [(TOPIC_RESOURCE, "t", []), (TOPIC_RESOURCE, "t", [])],
                                           Policy(), replace=True, validate_only=False))
    assert [a[0] for a in dup] == [E.INVALID_REQUEST, E.INVALID_REQUEST]


def test_client_metrics_subscriptions_are_config_records_of_resource_type_16():
    """KIP-714's CLIENT_METRICS resources: checked as Kafka checks them, each change a ConfigRecord, the
    resource gone from the image when its last config is deleted."""
    ctx = Ctx()
    ctx.live_broker(1)
    answers = ctx.commit(configs.alter_configs(ctx.image, [
        (16, "subs", [("metrics", 0, "org.apache."), ("interval.ms", 0, "1000"), ("match", 0, "client_id=a.*")]),
        (16, "bad-interval", [("interval.ms", 0, "50")]),
        (16, "bad-key", [("colour", 0, "red")]),
        (16, "bad-match", [("match", 0, "client_idd=x")]),
        (16, "", [("metrics", 0, "*")])], Policy(), replace=False, validate_only=False))
    assert [a[0] for a in answers] == [0, E.INVALID_REQUEST, E.INVALID_REQUEST, E.INVALID_CONFIG, E.INVALID_REQUEST]
    assert dict(ctx.image.resource_configs(16, "subs")) == {"metrics": "org.apache.", "interval.ms": "1000",
                                                            "match": "client_id=a.*"}
    assert all(r.resource_type == 16 for r in ctx.log if isinstance(r, ConfigRecord))
    ctx.commit(configs.alter_configs(ctx.image, [(16, "subs", [("metrics", 2, "org.other.")])], Policy(),
                                     replace=False, validate_only=False))
    assert ctx.image.resource_configs(16, "subs")["metrics"] == "org.apache.,org.other."
    ctx.commit(configs.alter_configs(ctx.image, [(16, "subs", [("metrics", 1, None), ("interval.ms", 1, None),
                                                               ("match", 1, None)])], Policy(), replace=False,
                                     validate_only=False))
    assert not ctx.image.resource_configs(16, "subs")


def test_producer_id_blocks_from_two_brokers_never_collide():
    ctx = Ctx()
    ctx.live_broker(1)
    ctx.live_broker(2)
    seen: set[int] = set()
    for i in range(6):
        bid = 1 + i % 2
        resp = ctx.commit(producer_ids.allocate_producer_ids(
            ctx.image, AllocateProducerIdsRequest(broker_id=bid, broker_epoch=ctx.image.broker(bid).epoch)))
        block = set(range(resp.producer_id_start, resp.producer_id_start + resp.producer_id_len))
        assert resp.error_code == 0 and len(block) == producer_ids.BLOCK_SIZE and not block & seen
        seen |= block
    # The watermark survives a replay from the records alone.
    assert replay(EMPTY_IMAGE, ctx.log).next_producer_id == max(seen) + 1
    stale = ctx.commit(producer_ids.allocate_producer_ids(ctx.image, AllocateProducerIdsRequest(broker_id=1,
                                                                                                broker_epoch=-5)))
    assert stale.error_code == E.STALE_BROKER_EPOCH


def test_the_local_brokers_new_incarnation_replaces_the_old_one_at_once():
    """Combined mode: the broker in the controller's own process registers once per start, so its earlier
    incarnation is gone even though its session looks alive."""
    ctx = Ctx(local_broker_id=1)
    ctx.live_broker(1)
    restarted = Ctx(local_broker_id=1)  # a new process: its controller replays the same records
    restarted.image, restarted.log = ctx.image, ctx.log
    resp = restarted.register(1, incarnation=uuid.uuid4())
    assert resp.error_code == 0 and restarted.image.broker(1).fenced
    # Once registered and unfenced, the local broker is live: another incarnation of its id is refused.
    assert not restarted.heartbeat(1).is_fenced
    assert restarted.register(1, incarnation=uuid.uuid4()).error_code == E.DUPLICATE_BROKER_REGISTRATION


def test_a_new_topic_id_never_reads_as_an_option_nor_is_reserved(monkeypatch):
    """Kafka's Uuid.randomUuid never gives text starting with '-' (a CLI would take `--topic-id -x...` for an
    option) nor a reserved id: drawn ids that would are drawn again."""
    from kjbod.controller.replication_control import new_topic_id
    from kjbod.storage.ids import uuid_text

    dash = uuid.UUID(int=(0b111110 << 122) | 12345)  # text "-...."
    low = uuid.UUID(int=7)
    fine = uuid.UUID(int=(1 << 127) | 99)
    drawn = iter([dash, low, fine])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(drawn))
    assert uuid_text(dash).startswith("-")
    assert new_topic_id() == fine
