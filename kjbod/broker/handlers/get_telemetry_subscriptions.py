"""GetTelemetrySubscriptions (key 71), version 0 (KIP-714).

Version notes: v0 is the only version, flexible. A client sends the zero instance id the first time and is
given one; the answer says which metric prefixes the matching CLIENT_METRICS subscriptions want, how often to
push them, the subscription id to quote, the codecs taken and telemetry.max.bytes (kjbod.broker.client_metrics
holds Kafka's rules). Asking again before the push interval has passed is THROTTLING_QUOTA_EXCEEDED.
"""

from __future__ import annotations

import uuid

from kjbod.broker.client_metrics import ACCEPTED_CODECS
from kjbod.broker.router import api
from kjbod.protocol.generated import GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse


def client_attributes(node, request) -> dict[str, str | None]:
    """What subscriptions' match selectors are matched against (Kafka's ClientMetricsInstanceMetadata)."""
    name, version = node.client_software.get(request.ctx.connection_id, (None, None))
    return {"client_id": request.client_id or "", "client_software_name": name,
            "client_software_version": version, "client_source_address": request.ctx.peer_host,
            "client_source_port": str(request.ctx.peer_port)}


@api(GetTelemetrySubscriptionsRequest)
def handle(node, request, body: GetTelemetrySubscriptionsRequest) -> GetTelemetrySubscriptionsResponse:
    answer = node.client_metrics.get_subscriptions(body.client_instance_id.bytes, client_attributes(node, request))
    if answer.error_code:
        return GetTelemetrySubscriptionsResponse(error_code=answer.error_code)
    return GetTelemetrySubscriptionsResponse(
        error_code=0, client_instance_id=uuid.UUID(bytes=answer.instance_id), subscription_id=answer.subscription_id,
        accepted_compression_types=list(ACCEPTED_CODECS), push_interval_ms=answer.interval_ms,
        telemetry_max_bytes=node.client_metrics.telemetry_max_bytes, delta_temporality=True,
        requested_metrics=list(answer.metrics))
