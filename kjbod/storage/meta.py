"""meta.properties: formatting log dirs and checking them at startup (KIP-858's ``directory.id``).

Strategy: every dir in ``log.dirs`` and ``metadata.log.dir`` carries a ``meta.properties`` written as
``java.util.Properties.store`` writes it (a ``#`` line, a ``#<date>`` line, then ``key=value`` lines):

    #
    #Fri Oct 25 03:33:01 UTC 2024
    node.id=1
    directory.id=Y5dRzWqqSPOtM2qu9Ub0Ew
    version=1
    cluster.id=MkU3OEVBNTcwNTJENDM2Qk

``format_dirs`` is ``kafka-storage.sh format``: it writes the file where it is missing, leaves a dir of the same
cluster and node alone, and refuses a dir of another cluster or node. ``ensure_meta_properties`` is the startup
check: every dir formatted, one cluster id and one node id (the configured one) across all of them, directory ids
unique and never reserved; a missing ``directory.id`` is generated and written. Every write is temp file + fsync
+ rename + fsync of the dir, through the fsio seam.

``config`` is anything with ``log_dirs``, ``metadata_log_dir`` and ``node_id`` attributes (the server's config
object), or a mapping with Kafka's keys (``log.dirs``, ``metadata.log.dir``, ``node.id``). As in Kafka, an unset
``metadata.log.dir`` means the first entry of ``log.dirs``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from kjbod.storage.errors import KafkaStorageError, MetaPropertiesError, UnformattedDirError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.ids import (
    is_reserved_directory_id,
    random_directory_id,
    random_uuid,
    uuid_from_str,
    uuid_text,
)

log = structlog.get_logger("kjbod.storage.meta")

META_PROPERTIES = "meta.properties"
META_VERSION = 1


@dataclass(frozen=True)
class MetaProperties:
    version: int
    cluster_id: str | None
    node_id: int | None
    directory_id: str | None = None
    other: Mapping[str, str] = field(default_factory=dict)

    def to_properties(self) -> dict[str, str]:
        props: dict[str, str] = {}
        if self.node_id is not None:
            props["node.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = self.directory_id
        props["version"] = str(self.version)
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        props.update(self.other)
        return props


@dataclass(frozen=True)
class StorageSettings:
    log_dirs: list[str]
    metadata_log_dir: str
    node_id: int


def storage_settings(config: Any) -> StorageSettings:
    """Read log.dirs / metadata.log.dir / node.id from the server config object or a Kafka-keyed mapping."""
    if isinstance(config, Mapping):
        raw_dirs = config.get("log.dirs") or config.get("log.dir")
        meta_dir = config.get("metadata.log.dir")
        node_id = config.get("node.id")
    else:
        raw_dirs = getattr(config, "log_dirs", None)
        meta_dir = getattr(config, "metadata_log_dir", None)
        node_id = getattr(config, "node_id", None)
    if isinstance(raw_dirs, str):
        raw_dirs = [d for d in (p.strip() for p in raw_dirs.split(",")) if d]
    if not raw_dirs:
        raise MetaPropertiesError("log.dirs is empty: at least one log dir is needed")
    if node_id is None:
        raise MetaPropertiesError("node.id is not set")
    dirs = [os.path.abspath(d) for d in raw_dirs]
    return StorageSettings(dirs, os.path.abspath(meta_dir) if meta_dir else dirs[0], int(node_id))


# --------------------------------------------------------------------------------------------- properties text


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            i += 1
            c = text[i]
            if c == "u" and i + 4 < len(text):
                out.append(chr(int(text[i + 1 : i + 5], 16)))
                i += 5
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c))
        else:
            out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties text -> dict: ``#``/``!`` comments, ``key=value``, ``key:value`` or ``key value``.
    (Line continuations are not needed for meta.properties and are not supported.)"""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props


def _escape(text: str, *, is_key: bool) -> str:
    out = []
    for i, c in enumerate(text):
        if c in "\\=:#!" or (c == " " and (is_key or i == 0)):
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        else:
            out.append(c)
    return "".join(out)


def render_properties(props: Mapping[str, str], *, now: float | None = None) -> str:
    """The text ``Properties.store(writer, "")`` produces: empty comment, date comment, key=value lines."""
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(time.time() if now is None else now))
    lines = ["#", "#" + stamp]
    lines += [f"{_escape(k, is_key=True)}={_escape(v, is_key=False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def meta_from_properties(props: Mapping[str, str], where: str) -> MetaProperties:
    try:
        version = int(props.get("version", "0"))
        node_raw = props.get("node.id")
        node_id = int(node_raw) if node_raw is not None else None
    except ValueError as e:
        raise MetaPropertiesError(f"{where}: unreadable version or node.id ({e})") from e
    if version not in (0, 1):
        raise MetaPropertiesError(f"{where}: unknown meta.properties version {version}")
    known = {"version", "cluster.id", "node.id", "directory.id"}
    return MetaProperties(
        version=version,
        cluster_id=props.get("cluster.id"),
        node_id=node_id,
        directory_id=props.get("directory.id"),
        other={k: v for k, v in props.items() if k not in known},
    )


def read_meta_properties(io: LogDirIO) -> MetaProperties | None:
    """The dir's meta.properties, or None if the dir or the file does not exist."""
    data = io.read_bytes_or_none(io.join(META_PROPERTIES))
    if data is None:
        return None
    where = io.join(META_PROPERTIES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MetaPropertiesError(f"{where}: not text ({e})") from e
    return meta_from_properties(parse_properties(text), where)


def write_meta_properties(io: LogDirIO, meta: MetaProperties) -> None:
    io.write_atomic(io.join(META_PROPERTIES), render_properties(meta.to_properties()).encode("utf-8"))


# --------------------------------------------------------------------------------------------- format


def _check_cluster_id(cluster_id: str) -> None:
    try:
        uuid_from_str(cluster_id)
    except ValueError as e:
        raise MetaPropertiesError(
            f"cluster id {cluster_id!r} is not a valid Kafka Uuid (22 characters of URL-safe base64, "
            "e.g. from `kjbod random-uuid`)"
        ) from e


def format_dirs(config: Any, cluster_id: str | None = None, *, bootstrap_voters: Any = None,
                now_ms: int | None = None, bootstrap_levels: dict[str, int] | None = None) -> list[str]:
    """Write meta.properties (version 1, cluster.id, node.id, directory.id) to every log dir and the metadata
    log dir, creating dirs as needed. Returns the dirs formatted now (already formatted ones are skipped).

    With ``bootstrap_voters`` (a VotersRecord: `kjbod format --standalone` or `--initial-controllers`) the
    metadata log dir, when formatted now, also gets the bootstrap snapshot of a dynamic quorum (kraft.version 1
    and those voters, kjbod.storage.metadata_snapshot), and takes this node's directory id from the record when
    the node is one of them, as kafka-storage.sh does.

    With ``bootstrap_levels`` (`kjbod format --release-version`: metadata.version and the feature levels Kafka
    derives from it) the metadata log dir, when formatted now, gets Kafka's ``bootstrap.checkpoint`` holding them;
    the first active controller writes them to the metadata log.

    Without ``cluster_id`` the cluster id of an already formatted dir is reused, else a random one is made.
    Raises :class:`MetaPropertiesError` (one line naming the dir and the ids) for a dir formatted for another
    cluster or node, or already formatted dirs that disagree with each other.
    """
    settings = storage_settings(config)
    if cluster_id is not None:
        _check_cluster_id(cluster_id)
    paths = list(dict.fromkeys([*settings.log_dirs, settings.metadata_log_dir]))
    ios = {p: LogDirIO(p) for p in paths}
    existing: dict[str, MetaProperties] = {}
    try:
        for path, io in ios.items():
            meta = read_meta_properties(io)
            if meta is not None:
                existing[path] = meta
    except KafkaStorageError as e:
        raise MetaPropertiesError(f"cannot read meta.properties: {e}") from e

    clusters = {m.cluster_id for m in existing.values()}
    if cluster_id is None and len(clusters) > 1:
        raise MetaPropertiesError(
            "already formatted dirs disagree on cluster.id: "
            + ", ".join(f"{p} has {m.cluster_id}" for p, m in existing.items())
        )
    wanted_cluster = cluster_id or (next(iter(clusters)) if clusters else None) or random_uuid()
    for path, meta in existing.items():
        if meta.cluster_id != wanted_cluster:
            raise MetaPropertiesError(
                f"{path} is formatted for cluster {meta.cluster_id}, not {wanted_cluster}: refusing to format it"
            )
        if meta.node_id != settings.node_id:
            raise MetaPropertiesError(
                f"{path} is formatted for node.id {meta.node_id}, not {settings.node_id} "
                f"(cluster {meta.cluster_id}): refusing to format it"
            )

    used_ids = {m.directory_id for m in existing.values() if m.directory_id}
    voter_dir: str | None = None
    if bootstrap_voters is not None:
        mine = [v for v in bootstrap_voters.voters if v.voter_id == settings.node_id]
        if mine:
            voter_dir = uuid_text(mine[0].voter_directory_id)
            if voter_dir in used_ids and settings.metadata_log_dir not in existing:
                raise MetaPropertiesError(f"directory id {voter_dir} of controller {settings.node_id} is already "
                                          "the id of another log dir of this node")
            used_ids.add(voter_dir)
    formatted = []
    try:
        for path, io in ios.items():
            if path in existing:
                continue
            io.mkdir(path, exist_ok=True, parents=True)
            if path == settings.metadata_log_dir and voter_dir is not None:
                dir_id = voter_dir
            else:
                dir_id = random_directory_id(existing=used_ids)
            used_ids.add(dir_id)
            if path == settings.metadata_log_dir and bootstrap_voters is not None:
                _write_bootstrap_snapshot(io, path, bootstrap_voters, now_ms)
            if path == settings.metadata_log_dir and bootstrap_levels is not None:
                _write_bootstrap_levels(io, path, bootstrap_levels, now_ms)
            write_meta_properties(io, MetaProperties(META_VERSION, wanted_cluster, settings.node_id, dir_id))
            log.info("formatted_log_dir", log_dir=path, cluster_id=wanted_cluster, directory_id=dir_id)
            formatted.append(path)
    except KafkaStorageError as e:
        raise MetaPropertiesError(f"cannot format: {e}") from e
    return formatted


def _write_bootstrap_snapshot(io: LogDirIO, path: str, voters: Any, now_ms: int | None) -> None:
    """`<metadata dir>/__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`: kraft.version 1 and the
    first voters, before meta.properties is written (a dir with meta.properties is a formatted one)."""
    from kjbod.storage.metadata_snapshot import BOOTSTRAP_SNAPSHOT_ID, bootstrap_snapshot, write_snapshot_file

    topic_dir = os.path.join(path, "__cluster_metadata-0")
    io.mkdir(topic_dir, exist_ok=True, parents=True)
    stamp = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    write_snapshot_file(io, topic_dir, BOOTSTRAP_SNAPSHOT_ID, bootstrap_snapshot(voters, stamp))
    log.info("bootstrap_snapshot_written", log_dir=path, voters=[v.voter_id for v in voters.voters])


def _write_bootstrap_levels(io: LogDirIO, path: str, levels: dict[str, int], now_ms: int | None) -> None:
    """`<metadata dir>/bootstrap.checkpoint`: the feature levels a new cluster starts at (Kafka's
    BootstrapDirectory), written before meta.properties."""
    from kjbod.storage.metadata_snapshot import BOOTSTRAP_FILE, bootstrap_levels_snapshot

    stamp = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    io.write_atomic(os.path.join(path, BOOTSTRAP_FILE), bootstrap_levels_snapshot(levels, stamp))
    log.info("bootstrap_checkpoint_written", log_dir=path, levels=levels)


# --------------------------------------------------------------------------------------------- startup


def ensure_meta_properties(
    ios: Sequence[LogDirIO], *, metadata_log_dir: str | None, node_id: int, format_hint: str = "kjbod format"
) -> dict[str, MetaProperties]:
    """Startup check of every dir's meta.properties; returns {dir path: MetaProperties} for the readable dirs.

    A dir whose meta.properties cannot be read (I/O error) is left offline by the seam and omitted, as Kafka
    does with its error dirs; the metadata log dir failing, or every log dir failing, is fatal. A missing
    ``directory.id`` is generated and written. Raises :class:`UnformattedDirError` or
    :class:`MetaPropertiesError` with a one-line message.
    """
    metas: dict[str, MetaProperties] = {}
    unformatted: list[str] = []
    failed: list[str] = []
    for io in ios:
        try:
            meta = read_meta_properties(io)
        except KafkaStorageError:
            failed.append(io.path)
            continue
        if meta is None:
            unformatted.append(io.path)
        else:
            metas[io.path] = meta
    if unformatted:
        raise UnformattedDirError(
            f"not formatted (no meta.properties): {', '.join(unformatted)}; "
            f"run `{format_hint} -c <server.properties>` first"
        )
    meta_dir = os.path.abspath(metadata_log_dir) if metadata_log_dir else None
    if meta_dir is not None and meta_dir in failed:
        raise MetaPropertiesError(f"metadata log dir {meta_dir} is unreadable: cannot start")
    if not metas:
        raise MetaPropertiesError(f"every log dir failed: {', '.join(failed)}")

    for path, meta in metas.items():
        if meta.version != META_VERSION:
            raise MetaPropertiesError(
                f"{path}: meta.properties version {meta.version} is ZooKeeper-mode; kjbod needs version 1 "
                f"(run `{format_hint}` on an empty dir)"
            )
        if meta.cluster_id is None or meta.node_id is None:
            raise MetaPropertiesError(f"{path}: meta.properties lacks cluster.id or node.id")
        if meta.node_id != node_id:
            raise MetaPropertiesError(
                f"{path} belongs to node.id {meta.node_id} but this node is node.id {node_id}"
            )
    clusters = {m.cluster_id for m in metas.values()}
    if len(clusters) > 1:
        raise MetaPropertiesError(
            "log dirs belong to different clusters: "
            + ", ".join(f"{p} has cluster.id {m.cluster_id}" for p, m in metas.items())
        )

    seen: dict[str, str] = {}
    for path, meta in metas.items():
        dir_id = meta.directory_id
        if dir_id is None:
            continue
        try:
            reserved = is_reserved_directory_id(dir_id)
        except ValueError as e:
            raise MetaPropertiesError(f"{path}: directory.id {dir_id!r} is not a Kafka Uuid") from e
        if reserved:
            raise MetaPropertiesError(f"{path}: directory.id {dir_id} is a reserved id")
        if dir_id in seen:
            raise MetaPropertiesError(
                f"{seen[dir_id]} and {path} have the same directory.id {dir_id}: "
                "each dir needs its own (was one dir copied onto another?)"
            )
        seen[dir_id] = path

    by_path = {io.path: io for io in ios}
    for path, meta in list(metas.items()):
        if meta.directory_id is not None:
            continue
        dir_id = random_directory_id(existing=seen.keys())
        seen[dir_id] = path
        updated = MetaProperties(meta.version, meta.cluster_id, meta.node_id, dir_id, meta.other)
        try:
            write_meta_properties(by_path[path], updated)
        except KafkaStorageError:
            # The seam took the dir offline; like a read failure, it is left out.
            del metas[path]
            continue
        log.info("directory_id_generated", log_dir=path, directory_id=dir_id)
        metas[path] = updated
    return metas
