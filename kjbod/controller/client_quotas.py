"""Client quotas: AlterClientQuotas (API 49) turns a request into ClientQuotaRecord records (DescribeClientQuotas
reads the image: kjbod.metadata.client_quotas).

Rules (Kafka's ClientQuotaControlManager), each entity answered on its own, every refusal INVALID_REQUEST:
- an entity named twice in one request: "Ignoring duplicate entity ..."; a key named twice for one entity:
  "Duplicate quota key K not updating quota for this entity ...";
- no parts ("Invalid empty client quota entity"), a type named twice ("... duplicate entity entry T"), a type
  other than user, client-id, ip ("Unhandled client quota entity type: T"), an empty name ("Empty T not supported");
- ip with user or client-id ("Invalid quota entity combination, IP entity should not be combined with User or
  ClientId"); an ip name that is not an IP address ("X is not a valid IP or resolvable host."; kjbod takes
  literal addresses only, no name lookups on the controller's loop);
- a key the entity cannot carry ("Invalid configuration key K": user/client-id entities take producer_byte_rate,
  consumer_byte_rate, request_percentage, controller_mutation_rate; ip entities connection_creation_rate); a
  value of 0 or less ("Quota K must be greater than 0"); a fraction for an integral key ("K cannot be a fractional
  value."); a value too large for the key's type.
An accepted entity writes one record per key whose value changes (a removal of a key it does not have writes
nothing); a refused one writes nothing. validateOnly answers the same and writes nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from kjbod.controller.result import ControllerResult
from kjbod.metadata import MetadataImage
from kjbod.metadata.client_quotas import (
    CLIENT_ID,
    ENTITY_TYPES,
    IP,
    IP_KEYS,
    USER,
    USER_CLIENT_KEYS,
    Entity,
    QuotaKey,
    entity_text,
)
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AlterClientQuotasRequest, AlterClientQuotasResponse, ClientQuotaRecord
from kjbod.protocol.generated.alter_client_quotas_response import EntityData, EntryData
from kjbod.protocol.generated.client_quota_record import EntityData as RecordEntityData

__all__ = ["alter_client_quotas", "validate_entity"]

_LIMITS = {"int": 2**31 - 1, "long": 2**63 - 1}
_TYPE_NAMES = {"int": "an INT", "long": "a LONG"}


def validate_entity(parts: list[tuple[str, str | None]]) -> tuple[Mapping[str, QuotaKey] | None, str]:
    """The keys the entity may carry, or (None, why it is refused)."""
    if not parts:
        return None, "Invalid empty client quota entity"
    seen: dict[str, str | None] = {}
    for etype, name in parts:
        if etype in seen:
            return None, f"Invalid client quota entity, duplicate entity entry {etype}"
        if etype not in ENTITY_TYPES:
            return None, f"Unhandled client quota entity type: {etype}"
        seen[etype] = name
        if name is not None and not name:
            return None, f"Empty {etype} not supported"
    if IP in seen:
        if USER in seen or CLIENT_ID in seen:
            return None, ("Invalid quota entity combination, IP entity should not be combined with User or "
                          "ClientId")
        name = seen[IP]
        if name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                return None, f"{name} is not a valid IP or resolvable host."
        return IP_KEYS, ""
    return USER_CLIENT_KEYS, ""


def _check_value(keys: Mapping[str, QuotaKey], key: str, value: float) -> str | None:
    spec = keys.get(key)
    if spec is None:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if spec.kind == "double":
        return None
    if value > _LIMITS[spec.kind]:
        return f"Proposed value for {key} is too large for {_TYPE_NAMES[spec.kind]}."
    if abs(value % 1.0) > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


def alter_client_quotas(image: MetadataImage, req: AlterClientQuotasRequest) -> ControllerResult:
    records: list[Any] = []
    results: dict[Entity, tuple[int, str | None]] = {}
    order: list[tuple[Entity, Any]] = []
    for entry in req.entries:
        parts = [(e.entity_type, e.entity_name) for e in entry.entity]
        entity: Entity = tuple(sorted(parts))
        text = entity_text(entity)
        order.append((entity, entry))
        changes: dict[str, float | None] = {}
        duplicate_key = None
        for op in entry.ops:
            if op.key in changes:
                duplicate_key = op.key
            else:
                changes[op.key] = None if op.remove else op.value
        if entity in results:
            results[entity] = (ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {text}")
            continue
        if duplicate_key is not None:
            results[entity] = (ErrorCode.INVALID_REQUEST,
                               f"Duplicate quota key {duplicate_key} not updating quota for this entity {text}")
            continue
        keys, why = validate_entity(parts)
        if keys is None:
            results[entity] = (ErrorCode.INVALID_REQUEST, why)
            continue
        current = image.client_quotas.get(entity, {})
        mine: list[Any] = []
        refusal = None
        for key, value in changes.items():
            if value is None:
                if key in current:
                    mine.append(_record(entity, key, 0.0, remove=True))
                continue
            refusal = _check_value(keys, key, value)
            if refusal is not None:
                break
            if current.get(key) != value:
                mine.append(_record(entity, key, value, remove=False))
        if refusal is not None:
            results[entity] = (ErrorCode.INVALID_REQUEST, refusal)
            continue
        records += mine
        results[entity] = (ErrorCode.NONE, None)
    answered: set[Entity] = set()
    entries: list[EntryData] = []
    for entity, entry in order:  # one result per entity, in the request's order and with its parts as sent
        if entity in answered:
            continue
        answered.add(entity)
        code, message = results[entity]
        entries.append(EntryData(error_code=code, error_message=message, entity=[
            EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]))
    return ControllerResult([] if req.validate_only else records, AlterClientQuotasResponse(entries=entries))


def _record(entity: Entity, key: str, value: float, *, remove: bool) -> ClientQuotaRecord:
    return ClientQuotaRecord(entity=[RecordEntityData(entity_type=t, entity_name=n) for t, n in entity],
                             key=key, value=value, remove=remove)
