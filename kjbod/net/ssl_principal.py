"""Kafka's ``ssl.principal.mapping.rules``: how a TLS client certificate's distinguished name becomes a principal name.

Strategy:

* The value is a comma-separated list of rules, tried in order; the first rule that yields a name wins. ``DEFAULT``
  yields the distinguished name unchanged (RFC 2253, as `kjbod.net.tls.certificate_dn` prints it).
  ``RULE:pattern/replacement/`` yields the replacement when the pattern matches the whole name, with ``$n`` standing
  for the pattern's groups; a trailing ``L`` or ``U`` (``RULE:pattern/replacement/L``) lowers or raises the case of
  the result. A ``/`` or ``\\`` inside the pattern or the replacement is written ``\\/`` or ``\\\\``; a pattern may
  hold commas. Empty list items are skipped; an empty list maps nothing (every certificate is then refused).
* The list is split and each rule checked the way Kafka's broker does it, so a value Kafka accepts is accepted here
  and one it refuses is refused. Beyond Kafka, everything that could only fail later (a pattern Python's ``re``
  cannot compile, a replacement naming a group the pattern lacks, a ``$`` not followed by a group number) is
  refused when the rules are parsed, naming the rule, so a bad rule stops the node at start instead of failing
  each client's handshake.
* A name that no rule maps is `NoMatchingRule`: the connection is refused, as Kafka fails that client's
  authentication.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_RULES", "NoMatchingRule", "PrincipalMapper", "parse_rules"]

DEFAULT_RULES = "DEFAULT"

# One rule: DEFAULT, RULE:<pattern>/<replacement>/[LU] (each part a run of escaped characters or anything but a
# slash or a backslash), or anything else (refused below). The same text Kafka matches its rules with.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLIT = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)", re.S)
_PARSE = re.compile(_RULE, re.S)


class NoMatchingRule(ValueError):
    """No rule maps this distinguished name."""


@dataclass(frozen=True)
class _Rule:
    text: str
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: tuple[str | int, ...] = ()  # literal text and group numbers, in order
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        parts = self.replacement
        out = self.pattern.sub(lambda m: "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts),
                               dn)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def _replacement(text: str, groups: int, rule: str) -> tuple[str | int, ...]:
    """Java's replacement syntax (``$n`` a group, ``\\x`` the character x), read as Kafka's mapper reads it: a
    ``$n`` past the pattern's groups is literal text when n is one digit, and a longer number is cut to the groups
    there are (``$12`` with one group is group 1, then ``2``)."""
    out: list[str | int] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text):
                raise ValueError(f"invalid rule {rule!r}: the replacement ends with a lone backslash")
            literal.append(text[i + 1])
            i += 2
            continue
        if c != "$":
            literal.append(c)
            i += 1
            continue
        j = i + 1
        if j >= len(text) or not text[j].isdigit():
            raise ValueError(f"invalid rule {rule!r}: '$' in the replacement must be followed by a group number "
                             "(write \\$ for a dollar sign)")
        number = int(text[j])
        j += 1
        if number > groups:
            if groups == 0 or number == 0:
                raise ValueError(f"invalid rule {rule!r}: the replacement names group {number} but the pattern has "
                                 f"{groups} group{'s' if groups != 1 else ''}")
            literal.append(text[i:j])  # Kafka keeps a one-digit reference past the groups as text
            i = j
            continue
        while j < len(text) and text[j].isdigit() and number * 10 + int(text[j]) <= groups:
            number = number * 10 + int(text[j])
            j += 1
        if literal:
            out.append("".join(literal))
            literal = []
        out.append(number)
        i = j
    if literal:
        out.append("".join(literal))
    return tuple(out)


def parse_rules(value: str | None) -> tuple[_Rule, ...]:
    """The rules of an ``ssl.principal.mapping.rules`` value (None: Kafka's default, DEFAULT); ValueError naming
    the first rule that cannot be used."""
    text = (DEFAULT_RULES if value is None else value).strip()
    rules: list[_Rule] = []
    for m in _SPLIT.finditer(text):
        item = m.group(1)
        if m.start() == m.end():
            break  # the empty match at the end
        parsed = _PARSE.match(item)
        if parsed is None or parsed.end() != len(item):
            rest = item[parsed.end():] if parsed is not None else item
            raise ValueError(f"invalid rule {item!r}: unexpected {rest!r} (expected DEFAULT or "
                             "RULE:pattern/replacement/ with an optional L or U after the last slash)")
        if parsed.group(1) is not None:
            rules.append(_Rule(item, None))
        elif parsed.group(2) is not None:
            try:
                pattern = re.compile(parsed.group(2))
            except re.error as e:
                raise ValueError(f"invalid rule {item!r}: the pattern does not compile: {e}") from None
            replacement = _replacement(parsed.group(3), pattern.groups, item)
            rules.append(_Rule(item, pattern, replacement, parsed.group(4) or ""))
        # else: an empty item, skipped as Kafka skips it
    return tuple(rules)


class PrincipalMapper:
    """The parsed rules of one listener; `name(dn)` is the principal name (without ``User:``)."""

    def __init__(self, value: str | None = None) -> None:
        self.rules: Sequence[_Rule] = parse_rules(value)
        self.is_default = [r.pattern for r in self.rules] == [None]

    def name(self, dn: str) -> str:
        for rule in self.rules:
            out = rule.apply(dn)
            if out is not None:
                return out
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule maps {dn!r} (rules: "
                             f"{', '.join(r.text for r in self.rules) or 'none'})")
