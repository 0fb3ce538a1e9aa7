"""Storage errors, each carrying the Kafka error code a broker puts in its response.

Strategy: the storage layer must not import ``kjbod.protocol`` (it sits below it), so the handful of numeric codes
it needs are pinned here with Kafka's names. A handler catches :class:`StorageError`, reads ``error_code`` and
``message``, and never needs to know which storage module raised. Errors that are not about one request (a dir
that is not formatted, meta.properties that disagree, a dir locked by another process) derive from
:class:`StorageSetupError` instead: they stop the node at startup and have no error code.
"""

from __future__ import annotations

# Kafka's numeric error codes (org.apache.kafka.common.protocol.Errors), only those storage can produce.
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
REPLICA_NOT_AVAILABLE = 9
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
INVALID_TIMESTAMP = 32
TOPIC_ALREADY_EXISTS = 36
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
KAFKA_STORAGE_ERROR = 56
LOG_DIR_NOT_FOUND = 57
INVALID_RECORD = 87


class StorageError(Exception):
    """A failure a broker reports to the client as ``error_code`` with ``message``."""

    error_code: int = UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, *, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        # (index of the record in the append, why it was refused): Produce v8+ answers them per partition
        self.record_errors: list[tuple[int, str]] = record_errors or []


class KafkaStorageError(StorageError):
    """The log dir holding the data is offline (an I/O error happened there)."""

    error_code = KAFKA_STORAGE_ERROR

    def __init__(self, message: str, *, log_dir: str | None = None) -> None:
        super().__init__(message)
        self.log_dir = log_dir


class LogDirFullError(KafkaStorageError):
    """The log dir has no room for this write (ENOSPC, EDQUOT, or below its ``log.dir.reserved.bytes``): the dir
    stays online and readable, appends to it are refused with KAFKA_STORAGE_ERROR (retriable) until space returns."""


class OffsetOutOfRangeError(StorageError):
    error_code = OFFSET_OUT_OF_RANGE


class CorruptMessageError(StorageError):
    error_code = CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(StorageError):
    error_code = UNKNOWN_TOPIC_OR_PARTITION


class ReplicaNotAvailableError(StorageError):
    error_code = REPLICA_NOT_AVAILABLE


class MessageTooLargeError(StorageError):
    error_code = MESSAGE_TOO_LARGE


class InvalidTopicError(StorageError):
    error_code = INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(StorageError):
    error_code = RECORD_LIST_TOO_LARGE


class InvalidTimestampError(StorageError):
    error_code = INVALID_TIMESTAMP


class TopicAlreadyExistsError(StorageError):
    error_code = TOPIC_ALREADY_EXISTS


class OutOfOrderSequenceError(StorageError):
    error_code = OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    error_code = INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(StorageError):
    """KIP-890: a transactional batch of a producer with no transaction open here, not verified with its
    transaction coordinator."""

    error_code = INVALID_TXN_STATE


class LogDirNotFoundError(StorageError):
    error_code = LOG_DIR_NOT_FOUND


class InvalidRecordError(StorageError):
    error_code = INVALID_RECORD


class StorageSetupError(Exception):
    """Startup or format refused: one line naming the dir and what disagrees. Not a Kafka error code."""


class UnformattedDirError(StorageSetupError):
    """A configured dir has no meta.properties: the operator has to run ``kjbod format`` first."""


class MetaPropertiesError(StorageSetupError):
    """meta.properties is unreadable, foreign (another cluster or node) or inconsistent across dirs."""


class LogDirLockedError(StorageSetupError):
    """Another process holds the ``.lock`` of a log dir."""


class DuplicateLogError(StorageSetupError):
    """The same partition has a current log in two dirs (a crash during a swap left both behind)."""
