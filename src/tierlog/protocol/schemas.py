"""Message versions Kafka serves that kio 0.6.5 has no schema for, written as kio writes its generated ones
(frozen dataclasses with the wire types in field metadata) and added to kio's index, so that parsing,
building, the array guard and the handler registry treat them as any kio schema.

- ApiVersions v5 (Kafka 4.4, KIP-1242): the request adds ``cluster_id`` (nullable string, null by default)
  and ``node_id`` (int32, -1 by default), the cluster and node the client means to reach; the response is
  v4's. A broker answers REBOOTSTRAP_REQUIRED when the given cluster id is not its own or, with a cluster
  id, the node id is not its own.

Importing this module (:mod:`tierlog.protocol` does) installs them; :func:`install` is idempotent.
"""


from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

import kio.index
import kio.schema.index
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

__all__ = ["install"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(18)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    client_software_name: str = field(metadata={"kafka_type": "string"})
    client_software_version: str = field(metadata={"kafka_type": "string"})
    cluster_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    node_id: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersion:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(18)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    api_key: i16 = field(metadata={"kafka_type": "int16"})
    min_version: i16 = field(metadata={"kafka_type": "int16"})
    max_version: i16 = field(metadata={"kafka_type": "int16"})


@dataclass(frozen=True, slots=True, kw_only=True)
class SupportedFeatureKey:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(18)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    min_version: i16 = field(metadata={"kafka_type": "int16"})
    max_version: i16 = field(metadata={"kafka_type": "int16"})


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalizedFeatureKey:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(18)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    max_version_level: i16 = field(metadata={"kafka_type": "int16"})
    min_version_level: i16 = field(metadata={"kafka_type": "int16"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(18)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    api_keys: tuple[ApiVersion, ...]
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    supported_features: tuple[SupportedFeatureKey, ...] = field(metadata={"tag": 0}, default=())
    finalized_features_epoch: i64 = field(metadata={"kafka_type": "int64", "tag": 1}, default=i64(-1))
    finalized_features: tuple[FinalizedFeatureKey, ...] = field(metadata={"tag": 2}, default=())
    zk_migration_ready: bool = field(metadata={"kafka_type": "bool", "tag": 3}, default=False)


# schema name -> version -> (request class, response class)
_ADDED = {"api_versions": {5: (ApiVersionsRequest, ApiVersionsResponse)}}


def _path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def install() -> None:
    """Add the schemas above to kio's index (a read-only mapping, replaced by an extended copy)."""
    index = kio.schema.index.schema_name_map
    if all(v in index.get(name, {}) for name, versions in _ADDED.items() for v in versions):
        return
    extended = dict(index)
    for name, versions in _ADDED.items():
        entries = dict(index.get(name, {}))
        for version, (request, response) in versions.items():
            entries[version] = MappingProxyType({EntityType.request: _path(request),
                                                 EntityType.response: _path(response)})
        extended[name] = MappingProxyType(entries)
    proxy = MappingProxyType(extended)
    kio.schema.index.schema_name_map = proxy
    kio.index.schema_name_map = proxy  # kio.index looks the paths up in its own reference


install()
