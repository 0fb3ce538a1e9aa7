"""FindCoordinator (key 10), versions 0-6.

Version notes: v1 adds the key type and error messages; v3 is flexible; v4 batches keys (one result each); v6
adds share groups.  kjbod has no group or transaction coordinator yet (consumer groups are out of scope), so
every key answers COORDINATOR_NOT_AVAILABLE, which clients treat as retriable.  The API is served anyway because
librdkafka takes its presence as the sign that a broker understands lz4-compressed batches.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FindCoordinatorRequest, FindCoordinatorResponse
from kjbod.protocol.generated.find_coordinator_response import Coordinator

MESSAGE = "kjbod has no group or transaction coordinator (consumer groups are not supported yet)"


@api(FindCoordinatorRequest)
def handle(node, request, body: FindCoordinatorRequest) -> FindCoordinatorResponse:
    if request.api_version >= 4:
        return FindCoordinatorResponse(coordinators=[
            Coordinator(key=key, node_id=-1, host="", port=-1,
                                                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=MESSAGE)
            for key in body.coordinator_keys])
    return FindCoordinatorResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                   error_message=MESSAGE if request.api_version >= 1 else None,
                                   node_id=-1, host="", port=-1)
