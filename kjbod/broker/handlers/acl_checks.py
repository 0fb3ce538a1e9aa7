"""The checks Kafka makes while parsing the ACL requests (CreateAclsRequest, DescribeAclsRequest and
DeleteAclsRequest refuse to be built): a request that fails them closes the connection, with a warning that
names the problem, as Kafka closes it after an unparsable request. Shared by the three handlers."""

from __future__ import annotations

from typing import Any, NoReturn

import structlog

from kjbod.metadata.acls import (
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSIONS,
    RESOURCE_TYPES,
    UNKNOWN,
    AclFilter,
)
from kjbod.wire.handler import CloseConnection

log = structlog.get_logger("kjbod.acls")


def _close(request: Any, api: str, reason: str) -> NoReturn:
    log.warning("closing_connection", reason=reason, api=api, version=request.api_version, peer=request.ctx.peer,
                client_id=request.client_id)
    raise CloseConnection(reason)


def refuse_filter(request: Any, flt: AclFilter, api: str) -> None:
    unknown = flt.unknown_element()
    if unknown is not None:
        _close(request, api, f"{api} filter has an unknown {unknown}: {flt}")


def refuse_creations(request: Any, body: Any) -> None:
    for c in body.creations:
        for what, code, known in (("resource type", c.resource_type, RESOURCE_TYPES),
                                  ("pattern type", c.resource_pattern_type, PATTERN_TYPES),
                                  ("operation", c.operation, OPERATIONS),
                                  ("permission type", c.permission_type, PERMISSIONS)):
            if code == UNKNOWN or code not in known:
                _close(request, "CreateAcls", f"CreateAcls entry has an unknown {what} (code {code})")
