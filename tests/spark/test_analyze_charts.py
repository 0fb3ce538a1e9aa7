"""`kjbod analyze` charts name each log dir (broker, path, KIP-858 id) in their legend, on hand-made reports
(no Spark needed): every dir one by one up to LEGEND_MAX dirs, the fullest (over time) or each dir position (per
broker) above that."""

from __future__ import annotations

import uuid

import matplotlib
import pytest

from kjbod.spark import analyze
from kjbod.spark.analyze import LEGEND_MAX, dir_label
from kjbod.storage.ids import uuid_to_str

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def report(brokers: int, paths: list[str], *, offline: tuple[int, str] | None = None) -> dict:
    out: dict = {"snapshot_ts": "2026-01-02T00:00:00Z", "brokers": [], "usage_history": []}
    for b in range(1, brokers + 1):
        dirs = []
        for i, path in enumerate(paths):
            usage = None if (b, path) == offline else float((b * 7 + i * 13) % 90 + 5)
            dirs.append({"log_dir": path, "dir_id": str(uuid.UUID(int=(b << 70) + i + 100)), "usage_pct": usage})
            if usage is not None:
                for day in (1, 2):
                    out["usage_history"].append({"broker_id": b, "log_dir": path, "usage_pct": usage - 3 + day,
                                                 "snapshot_ts": f"2026-01-0{day}T00:00:00Z"})
        out["brokers"].append({"broker_id": b, "dirs": dirs})
    return out


def legend(fig) -> tuple[str | None, list[str]]:
    leg = fig.axes[0].get_legend()
    plt.close(fig)
    title = leg.get_title().get_text() or None
    return title, [t.get_text() for t in leg.get_texts()]


def test_a_dir_is_named_by_broker_path_and_kafka_id():
    dir_id = uuid.UUID(int=(3 << 70) + 101)
    assert dir_label(3, "/data/b", str(dir_id)) == f"broker 3 /data/b ({uuid_to_str(dir_id.bytes)})"
    assert dir_label(3, "/data/b", None) == "broker 3 /data/b (no id)"


def test_few_dirs_are_each_named_in_both_charts():
    r = report(2, ["/data/a", "/data/b"], offline=(2, "/data/b"))
    names = {(b["broker_id"], d["log_dir"]): dir_label(b["broker_id"], d["log_dir"], d["dir_id"])
             for b in r["brokers"] for d in b["dirs"]}
    title, texts = legend(analyze._usage_by_dir(r, plt))  # noqa: SLF001
    assert title is None
    assert texts == [names[(1, "/data/a")], names[(1, "/data/b")], names[(2, "/data/a")],
                     names[(2, "/data/b")] + ": offline"]
    title, texts = legend(analyze._usage_over_time(r, plt))  # noqa: SLF001
    assert title is None
    assert sorted(texts) == sorted(v for k, v in names.items() if k != (2, "/data/b"))
    assert len(set(texts)) == len(texts)  # every line told apart


def test_many_dirs_name_the_fullest_and_each_position():
    paths = ["/data/a", "/data/b", "/data/c"]
    r = report(30, paths)
    assert 30 * 3 > LEGEND_MAX
    title, texts = legend(analyze._usage_by_dir(r, plt))  # noqa: SLF001
    assert title == "90 dirs (ids in report.md)"
    assert texts == [f"dir #{i + 1} of each broker: {p}" for i, p in enumerate(paths)]
    title, texts = legend(analyze._usage_over_time(r, plt))  # noqa: SLF001
    assert title == f"the {LEGEND_MAX} fullest of 90 dirs"
    last = {(p["broker_id"], p["log_dir"]): p["usage_pct"] for p in r["usage_history"]}
    ids = {(b["broker_id"], d["log_dir"]): d["dir_id"] for b in r["brokers"] for d in b["dirs"]}
    fullest = sorted(last, key=lambda k: (-last[k], k))[:LEGEND_MAX]
    assert sorted(texts) == sorted(dir_label(b, p, ids[(b, p)]) for b, p in fullest)


@pytest.mark.parametrize("draw", ["_usage_by_dir", "_usage_over_time"])
def test_an_empty_report_draws_without_a_legend(draw):
    fig = getattr(analyze, draw)({"snapshot_ts": "x", "brokers": [], "usage_history": []}, plt)
    assert fig.axes[0].get_legend() is None
    plt.close(fig)
