"""Kafka Uuids, meta.properties, `format` and the startup check (KIP-858 directory ids)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kjbod.storage.errors import MetaPropertiesError, UnformattedDirError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.ids import (
    LOST_DIR,
    UNASSIGNED_DIR,
    ZERO_UUID,
    is_reserved_directory_id,
    random_directory_id,
    random_uuid,
    uuid_from_str,
    uuid_text,
    uuid_to_str,
)
from kjbod.storage.meta import (
    MetaProperties,
    ensure_meta_properties,
    format_dirs,
    parse_properties,
    read_meta_properties,
    render_properties,
    write_meta_properties,
)

# ---------------------------------------------------------------------------------------------- ids


def test_reserved_ids_text_form():
    assert uuid_to_str(bytes(16)) == ZERO_UUID
    assert uuid_to_str(bytes(15) + b"\x01") == UNASSIGNED_DIR
    assert uuid_to_str(bytes(15) + b"\x02") == LOST_DIR
    assert all(is_reserved_directory_id(bytes(15) + bytes([n])) for n in range(100))
    assert not is_reserved_directory_id(bytes(15) + bytes([100]))
    assert not is_reserved_directory_id(b"\x00" * 7 + b"\x01" + bytes(8))


def test_kafka_example_ids_round_trip():
    for text in ("41QSStLtR3qOekbX4Z1bHA", "e6umYSUsQyq7jUUzL9iXMQ", "3uI2M2AbQVO0J2cYw2xvOA"):
        assert uuid_to_str(uuid_from_str(text)) == text
    for bad in ("short", "41QSStLtR3qOekbX4Z1bH=", "41QSStLtR3qOekbX4Z1bH*", "41QSStLtR3qOekbX4Z1bHB"):
        with pytest.raises(ValueError):
            uuid_from_str(bad)


def test_uuid_text_accepts_uuid_objects_and_bytes():
    import uuid

    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert uuid_from_str(uuid_text(u)) == u.bytes
    assert uuid_text(u.bytes) == uuid_text(u)


def test_generated_directory_ids_thousands():
    seen = set()
    for _ in range(5000):
        text = random_directory_id(existing=seen)
        assert len(text) == 22 and re.fullmatch(r"[A-Za-z0-9_-]{22}", text)
        assert not text.startswith("-")
        assert not is_reserved_directory_id(text)
        assert text not in seen
        seen.add(text)
        assert not random_uuid().startswith("-")


@settings(max_examples=3000)
@given(st.binary(min_size=16, max_size=16), st.binary(min_size=16, max_size=16))
def test_reserved_and_dash_ids_are_never_returned(first, second):
    """Feed the generator adversarial randomness: a reserved id or a '-' id first, then anything."""
    draws = iter([first, second, os.urandom(16), os.urandom(16), os.urandom(16), os.urandom(16)])
    text = random_directory_id(urandom=lambda n: next(draws), version4=False)
    raw = uuid_from_str(text)
    assert not is_reserved_directory_id(raw) and not text.startswith("-")
    if not is_reserved_directory_id(first) and not uuid_to_str(first).startswith("-"):
        assert raw == first


def test_reserved_draws_are_skipped_in_order():
    reserved = bytes(15) + b"\x05"
    dash_raw = b"\xf8" + os.urandom(15)  # 0b111110.. -> base64 '-' first
    good = b"\x11" * 16
    draws = iter([reserved, dash_raw, good])
    assert uuid_to_str(dash_raw).startswith("-")
    assert random_directory_id(urandom=lambda n: next(draws), version4=False) == uuid_to_str(good)


def test_existing_ids_are_not_reused():
    good = b"\x22" * 16
    draws = iter([good, good, b"\x33" * 16])
    first = random_directory_id(urandom=lambda n: next(draws), version4=False)
    second = random_directory_id(urandom=lambda n: next(draws), version4=False, existing={first})
    assert first != second


# ---------------------------------------------------------------------------------------------- properties


def test_render_is_java_properties_store_format():
    text = render_properties({"node.id": "8", "version": "1", "cluster.id": "41QSStLtR3qOekbX4Z1bHA"}, now=0)
    assert text == "#\n#Thu Jan 01 00:00:00 UTC 1970\nnode.id=8\nversion=1\ncluster.id=41QSStLtR3qOekbX4Z1bHA\n"


def test_parse_kip_example_and_java_variants():
    kip = "#\n#Thu Aug 18 15:23:07 BST 2022\nnode.id=8\nversion=1\ncluster.id=41QSStLtR3qOekbX4Z1bHA\n" \
          "directory.id=e6umYSUsQyq7jUUzL9iXMQ\n"
    assert parse_properties(kip) == {
        "node.id": "8", "version": "1", "cluster.id": "41QSStLtR3qOekbX4Z1bHA", "directory.id": "e6umYSUsQyq7jUUzL9iXMQ",
    }
    assert parse_properties("! comment\n  a : b\nc d\ne=f\\=g\n") == {"a": "b", "c": "d", "e": "f=g"}
    odd = {"we:ird key": "va=lue #1", "x": " leading"}
    assert parse_properties(render_properties(odd)) == odd


# ---------------------------------------------------------------------------------------------- format


def settings_for(dirs, node=1, meta=None):
    cfg = {"log.dirs": ",".join(dirs), "node.id": node}
    if meta:
        cfg["metadata.log.dir"] = meta
    return cfg


def test_format_writes_every_dir_with_unique_ids(tmp_path):
    dirs = [str(tmp_path / n / "deep") for n in "abc"]
    meta_dir = str(tmp_path / "meta")
    formatted = format_dirs(settings_for(dirs, meta=meta_dir), cluster_id="41QSStLtR3qOekbX4Z1bHA")
    assert formatted == [*dirs, meta_dir]
    metas = [read_meta_properties(LogDirIO(d)) for d in formatted]
    assert {m.cluster_id for m in metas} == {"41QSStLtR3qOekbX4Z1bHA"}
    assert {m.node_id for m in metas} == {1} and {m.version for m in metas} == {1}
    ids = [m.directory_id for m in metas]
    assert len(set(ids)) == 4 and not any(is_reserved_directory_id(i) for i in ids)
    text = Path(dirs[0], "meta.properties").read_text()
    lines = text.splitlines()
    assert lines[0] == "#" and re.fullmatch(r"#\w{3} \w{3} \d\d \d\d:\d\d:\d\d UTC \d{4}", lines[1])
    assert sorted(lines[2:]) == sorted(
        ["node.id=1", "version=1", "cluster.id=41QSStLtR3qOekbX4Z1bHA", f"directory.id={ids[0]}"]
    )
    assert not os.path.exists(os.path.join(dirs[0], "meta.properties.tmp"))


def test_format_is_a_noop_for_same_cluster_and_fills_new_dirs(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    format_dirs(settings_for(dirs[:1]))
    before = Path(dirs[0], "meta.properties").read_text()
    assert format_dirs(settings_for(dirs[:1])) == []
    assert Path(dirs[0], "meta.properties").read_text() == before
    # A new dir joins the existing cluster id without being told it.
    assert format_dirs(settings_for(dirs)) == [dirs[1]]
    a, b = (read_meta_properties(LogDirIO(d)) for d in dirs)
    assert a.cluster_id == b.cluster_id and a.directory_id != b.directory_id


def test_format_refuses_foreign_cluster_and_node(tmp_path):
    d = str(tmp_path / "a")
    format_dirs(settings_for([d]), cluster_id="41QSStLtR3qOekbX4Z1bHA")
    with pytest.raises(MetaPropertiesError) as e:
        format_dirs(settings_for([d]), cluster_id="e6umYSUsQyq7jUUzL9iXMQ")
    msg = str(e.value)
    assert "\n" not in msg and d in msg and "41QSStLtR3qOekbX4Z1bHA" in msg and "e6umYSUsQyq7jUUzL9iXMQ" in msg
    with pytest.raises(MetaPropertiesError, match=r"node\.id 1, not 2"):
        format_dirs(settings_for([d], node=2))


def test_format_rejects_a_cluster_id_that_is_not_a_uuid(tmp_path):
    with pytest.raises(MetaPropertiesError, match="not a valid Kafka Uuid"):
        format_dirs(settings_for([str(tmp_path / "a")]), cluster_id="not-a-uuid")


def test_format_accepts_a_config_object(tmp_path):
    class Cfg:
        log_dirs = [str(tmp_path / "x")]
        metadata_log_dir = None
        node_id = 3

    assert format_dirs(Cfg()) == [str(tmp_path / "x")]
    assert read_meta_properties(LogDirIO(str(tmp_path / "x"))).node_id == 3


# ---------------------------------------------------------------------------------------------- startup


def ios(dirs):
    return [LogDirIO(d) for d in dirs]


def test_startup_writes_missing_directory_id(tmp_path):
    d = tmp_path / "a"
    d.mkdir()
    (d / "meta.properties").write_text("#\n#x\nnode.id=1\nversion=1\ncluster.id=41QSStLtR3qOekbX4Z1bHA\n")
    metas = ensure_meta_properties(ios([str(d)]), metadata_log_dir=str(d), node_id=1)
    new_id = metas[str(d)].directory_id
    assert new_id and not is_reserved_directory_id(new_id)
    assert read_meta_properties(LogDirIO(str(d))).directory_id == new_id
    # Idempotent: the second start keeps the id.
    again = ensure_meta_properties(ios([str(d)]), metadata_log_dir=str(d), node_id=1)
    assert again[str(d)].directory_id == new_id


def test_startup_refuses_duplicate_ids(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    format_dirs(settings_for(dirs))
    meta = read_meta_properties(LogDirIO(dirs[0]))
    write_meta_properties(LogDirIO(dirs[1]), meta)  # a dir copied onto another
    with pytest.raises(MetaPropertiesError, match="same directory.id") as e:
        ensure_meta_properties(ios(dirs), metadata_log_dir=dirs[0], node_id=1)
    assert dirs[0] in str(e.value) and dirs[1] in str(e.value)


def test_startup_refuses_unformatted_dir_and_says_how_to_fix(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    format_dirs(settings_for(dirs[:1]))
    with pytest.raises(UnformattedDirError, match=r"kjbod format") as e:
        ensure_meta_properties(ios(dirs), metadata_log_dir=dirs[0], node_id=1)
    assert dirs[1] in str(e.value) and dirs[0] not in str(e.value)


def test_startup_refuses_other_node_other_cluster_reserved_id_and_v0(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    format_dirs(settings_for(dirs))
    with pytest.raises(MetaPropertiesError, match="node.id 1 but this node is node.id 2"):
        ensure_meta_properties(ios(dirs), metadata_log_dir=dirs[0], node_id=2)
    b = read_meta_properties(LogDirIO(dirs[1]))
    write_meta_properties(LogDirIO(dirs[1]), MetaProperties(1, "e6umYSUsQyq7jUUzL9iXMQ", 1, b.directory_id))
    with pytest.raises(MetaPropertiesError, match="different clusters"):
        ensure_meta_properties(ios(dirs), metadata_log_dir=dirs[0], node_id=1)
    a = read_meta_properties(LogDirIO(dirs[0]))
    write_meta_properties(LogDirIO(dirs[1]), MetaProperties(1, a.cluster_id, 1, LOST_DIR))
    with pytest.raises(MetaPropertiesError, match="reserved"):
        ensure_meta_properties(ios(dirs), metadata_log_dir=dirs[0], node_id=1)
    write_meta_properties(LogDirIO(dirs[1]), MetaProperties(0, a.cluster_id, None, None, {"broker.id": "1"}))
    with pytest.raises(MetaPropertiesError, match="version 0"):
        ensure_meta_properties(ios(dirs), metadata_log_dir=dirs[0], node_id=1)
