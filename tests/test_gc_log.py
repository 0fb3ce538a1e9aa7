"""KJBOD_GC_LOG: a server process logs each of its garbage collections (kjbod.server.app), which is how the
replication bench's brokers are checked for GC pauses. Checked in child processes: the test process's own GC is
not the server's to change."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_CODE = """
import gc, sys
from kjbod.server.logging import configure_logging
from kjbod.server.app import _settle_gc
configure_logging("json", "info", stream=sys.stdout)
_settle_gc()
print(len(gc.callbacks), flush=True)
gc.collect(1)
"""


def _run(env_value: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "KJBOD_GC_LOG"}
    if env_value is not None:
        env["KJBOD_GC_LOG"] = env_value
    done = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_each_collection_is_logged_with_its_generation_when_asked():
    lines = _run("1")
    events = [json.loads(x) for x in lines if x.startswith("{")]
    gcs = [e for e in events if e.get("event") == "gc"]
    assert gcs, lines  # the collect() here, and the one at interpreter exit
    assert gcs[0]["generation"] == 1
    assert {"ms", "collected", "uncollectable", "counts", "frozen", "tracked"} <= gcs[0].keys()
    assert gcs[0]["frozen"] > 1000  # logged after _settle_gc froze what the process had built


def test_nothing_is_hooked_by_default():
    lines = _run(None)
    assert lines[0] == "0"
    assert not [x for x in lines if '"gc"' in x]
