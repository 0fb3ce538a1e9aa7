"""ApiVersions (key 18), versions 0-4.

Version notes: v1 adds throttle_time_ms; v3 is the first flexible version and adds the client's software name
and version (validated as Kafka does: letters, digits, '.' and '-', starting and ending with a letter or
digit, else INVALID_REQUEST); v4 only relaxes how features with min version 0 are listed.  From v3 the answer
carries the features this node supports and the cluster's finalized levels (kjbod.metadata.features; kraft.version
from the node's metadata log), with the
offset of the record that last changed them as their epoch (0: the levels a new cluster starts at); the router's
memo of this answer is dropped when they change (Router.forget_answers, from each node's publisher).  The answer lists the
APIs this node has handlers for on the listener the request came in on, without kjbod's extension API keys
(EXTENSION_API_KEYS and up) when `kjbod.extensions.enable` is false, so tools see an Apache Kafka broker.  Versions outside 0-4 never reach
this module: the router answers them per KIP-511.  The response header is always v0 (see protocol.headers).
"""

from __future__ import annotations

import re

from kjbod.broker.router import api, api_versions_for
from kjbod.metadata import features
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ApiVersionsRequest, ApiVersionsResponse
from kjbod.protocol.generated.api_versions_response import FinalizedFeatureKey, SupportedFeatureKey

SOFTWARE_MAX = 16384  # connections whose client software is remembered; the oldest are forgotten
EXTENSION_API_KEYS = 10000  # kjbod's own API keys start here (README: "Extensions, invisible to Kafka")
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@api(ApiVersionsRequest)
def handle(node, request, body: ApiVersionsRequest) -> ApiVersionsResponse:
    if request.api_version >= 3 and not (
        _SOFTWARE.fullmatch(body.client_software_name) and _SOFTWARE.fullmatch(body.client_software_version)
    ):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    software = getattr(node, "client_software", None)
    if software is not None and request.api_version >= 3:  # what client metrics subscriptions match on (KIP-714)
        software[request.ctx.connection_id] = (body.client_software_name, body.client_software_version)
        software.move_to_end(request.ctx.connection_id)
        while len(software) > SOFTWARE_MAX:
            software.popitem(last=False)
    keys = api_versions_for(request.ctx.listener_kind)
    if not getattr(node, "extensions_enabled", True):
        keys = [k for k in keys if k.api_key < EXTENSION_API_KEYS]
    image = _image(node)
    finalized = features.finalized(image) if image is not None else {}
    mlog = getattr(node, "metadata_log", None)
    kraft = getattr(mlog, "kraft_version", 0) if mlog is not None and getattr(mlog, "is_open", False) else 0
    if image is not None and isinstance(kraft, int) and kraft > 0:
        finalized[features.KRAFT_VERSION] = kraft  # the metadata log's own level (KIP-853), not the image's
    return ApiVersionsResponse(
        error_code=0, api_keys=keys,
        supported_features=[SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                            for n, (lo, hi) in sorted(features.ADVERTISED.items())],
        finalized_features_epoch=max(image.features_epoch, 0) if image is not None else -1,
        finalized_features=[FinalizedFeatureKey(name=n, max_version_level=level, min_version_level=level)
                            for n, level in sorted(finalized.items()) if level > 0])


def _image(node):
    """The metadata image this node serves from (a broker's, or a controller-only node's own), if any."""
    image = getattr(node, "metadata", None)
    if image is None:
        controller = getattr(node, "controller", None)
        image = getattr(controller, "image", None)
    return image
