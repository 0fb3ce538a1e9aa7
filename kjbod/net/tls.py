"""TLS (Kafka's security protocol SSL): Kafka's ``ssl.*`` keys turned into Python ``ssl.SSLContext``s.

Strategy:

* One listener's settings come from ``listener.name.<listener name in lower case>.ssl.<key>`` when that is set,
  else from ``ssl.<key>``, else from Kafka's default (`SSL_KEYS`). `TlsSettings.for_listener` resolves them once and
  remembers which key gave each value, so every error names the key the user actually wrote.
* The server side (`server_context`) and the client side (`client_context`: the broker's controller channel and
  replica fetchers, kjbod's admin client) are built from the same settings, as Kafka builds both ends of a listener
  from its keys. Both are built when the config is read, so a missing file, a wrong password or a bad value stops
  the node at start with one line naming the key and the file (`TlsConfigError`), never later in a handshake.
* Key and trust material is PEM only: Python's ``ssl`` reads PEM and nothing else without extra packages, so JKS and
  PKCS12 stores are refused with a message saying so. PEM comes as Kafka's KIP-651 allows: files
  (``ssl.keystore.location`` holding the private key and the certificate chain, ``ssl.truststore.location`` holding
  CA certificates) or inline text (``ssl.keystore.key`` with ``ssl.keystore.certificate.chain``,
  ``ssl.truststore.certificates``). Inline key material goes through a private temporary file, removed at once
  (``load_cert_chain`` reads files only).
* Cipher suites may be given with the standard (IANA) names Kafka's JVM uses, translated to OpenSSL's names, or
  with OpenSSL's names. TLS 1.3 suites are accepted but cannot be narrowed from Python: every TLS 1.3 suite
  OpenSSL enables stays enabled.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kjbod.net.ssl_principal import NoMatchingRule, PrincipalMapper

__all__ = [
    "NoMatchingRule",
    "PrincipalMapper",
    "SSL_KEYS",
    "SSL_NO_EFFECT",
    "TLS_PROTOCOLS",
    "TlsConfigError",
    "TlsSettings",
    "certificate_dn",
    "certificate_principal",
    "client_context",
    "client_context_of",
    "is_tls",
    "server_context",
]

TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})

# Kafka's ssl.* keys kjbod reads, with Kafka's defaults (None: unset).
SSL_KEYS: dict[str, str | None] = {
    "ssl.keystore.type": "JKS",
    "ssl.keystore.location": None,
    "ssl.keystore.password": None,
    "ssl.keystore.certificate.chain": None,
    "ssl.keystore.key": None,
    "ssl.key.password": None,
    "ssl.truststore.type": "JKS",
    "ssl.truststore.location": None,
    "ssl.truststore.password": None,
    "ssl.truststore.certificates": None,
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.protocol": "TLSv1.3",
    "ssl.cipher.suites": "",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.principal.mapping.rules": "DEFAULT",
}

# Kafka ssl.* keys that choose JVM machinery (providers, algorithms of the key and trust managers) or watch a client's
# certificate across re-handshakes (which Python's ssl does not offer): accepted so Kafka's files load, and without
# effect here.
SSL_NO_EFFECT = frozenset({
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation",
    "ssl.provider",
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
})

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_PREFIX = re.compile(r"^listener\.name\.([^.]+)\.(ssl\..+)$")


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used: one line naming the key (and the file, for files)."""


def is_tls(security_protocol: str) -> bool:
    return security_protocol.upper() in TLS_PROTOCOLS


def listener_key(key: str) -> tuple[str, str] | None:
    """(listener name in lower case, ssl key) for a ``listener.name.<name>.ssl.<key>`` key, else None."""
    m = _PREFIX.match(key)
    return (m.group(1), m.group(2)) if m else None


@dataclass(frozen=True)
class TlsSettings:
    """One listener's ssl.* values (Kafka's defaults filled in) and, for each, the key that set it."""

    values: Mapping[str, str | None]
    keys: Mapping[str, str] = field(default_factory=dict)  # ssl key -> the key written (maybe listener-prefixed)

    @classmethod
    def for_listener(cls, props: Mapping[str, str], listener: str | None) -> TlsSettings:
        """The settings of ``listener`` (None: the plain ``ssl.*`` keys only, as a client's config file has)."""
        values: dict[str, str | None] = {}
        keys: dict[str, str] = {}
        for key, default in SSL_KEYS.items():
            prefixed = f"listener.name.{listener.lower()}.{key}" if listener else None
            if prefixed is not None and prefixed in props:
                values[key], keys[key] = props[prefixed].strip(), prefixed
            elif key in props:
                values[key], keys[key] = props[key].strip(), key
            else:
                values[key], keys[key] = default, key
        return cls(values, keys)

    def get(self, key: str) -> str | None:
        value = self.values.get(key)
        return value if value not in (None, "") else None

    def key(self, key: str) -> str:
        return self.keys.get(key, key)

    def bad(self, key: str, expected: str) -> TlsConfigError:
        return TlsConfigError(f"invalid value {self.values.get(key)!r} for {self.key(key)}: {expected}")

    @property
    def client_auth(self) -> str:
        value = (self.get("ssl.client.auth") or "none").lower()
        if value not in _CLIENT_AUTH:
            raise self.bad("ssl.client.auth", "expected none, requested or required")
        return value

    @property
    def has_keystore(self) -> bool:
        return bool(self.get("ssl.keystore.location") or self.get("ssl.keystore.key"))

    def versions(self) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
        protocol = self.get("ssl.protocol") or "TLSv1.3"
        if protocol not in ("TLS", "TLSv1.2", "TLSv1.3"):
            raise self.bad("ssl.protocol", "expected TLSv1.3, TLSv1.2 or TLS")
        raw = self.get("ssl.enabled.protocols")
        names = [p.strip() for p in raw.split(",") if p.strip()] if raw is not None else []
        if not names:  # Kafka: no list means the protocol ssl.protocol names (TLS: every version)
            names = ["TLSv1.2", "TLSv1.3"] if protocol == "TLS" else [protocol]
        for name in names:
            if name not in _VERSIONS:
                raise self.bad("ssl.enabled.protocols", f"{name} is not supported (kjbod enables TLSv1.2 and TLSv1.3)")
        chosen = sorted(_VERSIONS[n] for n in names)
        return chosen[0], chosen[-1]

    def principal_mapper(self) -> PrincipalMapper:
        """The listener's ssl.principal.mapping.rules, parsed; a bad rule is a TlsConfigError naming the key."""
        try:
            return PrincipalMapper(self.values.get("ssl.principal.mapping.rules"))
        except ValueError as e:
            raise TlsConfigError(f"{self.key('ssl.principal.mapping.rules')}: {e}") from None

    def check(self) -> None:
        """Check the values that need no file (both sides use them)."""
        _ = self.client_auth
        self.versions()
        algorithm = self.get("ssl.endpoint.identification.algorithm")
        if algorithm is not None and algorithm.lower() != "https":
            raise self.bad("ssl.endpoint.identification.algorithm", "expected https or an empty value (no check)")


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server side of a TLS listener: its certificate and key, and the trust for client certificates."""
    settings.check()
    settings.principal_mapper()
    if not settings.has_keystore:
        raise TlsConfigError(
            f"a TLS listener needs its certificate and private key: set {settings.key('ssl.keystore.location')} "
            f"(a PEM file holding both, with {settings.key('ssl.keystore.type')}=PEM) or "
            f"{settings.key('ssl.keystore.key')} and {settings.key('ssl.keystore.certificate.chain')}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(ctx, settings)
    _load_keystore(ctx, settings)
    auth = settings.client_auth
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if auth != "none":
        if not _load_truststore(ctx, settings):
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The client side: the trust for the server's certificate, host name checks as
    ssl.endpoint.identification.algorithm says, and a certificate of our own when a keystore is set (mutual TLS)."""
    settings.check()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(ctx, settings)
    algorithm = settings.get("ssl.endpoint.identification.algorithm")
    ctx.check_hostname = algorithm is not None
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not _load_truststore(ctx, settings):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if settings.has_keystore:
        _load_keystore(ctx, settings)
    return ctx


# -- the pieces ------------------------------------------------------------------------------------------------


def _common(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    low, high = settings.versions()
    ctx.minimum_version, ctx.maximum_version = low, high
    _set_ciphers(ctx, settings)


def _load_keystore(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    kind = (settings.get("ssl.keystore.type") or "JKS").upper()
    location = settings.get("ssl.keystore.location")
    chain, key = settings.get("ssl.keystore.certificate.chain"), settings.get("ssl.keystore.key")
    password = settings.get("ssl.key.password")
    if kind != "PEM":
        raise TlsConfigError(
            f"{settings.key('ssl.keystore.type')}={kind} is not supported: kjbod reads PEM key stores only "
            f"(set {settings.key('ssl.keystore.type')}=PEM; a {kind} store converts with openssl or keytool)")
    if settings.get("ssl.keystore.password") is not None:
        raise TlsConfigError(
            f"{settings.key('ssl.keystore.password')} cannot be used with a PEM key store, as in Kafka: "
            f"only {settings.key('ssl.key.password')} (the private key's password) applies")
    if location is not None and (chain is not None or key is not None):
        raise TlsConfigError(
            f"set either {settings.key('ssl.keystore.location')} or {settings.key('ssl.keystore.key')} with "
            f"{settings.key('ssl.keystore.certificate.chain')}, not both")
    if location is not None:
        if not _readable(location):
            raise TlsConfigError(f"{settings.key('ssl.keystore.location')}: cannot read {location}: "
                                 f"{_why_unreadable(location)}")
        missing = _missing_pem(location)
        if missing:
            raise TlsConfigError(
                f"{settings.key('ssl.keystore.location')}: {location} holds no {missing} (a PEM key store is the "
                "private key and the certificate chain in one file)")
        try:
            ctx.load_cert_chain(location, password=password)
        except (ssl.SSLError, OSError, ValueError) as e:
            raise TlsConfigError(
                f"{settings.key('ssl.keystore.location')}: cannot load the certificate chain and private key from "
                f"{location}: {_reason(e, settings)}") from None
        return
    if chain is None or key is None:
        missing = "ssl.keystore.certificate.chain" if chain is None else "ssl.keystore.key"
        raise TlsConfigError(f"{settings.key(missing)} is required with "
                             f"{settings.key('ssl.keystore.key' if chain is None else 'ssl.keystore.certificate.chain')}")
    with tempfile.TemporaryDirectory(prefix="kjbod-tls-") as tmp:
        path = os.path.join(tmp, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii", errors="replace") as f:
            f.write(_pem_text(key) + "\n" + _pem_text(chain) + "\n")
        try:
            ctx.load_cert_chain(path, password=password)
        except (ssl.SSLError, OSError, ValueError) as e:
            raise TlsConfigError(
                f"{settings.key('ssl.keystore.key')} / {settings.key('ssl.keystore.certificate.chain')}: cannot "
                f"load the inline private key and certificate chain: {_reason(e, settings)}") from None


def _load_truststore(ctx: ssl.SSLContext, settings: TlsSettings) -> bool:
    """Load the configured CA certificates; False when none is configured."""
    location = settings.get("ssl.truststore.location")
    inline = settings.get("ssl.truststore.certificates")
    if location is None and inline is None:
        return False
    kind = (settings.get("ssl.truststore.type") or "JKS").upper()
    if kind != "PEM":
        raise TlsConfigError(
            f"{settings.key('ssl.truststore.type')}={kind} is not supported: kjbod reads PEM trust stores only "
            f"(set {settings.key('ssl.truststore.type')}=PEM)")
    if settings.get("ssl.truststore.password") is not None:
        raise TlsConfigError(f"{settings.key('ssl.truststore.password')} cannot be used with a PEM trust store, "
                             "as in Kafka")
    if location is not None and inline is not None:
        raise TlsConfigError(f"set either {settings.key('ssl.truststore.location')} or "
                             f"{settings.key('ssl.truststore.certificates')}, not both")
    if location is not None:
        if not _readable(location):
            raise TlsConfigError(f"{settings.key('ssl.truststore.location')}: cannot read {location}: "
                                 f"{_why_unreadable(location)}")
        try:
            ctx.load_verify_locations(cafile=location)
        except (ssl.SSLError, OSError, ValueError) as e:
            raise TlsConfigError(f"{settings.key('ssl.truststore.location')}: no PEM certificate could be loaded "
                                 f"from {location}: {_reason(e, settings)}") from None
        return True
    assert inline is not None
    try:
        ctx.load_verify_locations(cadata=_pem_text(inline))
    except (ssl.SSLError, OSError, ValueError) as e:
        raise TlsConfigError(f"{settings.key('ssl.truststore.certificates')}: no PEM certificate could be loaded: "
                             f"{_reason(e, settings)}") from None
    return True


def _pem_text(text: str) -> str:
    """Inline PEM as a properties file may carry it: on one line (a continuation joins the lines) or with its
    line breaks escaped; put back into PEM's lines."""
    text = text.replace("\\n", "\n").strip()
    out = []
    for m in re.finditer(r"(-----BEGIN [A-Z0-9 ]+-----)(.*?)(-----END [A-Z0-9 ]+-----)", text, re.S):
        body = "".join(m.group(2).split())
        lines = [body[i : i + 64] for i in range(0, len(body), 64)]
        out.append("\n".join([m.group(1), *lines, m.group(3)]))
    return "\n".join(out) if out else text


def _missing_pem(path: str) -> str | None:
    """What a PEM key store file lacks ("private key", "certificate"), or None; unreadable text is left to the
    loader's own error."""
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 20)
    except OSError:
        return None
    if b"-----BEGIN" not in text:
        return "PEM text"
    if b"PRIVATE KEY-----" not in text:
        return "private key"
    if b"-----BEGIN CERTIFICATE-----" not in text:
        return "certificate"
    return None


def _readable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.R_OK)


def _why_unreadable(path: str) -> str:
    if not os.path.exists(path):
        return "no such file"
    if os.path.isdir(path):
        return "it is a directory"
    return "permission denied"


def _reason(e: BaseException, settings: TlsSettings) -> str:
    text = getattr(e, "reason", None) or str(e) or type(e).__name__
    text = str(text)
    if "BAD_DECRYPT" in text or "bad decrypt" in text or "PEM lib" in text or "PASSWORD" in text.upper():
        hint = ("wrong " + settings.key("ssl.key.password")) if settings.get("ssl.key.password") is not None \
            else f"an encrypted key needs {settings.key('ssl.key.password')}, or the file is not PEM"
        return f"{text} ({hint}?)"
    if "KEY_VALUES_MISMATCH" in text:
        return "the private key does not belong to the first certificate of the chain"
    if "NO_CERTIFICATE_OR_CRL_FOUND" in text or "no start line" in text.lower():
        return "no PEM certificate found"
    return text


# -- cipher suites ---------------------------------------------------------------------------------------------

_BULK = {
    "AES_128_GCM": "AES128-GCM", "AES_256_GCM": "AES256-GCM", "AES_128_CBC": "AES128", "AES_256_CBC": "AES256",
    "AES_128_CCM": "AES128-CCM", "AES_256_CCM": "AES256-CCM", "CHACHA20_POLY1305": "CHACHA20-POLY1305",
    "CAMELLIA_128_CBC": "CAMELLIA128", "CAMELLIA_256_CBC": "CAMELLIA256",
}
_TLS13 = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                    "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})


def openssl_cipher_name(name: str) -> str | None:
    """OpenSSL's name for a TLS 1.2 suite named the IANA way (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 ->
    ECDHE-RSA-AES128-GCM-SHA256); names already in OpenSSL's form come back as they are; None for a TLS 1.3
    suite (not configurable from Python)."""
    if name in _TLS13:
        return None
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, rest = name[4:].partition("_WITH_")
    found = next(((bulk, short) for bulk, short in _BULK.items() if rest == bulk or rest.startswith(bulk + "_")),
                 None)
    if found is None:
        return name
    bulk, short = found
    mac = rest[len(bulk) + 1 :]
    parts = [] if kx == "RSA" else [kx.replace("_", "-")]
    parts.append(short)
    if mac and short != "CHACHA20-POLY1305":
        parts.append(mac)
    return "-".join(parts)


def _set_ciphers(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    raw = settings.get("ssl.cipher.suites")
    if raw is None:
        return
    names = []
    for suite in (s.strip() for s in raw.split(",")):
        if not suite:
            continue
        name = openssl_cipher_name(suite)
        if name is None:
            continue
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(name)
        except ssl.SSLError:
            raise settings.bad("ssl.cipher.suites", f"cipher suite {suite} is not known to this OpenSSL "
                               f"({ssl.OPENSSL_VERSION})") from None
        names.append(name)
    if names:
        ctx.set_ciphers(":".join(names))


def client_context_of(config: Any, listener: str | None) -> ssl.SSLContext | None:
    """The client side a node uses toward `listener` of its peers (the controller listener for its controller
    channel, the inter-broker listener for its replica fetchers), from its own config's keys for that listener, as
    Kafka does; None for a plaintext listener."""
    protocols = getattr(config, "listener_security_protocol_map", None) or {}
    if not listener or not is_tls(protocols.get(listener, "PLAINTEXT")):
        return None
    return client_context(TlsSettings.for_listener(getattr(config, "properties", None) or {}, listener))


# RFC 2253's keywords (what Java's X500Principal.getName() prints); Python's certificate dict names them so.
_DN_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
                "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
                "domainComponent": "DC", "userId": "UID"}
_DN_SPECIAL = frozenset(',+"\\<>;')


def _dn_value(value: str) -> str:
    out = "".join("\\" + c if c in _DN_SPECIAL else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def certificate_dn(cert: Any) -> str | None:
    """A client certificate's subject as RFC 2253 prints it (Java's X500Principal.getName(): last RDN first,
    ``CN=alice,OU=eng,O=acme``); None without a verified certificate."""
    subject = cert.get("subject") if isinstance(cert, dict) else None
    if not subject:
        return None
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_DN_KEYWORDS.get(k, k)}={_dn_value(str(v))}" for k, v in rdn))
    return ",".join(rdns)


def certificate_principal(cert: Any, mapper: PrincipalMapper | None = None) -> str | None:
    """Kafka's principal for a TLS client certificate: ``User:`` and the name `mapper` (the listener's
    ssl.principal.mapping.rules; None: DEFAULT) makes of the subject's distinguished name. None without a verified
    certificate (the client is then User:ANONYMOUS); `NoMatchingRule` when no rule maps the name."""
    dn = certificate_dn(cert)
    if dn is None:
        return None
    return "User:" + (mapper.name(dn) if mapper is not None else dn)

