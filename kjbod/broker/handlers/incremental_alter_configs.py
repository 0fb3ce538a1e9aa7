"""IncrementalAlterConfigs (key 44), versions 0-1 (KIP-339).

Version notes: v0 is the oldest served; v1 is flexible.

Operations per key: SET (0), DELETE (1), APPEND (2) and SUBTRACT (3); the last two only for list configs
(cleanup.policy), otherwise INVALID_REQUEST. Topics (type 2): any topic config kjbod honours, written to the
metadata log and applied to the partition logs at once. Brokers (type 4, this node's id or "" for the cluster
default): the dynamic keys of kjbod.broker.broker_config, applied at once (the intra-broker throttle to
running moves, a broker default of a topic config such as log.retention.ms to every log whose topic does not
override it); DELETE removes the dynamic value, and the next level (cluster default, server.properties)
applies again. Groups (type 32, KIP-848): consumer.session.timeout.ms and consumer.heartbeat.interval.ms, SET and
DELETE only, checked against the broker's group.consumer.min/max.* keys. Errors as AlterConfigs; a key named twice in one resource, or a resource named twice, is
INVALID_REQUEST, and so are a null value for any operation but DELETE and another broker's id, answered by
this broker itself (kjbod.broker.handlers.alter_configs). validate_only checks and changes nothing. The
controller checks and records the change (kjbod.controller.configs, with the key tables of
kjbod.broker.broker_config); this broker applies it once durable.
"""

from __future__ import annotations

from kjbod.broker.handlers.alter_configs import answer_preprocessed
from kjbod.broker.router import api
from kjbod.protocol.generated import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from kjbod.protocol.generated.incremental_alter_configs_response import AlterConfigsResourceResponse


@api(IncrementalAlterConfigsRequest)
def handle(node, request, body: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    return answer_preprocessed(node, request, body, IncrementalAlterConfigsResponse, AlterConfigsResourceResponse,
                               incremental=True)
