"""Zero-copy as a type: a byte range of an open file that a response carries instead of the bytes themselves.

Storage answers a Fetch with record data as `FileRegion`s (fd, offset, count) rather than reading the segment into
memory; the connection (kjbod.server.connection) sends each region with `os.sendfile`, or with pread + write when
zero-copy is off or unsupported, and closes it afterwards.

Ownership: a region owns its fd. Storage hands out a duplicate (`os.dup`) it does not need back, so the segment can be
rolled or deleted while the bytes are still on their way. Whoever ends up holding the region closes it: the
connection after sending it or when the connection drops, the code that built a response if it fails before handing
it over. `close()` is idempotent.

This module stays sans-IO (kjbod.wire may not import os): the function that closes the fd is passed in by whoever
opens it, normally `os.close`. Keeping the concrete class here, rather than a typing Protocol here and the class in
kjbod.server, lets storage (which sits below the server layer) construct regions directly.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["FileRegion"]


class FileRegion:
    """`count` bytes of the file open as `fd`, starting at `offset`. `len(region)` is `count`."""

    __slots__ = ("_close_fd", "_fd", "count", "offset")

    def __init__(self, fd: int, offset: int, count: int, close_fd: Callable[[int], None]) -> None:
        if fd < 0:
            raise ValueError(f"invalid file descriptor {fd}")
        if offset < 0 or count < 0:
            raise ValueError(f"invalid file region offset={offset} count={count}")
        self._fd = fd
        self._close_fd: Callable[[int], None] | None = close_fd
        self.offset = offset
        self.count = count

    @property
    def fd(self) -> int:
        if self._close_fd is None:
            raise ValueError("file region is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._close_fd is None

    def __len__(self) -> int:
        return self.count

    def close(self) -> None:
        """Close the fd; later calls do nothing."""
        close_fd, self._close_fd = self._close_fd, None
        if close_fd is not None:
            close_fd(self._fd)

    def __enter__(self) -> FileRegion:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._close_fd is None else f"fd={self._fd}"
        return f"FileRegion({state}, offset={self.offset}, count={self.count})"
