"""The server process's GIL switch interval (kjbod.server.app._settle_threads): CPython's own unless
KJBOD_GIL_SWITCH_US sets another, a bad value ignored with a warning. Checked in child processes: the interval is the whole
interpreter's, not the test process's to change."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_CODE = """
import sys
from kjbod.server.logging import configure_logging
from kjbod.server.app import _settle_threads
configure_logging("json", "info", stream=sys.stdout)
before = sys.getswitchinterval()
_settle_threads()
print(round(before * 1e6), round(sys.getswitchinterval() * 1e6), flush=True)
"""


def _run(env_value: str | None) -> tuple[list[int], list[dict]]:
    env = {k: v for k, v in os.environ.items() if k != "KJBOD_GIL_SWITCH_US"}
    if env_value is not None:
        env["KJBOD_GIL_SWITCH_US"] = env_value
    done = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    events = [json.loads(x) for x in lines if x.startswith("{")]
    return [int(x) for x in lines[-1].split()], events


def test_the_interval_is_cpythons_by_default():
    (before, after), events = _run(None)
    assert before == after == 5000
    assert not [e for e in events if e.get("level") == "warning"]


def test_the_environment_sets_another():
    (_, after), _ = _run("500")
    assert after == 500


def test_a_bad_value_is_ignored_with_a_warning_naming_it():
    for bad in ("fast", "0", "-3"):
        (_, after), events = _run(bad)
        assert after == 5000
        warned = [e for e in events if e.get("variable") == "KJBOD_GIL_SWITCH_US"]
        assert warned and warned[0]["value"] == bad, events
