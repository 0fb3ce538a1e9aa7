"""SASL in-process: the JAAS parser, PLAIN's server side, the listener settings and the connection's SASL gate (the
handshake state machine), fed request frames as a client writes them."""

from __future__ import annotations

import struct

import pytest

from kjbod.admin.security import sasl_credentials_from
from kjbod.net.sasl import (
    PlainServer,
    SaslAuthenticationFailed,
    SaslConfigError,
    SaslCredentials,
    SaslSettings,
    parse_jaas,
    plain_client_token,
)
from kjbod.net.scram import MECHANISMS, ScramClient, ScramCredential, ScramServer, credential_from_password
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kjbod.protocol.headers import request_header_version, response_header_version
from kjbod.server.handler import CloseConnection, RequestContext
from kjbod.server.sasl_gate import AUTHENTICATED, FAILED, MAX_RECEIVE_SIZE, SaslGate

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice \\"quoted\\" secret";')
LISTENER = "listener.name.sasl_plaintext."


# -- JAAS ---------------------------------------------------------------------------------------------------------


def test_jaas_plain_module_with_users_and_escapes() -> None:
    (module,) = parse_jaas(PLAIN_JAAS)
    assert module.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert module.flag == "required"
    assert module.options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                              "user_alice": 'alice "quoted" secret'}


def test_jaas_bare_values_and_several_modules() -> None:
    modules = parse_jaas("a.B optional debug=true;\n c.D Sufficient x=\"1\" y=2;")
    assert [(m.login_module, m.flag, dict(m.options)) for m in modules] == [
        ("a.B", "optional", {"debug": "true"}), ("c.D", "sufficient", {"x": "1", "y": "2"})]


@pytest.mark.parametrize("text, says", [
    ("", "no login module"),
    ("a.B required user_x=\"p\"", "does not end with ';'"),
    ("a.B user_x=\"p\";", "control flag"),
    ("a.B required user_x;", "needs a value"),
    ("a.B required user_x=\"p;", "not closed"),
    ("a.B required x=\"1\" x=\"2\";", "given twice"),
    ("a.B required x=\"1\" #;", "unexpected character"),
])
def test_jaas_malformed(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_jaas(text)


# -- settings -------------------------------------------------------------------------------------------------------


def settings(**props: str) -> SaslSettings:
    return SaslSettings.for_listener(props, "SASL_PLAINTEXT")


def test_settings_plain_users_and_listener_override() -> None:
    s = SaslSettings.for_listener({"sasl.enabled.mechanisms": "GSSAPI",
                                   LISTENER + "sasl.enabled.mechanisms": "PLAIN",
                                   LISTENER + "plain.sasl.jaas.config": PLAIN_JAAS}, "SASL_PLAINTEXT")
    assert s.mechanisms == ("PLAIN",)
    assert s.users("PLAIN") == {"admin": "admin-secret", "alice": 'alice "quoted" secret'}
    assert s.client_credentials("PLAIN") == SaslCredentials("PLAIN", "admin", "admin-secret")
    assert s.max_reauth_ms == 0


def test_settings_refuse_kafka_default_gssapi_and_unserved_mechanisms() -> None:
    with pytest.raises(SaslConfigError, match="sasl.enabled.mechanisms is not set and Kafka's default is GSSAPI"):
        settings()
    with pytest.raises(SaslConfigError, match="'OAUTHBEARER' in sasl.enabled.mechanisms: a Kafka mechanism kjbod "
                                              "does not serve"):
        settings(**{"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER", LISTENER + "plain.sasl.jaas.config": PLAIN_JAAS})
    with pytest.raises(SaslConfigError, match="not a SASL mechanism"):
        settings(**{"sasl.enabled.mechanisms": "PLAINTEXT"})


def test_settings_plain_needs_jaas_and_a_malformed_one_names_its_key() -> None:
    with pytest.raises(SaslConfigError, match="listener.name.sasl_plaintext.plain.sasl.jaas.config"):
        settings(**{"sasl.enabled.mechanisms": "PLAIN"})
    with pytest.raises(SaslConfigError, match=r"invalid JAAS configuration in "
                                              r"listener.name.sasl_plaintext.plain.sasl.jaas.config"):
        settings(**{"sasl.enabled.mechanisms": "PLAIN", LISTENER + "plain.sasl.jaas.config": "x required a=;"})


def test_client_properties() -> None:
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                 'username="alice" password="pw";'}
    assert sasl_credentials_from(props) == SaslCredentials("PLAIN", "alice", "pw")
    assert sasl_credentials_from({}) is None
    with pytest.raises(ValueError, match="sasl.mechanism"):
        sasl_credentials_from({**props, "sasl.mechanism": "GSSAPI"})
    with pytest.raises(ValueError, match="sasl.jaas.config is not set"):
        sasl_credentials_from({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ValueError, match="username"):
        sasl_credentials_from({**props, "sasl.jaas.config": "a.B required password=\"x\";"})


# -- PLAIN ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token, message", [
    (plain_client_token("alice", "wrong"), "Authentication failed: Invalid username or password"),
    (plain_client_token("bob", "pw"), "Authentication failed: Invalid username or password"),
    (plain_client_token("", "pw"), "Authentication failed: username not specified"),
    (plain_client_token("alice", ""), "Authentication failed: password not specified"),
    (b"alice\x00pw", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"admin\x00alice\x00pw", "Authentication failed: Client requested an authorization id that is different "
                              "from username"),
])
def test_plain_refusals(token: bytes, message: str) -> None:
    with pytest.raises(SaslAuthenticationFailed) as e:
        PlainServer({"alice": "pw"}).evaluate(token)
    assert str(e.value) == message


def test_plain_accepts() -> None:
    server = PlainServer({"alice": "pw"})
    assert server.evaluate(b"alice\x00alice\x00pw") == b""
    assert server.complete and server.principal == "alice"


# -- the gate ---------------------------------------------------------------------------------------------------------


def frame(key: int, version: int, corr: int, body: object) -> bytes:
    header = struct.pack(">hhih", key, version, corr, 4) + b"test"
    if request_header_version(key, version) >= 2:
        header += b"\x00"
    return header + body.encode(version)  # type: ignore[attr-defined]


def decode(reply: object, cls: type, key: int, version: int) -> object:
    data = b"".join(reply) if isinstance(reply, list) else bytes(reply)  # type: ignore[arg-type]
    skip = 4 + (1 if response_header_version(key, version) >= 1 else 0)
    return cls.decode(data[skip:], version)  # type: ignore[attr-defined]


class Gate:
    """A SaslGate over a handler that records what reaches it and answers b"inner"."""

    def __init__(self, **props: str) -> None:
        self.passed: list[bytes] = []
        self.closes: list[str] = []
        self.now = 0.0
        self.settings = SaslSettings.for_listener(
            {"sasl.enabled.mechanisms": "PLAIN", LISTENER + "plain.sasl.jaas.config": PLAIN_JAAS, **props},
            "SASL_PLAINTEXT")
        self.gate = SaslGate(self._inner, self.settings, close_later=self.closes.append, clock=lambda: self.now)
        self.ctx = RequestContext(1, "127.0.0.1", 5555, "SASL_PLAINTEXT", "broker", "SASL_PLAINTEXT")

    def _inner(self, frame: bytes, ctx: RequestContext) -> bytes:
        self.passed.append(bytes(frame))
        return b"inner"

    def send(self, data: bytes) -> object:
        return self.gate.handle(data, self.ctx)

    def handshake(self, mechanism: str = "PLAIN", version: int = 1) -> SaslHandshakeResponse:
        reply = self.send(frame(17, version, 1, SaslHandshakeRequest(mechanism=mechanism)))
        return decode(reply, SaslHandshakeResponse, 17, version)  # type: ignore[return-value]

    def authenticate(self, token: bytes, version: int = 2) -> SaslAuthenticateResponse:
        reply = self.send(frame(36, version, 2, SaslAuthenticateRequest(auth_bytes=token)))
        return decode(reply, SaslAuthenticateResponse, 36, version)  # type: ignore[return-value]


METADATA = frame(3, 12, 9, MetadataRequest(topics=None))


@pytest.mark.parametrize("version", [0, 1, 2])
def test_gate_api_versions_handshake_authenticate_then_requests_pass(version: int) -> None:
    g = Gate()
    api_versions = frame(18, 3, 0, ApiVersionsRequest(client_software_name="x", client_software_version="1"))
    assert g.send(api_versions) == b"inner"
    handshake = g.handshake()
    assert (handshake.error_code, handshake.mechanisms) == (0, ["PLAIN"])
    answer = g.authenticate(plain_client_token("alice", 'alice "quoted" secret'), version)
    assert (answer.error_code, answer.error_message, answer.session_lifetime_ms) == (0, None, 0)
    assert g.gate.state == AUTHENTICATED and g.gate.principal == "alice"
    assert g.send(METADATA) == b"inner"
    assert g.passed == [api_versions, METADATA] and g.closes == []


def test_gate_wrong_password_answers_then_closes() -> None:
    g = Gate()
    g.handshake()
    answer = g.authenticate(plain_client_token("alice", "nope"))
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer.error_message == "Authentication failed: Invalid username or password"
    assert g.closes == ["SASL authentication failed"] and g.gate.state == FAILED
    with pytest.raises(CloseConnection):
        g.send(METADATA)
    assert g.passed == []


def test_gate_unsupported_mechanism_lists_the_enabled_ones_then_closes() -> None:
    g = Gate()
    answer = g.handshake("SCRAM-SHA-256")
    assert (answer.error_code, answer.mechanisms) == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, ["PLAIN"])
    assert g.closes == ["unsupported SASL mechanism"]


@pytest.mark.parametrize("before", ["nothing", "api_versions", "handshake"])
def test_gate_other_requests_before_authentication_close(before: str) -> None:
    g = Gate()
    if before == "api_versions":
        g.send(frame(18, 0, 0, ApiVersionsRequest()))
    elif before == "handshake":
        g.handshake()
    with pytest.raises(CloseConnection, match="unexpected request Metadata v12 during SASL"):
        g.send(METADATA)
    assert g.gate.state == FAILED and len(g.passed) == (1 if before == "api_versions" else 0)


def test_gate_second_api_versions_and_authenticate_before_handshake_close() -> None:
    g = Gate()
    g.send(frame(18, 0, 0, ApiVersionsRequest()))
    with pytest.raises(CloseConnection):
        g.send(frame(18, 0, 1, ApiVersionsRequest()))
    g = Gate()
    with pytest.raises(CloseConnection, match="SaslAuthenticate"):
        g.send(frame(36, 1, 0, SaslAuthenticateRequest(auth_bytes=b"x")))


def test_gate_v0_handshake_then_raw_tokens() -> None:
    g = Gate()
    assert g.handshake(version=0).error_code == 0
    assert g.send(plain_client_token("admin", "admin-secret")) == b""  # an empty token, framed by its size
    assert g.gate.state == AUTHENTICATED
    assert g.send(METADATA) == b"inner"
    g = Gate()
    g.handshake(version=0)
    with pytest.raises(CloseConnection):
        g.send(plain_client_token("admin", "bad"))


def test_gate_refuses_big_frames_before_authentication() -> None:
    g = Gate()
    with pytest.raises(CloseConnection, match="at most"):
        g.send(b"\x00" * (MAX_RECEIVE_SIZE + 1))


def test_sasl_server_max_receive_size_sets_the_limit_before_authentication() -> None:
    from kjbod.server.config import build_config

    config = build_config({"node.id": "1", "process.roles": "broker,controller", "log.dirs": "/d",
                           "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                           "controller.listener.names": "CONTROLLER", "sasl.server.max.receive.size": "1000"})
    assert config.sasl_server_max_receive_size == 1000
    def gate() -> Gate:
        g = Gate()
        g.gate = SaslGate(g._inner, g.settings, close_later=g.closes.append, clock=lambda: g.now,
                          max_receive_size=config.sasl_server_max_receive_size)
        return g

    with pytest.raises(CloseConnection, match="at most 1000 bytes .*sasl.server.max.receive.size"):
        gate().send(b"\x00" * 1001)
    g = gate()
    assert g.handshake().error_code == 0  # a frame within the limit is served
    assert g.authenticate(plain_client_token("alice", 'alice "quoted" secret')).error_code == 0


def test_gate_reauthentication_and_expiry() -> None:
    g = Gate(**{"connections.max.reauth.ms": "1000"})
    g.handshake()
    assert g.authenticate(plain_client_token("alice", 'alice "quoted" secret')).session_lifetime_ms == 1000
    g.now = 0.5
    assert g.send(METADATA) == b"inner"
    assert g.handshake().error_code == 0  # re-authentication, as the same user
    assert g.authenticate(plain_client_token("alice", 'alice "quoted" secret')).error_code == 0
    g.now = 1.4  # within the new session
    assert g.send(METADATA) == b"inner"
    g.now = 2.6
    with pytest.raises(CloseConnection, match="expired"):
        g.send(METADATA)


def test_gate_reauthentication_as_another_user_fails() -> None:
    g = Gate(**{"connections.max.reauth.ms": "1000"})
    g.handshake()
    g.authenticate(plain_client_token("alice", 'alice "quoted" secret'))
    g.handshake()
    answer = g.authenticate(plain_client_token("admin", "admin-secret"))
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals during re-authentication" in (answer.error_message or "")


# -- SCRAM ------------------------------------------------------------------------------------------------------------

# RFC 7677's example exchange for SCRAM-SHA-256: user "user", password "pencil".
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> ScramCredential:
    import base64

    return credential_from_password(MECHANISMS["SCRAM-SHA-256"], "pencil",
                                    base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096)


def test_scram_client_matches_rfc_7677() -> None:
    client = ScramClient(MECHANISMS["SCRAM-SHA-256"], "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(SaslAuthenticationFailed):
        client.verify(b"v=" + b"A" * 44)


def test_scram_server_matches_rfc_7677() -> None:
    server = ScramServer(MECHANISMS["SCRAM-SHA-256"], {"user": rfc_credential()}.get, nonce=lambda: RFC_SERVER_NONCE)
    assert server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == RFC_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.principal == "user"


GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"


@pytest.mark.parametrize("first, final", [
    (b"n,,n=nobody,r=abc", None),  # unknown user
    (b"y,,n=user,r=abc", None),  # channel binding asked
    (b"n,,n=us=er,r=abc", None),  # a bad escape
    (b"n,,n=user,r=abc,tokenauth=true", None),  # delegation tokens are not served
    (b"n,,n=user,r=" + RFC_CLIENT_NONCE.encode(), RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=eHzb")),  # wrong proof
    (b"n,,n=user,r=" + RFC_CLIENT_NONCE.encode(), RFC_CLIENT_FINAL.replace(b"k0,", b"k1,")),  # wrong nonce
])
def test_scram_server_refusals_say_nothing_about_the_user(first: bytes, final: bytes | None) -> None:
    server = ScramServer(MECHANISMS["SCRAM-SHA-256"], {"user": rfc_credential()}.get, nonce=lambda: RFC_SERVER_NONCE)
    with pytest.raises(SaslAuthenticationFailed) as e:
        server.evaluate(first)
        server.evaluate(final or b"")
    assert str(e.value) == GENERIC and not server.complete


def test_scram_server_names_a_different_authzid_and_ignores_other_extensions() -> None:
    server = ScramServer(MECHANISMS["SCRAM-SHA-256"], {"user": rfc_credential()}.get)
    with pytest.raises(SaslAuthenticationFailed, match="authorization id that is different from username"):
        server.evaluate(b"n,a=admin,n=user,r=abc")
    server = ScramServer(MECHANISMS["SCRAM-SHA-256"], {"user": rfc_credential()}.get)
    assert server.evaluate(b"n,a=user,n=user,r=abc,color=blue").startswith(b"r=abc")


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree(name: str) -> None:
    mechanism = MECHANISMS[name]
    stored = credential_from_password(mechanism, "s3cret", b"salty", 4096)
    server = ScramServer(mechanism, {"a,b=c": stored}.get)
    client = ScramClient(mechanism, "a,b=c", "s3cret")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.complete and server.principal == "a,b=c"
    weak = credential_from_password(mechanism, "s3cret", b"salty", 1024)  # below Kafka's minimum of 4096
    with pytest.raises(SaslAuthenticationFailed):
        ScramServer(mechanism, {"u": weak}.get).evaluate(b"n,,n=u,r=x")


# -- SCRAM credentials in the metadata log ----------------------------------------------------------------------------


def test_alter_user_scram_credentials_records_replay_and_describe() -> None:
    from kjbod.controller.scram import alter_user_scram_credentials
    from kjbod.metadata import EMPTY_IMAGE, image_records, replay
    from kjbod.metadata.scram import describe_user_scram_credentials
    from kjbod.net.scram import salted_password
    from kjbod.protocol.generated import (
        AlterUserScramCredentialsRequest,
        DescribeUserScramCredentialsRequest,
        RemoveUserScramCredentialRecord,
        UserScramCredentialRecord,
    )
    from kjbod.protocol.generated.alter_user_scram_credentials_request import (
        ScramCredentialDeletion,
        ScramCredentialUpsertion,
    )
    from kjbod.protocol.generated.describe_user_scram_credentials_request import UserName

    sha256 = MECHANISMS["SCRAM-SHA-256"]
    salted = salted_password(sha256, "pencil", b"salt", 4096)

    def upsert(name: str, mechanism: int = 1, iterations: int = 4096) -> ScramCredentialUpsertion:
        return ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=b"salt",
                                        salted_password=salted)

    result = alter_user_scram_credentials(EMPTY_IMAGE, AlterUserScramCredentialsRequest(
        deletions=[ScramCredentialDeletion(name="ghost", mechanism=1), ScramCredentialDeletion(name="", mechanism=1)],
        upsertions=[upsert("user"), upsert("twice"), upsert("twice", 2), upsert("few", iterations=4095),
                    upsert("many", iterations=16385), upsert("odd", mechanism=3)]))
    answers = {r.user: (r.error_code, r.error_message) for r in result.response.results}
    assert answers == {
        "user": (0, None),
        "twice": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        "ghost": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "odd": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
    }
    (record,) = result.records
    assert isinstance(record, UserScramCredentialRecord)
    expected = credential_from_password(sha256, "pencil", b"salt", 4096)
    assert (record.name, record.mechanism, record.stored_key, record.server_key, record.iterations) == (
        "user", 1, expected.stored_key, expected.server_key, 4096)  # never the salted password itself

    image = replay(EMPTY_IMAGE, result.records)
    assert image.scram[("user", 1)].stored_key == expected.stored_key
    assert replay(EMPTY_IMAGE, image_records(image)).scram == image.scram  # snapshots keep them
    described = describe_user_scram_credentials(image, DescribeUserScramCredentialsRequest(users=None))
    assert [(r.user, [(i.mechanism, i.iterations) for i in r.credential_infos]) for r in described.results] == [
        ("user", [(1, 4096)])]
    described = describe_user_scram_credentials(image, DescribeUserScramCredentialsRequest(
        users=[UserName(name="nobody"), UserName(name="user"), UserName(name="user")]))
    assert [(r.user, r.error_code) for r in described.results] == [
        ("nobody", ErrorCode.RESOURCE_NOT_FOUND), ("user", ErrorCode.DUPLICATE_RESOURCE)]

    deleted = alter_user_scram_credentials(image, AlterUserScramCredentialsRequest(
        deletions=[ScramCredentialDeletion(name="user", mechanism=1)], upsertions=[]))
    assert [type(r) for r in deleted.records] == [RemoveUserScramCredentialRecord]
    assert replay(image, deleted.records).scram == {}
