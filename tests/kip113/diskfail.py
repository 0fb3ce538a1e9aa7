"""A disk failing under a running move (issue item 6), shared by the fault-seam test and the ext4 one.

`run(server, side, fail, repair)` starts a throttled move of a 24 MB partition, calls `fail(dir)` on the
destination or the source while it copies, and returns what a client then observes. `repair(dir)` (optional)
undoes the failure while the server is stopped, for the source case: the restarted server must resume the move
from the future copy it kept and finish it with every byte intact.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.admin import NewTopic

from kjbod.protocol.generated import FetchRequest

from .livehelp import RawClient, fetch_all, fill_offline, kafka_admin, replicas, set_throttle, wait_moved

SIZE = 24 << 20


def _fetch_code(raw: RawClient, topic: str, partition: int) -> int:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                       topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                           FetchRequest.FetchPartition(partition=partition, fetch_offset=0,
                                                       partition_max_bytes=1 << 20)])])
    return raw.call(req, 11).responses[0].partitions[0].error_code


def _dir_errors(admin) -> dict[str, int]:
    return {d["log_dir"]: d["error_code"] for d in admin.describe_log_dirs()[0]["log_dirs"]}


def run(server, side: str, fail: Callable[[str], None], repair: Callable[[str], None] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("disk", 1, 1), NewTopic("bystander", 1, 1)])
    admin.close()
    fill_offline(server, "disk", [0], SIZE, segment_bytes=2 << 20)
    admin = kafka_admin(server)
    where = replicas(admin)
    source = where[("disk", 0, False)]["dir"]
    bystander = where[("bystander", 0, False)]["dir"]
    dirs = [str(d) for d in server.log_dirs]
    dest = next(d for d in dirs if d not in (source, bystander)) if bystander != source else \
        next(d for d in dirs if d != source)
    failing = dest if side == "dest" else source
    out.update(source=source, dest=dest, failing=failing, bystander_in_failing=bystander == failing)
    with RawClient(server.bootstrap) as raw:
        end = 10**9
        before = fetch_all(raw, "disk", 0, end)
    set_throttle(admin, str(6 << 20))
    admin.alter_replica_log_dirs({("disk", 0, 1): dest})
    deadline = time.monotonic() + 20
    while True:
        fut = replicas(admin, {"disk": [0]}).get(("disk", 0, True))
        if fut is not None and fut["size"] > 4 << 20:
            break
        assert time.monotonic() < deadline, "the move did not start"
        time.sleep(0.05)
    fail(failing)
    time.sleep(1.0)
    deadline = time.monotonic() + 20
    while _dir_errors(admin).get(failing) != 56 and time.monotonic() < deadline:
        time.sleep(0.1)
    seen = replicas(admin, {"disk": [0]})
    out["dir_errors"] = _dir_errors(admin)
    out["future_reported"] = ("disk", 0, True) in seen
    out["current_dir"] = seen.get(("disk", 0, False), {}).get("dir")
    with RawClient(server.bootstrap) as raw:
        out["fetch_error"] = _fetch_code(raw, "disk", 0)
        if side == "dest":
            producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=-1)
            out["produce_after_offset"] = producer.send("disk", b"after", partition=0).get(30).offset
            producer.close()
            after = fetch_all(raw, "disk", 0, 10**9)
            out["data_intact"] = after.startswith(before) and len(after) > len(before)
    out["future_dirs_on_disk"] = {d: [n for n in _names(d) if n.endswith("-future")] for d in dirs}
    admin.close()
    if side == "source" and repair is not None:
        server.stop()
        repair(failing)
        server.start()
        admin = kafka_admin(server)
        wait_moved(admin, "disk", 0, dest, timeout=60)
        with RawClient(server.bootstrap) as raw:
            out["resumed_data_identical"] = fetch_all(raw, "disk", 0, 10**9) == before
        admin.close()
    return out


def _names(d: str) -> list[str]:
    try:
        return sorted(p.name for p in Path(d).iterdir())
    except OSError:
        return []
