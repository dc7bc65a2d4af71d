"""Who a connection is: Kafka's ``KafkaPrincipal`` and the mapping of a TLS client certificate to one.

A plaintext connection is ``User:ANONYMOUS``. A TLS connection whose client presented a certificate is
``User:<name>``, where the name comes from the certificate's subject, written as Java's
``X500Principal.getName()`` writes it (RFC 2253: the last RDN first, ``CN=client,OU=eng,O=acme,C=US``), then
passed through ``ssl.principal.mapping.rules`` (Kafka's ``SslPrincipalMapper``):

- the rules are tried in order; the first that matches the whole name gives the principal name;
- ``RULE:pattern/replacement/`` matches ``pattern`` (a regular expression) against the whole name and
  replaces it with ``replacement`` (``$1`` refers to a group); a trailing ``L`` or ``U`` lowercases or
  uppercases the result;
- ``DEFAULT`` takes the name unchanged (the default value of the setting);
- no rule matching is an error: the connection is refused, as Kafka refuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")

# Kafka's grammar: DEFAULT, or RULE:pattern/replacement/[LU] where / and \ may be escaped with \.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule matches a certificate's subject."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        out = self.pattern.sub(self.replacement, name)
        if self.lower:
            return out.lower()
        if self.upper:
            return out.upper()
        return out


def _python_replacement(java: str, groups: int) -> str:
    """Java's replacement syntax ($1, \\$ for a literal $) in Python's (\\g<1>); a $n beyond the pattern's
    groups stays literal, as Kafka escapes it before Java sees it."""
    out = []
    i = 0
    while i < len(java):
        ch = java[i]
        if ch == "\\" and i + 1 < len(java):
            nxt = java[i + 1]
            out.append("\\\\" if nxt == "\\" else nxt)
            i += 2
            continue
        if ch == "$":
            m = re.match(r"\d+", java[i + 1:])
            if m and int(m.group()) <= groups:
                out.append(f"\\g<{int(m.group())}>")
                i += 1 + len(m.group())
                continue
            out.append("$")
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_rules(text: str) -> list[_Rule]:
    """The rules of an ``ssl.principal.mapping.rules`` value; ValueError naming the bad rule."""
    rules: list[_Rule] = []
    text = (text or "").strip()  # empty: no rule at all, so no certificate maps (as in Kafka)
    pos = 0
    pieces = []
    while pos < len(text):
        m = _SPLITTER.match(text, pos)
        if m is None or m.end() == pos:
            break
        pieces.append(m.group(1))
        pos = m.end()
    for piece in pieces:
        m = _PARSER.match(piece)
        if m is None:
            raise ValueError(f"Invalid rule: {piece}")
        if m.end() != len(piece):
            raise ValueError(f"Invalid rule: `{piece}`, unmatched substring: `{piece[m.end():]}`")
        if m.group(1):
            rules.append(_Rule(None))
        elif m.group(2) is not None:
            try:
                pattern = re.compile(m.group(2))
            except re.error as e:
                raise ValueError(f"Invalid rule: {piece}: {e}") from None
            rules.append(_Rule(pattern, _python_replacement(m.group(3), pattern.groups), m.group(4) == "L",
                               m.group(4) == "U"))
        elif m.group(5):
            raise ValueError(f"Invalid rule: {piece}")
    return rules


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules`` applied to a distinguished name."""

    def __init__(self, rules: str = "DEFAULT"):
        self.rules = parse_rules(rules)

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            out = rule.apply(distinguished_name)
            if out is not None:
                return out
        raise NoMatchingRule(f"No rule of ssl.principal.mapping.rules applies to {distinguished_name}")


def subject_name(der_certificate: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` (RFC 2253) spells it."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()


def ssl_principal(der_certificate: bytes | None, mapper: SslPrincipalMapper) -> KafkaPrincipal:
    """The principal of a TLS connection: ANONYMOUS without a client certificate (as Kafka), else
    ``User:`` and the mapped subject. NoMatchingRule when no rule applies."""
    if not der_certificate:
        return ANONYMOUS
    return KafkaPrincipal(USER_TYPE, mapper.name(subject_name(der_certificate)))
