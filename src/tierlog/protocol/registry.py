"""Which API versions the broker implements, and the ApiVersions answer derived from that.

Handlers register with a version range::

    registry = HandlerRegistry()

    @registry.handles(ApiKey.METADATA, 0, 13)
    async def metadata(ctx: RequestContext, ...) -> MetadataResponse: ...

The ApiVersions response is built from :meth:`HandlerRegistry.supported_versions`, so what the
broker advertises is exactly what it has handlers for. Registration checks that kio can parse
every version in the range, so a parse never fails for an advertised version.

The registry does not fix the handler's call signature (the server decides what to pass beyond
the :class:`~tierlog.protocol.messages.RequestContext`); it only requires an async callable.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from tierlog.protocol.builder import build
from tierlog.protocol.messages import (
    ApiKey,
    RequestContext,
    RequestHeaderInfo,
    RequestParseError,
    UnsupportedApiKeyError,
    UnsupportedApiVersionError,
    encode_response_frame,
    request_version_known,
)

__all__ = [
    "Handler",
    "HandlerRegistry",
    "HandlerSpec",
    "api_versions_fallback_frame",
    "build_api_versions_response",
    "default_registry",
    "fallback_response_frame",
    "handles",
]

Handler = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """One registered handler and the versions of its API it implements (inclusive)."""

    api_key: ApiKey
    min_version: int
    max_version: int
    handler: Handler

    def supports(self, api_version: int) -> bool:
        return self.min_version <= api_version <= self.max_version


def _is_async(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    for klass in type(fn).__mro__:  # an instance of a class with ``async def __call__``
        if "__call__" in klass.__dict__:
            return inspect.iscoroutinefunction(klass.__dict__["__call__"])
    return False


class HandlerRegistry:
    """API key -> handler and version range."""

    def __init__(self) -> None:
        self._specs: dict[int, HandlerSpec] = {}

    def register(self, api_key: int, min_version: int, max_version: int, handler: Handler) -> HandlerSpec:
        try:
            key = ApiKey(api_key)
        except ValueError:
            raise ValueError(f"unknown api key {api_key}") from None
        if not 0 <= min_version <= max_version:
            raise ValueError(f"bad version range {min_version}..{max_version} for {key.name}")
        if key in self._specs:
            raise ValueError(f"{key.name} is already handled by {self._specs[key].handler!r}")
        if not _is_async(handler):
            raise TypeError(f"handler for {key.name} must be an async callable, got {handler!r}")
        for version in range(min_version, max_version + 1):
            if not request_version_known(key, version):  # kio must know it: advertised implies parseable
                raise ValueError(f"cannot handle {key.name} v{version}: kio has no schema for it")
        spec = HandlerSpec(key, min_version, max_version, handler)
        self._specs[key] = spec
        return spec

    def wrap(self, api_key: int, wrapper: Callable[[Handler], Handler]) -> Handler:
        """Replace ``api_key``'s handler with ``wrapper(handler)`` (same versions); returns the original."""
        spec = self._specs[ApiKey(api_key)]
        self._specs[spec.api_key] = HandlerSpec(spec.api_key, spec.min_version, spec.max_version,
                                                wrapper(spec.handler))
        return spec.handler

    def handles(self, api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
        """Decorator form of :meth:`register`; returns the handler unchanged."""

        def decorate(handler: Handler) -> Handler:
            self.register(api_key, min_version, max_version, handler)
            return handler

        return decorate

    def resolve(self, api_key: int, api_version: int, header: RequestHeaderInfo | None = None) -> HandlerSpec:
        """The handler for a request; raises the same errors as ``parse_request`` when there is none."""
        spec = self._specs.get(api_key)
        if spec is None:
            raise UnsupportedApiKeyError(f"api key {api_key} is not handled", header)
        if not spec.min_version <= api_version <= spec.max_version:
            raise UnsupportedApiVersionError(
                f"{spec.api_key.name} v{api_version} is not handled "
                f"(supported {spec.min_version}..{spec.max_version})", header)
        return spec

    def for_request(self, ctx: RequestContext) -> HandlerSpec:
        """:meth:`resolve` for a parsed request; errors carry its header for the answer."""
        spec = self._specs.get(ctx.api_key)
        if spec is not None and spec.min_version <= ctx.api_version <= spec.max_version:
            return spec
        header = RequestHeaderInfo(ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.client_id)
        return self.resolve(ctx.api_key, ctx.api_version, header)

    def supported_versions(self) -> dict[ApiKey, tuple[int, int]]:
        """``{api_key: (min_version, max_version)}`` in api key order."""
        return {key: (spec.min_version, spec.max_version) for key, spec in sorted(self._specs.items())}

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._specs

    def __iter__(self) -> Iterator[HandlerSpec]:
        return iter(sorted(self._specs.values(), key=lambda s: s.api_key))

    def __len__(self) -> int:
        return len(self._specs)


default_registry = HandlerRegistry()
"""The registry the broker's API modules register into with :func:`handles`."""


def handles(api_key: int, min_version: int, max_version: int, *,
            registry: HandlerRegistry | None = None) -> Callable[[Handler], Handler]:
    """``@handles(ApiKey.FETCH, 4, 16)`` registers into :data:`default_registry` (or ``registry``)."""
    return (registry if registry is not None else default_registry).handles(api_key, min_version, max_version)


def build_api_versions_response(version: int, registry: HandlerRegistry,
                                error_code: ErrorCode | int = ErrorCode.none,
                                throttle_time_ms: int = 0) -> Any:
    """The ApiVersionsResponse of ``version`` listing every registered API and its versions."""
    return build(load_response_schema(ApiKey.API_VERSIONS, version), {
        "error_code": error_code,
        "api_keys": [{"api_key": key, "min_version": lo, "max_version": hi}
                     for key, (lo, hi) in registry.supported_versions().items()],
        "throttle_time_ms": throttle_time_ms,
    })


def api_versions_fallback_frame(correlation_id: int, registry: HandlerRegistry) -> bytes:
    """KIP-511: the v0 ApiVersionsResponse frame with UNSUPPORTED_VERSION and the supported ranges.

    The answer to an ApiVersions request of a version the broker does not know; the client
    retries with the highest version it finds for ApiVersions in the list.
    """
    response = build_api_versions_response(0, registry, ErrorCode.unsupported_version)
    return encode_response_frame(correlation_id, response)


def fallback_response_frame(exc: RequestParseError, registry: HandlerRegistry) -> bytes | None:
    """The frame to send for a request that failed to parse or resolve, or None to close.

    Only an ApiVersions request of an unsupported version gets an answer; everything else closes
    the connection, as Kafka does.
    """
    header = exc.header
    if (isinstance(exc, UnsupportedApiVersionError) and header is not None
            and header.api_key == ApiKey.API_VERSIONS):
        return api_versions_fallback_frame(header.correlation_id, registry)
    return None
