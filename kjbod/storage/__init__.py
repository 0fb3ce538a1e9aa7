"""kjbod's storage engine: Kafka's on-disk log format across many log dirs (JBOD).

Modules, bottom to top: ``fsio`` (the one file-I/O seam, fault injection), ``errors`` (Kafka error codes),
``ids`` (Kafka Uuid text), ``meta`` (meta.properties, ``format``), ``checkpoint`` (checkpoint files),
``records`` (record batch v2), ``index`` and ``segment`` (segment files), ``producer_state``, ``config``
(LogConfig), ``log`` (PartitionLog), ``placement`` and ``manager`` (LogManager).
"""

from kjbod.storage.config import LogConfig
from kjbod.storage.errors import KafkaStorageError, StorageError, StorageSetupError
from kjbod.storage.ids import random_directory_id, random_uuid
from kjbod.storage.log import AppendInfo, PartitionLog, ReadResult
from kjbod.storage.manager import LogDirInfo, LogManager, PartitionSpec
from kjbod.storage.meta import ensure_meta_properties, format_dirs

__all__ = [
    "AppendInfo",
    "KafkaStorageError",
    "LogConfig",
    "LogDirInfo",
    "LogManager",
    "PartitionLog",
    "PartitionSpec",
    "ReadResult",
    "StorageError",
    "StorageSetupError",
    "ensure_meta_properties",
    "format_dirs",
    "random_directory_id",
    "random_uuid",
]
