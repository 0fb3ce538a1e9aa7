"""IncrementalAlterConfigs (key 44), versions 0-1 (KIP-339).

Version notes: v0 is the oldest served; v1 is flexible.

Operations per key: SET (0), DELETE (1), APPEND (2) and SUBTRACT (3); the last two only for list configs
(cleanup.policy), otherwise INVALID_REQUEST. Topics (type 2): any topic config kjbod honours, written to the
metadata log and applied to the partition logs at once. Brokers (type 4, this node's id or "" for the cluster
default): replica.alter.log.dirs.io.max.bytes.per.second (alias intra.broker.throttled.rate), which changes
the speed of running moves immediately. Errors as AlterConfigs; a key named twice in one resource, or a resource
named twice, is INVALID_REQUEST. validate_only checks and changes nothing. See kjbod.broker.broker_config.
"""

from __future__ import annotations

from kjbod.broker import broker_config as bc
from kjbod.broker.router import api
from kjbod.protocol.generated import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from kjbod.protocol.generated.incremental_alter_configs_response import AlterConfigsResourceResponse as Resp


@api(IncrementalAlterConfigsRequest)
def handle(node, request, body: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    resources = [(r.resource_type, r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
                 for r in body.resources]
    answers = bc.alter(node, resources, replace=False, validate_only=body.validate_only)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
        Resp(error_code=code, error_message=message, resource_type=r.resource_type, resource_name=r.resource_name)
        for r, (code, message) in zip(body.resources, answers, strict=True)])
