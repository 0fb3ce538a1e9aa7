"""Cordoning below and at metadata.version 4.3-IV0 on a real node (`kjbod serve`, formatted with `kjbod format
--release-version 4.2`), driven the way kafka-configs.sh and kafka-features.sh drive it.

Kafka 4.3's rules: below 4.3-IV0 the broker accepts `cordoned.log.dirs` and still keeps new replicas out of the
dir, but reports IsCordoned false and never sends the cordon to the controller, which writes no record of it;
`kjbod features upgrade --release-version 4.3` turns it on, and the next heartbeat carries it into the metadata
log (BrokerRegistrationChangeRecord v3, read back with `kjbod dump-log`)."""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from live import kafka_uuid, read_meta_properties

from kjbod.admin import SyncAdminClient
from kjbod.cli.record_json import uuid_text

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

pytestmark = pytest.mark.slow

KJBOD = [sys.executable, "-m", "kjbod"]


def wait_for(condition: Callable[[], object], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.1)


def kjbod(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KJBOD, *args], capture_output=True, text=True, timeout=120)


def cordoned(server) -> dict[str, bool | None]:
    with SyncAdminClient(server.bootstrap, request_timeout=15) as admin:
        return {d.path: d.is_cordoned for d in admin.describe_log_dirs([1], [])[1]}


def cordon_payloads(server) -> list[str]:
    segments = sorted(Path(server.metadata_dir).glob("__cluster_metadata-0/*.log"))
    done = kjbod("dump-log", "--cluster-metadata-decoder", "--files", ",".join(map(str, segments)))
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    return [line.split("payload: ", 1)[1] for line in done.stdout.splitlines() if "cordonedLogDirs" in line]


def test_a_cordon_below_4_3_iv0_stays_on_the_broker_until_the_upgrade(kjbod_server_factory):
    server = kjbod_server_factory(log_dir_count=2, format_args=["--release-version", "4.2"])
    dirs = [str(d) for d in server.log_dirs]
    first_id = kafka_uuid(read_meta_properties(Path(dirs[0]))["directory.id"])
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        result = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                                     configs={"cordoned.log.dirs": dirs[0]})], incremental=True)
        assert result == {"broker": {"1": "OK"}}, result  # accepted, as Kafka's broker accepts it

        # The broker honours it for its own choice of dir, but says nothing of it: IsCordoned false, no record.
        admin.create_topics([NewTopic("below", 4, 1)])
        wait_for(lambda: len(list(Path(dirs[1]).glob("below-*"))) == 4, "the four replicas are created")
        assert list(Path(dirs[0]).glob("below-*")) == []
        assert cordoned(server) == {dirs[0]: False, dirs[1]: False}
        assert cordon_payloads(server) == []

        up = kjbod("features", "--bootstrap-server", server.bootstrap, "upgrade", "--release-version", "4.3")
        assert (up.returncode, up.stdout) == (0, "metadata.version was upgraded to 30.\n"), up.stderr
        wait_for(lambda: cordoned(server) == {dirs[0]: True, dirs[1]: False}, "DescribeLogDirs says IsCordoned")
        expected = ('{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":3,"data":{"brokerId":1,"brokerEpoch":',
                    f'"cordonedLogDirs":["{uuid_text(first_id)}"]}}}}')
        wait_for(lambda: any(p.startswith(expected[0]) and p.endswith(expected[1]) for p in cordon_payloads(server)),
                 "the next heartbeat's cordon is in the metadata log")
    finally:
        admin.close()
