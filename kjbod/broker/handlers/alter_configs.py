"""AlterConfigs (key 33), versions 0-2: replace a resource's whole set of overrides.

Version notes: v0 is the oldest served; v1 only marks throttling after the response; v2 is flexible.

Each resource's configs become its complete set of overrides (what is not named is removed), unlike
IncrementalAlterConfigs. Topics (type 2): any topic config kjbod honours. Brokers (type 4, this node's id or ""
for the cluster default): only replica.alter.log.dirs.io.max.bytes.per.second (alias
intra.broker.throttled.rate) changes at runtime; it is written to the metadata log and takes effect at once on
running moves. Errors per resource: unknown key or bad value INVALID_CONFIG naming the key; a static broker
key INVALID_REQUEST; another broker's id INVALID_REQUEST; unknown topic UNKNOWN_TOPIC_OR_PARTITION.
validate_only checks and changes nothing. See kjbod.broker.broker_config.
"""

from __future__ import annotations

from kjbod.broker import broker_config as bc
from kjbod.broker.router import api
from kjbod.protocol.generated import AlterConfigsRequest, AlterConfigsResponse
from kjbod.protocol.generated.alter_configs_response import AlterConfigsResourceResponse as Resp


@api(AlterConfigsRequest)
def handle(node, request, body: AlterConfigsRequest) -> AlterConfigsResponse:
    resources = [(r.resource_type, r.resource_name,
                  [(c.name, bc.SET if c.value is not None else bc.DELETE, c.value) for c in r.configs])
                 for r in body.resources]
    answers = bc.alter(node, resources, replace=True, validate_only=body.validate_only)
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        Resp(error_code=code, error_message=message, resource_type=r.resource_type, resource_name=r.resource_name)
        for r, (code, message) in zip(body.resources, answers, strict=True)])
