"""Subscriptions by regular expression (``SubscribedTopicRegex``), in RE2 syntax as Kafka's RE2/J.

Kafka compiles the expression with RE2/J and a topic matches when the whole name matches. tierlog uses
Google's RE2 through the ``google-re2`` binding, the same syntax and linear-time matching (no backreferences
or lookaround: such an expression is INVALID_REGULAR_EXPRESSION, as with Kafka).
"""

from __future__ import annotations

from functools import lru_cache

import re2

__all__ = ["InvalidRegex", "compile_regex", "matches"]


class InvalidRegex(ValueError):
    """Not a valid RE2 expression; the message says why."""


@lru_cache(maxsize=1024)
def compile_regex(regex: str):
    """The compiled expression; raises :class:`InvalidRegex`."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(regex, options)
    except re2.error as e:
        message = e.args[0] if e.args else str(e)
        raise InvalidRegex(message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)) from None


def matches(regex: str, topic: str) -> bool:
    try:
        return compile_regex(regex).fullmatch(topic) is not None
    except InvalidRegex:
        return False
