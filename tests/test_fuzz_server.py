"""Fuzz a running `kjbod serve` over sockets: bad frames close one connection, never the server.

Strategy: every (API, version) the server serves (read from the router's registry, so a new handler is fuzzed
the day it is registered) gets a well-formed seed request built from its own dataclass: every list holds one
element, every string is "fuzz", records are a real record batch, topic ids name a real topic.  Each case
sends one mutated frame (bit flips, truncation, bytes inserted or dropped, invalid UTF-8, null where a string
may not be null, huge or negative lengths, over-long or cut varints, random frames with a plausible header)
followed by a well-formed ApiVersions "sentinel" on the same connection, then reads until EOF or the sentinel's
answer.  A case passes if the connection was closed with no partial garbage, or if the mutation still decoded
and the server answered it with a well-formed frame carrying the mutated request's correlation id, followed by
the sentinel's answer (Produce with acks=0 may answer nothing).  Throughout, a watchdog thread keeps a
well-behaved connection busy with ApiVersions + Metadata and checks every answer.  Afterwards the server must
still run and its log must hold no handler crash.

Size prefixes are fuzzed apart from the body: negative, zero, too short, over `socket.request.max.bytes`
(the server's limit is set to 1 MiB here: exactly 1 MiB is served, one byte more closes the connection), and
2 GiB, which must close the connection without the server allocating it (its VmRSS stays flat).

The random generator is seeded (FUZZ_SEED below); a failure message names the case, the seed and the bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
import socket
import struct
import sys
import threading
import time
import types
import typing
import uuid
from pathlib import Path

import pytest
from live import LiveServer, start_server

from kjbod.broker.router import registry
from kjbod.protocol.generated import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    MetadataRequest,
    MetadataResponse,
)
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.generated.request_header import RequestHeader
from kjbod.protocol.generated.response_header import ResponseHeader
from kjbod.protocol.headers import request_header_version, response_header_version
from kjbod.protocol.runtime import EncodeError
from kjbod.storage.records import build_batch

FUZZ_SEED = 20240611
MAX_REQUEST = 1 << 20  # socket.request.max.bytes for this server
CASES_PER_VERSION = 32
RANDOM_FRAMES = 400
TOPIC = "fuzz"
CLIENT_ID = "kjbod-fz"
SENTINEL_CORR = 0x5E5E5E5E
READ_TIMEOUT = 5.0

_SIZE = struct.Struct(">i")


# ------------------------------------------------------------------------------------------------ the server


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> LiveServer:
    s = start_server(tmp_path_factory.mktemp("fuzz"), overrides={
        "socket.request.max.bytes": str(MAX_REQUEST), "num.partitions": "1"})
    yield s
    s.stop()


def frame_of(api_cls, version: int, correlation_id: int, body, client_id: str = CLIENT_ID) -> bytes:
    """A request frame (no size prefix) encoded with kjbod's codec."""
    key = api_cls.API_KEY
    header = RequestHeader(request_api_key=key, request_api_version=version, correlation_id=correlation_id,
                           client_id=client_id)
    return header.encode(request_header_version(key, version)) + body.encode(version)


def sized(frame: bytes) -> bytes:
    return _SIZE.pack(len(frame)) + frame


def read_frame(sock: socket.socket, buf: bytearray) -> bytes | None:
    """The next whole response frame from `sock` (None on EOF); raises TimeoutError when nothing comes."""
    while len(buf) < 4 or len(buf) < 4 + _SIZE.unpack_from(buf)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    (size,) = _SIZE.unpack_from(buf)
    frame = bytes(buf[4:4 + size])
    del buf[:4 + size]
    return frame


def rpc(sock: socket.socket, buf: bytearray, frames: list[bytes]) -> list[bytes]:
    sock.sendall(b"".join(sized(f) for f in frames))
    out = []
    for _ in frames:
        frame = read_frame(sock, buf)
        assert frame is not None, "server closed a well-behaved connection"
        out.append(frame)
    return out


# ---------------------------------------------------------------------------------------------------- seeds


def _field_types(cls) -> dict[str, typing.Any]:
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


INT_VALUES = {"num_partitions": 1, "replication_factor": 1, "acks": 1, "timeout_ms": 1000, "max_wait_ms": 0,
              "min_bytes": 0, "max_bytes": 65536, "partition_max_bytes": 65536, "transaction_timeout_ms": 60000,
              "resource_type": 2, "resource_type_filter": 2, "operation": 3, "permission_type": 3,
              "resource_pattern_type": 3, "pattern_type_filter": 3}


def populate(cls, topic_id: uuid.UUID, records: bytes):
    """An instance of a generated message class with every list holding one element, empty strings "fuzz",
    and otherwise the schema's defaults (a consumer's replica id, no cluster id, ...)."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name == "unknown_tagged_fields":
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        kwargs[f.name] = _value(f.name, _field_types(cls)[f.name], default, topic_id, records)
    return cls(**kwargs)


def _value(name: str, hint, default, topic_id: uuid.UUID, records: bytes):
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None: seed the X
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if name == "records":
        return records
    if origin is list:
        item = args[0]
        if dataclasses.is_dataclass(item):
            return [populate(item, topic_id, records)]
        return [_value(name, item, {str: "", int: 0, uuid.UUID: uuid.UUID(int=0)}.get(item), topic_id, records)]
    if hint is str:
        return TOPIC if default == "" else default
    if hint is int:
        return INT_VALUES.get(name, default)
    if hint is uuid.UUID:
        return topic_id if name == "topic_id" else default
    if hint is bytes:
        return b"fuzz" if default in (b"", None) else default
    return default  # booleans, nested structs outside lists, opaque values: the schema's default


@functools.cache
def seeds(topic_id: uuid.UUID) -> list[tuple[str, int, str, bytes]]:
    """(api, version, listener kind, frame) for every version of every API the router serves."""
    records = build_batch([(b"k", b"v", [], 1_700_000_000_000)])
    out = []
    for _key, entry in sorted(registry().items()):
        kind = "broker" if "broker" in entry.listeners else "controller"
        for version in range(entry.min_version, entry.max_version + 1):
            body = populate(entry.request_cls, topic_id, records)
            # A field that this version cannot carry (DeleteTopics' topics before v6, Fetch's forgotten topics
            # before v7, FindCoordinator's single key from v4) goes back to its default.
            for f in dataclasses.fields(body):
                try:
                    body.encode(version)
                    break
                except EncodeError:
                    if f.default_factory is not dataclasses.MISSING:
                        setattr(body, f.name, f.default_factory())
                    elif f.default is not dataclasses.MISSING:
                        setattr(body, f.name, f.default)
            out.append((entry.name, version, kind, frame_of(entry.request_cls, version, 1000 + version, body)))
    return out


# ------------------------------------------------------------------------------------------------ mutations


def _string_sites(frame: bytes) -> list[tuple[int, str]]:
    """Where the seed's "fuzz" strings start, and how their length is encoded (compact or int16)."""
    sites = []
    start = 8
    while (i := frame.find(b"fuzz", start)) >= 0:
        start = i + 1
        if frame[i - 1] == 5:
            sites.append((i, "compact"))
        elif frame[i - 2:i] == b"\x00\x04":
            sites.append((i, "int16"))
    return sites


def mutate(frame: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One mutation of a request frame: (description, mutated frame)."""
    b = bytearray(frame)
    sites = _string_sites(frame)
    kinds = ["bitflip", "bitflip", "truncate", "insert", "delete", "overwrite", "varint", "int32", "tags"]
    if sites:
        kinds += ["utf8", "null", "huge_string", "negative_string", "bad_varint"]
    kind = rng.choice(kinds)
    body_from = 8 if len(b) > 9 else 0
    if kind == "bitflip":
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(body_from, len(b))
            b[pos] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        b = b[:rng.randrange(0, len(b))]
    elif kind == "insert":
        pos = rng.randrange(body_from, len(b) + 1)
        b[pos:pos] = rng.randbytes(rng.randint(1, 8))
    elif kind == "delete":
        pos = rng.randrange(body_from, len(b))
        del b[pos:pos + rng.randint(1, 8)]
    elif kind == "overwrite":
        pos = rng.randrange(body_from, len(b))
        n = rng.randint(1, 8)
        b[pos:pos + n] = rng.randbytes(n)
    elif kind == "varint":  # a maximal or over-long unsigned varint where a length may be
        pos = rng.randrange(body_from, len(b))
        b[pos:pos + 1] = rng.choice([b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x01", b"\xff"])
    elif kind == "int32":  # an int32 array count (or any int32) made huge or negative
        pos = rng.randrange(body_from, max(body_from + 1, len(b) - 3))
        b[pos:pos + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x80\x00\x00\x00"])
    elif kind == "tags":  # the tagged-field section (last byte in flexible messages) claims a huge field
        b[-1:] = b"\x01\x00\xff\xff\xff\xff\x0f"
    else:
        pos, encoding = rng.choice(sites)
        if kind == "utf8":
            b[pos:pos + 4] = rng.choice([b"\xff\xfe\xfd\xfc", b"\xc0\x80zz", b"fu\xed\xa0", b"\xe2\x82zz"])
        elif kind == "null":
            if encoding == "compact":
                b[pos - 1] = 0
            else:
                b[pos - 2:pos] = b"\xff\xff"
        elif kind == "huge_string":
            if encoding == "compact":
                b[pos - 1:pos] = b"\x80\x80\x80\x80\x08"
            else:
                b[pos - 2:pos] = b"\x7f\xff"
        elif kind == "negative_string":
            if encoding == "compact":
                b[pos - 1:pos] = b"\xff\xff\xff\xff\x0f"  # 2**32 - 1: "length" -2 after the +1 shift
            else:
                b[pos - 2:pos] = b"\xff\xfe"
        else:  # bad_varint: an unfinished varint at the very end, or one longer than 5 bytes
            if rng.random() < 0.5:
                b = b[:pos - 1] + b"\x80"
            else:
                b[pos - 1:pos] = b"\xff\xff\xff\xff\xff\xff\x01"
    return kind, bytes(b)


def random_frame(rng: random.Random, keys: list[int]) -> tuple[str, bytes]:
    if rng.random() < 0.2:
        return "random bytes", rng.randbytes(rng.randint(0, 64))
    key = rng.choice(keys)
    info = APIS[key]
    version = rng.randint(info.min_version - 1, info.max_version + 1)
    header = struct.pack(">hhi", key, version, rng.randrange(1 << 31))
    return f"random {info.name} v{version}", header + rng.randbytes(rng.randint(0, 200))


# ----------------------------------------------------------------------------------------------- checking


def expected_answer(frame: bytes):
    """(api key, version, correlation id) an answer to `frame` would carry, or None if it has no header."""
    if len(frame) < 8:
        return None
    return struct.unpack_from(">hhi", frame)


def check_answer(answer: bytes, frame: bytes) -> str | None:
    """Why `answer` is not a well-formed response to `frame` (None if it is)."""
    key, version, corr = expected_answer(frame)
    entry = registry().get(key)
    if entry is None:
        return f"answered an unknown API key {key}"
    if key == 18 and not entry.min_version <= version <= entry.max_version:
        header_version, body_version = 0, 0  # KIP-511: v0 body under a v0 header
    else:
        header_version, body_version = response_header_version(key, version), version
    try:
        header, pos = ResponseHeader.decode_from(answer, 0, header_version)
        entry.response_cls.decode(answer[pos:], body_version)
    except ValueError as e:
        return f"answer does not decode as {entry.name} v{body_version}: {e}"
    if header.correlation_id != corr:
        return f"answer carries correlation id {header.correlation_id}, the request had {corr}"
    return None


def fetch_wait(frame: bytes | None) -> tuple[int, bool, bool] | None:
    """For a request that decodes as a Fetch: (max_wait_ms, whether Kafka would let it wait, whether it names
    partitions).  Kafka answers at once when there is nothing to wait for: no partitions, or min_bytes <= 0
    (DelayedFetch's rule)."""
    if frame is None or len(frame) < 8 or struct.unpack_from(">h", frame)[0] != 1:
        return None
    entry = registry()[1]
    key, version, _ = struct.unpack_from(">hhi", frame)
    if not entry.min_version <= version <= entry.max_version:
        return None
    try:
        _, pos = RequestHeader.decode_from(frame, 0, request_header_version(key, version))
        fetch, _ = entry.request_cls.decode_from(frame, pos, version)
    except ValueError:
        return None
    has_partitions = any(t.partitions for t in fetch.topics)
    return fetch.max_wait_ms, fetch.min_bytes > 0 and has_partitions, has_partitions


def run_case(port: int, data: bytes, frame: bytes | None) -> tuple[str, str | None]:
    """Send `data` (a sized, mutated frame) and a sentinel.  Returns (what happened, why that is wrong or None):
    "closed", "answered", "unanswered" (Produce acks=0) or "long poll" (a Fetch that decoded with a long wait)."""
    sentinel = sized(frame_of(ApiVersionsRequest, 3, SENTINEL_CORR,
                              ApiVersionsRequest(client_software_name="fuzz", client_software_version="1")))
    api_key = struct.unpack_from(">h", frame)[0] if frame is not None and len(frame) >= 8 else None
    # A mutated Fetch may ask to wait for data for a long time; one second tells a long poll from a hang.
    timeout = 1.0 if api_key == 1 else READ_TIMEOUT
    buf = bytearray()
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data + sentinel)
        except (BrokenPipeError, ConnectionResetError):
            return "closed", None  # closed while we were still sending: the server refused the frame
        try:
            while True:
                answer = read_frame(s, buf)
                if answer is None:
                    break
                answers.append(answer)
                if answer[:4] == _SIZE.pack(SENTINEL_CORR):
                    break
        except TimeoutError:
            wait = fetch_wait(frame)
            if not answers and wait is not None and wait[0] > timeout * 1000:
                # Give up the way an impatient client does, with a reset, so the server drops the wait.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                if wait[1]:
                    return "long poll", None
                if FETCH_WAITS_FOR_NOTHING in KNOWN_BUGS and not wait[2]:
                    return "known bug", None
                return "stuck", "a Fetch with nothing to wait for (no partitions or min_bytes <= 0) waited"
            return "stuck", f"no answer and no close within {timeout:g}s (answers so far: {len(answers)})"
        except ConnectionResetError:
            return "closed", None if not answers else f"reset after {len(answers)} answers"
    if not answers:
        return "closed", None if not buf else f"closed after {len(buf)} bytes of a partial frame"
    if answers[-1][:4] != _SIZE.pack(SENTINEL_CORR):
        return "answered", f"answered {len(answers)} frame(s), then closed before the sentinel's answer"
    if len(answers) == 1:
        if api_key == 0:
            return "unanswered", None  # Produce with acks=0: no answer on the wire
        return "unanswered", "the mutated request got no answer but the connection went on"
    if len(answers) != 2 or frame is None or len(frame) < 8:
        return "answered", f"{len(answers)} answers to one request and a sentinel"
    return "answered", check_answer(answers[0], frame)


class Watchdog(threading.Thread):
    """A well-behaved client: ApiVersions v3 + Metadata v12 on one connection in a loop, every answer checked."""

    def __init__(self, server: LiveServer):
        super().__init__(daemon=True)
        self.server = server
        self.stop_event = threading.Event()
        self.rounds = 0
        self.failures: list[str] = []

    def run(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as s:
                buf = bytearray()
                corr = 0
                while not self.stop_event.is_set():
                    corr += 2
                    av = frame_of(ApiVersionsRequest, 3, corr, ApiVersionsRequest(
                        client_software_name="watchdog", client_software_version="1"))
                    md = frame_of(MetadataRequest, 12, corr + 1, MetadataRequest(
                        topics=None, allow_auto_topic_creation=False))
                    a, m = rpc(s, buf, [av, md])
                    self._check(a, m, corr)
                    self.rounds += 1
        except Exception as e:  # noqa: BLE001  (any failure of the well-behaved client is the finding)
            self.failures.append(f"round {self.rounds}: {type(e).__name__}: {e}")

    def _check(self, a: bytes, m: bytes, corr: int) -> None:
        assert _SIZE.unpack_from(a)[0] == corr, "ApiVersions answer out of order"
        versions = ApiVersionsResponse.decode(a[4:], 3)
        assert versions.error_code == 0
        assert {k.api_key for k in versions.api_keys} >= {3, 18}
        header, pos = ResponseHeader.decode_from(m, 0, 1)
        assert header.correlation_id == corr + 1, "Metadata answer out of order"
        md = MetadataResponse.decode(m[pos:], 12)
        assert md.cluster_id == self.server.cluster_id
        assert [(b.node_id, b.port) for b in md.brokers] == [(1, self.server.port)]
        # (Which topics exist is up to the fuzz: CreateTopics and DeleteTopics seeds name the same topic.)
        assert all(t.error_code == 0 for t in md.topics)


def handler_crashes(server: LiveServer) -> list[str]:
    """Log lines that show a server bug: a handler raising, or a response its own version cannot carry."""
    crashes = []
    for line in Path(server.stderr_path).read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        name = event.get("event", "")
        if (name.startswith(("request handler failed", "request handler returned", "request handler's"))
                or name == "response_encode_failed" or event.get("level") in ("error", "critical")):
            if (event.get("api"), event.get("version")) not in KNOWN_BUGS:
                crashes.append(line)
    return crashes


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS line")


def create_topic(server: LiveServer) -> uuid.UUID:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        buf = bytearray()
        topic = CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)
        rpc(s, buf, [frame_of(CreateTopicsRequest, 7, 1, CreateTopicsRequest(topics=[topic], timeout_ms=5000))])
        (answer,) = rpc(s, buf, [frame_of(MetadataRequest, 12, 2, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False))])
    _, pos = ResponseHeader.decode_from(answer, 0, 1)
    (t,) = MetadataResponse.decode(answer[pos:], 12).topics
    assert t.error_code == 0, f"topic {TOPIC} was not created"
    return t.topic_id


# ---------------------------------------------------------------------------------------------------- tests


# Bugs this fuzz found in handlers owned elsewhere, as data.  Each has a strict xfail below, so a fix turns
# into a failure that asks for its entry to be removed (and the fuzz oracle becomes strict again).
FETCH_WAITS_FOR_NOTHING = ("Fetch", "waits with nothing to wait for")
KNOWN_BUGS: dict[tuple[str, object], str] = {}


def _seed_params():
    params = []
    for entry in sorted(registry().values(), key=lambda e: e.api_key):
        for version in range(entry.min_version, entry.max_version + 1):
            bug = KNOWN_BUGS.get((entry.name, version))
            marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
            params.append(pytest.param(entry.name, version, marks=marks, id=f"{entry.name}-v{version}"))
    return params


@pytest.fixture(scope="module")
def topic_id(server) -> uuid.UUID:
    return create_topic(server)


@pytest.mark.parametrize(("api", "version"), _seed_params())
def test_seed_request_is_answered_well_formed(server, topic_id, api, version):
    """Without mutation every seed is answered well-formed: the fuzz starts from requests that reach handlers."""
    (port, frame), = [(server.port if kind == "broker" else server.controller_port, frame)
                      for a, v, kind, frame in seeds(topic_id) if (a, v) == (api, version)]
    outcome, problem = run_case(port, sized(frame), frame)
    assert problem is None, f"seed {api} v{version}: {problem}; frame {frame.hex()}"
    assert outcome == "answered", f"seed {api} v{version}: {outcome}"


def _fetch_now(server: LiveServer, body) -> float:
    """Seconds until a Fetch is answered (and the answer checked)."""
    from kjbod.protocol.generated import FetchRequest

    frame = frame_of(FetchRequest, 12, 9, body)
    with socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT) as s:
        started = time.monotonic()
        (answer,) = rpc(s, bytearray(), [frame])
        elapsed = time.monotonic() - started
    assert check_answer(answer, frame) is None
    return elapsed


def test_fetch_with_min_bytes_0_answers_at_once(server, topic_id):
    from kjbod.protocol.generated import FetchRequest as F

    partition = F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1000)
    topics = [F.FetchTopic(topic=TOPIC, topic_id=topic_id, partitions=[partition])]
    assert _fetch_now(server, F(max_wait_ms=2000, min_bytes=0, topics=topics)) < 1.0


def test_fetch_without_partitions_answers_at_once(server):
    from kjbod.protocol.generated import FetchRequest as F

    assert _fetch_now(server, F(max_wait_ms=2000, min_bytes=1, topics=[])) < 1.0


def test_mutated_and_random_frames_close_one_connection_never_the_server(server, topic_id):
    rng = random.Random(FUZZ_SEED)
    watchdog = Watchdog(server)
    watchdog.start()
    outcomes: dict[str, int] = {}
    failures = []
    cases = 0
    try:
        plan = []
        for api, version, kind, frame in seeds(topic_id):
            port = server.port if kind == "broker" else server.controller_port
            for _ in range(CASES_PER_VERSION):
                how, mutated = mutate(frame, rng)
                plan.append((f"{api} v{version} {how}", port, mutated))
        keys = sorted(registry())
        for _ in range(RANDOM_FRAMES):
            how, frame = random_frame(rng, keys)
            plan.append((how, server.port, frame))
        for label, port, frame in plan:
            cases += 1
            outcome, problem = run_case(port, sized(frame), frame)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if problem is not None:
                failures.append(f"{label}: {problem}; frame {frame.hex()}")
            if not server.running:
                failures.append(f"server died after {label}; frame {frame.hex()}")
                break
    finally:
        watchdog.stop_event.set()
        watchdog.join(10)
    sys.stderr.write(f"fuzz outcomes: {outcomes}, watchdog rounds: {watchdog.rounds}\n")
    assert not failures, f"{len(failures)} of {cases} cases (seed {FUZZ_SEED}) misbehaved:\n" + "\n".join(
        failures[:20])
    assert cases >= 2000
    # Both kinds of behaviour were exercised: the mutations are neither all fatal nor all harmless.
    assert outcomes.get("closed", 0) >= 500 and outcomes.get("answered", 0) >= 100, outcomes
    assert server.running
    assert not watchdog.failures, watchdog.failures
    assert watchdog.rounds >= 100, f"the well-behaved connection only completed {watchdog.rounds} rounds"
    crashes = handler_crashes(server)
    assert not crashes, f"{len(crashes)} handler crashes, first: {crashes[0]}"


SIZE_CASES = [
    ("negative size", struct.pack(">i", -1) + b"\x00" * 16),
    ("most negative size", struct.pack(">i", -(1 << 31)) + b"\x00" * 16),
    ("zero size", struct.pack(">i", 0)),
    ("size too short for a header", struct.pack(">i", 3) + b"\x00\x12\x00"),
    ("one byte over socket.request.max.bytes", struct.pack(">i", MAX_REQUEST + 1) + b"\x00" * 1024),
    ("2 GiB", struct.pack(">i", 0x7FFF_FFFF) + b"\x00" * 1024),
]


@pytest.mark.parametrize(("label", "data"), SIZE_CASES, ids=[c[0] for c in SIZE_CASES])
def test_bad_size_prefixes_close_the_connection(server, label, data):
    with socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT) as s:
        try:
            s.sendall(data)
            got = s.recv(65536)
        except ConnectionResetError:
            got = b""
    assert got == b"", f"{label}: answered {got.hex()}"
    assert server.running


def test_a_request_of_exactly_the_limit_is_served(server):
    # The router ignores bytes after a body (as Kafka does), so padding makes a valid request of any size.
    frame = frame_of(MetadataRequest, 12, 7, MetadataRequest(topics=[], allow_auto_topic_creation=False))
    frame += bytes(MAX_REQUEST - len(frame))
    with socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT) as s:
        (answer,) = rpc(s, bytearray(), [frame])
    assert check_answer(answer, frame) is None


def test_two_gib_size_prefixes_are_refused_without_allocating(server):
    pid = server.process.pid
    before = vm_rss_kib(pid)
    junk = bytes(256 * 1024)
    for _ in range(16):
        with socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT) as s:
            try:
                s.sendall(struct.pack(">i", 0x7FFF_FFFF) + junk)
                assert s.recv(65536) == b""
            except ConnectionResetError:
                pass
    time.sleep(0.2)
    after = vm_rss_kib(pid)
    assert server.running
    # 16 connections claiming 2 GiB each: anything that buffered toward those sizes would show up in megabytes.
    assert after - before < 16 * 1024, f"VmRSS grew from {before} KiB to {after} KiB"


def test_half_frames_then_hang_up_leave_the_server_serving(server):
    frame = sized(frame_of(ApiVersionsRequest, 3, 1, ApiVersionsRequest(client_software_name="a",
                                                                        client_software_version="1")))
    for cut in range(1, len(frame)):
        with socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT) as s:
            s.sendall(frame[:cut])
    with socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT) as s:
        (answer,) = rpc(s, bytearray(), [frame[4:]])
    assert check_answer(answer, frame[4:]) is None
