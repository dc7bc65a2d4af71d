"""Kafka wire protocol, sans-IO: framing, request parsing and response encoding (kio), handlers.

- :mod:`.framing` - size-prefixed frames from a byte stream (:class:`FrameDecoder`).
- :mod:`.messages` - :func:`parse_request` -> :class:`RequestContext`; :func:`encode_response`.
- :mod:`.registry` - handlers per API and version range; the ApiVersions answer derived from them.
- :mod:`.builder` - kio message objects of any version from plain values (:func:`build`).
- :mod:`.hot_responses` - the Produce and Fetch responses written straight to bytes (the hot paths' answers).
- :mod:`.schemas` - message versions Kafka serves that kio lacks (ApiVersions v5), added to kio's index.
"""

from tierlog.protocol import schemas  # noqa: F401 - adds the schemas kio lacks to its index on import
from tierlog.protocol.builder import build, build_response, zero_value
from tierlog.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    FrameTooLargeError,
    InvalidFrameError,
    encode_frame,
    encode_frame_parts,
    size_prefix,
)
from tierlog.protocol.messages import (
    ApiKey,
    MalformedRequestError,
    RequestContext,
    RequestHeaderInfo,
    RequestParseError,
    RequestTiming,
    UnsupportedApiKeyError,
    UnsupportedApiVersionError,
    encode_request,
    encode_response,
    encode_response_frame,
    encode_response_parts,
    parse_request,
    parse_request_header,
    parse_response,
    request_types,
    write_response,
)
from tierlog.protocol.registry import (
    HandlerRegistry,
    HandlerSpec,
    api_versions_fallback_frame,
    build_api_versions_response,
    default_registry,
    fallback_response_frame,
    handles,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "ApiKey",
    "FrameDecoder",
    "FrameTooLargeError",
    "HandlerRegistry",
    "HandlerSpec",
    "InvalidFrameError",
    "MalformedRequestError",
    "RequestContext",
    "RequestHeaderInfo",
    "RequestParseError",
    "RequestTiming",
    "UnsupportedApiKeyError",
    "UnsupportedApiVersionError",
    "api_versions_fallback_frame",
    "build",
    "build_api_versions_response",
    "build_response",
    "default_registry",
    "encode_frame",
    "encode_frame_parts",
    "encode_request",
    "encode_response",
    "encode_response_frame",
    "encode_response_parts",
    "fallback_response_frame",
    "handles",
    "parse_request",
    "parse_request_header",
    "parse_response",
    "request_types",
    "size_prefix",
    "write_response",
    "zero_value",
]
