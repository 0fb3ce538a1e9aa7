"""DeleteTopics (key 20), versions 1-6.

Version notes: v1-v3 identical requests (names only); v4 flexible; v5 adds error messages; v6 names topics by
name or by id (an unknown id answers UNKNOWN_TOPIC_ID).  With `delete.topic.enable=false` every topic answers
TOPIC_DELETION_DISABLED (v3+) or INVALID_REQUEST (v1-v2), as in Kafka.  Deletion is recorded in the metadata log first, then
the partition directories are renamed with Kafka's `-delete` suffix and removed in the background.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DeleteTopicsRequest, DeleteTopicsResponse
from kjbod.protocol.generated.delete_topics_response import DeletableTopicResult as Result
from kjbod.protocol.runtime import ZERO_UUID


@api(DeleteTopicsRequest)
def handle(node, request, body: DeleteTopicsRequest) -> DeleteTopicsResponse:
    if request.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in body.topic_names]
    if not node.config.delete_topic_enable:
        # Kafka's answer with delete.topic.enable=false: every topic TOPIC_DELETION_DISABLED, INVALID_REQUEST for
        # clients older than v3 (which do not know that code).
        code = ErrorCode.TOPIC_DELETION_DISABLED if request.api_version >= 3 else ErrorCode.INVALID_REQUEST
        return DeleteTopicsResponse(responses=[
            Result(name=name, topic_id=topic_id, error_code=code,
                   error_message="Topic deletion is disabled (delete.topic.enable=false).")
            for name, topic_id in wanted])
    results = []
    seen: set = set()
    for name, topic_id in wanted:
        if name is not None and topic_id != ZERO_UUID:
            results.append(Result(name=name, topic_id=topic_id, error_code=ErrorCode.INVALID_REQUEST,
                                  error_message="give a topic name or a topic id, not both"))
            continue
        topic = node.metadata.topic(name) if name is not None else node.metadata.topic_by_id(topic_id)
        if topic is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            what = f"topic id {topic_id}" if name is None else f"topic {name!r}"
            results.append(Result(name=name, topic_id=topic_id, error_code=code,
                                  error_message=f"{what} does not exist"))
            continue
        if topic.topic_id in seen:
            results.append(Result(name=topic.name, topic_id=topic.topic_id, error_code=ErrorCode.INVALID_REQUEST,
                                  error_message="topic appears more than once in the request"))
            continue
        seen.add(topic.topic_id)
        try:
            node.delete_topic(topic)
        except Exception as e:
            code = getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
            results.append(Result(name=topic.name, topic_id=topic.topic_id, error_code=code,
                                  error_message=f"could not delete the topic: {e}"))
            continue
        results.append(Result(name=topic.name, topic_id=topic.topic_id, error_code=0, error_message=None))
    return DeleteTopicsResponse(responses=results)
