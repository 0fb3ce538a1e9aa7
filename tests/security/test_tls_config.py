"""TLS settings in server.properties: Kafka's ssl.* keys, per-listener overrides, and startup errors that name the key
and the file (in-process: the config is built, and the TLS contexts with it, as `kjbod serve` builds them)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from kjbod.net.tls import TlsSettings, client_context, openssl_cipher_name, server_context
from kjbod.server.config import ConfigError, build_config, load_config

from .conftest import KEY_PASSWORD, Certs, tls_settings

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a",
}


def build(certs: Certs, **extra: str):
    return build_config({**BASE, **tls_settings(certs), **extra})


def error(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        build_config(props)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_an_ssl_listener_with_a_pem_key_store_is_accepted(certs: Certs) -> None:
    config = build(certs)
    (ssl_listener,) = config.broker_listeners
    assert ssl_listener.security_protocol == "SSL"
    settings = config.tls_settings("SSL")
    assert settings.get("ssl.keystore.location") == str(certs.server_keystore)
    assert settings.client_auth == "none"  # Kafka's default
    ctx = server_context(settings)
    assert ctx.verify_mode == ssl.CERT_NONE
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2 and ctx.maximum_version == ssl.TLSVersion.TLSv1_3


def test_a_tls_listener_without_key_material_is_refused(certs: Certs) -> None:
    message = error(dict(BASE))
    assert "listener SSL" in message and "ssl.keystore.location" in message


def test_the_listener_prefix_wins_over_the_plain_key(certs: Certs, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    # the listener's own key is used: the bad plain one does not matter
    config = build_config({**BASE, **tls_settings(certs, "listener.name.ssl."), "ssl.keystore.location": str(missing)})
    assert config.tls_settings("SSL").key("ssl.keystore.location") == "listener.name.ssl.ssl.keystore.location"
    # and a bad listener key is reported under its own name, with the file
    message = error({**BASE, **tls_settings(certs), "listener.name.ssl.ssl.keystore.location": str(missing)})
    assert "listener.name.ssl.ssl.keystore.location" in message and str(missing) in message
    assert "no such file" in message
    # client auth set for the listener only
    config = build_config({**BASE, **tls_settings(certs), "listener.name.ssl.ssl.client.auth": "required"})
    assert server_context(config.tls_settings("SSL")).verify_mode == ssl.CERT_REQUIRED


def test_key_store_types_other_than_pem_are_refused_naming_the_key(certs: Certs) -> None:
    props = {**BASE, **tls_settings(certs)}
    del props["ssl.keystore.type"]  # Kafka's default: JKS
    message = error(props)
    assert "ssl.keystore.type=JKS is not supported" in message and "PEM" in message
    message = error({**props, "ssl.keystore.type": "PKCS12"})
    assert "ssl.keystore.type=PKCS12 is not supported" in message and "PEM" in message
    message = error({**BASE, **tls_settings(certs, client_auth="required"), "ssl.truststore.type": "JKS"})
    assert "ssl.truststore.type=JKS is not supported" in message


def test_unreadable_or_wrong_files_name_the_key_and_the_file(certs: Certs, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    message = error({**BASE, **tls_settings(certs), "ssl.keystore.location": str(garbage)})
    assert "ssl.keystore.location" in message and str(garbage) in message
    message = error({**BASE, **tls_settings(certs, client_auth="required"), "ssl.truststore.location": str(garbage)})
    assert "ssl.truststore.location" in message and str(garbage) in message
    message = error({**BASE, **tls_settings(certs), "ssl.keystore.location": str(tmp_path)})
    assert "it is a directory" in message
    # a key that does not belong to the certificate
    mismatched = tmp_path / "mismatched.pem"
    mismatched.write_text(certs.client_key.read_text() + certs.server_cert.read_text())
    message = error({**BASE, **tls_settings(certs), "ssl.keystore.location": str(mismatched)})
    assert "does not belong" in message and str(mismatched) in message


def test_an_encrypted_key_needs_its_password(certs: Certs) -> None:
    props = {**BASE, **tls_settings(certs), "ssl.keystore.location": str(certs.server_keystore_encrypted)}
    build_config({**props, "ssl.key.password": KEY_PASSWORD})
    message = error({**props, "ssl.key.password": "wrong"})
    assert "ssl.key.password" in message and str(certs.server_keystore_encrypted) in message
    assert "ssl.keystore.password cannot be used with a PEM key store" in error(
        {**props, "ssl.key.password": KEY_PASSWORD, "ssl.keystore.password": "x"})


def test_inline_pem_key_chain_and_trusted_certificates(certs: Certs) -> None:
    # KIP-651: the PEM text in the properties; a properties file carries it on one line with escaped line breaks
    one_line = {path: path.read_text().strip().replace("\n", "\\n") for path in (certs.server_key, certs.server_cert,
                                                                            certs.ca)}
    props = {**BASE, "ssl.keystore.type": "PEM", "ssl.keystore.key": one_line[certs.server_key],
             "ssl.keystore.certificate.chain": one_line[certs.server_cert], "ssl.truststore.type": "PEM",
             "ssl.truststore.certificates": one_line[certs.ca], "ssl.client.auth": "required"}
    config = build_config(props)
    assert server_context(config.tls_settings("SSL")).verify_mode == ssl.CERT_REQUIRED
    # PEM text joined onto one line without its breaks (a continuation line in a properties file)
    joined = {**props, "ssl.keystore.key": certs.server_key.read_text().replace("\n", " ")}
    build_config(joined)
    message = error({**props, "ssl.keystore.key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"})
    assert "ssl.keystore.key" in message
    message = error({**BASE, "ssl.keystore.type": "PEM", "ssl.keystore.key": one_line[certs.server_key]})
    assert "ssl.keystore.certificate.chain is required" in message
    message = error({**props, "ssl.keystore.location": str(certs.server_keystore)})
    assert "not both" in message


def test_bad_values_are_refused_naming_the_key(certs: Certs) -> None:
    for key, value, expect in [
        ("ssl.client.auth", "sometimes", "expected none, requested or required"),
        ("ssl.enabled.protocols", "TLSv1.1", "TLSv1.1 is not supported"),
        ("ssl.protocol", "SSLv3", "expected TLSv1.3, TLSv1.2 or TLS"),
        ("ssl.cipher.suites", "TLS_MADE_UP_WITH_NOTHING", "TLS_MADE_UP_WITH_NOTHING is not known"),
        ("ssl.endpoint.identification.algorithm", "ldap", "https or an empty value"),
    ]:
        message = error({**BASE, **tls_settings(certs), key: value})
        assert key in message and expect in message, message


def test_protocols_and_cipher_suites_take_effect(certs: Certs) -> None:
    only12 = server_context(build(certs, **{"ssl.enabled.protocols": "TLSv1.2"}).tls_settings("SSL"))
    assert only12.maximum_version == ssl.TLSVersion.TLSv1_2
    # Kafka's (IANA) names and OpenSSL's both work; a TLS 1.3 suite is accepted
    suites = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256"
    ctx = server_context(build(certs, **{"ssl.cipher.suites": suites}).tls_settings("SSL"))
    tls12 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-ECDSA-AES128-GCM-SHA256"}
    assert openssl_cipher_name("TLS_RSA_WITH_AES_256_CBC_SHA") == "AES256-SHA"
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-RSA-CHACHA20-POLY1305"


def test_client_side_host_name_check_follows_endpoint_identification(certs: Certs) -> None:
    props = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}
    assert client_context(TlsSettings.for_listener(props, None)).check_hostname  # Kafka's default: https
    off = {**props, "ssl.endpoint.identification.algorithm": ""}
    assert not client_context(TlsSettings.for_listener(off, None)).check_hostname


def test_errors_say_where_in_the_file(certs: Certs, tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    lines = {**BASE, **tls_settings(certs), "ssl.keystore.location": str(tmp_path / "missing.pem")}
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    line = list(lines).index("ssl.keystore.location") + 1
    assert str(info.value).startswith(f"{path}:{line}: listener SSL: ssl.keystore.location")


def test_a_plaintext_and_an_ssl_listener_together(certs: Certs) -> None:
    config = build(certs, listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093")
    assert [ln.security_protocol for ln in config.listeners] == ["PLAINTEXT", "SSL", "PLAINTEXT"]


def test_security_inter_broker_protocol_names_the_listener(certs: Certs) -> None:
    listeners = "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093"
    config = build(certs, listeners=listeners, **{"security.inter.broker.protocol": "ssl"})
    assert config.inter_broker_listener_name == "SSL"
    message = error({**BASE, **tls_settings(certs), "security.inter.broker.protocol": "SSL",
                     "inter.broker.listener.name": "SSL"})
    assert "only one of inter.broker.listener.name and security.inter.broker.protocol" in message
    message = error({**BASE, **tls_settings(certs), "security.inter.broker.protocol": "PLAINTEXT"})
    assert "names listener PLAINTEXT" in message


def test_the_readme_tls_example_is_a_config_kjbod_accepts(certs: Certs, tmp_path: Path) -> None:
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    start = readme.index("\n## TLS\n")
    block = re.compile(r"```properties\n(.*?)```", re.S).search(readme, start)
    assert block, "README.md lost the server.properties example of its TLS section"
    text = (block.group(1).replace("/etc/kjbod/tls/broker-keystore.pem", str(certs.server_keystore))
            .replace("/etc/kjbod/tls/ca.pem", str(certs.ca)))
    path = tmp_path / "server.properties"
    path.write_text(text + "node.id=1\nprocess.roles=broker,controller\nlog.dirs=/data/a\n")
    config = load_config(str(path))
    assert [ln.security_protocol for ln in config.listeners] == ["PLAINTEXT", "SSL", "PLAINTEXT"]
    assert server_context(config.tls_settings("SSL")).verify_mode == ssl.CERT_REQUIRED


def test_a_key_store_without_its_key_or_certificate_says_which(certs: Certs, tmp_path: Path) -> None:
    only_cert = tmp_path / "only-cert.pem"
    only_cert.write_text(certs.server_cert.read_text())
    message = error({**BASE, **tls_settings(certs), "ssl.keystore.location": str(only_cert)})
    assert f"{only_cert} holds no private key" in message
    only_key = tmp_path / "only-key.pem"
    only_key.write_text(certs.server_key.read_text())
    message = error({**BASE, **tls_settings(certs), "ssl.keystore.location": str(only_key)})
    assert f"{only_key} holds no certificate" in message


def test_kjbod_serve_stops_with_one_line_on_a_bad_tls_setting(tmp_path: Path) -> None:
    import subprocess

    from live import COMMAND

    path = tmp_path / "server.properties"
    keystore = tmp_path / "missing.pem"
    path.write_text("".join(f"{k}={v}\n" for k, v in {**BASE, "log.dirs": str(tmp_path / "logs"),
                                                       "ssl.keystore.type": "PEM",
                                                       "ssl.keystore.location": str(keystore)}.items()))
    done = subprocess.run([*COMMAND, "serve", "-c", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "ssl.keystore.location" in line and str(keystore) in line and f"{path}:" in line
