"""ApiVersions (key 18), versions 0-4.

Version notes: v1 adds throttle_time_ms; v3 is the first flexible version and adds the client's software name
and version (validated as Kafka does: letters, digits, '.' and '-', starting and ending with a letter or
digit, else INVALID_REQUEST); v4 only relaxes how features with min version 0 are listed.  The answer lists the
APIs this node has handlers for on the listener the request came in on, without kjbod's extension API keys
(EXTENSION_API_KEYS and up) when `kjbod.extensions.enable` is false, so tools see an Apache Kafka broker.  Versions outside 0-4 never reach
this module: the router answers them per KIP-511.  The response header is always v0 (see protocol.headers).
"""

from __future__ import annotations

import re

from kjbod.broker.router import api, api_versions_for
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ApiVersionsRequest, ApiVersionsResponse

EXTENSION_API_KEYS = 10000  # kjbod's own API keys start here (README: "Extensions, invisible to Kafka")
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@api(ApiVersionsRequest)
def handle(node, request, body: ApiVersionsRequest) -> ApiVersionsResponse:
    if request.api_version >= 3 and not (
        _SOFTWARE.fullmatch(body.client_software_name) and _SOFTWARE.fullmatch(body.client_software_version)
    ):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    keys = api_versions_for(request.ctx.listener_kind)
    if not getattr(node, "extensions_enabled", True):
        keys = [k for k in keys if k.api_key < EXTENSION_API_KEYS]
    return ApiVersionsResponse(error_code=0, api_keys=keys)
