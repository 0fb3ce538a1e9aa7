"""Helpers for the data-path integration tests: a raw Kafka client, batch builders and an on-disk log checker.

Strategy: the tests drive a real `kjbod serve` (tests/live.py) three ways.  Real clients (kafka-python,
confluent-kafka) prove interoperability; `RawClient` speaks the protocol with kjbod's own generated codecs over a
blocking socket, so a test can send exactly the bytes it wants (a bad CRC, an oversized batch) and read the exact
error code back, which real clients hide behind retries; and `scan_log_dirs` reads every `.log` file with
kjbod.storage's batch parser and CRC check, so "the tail is valid" is checked on disk, not through the server.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    CreateTopicsRequest,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
)
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.generated.request_header import RequestHeader
from kjbod.protocol.generated.response_header import ResponseHeader
from kjbod.protocol.headers import request_header_version, response_header_version
from kjbod.storage.records import build_batch, crc_matches, iter_all_records, iter_batches, parse_header

_SIZE = struct.Struct(">i")

class RawClient:
    """One blocking connection that sends requests encoded by kjbod's codecs and decodes the responses."""

    def __init__(self, host: str, port: int, *, client_id: str = "kjbod-datapath-test", timeout: float = 15.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._corr = 0

    @classmethod
    def to(cls, server: Any, **kw: Any) -> RawClient:
        return cls(server.host, server.port, **kw)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, request: Any, version: int) -> int:
        self._corr += 1
        key = request.API_KEY
        header = RequestHeader(request_api_key=key, request_api_version=version, correlation_id=self._corr,
                               client_id=self.client_id)
        body = header.encode(request_header_version(key, version)) + request.encode(version)
        self.sock.sendall(_SIZE.pack(len(body)) + body)
        return self._corr

    def _read_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError("the server closed the connection")
            got += k
        return bytes(buf)

    def receive(self, request: Any, version: int, corr: int) -> Any:
        (size,) = _SIZE.unpack(self._read_exact(4))
        frame = self._read_exact(size)
        key = request.API_KEY
        header, pos = ResponseHeader.decode_from(frame, 0, response_header_version(key, version))
        assert header.correlation_id == corr, f"correlation id {header.correlation_id}, expected {corr}"
        return APIS[key].response.decode(frame[pos:], version)

    def call(self, request: Any, version: int) -> Any:
        return self.receive(request, version, self.send(request, version))

    def closed_by_server(self, timeout: float = 5.0) -> bool:
        """True when the server closes the connection (EOF) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


# --------------------------------------------------------------------------------------------- requests

PRODUCE_V = 9
FETCH_V = 12
LIST_OFFSETS_V = 7
CREATE_TOPICS_V = 7
METADATA_V = 12


def produce(client: RawClient, topic: str, partition: int, records: bytes, *, acks: int = -1,
            version: int = PRODUCE_V) -> Any:
    """One partition's Produce; returns its PartitionProduceResponse (None for acks=0)."""
    req = ProduceRequest(acks=acks, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=records)])])
    if acks == 0:
        client.send(req, version)
        return None
    resp = client.call(req, version)
    (t,) = resp.responses
    (p,) = t.partition_responses
    return p


def fetch(client: RawClient, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20,
          max_wait_ms: int = 0, version: int = FETCH_V, current_leader_epoch: int = -1,
          isolation_level: int = 0) -> Any:
    """One partition's Fetch by a consumer (by name, v12); returns its PartitionData."""
    req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                       isolation_level=isolation_level, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                           FetchRequest.FetchPartition(partition=partition, fetch_offset=offset,
                                                       current_leader_epoch=current_leader_epoch,
                                                       partition_max_bytes=max_bytes)])])
    resp = client.call(req, version)
    assert resp.error_code == 0, f"fetch: top-level error {resp.error_code}"
    (t,) = resp.responses
    (p,) = t.partitions
    return p


def fetch_all(client: RawClient, topic: str, partition: int, start: int = 0) -> list:
    """Every record of a partition from `start` to the high watermark, decoded (Record tuples)."""
    out: list = []
    offset = start
    while True:
        p = fetch(client, topic, partition, offset)
        assert p.error_code == 0, f"fetch {topic}-{partition}@{offset}: error {p.error_code}"
        recs = [r for r in iter_all_records(p.records or b"") if r.offset >= offset]
        out.extend(recs)
        if recs:
            offset = recs[-1].offset + 1
        if offset >= p.high_watermark:
            return out
        if not recs:
            raise AssertionError(f"fetch {topic}-{partition}@{offset} returned nothing below hw {p.high_watermark}")


def list_offset(client: RawClient, topic: str, partition: int, timestamp: int,
                version: int = LIST_OFFSETS_V, *, replica_id: int = -1, isolation_level: int = 0,
                current_leader_epoch: int = -1) -> Any:
    req = ListOffsetsRequest(replica_id=replica_id, isolation_level=isolation_level, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=partition, timestamp=timestamp, current_leader_epoch=current_leader_epoch)])])
    (t,) = client.call(req, version).topics
    (p,) = t.partitions
    return p


def offset_for_leader_epoch(client: RawClient, topic: str, partition: int, leader_epoch: int, *,
                            current_leader_epoch: int = -1, version: int = 4) -> Any:
    """One partition's OffsetForLeaderEpoch as a consumer asks it; returns its EpochEndOffset."""
    req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
        topic=topic, partitions=[OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
            partition=partition, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch)])])
    (t,) = client.call(req, version).topics
    (p,) = t.partitions
    return p


def create_topic(client: RawClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                 version: int = CREATE_TOPICS_V) -> Any:
    req = CreateTopicsRequest(timeout_ms=10_000, topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, configs=[
            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])])
    (result,) = client.call(req, version).topics
    return result


def new_topic(client: RawClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    """create_topic, asserting it worked."""
    result = create_topic(client, name, partitions, configs)
    assert result.error_code == 0, result.error_message


def metadata(client: RawClient, topics: Sequence[str] | None, *, version: int = METADATA_V) -> Any:
    req = MetadataRequest(topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t)
                                                              for t in topics],
                          allow_auto_topic_creation=False)
    return client.call(req, version)


def batch(values: Iterable[bytes], *, key: bytes | None = None, timestamp: int | None = None,
          producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """An uncompressed batch of `values` (timestamps `timestamp`, +1 ms each)."""
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    return build_batch([(key, v, [], ts + i) for i, v in enumerate(values)], producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence)


def end_offset(raw: RawClient, topic: str, partition: int = 0) -> int:
    p = list_offset(raw, topic, partition, -1)
    assert p.error_code == 0
    return p.offset


def recrc(data: bytes) -> bytes:
    """The batch with its CRC recomputed (after a test edited fields the CRC covers)."""
    out = bytearray(data)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def refused(raw: RawClient, topic: str, records: bytes, code: int, **kw) -> object:
    """Produces `records`, expects `code`, and checks the log did not move."""
    before = end_offset(raw, topic)
    resp = produce(raw, topic, 0, records, **kw)
    assert resp.error_code == code, f"expected {ErrorCode(code).name}, got {resp.error_code} ({resp.error_message})"
    assert resp.base_offset == -1
    assert end_offset(raw, topic) == before, "a refused produce appended something"
    return resp


# --------------------------------------------------------------------------------------------- on-disk checks


@dataclass
class PartitionScan:
    """What `scan_log_dirs` found for one partition directory."""

    log_dir: str
    segments: list[str] = field(default_factory=list)
    batches: int = 0
    records: int = 0
    next_offset: int = 0
    codecs: set[int] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    corrupt_files: list[str] = field(default_factory=list)


def scan_partition(path: Path) -> PartitionScan:
    """Reads every `.log` of a partition dir: batches back to back, each CRC valid, offsets ascending and
    contiguous across segments, and no trailing partial batch."""
    scan = PartitionScan(str(path.parent))
    expected: int | None = None
    for log in sorted(path.glob("*.log")):
        scan.segments.append(log.name)
        base = int(log.name[:20])
        data = log.read_bytes()
        end = 0
        for pos, h in iter_batches(data):
            if pos != end:
                scan.problems.append(f"{log.name}: gap before byte {pos}")
            if not crc_matches(data, pos, h):
                scan.problems.append(f"{log.name}: CRC mismatch in the batch at byte {pos} (offset {h.base_offset})")
            if expected is not None and h.base_offset != expected:
                scan.problems.append(f"{log.name}: batch at byte {pos} starts at offset {h.base_offset}, "
                                     f"expected {expected}")
            if pos == 0 and h.base_offset < base:
                scan.problems.append(f"{log.name}: first batch at offset {h.base_offset} below the base {base}")
            expected = h.next_offset
            scan.batches += 1
            scan.codecs.add(h.compression)
            scan.records += h.records_count
            end = pos + h.size
        if end != len(data):
            scan.problems.append(f"{log.name}: {len(data) - end} bytes after the last whole batch")
        if expected is None:
            expected = base
    scan.next_offset = expected or 0
    scan.corrupt_files = sorted(p.name for p in path.iterdir() if p.name.endswith(".corrupt"))
    return scan


def renamed_to_delete(parent: Path, name: str, timeout: float = 30.0) -> list[Path]:
    """The ``<name>.<uuid>-delete`` dirs in `parent` once `name` itself is gone: a deleted partition is taken out
    of service at once and renamed on its dir's worker right after (as Kafka's brokers rename asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        renamed = [d for d in parent.iterdir() if d.name.startswith(name + ".") and d.name.endswith("-delete")]
        if (renamed and not (parent / name).exists()) or time.monotonic() > deadline:
            return renamed
        time.sleep(0.02)


def partition_dirs(log_dirs: Iterable[Path]) -> dict[str, Path]:
    """{"topic-N": path} for every live partition dir (no -delete/-future/-stray suffix)."""
    out: dict[str, Path] = {}
    for d in log_dirs:
        for entry in Path(d).iterdir():
            name = entry.name
            if entry.is_dir() and not name.endswith(("-delete", "-future", "-stray")) \
                    and name.rpartition("-")[2].isdigit() and not name.startswith("__cluster_metadata"):
                assert name not in out, f"{name} lives in two log dirs: {out[name]} and {entry}"
                out[name] = entry
    return out


def scan_log_dirs(log_dirs: Iterable[Path]) -> dict[str, PartitionScan]:
    return {name: scan_partition(path) for name, path in partition_dirs(log_dirs).items()}


def first_batch_position(log: Path, index: int) -> tuple[int, int]:
    """(byte position, size) of the `index`-th batch of a `.log` file."""
    data = log.read_bytes()
    for i, (pos, h) in enumerate(iter_batches(data)):
        if i == index:
            return pos, h.size
    raise AssertionError(f"{log} has fewer than {index + 1} batches")


def flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0xFF]))


def batch_header_at(path: Path, position: int):
    with open(path, "rb") as f:
        f.seek(position)
        return parse_header(f.read(61))


# --------------------------------------------------------------------------------------------- faults


def write_faults(path: Path, rules: list[dict]) -> None:
    """Arms the KJBOD_FAULTS file a server subprocess re-reads (kjbod.storage.fsio): write then rename, so the
    server never reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"faults": rules}))
    os.replace(tmp, path)


def log_events(server: Any, event: str) -> list[dict]:
    """The server's JSON log lines (stderr) whose event is `event`."""
    out = []
    for line in Path(server.stderr_path).read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == event:
            out.append(entry)
    return out
