"""A tiny in-test Kafka responder for the admin client's unit tests: real framing, real generated codecs.

Strategy: an asyncio server on 127.0.0.1 that reads size-prefixed frames with kjbod's FrameDecoder, decodes the
request header and body with the generated classes, answers from a small in-memory cluster model (brokers, topics,
log dirs, configs) and encodes the response with the generated classes.  Everything the client sends is recorded
(api key, version, raw body) so tests can check what went over the wire.

Besides plain answers it can produce, on demand, the faults a real server will not: `script[api_key]` is a queue
of actions consumed one per request of that API: "close" (drop the connection without answering), "truncate"
(send half of the response, then drop the connection), ("delay", s),
("error", code) (answer with that top-level or per-item code), or a callable returning a response.  Advertised
version ranges are editable (`api_versions`) to play an older broker; like Kafka, a request above the advertised
range closes the connection, and an ApiVersions request above it gets KIP-511's v0 UNSUPPORTED_VERSION answer.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from handler_server import serve_frames

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AlterReplicaLogDirsResponse,
    ApiVersionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeLogDirsResponse,
    IncrementalAlterConfigsResponse,
    MetadataResponse,
)
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.headers import decode_request_header, encode_response, peek_api

SERVED = (3, 18, 19, 20, 32, 34, 35, 44, 60)


@dataclass
class Replica:
    topic: str
    partition: int
    size: int = 0
    offset_lag: int = 0
    is_future: bool = False


@dataclass
class LogDir:
    path: str
    directory_id: uuid.UUID = field(default_factory=uuid.uuid4)
    error: int = 0
    total_bytes: int = 1 << 40
    usable_bytes: int = 1 << 39
    replicas: list[Replica] = field(default_factory=list)


@dataclass
class Recorded:
    api_key: int
    version: int
    client_id: str
    body: bytes  # request body without the header
    message: Any
    header: bytes = b""  # the request header's bytes


class FakeCluster:
    """Shared state of one or more FakeBrokers."""

    def __init__(self, cluster_id: str = "fake-cluster-0001") -> None:
        self.cluster_id = cluster_id
        self.brokers: dict[int, FakeBroker] = {}
        self.controller_id = -1
        self.topics: dict[str, dict[str, Any]] = {}  # name -> {"id", "partitions": {p: [replicas]}, "configs"}
        # Brokers the controller has fenced: left out of Metadata, listed by DescribeCluster v2 only when asked
        # (include_fenced_brokers), as Kafka does
        self.fenced: set[int] = set()

    async def start(self, n: int = 1) -> list[FakeBroker]:
        for node_id in range(1, n + 1):
            broker = FakeBroker(self, node_id)
            await broker.start()
            self.brokers[node_id] = broker
        self.controller_id = 1
        return list(self.brokers.values())

    async def stop(self) -> None:
        for broker in self.brokers.values():
            await broker.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers.values())

    def add_topic(self, name: str, partitions: int, replicas: list[int] | None = None,
                  configs: dict[str, str] | None = None) -> None:
        nodes = replicas or [1]
        self.topics[name] = {"id": uuid.uuid4(), "partitions": {p: list(nodes) for p in range(partitions)},
                             "configs": dict(configs or {})}

    def requests(self, api_key: int | None = None) -> list[Recorded]:
        out = []
        for broker in self.brokers.values():
            out.extend(r for r in broker.received if api_key is None or r.api_key == api_key)
        return out


class FakeBroker:
    def __init__(self, cluster: FakeCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.port = 0
        self.api_versions: dict[int, tuple[int, int]] = {
            k: (APIS[k].min_version, APIS[k].max_version) for k in SERVED}
        self.script: dict[int, deque[Any]] = {}
        self.received: list[Recorded] = []
        self.log_dirs: list[LogDir] = []
        self.configs: dict[str, str] = {"log.retention.ms": "604800000", "num.io.threads": "8"}
        self.connections = 0
        self.describe_log_dirs_error = 0
        self._truncate_next = False
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    # ------------------------------------------------------------------------------------------ serving

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.close()
            await self._server.wait_closed()
            self._server = None

    def close_connections(self) -> None:
        for w in list(self._writers):
            w.close()

    def add_script(self, api_key: int, *actions: Any) -> None:
        self.script.setdefault(api_key, deque()).extend(actions)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await serve_frames(reader, writer, self._handle, self._writers, self._take_truncate)

    def _take_truncate(self) -> bool:
        truncate, self._truncate_next = self._truncate_next, False
        return truncate

    async def _handle(self, frame: bytes) -> bytes | None:
        key, version, correlation_id = peek_api(frame)
        lo, hi = self.api_versions.get(key, (0, -1))
        if key == 18 and version > hi:
            # KIP-511: answer in v0 with our own ApiVersions range so the client can retry lower.
            body = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=18, min_version=lo, max_version=hi)])
            return struct.pack(">i", correlation_id) + body.encode(0)
        if not lo <= version <= hi:
            return None  # as Kafka: an unsupported version closes the connection
        header, pos = decode_request_header(frame, key, version)
        message, end = APIS[key].request.decode_from(frame, pos, version)
        assert end == len(frame), "request has trailing bytes"
        self.received.append(Recorded(key, version, header.client_id, bytes(frame[pos:]), message, bytes(frame[:pos])))
        action = None
        queue = self.script.get(key)
        if queue:
            action = queue.popleft()
        error = 0
        if action == "close":
            return None
        if action == "truncate":
            self._truncate_next = True
        if isinstance(action, tuple) and action[0] == "delay":
            await asyncio.sleep(action[1])
        elif isinstance(action, tuple) and action[0] == "error":
            error = action[1]
        if callable(action):
            response = action(message, version)
        else:
            response = getattr(self, f"_api_{key}")(message, version, error)
        return b"".join(encode_response(key, version, correlation_id, response))

    # ------------------------------------------------------------------------------------------ APIs

    def _api_18(self, m: Any, v: int, error: int) -> Any:
        return ApiVersionsResponse(error_code=error, api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(self.api_versions.items())])

    def _api_3(self, m: Any, v: int, error: int) -> Any:
        c = self.cluster
        names = list(c.topics) if m.topics is None else [t.name for t in m.topics]
        topics = []
        for name in names:
            t = c.topics.get(name)
            if t is None:
                topics.append(MetadataResponse.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
                continue
            topics.append(MetadataResponse.MetadataResponseTopic(
                error_code=error, name=name, topic_id=t["id"], partitions=[
                    MetadataResponse.MetadataResponsePartition(
                        partition_index=p, leader_id=r[0], leader_epoch=0, replica_nodes=r, isr_nodes=r)
                    for p, r in t["partitions"].items()]))
        return MetadataResponse(
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=b.node_id, host="127.0.0.1", port=b.port)
                     for b in c.brokers.values() if b.node_id not in c.fenced],
            cluster_id=c.cluster_id, controller_id=c.controller_id, topics=topics)

    def _api_60(self, m: Any, v: int, error: int) -> Any:
        c = self.cluster
        return DescribeClusterResponse(
            error_code=error, error_message="injected" if error else None, cluster_id=c.cluster_id,
            controller_id=c.controller_id,
            brokers=[DescribeClusterResponse.DescribeClusterBroker(
                broker_id=b.node_id, host="127.0.0.1", port=b.port, rack=f"rack-{b.node_id}",
                is_fenced=b.node_id in c.fenced)
                for b in c.brokers.values() if b.node_id not in c.fenced or (v >= 2 and m.include_fenced_brokers)])

    def _api_35(self, m: Any, v: int, error: int) -> Any:
        R = DescribeLogDirsResponse
        wanted = None if m.topics is None else {(t.topic, p) for t in m.topics for p in t.partitions}
        results = []
        for d in self.log_dirs:
            by_topic: dict[str, list[Any]] = {}
            if not d.error:
                for r in d.replicas:
                    if wanted is None or (r.topic, r.partition) in wanted:
                        by_topic.setdefault(r.topic, []).append(R.DescribeLogDirsPartition(
                            partition_index=r.partition, partition_size=r.size, offset_lag=r.offset_lag,
                            is_future_key=r.is_future))
            results.append(R.DescribeLogDirsResult(
                error_code=d.error, log_dir=d.path,
                topics=[R.DescribeLogDirsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
                total_bytes=-1 if d.error else d.total_bytes, usable_bytes=-1 if d.error else d.usable_bytes,
                directory_id=d.directory_id if m.include_directory_ids else uuid.UUID(int=0)))
        return R(error_code=error or self.describe_log_dirs_error, results=[] if error else results)

    def _api_34(self, m: Any, v: int, error: int) -> Any:
        R = AlterReplicaLogDirsResponse
        by_topic: dict[str, list[Any]] = {}
        paths = {d.path: d for d in self.log_dirs}
        for target in m.dirs:
            for t in target.topics:
                for p in t.partitions:
                    code = error
                    current = next((d for d in self.log_dirs for r in d.replicas
                                    if (r.topic, r.partition) == (t.name, p) and not r.is_future), None)
                    if code:
                        pass
                    elif target.path not in paths:
                        code = ErrorCode.LOG_DIR_NOT_FOUND
                    elif current is None:
                        code = (ErrorCode.REPLICA_NOT_AVAILABLE if t.name in self.cluster.topics
                                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    elif current.path != target.path:
                        paths[target.path].replicas.append(Replica(t.name, p, 0, 0, True))
                    by_topic.setdefault(t.name, []).append(
                        R.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=code))
        return R(results=[R.AlterReplicaLogDirTopicResult(topic_name=t, partitions=ps)
                          for t, ps in by_topic.items()])

    def _api_19(self, m: Any, v: int, error: int) -> Any:
        R = CreateTopicsResponse
        out = []
        for t in m.topics:
            code, msg = error, None
            n = t.num_partitions if t.num_partitions != -1 else 1
            rf = t.replication_factor if t.replication_factor != -1 else 1
            if code:
                msg = "injected"
            elif t.name in self.cluster.topics:
                code, msg = ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists."
            elif n <= 0 and not t.assignments:
                code, msg = ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            elif rf > len(self.cluster.brokers):
                code, msg = ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor too large."
            if code:
                out.append(R.CreatableTopicResult(name=t.name, error_code=code, error_message=msg))
                continue
            if not m.validate_only:
                if t.assignments:
                    self.cluster.topics[t.name] = {
                        "id": uuid.uuid4(), "configs": {c.name: c.value for c in t.configs},
                        "partitions": {a.partition_index: list(a.broker_ids) for a in t.assignments}}
                else:
                    self.cluster.add_topic(t.name, n, list(range(1, rf + 1)), {c.name: c.value for c in t.configs})
            tid = self.cluster.topics[t.name]["id"] if not m.validate_only else uuid.UUID(int=0)
            out.append(R.CreatableTopicResult(name=t.name, topic_id=tid, error_message=None,
                                              num_partitions=n, replication_factor=rf))
        return R(topics=out)

    def _api_20(self, m: Any, v: int, error: int) -> Any:
        R = DeleteTopicsResponse
        names = [t.name for t in m.topics] if v >= 6 else list(m.topic_names)
        out = []
        for name in names:
            code = error
            if not code and name not in self.cluster.topics:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            tid = uuid.UUID(int=0)
            if not code:
                tid = self.cluster.topics.pop(name)["id"]
            out.append(R.DeletableTopicResult(name=name, topic_id=tid, error_code=code))
        return R(responses=out)

    def _config_target(self, rtype: int, name: str) -> tuple[int, dict[str, str] | None]:
        if rtype == 2:
            t = self.cluster.topics.get(name)
            return (0, t["configs"]) if t else (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        if rtype == 4:
            if name not in ("", str(self.node_id)):
                return ErrorCode.INVALID_REQUEST, None
            return 0, self.configs
        return ErrorCode.INVALID_REQUEST, None

    def _api_32(self, m: Any, v: int, error: int) -> Any:
        R = DescribeConfigsResponse
        out = []
        for r in m.resources:
            code, configs = self._config_target(r.resource_type, r.resource_name)
            code = error or code
            entries = []
            if not code and configs is not None:
                for k, val in sorted(configs.items()):
                    if r.configuration_keys is None or k in r.configuration_keys:
                        source = 1 if r.resource_type == 2 else 4
                        entries.append(R.DescribeConfigsResourceResult(
                            name=k, value=val, read_only=False, config_source=source, is_sensitive=False,
                            synonyms=[R.DescribeConfigsSynonym(name=k, value=val, source=source)]
                            if m.include_synonyms else [],
                            config_type=2, documentation=f"doc of {k}" if m.include_documentation else None))
            out.append(R.DescribeConfigsResult(
                error_code=code, error_message=f"resource {r.resource_name!r}" if code else None,
                resource_type=r.resource_type, resource_name=r.resource_name, configs=entries))
        return R(results=out)

    def _api_44(self, m: Any, v: int, error: int) -> Any:
        R = IncrementalAlterConfigsResponse
        out = []
        for r in m.resources:
            code, configs = self._config_target(r.resource_type, r.resource_name)
            code = error or code
            if not code and configs is not None:
                for c in r.configs:
                    if c.config_operation not in (0, 1):
                        code = ErrorCode.INVALID_CONFIG
                        break
                if not code and not m.validate_only:
                    for c in r.configs:
                        if c.config_operation == 0:
                            configs[c.name] = c.value
                        else:
                            configs.pop(c.name, None)
            out.append(R.AlterConfigsResourceResponse(
                error_code=code, error_message="rejected" if code else None,
                resource_type=r.resource_type, resource_name=r.resource_name))
        return R(responses=out)
