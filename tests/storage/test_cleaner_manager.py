"""The cleaner inside the LogManager: each dir's cleaning on that dir's background thread, the
cleaner-offset-checkpoint file kept and read back, and a clean that meets a deletion, a move or a truncation
stopping without leaving a file or touching the log (Kafka's abortAndPauseCleaning)."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest

from kjbod.storage import cleaner as cleaner_module
from kjbod.storage.checkpoint import parse_offset_checkpoint
from kjbod.storage.cleaner import CLEANER_OFFSET_CHECKPOINT, MAP_ENTRY_BYTES
from kjbod.storage.config import LogConfig
from tests.storage.test_cleaner import all_records, keyed, latest_per_key

TOPIC_ID = "3uI2M2AbQVO0J2cYw2xvOA"
COMPACT = LogConfig(segment_bytes=600, index_interval_bytes=64, cleanup_policy="compact",
                    min_cleanable_dirty_ratio=0.01)


def updates(plog, keys: int = 4, rounds: int = 20) -> list:
    written = []
    for r in range(rounds):
        for k in range(keys):
            info = plog.append(keyed([(b"k%d" % k, b"v%d" % r)]))
            written.append((info.base_offset, b"k%d" % k, b"v%d" % r, 0))
    plog.roll()
    return written


def leftovers(path: str) -> list[str]:
    return [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]


def test_the_checkpoint_is_written_per_dir_and_read_back_at_start(make_manager, log_dirs):
    lm = make_manager(config=COMPACT)
    plog = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[1])
    updates(plog)
    assert lm.clean_dir(log_dirs[1])
    cleaned_to = plog.cleaner_offset
    assert cleaned_to == plog.active_segment.base_offset
    with open(os.path.join(log_dirs[1], CLEANER_OFFSET_CHECKPOINT)) as f:
        text = f.read()
    assert parse_offset_checkpoint(text) == {("t", 0): cleaned_to}
    assert not os.path.exists(os.path.join(log_dirs[0], CLEANER_OFFSET_CHECKPOINT))  # only where a log was cleaned
    assert not lm.clean_dir(log_dirs[1])  # nothing dirty left: the cleaner backs off
    lm.close()
    again = make_manager(config=COMPACT)
    assert again.get("t", 0).cleaner_offset == cleaned_to


def test_each_dir_is_cleaned_by_its_own_background_thread(make_manager, log_dirs, clock, monkeypatch):
    lm = make_manager(config=COMPACT, cleaner=cleaner_module.CleanerConfig(backoff_ms=10))
    threads: list[str] = []
    monkeypatch.setattr(cleaner_module, "failpoint",
                        lambda name: threads.append(threading.current_thread().name) if name == "cleaned_written"
                        else None)
    logs = [lm.create_partition("t", i, TOPIC_ID, dir=d) for i, d in enumerate(log_dirs[:2])]
    written = [updates(p) for p in logs]
    lm.start_background(interval_s=0.05)
    deadline = time.monotonic() + 30
    while any(p.cleaner_offset is None for p in logs) and time.monotonic() < deadline:
        time.sleep(0.05)
    lm.stop_background()
    assert all(p.cleaner_offset == p.active_segment.base_offset for p in logs)
    assert {name for name in threads} == {f"kjbod-log-background {d}" for d in log_dirs[:2]}
    for plog, w in zip(logs, written, strict=True):
        assert {k: r[2] for k, r in latest_per_key(all_records(plog)).items()} == {
            k: r[2] for k, r in latest_per_key(w).items()}
        assert len(all_records(plog)) == 4


def test_a_deletion_aborts_a_clean_in_progress_and_waits_for_it(make_manager, log_dirs, monkeypatch):
    lm = make_manager(config=COMPACT)
    plog = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    updates(plog)
    in_clean = threading.Event()

    def hold(name: str) -> None:
        if name == "cleaned_written":
            in_clean.set()
            while not plog.clean_abort:  # the deletion has asked the clean to stop
                time.sleep(0.01)

    monkeypatch.setattr(cleaner_module, "failpoint", hold)
    results: list[bool] = []
    cleaning = threading.Thread(target=lambda: results.append(lm.clean_dir(log_dirs[0])))
    cleaning.start()
    assert in_clean.wait(30)
    old_dir = plog.dir
    lm.delete_partition("t", 0)  # returns once the clean let go
    cleaning.join(30)
    assert results == [False]
    assert plog.cleaner_offset is None
    assert lm.dir_io(log_dirs[0]).online
    deleted = [n for n in os.listdir(log_dirs[0]) if n.endswith("-delete")]
    assert len(deleted) == 1 and not os.path.exists(old_dir)
    assert not leftovers(os.path.join(log_dirs[0], deleted[0]))


def test_a_paused_log_is_not_cleaned_until_resumed(make_manager, log_dirs):
    lm = make_manager(config=COMPACT)
    plog = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    updates(plog)
    plog.abort_cleaning()  # what a replica move does before it copies the segments
    assert not lm.clean_dir(log_dirs[0])
    assert plog.cleaner_offset is None
    plog.resume_cleaning()
    assert lm.clean_dir(log_dirs[0])


def test_a_log_with_a_future_copy_is_not_cleaned(make_manager, log_dirs):
    lm = make_manager(config=COMPACT)
    plog = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    updates(plog)
    lm.create_future_log("t", 0, log_dirs[1])
    assert not lm.clean_dir(log_dirs[0])
    lm.delete_future_log("t", 0)
    assert lm.clean_dir(log_dirs[0])


def test_a_truncation_during_a_clean_refuses_the_swap(make_manager, log_dirs, monkeypatch):
    lm = make_manager(config=COMPACT)
    plog = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    updates(plog)
    cut = plog.segments[2].base_offset + 1

    def truncate(name: str) -> None:
        if name == "swap_renamed" and plog.log_end_offset > cut:
            plog.truncate_to(cut)  # a follower diverging from a new leader, while the swap files wait

    monkeypatch.setattr(cleaner_module, "failpoint", truncate)
    before = [r for r in all_records(plog) if r[0] < cut]
    assert not lm.clean_dir(log_dirs[0])
    assert all_records(plog) == before
    assert not leftovers(plog.dir)
    assert plog.cleaner_offset is None


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_compact_and_delete_also_applies_retention(make_manager, log_dirs, clock, policy):
    lm = make_manager(config=COMPACT.with_overrides(cleanup_policy=policy, retention_ms=1000))
    plog = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    updates(plog)
    clock.advance(10_000)
    deleted = lm.run_retention()
    assert (deleted > 0) == (policy == "compact,delete")


def test_delete_records_during_a_clean_stops_it_and_the_dir_stays_online(make_manager, log_dirs, monkeypatch):
    # The clean reads segments that DeleteRecords renames away meanwhile: the cleaner opens each one under the log's
    # lock while it is still the log's, so it stops instead of opening a missing file (which the fsio seam would
    # take for a failing disk).
    lm = make_manager(config=COMPACT.with_overrides(cleanup_policy="compact,delete", segment_bytes=100_000))
    plog = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    for _ in range(3):
        updates(plog, keys=40, rounds=1)  # three closed segments of distinct keys: three groups of one
    monkeypatch.setattr(cleaner_module, "group_segments", lambda segs, *a: [[s] for s in segs])
    cut = plog.segments[2].base_offset

    def delete_records(name: str) -> None:
        if name == "swap_renamed" and plog.log_start_offset < cut:
            plog.advance_log_start_offset(cut)  # the second segment goes while the first is swapped in

    monkeypatch.setattr(cleaner_module, "failpoint", delete_records)
    assert not lm.clean_dir(log_dirs[0])
    assert lm.dir_io(log_dirs[0]).online and plog.online
    assert plog.log_start_offset == cut
    assert [r[0] for r in all_records(plog)] == list(range(cut, plog.log_end_offset))
    assert not leftovers(plog.dir)
    assert lm.clean_dir(log_dirs[0])  # the next round cleans what is left


def test_a_segment_gone_before_the_cleaner_opens_it_stops_the_clean_not_the_dir(make_manager, log_dirs):
    lm = make_manager(config=COMPACT.with_overrides(cleanup_policy="compact,delete"))
    plog = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    updates(plog)
    first = plog.segments[0]
    plog.advance_log_start_offset(plog.segments[2].base_offset)  # renamed .deleted, out of the log
    with pytest.raises(cleaner_module.CleanAborted):
        cleaner_module.open_segment(plog, first)
    assert lm.dir_io(log_dirs[0]).online
    cleaner_module.open_segment(plog, plog.segments[0]).close()


def test_a_shutdown_stops_a_clean_in_progress(make_manager, log_dirs, monkeypatch):
    lm = make_manager(config=COMPACT)
    plog = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    written = updates(plog)
    in_clean = threading.Event()

    def hold(name: str) -> None:
        if name == "cleaned_written":
            in_clean.set()
            while not lm._bg_stop.is_set():
                time.sleep(0.01)

    monkeypatch.setattr(cleaner_module, "failpoint", hold)
    lm.start_background(interval_s=0.05)
    assert in_clean.wait(30)
    lm.close()  # the background thread's clean sees the stop and gives up; close does not wait for a whole clean
    assert plog.cleaner_offset is None
    assert not leftovers(plog.dir)
    again = make_manager(config=COMPACT)
    got = all_records(again.get("t", 0))
    assert [r[:3] for r in got] == [r[:3] for r in written]  # untouched


def test_a_changed_cleaner_config_reaches_each_dirs_cleaner_at_its_next_clean(make_manager, log_dirs):
    """Dynamic log.cleaner.* keys (kjbod.broker.storage_glue.cleaner_config): a smaller dedupe buffer set while
    the broker runs makes the next clean map fewer segments, so it stops short of the active segment; set back,
    the next clean goes the rest of the way."""
    lm = make_manager(config=COMPACT)
    plog = lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    updates(plog, keys=160, rounds=1)  # every key once: the map fills by a segment's offsets a segment
    assert len(plog.segments) > 6
    big = lm.cleaner_config
    span = plog.segments[1].base_offset - plog.segments[0].base_offset
    small = dataclasses.replace(big, dedupe_buffer_size=MAP_ENTRY_BYTES * span * 3, io_buffer_load_factor=1.0)
    assert lm.set_cleaner_config(small) and not lm.set_cleaner_config(small)
    assert lm.clean_dir(log_dirs[0])
    partial = plog.cleaner_offset
    assert 0 < partial < plog.active_segment.base_offset
    assert lm.set_cleaner_config(big)
    assert lm.clean_dir(log_dirs[0])
    assert plog.cleaner_offset == plog.active_segment.base_offset
