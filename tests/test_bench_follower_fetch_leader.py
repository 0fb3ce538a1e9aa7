"""tools/bench/follower_fetch_leader runs (the frames it builds are answered, the fetches parked and woken) and
its short way is the one taken: fewer Python calls per round trip than the general way on the same leader."""

from __future__ import annotations

from tools.bench import follower_fetch_leader


def test_the_micro_benchmark_runs_both_ways_and_the_short_one_makes_fewer_calls(capsys) -> None:
    out = follower_fetch_leader.run(records=50)
    general, short = out["general way"], out["short way"]
    assert 0 < short[0] < general[0] / 2
    assert "fewer calls" in capsys.readouterr().out
