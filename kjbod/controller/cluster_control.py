"""Broker and controller registration, and unregistration (Kafka's ClusterControlManager.registerBroker,
registerController, unregisterBroker).

Checks in Kafka's order: cluster id (INCONSISTENT_CLUSTER_ID); a live session of another incarnation of the
same id (DUPLICATE_BROKER_REGISTRATION: a fenced or expired one may be replaced at once); the ZooKeeper
migration flag (BROKER_ID_NOT_REGISTERED); log dirs (INVALID_REGISTRATION: none, a reserved id, a duplicate, or
one another broker registered); finalized features the broker cannot run (UNSUPPORTED_VERSION).

A new incarnation's epoch is the offset its RegisterBrokerRecord will have; it starts fenced.  Before that
record, the previous incarnation leaves every ISR (and, when it did not shut down cleanly and
eligible.leader.replicas.version is 1, every ELR: KIP-966), as Kafka's handleBrokerShutdown has it.  The same
incarnation registering again keeps its epoch and its fenced and controlled-shutdown state, and may change its
listeners, rack and dirs.

A controller's registration (ControllerRegistration, KIP-919) becomes one RegisterControllerRecord, as Kafka's
registerController writes it: ZkMigrationReady is always false, the listeners and feature ranges are copied.  As
in Kafka, the id need not be a voter (a controller observing the quorum, before AddRaftVoter, registers too) and
the last record of an id wins whatever its incarnation (the process whose incarnation it is not registers again
when it sees that: kjbod.controller.registration).  What Kafka's own replay of the record would refuse is refused
here instead, so it never reaches the log: a listener whose security protocol id is unknown, and a feature range
whose minimum is above its maximum (INVALID_REQUEST, naming it).
"""

from __future__ import annotations

from typing import Any

from kjbod.controller.heartbeats import BrokerHeartbeatManager
from kjbod.controller.partition_change import remove_from_isrs
from kjbod.controller.result import ControllerResult, ControllerSettings
from kjbod.metadata import MetadataImage, is_reserved_dir
from kjbod.metadata.features import elr_enabled
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerRegistrationRequest,
    ControllerRegistrationResponse,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnregisterBrokerRecord,
    UnregisterBrokerResponse,
)
from kjbod.protocol.generated.register_broker_record import BrokerEndpoint, BrokerFeature
from kjbod.protocol.generated.register_controller_record import ControllerEndpoint, ControllerFeature
from kjbod.storage.ids import uuid_to_str


def registration_problem(image: MetadataImage, req: BrokerRegistrationRequest, settings: ControllerSettings,
                         sessions: BrokerHeartbeatManager, now: float) -> tuple[int, str] | None:
    if req.cluster_id != settings.cluster_id:
        return ErrorCode.INCONSISTENT_CLUSTER_ID, (
            f"expected cluster id {settings.cluster_id}, but the broker sent {req.cluster_id}")
    existing = image.brokers.get(req.broker_id)
    if (existing is not None and existing.incarnation_id != req.incarnation_id
            and sessions.has_valid_session(existing, now)):
        return ErrorCode.DUPLICATE_BROKER_REGISTRATION, (
            f"another broker is registered with id {req.broker_id} (incarnation {existing.incarnation_id}) and its "
            "session has not expired")
    if req.is_migrating_zk_broker:
        return ErrorCode.BROKER_ID_NOT_REGISTERED, "ZooKeeper migration is not supported"
    if not req.log_dirs:
        return ErrorCode.INVALID_REGISTRATION, "No directories specified in request"
    if any(is_reserved_dir(d) for d in req.log_dirs):
        return ErrorCode.INVALID_REGISTRATION, "Reserved directory ID in request"
    if len(set(req.log_dirs)) != len(req.log_dirs):
        return ErrorCode.INVALID_REGISTRATION, "Duplicate directory ID in request"
    for d in req.log_dirs:
        owner = image.dir_owner(d)
        if owner is not None and owner != req.broker_id:
            return ErrorCode.INVALID_REGISTRATION, (
                f"Broker {owner} is already registered with directory {uuid_to_str(d.bytes)}")
    offered = {f.name: (f.min_supported_version, f.max_supported_version) for f in req.features}
    for name, level in image.features.items():
        lo, hi = offered.get(name, (0, 0))
        if level != 0 and not lo <= level <= hi:
            return ErrorCode.UNSUPPORTED_VERSION, (
                f"Unable to register because the broker does not support finalized version {level} of {name}")
    return None


def register_broker(image: MetadataImage, req: BrokerRegistrationRequest, settings: ControllerSettings,
                    sessions: BrokerHeartbeatManager, now: float, next_offset: int) -> ControllerResult:
    problem = registration_problem(image, req, settings, sessions, now)
    if problem is not None:
        return ControllerResult([], BrokerRegistrationResponse(error_code=problem[0]))
    existing = image.brokers.get(req.broker_id)
    sessions.dirs.note(req.broker_id, req.log_dirs)
    record = RegisterBrokerRecord(
        broker_id=req.broker_id, incarnation_id=req.incarnation_id,
        end_points=[BrokerEndpoint(name=ln.name, host=ln.host, port=ln.port, security_protocol=ln.security_protocol)
                    for ln in req.listeners],
        features=[BrokerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                max_supported_version=f.max_supported_version) for f in req.features],
        rack=req.rack, log_dirs=list(req.log_dirs))
    records: list[Any] = []
    if existing is not None and existing.incarnation_id == req.incarnation_id:
        record.broker_epoch = existing.epoch
        record.fenced = existing.fenced
        record.in_controlled_shutdown = existing.in_controlled_shutdown
    else:
        # A new incarnation: what the last one left goes first (Kafka's handleBrokerShutdown).  It shut down
        # cleanly when it names the epoch it last had (from its log dirs' clean-shutdown marker); then it only
        # leaves the ISRs, as a fenced broker does.  Otherwise, with the ELR on, its unflushed records may be
        # gone, so it leaves every ISR and ELR and may not be elected from them.
        clean = existing is not None and existing.epoch == req.previous_broker_epoch
        records += remove_from_isrs(image, req.broker_id, unclean_default=settings.unclean_leader_election_enable,
                                    node_id=settings.node_id, min_isr_default=settings.min_insync_replicas,
                                    unclean_shutdown=not clean and elr_enabled(image))
        record.broker_epoch = next_offset + len(records)
        record.fenced = True
        sessions.remove(req.broker_id)
    if req.broker_id == settings.local_broker_id:
        sessions.local_registered = True
    records.append(record)
    return ControllerResult(records, BrokerRegistrationResponse(error_code=0, broker_epoch=record.broker_epoch))


def unregister_broker(image: MetadataImage, broker_id: int, *, min_isr_default: int = 1,
                      node_id: int | None = None) -> ControllerResult:
    reg = image.brokers.get(broker_id)
    if reg is None:
        return ControllerResult([], UnregisterBrokerResponse(  # Kafka sends no message; naming the id helps
            error_code=ErrorCode.BROKER_ID_NOT_REGISTERED, error_message=f"broker {broker_id} is not registered"))
    records: list[Any] = [*remove_from_isrs(image, broker_id, min_isr_default=min_isr_default, node_id=node_id),
                          UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=reg.epoch)]
    return ControllerResult(records, UnregisterBrokerResponse(error_code=0, error_message=None))


SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


def controller_registration_problem(req: ControllerRegistrationRequest) -> str | None:
    for ln in req.listeners:
        if ln.security_protocol not in SECURITY_PROTOCOLS:
            return f"listener {ln.name} has unknown security protocol id {ln.security_protocol}"
    for f in req.features:
        if f.min_supported_version > f.max_supported_version:
            return (f"feature {f.name} has minimum version {f.min_supported_version} above its maximum version "
                    f"{f.max_supported_version}")
    return None


def register_controller(image: MetadataImage, req: ControllerRegistrationRequest) -> ControllerResult:
    problem = controller_registration_problem(req)
    if problem is not None:
        return ControllerResult([], ControllerRegistrationResponse(
            error_code=ErrorCode.INVALID_REQUEST, error_message=f"controller {req.controller_id}: {problem}"))
    record = RegisterControllerRecord(
        controller_id=req.controller_id, incarnation_id=req.incarnation_id, zk_migration_ready=False,
        end_points=[ControllerEndpoint(name=ln.name, host=ln.host, port=ln.port, security_protocol=ln.security_protocol)
                    for ln in req.listeners],
        features=[ControllerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                    max_supported_version=f.max_supported_version) for f in req.features])
    return ControllerResult([record], ControllerRegistrationResponse(error_code=0, error_message=None))
