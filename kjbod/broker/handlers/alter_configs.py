"""AlterConfigs (key 33), versions 0-2: replace a resource's whole set of overrides.

Version notes: v0 is the oldest served; v1 only marks throttling after the response; v2 is flexible.

Each resource's configs become its complete set of overrides (what is not named is removed), unlike
IncrementalAlterConfigs. Topics (type 2): any topic config kjbod honours. Brokers (type 4, this node's id or ""
for the cluster default): only replica.alter.log.dirs.io.max.bytes.per.second (alias
intra.broker.throttled.rate) changes at runtime; it is written to the metadata log and takes effect at once on
running moves. Errors per resource: unknown key or bad value INVALID_CONFIG naming the key; a static broker
key INVALID_REQUEST; another broker's id INVALID_REQUEST; unknown topic UNKNOWN_TOPIC_OR_PARTITION.
validate_only checks and changes nothing. The controller checks and records the change (kjbod.controller.configs, with the key tables of
kjbod.broker.broker_config); this broker applies it once durable.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import AlterConfigsRequest, AlterConfigsResponse


@api(AlterConfigsRequest)
def handle(node, request, body: AlterConfigsRequest) -> AlterConfigsResponse:
    return node.controller_call(body, request.api_version)
