"""connection_creation_rate quotas of ip entities (kjbod.server.quotas.ConnectionQuotas.ip_throttle_ms) in
process with a clock of their own, and live: connections over their IP's rate are held, then closed unserved;
removing the quota lifts it."""

from __future__ import annotations

import socket
import struct

from live import LiveServer, kjbod_server_factory  # noqa: F401

from kjbod.admin import SyncAdminClient
from kjbod.server.quotas import ConnectionLimits, ConnectionQuotas


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def quotas_with(image: dict, clock: Clock, samples: int = 2) -> ConnectionQuotas:
    q = ConnectionQuotas(ConnectionLimits(), ["PLAINTEXT"], None, clock=clock, quota_samples=samples,
                         quota_window_seconds=1)
    q.client_quotas = lambda: image
    return q


def test_an_ips_rate_is_held_as_kafka_measures_it() -> None:
    clock = Clock()
    image = {(("ip", "10.0.0.1"),): {"connection_creation_rate": 3.0}}
    q = quotas_with(image, clock)
    # two samples of 1 s: at least one window counted, so three at once are within 3/s
    assert [q.ip_throttle_ms("10.0.0.1") for _ in range(3)] == [0, 0, 0]
    assert q.ip_throttle_ms("10.0.0.1") == 333  # 4/s: a third over the bound for a 1 s window
    assert q.ip_throttle_ms("10.0.0.1") == 333  # the refused one was not counted
    assert q.ip_throttle_ms("::ffff:10.0.0.1") == 333  # the same address, IPv4-mapped
    assert q.ip_throttle_ms("10.0.0.2") == 0  # no quota for this one, nor a default
    clock.now += 2.5  # the samples expired
    assert q.ip_throttle_ms("10.0.0.1") == 0
    assert q.ip_throttled == 3


def test_the_ip_default_applies_to_ips_without_their_own() -> None:
    clock = Clock()
    image = {(("ip", None),): {"connection_creation_rate": 1.0},
             (("ip", "10.0.0.9"),): {"connection_creation_rate": 100.0},
             (("client-id", "x"),): {"producer_byte_rate": 5.0}}
    q = quotas_with(image, clock)
    assert q.ip_throttle_ms("10.0.0.5") == 0
    assert q.ip_throttle_ms("10.0.0.5") == 1000  # at most one window
    assert [q.ip_throttle_ms("10.0.0.9") for _ in range(10)] == [0] * 10
    image.clear()
    q.client_quotas = lambda: {}
    assert q.ip_throttle_ms("10.0.0.5") == 0  # removed: lifted at once


def _served(server: LiveServer) -> bool:
    """Opens a connection and asks ApiVersions v0: True when answered, False when closed unanswered."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
        s.sendall(struct.pack(">i", len(body)) + body)
        try:
            data = s.recv(4)
        except ConnectionResetError:
            return False
        return len(data) == 4


def test_connections_over_the_ips_rate_are_closed_unserved(kjbod_server_factory) -> None:  # noqa: F811
    server = kjbod_server_factory(overrides={"quota.window.num": "2", "quota.window.size.seconds": "1"})
    with SyncAdminClient(server.bootstrap, request_timeout=10) as admin:
        assert admin.alter_client_quotas([({"ip": "127.0.0.1"}, {"connection_creation_rate": 2})]) == [(0, None)]
        outcomes = [_served(server) for _ in range(8)]
        assert outcomes[:2] == [True, True] and False in outcomes, outcomes
        assert admin.alter_client_quotas([({"ip": "127.0.0.1"}, {"connection_creation_rate": None})]) == [(0, None)]
    assert all(_served(server) for _ in range(8))
