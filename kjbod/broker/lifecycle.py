"""The broker's lifecycle with the controller: registration, heartbeats, fencing, controlled shutdown (Kafka's
BrokerLifecycleManager).

Strategy: one asyncio task owns every piece of state and does one communication at a time (a registration until
one succeeds, then heartbeats), so nothing here needs a lock.  Other code only calls the small methods that record
an intent and wake the task (`set_ready_to_unfence`, `propagate_directory_failure`, `begin_controlled_shutdown`);
a wake that comes while a request is in flight makes the next communication immediate.

States and transitions (Kafka's BrokerState values, driven by the heartbeat answers):

    STARTING       registered or not; heartbeats say WantFence until `set_ready_to_unfence()`, every 10 ms
                   --IsCaughtUp-->  RECOVERY  (`initial_catch_up` completes)
    RECOVERY       --!IsFenced-->   RUNNING   (`initial_unfence` completes)
    RUNNING        heartbeats every `broker.heartbeat.interval.ms`
                   --begin_controlled_shutdown()-->  PENDING_CONTROLLED_SHUTDOWN (an immediate heartbeat)
    PENDING_CONTROLLED_SHUTDOWN  WantShutDown=true until --ShouldShutDown--> SHUTTING_DOWN
    SHUTTING_DOWN  the task ends (`controlled_shutdown` completes)

* Registration (BrokerRegistration v0-4, the highest the controller serves): node id, cluster id, this process's
  incarnation id, listeners, features (v0-3 leave out features whose minimum is 0, as Kafka does since
  KAFKA-17011), rack, the online log dir ids sorted (v2+), the previous broker epoch (v3+).  Any error, a lost
  controller or a timed-out request is retried after Kafka's backoff (100 ms doubling up to
  `broker.session.timeout.ms`, jitter 2%); DUPLICATE_BROKER_REGISTRATION (the controller still holds a live
  session of an earlier incarnation) resolves itself that way once the session expires.  No success within
  `initial.broker.registration.timeout.ms` shuts the broker down.
* Heartbeats v2+ carry the ids of the cordoned log dirs (KIP-1066's CordonedLogDirs, as Kafka 4.3's broker
  sends them): null until the broker has caught up (RECOVERY), then the current set in every heartbeat
  (`cordoned_dirs`, set by the broker, answers None below metadata.version 4.3-IV0, when nothing is sent;
  `cordon_changed` sends a heartbeat at once).  Registration carries none (Kafka's has no such field).
* Heartbeats carry the broker epoch, `CurrentMetadataOffset` (the last metadata offset this broker applied, from
  the follower), WantFence, WantShutDown and every log dir that failed since start (OfflineLogDirs, cumulative).
  An answer of STALE_BROKER_EPOCH means the controller no longer knows this registration (it was unregistered,
  or the controller lost its log): the broker registers again, with the same incarnation, after the backoff.
  Kafka's own broker retries the heartbeat instead and re-registers when its metadata shows the registration
  gone; kjbod re-registers on the error itself, which needs no metadata path and comes to the same end.  Any
  other error is retried after the backoff.  Each request may take `broker.session.timeout.ms / 2` (Kafka's
  KAFKA-14392 bound), retries against an unreachable controller included.
* A failed log dir (`propagate_directory_failure`) is sent in an immediate extra heartbeat; if no heartbeat that
  carried it has been answered within `log.dir.failure.timeout.ms` and the broker leads a partition in that dir
  (checked again each timeout while it leads none), the broker shuts down, as KIP-858 says
  ("couldn't communicate offline log dir ... with controllers").  kjbod's controller answers LOG_DIR_NOT_FOUND
  for a dir it never knew (KIP-858); the broker then stops sending the dirs that need no report (one that failed
  before this process registered it, or one already reported) and goes on (`_quieten_offline_dirs`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog

from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.controller_channel import ControllerChannel
from kjbod.net.correlator import PerVersion
from kjbod.net.errors import ClientError
from kjbod.net.tasks import cancel_and_wait
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.broker_heartbeat_request import BrokerHeartbeatRequest
from kjbod.protocol.generated.broker_registration_request import BrokerRegistrationRequest, Feature, Listener

__all__ = ["BrokerLifecycleManager", "BrokerState", "LifecycleConfig"]

log = structlog.get_logger("kjbod.broker.lifecycle")

BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63
STARTING_HEARTBEAT_INTERVAL = 0.010  # Kafka: 10 ms while catching up, so a broker with nothing to recover starts fast
FIRST_SHUTDOWN_HEARTBEAT_INTERVAL = 0.050  # Kafka: 50 ms after the first "not yet" to a controlled shutdown


class BrokerState(enum.IntEnum):
    """Kafka's BrokerState values (metadata/.../BrokerState.java)."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


@dataclass(frozen=True)
class LifecycleConfig:
    """What registration and heartbeats need from the broker's config (times in seconds)."""

    node_id: int
    cluster_id: str
    listeners: Sequence[Listener]
    log_dirs: Sequence[uuid.UUID]
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    rack: str | None = None
    previous_broker_epoch: int = -1
    heartbeat_interval: float = 2.0  # broker.heartbeat.interval.ms
    session_timeout: float = 9.0  # broker.session.timeout.ms
    initial_registration_timeout: float = 60.0  # initial.broker.registration.timeout.ms
    log_dir_failure_timeout: float = 30.0  # log.dir.failure.timeout.ms


class BrokerLifecycleManager:
    """Registers this broker and keeps its session with the controller alive; see the module docstring."""

    def __init__(self, config: LifecycleConfig, channel: ControllerChannel, metadata_offset: Callable[[], int],
                 shutdown_hook: Callable[[str], None], *, incarnation_id: uuid.UUID | None = None) -> None:
        self.config = config
        self.channel = channel
        self.metadata_offset = metadata_offset
        # The ids of the cordoned log dirs now (KIP-1066), carried by every heartbeat once caught up; None when
        # they are not to be sent (metadata.version below 4.3-IV0).  The broker sets it (its dynamic
        # cordoned.log.dirs can change at any time).
        self.cordoned_dirs: Callable[[], list[uuid.UUID] | None] = lambda: None
        # Called once with the reason when the broker must stop (registration timeout, unreported dir failure).
        self.shutdown_hook = shutdown_hook
        self.incarnation_id = incarnation_id or uuid.uuid4()
        self.state = BrokerState.NOT_RUNNING
        self.broker_epoch = -1
        self.registered = False
        loop = asyncio.get_running_loop()
        self.initial_catch_up: asyncio.Future[None] = loop.create_future()
        self.initial_unfence: asyncio.Future[None] = loop.create_future()
        self.controlled_shutdown: asyncio.Future[None] = loop.create_future()
        self._ready_to_unfence = False
        self._offline_dirs: dict[uuid.UUID, bool] = {}  # failed dir -> a heartbeat carrying it was answered
        self._registered_dirs: set[uuid.UUID] = set()  # every dir id a registration of this process carried
        self._quiet_dirs: set[uuid.UUID] = set()  # failed dirs left out of heartbeats (see _quieten_offline_dirs)
        self._got_shutdown_answer = False
        self._ever_registered = False
        self._backoff = ExponentialBackoff(0.1, config.session_timeout, jitter=0.02)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._timers: list[asyncio.TimerHandle] = []
        self._shutdown_reason: str | None = None

    # ------------------------------------------------------------------------------------------ control

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the lifecycle manager is already started")
        self.state = BrokerState.STARTING
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(self.config.initial_registration_timeout, self._registration_timeout))
        self._task = loop.create_task(self._run(), name=f"broker-{self.config.node_id}-lifecycle")
        log.info("starting", broker=self.config.node_id, incarnation=str(self.incarnation_id),
                 cluster=self.config.cluster_id)

    def set_ready_to_unfence(self) -> asyncio.Future[None]:
        """The broker has applied the metadata and recovered its logs: heartbeats stop asking to stay fenced."""
        self._ready_to_unfence = True
        self._wake.set()
        return self.initial_unfence

    def cordon_changed(self) -> None:
        """The cordoned dirs changed: the next heartbeat goes now, carrying them."""
        if self.registered:
            self._wake.set()

    def propagate_directory_failure(self, directory_id: uuid.UUID,
                                    leads_in: Callable[[], bool] = lambda: True) -> None:
        """A log dir failed: report it at once, and shut down if that cannot be done in time while `leads_in()`
        (this broker leads a partition in that dir) holds (KIP-858)."""
        if directory_id in self._offline_dirs:
            return
        self._offline_dirs[directory_id] = False
        if self.registered:
            self._wake.set()
        self._arm_offline_dir_deadline(directory_id, leads_in)

    def _arm_offline_dir_deadline(self, directory_id: uuid.UUID, leads_in: Callable[[], bool]) -> None:
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(self.config.log_dir_failure_timeout,
                                            self._offline_dir_deadline, directory_id, leads_in))

    def resend_registration(self) -> None:
        """Register again at once (same incarnation): the broker's metadata shows its registration gone or
        changed, as Kafka's broker does when its metadata publisher sees that."""
        self.registered = False
        self._wake.set()

    def begin_controlled_shutdown(self) -> asyncio.Future[None]:
        """Ask the controller to move leadership away, then shut down (SIGTERM).  Returns `controlled_shutdown`."""
        if self.state == BrokerState.RUNNING:
            log.info("beginning controlled shutdown", broker=self.config.node_id)
            self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
            self._wake.set()
        elif self.state != BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            log.info("no controlled shutdown", broker=self.config.node_id, state=self.state.name)
            self._begin_shutdown()
        return self.controlled_shutdown

    async def close(self) -> None:
        """Stops communicating (no request is sent after this returns)."""
        self._begin_shutdown()
        task, self._task = self._task, None
        await cancel_and_wait(task)

    @property
    def offline_dirs(self) -> list[uuid.UUID]:
        return list(self._offline_dirs)

    # ------------------------------------------------------------------------------------------ the task

    async def _run(self) -> None:
        try:
            await self._communicate()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug, not the controller's doing: say so, and do not run on unregistered
            log.exception("the lifecycle manager failed", broker=self.config.node_id)
            self._fatal(f"shutting down: the lifecycle manager failed: {type(e).__name__}: {e}")

    async def _communicate(self) -> None:
        delay = 0.0
        while self.state != BrokerState.SHUTTING_DOWN:
            if delay > 0:
                try:
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            self._wake.clear()
            if self.state == BrokerState.SHUTTING_DOWN:
                break
            delay = await (self._heartbeat() if self.registered else self._register())

    def _after_failure(self) -> float:
        self._wake.clear()  # never go again at once after a failure, even if something woke us meanwhile
        return self._backoff.next()

    async def _register(self) -> float:
        c = self.config
        request = BrokerRegistrationRequest(
            broker_id=c.node_id, cluster_id=c.cluster_id, incarnation_id=self.incarnation_id,
            listeners=list(c.listeners),
            features=[Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in sorted(c.features.items())],
            rack=c.rack, log_dirs=sorted(d for d in c.log_dirs if d not in self._offline_dirs),
            previous_broker_epoch=c.previous_broker_epoch)
        try:
            response = await self.channel.send(PerVersion(partial(registration_at, request)), BROKER_REGISTRATION,
                                               timeout=c.session_timeout / 2)
        except ClientError as e:
            log.info("registration failed", broker=c.node_id, error=str(e))
            return self._after_failure()
        if response.error_code:
            log.info("registration refused", broker=c.node_id, error=_name(response.error_code))
            return self._after_failure()
        self._backoff.reset()
        self.broker_epoch = response.broker_epoch
        self._registered_dirs.update(request.log_dirs)
        self.registered = self._ever_registered = True
        log.info("registered", broker=c.node_id, epoch=self.broker_epoch)
        return 0.0  # the first heartbeat right away

    async def _heartbeat(self) -> float:
        c = self.config
        sent_dirs = [d for d in self._offline_dirs if d not in self._quiet_dirs]
        request = BrokerHeartbeatRequest(
            broker_id=c.node_id, broker_epoch=self.broker_epoch, current_metadata_offset=self.metadata_offset(),
            want_fence=not self._ready_to_unfence,
            want_shut_down=self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN, offline_log_dirs=sent_dirs,
            cordoned_log_dirs=self._cordons_to_send())
        try:
            sent = PerVersion(partial(heartbeat_at, request))
            response = await self.channel.send(sent, BROKER_HEARTBEAT, timeout=c.session_timeout / 2)
        except ClientError as e:
            log.info("heartbeat failed", broker=c.node_id, error=str(e))
            return self._after_failure()
        if response.error_code == ErrorCode.LOG_DIR_NOT_FOUND and self._quieten_offline_dirs(sent_dirs):
            return 0.0  # at once, without the dirs the controller never knew
        if response.error_code == ErrorCode.STALE_BROKER_EPOCH:
            log.warning("the controller does not know this registration: registering again",
                        broker=c.node_id, epoch=self.broker_epoch)
            self.registered = False
            return self._after_failure()
        if response.error_code:
            log.info("heartbeat refused", broker=c.node_id, error=_name(response.error_code))
            return self._after_failure()
        self._backoff.reset()
        if sent.version is not None and sent.version >= 1:  # v0 cannot carry them: not reported
            for d in sent_dirs:
                self._offline_dirs[d] = True
        return self._on_heartbeat(response)

    def _cordons_to_send(self) -> list[uuid.UUID] | None:
        """CordonedLogDirs for the next heartbeat: None before the broker has caught up; only dirs a registration
        of this process carried (the controller answers LOG_DIR_NOT_FOUND for any other, and a dir that was not
        online at registration takes no replicas here anyway)."""
        if not self.initial_catch_up.done():
            return None
        cordons = self.cordoned_dirs()
        return None if cordons is None else [d for d in cordons if d in self._registered_dirs]

    def _quieten_offline_dirs(self, sent: list[uuid.UUID]) -> bool:
        """LOG_DIR_NOT_FOUND: the controller does not know one of the failed dirs sent (kjbod's controller checks
        them, KIP-858; Kafka's ignores unknown ones).  Dirs no registration of this process carried (they failed
        before it registered them: the controller placed nothing there that it does not already see) and dirs a
        heartbeat already reported (their records are in the metadata log) need no more reporting: they leave
        the heartbeats and count as reported.  False when no sent dir is of either kind."""
        quiet = [d for d in sent if d not in self._registered_dirs or self._offline_dirs.get(d)]
        if not quiet:
            return False
        for d in quiet:
            log.warning("the controller does not know a failed log dir: no longer sending it",
                        broker=self.config.node_id, directory_id=str(d))
            self._offline_dirs[d] = True
            self._quiet_dirs.add(d)
        return True

    def _on_heartbeat(self, response: Any) -> float:
        state = self.state
        if state == BrokerState.STARTING:
            if response.is_caught_up:
                log.info("caught up with the metadata: RECOVERY", broker=self.config.node_id)
                self.state = BrokerState.RECOVERY
                _complete(self.initial_catch_up)
            return STARTING_HEARTBEAT_INTERVAL
        if state == BrokerState.RECOVERY:
            if not response.is_fenced:
                log.info("unfenced: RUNNING", broker=self.config.node_id)
                self.state = BrokerState.RUNNING
                _complete(self.initial_unfence)
            return self.config.heartbeat_interval
        if state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if response.should_shut_down:
                log.info("the controller lets this broker shut down", broker=self.config.node_id)
                self._begin_shutdown()
                return 0.0
            first = not self._got_shutdown_answer
            self._got_shutdown_answer = True
            return FIRST_SHUTDOWN_HEARTBEAT_INTERVAL if first else self.config.heartbeat_interval
        return self.config.heartbeat_interval

    # ------------------------------------------------------------------------------------------ shutting down

    def _begin_shutdown(self) -> None:
        if self.state == BrokerState.SHUTTING_DOWN:
            return
        log.info("shutting down", broker=self.config.node_id, state=self.state.name)
        self.state = BrokerState.SHUTTING_DOWN
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        _complete(self.controlled_shutdown)
        for future in (self.initial_catch_up, self.initial_unfence):
            if not future.done():
                future.cancel()
        self._wake.set()

    def _fatal(self, reason: str) -> None:
        log.error(reason, broker=self.config.node_id)
        if self._shutdown_reason is None:
            self._shutdown_reason = reason
            self._begin_shutdown()
            self.shutdown_hook(reason)

    def _registration_timeout(self) -> None:
        if not self._ever_registered and self.state != BrokerState.SHUTTING_DOWN:
            self._fatal("shutting down: could not register with the controller within "
                        f"{self.config.initial_registration_timeout:g}s")

    def _offline_dir_deadline(self, directory_id: uuid.UUID, leads_in: Callable[[], bool]) -> None:
        if self._offline_dirs.get(directory_id, True) or self.state == BrokerState.SHUTTING_DOWN:
            return
        if not leads_in():
            # Nothing this broker leads is lost with it: no need to stop yet.  Checked again a timeout later
            # (the controller, not knowing, may make this broker the leader of a partition in it meanwhile).
            log.warning("offline log dir not reported yet", broker=self.config.node_id, dir=str(directory_id),
                        effect="still trying; this broker leads no partition in it, so it does not shut down")
            self._arm_offline_dir_deadline(directory_id, leads_in)
            return
        self._fatal(f"shutting down: could not tell the controller that log dir {directory_id} is offline "
                    f"within {self.config.log_dir_failure_timeout:g}s")


def registration_at(request: BrokerRegistrationRequest, version: int) -> BrokerRegistrationRequest:
    """The registration as `version` carries it: LogDirs from v2, PreviousBrokerEpoch from v3, and v0-3 leave
    out the features whose minimum is 0 (KAFKA-17011: those versions had no way to say "supports nothing")."""
    if version >= 4:
        return request
    return dataclasses.replace(
        request, features=[f for f in request.features if f.min_supported_version != 0],
        log_dirs=request.log_dirs if version >= 2 else [],
        previous_broker_epoch=request.previous_broker_epoch if version >= 3 else -1)


def heartbeat_at(request: BrokerHeartbeatRequest, version: int) -> BrokerHeartbeatRequest:
    """The heartbeat as `version` carries it: OfflineLogDirs from v1, CordonedLogDirs from v2."""
    if version >= 2:
        return request
    return dataclasses.replace(request, offline_log_dirs=request.offline_log_dirs if version >= 1 else [],
                               cordoned_log_dirs=None)


def _complete(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
