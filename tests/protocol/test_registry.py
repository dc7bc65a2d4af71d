import asyncio

import pytest
from kio.schema.errors import ErrorCode

from tierlog.protocol.messages import (
    ApiKey,
    UnsupportedApiKeyError,
    UnsupportedApiVersionError,
    parse_request,
)
from tierlog.protocol.registry import (
    HandlerRegistry,
    build_api_versions_response,
    default_registry,
    handles,
)

from .helpers import kio_read_response, kio_request_frame, request_type, response_type


def test_decorator_registers_and_returns_the_handler():
    reg = HandlerRegistry()

    @reg.handles(ApiKey.METADATA, 0, 13)
    async def metadata(ctx):
        return "metadata"

    @handles(ApiKey.PRODUCE, 3, 11, registry=reg)
    async def produce(ctx):
        return "produce"

    assert asyncio.run(metadata(None)) == "metadata"
    assert reg.supported_versions() == {ApiKey.PRODUCE: (3, 11), ApiKey.METADATA: (0, 13)}
    assert list(reg.supported_versions()) == [0, 3]
    assert ApiKey.METADATA in reg and len(reg) == 2
    assert [s.api_key for s in reg] == [ApiKey.PRODUCE, ApiKey.METADATA]
    spec = reg.resolve(ApiKey.PRODUCE, 9)
    assert spec.handler is produce and spec.supports(11) and not spec.supports(12)


def test_default_registry_is_separate_from_new_ones():
    assert isinstance(default_registry, HandlerRegistry)
    assert HandlerRegistry().supported_versions() == {}


def test_registration_errors():
    reg = HandlerRegistry()

    async def h(ctx):
        return None

    def sync_handler(ctx):
        return None

    with pytest.raises(ValueError, match="PRODUCE v0"):
        reg.register(ApiKey.PRODUCE, 0, 9, h)  # kio (Kafka 4) starts Produce at v3
    with pytest.raises(ValueError, match="v14"):
        reg.register(ApiKey.METADATA, 0, 14, h)
    with pytest.raises(ValueError, match="range"):
        reg.register(ApiKey.METADATA, 5, 4, h)
    with pytest.raises(ValueError, match="unknown api key"):
        reg.register(4, 0, 0, h)
    with pytest.raises(TypeError, match="async"):
        reg.register(ApiKey.METADATA, 0, 1, sync_handler)
    reg.register(ApiKey.METADATA, 0, 1, h)
    with pytest.raises(ValueError, match="already"):
        reg.register(ApiKey.METADATA, 2, 3, h)
    assert reg.supported_versions() == {ApiKey.METADATA: (0, 1)}


def test_async_callable_objects_are_accepted():
    class Handler:
        async def __call__(self, ctx):
            return None

    reg = HandlerRegistry()
    reg.register(ApiKey.FETCH, 4, 16, Handler())
    assert ApiKey.FETCH in reg


def test_resolve_errors():
    reg = HandlerRegistry()

    async def h(ctx):
        return None

    reg.register(ApiKey.API_VERSIONS, 0, 3, h)
    with pytest.raises(UnsupportedApiKeyError):
        reg.resolve(ApiKey.FETCH, 12)
    with pytest.raises(UnsupportedApiVersionError):
        reg.resolve(ApiKey.API_VERSIONS, 4)
    ctx = parse_request(kio_request_frame(request_type(ApiKey.API_VERSIONS, 4)(
        client_software_name="x", client_software_version="1"), correlation_id=3))
    with pytest.raises(UnsupportedApiVersionError) as info:
        reg.for_request(ctx)
    assert info.value.header.correlation_id == 3
    ctx2 = parse_request(kio_request_frame(request_type(ApiKey.API_VERSIONS, 2)()))
    assert reg.for_request(ctx2).handler is h


@pytest.mark.parametrize("version", range(5))
def test_api_versions_response_advertises_exactly_the_registry(version):
    reg = HandlerRegistry()

    async def h(ctx):
        return None

    for key, lo, hi in [(ApiKey.FETCH, 4, 16), (ApiKey.API_VERSIONS, 0, 4), (ApiKey.PRODUCE, 3, 11),
                        (ApiKey.METADATA, 0, 13), (ApiKey.LIST_OFFSETS, 1, 8)]:
        reg.register(key, lo, hi, h)
    response = build_api_versions_response(version, reg, throttle_time_ms=12)
    assert type(response) is response_type(ApiKey.API_VERSIONS, version)
    listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert listed == dict(reg.supported_versions())
    from tierlog.protocol.messages import encode_response_frame

    _, decoded = kio_read_response(encode_response_frame(1, response), type(response))
    assert decoded == response
    if version >= 1:
        assert decoded.throttle_time.total_seconds() == 0.012
    error = build_api_versions_response(version, reg, error_code=ErrorCode.unsupported_version)
    assert error.error_code == ErrorCode.unsupported_version
