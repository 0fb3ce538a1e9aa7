"""The one seam through which every file operation on a log dir passes.

Strategy: each log dir gets one :class:`LogDirIO`. Every path operation (open, mkdir, listdir, rename, unlink,
stat, statvfs, lock, ...) is a method on it, and every fd operation (write, pread, fsync, truncate, sendfile, dup)
is a method on the :class:`FileHandle` it returns, which remembers its dir. So a failing disk is detected in one
place, the way Kafka's ``LogDirFailureChannel`` does it:

* the first ``OSError`` from any operation on a dir marks that dir offline (logged once, at error) and calls the
  owner's ``on_offline`` callback; the operation raises :class:`KafkaStorageError` (chained to the ``OSError``);
* every later operation on that dir raises :class:`KafkaStorageError` at once, without touching the disk;
* other dirs are unaffected.

A few ``OSError`` are expected and are not disk failures: a missing optional file (``*_or_none``,
``unlink(missing_ok=True)``), an existing dir (``mkdir(exist_ok=True)``) and a ``.lock`` held by another process
(:class:`LogDirLockedError`). Failure is detected from failed I/O only, never from a health probe: on a shut down
ext4, ``listdir``, ``stat`` and ``statvfs`` keep succeeding while everything else returns EIO.

Fault injection goes through the same seam, so injected and real faults take the same path:

* in-process: ``inject(dir, errno.EIO, ops={"write"}, count=1)`` makes the next write under ``dir`` fail;
  ``count=None`` makes every matching op fail; ``clear()`` removes all rules;
* out of process: start the server with ``KJBOD_FAULTS=/path/faults.json``. The seam stats that file on each
  operation and re-reads it when it changes (a missing file means no faults), so a test can arm a fault while
  the server runs. Format: ``{"faults": [{"dir": "/data/b", "errno": "EIO", "ops": ["write"], "count": 1}]}``
  (a bare list works too; ``errno`` is a name or a number; ``ops`` and ``count`` are optional). An entry with
  ``"delay_ms": 200`` instead of an errno makes each matching op that much slower (a slow disk);
* a slow or hung dir in process: ``slow(dir, delay_ms=200)``, or ``rule = slow(dir, hold=True)`` to block every
  op until ``rule.release()``.

**A full dir is not a failed dir.** ``ENOSPC`` and ``EDQUOT`` mark the dir *full* instead of offline
(:meth:`LogDirIO.fail` raises :class:`LogDirFullError`): it keeps serving reads, renames, unlinks and whatever
fits in its reserve; appends ask :meth:`LogDirIO.make_room` first and are refused while the dir is full or would
drop below its reserve (``log.dir.reserved.bytes``; default the smaller of 1% of the filesystem and 1 GiB). Free
space is an estimate: set by each ``statvfs`` (:meth:`LogDirIO.refresh_space`, run by the owner's periodic check
and by size probes) and lowered by every byte written through the seam, so an append costs a subtraction, not a
``statvfs``. A real ``statvfs`` is taken only when the estimate nears the reserve. When a check finds usable bytes
above the reserve again the dir is back (logged); crossing 80%, 90% and 95% used logs a warning once per crossing.
In process, ``fake_space(dir, total, usable)`` makes ``statvfs`` of a dir answer those numbers (a fault file
entry ``{"dir": ..., "total_bytes": N, "usable_bytes": M}`` does the same out of process; with ``"device": D`` it
also makes the dir's ``st_dev`` read D, so dirs on one test filesystem can pass for separate disks).

Every operation is stamped with its start while it runs (one dict entry per thread), so a watchdog can tell a dir
whose operation never returns (:mod:`kjbod.storage.health`). A dir failed that way is ``stalled``: the stuck call,
if it ever returns, raises like any operation on an offline dir, so what it did is never used.

With no rule and no ``KJBOD_FAULTS`` the cost is one attribute test per operation.

Op names a rule can name: see :data:`OPS`.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import json
import os
import threading
import time
from bisect import bisect_right as _bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from threading import get_ident as _get_ident
from time import monotonic as _monotonic
from typing import Any, NoReturn

import structlog

from kjbod.storage.errors import KafkaStorageError, LogDirFullError, LogDirLockedError

log = structlog.get_logger("kjbod.storage.fsio")

OPS = frozenset(
    {
        "open",
        "write",
        "read",
        "fsync",
        "truncate",
        "rename",
        "unlink",
        "rmdir",
        "listdir",
        "mkdir",
        "stat",
        "statvfs",
        "lock",
        "copy",
        "dup",
    }
)

FAULTS_ENV = "KJBOD_FAULTS"
# Upper bounds (seconds) of the per-op latency buckets each dir keeps for the metrics endpoint (kjbod.metrics);
# the last bucket, above 10 s, is open.
LATENCY_BOUNDS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    5.0, 10.0)
_PROCESS_ERRNOS = frozenset({_errno.EMFILE, _errno.ENFILE, _errno.ENOMEM})
SPACE_ERRNOS = frozenset({_errno.ENOSPC, _errno.EDQUOT})  # the dir is full, not failed
USAGE_WARNINGS = (80, 90, 95)  # % used: a warning once per upward crossing
DEFAULT_RESERVE_FRACTION = 0.01
DEFAULT_RESERVE_CAP = 1 << 30  # the default reserve: min(1% of the filesystem, 1 GiB)


# --------------------------------------------------------------------------------------------- fault injection


@dataclass
class FaultRule:
    """One injected fault: an errno raised, or (``errno`` 0) a slow or held disk: the op first sleeps
    ``delay_ms``, or waits until ``release()`` when ``held``, then runs for real."""

    dir: str
    errno: int
    ops: frozenset[str] | None = None
    remaining: int | None = None
    delay_ms: float = 0.0
    gate: threading.Event | None = None

    def release(self) -> None:
        """Let every op this rule holds (now and later) go on."""
        if self.gate is not None:
            self.gate.set()

    def matches(self, op: str, path: str) -> bool:
        if self.ops is not None and op not in self.ops:
            return False
        d = self.dir
        return path == d or path.startswith(d + os.sep)


def _parse_errno(value: Any) -> int:
    if isinstance(value, int):
        return value
    code = getattr(_errno, str(value).upper(), None)
    if not isinstance(code, int):
        raise ValueError(f"unknown errno name {value!r} in {FAULTS_ENV} file")
    return code


def _rule(
    dir: str, err: int, ops: Iterable[str] | None, count: int | None, delay_ms: float = 0.0, hold: bool = False
) -> FaultRule:
    op_set = frozenset(ops) if ops is not None else None
    if op_set is not None and not op_set <= OPS:
        raise ValueError(f"unknown fault ops {sorted(op_set - OPS)}; known: {sorted(OPS)}")
    if delay_ms < 0:
        raise ValueError(f"negative fault delay {delay_ms} ms")
    gate = threading.Event() if hold else None
    return FaultRule(os.path.abspath(dir), err, op_set, count, float(delay_ms), gate)


class FaultInjector:
    """Rules checked before each seam operation. ``active`` is the only thing the fast path reads."""

    def __init__(self, env_path: str | None = None) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._env_path = env_path
        self._env_sig: tuple[int, int, int] | None = None
        self._env_rules: list[FaultRule] = []
        self._space: dict[str, tuple[int, int]] = {}  # dir -> (total, usable) that statvfs answers
        self._env_space: dict[str, tuple[int, int]] = {}
        self._env_device: dict[str, int] = {}  # dir -> the st_dev a fault file's space entry gives it
        self.active = env_path is not None

    def inject(
        self, dir: str, err: int = _errno.EIO, *, ops: Iterable[str] | None = None, count: int | None = None
    ) -> FaultRule:
        return self._add(_rule(dir, err, ops, count))

    def slow(
        self, dir: str, *, delay_ms: float = 0.0, hold: bool = False, ops: Iterable[str] | None = None
    ) -> FaultRule:
        """Delay (``delay_ms``) or hold (``hold``: until the rule's ``release()``) ``ops`` on paths under ``dir``."""
        return self._add(_rule(dir, 0, ops, None, delay_ms, hold))

    def _add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules.append(rule)
            self.active = True
        return rule

    def fake_space(self, dir: str, total: int, usable: int) -> None:
        """Make ``statvfs`` of ``dir`` answer ``total`` and ``usable`` bytes (a disk of that size and fill)."""
        with self._lock:
            self._space[os.path.abspath(dir)] = (int(total), int(usable))
            self.active = True

    def space_for(self, dir: str) -> tuple[int, int] | None:
        with self._lock:
            if self._env_path is not None:
                self._reload_env()
            return self._space.get(dir) or self._env_space.get(dir)

    def device_for(self, dir: str) -> int | None:
        with self._lock:
            if self._env_path is not None:
                self._reload_env()
            return self._env_device.get(dir)

    def clear(self) -> None:
        with self._lock:
            held = [r for r in self._rules if r.gate is not None]
            self._rules.clear()
            self._space.clear()
            self.active = self._env_path is not None
        for rule in held:  # nothing stays stuck on a rule that no longer exists
            rule.release()

    def _reload_env(self) -> None:
        # Called with the lock held. A stat per operation is cheap next to the I/O and lets a test arm a fault
        # in a running server by rewriting the file (mtime, size or inode changes).
        path = self._env_path
        assert path is not None
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._env_sig = None
            self._env_rules = []
            self._env_space = {}
            self._env_device = {}
            return
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        if sig == self._env_sig:
            return
        self._env_sig = sig
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            # A half-written control file: keep the old rules, try again on the next operation.
            self._env_sig = None
            return
        entries = data.get("faults", []) if isinstance(data, dict) else data
        self._env_space = {
            os.path.abspath(e["dir"]): (int(e["total_bytes"]), int(e["usable_bytes"]))
            for e in entries
            if "usable_bytes" in e
        }
        self._env_device = {os.path.abspath(e["dir"]): int(e["device"]) for e in entries
                            if "usable_bytes" in e and "device" in e}
        self._env_rules = [
            _rule(e["dir"], 0, e.get("ops"), None, float(e["delay_ms"]))
            if "delay_ms" in e
            else _rule(e["dir"], _parse_errno(e.get("errno", "EIO")), e.get("ops"), e.get("count"))
            for e in entries
            if "usable_bytes" not in e
        ]

    def check(self, op: str, path: str) -> None:
        """Delay or hold ``op`` as slow rules say, then raise the ``OSError`` of the first errno rule matching it."""
        waits: list[FaultRule] = []
        with self._lock:
            if self._env_path is not None:
                self._reload_env()
            raise_rule = None
            for rules in (self._rules, self._env_rules):
                for rule in rules:
                    if not rule.matches(op, path):
                        continue
                    if rule.errno == 0:
                        waits.append(rule)
                        continue
                    if rule.remaining is not None:
                        if rule.remaining <= 0:
                            continue
                        rule.remaining -= 1
                    raise_rule = rule
                    break
                if raise_rule is not None:
                    break
        for rule in waits:  # outside the lock: a held op must not hold up other dirs' checks
            if rule.delay_ms:
                time.sleep(rule.delay_ms / 1000.0)
            if rule.gate is not None:
                rule.gate.wait()
        if raise_rule is not None:
            raise OSError(raise_rule.errno, f"{os.strerror(raise_rule.errno)} (injected)", path)


FAULTS = FaultInjector(os.environ.get(FAULTS_ENV) or None)


def inject(
    dir: str, err: int = _errno.EIO, *, ops: Iterable[str] | None = None, count: int | None = None
) -> FaultRule:
    """Make ``ops`` (default: all) on paths under ``dir`` fail with ``err``; ``count`` times, or always."""
    return FAULTS.inject(dir, err, ops=ops, count=count)


def slow(dir: str, *, delay_ms: float = 0.0, hold: bool = False, ops: Iterable[str] | None = None) -> FaultRule:
    """Make ``ops`` (default: all) on paths under ``dir`` take ``delay_ms`` longer, or block until the returned
    rule's ``release()`` (``hold=True``): a slow or hung disk, in process."""
    return FAULTS.slow(dir, delay_ms=delay_ms, hold=hold, ops=ops)


def fake_space(dir: str, total: int, usable: int) -> None:
    """Make ``statvfs`` of ``dir`` answer ``total`` and ``usable`` bytes, in process, until :func:`clear`."""
    FAULTS.fake_space(dir, total, usable)


def clear() -> None:
    """Remove every in-process fault rule and fake space (held operations are released)."""
    FAULTS.clear()


# --------------------------------------------------------------------------------------------- no waiting


class WouldBlock(Exception):
    """Raised in :func:`no_waiting` mode by an operation that might wait for a disk: a read of data not in the
    page cache (``preadv`` with ``RWF_NOWAIT``), any open. Not a disk failure: the caller does the work on the
    dir's worker instead."""


_NOWAIT = threading.local()


def waiting_allowed() -> bool:
    return not getattr(_NOWAIT, "on", False)


def pread_cached(fd: int, n: int, offset: int, what: str) -> bytes:
    """``n`` bytes at ``offset`` of ``fd`` from the page cache only (``preadv`` with ``RWF_NOWAIT``); raises
    :class:`WouldBlock` if any of them is not cached (``what`` names the file in its message)."""
    buf = bytearray(n)
    try:
        got = os.preadv(fd, [buf], offset, os.RWF_NOWAIT)
    except OSError as e:  # EAGAIN: not cached; EOPNOTSUPP: this filesystem cannot say
        raise WouldBlock(f"read {what}: {e}") from None
    if got < n:  # the file ends here, or only part of it is cached
        try:
            more = os.preadv(fd, [bytearray(1)], offset + got, os.RWF_NOWAIT)
        except OSError:
            more = 1
        if more:
            raise WouldBlock(f"read {what}: {got} of {n} bytes cached")
        return bytes(memoryview(buf)[:got])  # one copy, of what was read (no resize of buf first)
    return bytes(buf)


def pread_region(fd: int, n: int, offset: int, what: str) -> bytes:
    """A read of a file region's bytes by whoever holds it: from the page cache only in :class:`no_waiting`
    mode (else :class:`WouldBlock`), a plain ``pread`` otherwise."""
    if _NOWAIT.__dict__.get("on"):
        return pread_cached(fd, n, offset, what)
    return os.pread(fd, n, offset)


class no_waiting:
    """``with no_waiting():`` on this thread, reads that would wait for a disk raise :class:`WouldBlock` (the
    event loop serves page-cache hits itself and hands the rest to the dir's worker)."""

    def __enter__(self) -> None:
        _NOWAIT.on = True

    def __exit__(self, *exc: object) -> None:
        _NOWAIT.on = False


# --------------------------------------------------------------------------------------------- file regions


def _default_region_factory(fd: int, offset: int, count: int) -> Any:
    from kjbod.wire.region import FileRegion

    return FileRegion(fd, offset, count, os.close)


# Builds the zero-copy region a read returns; the region owns the fd (a dup). Tests may replace it.
region_factory: Callable[[int, int, int], Any] = _default_region_factory


# --------------------------------------------------------------------------------------------- the seam

OfflineCallback = Callable[["LogDirIO", str, BaseException], None]


class LogDirIO:
    """All file operations on one log dir, and that dir's online/offline state."""

    def __init__(
        self, path: str, *, on_offline: OfflineCallback | None = None, reserved_bytes: int = -1
    ) -> None:
        self.path = os.path.abspath(path)
        self.online = True
        self.offline_reason: str | None = None
        self.offline_at_ms: int | None = None  # wall-clock time it went offline, for kjbod log-dirs describe
        self.on_offline = on_offline
        self._state_lock = threading.Lock()
        # Space (see the module doc): -1 while unknown (no statvfs yet). usable_bytes is lowered by every write.
        self.total_bytes = -1
        self._reserve_config = reserved_bytes  # log.dir.reserved.bytes; -1: min(1% of the fs, 1 GiB)
        self._reserve = self._effective_reserve()  # kept as a plain number: every append compares with it
        self.usable_bytes = -1
        self.full = False
        self.full_reason: str | None = None
        self._full_since = 0.0
        self._full_need = 0  # the refused append's size: the dir is back once that fits above the reserve again
        self._last_append = 0  # the size of the latest append asked for (an ENOSPC midway is refused for it)
        self._usage_level = 0  # the highest of USAGE_WARNINGS crossed (0: none)
        # Stall detection (see kjbod.storage.health): the operation each thread has outstanding on this dir,
        # {thread id: (op, path, monotonic start)}, and the slowest operation finished since the last look.
        self._busy: dict[object, tuple[str, str, float]] = {}  # by thread id, or a native write's key
        self._slowest_s = 0.0
        self.stalled = False  # failed because an operation never returned: what such an operation did is void
        # op -> finished operations per latency bucket (LATENCY_BOUNDS_S), and their total seconds: plain
        # increments from whichever thread ran the op (a lost update under a race only blurs a metric).
        self.latency_buckets: dict[str, list[int]] = {op: [0] * (len(LATENCY_BOUNDS_S) + 1) for op in OPS}
        self.latency_seconds: dict[str, float] = dict.fromkeys(OPS, 0.0)

    def __repr__(self) -> str:
        return f"LogDirIO({self.path!r}, online={self.online}, full={self.full})"

    # -- space

    @property
    def reserved_bytes(self) -> int:
        """Bytes kept free for what must work when appends stop (indexes, checkpoints, snapshots, recovery, a
        move's swap): ``log.dir.reserved.bytes``, or min(1% of the filesystem, 1 GiB); 0 until the size is known."""
        return self._reserve

    @property
    def reserved_bytes_config(self) -> int:
        return self._reserve_config

    @reserved_bytes_config.setter
    def reserved_bytes_config(self, value: int) -> None:
        self._reserve_config = value
        self._reserve = self._effective_reserve()

    def _effective_reserve(self) -> int:
        if self._reserve_config >= 0:
            return self._reserve_config
        if self.total_bytes < 0:
            return 0
        return min(int(self.total_bytes * DEFAULT_RESERVE_FRACTION), DEFAULT_RESERVE_CAP)

    def full_error(self, wanted: int = 0) -> LogDirFullError:
        usable = max(self.usable_bytes, 0)
        why = f" ({self.full_reason})" if self.full and self.full_reason else ""
        need = f"; this append needs {wanted} bytes" if wanted and not self.full else ""
        return LogDirFullError(
            f"log dir {self.path} is full: {usable} bytes free, {self.reserved_bytes} reserved{need}{why}; "
            "appends are refused until space returns",
            log_dir=self.path,
        )

    def make_room(self, n: int) -> None:
        """Raise :class:`LogDirFullError` unless ``n`` more bytes fit above the reserve. Costs a comparison; a
        ``statvfs`` only when the estimate is within ``n`` of the reserve."""
        if self.full:
            raise self.full_error(n)
        self._last_append = n
        if self.total_bytes < 0 or self.usable_bytes - n >= self._reserve:
            return  # size not known yet (no statvfs so far), or room enough
        self.refresh_space()  # the estimate only ever falls between checks: ask the filesystem
        if self.full or self.usable_bytes - n < self._reserve:
            error = self.full_error(n)
            with self._state_lock:
                first = not self.full
                self.full, self._full_need = True, n
                self.full_reason = f"an append of {n} bytes would go below the reserve"
                if first:
                    self._full_since = _monotonic()
            if first:
                log.warning("log_dir_full", log_dir=self.path, usable_bytes=self.usable_bytes,
                            reserved_bytes=self.reserved_bytes, append_bytes=n,
                            effect="appends refused with KAFKA_STORAGE_ERROR; reads, moves off and deletes go on")
            raise error

    def room_for(self, n: int) -> bool:
        """Whether ``n`` more bytes fit above the reserve by the current estimate (no ``statvfs``): where
        :meth:`make_room` would pass without asking the filesystem."""
        return not self.full and (self.total_bytes < 0 or self.usable_bytes - n >= self._reserve)

    def refresh_space(self) -> tuple[int, int]:
        """One ``statvfs``: correct the estimate, enter or leave the full state, warn on crossing 80/90/95%."""
        total, usable = self.statvfs()
        return total, usable

    def _space_seen(self, total: int, usable: int) -> None:
        self.total_bytes, self.usable_bytes = total, usable
        self._reserve = self._effective_reserve()
        if total > 0:
            used_pct = (total - usable) * 100 / total
            level = max((w for w in USAGE_WARNINGS if used_pct >= w), default=0)
            if level > self._usage_level:
                log.warning("log_dir_usage_high", log_dir=self.path, used_percent=round(used_pct, 1),
                            crossed_percent=level, usable_bytes=usable, reserved_bytes=self.reserved_bytes)
            self._usage_level = level
        reserve = self.reserved_bytes
        with self._state_lock:
            was_full = self.full
            below = usable <= reserve + (self._full_need if was_full else 0)
            if below and not was_full:
                self.full = True
                self.full_reason = f"{usable} usable bytes is not above the reserve"
                self._full_since = _monotonic()
            elif was_full and not below:
                self.full = False
                self.full_reason = None
                self._full_need = 0
        if below and not was_full:
            log.warning("log_dir_full", log_dir=self.path, usable_bytes=usable, reserved_bytes=reserve,
                        reason="usable bytes at or below log.dir.reserved.bytes",
                        effect="appends refused with KAFKA_STORAGE_ERROR; reads, moves off and deletes go on")
        elif was_full and not below:
            log.info("log_dir_space_returned", log_dir=self.path, usable_bytes=usable, reserved_bytes=reserve,
                     full_for_s=round(_monotonic() - self._full_since, 1), effect="appends resume")

    def _out_of_space(self, op: str, path: str, exc: BaseException) -> NoReturn:
        with self._state_lock:
            first = not self.full
            self.full = True
            self.full_reason = f"{op} {path} failed: {exc}"
            self.usable_bytes = 0
            self._full_need = max(self._full_need, self._last_append)
            if first:
                self._full_since = _monotonic()
        if first:
            log.warning("log_dir_full", log_dir=self.path, op=op, path=path, error=str(exc),
                        effect="appends refused with KAFKA_STORAGE_ERROR; reads, moves off and deletes go on")
        raise self.full_error() from exc

    # -- state

    def offline_error(self) -> KafkaStorageError:
        return KafkaStorageError(f"log dir {self.path} is offline: {self.offline_reason}", log_dir=self.path)

    def ensure_online(self) -> None:
        if not self.online:
            raise self.offline_error()

    def fail(self, op: str, path: str, exc: BaseException) -> NoReturn:
        """Mark this dir offline (once) because ``op`` on ``path`` failed, then raise KafkaStorageError.

        Running out of space (ENOSPC, EDQUOT) makes the dir full, not offline (:class:`LogDirFullError`).
        Running out of file descriptors or memory is the process's problem, not the disk's: the operation
        fails with KafkaStorageError but the dir stays online (Kafka would take it offline; with one dir per
        disk that turns an fd leak into a lost disk)."""
        code = getattr(exc, "errno", None)
        if code in SPACE_ERRNOS:
            self._out_of_space(op, path, exc)
        if code in _PROCESS_ERRNOS:
            log.warning("storage_resource_exhausted", log_dir=self.path, op=op, path=path, error=str(exc))
            raise KafkaStorageError(f"{op} {path} failed: {exc}", log_dir=self.path) from exc
        self.mark_offline(op, path, exc)
        raise KafkaStorageError(
            f"log dir {self.path} is offline: {op} {path} failed: {exc}", log_dir=self.path
        ) from exc

    def mark_offline(self, op: str, path: str, exc: BaseException, reason: str | None = None) -> None:
        """Take this dir offline (once: logged, the owner's ``on_offline`` called) because ``op`` on ``path``
        failed with ``exc``; whatever ``exc`` is, even a full dir's error (a dir that could not be loaded).
        ``reason`` (what ``offline_reason`` says, shown by DescribeLogDirs) defaults to the failed call and its
        error."""
        with self._state_lock:
            first = self.online
            if first:
                self.online = False
                self.offline_reason = reason or f"{op} {path} failed: {exc}"
                self.offline_at_ms = int(time.time() * 1000)
        if first:
            log.error("log_dir_offline", log_dir=self.path, op=op, path=path, error=str(exc))
            callback = self.on_offline
            if callback is not None:
                callback(self, self.offline_reason or "", exc)

    # -- operation tracking: a start stamp per thread, so a watchdog can see an operation that never returns

    def _begin(self, op: str, path: str) -> float:
        if not self.online:
            raise self.offline_error()
        started = _monotonic()
        self._busy[_get_ident()] = (op, path, started)
        if FAULTS.active:
            try:
                FAULTS.check(op, path)
            except OSError as e:
                self._end(started)
                self.fail(op, path, e)
        return started

    def begin_handed(self, op: str, path: str, key: object) -> float:
        """As _begin, for an operation a thread of C code makes for this one (PartitionLog.append_native): counted
        under ``key`` until :meth:`end_handed`, which any thread may call. Injected faults are not checked: the
        native path is not taken while any are set."""
        if not self.online:
            raise self.offline_error()
        started = _monotonic()
        self._busy[key] = (op, path, started)
        return started

    def end_handed(self, key: object, started: float) -> None:
        self._ended(self._busy.pop(key, None), started)

    def _end(self, started: float) -> None:
        self._ended(self._busy.pop(_get_ident(), None), started)

    def _ended(self, entry: tuple[str, str, float] | None, started: float) -> None:
        took = _monotonic() - started
        if entry is not None:
            self.latency_buckets[entry[0]][_bisect_right(LATENCY_BOUNDS_S, took)] += 1
            self.latency_seconds[entry[0]] += took
        if took > self._slowest_s:
            self._slowest_s = took
        if self.stalled:
            # The dir was failed while this call was stuck in it: whatever it did counts for nothing.
            raise self.offline_error()

    def oldest_outstanding(self) -> tuple[str, str, float] | None:
        """(op, path, monotonic start) of the longest-running operation on this dir, or None when idle."""
        busy = list(self._busy.values())  # one C-level copy: safe while other threads add and remove entries
        return min(busy, key=lambda b: b[2]) if busy else None

    def take_slowest(self) -> float:
        """Seconds taken by the slowest operation finished since the last call (then reset)."""
        slowest, self._slowest_s = self._slowest_s, 0.0
        return slowest

    def fail_stalled(self, op: str, path: str, seconds: float, why: str = "log.dir.stall.timeout.ms") -> None:
        """Fail this dir (once, as an I/O error would) because ``op`` on ``path`` has not returned for ``seconds``.
        The stuck call cannot be interrupted; when it returns it raises like any operation on an offline dir."""
        if not self.online:
            return
        self.stalled = True
        exc = TimeoutError(_errno.ETIMEDOUT, f"no answer for {seconds:.1f}s ({why})")
        self.mark_offline(op, path, exc, f"stalled: {op} {path} did not return for {seconds:.1f} s ({why})")

    def _pre(self, op: str, path: str) -> None:
        if not self.online:
            raise self.offline_error()
        if FAULTS.active:
            try:
                FAULTS.check(op, path)
            except OSError as e:
                self.fail(op, path, e)

    def join(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    # -- path operations

    def open(self, path: str, flags: int, mode: int = 0o644) -> FileHandle:
        if not waiting_allowed():
            raise WouldBlock(f"open {path}")
        t = self._begin("open", path)
        try:
            fd = os.open(path, flags | os.O_CLOEXEC, mode)
        except OSError as e:
            self.fail("open", path, e)
        finally:
            self._end(t)
        return FileHandle(fd, path, self)

    def open_or_none(self, path: str, flags: int = os.O_RDONLY) -> FileHandle | None:
        """Open an existing file; None if it does not exist."""
        if not waiting_allowed():
            raise WouldBlock(f"open {path}")
        t = self._begin("open", path)
        try:
            fd = os.open(path, flags | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            self.fail("open", path, e)
        finally:
            self._end(t)
        return FileHandle(fd, path, self)

    def mkdir(self, path: str, *, exist_ok: bool = False, parents: bool = False) -> None:
        t = self._begin("mkdir", path)
        try:
            if parents:
                os.makedirs(path, exist_ok=exist_ok)
            else:
                os.mkdir(path)
        except FileExistsError:
            if not exist_ok:
                raise
        except OSError as e:
            self.fail("mkdir", path, e)
        finally:
            self._end(t)

    def listdir(self, path: str | None = None) -> list[str]:
        path = self.path if path is None else path
        t = self._begin("listdir", path)
        try:
            return os.listdir(path)
        except OSError as e:
            self.fail("listdir", path, e)
        finally:
            self._end(t)

    def list_entries(self, path: str | None = None) -> list[tuple[str, bool]]:
        """(name, is_dir) for each entry of ``path``; the type comes from the dirent where the fs gives it."""
        path = self.path if path is None else path
        t = self._begin("listdir", path)
        try:
            with os.scandir(path) as it:
                return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        except OSError as e:
            self.fail("listdir", path, e)
        finally:
            self._end(t)

    def stat_or_none(self, path: str) -> os.stat_result | None:
        t = self._begin("stat", path)
        try:
            return os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            self.fail("stat", path, e)
        finally:
            self._end(t)

    def exists(self, path: str) -> bool:
        return self.stat_or_none(path) is not None

    def rename(self, src: str, dst: str) -> None:
        if FAULTS.active:
            self._pre("rename", dst)
        t = self._begin("rename", src)
        try:
            os.replace(src, dst)
        except OSError as e:
            self.fail("rename", src, e)
        finally:
            self._end(t)

    def unlink(self, path: str, *, missing_ok: bool = False) -> None:
        t = self._begin("unlink", path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            if not missing_ok:
                raise
        except OSError as e:
            self.fail("unlink", path, e)
        finally:
            self._end(t)

    def rmdir(self, path: str) -> None:
        t = self._begin("rmdir", path)
        try:
            os.rmdir(path)
        except OSError as e:
            self.fail("rmdir", path, e)
        finally:
            self._end(t)

    def rmtree(self, path: str) -> None:
        """Remove a directory tree (a ``-delete`` dir), every step through the seam."""
        if self.stat_or_none(path) is None:
            return
        for name, is_dir in self.list_entries(path):
            child = os.path.join(path, name)
            if is_dir:
                self.rmtree(child)
            else:
                self.unlink(child, missing_ok=True)
        self.rmdir(path)

    def statvfs(self) -> tuple[int, int]:
        """(total bytes, usable bytes) of the filesystem holding this dir, as the JDK computes them."""
        t = self._begin("statvfs", self.path)
        try:
            st = os.statvfs(self.path)
        except OSError as e:
            self.fail("statvfs", self.path, e)
        finally:
            self._end(t)
        total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        if FAULTS.active:
            fake = FAULTS.space_for(self.path)
            if fake is not None:
                total, usable = fake
        self._space_seen(total, usable)
        return total, usable

    def device(self) -> int:
        """st_dev of the dir: dirs on one filesystem share free space (placement accounts for that)."""
        t = self._begin("stat", self.path)
        try:
            device = os.stat(self.path).st_dev
        except OSError as e:
            self.fail("stat", self.path, e)
        finally:
            self._end(t)
        if FAULTS.active:
            fake = FAULTS.device_for(self.path)
            if fake is not None:
                return fake
        return device

    def fsync_dir(self, path: str | None = None) -> None:
        """fsync a directory so a rename or create in it is durable."""
        path = self.path if path is None else path
        t = self._begin("fsync", path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            self.fail("fsync", path, e)
        finally:
            self._end(t)

    def read_bytes_or_none(self, path: str) -> bytes | None:
        fh = self.open_or_none(path)
        if fh is None:
            return None
        try:
            return fh.read_all()
        finally:
            fh.close()

    def write_atomic(self, path: str, data: bytes, *, fsync: bool = True) -> None:
        """Write ``path`` so a crash leaves either the old or the new content: temp file, fsync, rename, fsync
        of the parent dir (the rename itself is only durable once the dir is synced)."""
        tmp = path + ".tmp"
        fh = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            fh.write(data)
            if fsync:
                fh.fsync()
        finally:
            fh.close()
        self.rename(tmp, path)
        if fsync:
            self.fsync_dir(os.path.dirname(path))

    def lock(self, name: str = ".lock") -> FileHandle:
        """Take the dir's lock file, so two servers cannot share a dir.

        Both lock kinds are taken: ``flock`` (per open file, so it also excludes a second LogManager in this
        process) and a POSIX ``lockf`` record lock (what a JVM's FileChannel.tryLock takes, so a Kafka broker
        and kjbod exclude each other). Closing the handle releases both.
        """
        path = self.join(name)
        fh = self.open(path, os.O_RDWR | os.O_CREAT)
        t = self._begin("lock", path)
        try:
            fcntl.flock(fh.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(fh.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError) as e:
            fh.close()
            raise LogDirLockedError(
                f"log dir {self.path} is in use: another kjbod or Kafka process holds {path} ({e.strerror})"
            ) from e
        except OSError as e:
            fh.close()
            self.fail("lock", path, e)
        finally:
            self._end(t)
        return fh


def _fd_size(fd: int) -> int:
    return os.fstat(fd).st_size


_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>; CPython 3.11 has no os.sync_file_range
_sync_file_range_fn: Any = None  # None: not looked up yet; False: unavailable


def _sync_file_range(fd: int, offset: int, count: int) -> None:
    """sync_file_range(fd, offset, count, SYNC_FILE_RANGE_WRITE) through libc, errors ignored (see
    FileHandle.start_writeback); a no-op where libc lacks it or the filesystem refuses it."""
    global _sync_file_range_fn
    fn = _sync_file_range_fn
    if fn is None:
        fn = False
        try:
            import ctypes
            import ctypes.util

            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fn = libc.sync_file_range
            fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = False
        _sync_file_range_fn = fn
    if fn is False:
        return
    if fn(fd, offset, count, _SYNC_FILE_RANGE_WRITE) != 0:
        import ctypes

        if ctypes.get_errno() == _errno.ENOSYS:
            _sync_file_range_fn = False


class FileHandle:
    """An fd opened through a :class:`LogDirIO`, so fd operations are checked against the same dir."""

    __slots__ = ("fd", "path", "io")

    def __init__(self, fd: int, path: str, io: LogDirIO) -> None:
        self.fd = fd
        self.path = path
        self.io = io

    def __repr__(self) -> str:
        return f"FileHandle({self.path!r}, fd={self.fd})"

    def write(self, data: bytes | bytearray | memoryview) -> int:
        io = self.io
        t = io._begin("write", self.path)
        try:
            view = memoryview(data)
            total = len(view)
            done = 0
            try:
                while done < total:
                    done += os.write(self.fd, view[done:])
            finally:
                io.usable_bytes -= done
            return total
        except OSError as e:
            io.fail("write", self.path, e)
        finally:
            io._end(t)

    def writev(self, buffers: Sequence[bytes | bytearray | memoryview]) -> int:
        """Write all buffers at the current position with as few syscalls as the kernel allows."""
        io = self.io
        t = io._begin("write", self.path)
        try:
            total = sum(map(len, buffers))
            done = os.writev(self.fd, buffers)
            io.usable_bytes -= done
            if done < total:
                # Rare (a signal, a nearly full disk): finish the rest buffer by buffer.
                skip = done
                for b in buffers:
                    n = len(b)
                    if skip >= n:
                        skip -= n
                        continue
                    view = memoryview(b)[skip:]
                    skip = 0
                    while len(view):
                        n = os.write(self.fd, view)
                        io.usable_bytes -= n
                        view = view[n:]
            return total
        except OSError as e:
            io.fail("write", self.path, e)
        finally:
            io._end(t)

    def pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        io = self.io
        t = io._begin("write", self.path)
        try:
            view = memoryview(data)
            while len(view):
                n = os.pwrite(self.fd, view, offset)
                io.usable_bytes -= n
                view = view[n:]
                offset += n
        except OSError as e:
            io.fail("write", self.path, e)
        finally:
            io._end(t)

    def pread(self, n: int, offset: int, *, cached: bool = False) -> bytes:
        """``n`` bytes at ``offset``; from the page cache only (:class:`WouldBlock` if any of them is not cached)
        under this thread's :class:`no_waiting`, or with ``cached`` whatever the thread's mode (the caller says
        so: PartitionLog.read_to_end_cached, on the event loop)."""
        io = self.io
        t = io._begin("read", self.path)
        try:
            if cached or _NOWAIT.__dict__.get("on"):
                return pread_cached(self.fd, n, offset, self.path)
            return os.pread(self.fd, n, offset)
        except OSError as e:
            io.fail("read", self.path, e)
        finally:
            io._end(t)

    def read_all(self) -> bytes:
        size = self.size()
        chunks = []
        offset = 0
        while True:
            chunk = self.pread(max(size - offset, 1 << 16), offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def fsync(self) -> None:
        io = self.io
        t = io._begin("fsync", self.path)
        try:
            os.fsync(self.fd)
        except OSError as e:
            io.fail("fsync", self.path, e)
        finally:
            io._end(t)

    def start_writeback(self, offset: int = 0, count: int = 0) -> None:
        """Start writing ``count`` bytes from ``offset`` (0: to the end) back to the disk now, without waiting:
        Linux's ``sync_file_range(SYNC_FILE_RANGE_WRITE)``, so a later fsync finds the data on its way.

        Only a hint, never a durability step: it does not write metadata and does not flush the disk's cache,
        so data still counts only after :meth:`fsync`. For that reason its errors are not reported here: a
        failed writeback is remembered by the kernel and returned by the fsync that follows, which takes the
        dir offline. Without the call (not Linux, or a filesystem that refuses it) it does nothing."""
        _sync_file_range(self.fd, offset, count)

    def truncate(self, size: int) -> None:
        io = self.io
        t = io._begin("truncate", self.path)
        try:
            os.ftruncate(self.fd, size)
        except OSError as e:
            io.fail("truncate", self.path, e)
        finally:
            io._end(t)

    def seek_end(self) -> int:
        io = self.io
        t = io._begin("read", self.path)
        try:
            return os.lseek(self.fd, 0, os.SEEK_END)
        except OSError as e:
            io.fail("read", self.path, e)
        finally:
            io._end(t)

    def size(self) -> int:
        io = self.io
        t = io._begin("stat", self.path)
        try:
            return _fd_size(self.fd)
        except OSError as e:
            io.fail("stat", self.path, e)
        finally:
            io._end(t)

    def dup(self) -> int:
        io = self.io
        t = io._begin("dup", self.path)
        try:
            return os.dup(self.fd)
        except OSError as e:
            io.fail("dup", self.path, e)
        finally:
            io._end(t)

    def region(self, offset: int, count: int) -> Any:
        """A zero-copy file region over this file that owns its own fd (a dup), for sendfile by the transport."""
        fd = self.dup()
        try:
            return region_factory(fd, offset, count)
        except BaseException:
            os.close(fd)
            raise

    def copy_to(self, dst: FileHandle, offset: int, count: int, *, chunk: int = 8 << 20) -> int:
        """Copy ``count`` bytes from ``offset`` of this file to ``dst``'s current position with os.sendfile (the
        kernel copies; nothing passes through Python). Returns the bytes copied (fewer at end of file).

        The replica mover copies closed segments this way. One syscall reads one dir and writes another, so when
        it fails the source is probed with a 1-byte pread to decide which dir went bad."""
        src_io, dst_io = self.io, dst.io
        dst_io.ensure_online()
        dst_io.make_room(count)  # a copy into a dir honours its reserve, as an append does
        if FAULTS.active:
            dst_io._pre("copy", dst.path)
        t = src_io._begin("copy", self.path)
        copied = 0
        try:
            while copied < count:
                n = os.sendfile(dst.fd, self.fd, offset + copied, min(chunk, count - copied))
                if n == 0:
                    break
                copied += n
                dst_io.usable_bytes -= n
        except OSError as e:
            try:
                os.pread(self.fd, 1, offset + copied)
            except OSError as src_exc:
                src_io.fail("copy", self.path, src_exc)
            dst_io.fail("copy", dst.path, e)
        finally:
            src_io._end(t)
        return copied

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                # close() errors are not actionable here: the data path already reported any write error.
                pass
