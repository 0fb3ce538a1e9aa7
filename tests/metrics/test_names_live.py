"""Every required name with its label set, as Strimzi's rules spell them, on a live node; the dashboard's queries
name only what the endpoint exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from live import free_port, start_server

from tests.datapath.support import RawClient, create_topic, produce

from .expected_names import BROKER, CONTROLLER, MOVES
from .scrape import labelled, scrape
from .test_endpoint_live import _batch

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "kjbod-jbod.json"
METRIC = re.compile(r"\b(?:kafka|kjbod)_[a-z0-9_]+\b")


def queries(dashboard: dict) -> list[str]:
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


def test_required_names_and_label_sets_and_the_dashboard(tmp_path):
    port = free_port()
    server = start_server(tmp_path / "node", log_dir_count=2, overrides={"kjbod.metrics.listener": f"127.0.0.1:{port}"})
    try:
        with RawClient.to(server) as client:
            create_topic(client, "named", 2)
            assert produce(client, "named", 0, _batch(0, 3, 10), acks=1).error_code == 0
        samples = scrape(port)
    finally:
        code = server.stop()
    assert code == 0, server.stderr()

    missing = []
    for name, labels, source in BROKER + CONTROLLER:
        if labels not in [frozenset(ls) for ls in labelled(samples, name)]:
            missing.append(f"{name}{sorted(labels)} ({source}); scraped with {labelled(samples, name)[:2]}")
    assert not missing, "\n".join(missing)
    assert {d["logDirectory"] for d in labelled(samples, "kafka_log_logmanager_logdirectoryoffline")} == {
        str(d) for d in server.log_dirs}
    assert {d["quantile"] for d in labelled(samples, "kafka_log_logflushstats_logflushrateandtimems")} == {
        "0.50", "0.75", "0.95", "0.98", "0.99", "0.999"}

    dashboard = json.loads(DASHBOARD.read_text())
    exported = {name for name, _ in samples} | set(MOVES)
    exported |= {n.removesuffix("_bucket") for n in exported}
    used = {m for q in queries(dashboard) for m in METRIC.findall(q)}
    assert used, "the dashboard has no queries"
    assert used <= exported, f"the dashboard queries metrics the endpoint does not export: {sorted(used - exported)}"
    # Everything the issue asks the dashboard to show has a panel.
    for needed in ("kjbod_log_dir_total_bytes", "kjbod_log_dir_reserve_bytes", "kjbod_log_dir_state",
                   "kjbod_log_dir_operation_seconds_bucket", "kjbod_replica_move_eta_seconds",
                   "kafka_server_kafkaserver_queuedreplicatodirassignments",
                   "kafka_log_logmanager_offlinelogdirectorycount", "kafka_controller_kafkacontroller_offlinepartitionscount",
                   "kafka_server_replicamanager_underreplicatedpartitions"):
        assert needed in used, needed
