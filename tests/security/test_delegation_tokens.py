"""Delegation tokens in-process: the controller's records and answers (Kafka's rules), their replay into an image
and a snapshot, who may see a token, and SCRAM authentication with a token (the tokenauth extension)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from kjbod.broker.tokens import TokenCredentials
from kjbod.controller.result import ControllerSettings
from kjbod.controller.tokens import create_token, expire_token, expired_tokens, renew_token
from kjbod.metadata import EMPTY_IMAGE, MetadataDelta, image_records
from kjbod.metadata.tokens import describe_tokens, token_hmac
from kjbod.net.sasl import SaslAuthenticationFailed
from kjbod.net.scram import MECHANISMS, ScramClient, ScramServer
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    CreateDelegationTokenRequest,
    DelegationTokenRecord,
    ExpireDelegationTokenRequest,
    RemoveDelegationTokenRecord,
    RenewDelegationTokenRequest,
)
from kjbod.protocol.generated.create_delegation_token_request import CreatableRenewers

SECRET = "token-secret"
SETTINGS = ControllerSettings(delegation_token_secret_key=SECRET, delegation_token_max_lifetime_ms=10_000,
                              delegation_token_expiry_time_ms=4_000)
NOW = 1_700_000_000_000


def apply(image, records):
    delta = MetadataDelta(image)
    delta.replay_all(records, first_offset=image.offset + 1)
    return delta.apply()


def create(image=EMPTY_IMAGE, requester="alice", *, owner=None, renewers=(), max_lifetime_ms=-1, now=NOW,
           settings=SETTINGS):
    req = CreateDelegationTokenRequest(
        owner_principal_type="User" if owner else None, owner_principal_name=owner,
        renewers=[CreatableRenewers(principal_type=t, principal_name=n) for t, n in renewers],
        max_lifetime_ms=max_lifetime_ms, requester_principal_type="User", requester_principal_name=requester)
    return create_token(image, req, settings, now, new_id=lambda: f"id-{len(image.tokens)}")


def with_token(**kwargs):
    result = create(**kwargs)
    return apply(EMPTY_IMAGE, result.records), result.response


def test_the_hmac_is_kafkas_hmac_sha512_of_the_id() -> None:
    assert token_hmac("k", "abc") == hmac.new(b"k", b"abc", hashlib.sha512).digest()
    assert len(token_hmac(SECRET, "x")) == 64


def test_create_makes_one_record_with_kafkas_times() -> None:
    result = create(renewers=[("User", "bob")])
    (rec,) = result.records
    assert isinstance(rec, DelegationTokenRecord)
    assert (rec.owner, rec.requester, rec.renewers) == ("User:alice", "User:alice", ["User:bob"])
    assert (rec.issue_timestamp, rec.max_timestamp, rec.expiration_timestamp) == (NOW, NOW + 10_000, NOW + 4_000)
    r = result.response
    assert r.error_code == 0 and r.token_id == rec.token_id and r.hmac == token_hmac(SECRET, rec.token_id)
    assert (r.principal_name, r.token_requester_principal_name) == ("alice", "alice")
    # a shorter max lifetime asked for wins, and the expiry never passes it
    short = create(max_lifetime_ms=1_000).records[0]
    assert (short.max_timestamp, short.expiration_timestamp) == (NOW + 1_000, NOW + 1_000)
    # a token for another owner records both
    other = create(owner="carol").records[0]
    assert (other.owner, other.requester) == ("User:carol", "User:alice")


def test_create_refusals() -> None:
    off = create(settings=ControllerSettings())
    assert off.response.error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED and not off.records
    group = create(renewers=[("Group", "g")])
    assert group.response.error_code == ErrorCode.INVALID_PRINCIPAL_TYPE and not group.records


def test_renew_checks_owner_expiry_and_keeps_the_max() -> None:
    image, made = with_token(renewers=[("User", "bob")])

    def renew(who, period=-1, now=NOW + 1_000, mac=made.hmac):
        return renew_token(image, RenewDelegationTokenRequest(hmac=mac, renew_period_ms=period,
                                                              requester_principal_name=who), SETTINGS, now)

    ok = renew("bob")
    assert ok.response.error_code == 0 and ok.response.expiry_timestamp_ms == NOW + 5_000
    assert ok.records[0].expiration_timestamp == NOW + 5_000 and ok.records[0].issue_timestamp == NOW
    assert renew("alice", period=500).response.expiry_timestamp_ms == NOW + 1_500
    renewed = apply(image, ok.records)  # expires at NOW + 5_000 now: a renewal at NOW + 4_500 is in time
    assert renewed.tokens[made.token_id].expiration_timestamp == NOW + 5_000
    capped = renew_token(renewed, RenewDelegationTokenRequest(hmac=made.hmac, renew_period_ms=-1,
                                                              requester_principal_name="alice"), SETTINGS, NOW + 7_000)
    assert capped.response.error_code == ErrorCode.DELEGATION_TOKEN_EXPIRED
    late_ok = renew_token(renewed, RenewDelegationTokenRequest(hmac=made.hmac, renew_period_ms=-1,
                                                               requester_principal_name="alice"), SETTINGS, NOW + 4_500)
    assert late_ok.response.expiry_timestamp_ms == NOW + 8_500
    again = apply(renewed, late_ok.records)
    last = renew_token(again, RenewDelegationTokenRequest(hmac=made.hmac, renew_period_ms=-1,
                                                          requester_principal_name="alice"), SETTINGS, NOW + 8_000)
    assert last.response.expiry_timestamp_ms == NOW + 10_000  # never past the max
    assert renew("mallory").response.error_code == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    assert renew("alice", mac=b"nope").response.error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    late = renew("alice", now=NOW + 4_001)
    assert late.response.error_code == ErrorCode.DELEGATION_TOKEN_EXPIRED and not late.records
    assert late.response.expiry_timestamp_ms == -1


def test_expire_at_once_or_later() -> None:
    image, made = with_token()

    def expire(who, period, now=NOW + 1_000):
        return expire_token(image, ExpireDelegationTokenRequest(hmac=made.hmac, expiry_time_period_ms=period,
                                                                requester_principal_name=who), SETTINGS, now)

    now_ = expire("alice", -1)
    assert now_.records == [RemoveDelegationTokenRecord(token_id=made.token_id)]
    assert now_.response.expiry_timestamp_ms == NOW + 1_000
    assert not apply(image, now_.records).tokens
    later = expire("alice", 100)
    assert later.records[0].expiration_timestamp == NOW + 1_100
    assert expire("bob", -1).response.error_code == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH


def test_the_sweep_removes_expired_tokens_only() -> None:
    image, made = with_token()
    assert not expired_tokens(image, NOW + 4_000).records
    swept = expired_tokens(image, NOW + 4_001)
    assert swept.records == [RemoveDelegationTokenRecord(token_id=made.token_id)]
    assert swept.response == [made.token_id]


def test_tokens_survive_a_snapshot() -> None:
    image, made = with_token(renewers=[("User", "bob")])
    rebuilt = apply(EMPTY_IMAGE, image_records(image))
    assert rebuilt.tokens == image.tokens
    assert rebuilt.tokens[made.token_id].renewers == ("User:bob",)


def test_describe_filters_as_kafka() -> None:
    image, made = with_token(renewers=[("User", "bob")])
    token = image.tokens[made.token_id]

    def seen(requester, owners=None, *, token_acl=False, owner_acl=False):
        return describe_tokens(image, requester, owners, lambda _t: token_acl, lambda _o: owner_acl)

    assert seen("User:alice") == [token] and seen("User:bob") == [token]  # owner and renewer
    assert seen("User:carol") == []
    assert seen("User:carol", token_acl=True) == [token] and seen("User:carol", owner_acl=True) == [token]
    assert seen("User:alice", []) == []  # an empty owner list lists nothing
    assert seen("User:alice", ["User:bob"]) == [token]  # bob renews it
    assert seen("User:alice", ["User:carol"]) == []


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_a_token_is_its_owner(mechanism: str) -> None:
    image, made = with_token(owner="carol")
    clock = [NOW]
    tokens = TokenCredentials(lambda: image, SECRET, lambda: clock[0])
    scram = MECHANISMS[mechanism]

    def exchange(username, password, *, token=True):
        server = ScramServer(scram, lambda _u: None, token_lookup=lambda tid: tokens.lookup(tid, scram.kafka_type))
        client = ScramClient(scram, username, password, token=token)
        final = client.final(server.evaluate(client.first()))
        client.verify(server.evaluate(final))
        return server

    password = base64.b64encode(made.hmac).decode()
    server = exchange(made.token_id, password)
    assert server.complete and server.token_owner == "User:carol" and server.principal == "carol"
    with pytest.raises(SaslAuthenticationFailed):
        exchange(made.token_id, base64.b64encode(b"wrong").decode())
    with pytest.raises(SaslAuthenticationFailed):  # without tokenauth the id is no user
        exchange(made.token_id, password, token=False)
    clock[0] = NOW + 4_001  # past its expiry: refused even before the sweep removes it
    with pytest.raises(SaslAuthenticationFailed):
        exchange(made.token_id, password)
    assert TokenCredentials(lambda: image, "", lambda: NOW).lookup(made.token_id, scram.kafka_type) is None
