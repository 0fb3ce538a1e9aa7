"""/metrics on a `kjbod cluster up` cluster: each node's endpoint printed and serving its figures, and KIP-858's
QueuedReplicaToDirAssignments above zero while a broker's assignments wait for the controller, zero after."""

from __future__ import annotations

import os
import signal
import time

from datapath.support import RawClient, create_topic

from tests.metrics.scrape import labelled, scrape, value

from .conftest import Cluster, wait_for

QUEUE = "kafka_server_kafkaserver_queuedreplicatodirassignments"
# The controller is held (SIGSTOP) for less than the cluster's broker session timeout (2 s), so nobody is fenced.
HOLD_S = 1.2


def metrics_port(cluster: Cluster, name: str) -> int:
    return int(cluster.properties(name)["kjbod.metrics.listener"].rpartition(":")[2])


def test_cluster_up_prints_every_nodes_metrics_and_they_show_its_figures(cluster):
    for name in cluster.homes:
        listener = cluster.properties(name)["kjbod.metrics.listener"]
        assert f"metrics of {name}: http://{listener}/metrics" in cluster.up_output
    for b in cluster.broker_ids:
        samples = scrape(metrics_port(cluster, f"broker-{b}"))
        dirs = cluster.properties(f"broker-{b}")["log.dirs"].split(",")
        assert {d["log_dir"] for d in labelled(samples, "kjbod_log_dir_total_bytes")} == set(dirs)
        assert all(value(samples, "kjbod_log_dir_total_bytes", log_dir=d) > 0 for d in dirs)
        assert value(samples, "kafka_log_logmanager_offlinelogdirectorycount") == 0
    controller = scrape(metrics_port(cluster, "controller"))
    assert value(controller, "kafka_controller_kafkacontroller_activebrokercount") == 3
    assert value(controller, "kafka_controller_kafkacontroller_fencedbrokercount") == 0
    assert {d["broker"] for d in labelled(controller, "kjbod_controller_broker_metadata_lag_records")} == {
        "1", "2", "3"}
    assert not labelled(controller, "kafka_log_logmanager_offlinelogdirectorycount")  # no data dirs there


def test_the_assignments_queue_is_above_zero_while_they_wait_and_zero_after(cluster):
    """A new topic's replicas are placed by each broker and reported to the controller about 100 ms later (the
    batch delay); the controller, stopped right after it answered CreateTopics, cannot confirm them.  Whether a
    broker has already sent its report by then is a race, so this tries a few topics."""
    controller = cluster.pid("controller")
    ports = {b: metrics_port(cluster, f"broker-{b}") for b in cluster.broker_ids}
    seen: dict[int, float] = {}
    for attempt in range(5):
        with RawClient("127.0.0.1", cluster.broker_port(1)) as raw:
            created = create_topic(raw, f"queued-{attempt}", 30)
            os.kill(controller, signal.SIGSTOP)
        try:
            assert created.error_code == 0, created.error_message
            deadline = time.monotonic() + HOLD_S
            while not seen and time.monotonic() < deadline:
                seen = {b: q for b, port in ports.items() if (q := value(scrape(port), QUEUE)) > 0}
        finally:
            os.kill(controller, signal.SIGCONT)
        if seen:
            break
    assert seen, "no broker ever had an assignment waiting for the stopped controller"
    wait_for(lambda: all(value(scrape(port), QUEUE) == 0 for port in ports.values()),
             "every broker's assignments confirmed once the controller runs again")
