"""UpdateFeatures (key 57), versions 0-2 (flexible).

The controller owns it (kjbod.controller.features: Kafka's checks, FeatureLevelRecords in the metadata log); a
broker sends the request to it, as Kafka's brokers forward it. ALTER on the cluster is needed. The answer comes
once the records are durable; every node learns the new levels from the metadata log (ApiVersions' finalized
features).
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import UpdateFeaturesRequest, UpdateFeaturesResponse


@api(UpdateFeaturesRequest)
async def handle(node, request, body: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    return await node.controller_request(body, request.api_version)
