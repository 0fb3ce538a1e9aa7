"""DescribeTopicPartitions against a live `kjbod serve`, driven by kafka-python's admin client (its
describe_topic_partitions sends API 75): pages over many partitions with a small limit, and the broker's
`max.request.partition.size.limit` capping a client's larger one; the partitions read page by page equal what
Metadata answers.  `kjbod topics --describe` reads through the same pages."""

from __future__ import annotations

import subprocess
import sys
import warnings

from kjbod.protocol.errors import ErrorCode as E

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import KafkaAdminClient, NewTopic

TOPICS = {"alpha": 12, "beta": 1, "gamma": 7}
SERVER_LIMIT = 5


def _pages(admin, names, limit):
    pages, cursor = [], None
    while True:
        page = admin.describe_topic_partitions(names, response_partition_limit=limit, cursor=cursor)
        pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 50


def _flat(pages):
    return [(t["name"], p["partition_index"], p["leader_id"], tuple(p["replica_nodes"]), tuple(p["isr_nodes"]))
            for page in pages for t in page["topics"] for p in t["partitions"]]


def test_paging_over_many_partitions_matches_metadata(kjbod_server_factory):
    server = kjbod_server_factory(log_dir_count=2, overrides={"max.request.partition.size.limit": str(SERVER_LIMIT)})
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="dtp-live")
    try:
        admin.create_topics([NewTopic(n, c, 1) for n, c in TOPICS.items()])
        by_metadata = sorted(
            (t["name"], p["partition_index"], p["leader_id"], tuple(p["replica_nodes"]), tuple(p["isr_nodes"]))
            for t in admin.describe_topics(list(TOPICS)) for p in t["partitions"])
        assert len(by_metadata) == sum(TOPICS.values())

        small = _pages(admin, [], 3)  # every topic, three partitions a page
        assert _flat(small) == by_metadata
        assert [sum(len(t["partitions"]) for t in p["topics"]) for p in small] == [3, 3, 3, 3, 3, 3, 2]
        assert small[0]["next_cursor"] == {"topic_name": "alpha", "partition_index": 3}

        capped = _pages(admin, list(TOPICS), 2000)  # the broker's key caps the client's 2000
        assert _flat(capped) == by_metadata
        assert max(sum(len(t["partitions"]) for t in p["topics"]) for p in capped) == SERVER_LIMIT
        assert len(capped) == -(-len(by_metadata) // SERVER_LIMIT)

        one = admin.describe_topic_partitions(["beta", "missing"])
        got = {t["name"]: t for t in one["topics"]}
        assert got["missing"]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION and got["missing"]["partitions"] == []
        beta = got["beta"]
        assert beta["error_code"] == 0 and not beta["is_internal"] and len(beta["partitions"]) == 1
        assert one["next_cursor"] is None
        # kafka-python reads an empty list as None; Kafka with ELR off answers empty lists, as kjbod does
        p0 = beta["partitions"][0]
        assert (p0["eligible_leader_replicas"], p0["last_known_elr"], p0["offline_replicas"]) == (None, None, [])
        bad = admin.describe_topic_partitions(["gamma"], cursor={"topic_name": "alpha", "partition_index": 0})
        assert [(t["name"], t["error_code"]) for t in bad["topics"]] == [("gamma", E.INVALID_REQUEST)]
    finally:
        admin.close()

    described = subprocess.run(
        [sys.executable, "-m", "kjbod", "topics", "--bootstrap-server", server.bootstrap, "--describe",
         "--partition-size-limit-per-response", "2"], capture_output=True, text=True, timeout=120)
    assert described.returncode == 0, described.stderr
    lines = [line.split("\t") for line in described.stdout.splitlines() if line.startswith("\t")]
    assert [(f[1], int(f[2].split(": ")[1])) for f in lines] == [(f"Topic: {t}", p) for t, p, *_ in by_metadata]
