"""The native hand-off floor (native_handoff.c), built with gcc into bench-out/ and loaded with ctypes.

tools/bench/dir_workers.py sets it beside the DirWorker and io_uring: a write handed to a thread that runs no
Python and woken through eventfds on the loop's CPU, with the loop waiting for it with the GIL released (ctypes
releases it for the call). What that costs over the write on the loop itself is what the two thread wake-ups
cost on this machine; what the DirWorker costs above it is its Python and the GIL.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

from .server import OUT

SOURCE = Path(__file__).with_name("native_handoff.c")


class NativeWriter:
    """The library's one writer thread (started on the first open)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._pwrite = lib.native_handoff_pwrite
        self._pwrite.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long]
        self._pwrite.restype = ctypes.c_long

    def pwrite(self, fd: int, data: bytes, at: int) -> int:
        """Bytes written by the writer thread (an OSError for its errno)."""
        n = self._pwrite(fd, data, len(data), at)
        if n < 0:
            raise OSError(-n, "pwrite on the native writer thread")
        return int(n)


_WRITER: NativeWriter | None = None


def open_writer() -> tuple[NativeWriter | None, str]:
    """(the writer, "") or (None, why it cannot run here)."""
    global _WRITER
    if _WRITER is not None:
        return _WRITER, ""
    if shutil.which("gcc") is None:
        return None, "no gcc on this machine to build tools/bench/native_handoff.c"
    OUT.mkdir(exist_ok=True)
    lib_path = OUT / "native_handoff.so"
    try:
        if not lib_path.exists() or lib_path.stat().st_mtime < SOURCE.stat().st_mtime:
            subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-pthread", "-o", str(lib_path), str(SOURCE)],
                           check=True, capture_output=True)
        lib = ctypes.CDLL(str(lib_path))
    except (OSError, subprocess.CalledProcessError) as e:
        return None, f"building or loading {lib_path} failed: {e}"
    lib.native_handoff_start.restype = ctypes.c_int
    rc = lib.native_handoff_start()
    if rc < 0:
        return None, f"starting its thread failed: errno {-rc}"
    _WRITER = NativeWriter(lib)
    return _WRITER, ""
