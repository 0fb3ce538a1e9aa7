"""IncrementalAlterConfigs (key 44), versions 0-1 (KIP-339).

Version notes: v0 is the oldest served; v1 is flexible.

Operations per key: SET (0), DELETE (1), APPEND (2) and SUBTRACT (3); the last two only for list configs
(cleanup.policy), otherwise INVALID_REQUEST. Topics (type 2): any topic config kjbod honours, written to the
metadata log and applied to the partition logs at once. Brokers (type 4, this node's id or "" for the cluster
default): replica.alter.log.dirs.io.max.bytes.per.second (alias intra.broker.throttled.rate), which changes
the speed of running moves immediately. Errors as AlterConfigs; a key named twice in one resource, or a resource
named twice, is INVALID_REQUEST. validate_only checks and changes nothing. The controller checks and records the change (kjbod.controller.configs, with the key tables of
kjbod.broker.broker_config); this broker applies it once durable.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse


@api(IncrementalAlterConfigsRequest)
def handle(node, request, body: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    return node.controller_call(body, request.api_version)
