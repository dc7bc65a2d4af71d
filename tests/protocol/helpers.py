"""Test helpers that use kio directly (not tierlog.protocol) to produce and read wire bytes."""

from __future__ import annotations

import io
import struct

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer


def kio_request_frame(request, correlation_id: int = 1, client_id: str | None = "test-client") -> bytes:
    """Request frame (no size prefix) written with kio's own writers."""
    header_type = type(request).__header_schema__
    out = io.BytesIO()
    entity_writer(header_type)(out, header_type(
        request_api_key=request.__api_key__, request_api_version=request.__version__,
        correlation_id=correlation_id, client_id=client_id))
    entity_writer(type(request))(out, request)
    return out.getvalue()


def kio_read_response(frame_with_size: bytes, response_type: type):
    """(correlation_id, response) from a full response frame, read with kio's own readers."""
    (size,) = struct.unpack_from(">i", frame_with_size, 0)
    assert size == len(frame_with_size) - 4
    payload = bytes(frame_with_size[4:])
    header, n = entity_reader(response_type.__header_schema__)(payload, 0)
    response, m = entity_reader(response_type)(payload, n)
    assert n + m == len(payload), "response has trailing bytes"
    return header.correlation_id, response


def request_type(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


def response_type(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)
