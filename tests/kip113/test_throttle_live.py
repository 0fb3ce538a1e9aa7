"""The intra-broker throttle on real moves, changed at runtime with IncrementalAlterConfigs.

A 200 MB move at 50 MB/s should take 4 s, a 30 MB move at 10 MB/s 3 s (the smaller move keeps the test short;
tools/bench/kip113.py measures 10 and 50 MB/s exactly, to within 3 %). The bounds here are generous because this
is a shared VM; a throttle that is ignored, or applied per thread instead of per broker, still fails them.
"""

from __future__ import annotations

import time
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import NewTopic
    from kafka.errors import NoError

from kjbod.admin import ConfigResource, ConfigSource, SyncAdminClient

from .livehelp import THROTTLE, current_dir, fill_offline, kafka_admin, replicas, set_throttle, wait_moved

pytestmark = pytest.mark.slow
MB = 1_000_000


def timed_move(admin, topic: str, dest: str) -> float:
    started = time.monotonic()
    assert list(admin.alter_replica_log_dirs({(topic, 0, 1): dest}).values()) == [NoError]
    wait_moved(admin, topic, 0, dest, timeout=120)
    return time.monotonic() - started


@pytest.mark.parametrize("size_mb,rate_mb", [(200, 50), (30, 10)])
def test_move_takes_size_over_rate(size_mb, rate_mb, kjbod_server_factory):
    server = kjbod_server_factory(overrides={"log.segment.bytes": str(16 << 20)})
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("thr", 1, 1)])
    admin.close()
    fill_offline(server, "thr", [0], size_mb * MB, segment_bytes=16 << 20)
    admin = kafka_admin(server)
    size = replicas(admin, {"thr": [0]})[("thr", 0, False)]["size"]
    set_throttle(admin, str(rate_mb * MB))
    source = current_dir(admin, "thr", 0)
    dest = next(str(d) for d in server.log_dirs if str(d) != source)
    elapsed = timed_move(admin, "thr", dest)
    expected = size / (rate_mb * MB)
    assert expected * 0.9 <= elapsed <= expected * 1.5 + 1.5, (elapsed, expected)
    admin.close()


def test_rate_change_mid_move_takes_effect(kjbod_server_factory):
    server = kjbod_server_factory(overrides={"log.segment.bytes": str(8 << 20)})
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("chg", 1, 1)])
    admin.close()
    fill_offline(server, "chg", [0], 60 * MB, segment_bytes=8 << 20)
    admin = kafka_admin(server)
    set_throttle(admin, str(5 * MB))
    source = current_dir(admin, "chg", 0)
    dest = next(str(d) for d in server.log_dirs if str(d) != source)
    started = time.monotonic()
    admin.alter_replica_log_dirs({("chg", 0, 1): dest})
    time.sleep(1.5)
    slow = replicas(admin, {"chg": [0]})[("chg", 0, True)]["size"]
    assert 3 * MB <= slow <= 12 * MB, slow  # about 7.5 MB at 5 MB/s
    set_throttle(admin, str(100 * MB))
    wait_moved(admin, "chg", 0, dest, timeout=60)
    elapsed = time.monotonic() - started
    # At 5 MB/s throughout this would take 12 s; at 100 MB/s after 1.5 s, about 2 s.
    assert elapsed < 6, elapsed
    # The broker reports the dynamic value it applied, with its source.
    with SyncAdminClient(server.bootstrap, request_timeout=15) as kjbod_admin:
        entry = kjbod_admin.describe_configs([ConfigResource.broker(1)], keys=[THROTTLE])[
            ConfigResource.broker(1)][THROTTLE]
    assert entry.value == str(100 * MB) and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG
    admin.close()
