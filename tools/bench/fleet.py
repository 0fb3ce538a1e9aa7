"""A simulated fleet of Kafka brokers on 127.0.0.1 that answers DescribeLogDirs (test and benchmark use only).

Strategy: one asyncio event loop in a background thread serves every simulated broker, each on its own port,
so synchronous callers (tests, benchmarks, Spark's worker processes connecting over TCP) can use it as they
would a real cluster.  It speaks the real protocol with kjbod's framing and generated codecs and answers the
three APIs an admin client needs for log-dir state: ApiVersions, Metadata (every broker, and the topics asked
for) and DescribeLogDirs (honouring the request's topic list).  Anything else closes the connection, as Kafka
does for a request it cannot serve.

* Layouts: `Fleet.generate(brokers, dirs, partitions_per_dir, topics)` builds a large deterministic fleet
  (replication factor 1, partition g on broker g % brokers); `Fleet(layout)` serves a hand-written one.
* Speed: the full DescribeLogDirs answer of a broker is encoded once per API version and reused until its data
  changes (`grow()`, `set_dir()`), so a benchmark measures the client, not this responder.
* Faults: `set_down(id)` closes a broker's listener (its port refuses connections; Metadata still lists it, like
  a broker that just died), `set_hanging(id)` keeps accepting and reading but never answers.
* Observation: `describe_requests` records (broker id, requested topics or None) for every DescribeLogDirs,
  so tests can check what a client sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ApiVersionsResponse, DescribeLogDirsResponse, MetadataResponse
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.headers import (
    decode_request_header,
    encode_response,
    peek_api,
    response_header,
    response_header_version,
)
from kjbod.wire.framing import FrameDecoder, FrameError, encode_frame_size

__all__ = ["Fleet", "FleetDir", "FleetReplica"]

METADATA, API_VERSIONS, DESCRIBE_LOG_DIRS = 3, 18, 35
SERVED = (METADATA, API_VERSIONS, DESCRIBE_LOG_DIRS)
TB = 10**12


@dataclass
class FleetReplica:
    topic: str
    partition: int
    size: int = 0
    offset_lag: int = 0
    is_future: bool = False


@dataclass
class FleetDir:
    path: str
    total_bytes: int = 4 * TB
    usable_bytes: int = 2 * TB
    replicas: list[FleetReplica] = field(default_factory=list)
    error: int = 0  # e.g. ErrorCode.KAFKA_STORAGE_ERROR for an offline dir
    directory_id: uuid.UUID = field(default_factory=uuid.uuid4)
    reserved_bytes: int = -1  # kjbod's log.dir.reserved.bytes as the dir reports it; -1: not reported


class _Broker:
    def __init__(self, fleet: Fleet, broker_id: int, dirs: list[FleetDir]) -> None:
        self.fleet = fleet
        self.broker_id = broker_id
        self.dirs = dirs
        self.port = 0
        self.server: asyncio.Server | None = None
        self.hanging = False
        self.cache: dict[int, bytes] = {}  # api version -> encoded full DescribeLogDirs body
        self.transports: set[asyncio.Transport] = set()


class _Connection(asyncio.Protocol):
    def __init__(self, broker: _Broker) -> None:
        self.broker = broker
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.broker.transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.broker.transports.discard(self.transport)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if self.broker.hanging:
            return  # read and ignore: the peer waits for an answer that never comes
        assert self.transport is not None
        try:
            self.decoder.feed(data)
            replies = [self.broker.fleet._answer(self.broker, frame) for frame in self.decoder.frames()]
        except (FrameError, ValueError) as e:  # garbage or an API we do not serve: drop the connection
            self.broker.fleet.errors.append(repr(e))
            self.transport.close()
            return
        for reply in replies:
            if reply is None:
                self.transport.close()
                return
            self.transport.write(encode_frame_size(len(reply)) + reply)


class Fleet:
    """Simulated brokers; use `with Fleet(...) as fleet:` or start()/stop()."""

    def __init__(self, layout: Mapping[int, Iterable[FleetDir]], cluster_id: str = "kjbod-fleet-00000001",
                 external: Mapping[int, tuple[str, int]] | None = None) -> None:
        """`external`: brokers served elsewhere (e.g. a real kjbod) that this fleet's Metadata lists too."""
        self.cluster_id = cluster_id
        self._brokers = {b: _Broker(self, b, list(dirs)) for b, dirs in sorted(layout.items())}
        self.external = dict(external or {})
        if set(self.external) & set(self._brokers):
            raise ValueError("external broker ids must differ from the simulated ones")
        self.describe_requests: list[tuple[int, tuple[tuple[str, tuple[int, ...]], ...] | None]] = []
        self.errors: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._topic_cache: dict[str, dict[int, int]] | None = None

    @classmethod
    def generate(cls, brokers: int = 50, dirs: int = 4, partitions_per_dir: int = 2000, topics: int = 20,
                 first_broker_id: int = 1) -> Fleet:
        """brokers x dirs x partitions_per_dir replicas, sizes from a fixed formula (same every run)."""
        total = brokers * dirs * partitions_per_dir
        if total % topics:
            raise ValueError(f"{total} partitions do not split evenly over {topics} topics")
        per_topic = total // topics
        layout: dict[int, list[FleetDir]] = {
            first_broker_id + b: [FleetDir(f"/var/lib/kafka/b{first_broker_id + b}/data-{d}",
                                           directory_id=uuid.UUID(int=(b + 1) << 32 | d))
                                  for d in range(dirs)]
            for b in range(brokers)}
        for g in range(total):
            broker = first_broker_id + g % brokers
            d = (g // brokers) % dirs
            size = 1_000_000 + (g * 2_654_435_761) % 5_000_000_000
            layout[broker][d].replicas.append(FleetReplica(f"topic-{g // per_topic:03d}", g % per_topic, size))
        for dir_list in layout.values():
            for fd in dir_list:
                fd.usable_bytes = fd.total_bytes - sum(r.size for r in fd.replicas) - 50 * 10**9
        return cls(layout)

    # ------------------------------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Fleet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                for broker in self._brokers.values():
                    loop.run_until_complete(self._listen(broker))
            except BaseException as e:  # noqa: BLE001  (reported to the starting thread)
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._close_all())
            loop.close()

        self._thread = threading.Thread(target=run, name="kjbod-fleet", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None
        self._thread = None

    async def _listen(self, broker: _Broker) -> None:
        broker.server = await asyncio.get_running_loop().create_server(
            lambda: _Connection(broker), "127.0.0.1", broker.port or 0)
        broker.port = broker.server.sockets[0].getsockname()[1]

    async def _close_all(self) -> None:
        for broker in self._brokers.values():
            await self._unlisten(broker)

    async def _unlisten(self, broker: _Broker) -> None:
        if broker.server is not None:
            broker.server.close()
            for t in list(broker.transports):
                t.close()
            await broker.server.wait_closed()
            broker.server = None

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None, "the fleet is not running"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def _call(self, fn: Any) -> Any:
        async def call() -> Any:
            return fn()
        return self._run(call())

    # ------------------------------------------------------------------------------------------ access

    @property
    def bootstrap(self) -> str:
        """The first live broker's address."""
        return next(f"127.0.0.1:{b.port}" for b in self._brokers.values() if b.server is not None)

    @property
    def broker_ids(self) -> list[int]:
        return list(self._brokers)

    def port(self, broker_id: int) -> int:
        return self._brokers[broker_id].port

    def dirs(self, broker_id: int) -> list[FleetDir]:
        """The broker's dirs (change them through set_dir/grow while running)."""
        return self._brokers[broker_id].dirs

    @property
    def replica_count(self) -> int:
        return sum(len(d.replicas) for b in self._brokers.values() for d in b.dirs)

    def set_down(self, broker_id: int, down: bool = True) -> None:
        """Close (or reopen, on the same port) a broker's listener."""
        broker = self._brokers[broker_id]
        self._run(self._unlisten(broker) if down else self._listen(broker))

    def set_hanging(self, broker_id: int, hanging: bool = True) -> None:
        self._brokers[broker_id].hanging = hanging

    def grow(self, nbytes: int, broker_ids: Iterable[int] | None = None) -> None:
        """Adds `nbytes` to every replica (of the given brokers) and takes it from the dirs' usable space."""
        def apply() -> None:
            for b in (self._brokers[i] for i in (broker_ids if broker_ids is not None else self._brokers)):
                for d in b.dirs:
                    d.usable_bytes -= nbytes * len(d.replicas)
                    for r in d.replicas:
                        r.size += nbytes
                b.cache.clear()
        self._call(apply)

    def set_dir(self, broker_id: int, index: int, **changes: Any) -> None:
        """Replace fields of one dir (e.g. replicas=[...], usable_bytes=...)."""
        def apply() -> None:
            b = self._brokers[broker_id]
            for k, v in changes.items():
                setattr(b.dirs[index], k, v)
            b.cache.clear()
            self._topic_cache = None
        self._call(apply)

    # ------------------------------------------------------------------------------------------ answers

    def _answer(self, broker: _Broker, frame: bytes) -> bytes | None:
        key, version, correlation_id = peek_api(frame)
        info = APIS.get(key)
        if key not in SERVED or info is None:
            return None
        if key == API_VERSIONS and version > info.max_version:
            # KIP-511: answer in v0 with our own range so the client can ask again lower.
            body = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=key, min_version=info.min_version,
                                               max_version=info.max_version)])
            return response_header(correlation_id, 0) + body.encode(0)
        if not info.min_version <= version <= info.max_version:
            return None
        _, pos = decode_request_header(frame, key, version)
        request, _ = info.request.decode_from(frame, pos, version)
        if key == DESCRIBE_LOG_DIRS:
            topics = None if request.topics is None else tuple(
                (t.topic, tuple(t.partitions)) for t in request.topics)
            self.describe_requests.append((broker.broker_id, topics))
            if topics is None:
                body = broker.cache.get(version)
                if body is None:
                    body = broker.cache[version] = self._log_dirs(broker, None).encode(version)
            else:
                body = self._log_dirs(broker, topics).encode(version)
            return response_header(correlation_id, response_header_version(key, version)) + body
        response = self._metadata(request) if key == METADATA else self._api_versions()
        return b"".join(encode_response(key, version, correlation_id, response))

    def _api_versions(self) -> Any:
        return ApiVersionsResponse(api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=APIS[k].min_version,
                                           max_version=APIS[k].max_version) for k in SERVED])

    def _topics(self) -> dict[str, dict[int, int]]:
        """topic -> partition -> the broker holding it (the first, for a replica on several)."""
        if self._topic_cache is None:
            out: dict[str, dict[int, int]] = {}
            for b in self._brokers.values():
                for d in b.dirs:
                    for r in d.replicas:
                        out.setdefault(r.topic, {}).setdefault(r.partition, b.broker_id)
            self._topic_cache = out
        return self._topic_cache

    def _metadata(self, request: Any) -> Any:
        M = MetadataResponse
        known = self._topics()
        names = list(known) if request.topics is None else [t.name for t in request.topics]
        topics = []
        for name in names:
            parts = known.get(name)
            if parts is None:
                topics.append(M.MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
                continue
            topics.append(M.MetadataResponseTopic(
                name=name, topic_id=uuid.uuid5(uuid.NAMESPACE_OID, name), partitions=[
                    M.MetadataResponsePartition(partition_index=p, leader_id=b, replica_nodes=[b], isr_nodes=[b])
                    for p, b in sorted(parts.items())]))
        listed = [(b.broker_id, "127.0.0.1", b.port) for b in self._brokers.values()]
        listed += [(b, host, port) for b, (host, port) in self.external.items()]
        return M(brokers=[M.MetadataResponseBroker(node_id=b, host=host, port=port) for b, host, port in sorted(listed)],
                 cluster_id=self.cluster_id, controller_id=next(iter(self._brokers)), topics=topics)

    def _log_dirs(self, broker: _Broker, topics: tuple[tuple[str, tuple[int, ...]], ...] | None) -> Any:
        R = DescribeLogDirsResponse
        wanted = None if topics is None else {(t, p) for t, ps in topics for p in ps}
        results = []
        for d in broker.dirs:
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
                directory_id=d.directory_id, reserved_bytes=d.reserved_bytes))
        return R(results=results)


def _main() -> None:  # pragma: no cover - a manual tool: `python -m tools.bench.fleet` serves until Ctrl-C
    import time

    with Fleet.generate(brokers=3, dirs=2, partitions_per_dir=10, topics=3) as fleet:
        print(f"fleet of {len(fleet.broker_ids)} brokers; bootstrap {fleet.bootstrap}")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(1)


if __name__ == "__main__":
    _main()
