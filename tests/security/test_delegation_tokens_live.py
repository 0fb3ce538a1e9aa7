"""Delegation tokens on a real `kjbod serve`: made, used, renewed, expired and swept.

One node for the module with `delegation.token.secret.key` set, Kafka's StandardAuthorizer (`super.users=User:admin`)
and a SASL_PLAINTEXT listener serving PLAIN (admin, alice, bob) and SCRAM-SHA-256 (carol, made with
confluent-kafka's AlterUserScramCredentials). No installed client can authenticate with a token: librdkafka
(confluent-kafka) and kafka-python send no SCRAM extensions, and aiokafka only OAUTHBEARER ones, so the token
logins here are kjbod's own admin client (SCRAM with Kafka's `tokenauth=true` extension) and a raw SCRAM exchange;
none of them has the delegation-token admin calls either, so tokens are made with kjbod's admin client and CLI.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from live import COMMAND

from kjbod.admin.errors import KafkaError
from kjbod.admin.sync import SyncAdminClient
from kjbod.net.sasl import SaslCredentials
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from .conftest import free_port, start_tls_node

WAIT_S = 30.0
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Node:
    def __init__(self, server: Any, plain: int, sasl: int) -> None:
        self.server = server
        self.plain = f"127.0.0.1:{plain}"
        self.sasl_port = sasl
        self.sasl = f"127.0.0.1:{sasl}"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory):
    plain, sasl, controller = free_port(), free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{controller}"
    server = start_tls_node(tmp_path_factory.mktemp("token-node"), listeners=listeners, overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": STANDARD,
        "super.users": "User:admin",
        "delegation.token.secret.key": "kjbod-token-secret",
        "delegation.token.expiry.check.interval.ms": "500",
        "delegation.token.max.lifetime.ms": "3600000",
        "delegation.token.expiry.time.ms": "600000",
        "num.partitions": "1",
    }, broker_port=plain, controller_port=controller)
    node = Node(server, plain, sasl)
    _make_scram_user(node, "carol", "carol-secret")
    yield node
    server.stop()


def _make_scram_user(node: Node, user: str, password: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": node.sasl, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": USERS["admin"],
                         "log_level": 0})
    for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password.encode())]).values():
        future.result(WAIT_S)
    eventually(lambda: _check(scram_login(node.sasl_port, user, password) == (0, None)), f"{user} logging in")


def _check(ok: bool) -> None:
    assert ok


def eventually(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return check()
        except Exception as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {WAIT_S}s: {e!r}") from e
            time.sleep(0.2)


def admin(node: Node, user: str) -> SyncAdminClient:
    mechanism = "SCRAM-SHA-256" if user == "carol" else "PLAIN"
    password = "carol-secret" if user == "carol" else USERS[user]
    return SyncAdminClient(node.sasl, sasl=SaslCredentials(mechanism, user, password), request_timeout=10)


def as_token(node: Node, token: Any) -> SyncAdminClient:
    return SyncAdminClient(node.sasl, sasl=SaslCredentials("SCRAM-SHA-256", token.token_id, token.hmac_base64,
                                                           token=True), request_timeout=10)


def code_of(call: Callable[[], Any]) -> int:
    with pytest.raises(KafkaError) as info:
        call()
    return int(info.value.code)


def request(key: int, version: int, corr: int, body: Any) -> bytes:
    header = struct.pack(">hhih", key, version, corr, 4) + b"test"
    data = header + body.encode(version)
    return struct.pack(">i", len(data)) + data


def read_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        data += chunk
    return data[4:]


def scram_login(port: int, user: str, password: str, *, token: bool = False) -> tuple[int, str | None]:
    """A SCRAM-SHA-256 exchange on a raw socket, with the tokenauth extension when `token`: (0, None) when it
    succeeded, else the SaslAuthenticate error code and message."""
    from kjbod.net.scram import MECHANISMS, ScramClient

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request(17, 1, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256")))
        assert SaslHandshakeResponse.decode(read_frame(sock)[4:], 1).error_code == 0
        client = ScramClient(MECHANISMS["SCRAM-SHA-256"], user, password, token=token)
        auth = client.first()
        for step in range(2):
            sock.sendall(request(36, 1, 2 + step, SaslAuthenticateRequest(auth_bytes=auth)))
            answer = SaslAuthenticateResponse.decode(read_frame(sock)[4:], 1)
            if answer.error_code != 0:
                return answer.error_code, answer.error_message
            if step == 0:
                auth = client.final(answer.auth_bytes)
        client.verify(answer.auth_bytes)
        return 0, None


def test_a_scram_user_makes_a_token_that_authenticates_as_that_user(node: Node) -> None:
    with admin(node, "carol") as carol:
        token = carol.create_delegation_token(renewers=["User:bob"])
        assert token.owner == "User:carol" and token.requester == "User:carol"
        # the node's delegation.token.expiry.time.ms and delegation.token.max.lifetime.ms
        assert token.expiry_timestamp - token.issue_timestamp == 600000
        assert token.max_timestamp - token.issue_timestamp == 3600000
        assert [t.token_id for t in carol.describe_delegation_tokens()] == [token.token_id]
    # the raw SCRAM exchange with the tokenauth extension: the token id and the HMAC log in
    assert eventually(lambda: _ok(scram_login(node.sasl_port, token.token_id, token.hmac_base64, token=True)),
                      "the token reaching the broker's image") == (0, None)
    # without the extension the token id is no user; a wrong HMAC is refused
    assert scram_login(node.sasl_port, token.token_id, token.hmac_base64)[0] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert scram_login(node.sasl_port, token.token_id, "AAAA", token=True)[0] == ErrorCode.SASL_AUTHENTICATION_FAILED
    # a client on the token is carol: it may describe the topic only carol may describe, and (as in Kafka) may
    # not make, renew, expire or describe tokens
    from kjbod.admin.types import NewTopic
    from kjbod.metadata.acls import ALLOW, DESCRIBE, LITERAL, TOPIC, AclEntry

    with admin(node, "admin") as root:
        root.create_topics([NewTopic("carols", 1, 1)])
        assert [c for c, _ in root.create_acls([AclEntry(TOPIC, "carols", LITERAL, "User:carol", "*", DESCRIBE,
                                                         ALLOW)])] == [0]
    with as_token(node, token) as tokened:
        assert "carols" in eventually(lambda: tokened.describe_topics(["carols"]), "carol's ACL on the topic")
        for call in (tokened.create_delegation_token, tokened.describe_delegation_tokens,
                     lambda: tokened.renew_delegation_token(token.hmac),
                     lambda: tokened.expire_delegation_token(token.hmac)):
            assert code_of(call) == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    with admin(node, "alice") as alice:
        with pytest.raises(KafkaError):  # alice has no ACL on the topic
            alice.describe_topics(["carols"])
    # the log names the token's owner as the principal
    log = (node.server.directory / "stderr.log").read_text()
    assert any('"principal": "carol"' in line and '"delegation_token": true' in line for line in log.splitlines())


def _ok(result: tuple[int, str | None]) -> tuple[int, str | None]:
    assert result == (0, None), result
    return result


def test_renew_and_expire_by_owner_or_renewer_only(node: Node) -> None:
    with admin(node, "alice") as alice, admin(node, "bob") as bob, admin(node, "carol") as carol:
        token = alice.create_delegation_token(renewers=["User:bob"])
        assert code_of(lambda: carol.renew_delegation_token(token.hmac)) == \
            ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
        renewed = bob.renew_delegation_token(token.hmac, renew_period_ms=60_000)
        assert token.issue_timestamp < renewed <= token.max_timestamp
        listed = eventually(lambda: _one_expiring_at(alice, token.token_id, renewed), "the renewal in the image")
        assert listed.renewers == ("User:bob",)
        assert code_of(lambda: alice.renew_delegation_token(b"not-a-token-hmac")) == \
            ErrorCode.DELEGATION_TOKEN_NOT_FOUND
        # expired at once by its owner: gone, and it no longer logs in
        alice.expire_delegation_token(token.hmac)
        eventually(lambda: _check(token.token_id not in [t.token_id for t in alice.describe_delegation_tokens()]),
                   "the expired token leaving the image")
        assert scram_login(node.sasl_port, token.token_id, token.hmac_base64, token=True)[0] == \
            ErrorCode.SASL_AUTHENTICATION_FAILED
        assert code_of(lambda: alice.renew_delegation_token(token.hmac)) == ErrorCode.DELEGATION_TOKEN_NOT_FOUND


def _one_expiring_at(client: SyncAdminClient, token_id: str, expiry: int) -> Any:
    (listed,) = [t for t in client.describe_delegation_tokens() if t.token_id == token_id]
    assert listed.expiry_timestamp == expiry
    return listed


def test_a_token_past_its_lifetime_is_refused_and_swept(node: Node) -> None:
    with admin(node, "alice") as alice:
        token = alice.create_delegation_token(max_lifetime_ms=1500)
        assert token.max_timestamp - token.issue_timestamp == 1500 and token.expiry_timestamp == token.max_timestamp
        # the controller's sweep (every 500 ms here) removes it once it is past its max
        eventually(lambda: _check(token.token_id not in [t.token_id for t in alice.describe_delegation_tokens()]),
                   "the sweep removing the token")
        assert code_of(lambda: alice.renew_delegation_token(token.hmac)) == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    assert scram_login(node.sasl_port, token.token_id, token.hmac_base64, token=True)[0] == \
        ErrorCode.SASL_AUTHENTICATION_FAILED


def test_tokens_for_others_and_describing_others_need_acls(node: Node) -> None:
    from kjbod.metadata.acls import ALLOW, CREATE_TOKENS, DESCRIBE_TOKENS, LITERAL, USER, AclEntry

    with admin(node, "alice") as alice, admin(node, "bob") as bob, admin(node, "admin") as root:
        assert code_of(lambda: alice.create_delegation_token(owner="User:bob")) == \
            ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
        for_bob = root.create_delegation_token(owner="User:bob")  # a super user may
        assert (for_bob.owner, for_bob.requester) == ("User:bob", "User:admin")
        assert for_bob.token_id in [t.token_id for t in bob.describe_delegation_tokens()]
        assert for_bob.token_id not in [t.token_id for t in alice.describe_delegation_tokens()]
        codes = root.create_acls([
            AclEntry(USER, "User:bob", LITERAL, "User:alice", "*", CREATE_TOKENS, ALLOW),
            AclEntry(USER, "User:bob", LITERAL, "User:alice", "*", DESCRIBE_TOKENS, ALLOW)])
        assert [c for c, _ in codes] == [0, 0]

        def alice_makes_one() -> Any:
            return alice.create_delegation_token(owner="User:bob")

        made = eventually(alice_makes_one, "alice's CREATE_TOKENS ACL reaching the image")
        assert (made.owner, made.requester) == ("User:bob", "User:alice")
        seen = eventually(lambda: _listing(alice, {for_bob.token_id, made.token_id}), "alice seeing bob's tokens")
        assert {t.owner for t in seen} == {"User:bob"}
        assert {t.requester for t in seen} == {"User:admin", "User:alice"}


def _listing(client: SyncAdminClient, wanted: set[str]) -> list[Any]:
    found = [t for t in client.describe_delegation_tokens(["User:bob"]) if t.token_id in wanted]
    assert {t.token_id for t in found} == wanted
    return found


def test_plaintext_clients_may_not_ask_for_tokens(node: Node) -> None:
    with SyncAdminClient(node.plain, request_timeout=10) as anonymous:
        assert code_of(anonymous.create_delegation_token) == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        assert code_of(anonymous.describe_delegation_tokens) == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


def test_kjbod_delegation_tokens_cli(node: Node, tmp_path: Path) -> None:
    config = tmp_path / "alice.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                      'username="alice" password="alice-secret";\n')

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*COMMAND, "delegation-tokens", "--bootstrap-server", node.sasl, "--command-config",
                               str(config), *args], capture_output=True, text=True, timeout=60)

    made = run("--create", "--max-life-time-period", "-1", "--renewer-principal", "User:bob")
    assert made.returncode == 0, made.stderr
    assert "Created delegation token with tokenId :" in made.stdout
    token_id = made.stdout.split("tokenId :", 1)[1].split()[0]
    listed = run("--describe")
    assert listed.returncode == 0 and token_id in listed.stdout and "User:bob" in listed.stdout
    hmac_b64 = [line.split() for line in made.stdout.splitlines() if token_id in line][-1][1]
    # a --command-config logging in with the token (ScramLoginModule's tokenauth option): authenticated as alice,
    # and so refused as Kafka refuses token requests from token clients (not an authentication failure)
    tokened = tmp_path / "token.properties"
    tokened.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                       "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                       f'username="{token_id}" password="{hmac_b64}" tokenauth="true";\n')
    by_token = subprocess.run([*COMMAND, "delegation-tokens", "--bootstrap-server", node.sasl, "--command-config",
                               str(tokened), "--describe"], capture_output=True, text=True, timeout=60)
    assert by_token.returncode == 1 and "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED" in by_token.stderr, by_token.stderr
    renewed = run("--renew", "--hmac", hmac_b64, "--renew-time-period", "60000")
    assert renewed.returncode == 0 and "Completed renew operation" in renewed.stdout, renewed.stdout
    expired = run("--expire", "--hmac", hmac_b64, "--expiry-time-period", "-1")
    assert expired.returncode == 0 and "Completed expire operation" in expired.stdout, expired.stdout
    again = run("--renew", "--hmac", hmac_b64, "--renew-time-period", "-1")
    assert again.returncode == 1 and "DELEGATION_TOKEN_NOT_FOUND" in again.stderr + again.stdout
    wrong = run("--renew")
    assert wrong.returncode == 2 and "\n" not in wrong.stderr.strip()


def test_tokens_are_refused_without_a_secret_key(tmp_path: Path) -> None:
    """No delegation.token.secret.key: Kafka's DELEGATION_TOKEN_AUTH_DISABLED for making and listing tokens."""
    plain, sasl, controller = free_port(), free_port(), free_port()
    server = start_tls_node(tmp_path / "no-secret", listeners=(
        f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{controller}"),
        overrides={"listener.security.protocol.map":
                   "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                   "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
                   "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS},
        broker_port=plain, controller_port=controller)
    try:
        with SyncAdminClient(f"127.0.0.1:{sasl}", sasl=SaslCredentials("PLAIN", "alice", USERS["alice"]),
                             request_timeout=10) as alice:
            assert code_of(alice.create_delegation_token) == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
            assert code_of(alice.describe_delegation_tokens) == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
            assert code_of(lambda: alice.renew_delegation_token(b"x")) == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    finally:
        server.stop()
