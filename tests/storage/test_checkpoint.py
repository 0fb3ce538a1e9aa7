"""Exact text of Kafka's checkpoint files, partition.metadata and the clean-shutdown marker."""

from __future__ import annotations

import pytest

from kjbod.storage.checkpoint import (
    CheckpointFormatError,
    parse_clean_shutdown,
    parse_offset_checkpoint,
    parse_partition_metadata,
    read_offset_checkpoint,
    render_clean_shutdown,
    render_offset_checkpoint,
    render_partition_metadata,
    write_offset_checkpoint,
)
from kjbod.storage.fsio import LogDirIO


def test_offset_checkpoint_exact_text():
    text = render_offset_checkpoint({("my-topic", 0): 1234, ("my-topic", 1): 987})
    assert text == "0\n2\nmy-topic 0 1234\nmy-topic 1 987\n"
    assert render_offset_checkpoint({}) == "0\n0\n"


def test_offset_checkpoint_parse_round_trip_and_whitespace():
    entries = {("a.b-c_d", 7): 0, ("x", 123): 2**40}
    assert parse_offset_checkpoint(render_offset_checkpoint(entries)) == entries
    assert parse_offset_checkpoint("0\n1\nt  3\t9\n") == {("t", 3): 9}


@pytest.mark.parametrize(
    "text",
    ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\n1\nt x 1\n", "", "0\n"],
)
def test_offset_checkpoint_rejects_malformed(text):
    with pytest.raises(CheckpointFormatError):
        parse_offset_checkpoint(text)


def test_write_is_atomic_sorted_and_leaves_no_temp(tmp_path):
    io = LogDirIO(str(tmp_path))
    write_offset_checkpoint(io, "recovery-point-offset-checkpoint", {("b", 0): 5, ("a", 1): 3, ("a", 0): 9})
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n3\na 0 9\na 1 3\nb 0 5\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    assert read_offset_checkpoint(io, "recovery-point-offset-checkpoint") == {("a", 0): 9, ("a", 1): 3, ("b", 0): 5}
    assert read_offset_checkpoint(io, "missing") is None


def test_partition_metadata_exact_text():
    text = render_partition_metadata("3uI2M2AbQVO0J2cYw2xvOA")
    assert text == "version: 0\ntopic_id: 3uI2M2AbQVO0J2cYw2xvOA"
    assert parse_partition_metadata(text) == "3uI2M2AbQVO0J2cYw2xvOA"
    with pytest.raises(CheckpointFormatError):
        parse_partition_metadata("version: 1\ntopic_id: x")


def test_clean_shutdown_marker_json():
    assert render_clean_shutdown(42) == '{"version":0,"brokerEpoch":42}'
    assert parse_clean_shutdown(render_clean_shutdown(7)) == 7
    assert parse_clean_shutdown("garbage") == -1
