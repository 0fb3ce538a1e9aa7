"""KIP-919 on a real combined node (broker and controller in one process): the controller registers with
itself, so DescribeCluster with EndpointType 2 on its controller listener lists it from its RegisterControllerRecord
(and names it the controller); the same request on the broker listener is MISMATCHED_ENDPOINT_TYPE; its metadata
log holds the registration and NoOpRecords written while idle (metadata.max.idle.interval.ms)."""

from __future__ import annotations

import json
import subprocess
import time

from datapath.support import RawClient
from live import COMMAND

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import DescribeClusterRequest


def wait_for(check, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (got := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        time.sleep(0.05)
    return got


def test_a_combined_node_lists_itself_from_its_registration(kjbod_server_factory):
    server = kjbod_server_factory(overrides={"metadata.max.idle.interval.ms": "100"})
    with RawClient(server.host, server.controller_port) as ctl:
        def listed():
            r = ctl.call(DescribeClusterRequest(endpoint_type=2), 1)
            return r if r.brokers else None

        response = wait_for(listed, "the node's own registration")
        assert response.error_code == 0 and response.controller_id == 1
        assert [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers] == [
            (1, "127.0.0.1", server.controller_port, None)]
    with RawClient(server.host, server.port) as raw:
        assert raw.call(DescribeClusterRequest(endpoint_type=2), 1).error_code == E.MISMATCHED_ENDPOINT_TYPE

    def payloads():
        segments = sorted(str(p) for p in server.metadata_dir.rglob("__cluster_metadata-0/*.log"))
        done = subprocess.run([*COMMAND, "dump-log", "--cluster-metadata-decoder", "--files", ",".join(segments)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return [json.loads(x.partition(" payload: ")[2]) for x in done.stdout.splitlines() if " payload: {" in x]

    def with_no_ops():
        got = payloads()
        return got if sum(x["type"] == "NO_OP_RECORD" for x in got) >= 3 else None

    found = wait_for(with_no_ops, "NoOpRecords in the idle node's log")
    (mine,) = [x["data"] for x in found if x["type"] == "REGISTER_CONTROLLER_RECORD"]
    assert mine["controllerId"] == 1 and mine["endPoints"] == [
        {"name": "CONTROLLER", "host": "127.0.0.1", "port": server.controller_port, "securityProtocol": 0}]
