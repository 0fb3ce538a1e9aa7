"""The Produce benchmark's sinks (tools/bench/produce_sink.py) answer every request and keep what they must."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench.datapath import SINKS, exact_batch, produce_frame, produce_pipelined, start_sink, stop_sink


@pytest.mark.parametrize("mode", sorted(SINKS))
def test_sink_answers_every_request_and_writes_each_frame_once(tmp_path: Path, mode: str) -> None:
    frame = produce_frame("produce", 0, exact_batch(70_000, 16))  # bigger than one receive, several in flight
    proc, port = start_sink(tmp_path, mode)
    try:
        produce_pipelined(port, frame, 9, 4)
        produce_pipelined(port, frame, 3, 1)  # a second connection
    finally:
        stop_sink(proc)
    written = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    if mode == "discard":
        assert written == {}
    else:
        assert written == {f"produce-sink-{mode}.log": frame[4:] * 12}
