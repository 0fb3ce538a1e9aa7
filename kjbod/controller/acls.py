"""ACLs: CreateAcls (API 30) and DeleteAcls (API 31) turned into AccessControlEntryRecord and
RemoveAccessControlEntryRecord records (DescribeAcls reads the image: kjbod.metadata.acls).

Rules (Kafka's AclControlManager and the broker's checks before it): each entry is checked on its own and
answered in the request's order. INVALID_REQUEST for a resource type ANY or UNKNOWN, a pattern type other than
LITERAL or PREFIXED, an operation ANY or UNKNOWN, a permission other than ALLOW or DENY, an empty resource name, a
CLUSTER resource not named `kafka-cluster`, and a principal without its `Type:` part. An entry that exists
already (or twice in one request) succeeds without a second record. DeleteAcls removes every entry a filter
matches (a filter with an UNKNOWN part answers INVALID_REQUEST) and lists them under that filter; an entry two
filters match is removed once and listed under both.
"""

from __future__ import annotations

import uuid
from typing import Any

from kjbod.controller.result import ControllerResult
from kjbod.metadata import MetadataImage
from kjbod.metadata.acls import (
    ALLOW,
    ANY,
    CLUSTER,
    CLUSTER_NAME,
    DENY,
    LITERAL,
    OPERATIONS,
    PATTERN_TYPES,
    PREFIXED,
    RESOURCE_TYPES,
    UNKNOWN,
    AclEntry,
    AclFilter,
    parse_principal,
)
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AccessControlEntryRecord,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    RemoveAccessControlEntryRecord,
)
from kjbod.protocol.generated.create_acls_response import AclCreationResult
from kjbod.protocol.generated.delete_acls_response import DeleteAclsFilterResult, DeleteAclsMatchingAcl

__all__ = ["create_acls", "delete_acls", "entry_problem"]


def entry_problem(acl: AclEntry) -> str | None:
    """Why Kafka refuses to store this entry, in its words, or None."""
    if acl.resource_type in (ANY, UNKNOWN) or acl.resource_type not in RESOURCE_TYPES:
        return f"Invalid resourceType {RESOURCE_TYPES.get(acl.resource_type, 'UNKNOWN')}"
    if acl.pattern_type not in (LITERAL, PREFIXED):
        return f"Invalid patternType {PATTERN_TYPES.get(acl.pattern_type, 'UNKNOWN')}"
    if acl.operation in (ANY, UNKNOWN) or acl.operation not in OPERATIONS:
        return f"Invalid operation {OPERATIONS.get(acl.operation, 'UNKNOWN')}"
    if acl.permission_type not in (ALLOW, DENY):
        return f"Invalid permissionType {'ANY' if acl.permission_type == ANY else 'UNKNOWN'}"
    if acl.resource_type == CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Invalid empty resource name"
    try:
        parse_principal(acl.principal)
    except ValueError as e:
        return str(e)
    return None


def _new_id(image: MetadataImage, taken: set[uuid.UUID]) -> uuid.UUID:
    while True:
        acl_id = uuid.uuid4()
        if acl_id not in image.acls and acl_id not in taken:
            return acl_id


def create_acls(image: MetadataImage, req: CreateAclsRequest) -> ControllerResult:
    existing = set(image.acls.values())
    records: list[Any] = []
    results: list[AclCreationResult] = []
    taken: set[uuid.UUID] = set()
    for c in req.creations:
        acl = AclEntry(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation,
                       c.permission_type)
        problem = entry_problem(acl)
        if problem is not None:
            results.append(AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=problem))
            continue
        if acl not in existing:
            existing.add(acl)
            acl_id = _new_id(image, taken)
            taken.add(acl_id)
            records.append(AccessControlEntryRecord(
                id=acl_id, resource_type=acl.resource_type, resource_name=acl.resource_name,
                pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host, operation=acl.operation,
                permission_type=acl.permission_type))
        results.append(AclCreationResult(error_code=ErrorCode.NONE, error_message=None))
    return ControllerResult(records, CreateAclsResponse(results=results))


def delete_acls(image: MetadataImage, req: DeleteAclsRequest) -> ControllerResult:
    removed: dict[uuid.UUID, None] = {}
    results: list[DeleteAclsFilterResult] = []
    for f in req.filters:
        flt = AclFilter.of(f)
        unknown = flt.unknown_element()
        if unknown is not None:
            which = "patternFilter" if unknown in ("resource type", "pattern type") else "entryFilter"
            results.append(DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST,
                                                  error_message=f"Unknown {which}."))
            continue
        matching: list[DeleteAclsMatchingAcl] = []
        for acl_id, acl in sorted(image.acls.items(), key=lambda kv: (kv[1].resource_type, kv[1].resource_name,
                                                                      kv[1].pattern_type, kv[1].principal,
                                                                      kv[1].host, kv[1].operation,
                                                                      kv[1].permission_type)):
            if flt.matches(acl):
                removed[acl_id] = None
                matching.append(DeleteAclsMatchingAcl(
                    error_code=ErrorCode.NONE, error_message=None, resource_type=acl.resource_type,
                    resource_name=acl.resource_name, pattern_type=acl.pattern_type, principal=acl.principal,
                    host=acl.host, operation=acl.operation, permission_type=acl.permission_type))
        results.append(DeleteAclsFilterResult(error_code=ErrorCode.NONE, error_message=None, matching_acls=matching))
    records = [RemoveAccessControlEntryRecord(id=acl_id) for acl_id in removed]
    return ControllerResult(records, DeleteAclsResponse(filter_results=results))
