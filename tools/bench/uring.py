"""A minimal io_uring through ctypes, for one measurement only: what a write handed to a *kernel* thread costs.

The per-dir workers' benchmark (dir_workers.py) explains the Produce p99 gap as the price of waking a second
thread and being woken back on this machine, not as kjbod's Python. io_uring is the way to hand a write to the
kernel from the event loop without a thread of one's own: ext4 takes no buffered write without the chance of
waiting (RWF_NOWAIT is refused), so io_uring passes each one to a kernel worker thread and signals its
completion on an eventfd the loop watches. If that round trip costs what a DirWorker's costs, the gap is the
wake-ups themselves, which no worker design in this process avoids.

Only what that needs: a ring with one eventfd, IORING_OP_WRITE, completions reaped on the loop. Not used by
kjbod itself. x86-64 numbers for the system calls; elsewhere (or where io_uring is disabled) :func:`open_ring`
says why it cannot run and the benchmark prints that instead of the figure.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct

SYS_IO_URING_SETUP = 425
SYS_IO_URING_ENTER = 426
SYS_IO_URING_REGISTER = 427
IORING_OFF_SQES = 0x10000000
IORING_OP_WRITE = 23
IORING_REGISTER_EVENTFD = 4

# struct io_uring_sqe, 64 bytes: opcode, flags, ioprio, fd, off, addr, len, rw_flags, user_data, then unused.
SQE = struct.Struct("=BBHiQQIIQ24x")
# struct io_uring_cqe, 16 bytes: user_data, res, flags.
CQE = struct.Struct("=QiI")
U32 = struct.Struct("=I")


class Ring:
    """One submission/completion ring whose completions ring ``eventfd``."""

    def __init__(self, entries: int = 64) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        params = (ctypes.c_uint32 * 30)()  # struct io_uring_params: 120 bytes
        fd = self._libc.syscall(SYS_IO_URING_SETUP, ctypes.c_uint(entries), params)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "io_uring_setup")
        self.fd = fd
        sq_entries, cq_entries = params[0], params[1]
        # io_sqring_offsets at word 10: head, tail, ring_mask, ring_entries, flags, dropped, array, ...
        # io_cqring_offsets at word 20: head, tail, ring_mask, ring_entries, overflow, cqes, ...
        self._sq = list(params[10:20])
        self._cq = list(params[20:30])
        size = max(self._sq[6] + sq_entries * 4, self._cq[5] + cq_entries * CQE.size)
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        # One mapping serves both rings (IORING_FEAT_SINGLE_MMAP, every kernel since 5.4).
        self._ring = mmap.mmap(fd, size, mmap.MAP_SHARED, prot, offset=0)
        self._sqes = mmap.mmap(fd, sq_entries * SQE.size, mmap.MAP_SHARED, prot, offset=IORING_OFF_SQES)
        self._sq_mask = U32.unpack_from(self._ring, self._sq[2])[0]
        self._cq_mask = U32.unpack_from(self._ring, self._cq[2])[0]
        for i in range(sq_entries):  # slot i of the submission array always names SQE i
            U32.pack_into(self._ring, self._sq[6] + 4 * i, i)
        self.eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        efd = ctypes.c_int(self.eventfd)
        if self._libc.syscall(SYS_IO_URING_REGISTER, fd, IORING_REGISTER_EVENTFD, ctypes.byref(efd), 1) < 0:
            err = ctypes.get_errno()
            self.close()
            raise OSError(err, "io_uring_register(EVENTFD)")
        self._held: dict[int, ctypes.Array[ctypes.c_char]] = {}  # buffers the kernel may still read

    def write(self, fd: int, data: bytes, offset: int, user_data: int) -> None:
        """Submit one write of ``data`` at ``offset``; its completion comes with ``user_data``."""
        buf = ctypes.create_string_buffer(data, len(data))
        self._held[user_data] = buf
        tail = U32.unpack_from(self._ring, self._sq[1])[0]
        SQE.pack_into(self._sqes, (tail & self._sq_mask) * SQE.size, IORING_OP_WRITE, 0, 0, fd, offset,
                      ctypes.addressof(buf), len(data), 0, user_data)
        U32.pack_into(self._ring, self._sq[1], tail + 1)  # x86's stores are ordered: the SQE is seen first
        if self._libc.syscall(SYS_IO_URING_ENTER, self.fd, 1, 0, 0, None, 0) < 0:
            raise OSError(ctypes.get_errno(), "io_uring_enter")

    def reap(self) -> list[tuple[int, int]]:
        """The completions waiting: (user_data, result: bytes written or -errno)."""
        head = U32.unpack_from(self._ring, self._cq[0])[0]
        tail = U32.unpack_from(self._ring, self._cq[1])[0]
        done = []
        while head != tail:
            user_data, res, _flags = CQE.unpack_from(self._ring, self._cq[5] + (head & self._cq_mask) * CQE.size)
            self._held.pop(user_data, None)
            done.append((user_data, res))
            head += 1
        U32.pack_into(self._ring, self._cq[0], head)
        return done

    def close(self) -> None:
        for name in ("_sqes", "_ring"):
            if hasattr(self, name):
                getattr(self, name).close()
        if hasattr(self, "eventfd"):
            os.close(self.eventfd)
        os.close(self.fd)


def open_ring() -> tuple[Ring | None, str]:
    """A ring, or None and why there is none here."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None, f"io_uring's system call numbers are x86-64 Linux's; this is {platform.machine()}"
    try:
        return Ring(), ""
    except OSError as e:
        return None, f"io_uring unavailable here: {e.args[1]}: {os.strerror(e.errno or 0)}"
