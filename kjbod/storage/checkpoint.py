"""Small text files Kafka keeps beside the logs: offset checkpoints, partition.metadata, the clean-shutdown marker.

Strategy: each format is rendered and parsed by a pure function (tested against exact text), and written with
:meth:`LogDirIO.write_atomic` (temp file, fsync, rename, fsync of the dir), so a crash leaves the old or the new
file, never a mix. Byte layouts, as Kafka writes them:

Offset checkpoint (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``; Kafka's ``CheckpointFile``, version 0), UTF-8, one ``\\n`` after every line::

    0                  version
    2                  number of entries
    my-topic 0 1234    topic, partition, offset separated by single spaces
    my-topic 1 987

``partition.metadata`` (Kafka's ``PartitionMetadataFile``), no newline after the last line::

    version: 0
    topic_id: 3uI2M2AbQVO0J2cYw2xvOA

``.kafka_cleanshutdown`` (Kafka's ``CleanShutdownFileHandler``): ``{"version":0,"brokerEpoch":N}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from kjbod.storage.fsio import LogDirIO

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PARTITION_METADATA_FILE = "partition.metadata"
CHECKPOINT_VERSION = 0

TopicPartition = tuple[str, int]


class CheckpointFormatError(ValueError):
    """A checkpoint file that does not parse (Kafka raises IOException and treats it the same way)."""


def render_offset_checkpoint(entries: Mapping[TopicPartition, int] | Iterable[tuple[TopicPartition, int]]) -> str:
    items = list(entries.items()) if isinstance(entries, Mapping) else list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(items))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in items]
    return "\n".join(lines) + "\n"


_WS = re.compile(r"\s+")


def parse_offset_checkpoint(text: str, where: str = "checkpoint") -> dict[TopicPartition, int]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointFormatError(f"{where}: missing version or entry count")
    try:
        version = int(lines[0].strip())
        count = int(lines[1].strip())
    except ValueError as e:
        raise CheckpointFormatError(f"{where}: malformed header ({e})") from e
    if version != CHECKPOINT_VERSION:
        raise CheckpointFormatError(f"{where}: unknown checkpoint version {version}")
    body = lines[2:]
    if len(body) != count:
        raise CheckpointFormatError(f"{where}: expected {count} entries, found {len(body)}")
    result: dict[TopicPartition, int] = {}
    for line in body:
        parts = _WS.split(line.strip())
        if len(parts) != 3:
            raise CheckpointFormatError(f"{where}: malformed line {line!r}")
        try:
            result[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError as e:
            raise CheckpointFormatError(f"{where}: malformed line {line!r}") from e
    return result


def read_offset_checkpoint(io: LogDirIO, name: str) -> dict[TopicPartition, int] | None:
    """The checkpoint, or None when the file is missing. A corrupt file raises CheckpointFormatError."""
    data = io.read_bytes_or_none(io.join(name))
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointFormatError(f"{io.join(name)}: not UTF-8") from e
    return parse_offset_checkpoint(text, io.join(name))


def write_offset_checkpoint(io: LogDirIO, name: str, entries: Mapping[TopicPartition, int]) -> None:
    io.write_atomic(io.join(name), render_offset_checkpoint(sorted(entries.items())).encode("utf-8"))


def render_partition_metadata(topic_id: str) -> str:
    return f"version: 0\ntopic_id: {topic_id}"


def parse_partition_metadata(text: str, where: str = PARTITION_METADATA_FILE) -> str:
    """The topic id from partition.metadata text (Kafka's reader splits each line on whitespace)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].endswith(":"):
            fields[parts[0][:-1]] = parts[1]
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise CheckpointFormatError(f"{where}: not a version 0 partition.metadata")
    return fields["topic_id"]


def render_clean_shutdown(broker_epoch: int) -> str:
    return json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":"))


def parse_clean_shutdown(text: str) -> int:
    """The broker epoch recorded in the marker (-1 when unreadable: the marker still means 'clean')."""
    try:
        data = json.loads(text)
        return int(data.get("brokerEpoch", -1))
    except (ValueError, AttributeError, TypeError):
        return -1
