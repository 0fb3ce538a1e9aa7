"""`kjbod dump-log --cluster-metadata-decoder --bootstrap-server` on a running combined node's metadata log: every
record that names log dirs is followed by a line resolving each id to broker and path, and those are the dirs
the replicas really are in on disk."""

from __future__ import annotations

import re
import time

from live import kafka_uuid, read_meta_properties

from kjbod.admin import NewTopic, SyncAdminClient
from kjbod.cli.main import main
from kjbod.storage.ids import uuid_to_str

RESOLVED = re.compile(r"^\|   (Directories|LogDirs): \[(.*)\]$")


def dump(capsys, *args):
    capsys.readouterr()
    rc = main(["dump-log", *args])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


def test_directory_ids_resolve_to_broker_and_path(kjbod_server, capsys, tmp_path):
    server = kjbod_server
    ids = {str(p): uuid_to_str(kafka_uuid(read_meta_properties(p)["directory.id"]).bytes) for p in server.log_dirs}
    with SyncAdminClient(server.bootstrap) as admin:
        admin.create_topics([NewTopic("placed", 6, 1)])
        topic_id = uuid_to_str(admin.describe_topics(["placed"])["placed"].topic_id.bytes)
    # The node reports where it placed each replica; wait until every one is on disk.
    on_disk: dict[int, str] = {}
    deadline = time.monotonic() + 60
    while len(on_disk) < 6 and time.monotonic() < deadline:
        on_disk = {int(d.name.rsplit("-", 1)[1]): str(p) for p in server.log_dirs for d in p.glob("placed-*")}
        time.sleep(0.1)
    assert len(on_disk) == 6
    # The active controller appends a NoOpRecord every metadata.max.idle.interval.ms: both dumps read one copy of
    # the log, so they read the same records.
    copies = tmp_path / "metadata-copy"
    copies.mkdir()
    for segment in sorted(server.metadata_dir.glob("__cluster_metadata-0/*.log")):
        (copies / segment.name).write_bytes(segment.read_bytes())
    files = ",".join(str(s) for s in sorted(copies.glob("*.log")))

    plain_rc, plain, _ = dump(capsys, "--files", files, "--cluster-metadata-decoder")
    rc, lines, err = dump(capsys, "--files", files, "--cluster-metadata-decoder", "--bootstrap-server",
                          server.bootstrap)
    assert (plain_rc, rc, err) == (0, 0, "")
    # The same output, with resolution lines added after the records that name dirs.
    assert [line for line in lines if not RESOLVED.match(line)] == plain
    where = {v: k for k, v in ids.items()}
    last_dir: dict[int, str] = {}
    for i, line in enumerate(lines):
        m = RESOLVED.match(line)
        if not m:
            continue
        record = lines[i - 1]
        entries = m.group(2).split(", ")
        for entry in entries:
            dir_text, what = entry.split(" ", 1)
            if dir_text in where:
                assert what == f"(broker 1 {where[dir_text]})"
            else:
                assert what in ("(UNASSIGNED)", "(MIGRATING)", "(LOST)"), entry
        if m.group(1) == "LogDirs":
            assert "REGISTER_BROKER_RECORD" in record or "BROKER_REGISTRATION_CHANGE_RECORD" in record
            assert sorted(e.split(" ", 1)[0] for e in entries) == sorted(ids.values())
        elif f'"topicId":"{topic_id}"' in record:
            pid = int(re.search(r'"partitionId":(\d+)', record).group(1))
            if any(where.get(e.split(" ", 1)[0]) for e in entries):
                last_dir[pid] = where[entries[0].split(" ", 1)[0]]
    # The last Directories the log gives each partition of "placed" is the dir its replica is in on disk.
    assert last_dir == on_disk


def test_bootstrap_server_needs_the_decoder_and_a_reachable_cluster(tmp_path, capsys):
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b"")
    rc, _, err = dump(capsys, "--files", str(seg), "--bootstrap-server", "127.0.0.1:9")
    assert rc == 2 and "needs --cluster-metadata-decoder" in err
    rc, _, err = dump(capsys, "--files", str(seg), "--cluster-metadata-decoder", "--bootstrap-server", "nope",
                      "--timeout", "2")
    assert rc == 2 and "--bootstrap-server" in err and len(err.strip().splitlines()) == 1
    rc, _, err = dump(capsys, "--files", str(seg), "--cluster-metadata-decoder", "--bootstrap-server",
                      "127.0.0.1:9", "--timeout", "2")
    assert rc == 2 and "could not read the cluster's log dirs" in err and len(err.strip().splitlines()) == 1
