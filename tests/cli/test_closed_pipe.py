"""`kjbod ... | head`: when the reader of the output goes away, the command stops quietly with 141 (128 + SIGPIPE,
as a shell reports it for Unix tools), not with `kjbod: error: Broken pipe` or a traceback (found piping
`kjbod cluster up --detach` into `head`)."""

from __future__ import annotations

import subprocess

from tests.live import COMMAND


def test_a_closed_stdout_ends_the_command_quietly():
    # The read end is closed before the child writes anything, so its first write fails with EPIPE.
    child = subprocess.Popen([*COMMAND, "random-uuid"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    with child.stderr:
        err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141, err
    assert err == ""
