"""A node whose metadata log dir fails while it shuts down (its last producer snapshot cannot be written) logs the
failure and stops with a non-zero exit code, naming the dir, instead of ending `kjbod serve` with a traceback
(seen when the data dir went away under a stopping `make run`)."""

from __future__ import annotations

import json

from live import start_server


def test_a_metadata_dir_failing_at_shutdown_is_one_logged_error(tmp_path, monkeypatch):
    faults = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(faults))
    server = start_server(tmp_path / "node", log_dir_count=1)
    try:
        faults.write_text(json.dumps({"faults": [{"dir": str(server.metadata_dir), "errno": "EIO"}]}))
    finally:
        code = server.stop()
    err = server.stderr(tail=200)
    assert "Traceback" not in err, err
    assert "metadata_log_close_failed" in err and str(server.metadata_dir) in err, err
    assert code == 1, err
