"""Stray replicas (Kafka's KRaft term): partition dirs at startup that the metadata does not give this node.

A crash between creating a topic's partition dirs and recording the topic in the metadata log leaves such dirs;
so does a topic deleted while one of its dirs was offline (covered with the fault seam in test_disk_faults.py).
At startup each is renamed ``<topic>-<partition>.<32 hex>-stray`` and kept, and the topic name is free again.
"""

from __future__ import annotations

import shutil


def test_partition_dirs_the_metadata_never_recorded_become_stray(kjbod_server_factory):
    from .support import RawClient, batch, create_topic, fetch_all, log_events, partition_dirs, produce

    server = kjbod_server_factory()
    with RawClient.to(server) as raw:
        assert create_topic(raw, "real", 1).error_code == 0
        assert produce(raw, "real", 0, batch([b"r"])).error_code == 0
    assert server.stop() == 0
    # What a crash after the dirs and before the metadata record leaves: a partition dir of a topic the metadata
    # does not know (here a copy of real-0, so it also carries a topic id the metadata has for another name).
    real = partition_dirs(server.log_dirs)["real-0"]
    shutil.copytree(real, real.parent / "orphan-0")
    copied = sorted(p.name for p in real.iterdir())  # (real-0 may write more once it leads again)
    server.start()
    (event,) = log_events(server, "partitions_not_in_metadata")
    assert event["partitions"] == ["orphan-0"]
    assert not (real.parent / "orphan-0").exists()
    (kept,) = event["renamed_to"]
    assert kept.startswith(str(real.parent / "orphan-0.")) and kept.endswith("-stray")
    assert sorted(p.name for p in type(real)(kept).iterdir()) == copied
    with RawClient.to(server) as raw:
        assert create_topic(raw, "orphan", 1).error_code == 0  # the name is free
        assert produce(raw, "orphan", 0, batch([b"new"])).error_code == 0
        assert [r.value for r in fetch_all(raw, "orphan", 0)] == [b"new"]
        assert [r.value for r in fetch_all(raw, "real", 0)] == [b"r"]  # the real topic is untouched
