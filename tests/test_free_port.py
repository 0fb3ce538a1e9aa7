"""tests/live.py's free_port: what makes two live tests (or two test runs on one machine) never share a port.

Found once under load: a port handed out by the kernel's bind(0) is an ephemeral port, so any process's next
outgoing connection may take it before the test server binds it, a readiness poll can connect to itself on it, and
another test process may be handed the same one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from live import PORT_LOCKS, free_port

TESTS = Path(__file__).resolve().parent


def test_ports_are_below_the_ephemeral_range_and_never_handed_out_twice():
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(p < ephemeral_low for p in ports), ports


def test_another_process_is_not_handed_a_port_this_one_holds():
    ours = [free_port() for _ in range(20)]
    # The other process finds each of them locked, and so never hands it out; ports it takes are not ours.
    script = (
        "import fcntl, json, os, sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "from live import PORT_LOCKS, free_port\n"
        "fd = os.open(PORT_LOCKS, os.O_RDWR)\n"
        "locked = []\n"
        f"for port in {ours!r}:\n"
        "    try:\n"
        "        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)\n"
        "    except OSError:\n"
        "        locked.append(port)\n"
        "print(json.dumps({'locked': locked, 'taken': [free_port() for _ in range(200)]}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(done.stdout)
    assert seen["locked"] == ours
    assert not set(seen["taken"]) & set(ours)
    assert PORT_LOCKS.exists()
