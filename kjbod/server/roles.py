"""Building the roles a process runs, as `process.roles` says.

The broker role (kjbod.broker.node) and the controller role (kjbod.controller) do not import each other; this
module, above both, joins them: it gives the controller its settings from the server config (the controller
reads `broker.session.timeout.ms` and `broker.heartbeat.interval.ms` from its own config, as Kafka's does) and
the broker's config tables as its config policy.

* broker,controller: the broker node with its controller in the same process (`build_combined_node`); the
  broker reaches the controller in process, and the controller listener serves other brokers.
* controller: `ControllerNode`, the controller alone on its metadata log, serving only controller listeners
  (registrations, heartbeats, topics, configs, producer id blocks); no data log dirs are opened.
* broker: `RemoteBrokerNode` (kjbod.broker.remote), the broker node with its controller in another process,
  reached over the controller listener of `controller.quorum.voters` / `controller.quorum.bootstrap.servers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from typing import Any

import structlog

from kjbod.broker import broker_config as bc
from kjbod.broker import topic_config
from kjbod.broker.node import BrokerNode, NodeEndpoint, registered_controllers
from kjbod.broker.remote import RemoteBrokerNode
from kjbod.broker.router import Router
from kjbod.controller import ControllerSettings, PolicyError, QuorumController
from kjbod.controller.metadata_fetch import MetadataFetchService
from kjbod.controller.raft_driver import RaftDriver
from kjbod.controller.registration import ControllerRegistrationManager
from kjbod.metadata import EMPTY_IMAGE, MetadataDelta, MetadataImage
from kjbod.metadata import features as ft
from kjbod.net.controller_channel import (
    ControllerChannel,
    InProcessControllerChannel,
    SocketControllerChannel,
    controller_addresses,
)
from kjbod.net.sasl import client_credentials_of
from kjbod.net.tls import client_context_of
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ControllerRegistrationRequest
from kjbod.protocol.generated.controller_registration_request import Feature as RegFeature
from kjbod.protocol.generated.controller_registration_request import Listener as RegListener
from kjbod.raft.quorum import RaftConfig
from kjbod.server import config as server_config
from kjbod.server.config import ConfigError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.meta import read_meta_properties
from kjbod.storage.metadata_log import MetadataLog, metadata_log_options

log = structlog.get_logger("kjbod.roles")

SNAPSHOT_BYTES = 20 << 20  # metadata.log.max.record.bytes.between.snapshots, Kafka's default


class BrokerConfigPolicy:
    """The controller's view of which configs exist: the broker's tables (kjbod.broker.topic_config and
    broker_config), their errors turned into the controller's PolicyError."""

    def __init__(self, node_id: int | None, config: Any = None) -> None:
        self.node_id = node_id  # the broker whose configs this process may change; None: any broker
        self.config = config  # this process's ServerConfig: the bounds and defaults of group configs

    def validate_topic(self, overrides: dict[str, str]) -> None:
        try:
            topic_config.validate(dict[str, str | None](overrides))
        except topic_config.TopicConfigError as e:
            raise PolicyError(ErrorCode.INVALID_CONFIG, str(e)) from None

    def plan_topic(self, overrides: dict[str, str], changes: list[tuple[str, int, str | None]], *,
                   replace: bool) -> dict[str, str]:
        try:
            return bc.plan_topic_changes(overrides, changes, replace=replace)
        except bc.ConfigProblem as e:
            raise PolicyError(e.code, e.message) from None

    def plan_broker(self, current: dict[str, str], resource_name: str, changes: list[tuple[str, int, str | None]],
                    *, replace: bool) -> dict[str, str | None]:
        owner = self.node_id
        if owner is None:  # a controller alone: the broker that forwarded the request has checked the id
            owner = int(resource_name) if resource_name.isdigit() else -1
        dynamic = bc.DynamicBrokerConfigs(owner)
        target = dynamic.target(resource_name)
        if target is not None:
            target.update(current)
        try:
            return bc.plan_broker_changes(dynamic, resource_name, changes, replace=replace,
                                          check_static=check_as_static)
        except bc.ConfigProblem as e:
            raise PolicyError(e.code, e.message) from None

    def plan_group(self, overrides: dict[str, str], changes: list[tuple[str, int, str | None]], *,
                   replace: bool) -> dict[str, str]:
        config = self.config if self.config is not None else _default_config()
        try:
            return bc.plan_group_changes(overrides, changes, replace=replace, bounds=group_bounds(config),
                                         defaults=bc.group_defaults(config))
        except bc.ConfigProblem as e:
            raise PolicyError(e.code, e.message) from None


def group_bounds(config: Any) -> dict[str, int]:
    """The broker keys bounding a group's configs (Kafka's GroupConfig checks), by name."""
    return {"group.consumer.min.session.timeout.ms": config.group_consumer_min_session_timeout_ms,
            "group.consumer.max.session.timeout.ms": config.group_consumer_max_session_timeout_ms,
            "group.consumer.min.heartbeat.interval.ms": config.group_consumer_min_heartbeat_interval_ms,
            "group.consumer.max.heartbeat.interval.ms": config.group_consumer_max_heartbeat_interval_ms,
            "group.share.min.session.timeout.ms": config.group_share_min_session_timeout_ms,
            "group.share.max.session.timeout.ms": config.group_share_max_session_timeout_ms,
            "group.share.min.heartbeat.interval.ms": config.group_share_min_heartbeat_interval_ms,
            "group.share.max.heartbeat.interval.ms": config.group_share_max_heartbeat_interval_ms,
            "group.share.min.record.lock.duration.ms": config.group_share_min_record_lock_duration_ms,
            "group.share.max.record.lock.duration.ms": config.group_share_max_record_lock_duration_ms,
            "group.share.min.delivery.count.limit": config.group_share_min_delivery_count_limit,
            "group.share.max.delivery.count.limit": config.group_share_max_delivery_count_limit,
            "group.share.min.partition.max.record.locks": config.group_share_min_partition_max_record_locks,
            "group.share.max.partition.max.record.locks": config.group_share_max_partition_max_record_locks,
            "group.streams.min.session.timeout.ms": config.group_streams_min_session_timeout_ms,
            "group.streams.max.session.timeout.ms": config.group_streams_max_session_timeout_ms,
            "group.streams.min.heartbeat.interval.ms": config.group_streams_min_heartbeat_interval_ms,
            "group.streams.max.heartbeat.interval.ms": config.group_streams_max_heartbeat_interval_ms,
            "group.streams.max.standby.replicas": config.group_streams_max_standby_replicas}


def _default_config() -> Any:
    """The group.consumer.* keys at their defaults (a policy built without a config: tests)."""
    from types import SimpleNamespace

    from kjbod.server.config import KEYS

    return SimpleNamespace(**{d.attr: d.default for k, d in KEYS.items() if k.startswith("group.consumer.")})


def check_as_static(key: str, raw: str) -> None:
    """A dynamic broker default of a topic config is checked exactly as the same key in server.properties."""
    try:
        server_config.KEYS[key].conv(key, raw)
    except ConfigError as e:
        raise bc.ConfigProblem(bc.BAD_BROKER_VALUE, str(e)) from None


def controller_settings(config: Any, cluster_id: str, local_broker_id: int | None) -> ControllerSettings:
    return ControllerSettings(
        cluster_id=cluster_id, num_partitions=int(getattr(config, "num_partitions", 1)),
        default_replication_factor=int(getattr(config, "default_replication_factor", 1)),
        broker_session_timeout_ms=int(getattr(config, "broker_session_timeout_ms", 9000)),
        broker_heartbeat_interval_ms=int(getattr(config, "broker_heartbeat_interval_ms", 2000)),
        max_bytes_between_snapshots=int(getattr(config, "metadata_log_max_record_bytes_between_snapshots",
                                                SNAPSHOT_BYTES)),
        max_snapshot_interval_ms=int(getattr(config, "metadata_log_max_snapshot_interval_ms", 3_600_000)),
        max_idle_interval_ms=int(getattr(config, "metadata_max_idle_interval_ms", 500)),
        delete_topic_enable=bool(getattr(config, "delete_topic_enable", True)),
        unclean_leader_election_enable=bool(getattr(config, "unclean_leader_election_enable", False)),
        min_insync_replicas=int(getattr(config, "min_insync_replicas", 1)),
        auto_leader_rebalance_enable=bool(getattr(config, "auto_leader_rebalance_enable", True)),
        leader_imbalance_per_broker_percentage=int(getattr(config, "leader_imbalance_per_broker_percentage", 10)),
        leader_imbalance_check_interval_seconds=int(getattr(config, "leader_imbalance_check_interval_seconds", 300)),
        node_id=getattr(config, "node_id", None), local_broker_id=local_broker_id,
        delegation_token_secret_key=str(getattr(config, "delegation_token_secret_key", "")),
        delegation_token_max_lifetime_ms=int(getattr(config, "delegation_token_max_lifetime_ms", 604800000)),
        delegation_token_expiry_time_ms=int(getattr(config, "delegation_token_expiry_time_ms", 86400000)),
        delegation_token_expiry_check_interval_ms=int(getattr(config, "delegation_token_expiry_check_interval_ms",
                                                              3600000)))


def controller_endpoint(config: Any) -> tuple[str, int] | None:
    """The advertised (host, port) of this process's first controller listener."""
    advertised = {ln.name: ln for ln in getattr(config, "advertised_listeners", None) or ()}
    for ln in config.listeners:
        if ln.name in (getattr(config, "controller_listener_names", ()) or ()):
            ln = advertised.get(ln.name, ln)
            return (ln.host, ln.port)
    return None


SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
CONTROLLER_REGISTRATION = 70  # ControllerRegistrationRequest.API_KEY


def controller_registration(config: Any, incarnation_id: uuid.UUID) -> ControllerRegistrationRequest:
    """What this controller registers (KIP-919): its controller listeners as advertised, and the feature ranges it
    runs (kraft.version included, as Kafka's controller lists every feature it knows)."""
    names = tuple(getattr(config, "controller_listener_names", ()) or ())
    advertised = {ln.name: ln for ln in getattr(config, "advertised_listeners", None) or ()}
    listeners = [advertised.get(ln.name, ln) for ln in config.listeners if ln.name in names]
    return ControllerRegistrationRequest(
        controller_id=config.node_id, incarnation_id=incarnation_id, zk_migration_ready=False,
        listeners=[RegListener(name=ln.name, host=ln.host, port=ln.port,
                               security_protocol=SECURITY_PROTOCOL_IDS.get(ln.security_protocol, 0))
                   for ln in listeners],
        features=[RegFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                  for n, (lo, hi) in sorted(ft.ADVERTISED.items())])


def attach_registration(controller: QuorumController, config: Any, channel: ControllerChannel,
                        caught_up: Any = None) -> ControllerRegistrationManager:
    """Has `controller` register itself with the active controller over `channel`."""
    async def send(request: ControllerRegistrationRequest) -> Any:
        return await channel.send(request, CONTROLLER_REGISTRATION, 0)

    manager = ControllerRegistrationManager(controller_registration(config, uuid.uuid4()), send,
                                            caught_up=caught_up or (lambda: True))
    controller.attach_registration(manager, channel.close)
    return manager


def in_process_registration(controller: QuorumController, config: Any) -> ControllerRegistrationManager:
    """A single controller (alone or beside a broker) registers with itself, through the codec as on a socket."""
    return attach_registration(controller, config, InProcessControllerChannel(
        controller.handle_request, request_timeout=int(getattr(config, "request_timeout_ms", 30000)) / 1000,
        client_id=f"kjbod-controller-{config.node_id}-registration"))


def quorum_voters(config: Any) -> dict[int, tuple[str, int]]:
    """`controller.quorum.voters` as {node id: (host, port)} (the config parser has checked each entry)."""
    out: dict[int, tuple[str, int]] = {}
    for item in getattr(config, "controller_quorum_voters", ()) or ():
        node, _, address = item.strip().partition("@")
        host, _, port = address.rpartition(":")
        out[int(node)] = (host.strip("[]"), int(port))
    return out


def bootstrap_addresses(config: Any) -> list[tuple[str, int]]:
    """`controller.quorum.bootstrap.servers` as (host, port) pairs (the config parser has checked each entry)."""
    out: list[tuple[str, int]] = []
    for item in getattr(config, "controller_quorum_bootstrap_servers", ()) or ():
        host, _, port = item.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


def raft_config(config: Any) -> RaftConfig:
    """The controller.quorum.* timings of a voter (Kafka's defaults when a key is not set)."""
    d = RaftConfig()
    return RaftConfig(
        election_timeout_ms=int(getattr(config, "controller_quorum_election_timeout_ms", d.election_timeout_ms)),
        election_backoff_max_ms=int(getattr(config, "controller_quorum_election_backoff_max_ms",
                                            d.election_backoff_max_ms)),
        fetch_timeout_ms=int(getattr(config, "controller_quorum_fetch_timeout_ms", d.fetch_timeout_ms)),
        request_timeout_ms=int(getattr(config, "controller_quorum_request_timeout_ms", d.request_timeout_ms)),
        retry_backoff_ms=int(getattr(config, "controller_quorum_retry_backoff_ms", d.retry_backoff_ms)))


def metadata_fetch_service(config: Any, metadata_log: MetadataLog, cluster_id: str) -> MetadataFetchService:
    """What the controller listener answers Fetch and FetchSnapshot of the metadata log with."""
    return MetadataFetchService(metadata_log, cluster_id=cluster_id, node_id=config.node_id,
                                endpoint=controller_endpoint(config))


def _combined_controller(node: BrokerNode, metadata_log: Any) -> QuorumController:
    settings = controller_settings(node.config, node.cluster_id, node.node_id)
    node.metadata_fetch = metadata_fetch_service(node.config, metadata_log, node.cluster_id)
    controller = QuorumController(settings, metadata_log, BrokerConfigPolicy(node.node_id, node.config),
                                  config_aliases=dict(bc.ALIASES))
    in_process_registration(controller, node.config)
    return controller


def build_combined_node(config: Any) -> BrokerNode:
    """process.roles=broker,controller: the broker node with its controller in the same process."""
    return BrokerNode(config, _combined_controller)


class ControllerNode:
    """process.roles=controller: the controller on its metadata log, behind the controller listeners."""

    authorizer: Any = None  # set by kjbod.server.app when authorizer.class.name is set

    def __init__(self, config: Any) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.cluster_id = ""
        self.metadata: MetadataImage = EMPTY_IMAGE
        self.controller: QuorumController | None = None
        self.metadata_log: MetadataLog | None = None
        self.metadata_fetch: MetadataFetchService | None = None
        self.raft: RaftDriver | None = None  # with several controller.quorum.voters: this voter of the quorum
        self._loaded_target: int | None = None  # the high watermark the initial load must reach (metadata_loaded)
        self.handler = Router(self)
        self.shutdown_requested = asyncio.Event()
        self.exit_code = 0

    @property
    def dynamic_configs(self) -> bc.DynamicBrokerConfigs:
        return bc.DynamicBrokerConfigs.from_image(self.node_id, self.metadata)

    def cluster_nodes(self, listener_name: str, *, controllers: bool) -> list[NodeEndpoint]:
        """DescribeCluster for controllers (KIP-919): the controllers registered in the metadata with a listener of
        that name, as Kafka's controller answers (a controller not registered yet is not listed)."""
        if not controllers:
            return []
        return registered_controllers(self.metadata, listener_name)

    @property
    def active_controller_id(self) -> int:
        """The controller id DescribeCluster names: the quorum's leader (-1 while none is known), or this one."""
        return self.raft.leader_id if self.raft is not None else self.node_id

    async def controller_request(self, body: Any, version: int) -> Any:
        assert self.controller is not None
        return await self.controller.handle_request(body.API_KEY, version, body)

    def controller_call(self, body: Any, version: int) -> Any:
        """The response, or an awaitable of it (see BrokerNode.controller_call)."""
        assert self.controller is not None
        fut = self.controller.request(body.API_KEY, version, body)
        return fut.result() if fut.done() else fut

    async def start(self) -> None:
        meta_dir = os.path.abspath(self.config.metadata_log_dir or self.config.log_dirs[0])
        meta = read_meta_properties(LogDirIO(meta_dir))
        if meta is None:
            raise ConfigError(f"{meta_dir} is not formatted: run kjbod format -c <config> --cluster-id <id> first")
        self.cluster_id = meta.cluster_id or ""
        voters = quorum_voters(self.config)
        if len(voters) > 1:
            await self._start_voter(meta_dir, voters)
            return
        if not voters:
            # no controller.quorum.voters: a KIP-853 quorum whose voters are in the metadata log (kraft.version 1)
            await self._start_voter(meta_dir, {}, dynamic=True)
            return
        self.metadata_log = MetadataLog(meta_dir, **metadata_log_options(self.config))
        self.metadata_fetch = metadata_fetch_service(self.config, self.metadata_log, self.cluster_id)
        settings = controller_settings(self.config, self.cluster_id, None)
        self.controller = QuorumController(settings, self.metadata_log, BrokerConfigPolicy(None, self.config),
                                           config_aliases=dict(bc.ALIASES))
        self.metadata = self.controller.load()
        self.controller.add_listener(self._publish)
        in_process_registration(self.controller, self.config)
        self.controller.start()
        log.info("controller_started", node_id=self.node_id, cluster_id=self.cluster_id,
                 topics=len(self.metadata.topics_by_id), brokers=len(self.metadata.brokers))

    def metadata_loaded(self) -> bool:
        """Kafka's initial load, for the authorizer: a single controller replayed its whole log at start; a voter
        of a quorum has replayed up to the high watermark it saw once it first knew the quorum's leader."""
        raft, controller = self.raft, self.controller
        if raft is None or controller is None:
            return True
        if self._loaded_target is None:
            if raft.leader_id is None or raft.leader_id < 0:
                return False
            self._loaded_target = raft.high_watermark
        return bool(controller.applied_end >= self._loaded_target)

    async def _start_voter(self, meta_dir: str, voters: dict[int, tuple[str, int]], *, dynamic: bool = False
                           ) -> None:
        """One voter of a multi-controller KRaft quorum (kjbod.controller.raft_driver): the controller is
        active only while this node leads, and its image follows the committed log. `dynamic`: the voters are
        the log's (kraft.version 1); a controller that is not one of them observes, found the leader through
        controller.quorum.bootstrap.servers."""
        self.metadata_log = MetadataLog(meta_dir, node_id=self.node_id, writer=False, replicated=True,
                                        **metadata_log_options(self.config))
        records = self.metadata_log.load()
        names = tuple(getattr(self.config, "controller_listener_names", ()) or ()) or ("CONTROLLER",)
        local = controller_endpoint(self.config)
        bootstrap: list[tuple[str, int]] = []
        if dynamic:
            if self.metadata_log.kraft_version == 0 and self.metadata_log.voters is None and not self.config.\
                    controller_quorum_bootstrap_servers:
                raise ConfigError("controller.quorum.voters is not set and the metadata log has no voter set: set "
                                  "controller.quorum.voters (a static quorum), or controller.quorum.bootstrap."
                                  "servers and format with --standalone, --initial-controllers or "
                                  "--no-initial-controllers (a dynamic quorum)")
            bootstrap = [hp for hp in bootstrap_addresses(self.config) if hp != local]
        try:
            self.raft = RaftDriver(self.node_id, voters, self.metadata_log, self.cluster_id,
                                   config=raft_config(self.config), on_fatal=self._quorum_failed,
                                   listener_name=names[0], dynamic=dynamic, bootstrap=bootstrap,
                                   local_endpoint=local)
        except ValueError as e:  # an observer with nothing to fetch from
            raise ConfigError(f"{e}: set controller.quorum.bootstrap.servers to the other controllers") from None
        self.metadata_fetch = MetadataFetchService(self.metadata_log, cluster_id=self.cluster_id,
                                                   node_id=self.node_id, endpoint=local,
                                                   leadership=self.raft, endpoints=dict(self.raft.voters))
        fetch_service = self.metadata_fetch
        self.raft.add_voters_listener(lambda addresses: setattr(fetch_service, "endpoints", dict(addresses)))
        settings = controller_settings(self.config, self.cluster_id, None)
        self.controller = QuorumController(settings, self.metadata_log, BrokerConfigPolicy(None, self.config),
                                           config_aliases=dict(bc.ALIASES))
        self.metadata = self.controller.attach_quorum(self.raft, records)
        self.controller.add_listener(self._publish)
        attach_registration(self.controller, self.config, self._registration_channel(), self.metadata_loaded)
        self.controller.start()
        await self.raft.start()
        log.info("controller_started", node_id=self.node_id, cluster_id=self.cluster_id, voters=sorted(voters),
                 epoch=self.raft.epoch, log_end_offset=self.metadata_log.next_offset)

    def _registration_channel(self) -> SocketControllerChannel:
        """A connection to the active controller of the quorum, for this controller's own registration: the
        controller listener of each voter (or bootstrap server) in turn until one answers as the active one."""
        names = tuple(getattr(self.config, "controller_listener_names", ()) or ())
        addresses = controller_addresses(
            ",".join(getattr(self.config, "controller_quorum_voters", ()) or ()),
            ",".join(getattr(self.config, "controller_quorum_bootstrap_servers", ()) or ()))
        if not addresses and (local := controller_endpoint(self.config)) is not None:
            addresses = [local]
        return SocketControllerChannel(
            addresses, request_timeout=int(getattr(self.config, "request_timeout_ms", 30000)) / 1000,
            client_id=f"kjbod-controller-{self.node_id}-registration",
            ssl_context=client_context_of(self.config, names[0] if names else None),
            sasl=client_credentials_of(self.config, names[0] if names else None,
                                       "sasl.mechanism.controller.protocol"))

    def _quorum_failed(self, error: BaseException) -> None:
        """The quorum could not write its state or log: stop this controller (exit code 1) rather than vote or
        lead on state it could not keep."""
        self.exit_code = 1
        self.shutdown_requested.set()

    def _publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        old, self.metadata = self.metadata, image
        if old is None or old.features_epoch != image.features_epoch:
            self.handler.forget_answers()  # ApiVersions' memoised answers carry the finalized levels

    async def stop(self) -> None:
        if self.raft is not None:
            with contextlib.suppress(Exception):
                await self.raft.resign(timeout=5.0)  # a leader hands over (EndQuorumEpoch) before it goes
        if self.metadata_fetch is not None:
            self.metadata_fetch.close()
        if self.controller is not None:
            await self.controller.stop()
        if self.raft is not None:
            await self.raft.stop()
        if self.metadata_log is not None:
            with contextlib.suppress(OSError):
                self.metadata_log.close()
        log.info("controller_stopped", node_id=self.node_id)


def build_node(config: Any) -> Any:
    """The node `process.roles` asks for."""
    if config.is_broker and config.is_controller:
        return build_combined_node(config)
    if config.is_controller:
        return ControllerNode(config)
    try:
        return RemoteBrokerNode(config)
    except ValueError as e:  # no usable controller.quorum.voters / controller.quorum.bootstrap.servers
        raise ConfigError(str(e)) from None
