"""Reading and writing Java ``.properties`` text the way ``java.util.Properties.load`` does.

The rules, as Kafka's ``server.properties`` relies on them:

* A file is a sequence of natural lines ended by ``\\n``, ``\\r`` or ``\\r\\n``. Blanks (space, tab,
  form feed) at the start of every natural line are skipped.
* A line whose first non-blank character is ``#`` or ``!`` is a comment; a blank line is ignored. A
  comment line never continues onto the next line.
* A line ending in an odd number of backslashes continues on the next natural line: the backslash and
  the line break go away, and so do the blanks at the start of the next line. A backslash at the very
  end of the text is dropped.
* The key runs up to the first unescaped ``=``, ``:`` or blank. Blanks after the key, then at most
  one ``=`` or ``:``, then blanks, are skipped; the rest of the line is the value (trailing blanks
  kept). A line with only a key gives the empty value.
* In keys and values ``\\t``, ``\\n``, ``\\r``, ``\\f`` and ``\\uXXXX`` are decoded, and a backslash
  before any other character yields that character (``\\=``, ``\\:``, ``\\ ``, ``\\#``, ``\\\\``).
* A key given twice keeps its last value.

tierlog reads files as UTF-8 and falls back to ISO-8859-1 (Java's encoding for ``Properties.load``)
when the bytes are not valid UTF-8.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping

_BLANKS = " \t\f"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesSyntaxError(ValueError):
    """Malformed ``.properties`` text (a bad ``\\uXXXX`` escape); ``line`` is 1-based."""

    def __init__(self, message: str, line: int, source: str | None = None):
        where = f"{source}:{line}" if source else f"line {line}"
        super().__init__(f"{where}: {message}")
        self.line = line
        self.source = source


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Yield (first natural line number, logical line) with continuations joined and comments dropped."""
    natural = _LINE_BREAK.split(text)
    i = 0
    while i < len(natural):
        start = i + 1
        line = natural[i].lstrip(_BLANKS)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts: list[str] = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 0:
                parts.append(line)
                break
            parts.append(line[:-1])
            if i >= len(natural):
                break
            line = natural[i].lstrip(_BLANKS)
            i += 1
        yield start, "".join(parts)


def _unescape(raw: str, line: int, source: str | None) -> str:
    if "\\" not in raw:
        return raw
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        ch = raw[i]
        i += 1
        if ch != "\\":
            out.append(ch)
            continue
        if i >= n:  # a lone backslash at the end: nothing to escape
            break
        ch = raw[i]
        i += 1
        if ch == "u":
            digits = raw[i : i + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesSyntaxError("Malformed \\uxxxx encoding.", line, source)
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(ch, ch))
    text = "".join(out)
    # \uXXXX escapes are UTF-16 code units: join surrogate pairs into one character.
    try:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        return text


def _split(logical: str) -> tuple[str, str]:
    n = len(logical)
    key_end = n
    value_start = n
    has_sep = False
    backslash = False
    for pos, ch in enumerate(logical):
        if not backslash and ch in "=:":
            key_end, value_start, has_sep = pos, pos + 1, True
            break
        if not backslash and ch in _BLANKS:
            key_end, value_start = pos, pos + 1
            break
        backslash = (not backslash) if ch == "\\" else False
    while value_start < n:
        ch = logical[value_start]
        if ch not in _BLANKS:
            if not has_sep and ch in "=:":
                has_sep = True
            else:
                break
        value_start += 1
    return logical[:key_end], logical[value_start:]


def parse_properties(text: str, source: str | None = None) -> dict[str, str]:
    """Parse ``.properties`` text into a dict (insertion order = first appearance of each key).

    ``source`` only names the text in error messages. Raises :class:`PropertiesSyntaxError`."""
    if text.startswith("\ufeff"):
        text = text[1:]
    result: dict[str, str] = {}
    for line, logical in _logical_lines(text):
        raw_key, raw_value = _split(logical)
        result[_unescape(raw_key, line, source)] = _unescape(raw_value, line, source)
    return result


def decode_properties(data: bytes) -> str:
    """Decode file bytes: UTF-8 (a byte order mark is dropped), else ISO-8859-1 like Java."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("iso-8859-1")


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read and parse a ``.properties`` file. Raises OSError or :class:`PropertiesSyntaxError`."""
    with open(path, "rb") as f:
        data = f.read()
    return parse_properties(decode_properties(data), source=os.fspath(path))


def _escape(text: str, is_key: bool) -> str:
    out: list[str] = []
    for pos, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\f":
            out.append("\\f")
        elif ch in "=:#!":
            out.append("\\" + ch)
        elif ch == " " and (is_key or pos == 0):
            out.append("\\ ")
        elif ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str]) -> str:
    """Write ``props`` as ``.properties`` text that :func:`parse_properties` reads back unchanged.

    Characters outside ASCII are written as themselves (the text is meant to be saved as UTF-8)."""
    return "".join(f"{_escape(k, True)}={_escape(v, False)}\n" for k, v in props.items())


__all__ = [
    "PropertiesSyntaxError",
    "decode_properties",
    "format_properties",
    "load_properties",
    "parse_properties",
]
