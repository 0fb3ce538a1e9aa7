"""AlterConfigs (key 33), versions 0-2: replace a resource's whole set of overrides.

Version notes: v0 is the oldest served; v1 only marks throttling after the response; v2 is flexible.

Each resource's configs become its complete set of overrides (what is not named is removed), unlike
IncrementalAlterConfigs. Topics (type 2): any topic config kjbod honours. Brokers (type 4, this node's id or
"" for the cluster default): the dynamic keys of kjbod.broker.broker_config (the throttles, the KIP-435 limits
and the broker defaults of topic configs such as log.retention.ms and message.max.bytes); they are written to
the metadata log and take effect at once (running moves, and every log whose topic does not override the key). Groups
(type 32, KIP-848): the group configs, which the group coordinator applies to that group's members.
Errors per resource: an unknown key, or a bad topic value, INVALID_CONFIG naming the key; a bad broker value (as
Kafka's broker answers it) or a static broker key INVALID_REQUEST; another broker's id INVALID_REQUEST; unknown
topic UNKNOWN_TOPIC_OR_PARTITION. validate_only
checks and changes nothing. The controller checks and records the change (kjbod.controller.configs, with the
key tables of kjbod.broker.broker_config); this broker applies it once durable.

Before that, this broker answers what Kafka's brokers answer themselves (ConfigAdminManager.preprocess, shared
with IncrementalAlterConfigs: `answer_preprocessed`), each INVALID_REQUEST with a message naming the problem: a
resource named twice (both answered), a null value (a legacy AlterConfigs has no DELETE; an incremental one
only for DELETE), and a broker resource naming another broker (only this broker's id or "" is this broker's to
change: the controller alone cannot tell which broker forwarded the request), and, INVALID_CONFIG, a
cordoned.log.dirs entry that is not one of this broker's log dirs (only this broker knows its log.dirs; KIP-1066).
This broker's loggers (type 8) are answered here entirely (kjbod.broker.broker_loggers), the legacy request
refused for them as Kafka refuses it.
Only the other resources go to the
controller; the answers keep the request's order. On a controller listener the request goes to the controller
as it came (a broker forwarded it, as Kafka's ControllerApis takes it).
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

from kjbod.broker import broker_config as bc
from kjbod.broker.authz import config_access_refusal
from kjbod.broker.broker_loggers import alter_loggers
from kjbod.broker.router import api
from kjbod.metadata.acls import ALTER_CONFIGS
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AlterConfigsRequest, AlterConfigsResponse
from kjbod.protocol.generated.alter_configs_response import AlterConfigsResourceResponse
from kjbod.storage.placement import cordoned_dirs

SET, DELETE, APPEND = 0, 1, 2  # IncrementalAlterConfigs' operations (DELETE takes no value)


def _refusal(node, resource, duplicated: bool, incremental: bool,
             validate_only: bool = False) -> tuple[int, str | None] | None:
    """Why this broker refuses the resource without asking the controller (error code, message), its own answer
    for a resource that is this broker's alone (a logger: error code 0 once applied), or None."""
    if duplicated:
        return ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
    nulls = [c.name for c in resource.configs
             if c.value is None and not (incremental and c.config_operation == DELETE)]
    if nulls:
        return ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}"
    if resource.resource_type == bc.BROKER_LOGGER:
        if not incremental:  # as Kafka: only IncrementalAlterConfigs changes loggers
            return ErrorCode.INVALID_REQUEST, f"Unknown resource type {bc.BROKER_LOGGER}"
        try:
            alter_loggers(node.node_id, resource, validate_only)
        except bc.ConfigProblem as e:
            return e.code, e.message
        return 0, None  # answered here: loggers are this broker's own, never the controller's
    if resource.resource_type == bc.BROKER:
        try:
            bc.check_broker_name(resource.resource_name, node.node_id)
        except bc.ConfigProblem as e:
            return ErrorCode.INVALID_REQUEST, e.message
        for c in resource.configs:
            if c.name == bc.CORDON_KEY and c.value and resource.resource_name and \
                    (not incremental or c.config_operation in (SET, APPEND)):
                try:
                    cordoned_dirs(c.value, node.config.log_dirs)
                except ValueError as e:
                    return ErrorCode.INVALID_CONFIG, str(e)
    return None


def answer_preprocessed(node, request, body: Any, response_cls: Any, item_cls: Any, *, incremental: bool) -> Any:
    """The response (or an awaitable of it): the refusals of this broker (see the module docstring), the
    controller's answer for the rest, in request order."""
    if request.ctx.listener_kind == "controller":  # forwarded by a broker, which checked it (or a client's own)
        return node.controller_call(body, request.api_version)
    counts = Counter((r.resource_type, r.resource_name) for r in body.resources)
    refused: dict[int, tuple[int, str | None]] = {}
    for i, r in enumerate(body.resources):
        if (denied := config_access_refusal(node, request, r.resource_type, r.resource_name, ALTER_CONFIGS)):
            refused[i] = denied
        elif (problem := _refusal(node, r, counts[(r.resource_type, r.resource_name)] > 1, incremental,
                                  body.validate_only)):
            refused[i] = problem
    if not refused:
        return node.controller_call(body, request.api_version)
    rest = [r for i, r in enumerate(body.resources) if i not in refused]
    forwarded = type(body)(resources=rest, validate_only=body.validate_only) if rest else None

    def merge(answered: Any) -> Any:
        answers = iter(answered.responses if answered is not None else [])
        return response_cls(throttle_time_ms=0, responses=[
            item_cls(error_code=refused[i][0], error_message=refused[i][1], resource_type=r.resource_type,
                     resource_name=r.resource_name) if i in refused else next(answers)
            for i, r in enumerate(body.resources)])

    if forwarded is None:
        return merge(None)
    result = node.controller_call(forwarded, request.api_version)
    if not inspect.isawaitable(result):
        return merge(result)

    async def later() -> Any:
        return merge(await result)

    return later()


@api(AlterConfigsRequest)
def handle(node, request, body: AlterConfigsRequest) -> AlterConfigsResponse:
    return answer_preprocessed(node, request, body, AlterConfigsResponse, AlterConfigsResourceResponse,
                               incremental=False)
