"""ssl.principal.mapping.rules: the rule syntax Kafka accepts and refuses, the names rules make of distinguished
names, refusal at start naming the key and the rule (listener-prefixed too), and a live node where a client
certificate mapped to a short name is allowed by an ACL on that short name."""

from __future__ import annotations

import socket
import ssl
import struct
from pathlib import Path
from typing import Any

import pytest

from kjbod.net.ssl_principal import NoMatchingRule, PrincipalMapper, parse_rules
from kjbod.net.tls import certificate_principal
from kjbod.server.config import ConfigError, build_config

from .conftest import Certs, free_port, start_tls_node, tls_settings

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a",
}
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    "",
    ",  , ,",
])
def test_rules_kafka_accepts(rules: str) -> None:
    parse_rules(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_rules_kafka_refuses(rules: str) -> None:
    with pytest.raises(ValueError, match="invalid rule"):
        parse_rules(rules)


@pytest.mark.parametrize(("rules", "why"), [
    ("RULE:^CN=(.*$/$1/", "does not compile"),
    ("RULE:^CN=.*$/$1/", "group 1 but the pattern has 0 groups"),
    ("RULE:^CN=(.*)$/$x/", "must be followed by a group number"),
])
def test_rules_that_could_only_fail_later_are_refused_when_parsed(rules: str, why: str) -> None:
    with pytest.raises(ValueError, match="invalid rule") as info:
        parse_rules(rules)
    assert why in str(info.value)


def test_rules_split_like_kafkas() -> None:
    def texts(value: str) -> list[str]:
        return [r.text for r in parse_rules(value)]

    assert texts("") == []
    assert texts("  RULE:// ,  DEFAULT  ") == ["RULE://", "DEFAULT"]
    assert texts(",,RULE://,,,DEFAULT,,") == ["RULE://", "DEFAULT"]
    assert texts("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ") == [
        "RULE:([A-Z]*)/$1/U", "RULE:([a-z]+)/$1/", "DEFAULT"]
    # a pattern may hold commas and escaped slashes
    assert texts("RULE:^CN=(.*?),OU=x\\/y$/$1/,DEFAULT") == ["RULE:^CN=(.*?),OU=x\\/y$/$1/", "DEFAULT"]


def test_names_mapped_as_kafka_maps_them() -> None:
    mapper = PrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    # an escaped comma inside a value
    escaped = PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert escaped.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"
    # a one-digit reference past the groups stays text; an escaped dollar is a dollar
    assert PrincipalMapper("RULE:^CN=(\\w+).*$/$1$2\\$/").name("CN=ann,O=x") == "ann$2$"


def test_no_matching_rule_refuses_the_certificate() -> None:
    mapper = PrincipalMapper("RULE:^CN=(.*),OU=ops$/$1/")
    cert = {"subject": ((("organizationName", "acme"),), (("commonName", "bob"),))}
    with pytest.raises(NoMatchingRule, match="CN=bob,O=acme"):
        certificate_principal(cert, mapper)
    assert certificate_principal(cert) == "User:CN=bob,O=acme"
    assert certificate_principal(cert, PrincipalMapper("RULE:^CN=([^,]*),.*$/$1/U")) == "User:BOB"
    assert certificate_principal(None, mapper) is None  # no certificate: ANONYMOUS, no rule asked


def test_bad_rules_stop_the_start_naming_the_key_and_the_rule(certs: Certs) -> None:
    with pytest.raises(ConfigError) as info:
        build_config({**BASE, **tls_settings(certs), "ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/X"})
    assert "ssl.principal.mapping.rules" in str(info.value) and "RULE:^CN=(.*)$/$1/X" in str(info.value)
    with pytest.raises(ConfigError) as info:
        build_config({**BASE, **tls_settings(certs), "listener.name.ssl.ssl.principal.mapping.rules": "DEFAUL"})
    assert "listener.name.ssl.ssl.principal.mapping.rules" in str(info.value) and "'DEFAUL'" in str(info.value)


def test_the_listener_prefixed_rules_win(certs: Certs) -> None:
    config = build_config({**BASE, **tls_settings(certs), "ssl.principal.mapping.rules": "DEFAULT",
                           "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=([^,]*).*$/$1/"})
    assert config.tls_settings("SSL").principal_mapper().name("CN=ann,O=x") == "ann"
    plain = build_config({**BASE, **tls_settings(certs)})
    assert plain.tls_settings("SSL").principal_mapper().is_default


def closed_at_once(port: int, certs: Certs) -> bool:
    """Whether the node closes a TLS connection made with the test client certificate before answering an
    ApiVersions request (kafka-python would only time out, leaving its wake-up sockets behind)."""
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        header = struct.pack(">hhi", 18, 0, 1) + struct.pack(">h", 4) + b"test"
        try:
            tls.sendall(struct.pack(">i", len(header)) + header)
            return tls.recv(4) == b""
        except (ssl.SSLError, ConnectionError):
            return True


def test_a_mapped_certificate_is_the_principal_acls_match(tmp_path: Path, certs: Certs) -> None:
    """The test client certificate (CN=kjbod-test-client) maps to User:KJBOD-TEST-CLIENT on the MTLS listener
    (listener-prefixed rules) and to nothing on the STRICT listener (its one rule wants OU=ops: the client is
    refused); an ACL on the short name lets the client write, where before the topic was refused."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, NewTopic, ResourcePattern, ResourceType
    from kafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError

    plain, mtls, strict, controller = free_port(), free_port(), free_port(), free_port()
    server = start_tls_node(tmp_path / "mapped", listeners=(
        f"PLAINTEXT://127.0.0.1:{plain},MTLS://127.0.0.1:{mtls},STRICT://127.0.0.1:{strict},"
        f"CONTROLLER://127.0.0.1:{controller}"),
        overrides={"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL,STRICT:SSL,CONTROLLER:PLAINTEXT",
                   "inter.broker.listener.name": "PLAINTEXT", **tls_settings(certs, client_auth="required"),
                   "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*)(,.*)?$/$1/U, DEFAULT",
                   "listener.name.strict.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=ops$/$1/",
                   "authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS", "num.partitions": "1"},
        broker_port=plain, controller_port=controller)
    tls: dict[str, Any] = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca), "ssl_check_hostname": True,
                           "ssl_certfile": str(certs.client_cert), "ssl_keyfile": str(certs.client_key)}

    def send(bootstrap: str) -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_block_ms=5000, **tls)
        try:
            producer.send("mapped", b"v").get(timeout=10)
        finally:
            producer.close()

    try:
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{plain}")  # ANONYMOUS is the super user here
        try:
            admin.create_topics([NewTopic("mapped", 1, 1)])
            with pytest.raises((TopicAuthorizationFailedError, KafkaTimeoutError)):
                send(f"localhost:{mtls}")
            assert admin.create_acls([ACL("User:KJBOD-TEST-CLIENT", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                                          ResourcePattern(ResourceType.TOPIC, "mapped"))])["failed"] == []
        finally:
            admin.close()
        deadline_error: Exception | None = None
        for _ in range(60):
            try:
                send(f"localhost:{mtls}")
                deadline_error = None
                break
            except (TopicAuthorizationFailedError, KafkaTimeoutError) as e:  # the ACL reaches the image a moment later
                deadline_error = e
        assert deadline_error is None, deadline_error
        assert closed_at_once(strict, certs)
        log = (server.directory / "stderr.log").read_text()
        assert "TLS client certificate refused" in log and "CN=kjbod-test-client" in log
    finally:
        server.stop()
