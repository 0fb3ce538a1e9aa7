"""The admin client's connection security from Kafka's client properties (what Kafka's tools read from
`--command-config FILE`): `security.protocol`, the `ssl.*` keys and the `sasl.*` keys.

PLAINTEXT (the default) needs nothing; SSL and SASL_SSL build the TLS client side with kjbod.net.tls from the same
ssl.* keys a Kafka client takes (ssl.truststore.* to trust the brokers, ssl.keystore.* for mutual TLS,
ssl.endpoint.identification.algorithm for the host name check). SASL_PLAINTEXT and SASL_SSL take `sasl.mechanism`
(Kafka's default GSSAPI is refused: kjbod serves PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512) and the username and
password of `sasl.jaas.config` (`org.apache.kafka.common.security.plain.PlainLoginModule required username="..."
password="...";`, or Kafka's ScramLoginModule with the same options). Other client
keys (timeouts, client.id, ...) are left to the command's own options and not read here.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from kjbod.net.sasl import (
    SaslConfigError,
    SaslCredentials,
    credentials_of,
    is_sasl,
    jaas_module,
    served_mechanism,
)
from kjbod.net.tls import TlsConfigError, TlsSettings, client_context, is_tls

__all__ = ["connection_options_from", "sasl_credentials_from", "ssl_context_from"]

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _protocol(props: Mapping[str, str]) -> str:
    raw = props.get("security.protocol", "PLAINTEXT")
    protocol = raw.strip().upper()
    if protocol not in _PROTOCOLS:
        raise ValueError(f"invalid value {raw!r} for security.protocol: expected {', '.join(_PROTOCOLS)}")
    return protocol


def ssl_context_from(props: Mapping[str, str]) -> ssl.SSLContext | None:
    """The SSLContext for `security.protocol=SSL` or SASL_SSL, None otherwise; ValueError naming the key."""
    if not is_tls(_protocol(props)):
        return None
    try:
        return client_context(TlsSettings.for_listener(props, None))
    except TlsConfigError as e:
        raise ValueError(str(e)) from None


def sasl_credentials_from(props: Mapping[str, str]) -> SaslCredentials | None:
    """The SASL credentials for `security.protocol=SASL_PLAINTEXT` or SASL_SSL, None otherwise; ValueError naming
    the key."""
    if not is_sasl(_protocol(props)):
        return None
    try:
        mechanism = served_mechanism(props.get("sasl.mechanism", "GSSAPI").strip(), "sasl.mechanism")
        text = props.get("sasl.jaas.config")
        if text is None:
            raise SaslConfigError("sasl.jaas.config is not set: SASL needs the username and password, as "
                                  "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                                  "username=\"...\" password=\"...\";")
        return credentials_of(jaas_module(text, "sasl.jaas.config"), mechanism, "sasl.jaas.config")
    except SaslConfigError as e:
        raise ValueError(str(e)) from None


def connection_options_from(props: Mapping[str, str]) -> dict[str, Any]:
    """The AdminClient options (`ssl_context`, `sasl`) Kafka's client properties ask for."""
    return {"ssl_context": ssl_context_from(props), "sasl": sasl_credentials_from(props)}
