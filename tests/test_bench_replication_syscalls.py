"""tools/bench/replication --syscalls: the calls per system call read from `strace -c`'s table (with and without its
errors column), its header, rule and total lines left out."""

from __future__ import annotations

from tools.bench.replication import _strace_counts

TABLE = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 41.25    0.012000          12      1000           write
 30.10    0.009000           9      1003         3 read
  8.00    0.002400           2       240           getpid
  0.00    0.000000           0         2         2 restart_syscall
------ ----------- ----------- --------- --------- ----------------
100.00    0.023400          10      2245         5 total
"""


def test_the_strace_summary_is_read_per_system_call() -> None:
    counts = _strace_counts(TABLE)
    assert counts == {"write": 1000, "read": 1003, "getpid": 240, "restart_syscall": 2}
    assert sum(counts.values()) == 2245  # the total line's calls, not counted twice


def test_an_empty_or_failed_summary_counts_nothing() -> None:
    assert not _strace_counts("")
    assert not _strace_counts("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n")
