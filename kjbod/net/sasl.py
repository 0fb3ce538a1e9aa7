"""SASL (Kafka's security protocols SASL_PLAINTEXT and SASL_SSL): the JAAS config parser, the listener settings and
the PLAIN mechanism, both ends. Sans-IO: bytes in, bytes out, no sockets.

Strategy:

* Settings come from Kafka's keys: ``sasl.enabled.mechanisms`` (a listener's own
  ``listener.name.<listener>.sasl.enabled.mechanisms`` wins), and per mechanism the JAAS text of
  ``listener.name.<listener>.<mechanism in lower case>.sasl.jaas.config`` (a broker's server side; Kafka's brokers
  do not read the plain ``sasl.jaas.config`` for it) or ``sasl.jaas.config`` (a client's config file).
  `SaslSettings.for_listener` resolves and checks them once, when the config is read, so a bad value stops the start
  with one line naming the key (`SaslConfigError`).
* The JAAS text is parsed by a small tokenizer (`parse_jaas`): ``<LoginModule class> <flag> key=value ... ;`` where
  values are quoted strings (backslash escapes a character) or bare words, as Kafka's JaasConfig reads them. One
  login module per key, as Kafka requires for ``sasl.jaas.config``.
* PLAIN (RFC 4616): the client's one token is ``authzid NUL username NUL password``. The server checks the password
  against the JAAS config's ``user_<username>`` option, and answers with Kafka's messages
  (`SaslAuthenticationFailed`). The authorization id, when given, must equal the username, as in Kafka.
* SCRAM-SHA-256/512 are kjbod.net.scram; their credentials live in the metadata log (AlterUserScramCredentials), so
  a listener needs no JAAS configuration for them except the username and password this node logs in with when it
  is the inter-broker or controller mechanism. GSSAPI and OAUTHBEARER are refused at start, naming the key.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "PLAIN",
    "SASL_PROTOCOLS",
    "SERVED_MECHANISMS",
    "JaasModule",
    "PlainServer",
    "SaslAuthenticationFailed",
    "SaslConfigError",
    "SaslCredentials",
    "SaslSettings",
    "client_credentials_of",
    "is_sasl",
    "is_sasl_key",
    "parse_jaas",
    "served_mechanism",
    "jaas_module",
    "credentials_of",
    "plain_client_token",
]

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
PLAIN = "PLAIN"
SERVED_MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's mechanisms that kjbod does not serve (yet), for a message that says so.
KNOWN_MECHANISMS = frozenset({"GSSAPI", "OAUTHBEARER", "SCRAM-SHA-256", "SCRAM-SHA-512", PLAIN})
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
# Kafka's default for sasl.enabled.mechanisms and sasl.mechanism.inter.broker.protocol.
KAFKA_DEFAULT_MECHANISM = "GSSAPI"


class SaslConfigError(ValueError):
    """A SASL setting that cannot be used: one line naming the key."""


class SaslAuthenticationFailed(Exception):
    """A client's credentials or token were refused; the message is what the client is told (Kafka's words),
    `reason` what the server's log says (it may name what the client must not learn, such as an unknown user)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


def is_sasl(security_protocol: str) -> bool:
    return security_protocol.upper() in SASL_PROTOCOLS


# The broker keys kjbod reads here (plain, or for one listener: listener.name.<listener>.<key>).
SASL_KEYS = frozenset({"sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol",
                       "sasl.mechanism.controller.protocol", "connections.max.reauth.ms"})
_LISTENER_SASL = re.compile(r"^listener\.name\.[^.]+\.(?:sasl\.enabled\.mechanisms|[a-z0-9-]+\.sasl\.jaas\.config)$")


def is_sasl_key(key: str) -> bool:
    """A server key this module reads (server.properties accepts it and leaves it to the SASL listeners)."""
    return key in SASL_KEYS or _LISTENER_SASL.match(key) is not None


# -- JAAS ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JaasModule:
    """One login module entry: its class, its control flag and its options."""

    login_module: str
    flag: str
    options: Mapping[str, str]


_FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: 'word', 'string' (quoted, unescaped), '=' and ';'. ValueError on a bad character or an
    unterminated string."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            out.append((c, c))
            i += 1
        elif c == '"':
            i += 1
            chars: list[str] = []
            while True:
                if i >= n:
                    raise ValueError("a quoted value is not closed")
                c = text[i]
                if c == "\\" and i + 1 < n:
                    chars.append(text[i + 1])
                    i += 2
                elif c == '"':
                    i += 1
                    break
                else:
                    chars.append(c)
                    i += 1
            out.append(("string", "".join(chars)))
        elif c.isalnum() or c in "._-$/:":
            start = i
            while i < n and (text[i].isalnum() or text[i] in "._-$/:"):
                i += 1
            out.append(("word", text[start:i]))
        else:
            raise ValueError(f"unexpected character {c!r} at position {i}")
    return out


def parse_jaas(text: str) -> list[JaasModule]:
    """The login modules of a JAAS config value (Kafka's ``sasl.jaas.config`` syntax); ValueError saying what is
    wrong."""
    tokens = _tokens(text)
    modules: list[JaasModule] = []
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        if kind != "word":
            raise ValueError(f"expected a login module class name, found {value!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word" or tokens[i + 1][1].lower() not in _FLAGS:
            found = tokens[i + 1][1] if i + 1 < len(tokens) else "the end"
            raise ValueError(f"expected a control flag (required, requisite, sufficient or optional) after {value}, "
                             f"found {found!r}")
        module, flag = value, tokens[i + 1][1].lower()
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(tokens):
                raise ValueError(f"the entry for {module} does not end with ';'")
            kind, value = tokens[i]
            if kind == ";":
                i += 1
                break
            if kind != "word":
                raise ValueError(f"expected an option name in the entry for {module}, found {value!r}")
            if i + 2 >= len(tokens) or tokens[i + 1][0] != "=" or tokens[i + 2][0] not in ("word", "string"):
                raise ValueError(f"option {value} of {module} needs a value: {value}=\"...\"")
            if value in options:
                raise ValueError(f"option {value} of {module} is given twice")
            options[value] = tokens[i + 2][1]
            i += 3
        modules.append(JaasModule(module, flag, options))
    if not modules:
        raise ValueError("no login module")
    return modules


def jaas_module(text: str, key: str) -> JaasModule:
    """The one login module of a ``sasl.jaas.config`` value; SaslConfigError naming `key` otherwise."""
    try:
        modules = parse_jaas(text)
    except ValueError as e:
        raise SaslConfigError(f"invalid JAAS configuration in {key}: {e}") from None
    if len(modules) != 1:
        raise SaslConfigError(f"invalid JAAS configuration in {key}: it must hold exactly one login module, "
                              f"found {len(modules)}")
    return modules[0]


# -- settings -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SaslCredentials:
    """What a client side authenticates with: the mechanism, the username and the password. `token`: the
    username is a delegation token's id and the password its HMAC in base64 (SCRAM with ``tokenauth=true``)."""

    mechanism: str
    username: str
    password: str
    token: bool = False


@dataclass(frozen=True)
class SaslSettings:
    """One listener's SASL settings, checked: the mechanisms it serves and, per mechanism, its JAAS options."""

    listener: str
    mechanisms: tuple[str, ...]
    jaas: Mapping[str, JaasModule] = field(default_factory=dict)  # mechanism -> its login module
    jaas_keys: Mapping[str, str] = field(default_factory=dict)  # mechanism -> the key that set it
    max_reauth_ms: int = 0  # connections.max.reauth.ms (0: sessions never expire)

    @classmethod
    def for_listener(cls, props: Mapping[str, str], listener: str, *, server: bool = True) -> SaslSettings:
        prefix = f"listener.name.{listener.lower()}."
        key = prefix + "sasl.enabled.mechanisms"
        if key not in props:
            key = "sasl.enabled.mechanisms"
        raw = props.get(key, KAFKA_DEFAULT_MECHANISM)
        mechanisms = tuple(dict.fromkeys(m.strip() for m in raw.split(",") if m.strip()))
        if server:
            if not mechanisms:
                raise SaslConfigError(f"{key} is empty: listener {listener} needs at least one SASL mechanism")
            for m in mechanisms:
                _check_served(m, key, defaulted=key not in props)
        jaas: dict[str, JaasModule] = {}
        jaas_keys: dict[str, str] = {}
        for m in mechanisms:
            jkey = f"{prefix}{m.lower()}.sasl.jaas.config"
            if jkey in props:
                jaas[m], jaas_keys[m] = jaas_module(props[jkey], jkey), jkey
        if server:
            for m in mechanisms:
                if m == PLAIN and m not in jaas:
                    raise SaslConfigError(
                        f"listener {listener} enables PLAIN but has no JAAS configuration naming its users: set "
                        f"{prefix}plain.sasl.jaas.config={PLAIN_LOGIN_MODULE} required user_<name>=\"<password>\" "
                        "...;")
        reauth = props.get("connections.max.reauth.ms", "0").strip() or "0"
        try:
            max_reauth_ms = max(0, int(reauth))
        except ValueError:
            raise SaslConfigError(f"invalid value {reauth!r} for connections.max.reauth.ms: expected an integer "
                                  "(milliseconds)") from None
        return cls(listener, mechanisms, jaas, jaas_keys, max_reauth_ms)

    def users(self, mechanism: str) -> Mapping[str, str]:
        """PLAIN's users: username -> password, from the JAAS options ``user_<name>="<password>"``."""
        module = self.jaas.get(mechanism)
        if module is None:
            return {}
        return {k[len("user_"):]: v for k, v in module.options.items() if k.startswith("user_")}

    def client_credentials(self, mechanism: str) -> SaslCredentials:
        """What this node authenticates with when it connects to this listener as a client (inter-broker and
        controller connections): the JAAS options ``username`` and ``password`` of `mechanism`."""
        _check_served(mechanism, "the client mechanism", defaulted=False)
        module = self.jaas.get(mechanism)
        key = f"listener.name.{self.listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
        if module is None:
            raise SaslConfigError(f"{key} is not set: this node connects to listener {self.listener} with "
                                  f"{mechanism} and needs its username and password there")
        return credentials_of(module, mechanism, self.jaas_keys.get(mechanism, key))


def client_credentials_of(config: Any, listener: str | None, mechanism_key: str) -> SaslCredentials | None:
    """The credentials a node authenticates with toward `listener` of its peers (its controller listener:
    `mechanism_key` sasl.mechanism.controller.protocol; its inter-broker listener: sasl.mechanism.inter.broker.protocol),
    from its own JAAS config for that listener, as Kafka does; None for a listener without SASL."""
    protocols = getattr(config, "listener_security_protocol_map", None) or {}
    if not listener or not is_sasl(protocols.get(listener, "PLAINTEXT")):
        return None
    props = getattr(config, "properties", None) or {}
    mechanism = props.get(mechanism_key, KAFKA_DEFAULT_MECHANISM).strip()
    return SaslSettings.for_listener(props, listener, server=False).client_credentials(mechanism)


def credentials_of(module: JaasModule, mechanism: str, key: str) -> SaslCredentials:
    username, password = module.options.get("username"), module.options.get("password")
    if username is None or password is None:
        raise SaslConfigError(f"{key} has no username=\"...\" and password=\"...\" options: a client needs both")
    token = module.options.get("tokenauth", "false").strip().lower() == "true"  # Kafka's ScramLoginModule option
    return SaslCredentials(mechanism, username, password, token)


def served_mechanism(mechanism: str, key: str) -> str:
    """`mechanism` when kjbod serves it; SaslConfigError naming `key` otherwise."""
    _check_served(mechanism, key, defaulted=False)
    return mechanism


def _check_served(mechanism: str, key: str, *, defaulted: bool) -> None:
    if mechanism in SERVED_MECHANISMS:
        return
    served = ", ".join(SERVED_MECHANISMS)
    if defaulted:
        raise SaslConfigError(f"{key} is not set and Kafka's default is {KAFKA_DEFAULT_MECHANISM} (Kerberos), which "
                              f"kjbod does not serve: set {key} to {served}")
    what = "a Kafka mechanism kjbod does not serve" if mechanism in KNOWN_MECHANISMS else "not a SASL mechanism"
    raise SaslConfigError(f"invalid SASL mechanism {mechanism!r} in {key}: {what} (kjbod serves {served})")


# -- PLAIN ----------------------------------------------------------------------------------------------------------


def plain_client_token(username: str, password: str) -> bytes:
    """PLAIN's one client token (no authorization id, as Kafka's clients send it)."""
    return b"\x00" + username.encode() + b"\x00" + password.encode()


class PlainServer:
    """PLAIN's server side for one exchange: `evaluate` the client's token, which completes or fails it."""

    mechanism = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.principal: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username")
        self.complete = True
        self.principal = username
        return b""
