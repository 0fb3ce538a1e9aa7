"""Broker sessions and the heartbeat state table (Kafka's BrokerHeartbeatManager and processBrokerHeartbeat).

The session state (last contact, last reported metadata offset, the offset a controlled shutdown must reach) is
the controller's own memory, not metadata: a restarted controller starts every registered broker's session
afresh, as Kafka's does on activation.  Fenced / unfenced / in controlled shutdown come from the image.

State table (current state, request → next state):
  FENCED:    WantShutDown → SHUTDOWN_NOW; !WantFence and caught up to its own registration → UNFENCED; else FENCED
  UNFENCED:  WantFence and WantShutDown → SHUTDOWN_NOW; WantFence → FENCED; WantShutDown → CONTROLLED_SHUTDOWN
             when it leads a partition, else SHUTDOWN_NOW; else UNFENCED
  CONTROLLED_SHUTDOWN: still leads → stays; once every active broker has applied the shutdown's records →
             SHUTDOWN_NOW
Records on a change: → UNFENCED: Fenced=-1, then leaders for leaderless partitions it may lead; → FENCED or
SHUTDOWN_NOW from unfenced: out of every ISR, then Fenced=1; → CONTROLLED_SHUTDOWN: InControlledShutdown=1,
then out of every ISR.  Offline log dirs (cumulative in every heartbeat) move leadership off the partitions in
the newly failed dirs and shrink the broker's LogDirs (kjbod.controller.directories); a dir id the broker never
registered answers LOG_DIR_NOT_FOUND and changes nothing.

Cordoned log dirs (KIP-1066, from metadata.version 4.3-IV0 as in Kafka): a broker that has caught up sends the
ids of its cordoned dirs in every heartbeat (v2's CordonedLogDirs; null before).  When they differ from its
registration's (or those are not known yet) a BrokerRegistrationChangeRecord v3 records them, so every
controller and broker knows them from the metadata log.  An id the broker never registered answers
LOG_DIR_NOT_FOUND and changes nothing, as OfflineLogDirs does here (Kafka records whatever was sent).  Below
4.3-IV0 the field is ignored, as Kafka's controller ignores it.  `fully_cordoned` names the brokers whose every
online dir is cordoned (Kafka's !hasUncordonedDirs): placement leaves them out and an explicit assignment naming
them is INELIGIBLE_REPLICA (kjbod.controller.replication_control).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kjbod.controller.directories import BrokerDirs, offline_dirs
from kjbod.controller.partition_change import elect_where_leaderless, leads_any, remove_from_isrs
from kjbod.controller.result import ControllerResult, ControllerSettings
from kjbod.metadata import BrokerRegistration, MetadataImage
from kjbod.metadata.features import cordons_supported
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationChangeRecord,
)

FENCED, UNFENCED, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW = "FENCED", "UNFENCED", "CONTROLLED_SHUTDOWN", "SHUTDOWN_NOW"
LONG_MAX = (1 << 63) - 1


@dataclass(slots=True)
class Session:
    last_contact: float
    metadata_offset: int = -1
    controlled_shutdown_offset: int | None = None


def state_of(reg: BrokerRegistration) -> str:
    if reg.fenced:
        return FENCED
    return CONTROLLED_SHUTDOWN if reg.in_controlled_shutdown else UNFENCED


def fence_records(image: MetadataImage, reg: BrokerRegistration, settings: ControllerSettings) -> list[Any]:
    return [*remove_from_isrs(image, reg.broker_id, unclean_default=settings.unclean_leader_election_enable,
                              node_id=settings.node_id, min_isr_default=settings.min_insync_replicas),
            BrokerRegistrationChangeRecord(broker_id=reg.broker_id, broker_epoch=reg.epoch, fenced=1)]


def cordon_records(reg: BrokerRegistration, reported: list[Any]) -> list[Any]:
    """The record that keeps a heartbeat's cordoned dirs when they changed (Kafka's handleDirectoriesCordoned):
    compared as sets, written sorted."""
    if reg.cordoned_dirs is not None and set(reg.cordoned_dirs) == set(reported):
        return []
    return [BrokerRegistrationChangeRecord(broker_id=reg.broker_id, broker_epoch=reg.epoch,
                                           cordoned_log_dirs=sorted(set(reported)))]


class BrokerHeartbeatManager:
    def __init__(self, settings: ControllerSettings) -> None:
        self.settings = settings
        self.sessions: dict[int, Session] = {}
        self.dirs = BrokerDirs()  # every dir id each broker registered: OfflineLogDirs may name no other
        self.local_registered = False  # the broker in this process has registered since this controller started

    def fully_cordoned(self, image: MetadataImage) -> frozenset[int]:
        """The registered brokers whose every online log dir is cordoned (none online counts as not)."""
        return frozenset(b.broker_id for b in image.brokers.values() if not b.has_uncordoned_dirs)

    @property
    def timeout_s(self) -> float:
        return self.settings.broker_session_timeout_ms / 1000

    def session(self, broker_id: int, now: float) -> Session:
        s = self.sessions.get(broker_id)
        if s is None:  # a broker registered before this controller started: its session starts now
            s = self.sessions[broker_id] = Session(last_contact=now)
        return s

    def remove(self, broker_id: int) -> None:
        self.sessions.pop(broker_id, None)

    def has_valid_session(self, reg: BrokerRegistration, now: float) -> bool:
        """Whether `reg`'s incarnation may still be alive.  The broker in this process registers once per
        process start: before it has, the registration in the log is a previous process's and certainly gone;
        after, it lives as long as this controller."""
        if reg.fenced:
            return False
        if reg.broker_id == self.settings.local_broker_id:
            return self.local_registered
        return self.session(reg.broker_id, now).last_contact + self.timeout_s >= now

    def lowest_active_offset(self, image: MetadataImage, now: float) -> int:
        offsets = [self.session(b.broker_id, now).metadata_offset for b in image.brokers.values() if b.active]
        return min(offsets) if offsets else LONG_MAX

    def stale_broker(self, image: MetadataImage, now: float) -> BrokerRegistration | None:
        """One unfenced broker whose session expired (the longest silent), or None."""
        stale = [(self.session(b.broker_id, now).last_contact, b.broker_id) for b in image.brokers.values()
                 if not b.fenced and b.broker_id != self.settings.local_broker_id
                 and self.session(b.broker_id, now).last_contact + self.timeout_s < now]
        return image.brokers[min(stale)[1]] if stale else None

    def fence_stale(self, image: MetadataImage, now: float) -> ControllerResult:
        reg = self.stale_broker(image, now)
        return ControllerResult(fence_records(image, reg, self.settings) if reg is not None else [], reg)

    # ------------------------------------------------------------------------------------------ heartbeat
    def heartbeat(self, image: MetadataImage, req: BrokerHeartbeatRequest, now: float,
                  next_offset: int) -> ControllerResult:
        reg = image.brokers.get(req.broker_id)
        if reg is None or reg.epoch != req.broker_epoch:
            return ControllerResult([], BrokerHeartbeatResponse(error_code=ErrorCode.STALE_BROKER_EPOCH))
        if req.offline_log_dirs and self.dirs.unknown(image, reg.broker_id, req.offline_log_dirs):
            return ControllerResult([], BrokerHeartbeatResponse(error_code=ErrorCode.LOG_DIR_NOT_FOUND))
        cordons = cordons_supported(image) and req.cordoned_log_dirs is not None
        if cordons and self.dirs.unknown(image, reg.broker_id, req.cordoned_log_dirs or []):
            return ControllerResult([], BrokerHeartbeatResponse(error_code=ErrorCode.LOG_DIR_NOT_FOUND))
        s = self.session(req.broker_id, now)
        s.last_contact = now
        s.metadata_offset = req.current_metadata_offset
        caught_up = req.current_metadata_offset >= reg.record_offset
        current = state_of(reg)
        nxt = self._next_state(image, reg, current, req, caught_up, s, now)
        records: list[Any] = []
        unclean = self.settings.unclean_leader_election_enable
        if current == FENCED and nxt == UNFENCED:
            records.append(BrokerRegistrationChangeRecord(broker_id=reg.broker_id, broker_epoch=reg.epoch, fenced=-1))
            records += elect_where_leaderless(image, reg.broker_id, unclean_default=unclean,
                                              node_id=self.settings.node_id,
                                              min_isr_default=self.settings.min_insync_replicas)
        elif current != FENCED and nxt in (FENCED, SHUTDOWN_NOW):
            records += fence_records(image, reg, self.settings)
        elif current == UNFENCED and nxt == CONTROLLED_SHUTDOWN:
            records.append(BrokerRegistrationChangeRecord(broker_id=reg.broker_id, broker_epoch=reg.epoch,
                                                          in_controlled_shutdown=1))
            records += remove_from_isrs(image, reg.broker_id, unclean_default=unclean,
                                        node_id=self.settings.node_id, min_isr_default=self.settings.min_insync_replicas)
            s.controlled_shutdown_offset = next_offset + len(records) - 1
        if req.offline_log_dirs:
            records += offline_dirs(image, reg.broker_id, reg.epoch, req.offline_log_dirs, unclean_default=unclean,
                                    node_id=self.settings.node_id, min_isr_default=self.settings.min_insync_replicas)
        if cordons:
            records += cordon_records(reg, req.cordoned_log_dirs or [])
        return ControllerResult(records, BrokerHeartbeatResponse(
            error_code=0, is_caught_up=caught_up, is_fenced=nxt in (FENCED, SHUTDOWN_NOW),
            should_shut_down=nxt == SHUTDOWN_NOW))

    def _next_state(self, image: MetadataImage, reg: BrokerRegistration, current: str,
                    req: BrokerHeartbeatRequest, caught_up: bool, s: Session, now: float) -> str:
        if current == FENCED:
            if req.want_shut_down:
                return SHUTDOWN_NOW
            return UNFENCED if not req.want_fence and caught_up else FENCED
        if current == UNFENCED:
            if req.want_fence:
                return SHUTDOWN_NOW if req.want_shut_down else FENCED
            if req.want_shut_down:
                return CONTROLLED_SHUTDOWN if leads_any(image, reg.broker_id) else SHUTDOWN_NOW
            return UNFENCED
        if leads_any(image, reg.broker_id):
            return CONTROLLED_SHUTDOWN
        done_at = s.controlled_shutdown_offset if s.controlled_shutdown_offset is not None else -1
        return SHUTDOWN_NOW if done_at <= self.lowest_active_offset(image, now) else CONTROLLED_SHUTDOWN
