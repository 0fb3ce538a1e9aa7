"""The metrics pieces on their own: counters, quantiles, the endpoint's HTTP answers, and bad settings."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace
from typing import Any

import pytest

from kjbod.metrics import MetricsEndpoint, NodeMetrics, parse_listener
from kjbod.metrics.counters import BOUNDS_MS, BUCKETS, RequestStats, TopicStats, quantile
from kjbod.server.config import ConfigError, build_config
from tests.test_cli_serve import assert_one_line_error, kjbod, write_config

PRODUCE_V9 = (0 << 16) | 9


def test_request_stats_count_per_api_and_version_and_ignore_keys_out_of_range():
    stats = RequestStats()
    stats.handled(PRODUCE_V9, 0.0, 0.002)
    stats.handled(PRODUCE_V9, 0.0, 0.002)
    stats.handled((1 << 16) | 12, 0.0, 0.0)
    stats.handled(-5, 0.0, 0.0)  # a negative api key
    stats.handled(200 << 16, 0.0, 0.0)  # beyond the table
    assert stats.requests[(0 << 5) | 9] == 2 and stats.requests[(1 << 5) | 12] == 1
    assert sum(stats.requests) == 3
    # 2 ms falls in the bucket bounded by 2.5 ms
    assert stats.local[0 * BUCKETS + BOUNDS_MS.index(2.5)] == 2
    stats.sent_batch([PRODUCE_V9, PRODUCE_V9], read_at=1.0, write_started=1.004, written=1.005)
    assert stats.total[0 * BUCKETS + BOUNDS_MS.index(5.0)] == 2  # 5 ms from read to written
    assert stats.send[0 * BUCKETS + BOUNDS_MS.index(1.0)] == 2  # 1 ms of writing
    assert stats.remote[0] == 2  # answered at once: no remote wait


def test_quantiles_interpolate_within_the_bucket():
    counts = [0] * (len(BOUNDS_MS) + 1)
    assert quantile(counts, BOUNDS_MS, 0.99) == 0.0
    counts[BOUNDS_MS.index(10.0)] = 100  # every observation in (5, 10] ms
    assert quantile(counts, BOUNDS_MS, 0.5) == pytest.approx(7.5)
    assert quantile(counts, BOUNDS_MS, 1.0) == pytest.approx(10.0)
    counts[-1] = 100  # half of them above the last bound
    assert quantile(counts, BOUNDS_MS, 0.99) > BOUNDS_MS[-1]


def test_topic_totals_never_go_down_when_a_topic_goes():
    stats = TopicStats(RequestStats())
    stats.produced("a", 100, 10)
    stats.produced("b", 50, 5)
    stats.produce_failed("b", 56)
    stats.fetched("a", 0, 70)
    stats.fetched(None, 3, 0)  # an unknown topic: counted as an error only
    assert stats.requests.errors[1 * 160 + 3 + 1] == 1
    before = stats.all_topics()
    stats.retire_except(["a"])
    after = stats.all_topics()
    assert list(stats.topics) == ["a"]
    assert (after.messages_in, after.bytes_in, after.bytes_out, after.failed_produce, after.total_produce) == (
        before.messages_in, before.bytes_in, before.bytes_out, before.failed_produce, before.total_produce) == (
        15, 150, 70, 1, 3)


def test_listener_settings_are_checked():
    assert parse_listener("127.0.0.1:9100") == ("127.0.0.1", 9100)
    assert parse_listener("[::1]:0") == ("::1", 0)
    props = {"node.id": "1", "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
             "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "log.dirs": "/d"}
    assert build_config(props).kjbod_metrics_listener is None
    assert build_config({**props, "kjbod.metrics.listener": "0.0.0.0:9100"}).kjbod_metrics_listener == "0.0.0.0:9100"
    for bad in ("9100", "host:", "host:99999", "host:port"):
        with pytest.raises(ConfigError, match="kjbod.metrics.listener"):
            build_config({**props, "kjbod.metrics.listener": bad})


def test_a_metrics_port_in_use_is_one_line_exit_2(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = write_config(tmp_path / "server.properties", **{"kjbod.metrics.listener": f"127.0.0.1:{port}"})
        done = kjbod("serve", "-c", str(config))
    line = assert_one_line_error(done)
    assert line == f"kjbod: error: cannot listen on 127.0.0.1:{port} (kjbod.metrics.listener): address already in use"


async def _exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


async def test_the_endpoint_answers_methods_paths_and_garbage_in_http():
    node = SimpleNamespace(metadata=None, node_id=1, handler=SimpleNamespace(entries=None, stats=None))
    metrics = NodeMetrics(node)
    endpoint = MetricsEndpoint(metrics, "127.0.0.1", 0)
    await endpoint.start()
    try:
        ok = await _exchange(endpoint.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        head, _, body = ok.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and b"Content-Type: text/plain; version=0.0.4" in head
        assert b"# TYPE kafka_network_requestmetrics_requests_total counter" in body
        only_head = await _exchange(endpoint.port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert only_head.startswith(b"HTTP/1.1 200 OK") and only_head.endswith(b"\r\n\r\n")
        assert (await _exchange(endpoint.port, b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(
            b"HTTP/1.1 405 Method Not Allowed")
        assert (await _exchange(endpoint.port, b"GET /other HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404 Not Found")
        assert (await _exchange(endpoint.port, b"hello\r\n\r\n")).startswith(b"HTTP/1.1 400 Bad Request")
        # Garbage without an end of head: the connection is dropped after the read timeout or at close, and the
        # endpoint still answers others meanwhile.
        reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
        writer.write(b"\x00" * 1000)
        assert (await _exchange(endpoint.port, b"GET / HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
        writer.close()
    finally:
        await endpoint.close()


class _Transport:
    """Enough of an asyncio transport for a Connection: records what is written."""

    def __init__(self) -> None:
        self.written = bytearray()

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, key: str, default: object = None) -> object:
        return ("127.0.0.1", 1) if key == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def _frame(api_key: int, version: int, correlation_id: int) -> bytes:
    import struct

    body = struct.pack(">hhih", api_key, version, correlation_id, 0) + b"x" * 10
    return struct.pack(">i", len(body)) + body


async def test_a_connection_counts_and_times_replies_answered_at_once_later_and_never():
    from kjbod.server.connection import Connection

    later: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()

    class Handler:
        def handle(self, frame, ctx):
            api_key = int.from_bytes(frame[:2], "big")
            if api_key == 1:
                return later  # a long poll: answered when the future is
            if api_key == 2:
                return None  # no reply (acks=0)
            return b"\x00\x00\x00\x01"

    stats = RequestStats()
    conn = Connection(Handler(), stats=stats)
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(_frame(0, 9, 1) + _frame(0, 9, 2) + _frame(2, 1, 3) + _frame(1, 12, 4) + _frame(0, 9, 5))
    assert (stats.requests[(0 << 5) | 9], stats.requests[(2 << 5) | 1], stats.requests[(1 << 5) | 12]) == (3, 1, 1)
    # The two Produce replies went out at once; the Fetch (and the Produce queued behind it) wait.
    assert sum(stats.total[0:BUCKETS]) == 2 and sum(stats.total[BUCKETS:2 * BUCKETS]) == 0
    await asyncio.sleep(0.01)
    later.set_result([b"\x00\x00\x00\x04"])
    for _ in range(20):
        await asyncio.sleep(0)
    fetch = slice(BUCKETS, 2 * BUCKETS)
    assert sum(stats.total[fetch]) == 1 and sum(stats.remote[fetch]) == 1
    assert sum(stats.total[0:BUCKETS]) == 3  # the last Produce, sent after the Fetch
    assert stats.remote[BUCKETS] == 0, "the fetch's remote wait (10 ms) is not in the first bucket"
    assert sum(stats.local[2 * BUCKETS:3 * BUCKETS]) == 1 and sum(stats.total[2 * BUCKETS:3 * BUCKETS]) == 0
    # 4 replies (size prefix and 4 bytes each), the Fetch's third
    assert bytes(transport.written[16:24]) == b"\x00\x00\x00\x04" * 2 and len(transport.written) == 32
    conn.connection_lost(None)


@pytest.mark.parametrize("fast_path", [True, False])
async def test_a_followers_fetch_counts_as_fetch_follower_on_every_path_of_a_connection(fast_path):
    """The handler says a request is a follower's Fetch (the correlation id stands for its replica id here) while
    the connection hands it over; answered at once or later, on the fast path (a read's frames served as they
    are split) or the general one (through the decoder; the only one while debug logging is on), each is counted
    under FETCH_FOLLOWER, the consumers' fetches under Fetch's own key."""
    from kjbod.metrics.counters import FETCH_FOLLOWER
    from kjbod.server.connection import Connection

    stats = RequestStats()
    later: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()

    class Handler:
        def handle(self, frame, ctx):
            correlation_id = int.from_bytes(frame[4:8], "big")
            if correlation_id >= 10:
                stats.follower_fetch()
            return later if correlation_id == 11 else b"\x00\x00\x00\x01"

    conn = Connection(Handler(), stats=stats)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    conn._debug = not fast_path
    # A follower's answered at once, a consumer's, a follower's long poll, then behind it a follower's and a
    # consumer's (the general path, queued).
    conn.data_received(_frame(1, 12, 10) + _frame(1, 12, 1) + _frame(1, 12, 11) + _frame(1, 12, 12)
                       + _frame(1, 12, 2))
    later.set_result([b"\x00\x00\x00\x04"])
    for _ in range(20):
        await asyncio.sleep(0)
    follower, consumer = slice(FETCH_FOLLOWER * BUCKETS, (FETCH_FOLLOWER + 1) * BUCKETS), slice(BUCKETS, 2 * BUCKETS)
    assert (stats.requests[(FETCH_FOLLOWER << 5) | 12], stats.requests[(1 << 5) | 12]) == (3, 2)
    assert (sum(stats.total[follower]), sum(stats.total[consumer])) == (3, 2)  # every reply sent, timed apart
    assert sum(stats.local[follower]) == 3 and sum(stats.remote[follower]) == 3
    assert stats.count_as == -1
    conn.connection_lost(None)


async def test_a_followers_fetch_answered_by_a_later_is_counted_and_timed_as_one_answered_by_a_future():
    """A reply a callback gives (a Later: a parked follower fetch woken by an append) is written by the Later's
    own completion, with the request's metadata taken from the read's first unpack instead of a second one; it
    counts and times what a future's reply (the sender task's way) does: the request under FETCH_FOLLOWER at its
    version, its local, remote and total times, the same bytes written."""
    from kjbod.metrics.counters import FETCH_FOLLOWER
    from kjbod.server.connection import Connection
    from kjbod.wire.handler import Later

    seen = {}
    for kind in ("future", "later"):
        stats = RequestStats()
        pending: Any = Later() if kind == "later" else asyncio.get_running_loop().create_future()

        class Handler:
            def handle(self, frame, ctx, stats=stats, pending=pending):
                stats.follower_fetch()
                return pending

        conn = Connection(Handler(), stats=stats)
        transport = _Transport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn._debug = False  # the fast path, whatever the tests' log level (the debug log takes the general one)
        conn.data_received(_frame(1, 12, 10))
        await asyncio.sleep(0.01)
        (pending.resolve if kind == "later" else pending.set_result)([b"\x00\x00\x00\x04"])
        for _ in range(20):
            await asyncio.sleep(0)
        follower = slice(FETCH_FOLLOWER * BUCKETS, (FETCH_FOLLOWER + 1) * BUCKETS)
        seen[kind] = (stats.requests[(FETCH_FOLLOWER << 5) | 12], sum(stats.local[follower]),
                      sum(stats.remote[follower]), sum(stats.total[follower]), stats.remote[FETCH_FOLLOWER * BUCKETS],
                      bytes(transport.written), conn.pending)
        conn.connection_lost(None)
    # the remote wait (10 ms) is not in the first bucket
    assert seen["later"] == seen["future"] == (1, 1, 1, 1, 0, b"\x00\x00\x00\x04" * 2, 0)


def test_fetch_is_exported_as_fetch_consumer_fetch_follower_and_both_as_kafka_names_them():
    from kjbod.metrics.collect import NodeCollector
    from kjbod.metrics.counters import FETCH_FOLLOWER

    stats = RequestStats()
    for route, n in (((1 << 16) | 12, 2), ((FETCH_FOLLOWER << 16) | 12, 3), ((FETCH_FOLLOWER << 16) | 15, 1)):
        for _ in range(n):
            stats.handled(route, 0.0, 0.0)
            stats.sent(route, 0.0, 0.0, 0.002)
    stats.error(1, 3)  # UNKNOWN_TOPIC_OR_PARTITION
    collector = NodeCollector(SimpleNamespace(handler=None), stats, None)
    samples = {(s.name, frozenset(s.labels.items())): s.value for family in collector._requests()
               for s in family.samples}

    def get(name: str, **labels: str) -> float | None:
        return samples.get((f"kafka_network_requestmetrics_{name}", frozenset(labels.items())))

    assert get("requests_total", request="FetchConsumer", version="12") == 2
    assert get("requests_total", request="FetchFollower", version="12") == 3
    assert get("requests_total", request="FetchFollower", version="15") == 1
    assert get("requests_total", request="Fetch", version="12") == 5
    assert get("requests_total", request="Fetch", version="15") == 1
    assert get("requests_total", request="FetchConsumer", version="15") is None
    counts = {r: get("totaltimems_count", request=r) for r in ("FetchConsumer", "FetchFollower", "Fetch")}
    assert counts == {"FetchConsumer": 2, "FetchFollower": 4, "Fetch": 6}
    # Errors under the API's own name only, as Kafka's RequestChannel marks them.
    assert get("errors_total", request="Fetch", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert not [k for k in samples if k[0].endswith("errors_total") and ("request", "FetchConsumer") in k[1]]
