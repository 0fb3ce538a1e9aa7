"""tools/bench/produce_loop_cpu.py measures what it says: each variant's node appends every Produce it was sent
(the partition's end offset counts them), with the loop thread's CPU and, profiled, its Python calls."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.bench.dir_workers import SMALL_RECORDS
from tools.bench.produce_loop_cpu import WARM_UP

REQUESTS = 40


@pytest.mark.parametrize("variant", ["workers", "loop"])
def test_each_variant_appends_every_request_and_reports_the_loops_cpu(variant: str) -> None:
    done = subprocess.run([sys.executable, "-m", "tools.bench.produce_loop_cpu", "--variant", variant,
                           "--requests", str(REQUESTS), "--rate", "2000", "--profile"],
                          capture_output=True, text=True, timeout=240, check=True)
    lines = done.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert figures["end_offset"] == (WARM_UP + REQUESTS) * SMALL_RECORDS
    assert figures["loop_us"] > 0 and figures["calls"] > 0
    assert any("produce.py" in line for line in lines[:-1])  # the profile names the handler
    # the loop's own write (fsio's writev) shows only where there is no worker; with the workers, a quiet node's
    # append is placed on the loop and written by the dir's native writer (PartitionLog.append_native)
    assert any("fsio.py" in line and "(writev)" in line for line in lines[:-1]) == (variant == "loop")
    assert any("(append_native)" in line for line in lines[:-1]) == (variant == "workers")
