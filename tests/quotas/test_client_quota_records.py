"""AlterClientQuotas on the controller (records out), their replay into the image, snapshots, and
DescribeClientQuotas from the image: in process, requests in and records and responses out."""

from __future__ import annotations

from typing import Any

import pytest

from kjbod.controller.client_quotas import alter_client_quotas
from kjbod.metadata.client_quotas import describe_client_quotas
from kjbod.metadata.delta import replay
from kjbod.metadata.image import EMPTY_IMAGE, MetadataImage
from kjbod.metadata.snapshot import image_records
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AlterClientQuotasRequest,
    ClientQuotaRecord,
    DescribeClientQuotasRequest,
)
from kjbod.protocol.generated.alter_client_quotas_request import EntityData, EntryData, OpData
from kjbod.protocol.generated.describe_client_quotas_request import ComponentData

Parts = list[tuple[str, str | None]]


def entry(parts: Parts, *ops: tuple[str, float | None]) -> EntryData:
    return EntryData(entity=[EntityData(entity_type=t, entity_name=n) for t, n in parts],
                     ops=[OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops])


def alter(image: MetadataImage, *entries: EntryData, validate_only: bool = False) -> tuple[MetadataImage, Any, list]:
    result = alter_client_quotas(image, AlterClientQuotasRequest(entries=list(entries), validate_only=validate_only))
    return replay(image, result.records), result.response, result.records


def errors(response: Any) -> list[tuple[int, str | None]]:
    return [(e.error_code, e.error_message) for e in response.entries]


def test_set_change_remove_and_replay() -> None:
    image, resp, records = alter(EMPTY_IMAGE, entry([("client-id", "app")], ("producer_byte_rate", 1024.0),
                                                    ("request_percentage", 12.5)))
    assert errors(resp) == [(0, None)]
    assert len(records) == 2 and all(isinstance(r, ClientQuotaRecord) for r in records)
    assert image.client_quotas == {(("client-id", "app"),): {"producer_byte_rate": 1024.0,
                                                              "request_percentage": 12.5}}
    # the same value again writes nothing; a change writes one record; removing an absent key writes nothing
    image2, resp, records = alter(image, entry([("client-id", "app")], ("producer_byte_rate", 1024.0),
                                               ("request_percentage", 20.0), ("consumer_byte_rate", None)))
    assert errors(resp) == [(0, None)] and len(records) == 1
    assert image2.client_quotas[(("client-id", "app"),)]["request_percentage"] == 20.0
    image3, _, records = alter(image2, entry([("client-id", "app")], ("producer_byte_rate", None),
                                             ("request_percentage", None)))
    assert len(records) == 2 and records[0].remove
    assert image3.client_quotas == {}


def test_entity_parts_in_any_order_are_one_entity_and_defaults_are_null_names() -> None:
    image, _, _ = alter(EMPTY_IMAGE, entry([("user", "alice"), ("client-id", None)], ("consumer_byte_rate", 5.0)))
    image, _, _ = alter(image, entry([("client-id", None), ("user", "alice")], ("consumer_byte_rate", 6.0)))
    assert image.client_quotas == {(("client-id", None), ("user", "alice")): {"consumer_byte_rate": 6.0}}


def test_validate_only_answers_and_writes_nothing() -> None:
    image, resp, records = alter(EMPTY_IMAGE, entry([("user", "bob")], ("producer_byte_rate", 10.0)),
                                 entry([("user", "carol")], ("producer_byte_rate", -1.0)), validate_only=True)
    assert records == [] and image.client_quotas == {}
    assert errors(resp) == [(0, None), (ErrorCode.INVALID_REQUEST, "Quota producer_byte_rate must be greater than 0")]


@pytest.mark.parametrize(("parts", "op", "message"), [
    ([], ("producer_byte_rate", 1.0), "Invalid empty client quota entity"),
    ([("user", "a"), ("user", "b")], ("producer_byte_rate", 1.0),
     "Invalid client quota entity, duplicate entity entry user"),
    ([("group", "g")], ("producer_byte_rate", 1.0), "Unhandled client quota entity type: group"),
    ([("user", "")], ("producer_byte_rate", 1.0), "Empty user not supported"),
    ([("ip", "10.0.0.1"), ("user", "a")], ("connection_creation_rate", 1.0),
     "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
    ([("ip", "not an address")], ("connection_creation_rate", 1.0),
     "not an address is not a valid IP or resolvable host."),
    ([("ip", "10.0.0.1")], ("producer_byte_rate", 1.0), "Invalid configuration key producer_byte_rate"),
    ([("user", "a")], ("connection_creation_rate", 1.0), "Invalid configuration key connection_creation_rate"),
    ([("user", "a")], ("producer_bytes_rate", 1.0), "Invalid configuration key producer_bytes_rate"),
    ([("user", "a")], ("producer_byte_rate", 0.0), "Quota producer_byte_rate must be greater than 0"),
    ([("user", "a")], ("request_percentage", -3.0), "Quota request_percentage must be greater than 0"),
    ([("user", "a")], ("producer_byte_rate", 10.5), "producer_byte_rate cannot be a fractional value."),
    ([("ip", None)], ("connection_creation_rate", 3e9),
     "Proposed value for connection_creation_rate is too large for an INT."),
])
def test_refusals_are_invalid_request_with_kafkas_message(parts: Parts, op: tuple[str, float], message: str) -> None:
    image, resp, records = alter(EMPTY_IMAGE, entry(parts, op), entry([("client-id", "ok")], ("request_percentage",
                                                                                               50.0)))
    assert errors(resp) == [(ErrorCode.INVALID_REQUEST, message), (0, None)]
    assert list(image.client_quotas) == [(("client-id", "ok"),)]  # the good entity is still written


def test_duplicates() -> None:
    _, resp, _ = alter(EMPTY_IMAGE, entry([("user", "a")], ("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)))
    assert errors(resp) == [(ErrorCode.INVALID_REQUEST, "Duplicate quota key producer_byte_rate not updating quota "
                                                        "for this entity ClientQuotaEntity(entries={user=a})")]
    _, resp, _ = alter(EMPTY_IMAGE, entry([("user", "a")], ("producer_byte_rate", 1.0)),
                       entry([("user", "a")], ("producer_byte_rate", 2.0)))
    assert errors(resp) == [(ErrorCode.INVALID_REQUEST,
                             "Ignoring duplicate entity ClientQuotaEntity(entries={user=a})")]


def test_ip_quotas_take_addresses_and_the_default() -> None:
    image, resp, _ = alter(EMPTY_IMAGE, entry([("ip", "127.0.0.1")], ("connection_creation_rate", 5.0)),
                           entry([("ip", "::1")], ("connection_creation_rate", 6.0)),
                           entry([("ip", None)], ("connection_creation_rate", 7.0)))
    assert errors(resp) == [(0, None)] * 3
    assert len(image.client_quotas) == 3


def _image() -> MetadataImage:
    image, _, _ = alter(EMPTY_IMAGE,
                        entry([("user", "alice")], ("producer_byte_rate", 1.0)),
                        entry([("user", None)], ("producer_byte_rate", 2.0)),
                        entry([("user", "alice"), ("client-id", "app")], ("producer_byte_rate", 3.0)),
                        entry([("user", "alice"), ("client-id", None)], ("producer_byte_rate", 4.0)),
                        entry([("client-id", "app")], ("consumer_byte_rate", 5.0)),
                        entry([("client-id", None)], ("consumer_byte_rate", 6.0)),
                        entry([("ip", "10.1.1.1")], ("connection_creation_rate", 7.0)))
    return image


def describe(image: MetadataImage, *components: tuple[str, int, str | None], strict: bool = False) -> Any:
    req = DescribeClientQuotasRequest(components=[ComponentData(entity_type=t, match_type=m, match=s)
                                                  for t, m, s in components], strict=strict)
    return describe_client_quotas(image.client_quotas, req)


def values(resp: Any) -> list[float]:
    assert resp.error_code == 0, resp.error_message
    return sorted(v.value for e in resp.entries for v in e.values)


def test_describe_match_types_and_strict() -> None:
    image = _image()
    assert values(describe(image)) == [1, 2, 3, 4, 5, 6, 7]  # no components: everything
    assert values(describe(image, strict=True)) == []
    assert values(describe(image, ("user", 0, "alice"))) == [1, 3, 4]
    assert values(describe(image, ("user", 0, "alice"), strict=True)) == [1]
    assert values(describe(image, ("user", 1, None))) == [2]
    assert values(describe(image, ("user", 2, None), strict=True)) == [1, 2]
    assert values(describe(image, ("user", 2, None), ("client-id", 2, None))) == [3, 4]
    assert values(describe(image, ("user", 0, "alice"), ("client-id", 1, None))) == [4]
    assert values(describe(image, ("client-id", 0, "app"))) == [3, 5]
    assert values(describe(image, ("ip", 2, None))) == [7]
    assert values(describe(image, ("user", 0, "nobody"))) == []
    resp = describe(image, ("user", 0, "alice"))
    alice = next(e for e in resp.entries if len(e.entity) == 1)
    assert [(p.entity_type, p.entity_name) for p in alice.entity] == [("user", "alice")]
    assert [(v.key, v.value) for v in alice.values] == [("producer_byte_rate", 1.0)]


@pytest.mark.parametrize(("components", "code", "message"), [
    ([("", 0, "x")], ErrorCode.INVALID_REQUEST, "Invalid empty entity type."),
    ([("user", 0, "a"), ("user", 2, None)], ErrorCode.INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ([("group", 2, None)], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("user", 0, None)], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", 1, "a")], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", 2, "a")], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], ErrorCode.INVALID_REQUEST, "Unknown match type 7"),
    ([("ip", 2, None), ("client-id", 2, None)], ErrorCode.INVALID_REQUEST,
     "Invalid entity filter component combination. IP filter component should not be used with user or "
     "clientId filter component."),
])
def test_describe_refusals(components: list[tuple[str, int, str | None]], code: int, message: str) -> None:
    resp = describe(_image(), *components)
    assert (resp.error_code, resp.error_message, resp.entries) == (code, message, None)


def test_snapshot_records_rebuild_the_quotas() -> None:
    image = _image()
    assert replay(EMPTY_IMAGE, image_records(image)).client_quotas == image.client_quotas
