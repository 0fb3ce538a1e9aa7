"""CreateTopics (key 19), versions 2-7.

Version notes: v2 is the oldest served (throttle time, validate_only, error messages); v4 lets
num_partitions / replication_factor be -1 for the broker defaults; v5 is flexible and answers the effective
partition count, replication factor and configs; v6 may answer THROTTLING_QUOTA_EXCEEDED (never here); v7
returns the topic id.

Checks, in Kafka's order: duplicate names in one request (INVALID_REQUEST), the name (INVALID_TOPIC_EXCEPTION),
the metadata log's own name `__cluster_metadata` (INVALID_REQUEST: its partition directory would be the metadata
log's), existence (TOPIC_ALREADY_EXISTS), a name that differs from an existing topic only by '.' versus '_'
(INVALID_TOPIC_EXCEPTION, as KRaft refuses it: the two would share metric names), partitions
(INVALID_PARTITIONS), replication factor against the registered brokers (INVALID_REPLICATION_FACTOR), explicit
assignments (INVALID_REPLICA_ASSIGNMENT / INVALID_REQUEST), and topic configs (INVALID_CONFIG naming the key).
validate_only runs every check and creates nothing.
"""

from __future__ import annotations

from collections import Counter

from kjbod.broker.metadata_image import topic_name_problem
from kjbod.broker.router import api
from kjbod.broker.topic_config import TopicConfigError, effective, validate
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import CreateTopicsRequest, CreateTopicsResponse
from kjbod.protocol.generated.create_topics_response import CreatableTopicConfigs as ConfigEntry
from kjbod.protocol.generated.create_topics_response import CreatableTopicResult as Result

TOPIC_CONFIG_SOURCE = 1
DEFAULT_CONFIG_SOURCE = 5
MAX_PARTITIONS = 100_000
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


def collision_index(names) -> dict[str, str]:
    """{name with '.' as '_': name} for the names that contain either character."""
    return {n.replace(".", "_"): n for n in names if "." in n or "_" in n}


def collision_problem(name: str, index: dict[str, str]) -> str | None:
    """Why `name` may not be created next to the topics in `index` (see collision_index), or None."""
    if "." not in name and "_" not in name:
        return None
    other = index.get(name.replace(".", "_"))
    if other is None or other == name:
        return None
    return f"topic {name!r} collides with existing topic {other!r} ('.' and '_' map to the same metric names)"


def _fail(name: str, code: ErrorCode, message: str) -> Result:
    return Result(name=name, error_code=code, error_message=message, configs=None)


def check_topic(node, t, duplicates: set[str], collisions: dict[str, str]
                ) -> tuple[Result | None, int, dict[str, str]]:
    """Returns (failure, partition count, config overrides)."""
    if t.name in duplicates:
        return _fail(t.name, ErrorCode.INVALID_REQUEST, f"topic {t.name!r} appears more than once in the request"), 0, {}
    problem = topic_name_problem(t.name)
    if problem:
        return _fail(t.name, ErrorCode.INVALID_TOPIC_EXCEPTION, problem), 0, {}
    if t.name == CLUSTER_METADATA_TOPIC:
        return _fail(t.name, ErrorCode.INVALID_REQUEST,
                     f"creation of the internal topic {CLUSTER_METADATA_TOPIC} is prohibited"), 0, {}
    if node.metadata.topic(t.name) is not None:
        return _fail(t.name, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists"), 0, {}
    collision = collision_problem(t.name, collisions)
    if collision:
        return _fail(t.name, ErrorCode.INVALID_TOPIC_EXCEPTION, collision), 0, {}
    brokers = 1
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            return _fail(t.name, ErrorCode.INVALID_REQUEST, "with explicit assignments, num_partitions and "
                         "replication_factor must both be -1"), 0, {}
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            return _fail(t.name, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "assignments must cover partitions 0..N-1 exactly once"), 0, {}
        for a in t.assignments:
            if not a.broker_ids or len(set(a.broker_ids)) != len(a.broker_ids):
                return _fail(t.name, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"partition {a.partition_index}: empty or duplicate broker ids"), 0, {}
            unknown = [b for b in a.broker_ids if b != node.node_id]
            if unknown:
                return _fail(t.name, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"partition {a.partition_index}: unknown broker ids {unknown}"), 0, {}
        partitions = len(indexes)
    else:
        partitions = t.num_partitions
        if partitions == -1:
            partitions = int(getattr(node.config, "num_partitions", 1))
        if partitions <= 0:
            return _fail(t.name, ErrorCode.INVALID_PARTITIONS,
                         f"number of partitions must be larger than 0 (got {t.num_partitions})"), 0, {}
        if partitions > MAX_PARTITIONS:
            return _fail(t.name, ErrorCode.INVALID_PARTITIONS,
                         f"number of partitions {partitions} exceeds kjbod's limit of {MAX_PARTITIONS}"), 0, {}
        rf = t.replication_factor
        if rf == -1:
            rf = int(getattr(node.config, "default_replication_factor", 1))
        if rf <= 0:
            return _fail(t.name, ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"replication factor must be larger than 0 (got {t.replication_factor})"), 0, {}
        if rf > brokers:
            return _fail(t.name, ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"unable to replicate the partition {rf} time(s): the target replication factor of "
                         f"{rf} cannot be reached because only {brokers} broker(s) are registered"), 0, {}
    configs: dict[str, str] = {}
    for c in t.configs:
        if c.value is None:
            continue
        configs[c.name] = c.value
    try:
        validate(dict[str, str | None](configs))
    except TopicConfigError as e:
        return _fail(t.name, ErrorCode.INVALID_CONFIG, str(e)), 0, {}
    return None, partitions, configs


def config_entries(node, overrides: dict[str, str]) -> list:
    out = []
    for name, (value, is_override) in sorted(effective(overrides, node.config).items()):
        out.append(ConfigEntry(name=name, value=str(value), read_only=False,
                               config_source=TOPIC_CONFIG_SOURCE if is_override else DEFAULT_CONFIG_SOURCE,
                               is_sensitive=False))
    return out


@api(CreateTopicsRequest)
def handle(node, request, body: CreateTopicsRequest) -> CreateTopicsResponse:
    counts = Counter(t.name for t in body.topics)
    duplicates = {n for n, c in counts.items() if c > 1}
    collisions = collision_index(node.metadata.by_name)
    results = []
    for t in body.topics:
        failure, partitions, configs = check_topic(node, t, duplicates, collisions)
        if failure is not None:
            results.append(failure)
            continue
        if body.validate_only:
            results.append(Result(name=t.name, error_code=0, error_message=None, num_partitions=partitions,
                                  replication_factor=1, configs=config_entries(node, configs)))
            continue
        if "." in t.name or "_" in t.name:
            collisions[t.name.replace(".", "_")] = t.name  # later topics of this request collide with it too
        try:
            topic = node.create_topic(t.name, partitions, configs)
        except Exception as e:  # storage failure while creating: answer, never crash the connection
            code = getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
            results.append(_fail(t.name, code, f"could not create the topic: {e}"))
            continue
        results.append(Result(name=t.name, topic_id=topic.topic_id, error_code=0, error_message=None,
                              num_partitions=partitions, replication_factor=1,
                              configs=config_entries(node, configs)))
    return CreateTopicsResponse(topics=results)
