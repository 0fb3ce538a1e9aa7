"""PushTelemetry (key 72), version 0 (KIP-714).

Version notes: v0 is the only version, flexible. The client's metrics arrive as an OTLP MetricsData protobuf,
compressed with one of the codecs GetTelemetrySubscriptions offered; Kafka's checks (reserved or terminated
instance, too early, stale subscription id, unknown codec, over telemetry.max.bytes, undecodable payload) are in
kjbod.broker.client_metrics, which keeps the decoded series for the Prometheus endpoint.
"""

from __future__ import annotations

from kjbod.broker.handlers.get_telemetry_subscriptions import client_attributes
from kjbod.broker.router import api
from kjbod.protocol.generated import PushTelemetryRequest, PushTelemetryResponse


@api(PushTelemetryRequest)
def handle(node, request, body: PushTelemetryRequest) -> PushTelemetryResponse:
    code, _message = node.client_metrics.push(body.client_instance_id.bytes, client_attributes(node, request),
                                              body.subscription_id, body.terminating, body.compression_type,
                                              body.metrics)
    return PushTelemetryResponse(error_code=code)
