"""Turning an exception raised by a handler into the response a client understands."""

from __future__ import annotations

import dataclasses

from tierlog.errors import KafkaError
from tierlog.protocol import RequestContext, build_response


def error_response(ctx: RequestContext, error: KafkaError) -> object | None:
    """A response of the request's API and version carrying ``error``'s code, or None to close.

    Responses with a top-level ``error_code`` get it set (with ``error_message`` when the version
    has one); other APIs have per-item errors that their handlers fill in themselves.
    """
    fields = {f.name for f in dataclasses.fields(ctx.response_type)}
    if "error_code" not in fields:
        return None
    values = {"error_code": error.code}
    if "error_message" in fields:
        values["error_message"] = error.message
    return build_response(ctx, values)
