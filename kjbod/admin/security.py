"""The admin client's connection security from Kafka's client properties (what Kafka's tools read from
`--command-config FILE`): `security.protocol` and the `ssl.*` keys.

PLAINTEXT (the default) needs nothing; SSL builds the client side with kjbod.net.tls from the same ssl.* keys a
Kafka client takes (ssl.truststore.* to trust the brokers, ssl.keystore.* for mutual TLS,
ssl.endpoint.identification.algorithm for the host name check). SASL is not served yet and is refused naming the
key. Other client keys (timeouts, client.id, ...) are left to the command's own options and not read here.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from kjbod.net.tls import TlsConfigError, TlsSettings, client_context

__all__ = ["ssl_context_from"]


def ssl_context_from(props: Mapping[str, str]) -> ssl.SSLContext | None:
    """The SSLContext for `security.protocol=SSL`, None for PLAINTEXT; ValueError naming the key otherwise."""
    raw = props.get("security.protocol", "PLAINTEXT")
    protocol = raw.strip().upper()
    if protocol == "PLAINTEXT":
        return None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        raise ValueError(f"security.protocol={protocol} is not supported yet (PLAINTEXT and SSL are)")
    if protocol != "SSL":
        raise ValueError(f"invalid value {raw!r} for security.protocol: expected PLAINTEXT or SSL")
    try:
        return client_context(TlsSettings.for_listener(props, None))
    except TlsConfigError as e:
        raise ValueError(str(e)) from None
