"""A live node's /metrics after a known workload: counters equal what was sent, a failed dir shows, bad scrapes.

Requests go over a raw client (tests/datapath/support.py), so the test knows exactly how many of each API reached
the node; each figure is compared as a difference between two scrapes, which leaves out what the start and the
test's own set-up sent.
"""

from __future__ import annotations

import json
import socket

from live import free_port, start_server

from kjbod.storage.records import iter_all_records
from tests.datapath.support import RawClient, create_topic, fetch, produce

from .scrape import get, request_counts, scrape, value, wait_for

TOPIC = "metered"


def _batch(start: int, count: int, size: int) -> bytes:
    from tests.kip113.livehelp import big_batch

    return big_batch(size, count, start)


def _metrics_server(tmp_path, monkeypatch, **overrides: str):
    faults = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(faults))
    port = free_port()
    server = start_server(tmp_path / "node", log_dir_count=2, overrides={
        "kjbod.metrics.listener": f"127.0.0.1:{port}", **overrides})
    return server, port, faults


def test_counters_follow_a_known_workload_and_a_failed_dir_shows(tmp_path, monkeypatch):
    server, port, faults = _metrics_server(tmp_path, monkeypatch)
    try:
        with RawClient.to(server) as client:
            create_topic(client, TOPIC, 1)
            before = scrape(port)
            sent_bytes = 0
            for i in range(5):
                batch = _batch(i * 10, 10, 100)
                sent_bytes += len(batch)
                assert produce(client, TOPIC, 0, batch, acks=1).error_code == 0
            fetched_bytes = 0
            for offset in (0, 20, 40):
                p = fetch(client, TOPIC, 0, offset)
                fetched_bytes += len(p.records or b"")
                assert list(iter_all_records(p.records or b""))
            after = scrape(port)

        def delta(name: str, **labels: str) -> float:  # a topic's counters appear with its first request
            return value(after, name, **labels) - before.get((name, frozenset(labels.items())), 0)

        sent = {k: v - request_counts(before).get(k, 0) for k, v in request_counts(after).items()}
        assert sent["Produce"] == 5 and sent["FetchConsumer"] == 3, sent
        assert delta("kafka_network_requestmetrics_requests_total", request="Produce", version="9") == 5
        assert delta("kafka_network_requestmetrics_totaltimems_count", request="Produce") == 5
        assert delta("kafka_network_requestmetrics_localtimems_count", request="FetchConsumer") == 3
        assert value(after, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") >= 5
        assert delta("kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == 50
        assert delta("kafka_server_brokertopicmetrics_messagesin_total") == 50
        assert delta("kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) == sent_bytes
        assert delta("kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) == fetched_bytes
        assert delta("kafka_server_brokertopicmetrics_totalproducerequests_total", topic=TOPIC) == 5
        assert value(after, "kafka_log_log_logendoffset", topic=TOPIC, partition="0") == 50
        assert value(after, "kafka_log_log_logstartoffset", topic=TOPIC, partition="0") == 0
        assert value(after, "kafka_log_log_numlogsegments", topic=TOPIC, partition="0") == 1
        assert value(after, "kafka_log_log_size", topic=TOPIC, partition="0") == sent_bytes
        assert value(after, "kafka_server_replicamanager_partitioncount") == 1
        assert value(after, "kafka_server_replicamanager_leadercount") == 1
        assert value(after, "kafka_controller_kafkacontroller_globaltopiccount") == 1
        assert value(after, "kafka_controller_kafkacontroller_activebrokercount") == 1

        # The dir holding the partition fails (the fault seam): the next produce takes it offline.
        [bad] = [str(d) for d in server.log_dirs if (d / f"{TOPIC}-0").is_dir()]
        assert value(after, "kafka_log_logmanager_offlinelogdirectorycount") == 0
        assert value(after, "kafka_log_logmanager_logdirectoryoffline", logDirectory=bad) == 0
        assert value(after, "kjbod_log_dir_state", log_dir=bad, state="online") == 1
        assert value(after, "kjbod_log_dir_operation_seconds_count", log_dir=bad, op="write") >= 5
        faults.write_text(json.dumps({"faults": [{"dir": bad, "errno": "EIO"}]}))
        with RawClient.to(server) as client:
            assert produce(client, TOPIC, 0, _batch(50, 1, 10), acks=1).error_code != 0
        failed = wait_for(port, lambda s: value(s, "kafka_log_logmanager_offlinelogdirectorycount") == 1,
                          "OfflineLogDirectoryCount 1")
        assert value(failed, "kafka_log_logmanager_logdirectoryoffline", logDirectory=bad) == 1
        [good] = [str(d) for d in server.log_dirs if str(d) != bad]
        assert value(failed, "kafka_log_logmanager_logdirectoryoffline", logDirectory=good) == 0
        assert value(failed, "kjbod_log_dir_state", log_dir=bad, state="offline") == 1
        assert value(failed, "kafka_server_replicamanager_offlinereplicacount") == 1
        assert value(failed, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=TOPIC) >= 1
        assert value(failed, "kjbod_log_dir_total_bytes", log_dir=good) > 0
    finally:
        code = server.stop()
    assert code == 0, server.stderr()


def test_openmetrics_404_and_a_slow_scraper_does_not_stall_the_broker(tmp_path, monkeypatch):
    server, port, _faults = _metrics_server(tmp_path, monkeypatch)
    try:
        status, ctype, body = get(port, accept="application/openmetrics-text; version=1.0.0")
        assert status == 200 and ctype.startswith("application/openmetrics-text") and body.endswith("# EOF\n")
        status, ctype, body = get(port)
        assert status == 200 and ctype.startswith("text/plain") and "# EOF" not in body
        status, _ctype, body = get(port, "/nothing-here")
        assert status == 404 and "/metrics" in body
        # A request with a body the endpoint never reads: the answer arrives whole and the connection ends cleanly
        # (the unread body is drained, so the kernel does not reset the connection under the reader).
        with socket.create_connection(("127.0.0.1", port), timeout=30) as poster:
            payload = b"x" * 300_000
            poster.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(payload)
                           + payload)
            answer = b""
            while chunk := poster.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 405 ") and answer.endswith(b"only GET and HEAD\n"), answer

        # One scraper sends half a request and waits; another pipelines requests and never reads (the endpoint
        # answers the first, then drains the rest until the scraper hangs up); a third hangs up mid-request.
        idle = socket.create_connection(("127.0.0.1", port))
        idle.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        deaf = socket.create_connection(("127.0.0.1", port))
        deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for _ in range(20):
            deaf.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        gone = socket.create_connection(("127.0.0.1", port))
        gone.sendall(b"GET /met")
        gone.close()
        try:
            with RawClient.to(server) as client:
                create_topic(client, TOPIC, 1)
                # Answered (the raw client gives up after 15 s) while the scrapers above hang.
                for i in range(20):
                    assert produce(client, TOPIC, 0, _batch(i, 1, 10), acks=1).error_code == 0
                assert fetch(client, TOPIC, 0, 0).high_watermark == 20
            assert value(scrape(port), "kafka_log_log_logendoffset", topic=TOPIC, partition="0") == 20
        finally:
            idle.close()
            deaf.close()
    finally:
        code = server.stop()
    assert code == 0, server.stderr()
