"""The replication bench's latency rounds laid next to the brokers' traces (kjbod.net.trace, `--trace`): where
each record's time went, leg by leg, for the slowest records of each round against the middle ones; and which
background events ran while the slowest records were on their way, against how often they run under any record.

The producer stamps each record's send time on CLOCK_MONOTONIC, the brokers stamp their events on the same clock,
and the record's offset finds it in them: the leader's append (its log end passing the offset), the leader's
answer to each follower's fetch that carried it, the follower receiving that answer, its dir worker appending it,
its loop taking the result back, the follower's next fetch (its fetch offset past the record: the leader's proof
that the follower has it), the leader taking that fetch, the high watermark passing the record, and the producer's
delivery report. The follower whose acknowledgement came last (the one the HW waited for) gives the legs.

A slow record is one at or above its round's p99 (the records that make the figure); the middle ones are those
between their round's 40th and 60th percentiles.
"""

from __future__ import annotations

import glob
import math
import os
from bisect import bisect_left, bisect_right
from collections.abc import Callable

from kjbod.net.trace import read

Record = tuple[float, float, int]  # (send time, latency ms, offset)

LEGS_ALL = ("producer -> leader appended", "-> leader answered the follower", "-> follower has the answer",
            "-> follower's dir worker appended", "-> follower's loop has it back", "-> follower's next fetch sent",
            "-> leader took that fetch", "-> HW passed the record", "-> producer has the answer")
LEGS_ONE = ("producer -> leader appended", "-> producer has the answer")
SPANS = ("gc", "heartbeat", "placement_review", "placement_place", "placement_spread", "dir_tick", "watchdog",
         "in_flight_wait", "trace_flush")
POINTS = ("metadata_fetch-", "isr_expiration", "alter_partition", "fetch_backoff", "fetch_held")
SCAN = 5000  # events scanned past a start time at most (a record's legs are found within a few hundred)


class Trace:
    """One process's events by kind, in time order."""

    def __init__(self, events: list[tuple[float, str, str, str]]) -> None:
        self.by_kind: dict[str, list[tuple[float, str, str]]] = {}
        for t, kind, a, b in sorted(events, key=lambda e: e[0]):
            self.by_kind.setdefault(kind, []).append((t, a, b))
        self.times = {k: [e[0] for e in v] for k, v in self.by_kind.items()}

    def first(self, kind: str, after: float | None, match: Callable[[str, str], bool] = lambda a, b: True
              ) -> float | None:
        """The time of the first `kind` event at or after `after` that `match(a, b)`."""
        if after is None or kind not in self.by_kind:
            return None
        events = self.by_kind[kind]
        i = bisect_left(self.times[kind], after)
        for t, a, b in events[i:i + SCAN]:
            if match(a, b):
                return t
        return None

    def intervals(self, kind: str) -> list[tuple[float, float]]:
        """A span kind's (start, end) pairs (each `kind+` with the next `kind-`), or a point kind's instants."""
        if kind.endswith("-") or kind in POINTS:
            return [(t, t) for t, _a, _b in self.by_kind.get(kind, [])]
        opened: list[float] = []
        out = []
        merged = sorted([(t, +1) for t, _a, _b in self.by_kind.get(kind + "+", [])]
                        + [(t, -1) for t, _a, _b in self.by_kind.get(kind + "-", [])])
        for t, step in merged:
            if step > 0:
                opened.append(t)
            elif opened:
                out.append((opened.pop(0), t))
        return out


def load(trace_dir: str, pids: dict[int, str]) -> dict[str, Trace]:
    """Each traced process's events, named by role (`pids`: pid -> name; other processes: "controller")."""
    out = {}
    for path in glob.glob(os.path.join(trace_dir, "trace-*.txt")):
        pid = int(os.path.basename(path)[len("trace-"):-len(".txt")])
        out[pids.get(pid, f"controller (pid {pid})")] = Trace(read(path))
    return out


def gt(offset: int, topic: str | None = None) -> Callable[[str, str], bool]:
    def match(a: str, b: str) -> bool:
        return int(a) > offset and (topic is None or b == topic)
    return match


def legs_acks_all(leader: Trace, followers: dict[int, Trace], rec: Record, topic: str) -> list[float] | None:
    t0, ms, o = rec
    t_app = leader.first("appended", t0, gt(o, topic))
    best: tuple[float, list[float | None]] | None = None
    for fid, fol in followers.items():
        f = str(fid)
        t_ans = leader.first("answered", t_app, lambda a, b, f=f: a == f and int(b) > o)
        t_got = fol.first("fetch_got", t_ans)
        t_fapp = fol.first("f_appended", t_got, gt(o, topic))
        t_fapl = fol.first("f_applied", t_fapp, gt(o, topic))
        t_next = fol.first("fetch_sent", t_fapl, lambda a, b: int(b) > o)
        t_ack = leader.first("fetched_by", t_next, lambda a, b, f=f: a == f and int(b) > o)
        if t_ack is None:
            return None
        if best is None or t_ack > best[0]:
            best = (t_ack, [t_ans, t_got, t_fapp, t_fapl, t_next])
    if best is None or t_app is None:
        return None
    t_ack, middle = best
    t_hw = leader.first("hw", t_app, gt(o, topic))
    stamps = [t0, t_app, *middle, t_ack, t_hw, t0 + ms / 1000]
    if any(s is None for s in stamps):
        return None
    return [(b - a) * 1000 for a, b in zip(stamps, stamps[1:], strict=False)]  # type: ignore[operator]


def legs_acks_one(leader: Trace, rec: Record, topic: str) -> list[float] | None:
    t0, ms, o = rec
    t_app = leader.first("appended", t0, gt(o, topic))
    if t_app is None:
        return None
    return [(t_app - t0) * 1000, ms - (t_app - t0) * 1000]


def split(rounds: list[list[Record]]) -> tuple[list[Record], list[Record], list[Record]]:
    """(the slowest records: at or above their round's p99; the middle: 40th to 60th percentile; all)."""
    slow, middle, every = [], [], []
    for recs in rounds:
        if not recs:
            continue
        by_ms = sorted(recs, key=lambda r: r[1])
        n = len(by_ms)
        slow += by_ms[min(n - 1, int(n * 0.99)):]
        middle += by_ms[int(n * 0.4):int(n * 0.6)]
        every += recs
    return slow, middle, every


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def report(traces: dict[str, Trace], leader_name: str, follower_ids: dict[int, str],
           kept: dict[str, list[list[Record]]], topics: dict[str, str]) -> list[str]:
    """The printed lines (see the module docstring)."""
    leader = traces[leader_name]
    followers = {fid: traces[name] for fid, name in follower_ids.items() if name in traces}
    lines = []
    for case, legs_names in (("all", LEGS_ALL), ("one", LEGS_ONE)):
        slow, middle, every = split(kept.get(case, []))
        topic = topics[case]

        def legs(rec: Record, topic: str = topic, case: str = case) -> list[float] | None:
            return (legs_acks_all(leader, followers, rec, topic) if case == "all"
                    else legs_acks_one(leader, rec, topic))

        found = {name: [x for r in recs if (x := legs(r)) is not None] for name, recs in
                 (("slow", slow), ("middle", middle))}
        title = "acks=all RF 3" if case == "all" else "acks=1 RF 1"
        lines.append(f"   {title}: where the time went (mean ms per leg; {len(found['slow'])} of the {len(slow)} "
                     f"slowest records (>= their round's p99) and {len(found['middle'])} of {len(middle)} middle "
                     f"ones (p40-p60) found in the traces):")
        for i, name in enumerate(legs_names):
            lines.append(f"     {name:<38} middle {_mean([x[i] for x in found['middle']]):6.2f}   slowest "
                         f"{_mean([x[i] for x in found['slow']]):6.2f}")
        lines.append(f"     {'total':<38} middle {_mean([sum(x) for x in found['middle']]):6.2f}   slowest "
                     f"{_mean([sum(x) for x in found['slow']]):6.2f}")
        lines += background(traces, slow, every, title)
    lines.append("   the leader's answer -> the follower's loop taking it, by the follower's Placement state then:")
    lines += placement_hops(leader, followers)
    return lines


def placement_hops(leader: Trace, followers: dict[int, Trace]) -> list[str]:
    """Per follower, the delay from the leader's answer leaving to the follower's loop taking it (the hop a
    stalled loop holds up), split by whether the follower's loop was placed on one CPU then (kjbod.storage.
    workers.Placement; its reviews are traced as placement_place / placement_spread)."""
    lines = []
    for fid, fol in sorted(followers.items()):
        got = fol.times.get("fetch_got", [])
        changes = sorted([(t, True) for t, _a, _b in fol.by_kind.get("placement_place-", [])]
                         + [(t, False) for t, _a, _b in fol.by_kind.get("placement_spread-", [])])
        change_times = [t for t, _p in changes]
        by_state: dict[str, list[float]] = {}
        for t, a, _b in leader.by_kind.get("answered", []):
            if a != str(fid):
                continue
            i = bisect_left(got, t)
            if i == len(got):
                continue
            j = bisect_right(change_times, t)
            state = "never placed" if not changes else ("placed" if j and changes[j - 1][1] else "spread")
            by_state.setdefault(state, []).append((got[i] - t) * 1000)
        for state, delays in sorted(by_state.items()):
            delays.sort()
            n = len(delays)
            lines.append(f"     follower {fid}, {state:<12} {n:6d} answers: p50 {delays[n // 2]:.2f} ms, p99 "
                         f"{delays[min(n - 1, int(n * 0.99))]:.1f} ms, max {delays[-1]:.1f} ms, "
                         f"{sum(1 for d in delays if d > 20)} over 20 ms")
    return lines


def background(traces: dict[str, Trace], slow: list[Record], every: list[Record], title: str) -> list[str]:
    """The background events under the slowest records: for each kind and process, the share of the slowest
    records whose time overlaps one, against the share expected of windows that long at the events' rate
    (a slow record's window is long, so it meets more of any event by chance), and the share of all records."""
    if not every:
        return []
    start = min(r[0] for r in every)
    span_s = max(r[0] + r[1] / 1000 for r in every) - start
    rows = []
    for proc, tr in sorted(traces.items()):
        for kind in SPANS + POINTS:
            spans = tr.intervals(kind)
            if not spans:
                continue
            starts = [s for s, _e in spans]
            longest = max(e - s for s, e in spans)

            def hit(rec: Record, spans: list[tuple[float, float]] = spans, starts: list[float] = starts,
                    longest: float = longest) -> bool:
                a, b = rec[0], rec[0] + rec[1] / 1000
                i = bisect_right(starts, b)
                lo = bisect_left(starts, a - longest)
                return any(spans[j][1] >= a for j in range(lo, i))

            under_slow = sum(map(hit, slow)) / max(len(slow), 1)
            under_all = sum(map(hit, every)) / max(len(every), 1)
            inside = [(s, e) for s, e in spans if start <= s <= start + span_s]
            rate = len(inside) / max(span_s, 1e-9)
            mean_s = sum(e - s for s, e in inside) / len(inside) if inside else 0.0
            expected = sum(1 - math.exp(-rate * (r[1] / 1000 + mean_s)) for r in slow) / max(len(slow), 1)
            total_ms = sum(e - s for s, e in inside) * 1000
            rows.append((under_slow - expected, f"     {kind.rstrip('-'):<17} {proc:<22} under {under_slow:4.0%} of "
                         f"the slowest ({expected:4.0%} expected by chance), {under_all:4.0%} of all "
                         f"({len(inside)} in the rounds, {total_ms:.0f} ms)"))
    rows.sort(key=lambda r: -r[0])
    return [f"   {title}: background events under the slowest records (most over-represented first):",
            *[text for _d, text in rows[:8]]]


def copy_legs(follower: Trace, leader_id: int, topic: str, start: float, end: float) -> str:
    """A follower's copy of a backlog between `start` and `end`, fetch by fetch: how many, how many bytes, and
    where the time went: waiting for the leader's answer (fetch sent -> answer in), the answer on the
    follower's dir worker (answer in -> appended), and back to the next fetch (appended -> next fetch sent)."""
    sent = [t for t, a, _b in follower.by_kind.get("fetch_sent", []) if a == str(leader_id) and start <= t <= end]
    got = [(t, int(b or 0)) for t, a, b in follower.by_kind.get("fetch_got", []) if a == str(leader_id)
           and start <= t <= end]
    appended = [t for t, _a, b in follower.by_kind.get("f_appended", []) if b == topic and start <= t <= end]
    got_times = [t for t, _n in got]
    waiting = on_worker = back = 0.0
    for i, t in enumerate(sent):
        j = bisect_left(got_times, t)
        if j == len(got):
            break
        answered = got_times[j]
        waiting += answered - t
        k = bisect_left(appended, answered)
        if k < len(appended) and (i + 1 == len(sent) or appended[k] < sent[i + 1]):
            on_worker += appended[k] - answered
            if i + 1 < len(sent):
                back += sent[i + 1] - appended[k]
    total = sum(n for _t, n in got)
    return (f"{len(sent)} fetches, {total / 1e6:.0f} MB ({total / max(len(got), 1) / 1e6:.2f} MB each) in "
            f"{end - start:.2f} s: waiting for the leader {waiting:.2f} s, on the follower's dir worker "
            f"{on_worker:.2f} s, back to the next fetch {back:.2f} s")
