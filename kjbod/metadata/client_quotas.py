"""Client quotas in the metadata image: the entities, their keys, and DescribeClientQuotas (API 48) answered
from an image, as Kafka's brokers answer it from their metadata cache.

An entity is a set of (type, name) parts, at most one per type: `user`, `client-id` (together or alone) or `ip`
(alone); a name of None is that type's default entity (`--entity-default`). In the image an entity is a tuple of
its parts sorted by type, so equal entities are equal keys whatever order a request named the parts in.

Describe follows Kafka's filter rules: each component names an entity type once, with match type 0 (EXACT: the
name equals `match`), 1 (DEFAULT: the type's default entity) or 2 (SPECIFIED: any entity with that type, default
included); an entity matches when it satisfies every component, and under `strict` only when it has no other
types. An empty type, a repeated type, a match string where the match type takes none (or none where it needs
one), an unknown match type, or ip combined with user or client-id is INVALID_REQUEST; an unknown entity type is
UNSUPPORTED_VERSION ("Unsupported entity type ..."), as in Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from kjbod.protocol.generated.describe_client_quotas_response import EntityData, EntryData, ValueData

__all__ = ["CLIENT_ID", "ENTITY_TYPES", "IP", "IP_KEYS", "USER", "USER_CLIENT_KEYS", "Entity", "QuotaKey",
           "describe_client_quotas", "entity_of", "entity_text"]

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

Entity = tuple[tuple[str, str | None], ...]  # (type, name or None for the default), sorted by type


class QuotaKey:
    """One quota key and the type Kafka's QuotaConfig gives it ("long", "int" or "double")."""

    __slots__ = ("kind", "name")

    def __init__(self, name: str, kind: str) -> None:
        self.name = name
        self.kind = kind


# The keys an entity may carry (Kafka's QuotaConfig.userAndClientQuotaConfigs and ipConfigs).
USER_CLIENT_KEYS: Mapping[str, QuotaKey] = {k.name: k for k in (
    QuotaKey("producer_byte_rate", "long"),
    QuotaKey("consumer_byte_rate", "long"),
    QuotaKey("request_percentage", "double"),
    QuotaKey("controller_mutation_rate", "double"),
)}
IP_KEYS: Mapping[str, QuotaKey] = {k.name: k for k in (QuotaKey("connection_creation_rate", "int"),)}


def entity_of(parts: Iterable[Any]) -> Entity:
    """The image key of an entity given as request or record parts (objects with entity_type, entity_name)."""
    return tuple(sorted((p.entity_type, p.entity_name) for p in parts))


def entity_text(entity: Entity) -> str:
    """How Kafka prints an entity in messages: ClientQuotaEntity(entries={user=alice, client-id=null})."""
    inner = ", ".join(f"{t}={n if n is not None else 'null'}" for t, n in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"


class DescribeError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _filter(req: DescribeClientQuotasRequest) -> tuple[dict[str, str | None], set[str]]:
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for c in req.components:
        etype = c.entity_type
        if not etype:
            raise DescribeError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if etype in exact or etype in typed:
            raise DescribeError(ErrorCode.INVALID_REQUEST,
                                f"Entity type {etype} cannot appear more than once in the filter.")
        if etype not in ENTITY_TYPES:
            raise DescribeError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {etype}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise DescribeError(ErrorCode.INVALID_REQUEST,
                                    "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[etype] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise DescribeError(ErrorCode.INVALID_REQUEST,
                                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[etype] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise DescribeError(ErrorCode.INVALID_REQUEST,
                                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(etype)
        else:
            raise DescribeError(ErrorCode.INVALID_REQUEST, f"Unknown match type {c.match_type}")
    named = exact.keys() | typed
    if IP in named and (USER in named or CLIENT_ID in named):
        raise DescribeError(ErrorCode.INVALID_REQUEST,
                            "Invalid entity filter component combination. IP filter component should not be used "
                            "with user or clientId filter component.")
    return exact, typed


def _matches(entity: Entity, exact: dict[str, str | None], typed: set[str], strict: bool) -> bool:
    parts = dict(entity)
    if strict and len(parts) != len(exact) + len(typed):
        return False
    for etype, name in exact.items():
        if etype not in parts or parts[etype] != name:
            return False
    return all(etype in parts for etype in typed)


def describe_client_quotas(quotas: Mapping[Entity, Mapping[str, float]],
                           req: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    try:
        exact, typed = _filter(req)
    except DescribeError as e:
        return DescribeClientQuotasResponse(error_code=e.code, error_message=e.message, entries=None)
    entries = [
        EntryData(entity=[EntityData(entity_type=t, entity_name=n) for t, n in entity],
                  values=[ValueData(key=k, value=v) for k, v in sorted(values.items())])
        for entity, values in sorted(quotas.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]])
        if _matches(entity, exact, typed, req.strict)]
    return DescribeClientQuotasResponse(error_code=0, error_message=None, entries=entries)
