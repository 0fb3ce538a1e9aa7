"""The benchmark's RWF_NOWAIT probe (tools/bench/nowait_probe.py) counts what the kernel did with every append,
and what it calls written is on the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.bench import nowait_probe


def test_every_append_is_accounted_for_and_the_written_ones_are_on_the_file(tmp_path: Path) -> None:
    result = nowait_probe.probe(tmp_path, count=20, rate=10_000)
    if result["refused"]:  # the whole filesystem refuses: the probe stops at the first refusal
        assert result["written"] == result["would_wait"] == 0 and result["bytes_on_file"] == 0
        assert "refuses" in nowait_probe.describe(result)
    else:
        assert result["written"] + result["would_wait"] == 20
        assert result["bytes_on_file"] == result["written"] * nowait_probe.WRITE_BYTES
    assert list(tmp_path.iterdir()) == []  # the probe's file is gone


def test_the_filesystem_type_is_read_from_mountinfo(tmp_path: Path) -> None:
    with open("/proc/self/mountinfo") as f:
        root_types = [line.split(" - ")[1].split()[0] for line in f if line.split()[4] == "/"]
    assert nowait_probe.fs_type(Path("/")) == root_types[-1]
    assert nowait_probe.fs_type(tmp_path) != "unknown"
    assert nowait_probe.fs_type(Path("/proc")) == "proc"


def test_a_command_line_without_a_target_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        nowait_probe.main([])
    assert exited.value.code == 2
    assert "name a directory or --loopback" in capsys.readouterr().err
    assert nowait_probe.main([os.devnull]) == 2
