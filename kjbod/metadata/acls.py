"""ACLs: Kafka's codes and matching rules, DescribeAcls answered from an image, and the authorizer's decision.

Strategy (the facts of Kafka's StandardAuthorizer): an ACL entry is a resource pattern (type, name, literal or
prefixed) with a principal, a host, an operation and ALLOW or DENY. For one action (principal, host, operation,
resource type and name) the entries that apply are the literal ones on the name, the literal wildcard `*` of
the type, and the prefixed ones whose name starts the resource's name. Of those, an entry counts when its
principal is the client's or `User:*`, its host is the client's address or `*`, and its operation is the one
asked, or ALL, or (ALLOW only) one that implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS
implies DESCRIBE_CONFIGS. A DENY that counts wins; else an ALLOW that counts allows; else, when the resource
has entries for anyone, the action is denied; when it has none, `allow.everyone.if.no.acl.found` decides. Super
users are allowed everything.

The image holds the entries by id (AccessControlEntryRecord). `Authorizer` indexes the entries of the image it
was last asked with (rebuilt when the image's ACL map is a different object, which happens only when a record
changed it) and caches each decision by (principal, host, operation, resource type, name), so Produce and Fetch
pay one dict lookup per topic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeAclsRequest, DescribeAclsResponse
from kjbod.protocol.generated.describe_acls_response import AclDescription, DescribeAclsResource

__all__ = [
    "ALLOW", "ANY", "CLUSTER_NAME", "DENY", "LITERAL", "MATCH", "OPERATIONS", "PATTERN_TYPES", "PERMISSIONS",
    "PREFIXED", "RESOURCE_TYPES", "STANDARD_AUTHORIZER", "UNKNOWN", "WILDCARD", "AclEntry", "AclFilter",
    "Authorizer", "describe_acls", "parse_principal",
]

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"

UNKNOWN, ANY = 0, 1
# ResourceType
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7
RESOURCE_TYPES = {UNKNOWN: "UNKNOWN", ANY: "ANY", TOPIC: "TOPIC", GROUP: "GROUP", CLUSTER: "CLUSTER",
                  TRANSACTIONAL_ID: "TRANSACTIONAL_ID", DELEGATION_TOKEN: "DELEGATION_TOKEN", USER: "USER"}
# PatternType
MATCH, LITERAL, PREFIXED = 2, 3, 4
PATTERN_TYPES = {UNKNOWN: "UNKNOWN", ANY: "ANY", MATCH: "MATCH", LITERAL: "LITERAL", PREFIXED: "PREFIXED"}
# AclOperation
(ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
 IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS, TWO_PHASE_COMMIT) = range(2, 16)
OPERATIONS = {UNKNOWN: "UNKNOWN", ANY: "ANY", ALL: "ALL", READ: "READ", WRITE: "WRITE", CREATE: "CREATE",
              DELETE: "DELETE", ALTER: "ALTER", DESCRIBE: "DESCRIBE", CLUSTER_ACTION: "CLUSTER_ACTION",
              DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS", ALTER_CONFIGS: "ALTER_CONFIGS",
              IDEMPOTENT_WRITE: "IDEMPOTENT_WRITE", CREATE_TOKENS: "CREATE_TOKENS",
              DESCRIBE_TOKENS: "DESCRIBE_TOKENS", TWO_PHASE_COMMIT: "TWO_PHASE_COMMIT"}
# AclPermissionType
DENY, ALLOW = 2, 3
PERMISSIONS = {UNKNOWN: "UNKNOWN", ANY: "ANY", DENY: "DENY", ALLOW: "ALLOW"}

# The operations each resource type has (what authorized-operations bit sets range over; ALL besides).
SUPPORTED_OPERATIONS = {
    TOPIC: (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS),  # the configs: KIP-848's group configs
    CLUSTER: (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE),
    TRANSACTIONAL_ID: (DESCRIBE, WRITE),
    DELEGATION_TOKEN: (DESCRIBE,),
    USER: (CREATE_TOKENS, DESCRIBE_TOKENS),
}
# An ALLOW on the key's operations also allows the key.
_IMPLIED_BY = {DESCRIBE: frozenset({DESCRIBE, READ, WRITE, DELETE, ALTER}),
               DESCRIBE_CONFIGS: frozenset({DESCRIBE_CONFIGS, ALTER_CONFIGS})}
_CACHE_LIMIT = 100_000


def parse_principal(text: str | None) -> tuple[str, str]:
    """Kafka's `Type:name` principal split at its first colon; ValueError with Kafka's message otherwise."""
    if not text or ":" not in text:
        raise ValueError(f"expected a string in format principalType:principalName but got {text}")
    kind, _, name = text.partition(":")
    return kind, name


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL as the metadata log stores it (AccessControlEntryRecord without its id)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    def describe(self) -> str:
        """Kafka's way of printing the entry (kafka-acls.sh lists them so)."""
        return (f"(principal={self.principal}, host={self.host}, operation={OPERATIONS.get(self.operation)}, "
                f"permissionType={PERMISSIONS.get(self.permission_type)})")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls or DeleteAcls filter: None and ANY match everything, MATCH every pattern that applies."""

    resource_type: int = ANY
    resource_name: str | None = None
    pattern_type: int = ANY
    principal: str | None = None
    host: str | None = None
    operation: int = ANY
    permission_type: int = ANY

    @classmethod
    def of(cls, f: Any) -> AclFilter:
        """From a request's filter fields (DescribeAclsRequest or a DeleteAclsFilter)."""
        return cls(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                   f.host_filter, f.operation, f.permission_type)

    def unknown_element(self) -> str | None:
        """Which part is UNKNOWN (or a code Kafka does not define), or None."""
        if self.resource_type not in RESOURCE_TYPES or self.resource_type == UNKNOWN:
            return "resource type"
        if self.pattern_type not in PATTERN_TYPES or self.pattern_type == UNKNOWN:
            return "pattern type"
        if self.operation not in OPERATIONS or self.operation == UNKNOWN:
            return "operation"
        if self.permission_type not in PERMISSIONS or self.permission_type == UNKNOWN:
            return "permission type"
        return None

    def matches(self, acl: AclEntry) -> bool:
        if self.resource_type != ANY and self.resource_type != acl.resource_type:
            return False
        pattern = self.pattern_type
        if pattern not in (ANY, MATCH) and pattern != acl.pattern_type:
            return False
        name = self.resource_name
        if name is not None:
            if pattern == MATCH:
                if acl.pattern_type == LITERAL:
                    if name != acl.resource_name and acl.resource_name != WILDCARD:
                        return False
                elif acl.pattern_type == PREFIXED:
                    if not name.startswith(acl.resource_name):
                        return False
                else:
                    return False
            elif name != acl.resource_name:
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != ANY and self.operation != acl.operation:
            return False
        return self.permission_type == ANY or self.permission_type == acl.permission_type


def describe_acls(acls: Iterable[AclEntry], flt: AclFilter) -> list[DescribeAclsResource]:
    """The entries `flt` matches, grouped by resource pattern (sorted, so answers are stable)."""
    by_pattern: dict[tuple[int, str, int], list[AclEntry]] = {}
    for acl in acls:
        if flt.matches(acl):
            by_pattern.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    out: list[DescribeAclsResource] = []
    for (rtype, name, pattern), entries in sorted(by_pattern.items()):
        entries.sort(key=lambda a: (a.principal, a.host, a.operation, a.permission_type))
        out.append(DescribeAclsResource(resource_type=rtype, resource_name=name, pattern_type=pattern, acls=[
            AclDescription(principal=a.principal, host=a.host, operation=a.operation,
                           permission_type=a.permission_type) for a in entries]))
    return out


def describe_acls_response(acls: Mapping[UUID, AclEntry], req: DescribeAclsRequest) -> DescribeAclsResponse:
    """DescribeAcls from an image's entries (the caller has checked DESCRIBE on the cluster)."""
    flt = AclFilter.of(req)
    return DescribeAclsResponse(error_code=ErrorCode.NONE, resources=describe_acls(acls.values(), flt))


class _Index:
    """One resource type's entries: literal ones by name (`*` among them), prefixed ones by prefix."""

    __slots__ = ("literal", "prefixed")

    def __init__(self) -> None:
        self.literal: dict[str, list[AclEntry]] = {}
        self.prefixed: dict[str, list[AclEntry]] = {}


class Authorizer:
    """Kafka's StandardAuthorizer decision over the ACLs of the current image (`acls()` returns its map).

    `allowed(principal, host, operation, resource_type, name)` is the one question; the answer is cached until
    the ACLs change.

    `loaded()` says whether the node has replayed its metadata log as far as it must before deciding (Kafka's
    initial load: up to the high watermark it saw at start); it is asked until it first says yes. Until then
    `ready` is False and the router answers the requests of everyone but the super users with Kafka's
    not-ready error (kjbod.broker.router)."""

    def __init__(self, acls: Callable[[], Mapping[UUID, AclEntry]], *, super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False, loaded: Callable[[], bool] | None = None) -> None:
        self._acls = acls
        self._loaded = loaded
        self._ready = loaded is None
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._source: Mapping[UUID, AclEntry] | None = None
        self._index: dict[int, _Index] = {}
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}

    @property
    def ready(self) -> bool:
        if not self._ready:
            assert self._loaded is not None
            self._ready = bool(self._loaded())
        return self._ready

    def allowed(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        acls = self._acls()
        if acls is not self._source:
            self._reindex(acls)
        key = (principal, host, operation, resource_type, name)
        answer = self._cache.get(key)
        if answer is None:
            answer = self._decide(principal, host, operation, resource_type, name)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = answer
        return answer

    def may_on_some(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Kafka's authorizeByResourceType, simplified: a super user; or an ALLOW for `operation` (or ALL) on some
        resource of the type for this principal (or User:*) and host, unless a DENY of it on the type's wildcard
        `*` applies; with no entry of the type at all, allow.everyone.if.no.acl.found."""
        if principal in self.super_users:
            return True
        acls = self._acls()
        if acls is not self._source:
            self._reindex(acls)
        part = self._index.get(resource_type)
        if part is None:
            return self.allow_if_no_acl

        def applies(acl: AclEntry) -> bool:
            return (acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (WILDCARD, host)
                    and acl.operation in (ALL, operation))

        if any(applies(a) and a.permission_type == DENY for a in part.literal.get(WILDCARD, ())):
            return False
        return any(applies(a) and a.permission_type == ALLOW
                   for entries in (*part.literal.values(), *part.prefixed.values()) for a in entries)

    def _reindex(self, acls: Mapping[UUID, AclEntry]) -> None:
        index: dict[int, _Index] = {}
        for acl in acls.values():
            part = index.get(acl.resource_type)
            if part is None:
                part = index[acl.resource_type] = _Index()
            where = part.literal if acl.pattern_type == LITERAL else part.prefixed
            where.setdefault(acl.resource_name, []).append(acl)
        self._index, self._source, self._cache = index, acls, {}

    def _decide(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        part = self._index.get(resource_type)
        if part is None:
            return self.allow_if_no_acl
        applying: list[AclEntry] = []
        for key in (name, WILDCARD):
            found = part.literal.get(key)
            if found:
                applying.extend(found)
            if name == WILDCARD:
                break
        prefixed = part.prefixed
        if prefixed:
            if len(prefixed) <= len(name):
                for prefix, found in prefixed.items():
                    if name.startswith(prefix):
                        applying.extend(found)
            else:  # many prefixes: look up each start of the name instead
                for end in range(1, len(name) + 1):
                    found = prefixed.get(name[:end])
                    if found:
                        applying.extend(found)
        if not applying:
            return self.allow_if_no_acl
        allow = False
        implied = _IMPLIED_BY.get(operation)
        for acl in applying:
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.host != WILDCARD and acl.host != host:
                continue
            if acl.permission_type == DENY:
                if acl.operation == ALL or acl.operation == operation:
                    return False
            elif acl.permission_type == ALLOW:
                if acl.operation == ALL or acl.operation == operation or (
                        implied is not None and acl.operation in implied):
                    allow = True
        return allow
