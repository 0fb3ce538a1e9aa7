"""A three-controller KRaft quorum (`kjbod cluster up --controllers 3`, one broker) as Kafka 4.3 runs one: every
controller registers with the active one (KIP-919), so DescribeCluster with EndpointType 2 on any controller
lists all three from their RegisterControllerRecords; the idle cluster's metadata log gains NoOpRecords every
metadata.max.idle.interval.ms, and the broker's metadata offset (what it has fetched, as DescribeQuorum shows
the observer) keeps moving with them; the first records are the bootstrap levels in a metadata transaction; bad
registrations get an error code, and a controller-only API on a broker listener closes the connection."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from datapath.support import RawClient
from live import COMMAND

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    ControllerRegistrationRequest,
    DescribeClusterRequest,
    DescribeQuorumRequest,
)
from kjbod.protocol.generated import describe_quorum_request as dq
from kjbod.protocol.generated.controller_registration_request import Feature, Listener
from tests.metrics.scrape import scrape, value

from .conftest import Cluster, running_cluster, wait_for

CONTROLLERS = ("controller-1", "controller-2", "controller-3")
IDLE_MS = 200


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    settings = {"controller.quorum.election.timeout.ms": "500", "controller.quorum.fetch.timeout.ms": "1500",
                "metadata.max.idle.interval.ms": str(IDLE_MS)}
    # --release-version: `kjbod format` leaves the bootstrap levels for the first active controller to write
    with running_cluster(tmp_path_factory.mktemp("quorum"), settings, brokers=1, log_dirs=1, controllers=3,
                         release_version="4.2") as cluster:
        yield cluster


def controller_address(cluster: Cluster, name: str) -> tuple[str, int, int]:
    """(host, port, node id) of a controller's CONTROLLER listener, from its server.properties."""
    props = cluster.properties(name)
    listener = next(x for x in props["listeners"].split(",") if x.startswith("CONTROLLER://"))
    host, _, port = listener.partition("//")[2].rpartition(":")
    return host, int(port), int(props["node.id"])


def describe_controllers(cluster: Cluster, name: str):
    host, port, _ = controller_address(cluster, name)
    with RawClient(host, port, timeout=30) as client:
        return client.call(DescribeClusterRequest(endpoint_type=2), 1)


def leader(cluster: Cluster) -> str:
    """The controller that leads the quorum, as every controller's DescribeCluster names it."""
    ids = {controller_address(cluster, n)[2]: n for n in CONTROLLERS}

    def agreed() -> str | None:
        named = {describe_controllers(cluster, n).controller_id for n in CONTROLLERS}
        return ids.get(named.pop()) if len(named) == 1 else None

    return wait_for(agreed, "one leader named by every controller")


def metadata_dump(cluster: Cluster, name: str) -> list[dict]:
    """`kjbod dump-log --cluster-metadata-decoder` of a controller's metadata log: its records' payloads."""
    segments = sorted(str(p) for p in cluster.homes[name].rglob("__cluster_metadata-0/*.log"))
    done = subprocess.run([*COMMAND, "dump-log", "--cluster-metadata-decoder", "--files", ",".join(segments)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line.partition(" payload: ")[2]) for line in done.stdout.splitlines() if " payload: {" in line]


def test_describe_cluster_lists_every_controller_from_its_registration(quorum: Cluster) -> None:
    expected = {controller_address(quorum, n)[2]: controller_address(quorum, n)[:2] for n in CONTROLLERS}

    def all_registered(name: str) -> bool:
        response = describe_controllers(quorum, name)
        listed = {b.broker_id: (b.host, b.port) for b in response.brokers}
        return response.error_code == 0 and all(listed.get(i) == hp for i, hp in expected.items())

    for name in CONTROLLERS:  # every controller's image has the three registrations
        wait_for(lambda name=name: all_registered(name), f"{name} lists the three controllers")
    response = describe_controllers(quorum, CONTROLLERS[0])
    assert response.endpoint_type == 2 and all(b.rack is None for b in response.brokers)
    # each registration is a RegisterControllerRecord in the log, with this process's listener and features
    records = [r["data"] for r in metadata_dump(quorum, leader(quorum)) if r["type"] == "REGISTER_CONTROLLER_RECORD"]
    by_id = {r["controllerId"]: r for r in records}
    assert set(expected) <= set(by_id)
    for cid, (host, port) in expected.items():
        rec = by_id[cid]
        assert rec["zkMigrationReady"] is False
        assert rec["endPoints"] == [{"name": "CONTROLLER", "host": host, "port": port, "securityProtocol": 0}]
        assert {f["name"] for f in rec["features"]} >= {"metadata.version", "kraft.version"}


def test_an_idle_cluster_writes_no_ops_and_the_brokers_metadata_offset_follows(quorum: Cluster) -> None:
    name = leader(quorum)
    host, port, _ = controller_address(quorum, name)
    broker_id = quorum.broker_ids[0]
    body = DescribeQuorumRequest(topics=[dq.TopicData(topic_name="__cluster_metadata",
                                                      partitions=[dq.PartitionData(partition_index=0)])])

    def broker_offset() -> int | None:
        with RawClient(host, port, timeout=30) as client:
            part = client.call(body, 2).topics[0].partitions[0]
        return next((o.log_end_offset for o in part.observers if o.replica_id == broker_id), None)

    first = wait_for(broker_offset, "the broker among the observers")
    # nothing is written by anyone here: only NoOpRecords move the end of the log, and the broker follows them
    wait_for(lambda: (broker_offset() or 0) >= first + 5, "the broker's metadata offset moving on")
    # ... and so does what its heartbeats report (CurrentMetadataOffset): the log's end less the lag the active
    # controller shows for it
    metrics = int(quorum.properties(name)["kjbod.metrics.listener"].rpartition(":")[2])

    def heartbeat_offset() -> int:
        samples = scrape(metrics)
        end = value(samples, "kafka_server_raftmetrics_log_end_offset")
        return int(end - 1 - value(samples, "kjbod_controller_broker_metadata_lag_records", broker=str(broker_id)))

    wait_for(lambda: heartbeat_offset() >= first + 5, "the broker's heartbeats reporting a later metadata offset")
    payloads = metadata_dump(quorum, name)
    assert sum(p["type"] == "NO_OP_RECORD" and p["data"] == {} for p in payloads) >= 5
    # the first records: the bootstrap levels in one metadata transaction (KIP-868), as Kafka 4.3 writes them
    assert payloads[0] == {"type": "BEGIN_TRANSACTION_RECORD", "version": 0, "data": {"name": "Bootstrap records"}}
    end = next(i for i, p in enumerate(payloads) if p["type"] == "END_TRANSACTION_RECORD")
    levels = {p["data"]["name"]: p["data"]["featureLevel"] for p in payloads[1:end] if p["type"] ==
              "FEATURE_LEVEL_RECORD"}
    assert levels["metadata.version"] == 29  # 4.2-IV1


def test_registration_bad_inputs_and_the_wrong_listener(quorum: Cluster) -> None:
    name = leader(quorum)
    host, port, _ = controller_address(quorum, name)

    def request(cid: int, protocol: int = 0) -> ControllerRegistrationRequest:
        return ControllerRegistrationRequest(
            controller_id=cid, incarnation_id=uuid.uuid4(), zk_migration_ready=False,
            listeners=[Listener(name="CONTROLLER", host="127.0.0.1", port=1, security_protocol=protocol)],
            features=[Feature(name="metadata.version", min_supported_version=17, max_supported_version=29)])

    with RawClient(host, port, timeout=30) as client:
        bad = client.call(request(4000, protocol=7), 0)
        assert bad.error_code == E.INVALID_REQUEST
        assert bad.error_message == "controller 4000: listener CONTROLLER has unknown security protocol id 7"
        # an id that is not a voter (a controller observing the quorum) registers, as in Kafka
        assert client.call(request(4000), 0).error_code == 0
    listed = wait_for(lambda: {b.broker_id: b.port for b in describe_controllers(quorum, name).brokers}.get(4000),
                      "the observer's registration listed")
    assert listed == 1
    other = next(n for n in CONTROLLERS if n != name)
    h2, p2, _ = controller_address(quorum, other)
    with RawClient(h2, p2, timeout=30) as client:
        assert client.call(request(4001), 0).error_code == E.NOT_CONTROLLER
    with RawClient("127.0.0.1", quorum.broker_port(quorum.broker_ids[0]), timeout=30) as client:
        client.send(request(4002), 0)  # a controller-only API on a broker listener
        assert client.closed_by_server()
