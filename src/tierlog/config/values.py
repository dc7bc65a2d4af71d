"""Turning configuration values from text into typed values and back, with Kafka's rules.

Kafka's formats: booleans are ``true`` / ``false`` in any case; numbers are decimal integers that must
fit the type (short 16 bits, int 32 bits, long 64 bits); strings, class names and passwords are
trimmed; lists are comma-separated with the blanks around commas removed and an empty text meaning
the empty list. Typed values given by a program (a Python ``int`` for an int setting, a list for a
list setting) are accepted as they are after the same range checks.
"""

from __future__ import annotations

import decimal
import math
import re
from typing import Any

from tierlog.config.definitions import ALL_CONFIGS, ConfigDef, InSet
from tierlog.errors import InvalidConfigError, KafkaError

_INT_RANGES = {
    "short": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}
_INT_RE = re.compile(r"[+-]?\d+")
_LIST_SPLIT = re.compile(r"\s*,\s*")

#: What describe output and ``repr`` show instead of a sensitive value.
HIDDEN = "[hidden]"

#: Words that make the value of a key without a definition (plugin settings, unknown keys) sensitive.
_SENSITIVE_WORDS = ("password", "secret", "token", "credential", "jaas", "private", "sas_key", "access_key",
                    "account_key", "master_key")


class Password:
    """A password-type value: its text is in ``value`` and never appears in ``repr`` or ``str``."""

    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def __repr__(self) -> str:
        return HIDDEN

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(("Password", self.value))


def looks_sensitive(name: str) -> bool:
    """True for keys without a definition whose name suggests a secret
    (``rsm.config.aws_secret_access_key``)."""
    lowered = name.lower()
    return any(word in lowered for word in _SENSITIVE_WORDS)


#: Names of the password-type settings; a key ending in ``.<name>`` (a listener's override,
#: ``listener.name.ssl.ssl.keystore.key``) is one of them too.
_SENSITIVE_NAMES = frozenset(d.name for d in ALL_CONFIGS if d.sensitive)


def is_sensitive_key(name: str) -> bool:
    """True for a password-type setting (also under a listener or plugin prefix) and for a key whose
    name suggests a secret: its value is never shown, logged or put in an error message."""
    if name in _SENSITIVE_NAMES or looks_sensitive(name):
        return True
    return any(name.endswith("." + s) for s in _SENSITIVE_NAMES)


def invalid(name: str, value: Any, reason: str) -> KafkaError:
    """The error for a refused setting, in Kafka's wording: "Invalid value V for configuration K: reason".
    The value of a sensitive setting (:func:`is_sensitive_key`) is shown as ``[hidden]``: error messages
    reach logs and clients.

    The returned :class:`~tierlog.errors.InvalidConfigError` carries ``config_name``, ``config_value``
    and ``reason`` attributes as well."""
    if value is not None and is_sensitive_key(name):
        value = HIDDEN
    shown = value if isinstance(value, str) else (format_value(value) if value is not None else "null")
    if shown == "":
        shown = '""'
    err = InvalidConfigError(f"Invalid value {shown} for configuration {name}: {reason}")
    err.config_name = name  # type: ignore[attr-defined]
    err.config_value = value  # type: ignore[attr-defined]
    err.reason = reason  # type: ignore[attr-defined]
    return err


def _with_allowed(defn: ConfigDef, reason: str) -> str:
    allowed = defn.allowed()
    return f"{reason} (allowed: {allowed})" if allowed else reason


def parse_typed(defn: ConfigDef, value: Any, name: str | None = None) -> Any:
    """Convert ``value`` (text or already typed) to the type of ``defn`` without range checks.

    Raises InvalidConfigError naming ``name`` (default ``defn.name``), the value and the expected type."""
    key = name or defn.name
    if value is None:
        return None
    t = defn.type
    if t == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            text = value.strip().lower()
            if text in ("true", "false"):
                return text == "true"
        raise invalid(key, value, "Expected value to be either true or false")
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        if isinstance(value, bool):
            raise invalid(key, value, _with_allowed(defn, f"Not a number of type {t}"))
        if isinstance(value, int):
            number = value
        elif isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
            number = int(value.strip())
        else:
            raise invalid(key, value, _with_allowed(defn, f"Not a number of type {t}"))
        if not lo <= number <= hi:
            raise invalid(
                key, value, _with_allowed(defn, f"Not a number of type {t} (must be in [{lo}, {hi}])")
            )
        return number
    if t == "double":
        if isinstance(value, bool):
            raise invalid(key, value, _with_allowed(defn, "Not a number of type double"))
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise invalid(key, value, _with_allowed(defn, "Not a number of type double"))
    if t == "list":
        if isinstance(value, str):
            text = value.strip()
            return [] if not text else _LIST_SPLIT.split(text)
        if isinstance(value, list | tuple):
            return [str(item).strip() for item in value]
        raise invalid(key, value, "Expected a comma-separated list")
    if t == "password":
        if isinstance(value, Password):
            return value
        if isinstance(value, str):
            return Password(value.strip())
        raise invalid(key, HIDDEN, "Expected value to be a string")
    if t == "class":
        if isinstance(value, type):
            return f"{value.__module__}.{value.__qualname__}"
        if isinstance(value, str):
            return value.strip()
        raise invalid(key, value, "Expected a class or the name of a class")
    # string
    if isinstance(value, str):
        return value.strip()
    raise invalid(key, value, f"Expected value to be a string, but it was a {type(value).__name__}")


def check_value(defn: ConfigDef, value: Any, name: str | None = None) -> Any:
    """Run ``defn``'s validator on a typed value; returns the value (canonicalised for aliases and
    case-insensitive sets) or raises InvalidConfigError naming the key, the value and the allowed range."""
    key = name or defn.name
    if isinstance(value, str) and value in defn.value_aliases:
        value = defn.value_aliases[value]
    validator = defn.validator
    if validator is not None and value is not None:
        probe = value.value if isinstance(value, Password) else value
        reason = validator.check(probe)
        if reason is not None:
            shown = HIDDEN if defn.sensitive else value
            raise invalid(key, shown, reason)
        if isinstance(validator, InSet) and isinstance(value, str):
            value = validator.canonical(value)
    return value


def parse_value(defn: ConfigDef, value: Any, name: str | None = None) -> Any:
    """Parse (:func:`parse_typed`) then validate (:func:`check_value`) one value of ``defn``."""
    return check_value(defn, parse_typed(defn, value, name), name)


def format_value(value: Any, type_: str | None = None) -> str | None:
    """Kafka's text form of a typed value (``ConfigDef.convertToString``): booleans in lower case, lists
    joined with commas, passwords hidden, null as None."""
    if value is None:
        return None
    if isinstance(value, Password):
        return HIDDEN
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return java_double(value)
    return str(value)


def java_double(x: float) -> str:
    """Java's ``Double.toString``: plain below 10^7 and from 10^-3 on, else ``d.dddE<n>`` (Kafka prints
    ``log.cleaner.io.max.bytes.per.second``'s default as 1.7976931348623157E308)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    a = abs(x)
    if a == 0 or 1e-3 <= a < 1e7:
        return repr(x)
    _, digits, exp = decimal.Decimal(repr(a)).as_tuple()
    digits = list(digits)
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exp += 1
    mantissa = f"{digits[0]}." + ("".join(map(str, digits[1:])) or "0")
    return ("-" if x < 0 else "") + f"{mantissa}E{len(digits) + exp - 1}"


__all__ = [
    "HIDDEN",
    "Password",
    "check_value",
    "format_value",
    "invalid",
    "java_double",
    "is_sensitive_key",
    "looks_sensitive",
    "parse_typed",
    "parse_value",
]
