"""Kafka request parsing and response encoding on top of kio, sans-IO.

A frame (the bytes after the 4-byte size, see :mod:`tierlog.protocol.framing`) becomes a
:class:`RequestContext` with :func:`parse_request`; a kio response object becomes a complete
response frame (size prefix, response header, body) with :func:`encode_response`.

Errors the server must handle when parsing (all subclasses of :class:`RequestParseError`, which is
a :class:`tierlog.errors.KafkaError`):

- :class:`UnsupportedApiKeyError` - an API key kio does not know. Kafka closes the connection.
- :class:`UnsupportedApiVersionError` - a version kio does not know. For ApiVersions the broker
  answers with a v0 ApiVersionsResponse carrying UNSUPPORTED_VERSION and its ranges (KIP-511; see
  :func:`tierlog.protocol.registry.api_versions_fallback_frame`); for anything else it closes the
  connection. ``exc.header`` holds the api key, version and correlation id read from the fixed
  part of the header, so the answer can be correlated.
- :class:`MalformedRequestError` - the bytes do not parse. Kafka closes the connection.

Bytes after the request body are ignored (librdkafka's AdminClient sends 3 extra bytes with
Metadata v13); ``RequestContext.trailing_bytes`` counts them.

Before kio's native reader runs, a generated guard (:mod:`tierlog.protocol._guard`) checks every
array length against the bytes that remain: kio 0.6.5 reserves memory for the announced length
and a bogus one aborts the whole process.

Response encoding goes through :func:`write_response`, which writes into any object with a
``write`` method. kio's writers hand a records field to ``write`` as one object, so a later
``encode_response_parts`` for big Fetch responses can pass a writer that keeps large buffers as
separate parts (prefix, records from the segment, suffix) for ``writelines``/``sendfile`` instead of
copying them into one ``bytes``; :func:`tierlog.protocol.framing.encode_frame_parts` adds the size.
"""

from __future__ import annotations

import enum
import io
import struct
from dataclasses import dataclass
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_from_request, load_response_schema
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from tierlog import errors
from tierlog.protocol._bigread import read_body as _read_body_in_slices
from tierlog.protocol._guard import ArrayTooLong, guard_for
from tierlog.protocol.hot_responses import own_part

__all__ = [
    "ApiKey",
    "MalformedRequestError",
    "RequestContext",
    "RequestHeaderInfo",
    "RequestParseError",
    "UnsupportedApiKeyError",
    "UnsupportedApiVersionError",
    "encode_request",
    "encode_response",
    "encode_response_frame",
    "parse_request",
    "parse_request_header",
    "parse_response",
    "request_types",
    "write_response",
]

ApiKey = enum.IntEnum("ApiKey", {name.upper(): key for key, name in sorted(api_key_map.items())})
"""Kafka API keys known to kio, with Kafka's names: ``ApiKey.PRODUCE == 0``, ``ApiKey.API_VERSIONS == 18``."""

_HEAD = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# What kio's native readers raise on bad input: its own errors, ValueError (e.g. "negative array
# length", bad UTF-8), KeyError (an unknown tag), and the overflow/type errors of bogus values.
_DECODE_ERRORS = (SerialError, ArrayTooLong, ValueError, KeyError, IndexError, TypeError, OverflowError,
                  struct.error)


@dataclass(frozen=True, slots=True)
class RequestHeaderInfo:
    """The fixed start of every request header, readable even when the body is not."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    @property
    def api_name(self) -> str:
        if self.api_key in api_key_map:
            return ApiKey(self.api_key).name
        return f"UNKNOWN({self.api_key})"


class RequestParseError(errors.KafkaError):
    """A request frame that cannot be turned into a :class:`RequestContext`."""

    def __init__(self, message: str, header: RequestHeaderInfo | None = None):
        super().__init__(message)
        self.header = header


class UnsupportedApiKeyError(RequestParseError, errors.InvalidRequestError):
    """The API key is unknown (to kio, hence to tierlog)."""


class UnsupportedApiVersionError(RequestParseError, errors.UnsupportedVersionError):
    """The API key is known but not at this version."""


class MalformedRequestError(RequestParseError, errors.InvalidRequestError):
    """The bytes do not form a valid request of the announced API and version."""


def parse_request_header(frame) -> RequestHeaderInfo:
    """Read api key, api version, correlation id and client id from a request frame.

    These sit at the same place in every request header version, so this works for APIs and
    versions kio does not know. Raises :class:`MalformedRequestError` when the frame is too short.
    """
    try:
        api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
        (length,) = _I16.unpack_from(frame, 8)
        if length < 0:
            client_id = None
        else:
            raw = bytes(frame[10:10 + length])
            if len(raw) < length:
                raise MalformedRequestError(f"request header truncated in client_id ({len(frame)} bytes)")
            client_id = raw.decode("utf-8", "replace")
    except struct.error:
        raise MalformedRequestError(f"request frame of {len(frame)} bytes is shorter than a request header") \
            from None
    return RequestHeaderInfo(api_key, api_version, correlation_id, client_id)


def _header_or_none(frame) -> RequestHeaderInfo | None:
    """The header for an error report: without client_id if that is cut short, None if less remains."""
    try:
        return parse_request_header(frame)
    except MalformedRequestError:
        if len(frame) < 8:
            return None
        return RequestHeaderInfo(*_HEAD.unpack_from(frame, 0), None)


class _Schema:
    """Everything needed to read one (api key, version) request and answer it; built once."""

    __slots__ = ("request_type", "response_type", "read_header", "read_body", "guard")

    def __init__(self, request_type: type) -> None:
        self.request_type = request_type
        self.response_type = load_response_from_request(request_type)
        self.read_header = entity_reader(request_type.__header_schema__)
        self.read_body = entity_reader(request_type)
        self.guard = guard_for(request_type)


_schemas: dict[tuple[int, int], _Schema] = {}


def _schema(api_key: int, api_version: int, frame=None) -> _Schema:
    schema = _schemas.get((api_key, api_version))
    if schema is not None:
        return schema
    header = _header_or_none(frame) if frame is not None else None
    if api_key not in api_key_map:
        raise UnsupportedApiKeyError(f"unknown api key {api_key}", header)
    try:
        request_type = load_request_schema(api_key, api_version)
    except KioIndexError:
        raise UnsupportedApiVersionError(
            f"{ApiKey(api_key).name} version {api_version} is not supported", header) from None
    schema = _Schema(request_type)
    _schemas[(api_key, api_version)] = schema
    return schema


def request_version_known(api_key: int, api_version: int) -> bool:
    """Whether kio has the request schema of this version, from its index alone (importing every
    schema module costs about a second at broker start); the module is loaded at the first request."""
    try:
        from kio.index import EntityType, _name_from_key, schema_name_map
        versions = schema_name_map[_name_from_key(api_key)]
    except (ImportError, KeyError, AttributeError):  # kio's index layout changed: load the schema instead
        try:
            _schema(api_key, api_version)
            return True
        except RequestParseError:
            return False
    return EntityType.request in versions.get(api_version, {})


def request_types(api_key: int, api_version: int) -> tuple[type, type]:
    """(kio request class, kio response class) for an API version; raises the errors above."""
    schema = _schema(api_key, api_version)
    return schema.request_type, schema.response_type


class RequestTiming:
    """A request's time spent waiting in purgatory (long-polling fetches, acks=all, replicated offset commits),
    which the replica manager adds to as it waits and the socket server's request quota leaves out: Kafka
    counts only a request handler thread's time, not a request's time in purgatory."""

    __slots__ = ("purgatory_s",)

    def __init__(self) -> None:
        self.purgatory_s = 0.0

    def add_wait(self, seconds: float) -> None:
        self.purgatory_s += seconds


class RequestContext:
    """A request as its handler sees it (Kafka's RequestContext): routing fields, kio header and body objects,
    the types to answer with, and who sent it over what.

    ``request`` is the kio dataclass for the request's version; ``response_type`` is the kio
    response class of the same version. ``trailing_bytes`` counts bytes after the body that were
    ignored. The socket server fills in, per request, ``session`` (the connection's
    :class:`~tierlog.security.session.Session`: principal, client address, listener, security protocol),
    ``sasl`` (the connection's SASL state on a SASL listener, for SaslHandshake and SaslAuthenticate) and
    ``timing`` (a :class:`RequestTiming` the replica manager's waits are added to). Instances are treated as
    immutable, but for ``throttle_ms``: the client quota throttle a handler gave the request, for which the
    socket server mutes the connection once it answered (KIP-219).
    """

    __slots__ = ("api_key", "api_version", "correlation_id", "header", "request", "frame_size",
                 "trailing_bytes", "_schema", "throttle_ms", "session", "sasl", "timing")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, header: Any, request: Any,
                 frame_size: int, trailing_bytes: int = 0, schema: _Schema | None = None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.header = header
        self.request = request
        self.frame_size = frame_size
        self.trailing_bytes = trailing_bytes
        self._schema = schema if schema is not None else _schema(api_key, api_version)
        self.throttle_ms = 0
        self.session = None  # who sent it (tierlog.security.session.Session), set by the socket server
        self.sasl = None  # the connection's SASL authentication (None on PLAINTEXT and SSL listeners)
        self.timing: RequestTiming | None = None  # set when a request quota applies (its waits are left out)

    @property
    def listener(self) -> str | None:
        """The listener the request came in on (None for a request made in process, without a connection)."""
        return self.session.listener if self.session is not None else None

    @property
    def security_protocol(self) -> str | None:
        return self.session.security_protocol if self.session is not None else None

    @property
    def principal(self):
        return self.session.principal if self.session is not None else None

    @property
    def client_address(self) -> str | None:
        return self.session.client_host if self.session is not None else None

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def request_type(self) -> type:
        return self._schema.request_type

    @property
    def response_type(self) -> type:
        return self._schema.response_type

    @property
    def api_name(self) -> str:
        return ApiKey(self.api_key).name

    def __repr__(self) -> str:
        return (f"RequestContext({self.api_name} v{self.api_version}, correlation_id={self.correlation_id}, "
                f"client_id={self.client_id!r}, {self.frame_size} bytes)")


def parse_request(frame, *, in_slices: bool = False) -> RequestContext:
    """Parse one request frame (the bytes after the size prefix).

    ``frame`` should be ``bytes`` (kio's readers need a read-only buffer); other bytes-like
    objects are accepted and copied first when writable. ``in_slices`` reads the body in many short
    native calls (:mod:`tierlog.protocol._bigread`) instead of one, so that a big frame parsed in a
    worker thread lets the other threads (the event loop) run meanwhile; the result is the same.
    """
    if type(frame) is not bytes:
        frame = _readonly(frame)
    try:
        api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
    except struct.error:
        raise MalformedRequestError(
            f"request frame of {len(frame)} bytes is shorter than a request header") from None
    schema = _schemas.get((api_key, api_version)) or _schema(api_key, api_version, frame)
    try:
        header, header_size = schema.read_header(frame, 0)
        schema.guard(frame, header_size)
        if in_slices:
            request, body_size = _read_body_in_slices(schema.request_type, frame, header_size)
        else:
            request, body_size = schema.read_body(frame, header_size)
    except _DECODE_ERRORS as exc:
        raise MalformedRequestError(
            f"cannot parse {ApiKey(api_key).name} v{api_version} request: {exc!r}", _header_or_none(frame)
        ) from exc
    size = len(frame)
    return RequestContext(api_key, api_version, correlation_id, header, request, size,
                          size - header_size - body_size, schema)


def _readonly(frame):
    if isinstance(frame, memoryview) and frame.readonly:
        return frame
    return bytes(frame)


# -- responses ------------------------------------------------------------------------------------

class _Writers:
    __slots__ = ("header_type", "write_header", "write_body")

    def __init__(self, payload_type: type) -> None:
        self.header_type = payload_type.__header_schema__
        self.write_header = entity_writer(self.header_type)
        self.write_body = entity_writer(payload_type)


_writers: dict[type, _Writers] = {}


def _writers_for(payload_type: type) -> _Writers:
    w = _writers.get(payload_type)
    if w is None:
        w = _writers[payload_type] = _Writers(payload_type)
    return w


def write_response(out, correlation_id: int, response: Any) -> None:
    """Write response header (v0 or v1, as kio's class says) and body to ``out`` (no size prefix)."""
    w = _writers.get(type(response)) or _writers_for(type(response))
    w.write_header(out, w.header_type(correlation_id=correlation_id))
    w.write_body(out, response)


class _PartsWriter:
    """A ``write`` target that keeps non-bytes objects (file regions) and large ``bytes`` as parts of
    their own, so records are never copied while the response is encoded."""

    __slots__ = ("parts", "_buf", "size")

    def __init__(self) -> None:
        self.parts: list = []
        self._buf = bytearray(b"\0\0\0\0")
        self.size = 0

    def write(self, data) -> int:
        if own_part(data):
            self.parts += (bytes(self._buf), data)
            self._buf = bytearray()
        else:
            self._buf += data
        n = len(data)
        self.size += n
        return n

    def finish(self) -> list:
        if self._buf:
            self.parts.append(bytes(self._buf))
        first = self.parts[0]
        self.parts[0] = _I32.pack(self.size) + first[4:]
        return self.parts


def encode_response_parts(ctx: RequestContext, response: Any) -> list:
    """Like :func:`encode_response`, as a list of parts: ``bytes``, and any records value that is
    not bytes-like (a file region with ``__len__``) kept as its own part for sendfile."""
    if type(response) is not ctx.response_type:
        return [encode_response(ctx, response)]
    out = _PartsWriter()
    write_response(out, ctx.correlation_id, response)
    return out.finish()


def encode_response_frame(correlation_id: int, response: Any) -> bytes:
    """A complete response frame: size prefix, response header, body."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    write_response(out, correlation_id, response)
    size = out.tell() - 4
    out.seek(0)
    out.write(_I32.pack(size))
    return out.getvalue()


def encode_response(ctx: RequestContext, response: Any) -> bytes:
    """The response frame answering ``ctx``.

    ``response`` must be the kio response class of the request's API and version, with one
    exception from KIP-511: an ApiVersions request may be answered at v0 (the UNSUPPORTED_VERSION
    fallback).
    """
    rtype = type(response)
    if rtype is not ctx.response_type and not (
        ctx.api_key == ApiKey.API_VERSIONS and getattr(rtype, "__api_key__", None) == ApiKey.API_VERSIONS
        and rtype.__version__ == 0
    ):
        raise TypeError(f"{rtype.__module__}.{rtype.__qualname__} does not answer "
                        f"{ctx.api_name} v{ctx.api_version}; expected {ctx.response_type.__module__}")
    return encode_response_frame(ctx.correlation_id, response)


# -- the client side: requests out, responses in ----------------------------------------------------

def encode_request(request: Any, correlation_id: int, client_id: str | None = None) -> bytes:
    """A complete request frame (size prefix, request header v1 or v2 as kio says, body)."""
    w = _writers.get(type(request)) or _writers_for(type(request))
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    w.write_header(out, w.header_type(request_api_key=request.__api_key__,
                                      request_api_version=request.__version__,
                                      correlation_id=correlation_id, client_id=client_id))
    w.write_body(out, request)
    size = out.tell() - 4
    out.seek(0)
    out.write(_I32.pack(size))
    return out.getvalue()


_response_readers: dict[type, tuple] = {}


def parse_response(frame, response_type: type) -> tuple[int, Any]:
    """Parse a response frame (bytes after the size prefix) as ``response_type``.

    Returns ``(correlation_id, response)``. Raises :class:`kio.serial.errors.DecodeError` (or the
    guard's ``ValueError``) on bad bytes. An ApiVersions response with a non-zero error code is
    read as v0 whatever version was asked for when it is UNSUPPORTED_VERSION, the one error a broker answers
    at v0 (KIP-511); another error (KIP-1242's REBOOTSTRAP_REQUIRED) comes at the version asked.
    """
    if type(frame) is not bytes:
        frame = _readonly(frame)
    # ApiVersions: header v0 is 4 bytes and the body starts with the int16 error code.
    if (response_type.__api_key__ == ApiKey.API_VERSIONS and response_type.__version__ > 0
            and len(frame) >= 6 and _I16.unpack_from(frame, 4)[0] == errors.UnsupportedVersionError.code):
        response_type = load_response_schema(ApiKey.API_VERSIONS, 0)
    readers = _response_readers.get(response_type)
    if readers is None:
        readers = _response_readers[response_type] = (entity_reader(response_type.__header_schema__),
                                                      guard_for(response_type), entity_reader(response_type))
    read_header, guard, read_body = readers
    header, n = read_header(frame, 0)
    guard(frame, n)
    response, _ = read_body(frame, n)
    return header.correlation_id, response
