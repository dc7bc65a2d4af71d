"""Kafka's JAAS configuration syntax (``sasl.jaas.config``), parsed.

One or more entries ``<LoginModule class> <flag> [key=value ...];`` where a value is a bare word or a
double-quoted string (backslash escapes the next character inside quotes). Kafka's broker and clients read
the options of the first entry; so does tierlog.
"""

from __future__ import annotations

from dataclasses import dataclass

_FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str]


def _tokens(text: str):
    """Words, quoted strings (kind "q"), '=' and ';'."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            yield c, c
            i += 1
        elif c == '"':
            out = []
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                out.append(text[i])
                i += 1
            if i >= n:
                raise JaasConfigError("unterminated quoted value")
            i += 1
            yield "q", "".join(out)
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"':
                i += 1
            yield "w", text[start:i]


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every entry of a ``sasl.jaas.config`` value; JaasConfigError names what is wrong (never the values:
    they hold passwords)."""
    toks = list(_tokens(text or ""))
    entries: list[JaasEntry] = []
    i = 0
    while i < len(toks):
        kind, module = toks[i]
        if kind != "w":
            raise JaasConfigError("a login module class name is expected at the start of an entry")
        if i + 1 >= len(toks) or toks[i + 1][0] != "w" or toks[i + 1][1].lower() not in _FLAGS:
            raise JaasConfigError(f"login module {module}: a control flag ({', '.join(_FLAGS)}) is expected")
        flag = toks[i + 1][1].lower()
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(toks):
                raise JaasConfigError(f"login module {module}: the entry must end with ';'")
            if toks[i][0] == ";":
                i += 1
                break
            if toks[i][0] not in ("w", "q") or i + 2 >= len(toks) or toks[i + 1][0] != "=" \
                    or toks[i + 2][0] not in ("w", "q"):
                raise JaasConfigError(f"login module {module}: options are key=value")
            options[toks[i][1]] = toks[i + 2][1]
            i += 3
        entries.append(JaasEntry(module, flag, options))
    if not entries:
        raise JaasConfigError("no login module")
    return entries


def login_options(text: str) -> dict[str, str]:
    """The options of the first login module."""
    return parse_jaas_config(text)[0].options


__all__ = ["JaasConfigError", "JaasEntry", "login_options", "parse_jaas_config"]
