"""Helpers for the KIP-113 live tests: a raw request client, log-dir views, waiting for moves, bulk data.

`RawClient` sends one request at an exact API version with kjbod's generated codecs over a plain socket (to
test every version and requests no admin client would build, such as a partition named twice). Everything else
goes through kafka-python, the client the issue names.
"""

from __future__ import annotations

import os
import socket
import struct
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient
    from kafka.record.default_records import DefaultRecordBatchBuilder

from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.headers import request_header_version, response_header_version

LONG_MAX = (1 << 63) - 1
THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


class RawClient:
    """One connection; `call(request, version)` returns the decoded response."""

    def __init__(self, bootstrap: str, timeout: float = 60.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def call(self, request: Any, version: int) -> Any:
        key = type(request).API_KEY
        self.correlation += 1
        client_id = b"kip113-tests"
        header = struct.pack(">hhih", key, version, self.correlation, len(client_id)) + client_id
        if request_header_version(key, version) >= 2:
            header += b"\x00"
        body = request.encode(version)
        self.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        (size,) = struct.unpack(">i", self._read(4))
        frame = self._read(size)
        (corr,) = struct.unpack_from(">i", frame, 0)
        assert corr == self.correlation
        pos = 4 + (1 if response_header_version(key, version) >= 1 else 0)
        return APIS[key].response.decode(frame[pos:], version)

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def kafka_admin(server) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)


def replicas(admin: KafkaAdminClient, topics: dict[str, list[int]] | None = None) -> dict[tuple[str, int, bool], dict]:
    """{(topic, partition, is_future): {"dir", "size", "lag"}} from kafka-python's describe_log_dirs()."""
    out = {}
    for broker in admin.describe_log_dirs(topic_partitions=topics):
        for d in broker["log_dirs"]:
            for t in d["topics"]:
                for p in t["partitions"]:
                    out[(t["name"], p["partition_index"], p["is_future_key"])] = {
                        "dir": d["log_dir"], "size": p["partition_size"], "lag": p["offset_lag"]}
    return out


def replica_listing(admin: KafkaAdminClient, topics: dict[str, list[int]] | None = None
                    ) -> list[tuple[str, int, bool, str]]:
    """Every (topic, partition, is_future, dir) entry kafka-python's describe_log_dirs() returns, repeats kept."""
    return [(t["name"], p["partition_index"], p["is_future_key"], d["log_dir"])
            for broker in admin.describe_log_dirs(topic_partitions=topics)
            for d in broker["log_dirs"] for t in d["topics"] for p in t["partitions"]]


def kjbod_replica_listing(bootstrap: str, topics: list[str] | None = None) -> list[tuple[str, int, bool, str]]:
    """The same through kjbod's own admin client."""
    from kjbod.admin import SyncAdminClient

    with SyncAdminClient(bootstrap, request_timeout=30) as admin:
        return [(r.topic, r.partition, r.is_future, d.path)
                for dirs in admin.describe_log_dirs(topics=topics).values() for d in dirs for r in d.replicas]


def current_dir(admin: KafkaAdminClient, topic: str, partition: int) -> str | None:
    found = replicas(admin, {topic: [partition]}).get((topic, partition, False))
    return None if found is None else found["dir"]


def wait_moved(admin: KafkaAdminClient, topic: str, partition: int, dest: str, timeout: float = 60.0,
               server=None) -> None:
    """Until the replica lives in `dest` and has no future replica left. With `server` (a live server), a
    timeout also shows what the server logged about moves of this partition."""
    deadline = time.monotonic() + timeout
    while True:
        seen = replicas(admin, {topic: [partition]})
        cur = seen.get((topic, partition, False))
        if cur is not None and cur["dir"] == dest and (topic, partition, True) not in seen:
            return
        if time.monotonic() > deadline:
            logged = "" if server is None else "\nthe server logged:\n" + move_log(server, f"{topic}-{partition}")
            raise AssertionError(f"{topic}-{partition} not moved to {dest} within {timeout}s: {seen}{logged}")
        time.sleep(0.05)


def move_log(server, name: str, last: int = 30) -> str:
    """The last lines of a live server's stderr that name partition `name` or a move, a failure or a traceback."""
    try:
        lines = server.stderr_path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(stderr not readable: {e})"
    keep = [ln for ln in lines if f'"{name}"' in ln or "Traceback" in ln or '"error"' in ln or "failed" in ln]
    return "\n".join(keep[-last:])


def partition_dirs(server) -> dict[str, list[str]]:
    """{log dir: names of the partition dirs in it} on disk."""
    out = {}
    for d in server.log_dirs:
        out[str(d)] = sorted(n for n in os.listdir(d) if (Path(d) / n).is_dir() and "-" in n
                             and not n.startswith("__cluster_metadata"))
    return out


def log_file_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in Path(directory).iterdir() if f.name.endswith(".log"))


def big_batch(value_size: int, count: int, start: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 26)
    for i in range(count):
        payload = (b"%012d" % (start + i)) * (value_size // 12 + 1)
        b.append(i, timestamp=1_700_000_000_000 + start + i, key=None, value=payload[:value_size], headers=[])
    return bytes(b.build())


def fill_offline(server, topic: str, partitions: list[int], nbytes: int, *, segment_bytes: int,
                 value_size: int = 256 << 10) -> None:
    """Append about `nbytes` to each partition with the server stopped (a LogManager on its dirs), then restart
    it: hundreds of megabytes in seconds, which a producer would take much longer to write."""
    from kjbod.storage.config import LogConfig
    from kjbod.storage.manager import LogManager

    server.stop()
    lm = LogManager([str(d) for d in server.log_dirs], metadata_log_dir=str(server.metadata_dir), node_id=1,
                    defaults=LogConfig(segment_bytes=segment_bytes, max_message_bytes=64 << 20))
    lm.open()
    try:
        per_batch = 4
        batches = max(1, nbytes // (value_size * per_batch))
        for p in partitions:
            plog = lm.get(topic, p)
            for i in range(batches):
                plog.append(big_batch(value_size, per_batch, i * per_batch))
    finally:
        lm.close()
    server.start()


def seed_foreign_partition(server, topic: str, partition_count: int, other_broker: int = 2) -> uuid.UUID:
    """Write a topic whose replicas live on another broker into the stopped server's metadata log (as the
    controller of a larger cluster would), then restart: this node knows the topic but hosts none of it."""
    from kjbod.protocol.generated import PartitionRecord, TopicRecord
    from kjbod.storage.metadata_log import MetadataLog

    server.stop()
    topic_id = uuid.uuid4()
    mlog = MetadataLog(str(server.metadata_dir))
    mlog.load()
    mlog.append([TopicRecord(name=topic, topic_id=topic_id)] + [
        PartitionRecord(partition_id=p, topic_id=topic_id, replicas=[other_broker], isr=[other_broker],
                        leader=other_broker, leader_epoch=0, partition_epoch=0) for p in range(partition_count)])
    mlog.close()
    server.start()
    return topic_id


def fetch_all(raw: RawClient, topic: str, partition: int, end_offset: int) -> bytes:
    """Every record batch of a partition, as the broker sends it (Fetch v4), up to `end_offset`."""
    from kjbod.protocol.generated import FetchRequest

    out = bytearray()
    offset = 0
    while offset < end_offset:
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0,
                           topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                               FetchRequest.FetchPartition(partition=partition, fetch_offset=offset,
                                                           partition_max_bytes=32 << 20)])])
        resp = raw.call(req, 4)
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0, part.error_code
        data = bytes(part.records or b"")
        if not data:
            break
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if pos + 12 + length > len(data):
                break
            (delta,) = struct.unpack_from(">i", data, pos + 23)
            out += data[pos:pos + 12 + length]
            offset = base + delta + 1
            pos += 12 + length
    return bytes(out)


def set_throttle(admin: KafkaAdminClient, value: str | None, broker: str = "1") -> None:
    """The intra-broker throttle through IncrementalAlterConfigs (None deletes the dynamic value)."""
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    change = (AlterConfigOp.DELETE, None) if value is None else value
    result = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, broker, configs={THROTTLE: change})])
    assert result == {"broker": {broker: "OK"}}, result
