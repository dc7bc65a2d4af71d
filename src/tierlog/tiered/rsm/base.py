"""What tierlog's built-in storage managers share: config parsing and :class:`LayoutRemoteStorageManager`,
which stores a segment as the objects of :mod:`tierlog.tiered.rsm.layout` in any key/value store.
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

from tierlog.config import plugin_setting
from tierlog.config.definitions import RSM_PREFIX
from tierlog.errors import InvalidConfigError
from tierlog.kafka_uuid import uuid_to_str
from tierlog.records import RECORD_BATCH_OVERHEAD, CompressionType, read_header
from tierlog.tiered.metadata import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from tierlog.tiered.rsm import layout, transforms
from tierlog.tiered.rsm.api import (
    RemoteStorageError,
    RemoteStorageManager,
    check_fetch_range,
    error_from_os,
    resource_not_found,
)

log = logging.getLogger(__name__)


# -------------------------------------------------------------------------------------- config parsing


def config_int(configs: Mapping[str, Any], key: str, default: int | None, minimum: int | None = None) -> int | None:
    value = configs.get(key)
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {key}: Not a number") from None
    if minimum is not None and number < minimum:
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {key}: Value must be at least "
                                 f"{minimum}")
    return number


def rsm_setting(configs: Mapping[str, Any], name: str) -> Any:
    """A built-in backend's setting, with its default and check from the config table (``rsm.config.*``)."""
    return plugin_setting(configs, RSM_PREFIX, name)


# ------------------------------------------------------------------------------ shared built-in backend

#: Settings read by every built-in backend (besides its own ``dir`` / ``url`` ...).
COMMON_CONFIG_KEYS = frozenset({
    "broker.id", "cluster.id", "key.prefix", "key.cluster.id.enable", "custom.metadata.enable", "compression.enable",
    "compression.chunk.size", "compression.level", "compression.heuristic.enable",
})
_MANIFEST_CACHE_SIZE = 1024


class LayoutRemoteStorageManager(RemoteStorageManager):
    """A segment as the three objects of :mod:`tierlog.tiered.layout` in some key/value store.

    Subclasses supply six primitives over keys; this class does the contract: object layout, write
    order (the manifest last, so a segment is readable only once complete), transforms, custom
    metadata, index lookups through the manifest, error wrapping and a small manifest cache.

    Primitives raise FileNotFoundError for a missing object and RemoteStorageError for anything else.
    """

    #: Whether copies return custom metadata unless ``custom.metadata.enable`` says otherwise.
    custom_metadata_default: ClassVar[bool] = False

    def __init__(self) -> None:
        self.configs: dict[str, str] = {}
        self.key_prefix = ""
        self.cluster_id: str | None = None  # given by the broker (or a reader that knows it)
        self.write_prefix = ""  # where copies go: key_prefix, plus the cluster folder in the cluster layout
        self.broker_id = -1
        self.custom_metadata_enabled = self.custom_metadata_default
        self.compression_enabled = self.compression_heuristic = False  # set by configure, from the table
        self.chunk_size = self.compression_level = 0
        self._manifests: OrderedDict[tuple[str, str], tuple[layout.SegmentKeys, layout.SegmentManifest]] = \
            OrderedDict()
        self._loading: dict[tuple[str, str], threading.Lock] = {}  # manifests being read, one reader each
        self._lock = threading.Lock()

    # -- primitives --

    @abc.abstractmethod
    def _put_file(self, key: str, path: str) -> None:
        """Store a local file's content under ``key``, replacing any earlier object atomically."""

    @abc.abstractmethod
    def _put_chunks(self, key: str, chunks: Iterable[bytes]) -> None:
        """Store the concatenated ``chunks`` under ``key``, replacing any earlier object atomically."""

    @abc.abstractmethod
    def _get(self, key: str) -> bytes:
        """The whole object."""

    @abc.abstractmethod
    def _get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer only if the object is shorter); ``length`` > 0."""

    def _local_path(self, key: str) -> str | None:
        """The file on this machine that holds object ``key``, when the store is a folder; else None."""
        return None

    def _get_range_buffer(self, key: str, start: int, length: int) -> bytes | memoryview:
        """:meth:`_get_range` as bytes or a read-only buffer; backends whose client returns an immutable
        buffer of its own hand it over rather than copying it into bytes."""
        return self._get_range(key, start, length)

    def _get_range_into(self, key: str, start: int, buffer: memoryview) -> int:
        """Like :meth:`_get_range` into ``buffer``; the count read. Backends override it to skip a copy."""
        data = self._get_range(key, start, len(buffer))
        buffer[:len(data)] = data
        return len(data)

    @abc.abstractmethod
    def _delete(self, keys: list[str]) -> None:
        """Delete the objects; missing ones are fine."""

    @abc.abstractmethod
    def _list(self, prefix: str) -> list[tuple[str, int]]:
        """(key, size) of the objects whose key starts with ``prefix``, any order."""

    def _put_bytes(self, key: str, data: bytes) -> None:
        self._put_chunks(key, [data])

    def _exists(self, key: str) -> bool:
        """Whether object ``key`` exists (no object of the layout is empty)."""
        try:
            self._get_range(key, 0, 1)
            return True
        except FileNotFoundError:
            return False

    # -- configuration --

    def configure(self, configs: Mapping[str, str]) -> None:
        self.configs = dict(configs)
        try:
            self.key_prefix = layout.check_prefix(str(configs.get("key.prefix", "")))
        except ValueError as e:
            raise InvalidConfigError(f"Invalid value for configuration key.prefix: {e}") from None
        self.broker_id = config_int(configs, "broker.id", -1)
        self.cluster_id = str(configs.get("cluster.id") or "") or None
        self.write_prefix = self.key_prefix
        if self.cluster_id is not None:
            try:
                cluster = layout.cluster_prefix(self.key_prefix, self.cluster_id)
            except ValueError as e:
                raise InvalidConfigError(f"Invalid value for configuration cluster.id: {e}") from None
            if rsm_setting(configs, "key.cluster.id.enable"):
                self.write_prefix = cluster
        custom = rsm_setting(configs, "custom.metadata.enable")
        self.custom_metadata_enabled = self.custom_metadata_default if custom is None else custom
        self.compression_enabled = rsm_setting(configs, "compression.enable")
        self.compression_heuristic = rsm_setting(configs, "compression.heuristic.enable")
        self.chunk_size = rsm_setting(configs, "compression.chunk.size")
        self.compression_level = rsm_setting(configs, "compression.level")

    # -- contract --

    def segment_keys(self, md: RemoteLogSegmentMetadata) -> layout.SegmentKeys:
        """Keys of the segment as a read looks for them first (see :meth:`segment_key_candidates`)."""
        return self.segment_key_candidates(md)[0]

    def segment_key_candidates(self, md: RemoteLogSegmentMetadata) -> list[layout.SegmentKeys]:
        """Where the segment's objects may be, in the order a read looks. Under the prefix recorded in its
        custom metadata when there is one (it includes the cluster folder of the cluster layout), so
        changing ``key.prefix`` or the layout orphans nothing. Without one (custom metadata off, or
        another plugin's): where a copy with the current settings writes it, then the cluster layout,
        then the older layout without the cluster folder."""
        recorded = self._recorded_prefix(md)
        if recorded is not None:
            return [layout.segment_keys(md, recorded)]
        prefixes = [self.write_prefix]
        if self.cluster_id is not None:
            prefixes.append(layout.cluster_prefix(self.key_prefix, self.cluster_id))
        prefixes.append(self.key_prefix)
        return [layout.segment_keys(md, p) for p in dict.fromkeys(prefixes)]

    def write_keys(self, md: RemoteLogSegmentMetadata) -> layout.SegmentKeys:
        """Where a copy with the current settings puts the segment."""
        return layout.segment_keys(md, self.write_prefix)

    def copy_log_segment_data(self, md: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        self._check_writable(f"copy {md.segment_id}")
        keys = self.write_keys(md)
        log_path = str(data.log_segment)
        try:
            log_size = os.path.getsize(log_path)
        except OSError as e:
            raise error_from_os(e, f"cannot read local segment {log_path}") from None
        indexes = self._local_indexes(data)
        stages = self._stages_for(log_path)
        self._drop_earlier_manifest(md, keys.manifest)
        self._forget(md)
        records: list[dict[str, Any]] = []
        try:
            if stages:
                counter = CountedChunks(transforms.encode(stages, transforms.file_chunks(log_path), records))
                self._put_chunks(keys.log, counter)
                stored = counter.total
            else:
                self._put_file(keys.log, log_path)
                stored = log_size
            blob, entries = layout.encode_indexes(indexes)
            self._put_bytes(keys.indexes, blob)
            custom = {"p": self.write_prefix, "s": stored + len(blob)} if self.custom_metadata_enabled else None
            tp = md.topic_id_partition
            manifest = layout.SegmentManifest(
                topic=tp.topic, topic_id=tp.topic_id, partition=tp.partition, segment_id=md.segment_id.id,
                start_offset=md.start_offset, end_offset=md.end_offset, max_timestamp_ms=md.max_timestamp_ms,
                leader_epochs=md.segment_leader_epochs, log_size=log_size, log_stored_size=stored,
                indexes_size=len(blob), indexes=entries, transforms=records, custom_metadata=custom,
                broker_id=self.broker_id, written_ms=int(time.time() * 1000))
            self._put_bytes(keys.manifest, manifest.to_json())
        except FileNotFoundError as e:
            # A put never reads a missing remote object: a local file vanished or the bucket is gone.
            raise RemoteStorageError(f"copy of {md.segment_id} failed: {e}") from e
        except OSError as e:
            raise error_from_os(e, f"copy of {md.segment_id} failed") from None
        except transforms.TransformError as e:
            raise RemoteStorageError(f"copy of {md.segment_id} failed: {e}") from e
        if custom is None:
            return None
        return json.dumps(custom, separators=(",", ":")).encode()

    def fetch_log_segment(self, md: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        return self._fetch_log(md, start_position, end_position, self._get_range)

    def fetch_log_segment_buffer(self, md: RemoteLogSegmentMetadata, start_position: int,
                                 end_position: int | None = None) -> bytes | memoryview:
        return self._fetch_log(md, start_position, end_position, self._get_range_buffer)

    def _fetch_log(self, md: RemoteLogSegmentMetadata, start_position: int, end_position: int | None,
                   get: Callable[[str, int, int], Any]):
        check_fetch_range(start_position, end_position)
        keys, manifest = self._manifest(md)
        size = manifest.log_size
        if start_position >= size:
            return b""
        stop = size if end_position is None else min(end_position + 1, size)
        if manifest.transforms:
            get = self._get_range  # the transforms take bytes

        def stored(start: int, length: int):
            with self._reading(md, keys.log):
                data = get(keys.log, start, length)
            if len(data) != length:
                raise RemoteStorageError(f"log object {keys.log} is shorter than its manifest says: "
                                         f"{len(data)} of {length} bytes at {start}")
            return data

        if not manifest.transforms:
            return stored(start_position, stop - start_position)
        try:
            return transforms.original_reader(manifest.transforms, stored)(start_position, stop - start_position)
        except (transforms.TransformError, KeyError, TypeError, IndexError) as e:
            raise RemoteStorageError(f"log object {keys.log} does not decode: {e}") from None

    def read_log_segment_into(self, md: RemoteLogSegmentMetadata, start_position: int, buffer: memoryview) -> int:
        check_fetch_range(start_position, None)
        keys, manifest = self._manifest(md)
        if manifest.transforms:
            return super().read_log_segment_into(md, start_position, buffer)
        length = min(len(buffer), manifest.log_size - start_position)
        if length <= 0:
            return 0
        with self._reading(md, keys.log):
            got = self._get_range_into(keys.log, start_position, memoryview(buffer)[:length])
        if got != length:
            raise RemoteStorageError(f"log object {keys.log} is shorter than its manifest says: "
                                     f"{got} of {length} bytes at {start_position}")
        return got

    def log_segment_file(self, md: RemoteLogSegmentMetadata) -> str | None:
        keys, manifest = self._manifest(md)
        if manifest.transforms:  # stored compressed: only fetch_log_segment gives the original bytes
            return None
        path = self._local_path(keys.log)
        if path is not None:
            with self._reading(md, keys.log):
                size = os.path.getsize(path)
            if size != manifest.log_size:
                raise RemoteStorageError(f"log object {keys.log} holds {size} bytes, its manifest says "
                                         f"{manifest.log_size}")
        return path

    def fetch_index(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        keys, manifest = self._manifest(md)
        entry = manifest.indexes.get(index_type)
        if entry is None:
            raise resource_not_found(md, f"{index_type.value} index", keys.indexes)
        data = self._read_range(md, keys.indexes, entry.position, entry.size) if entry.size else b""
        try:
            return layout.check_index_bytes(index_type, entry, data)
        except layout.IndexFormatError as e:
            raise RemoteStorageError(f"{keys.indexes}: {e}") from None

    def delete_log_segment_data(self, md: RemoteLogSegmentMetadata) -> None:
        self._check_writable(f"delete {md.segment_id}")
        stems = dict.fromkeys([*self.segment_key_candidates(md), self.write_keys(md)])
        self._delete_for(md, [key for keys in stems for key in keys.all()])
        self._forget(md)

    def list_objects(self, prefix: str = "") -> list[tuple[str, int]]:
        return sorted(self._list(prefix))

    def read_manifest(self, key: str) -> layout.SegmentManifest:
        """The ``.manifest`` object at ``key`` (a key of :meth:`list_objects`), for tools that rebuild
        metadata from the store (``tierlog tier restore``). Raises RemoteStorageError when it is missing
        or unreadable."""
        try:
            raw = self._get(key)
        except FileNotFoundError:
            raise RemoteStorageError(f"manifest {key} not found") from None
        except OSError as e:
            raise error_from_os(e, f"cannot read {key}") from None
        try:
            return layout.SegmentManifest.from_json(raw)
        except layout.ManifestFormatError as e:
            raise RemoteStorageError(f"{key}: {e}") from None

    # -- helpers --

    def _check_writable(self, what: str) -> None:
        if self.read_only:
            raise RemoteStorageError(f"cannot {what}: the remote storage manager was opened read-only")

    def _recorded_prefix(self, md: RemoteLogSegmentMetadata) -> str | None:
        if md.custom_metadata:
            try:
                doc = json.loads(md.custom_metadata)
                prefix = doc.get("p") if isinstance(doc, dict) else None
                if isinstance(prefix, str):
                    return layout.check_prefix(prefix)
            except ValueError:
                pass  # another plugin's metadata: fall back to the configured prefix
        return None

    def _stages_for(self, log_path: str) -> list[transforms.Stage]:
        if not self.compression_enabled:
            return []
        if self.compression_heuristic and _first_batch_compressed(log_path):
            return []  # already-compressed batches barely shrink; keep the raw, range-readable form
        return [transforms.ZstdChunks(self.chunk_size, self.compression_level)]

    def _local_indexes(self, data: LogSegmentData) -> dict[IndexType, bytes | None]:
        files = {IndexType.OFFSET: data.offset_index, IndexType.TIMESTAMP: data.time_index,
                 IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot_index,
                 IndexType.TRANSACTION: data.transaction_index}
        out: dict[IndexType, bytes | None] = {IndexType.LEADER_EPOCH: bytes(data.leader_epoch_index)}
        for index_type, path in files.items():
            if path is None:
                out[index_type] = None
                continue
            try:
                with open(path, "rb") as f:
                    out[index_type] = f.read()
            except OSError as e:
                raise error_from_os(e, f"cannot read local {index_type.value} index {path}") from None
        return out

    def _manifest(self, md: RemoteLogSegmentMetadata) -> tuple[layout.SegmentKeys, layout.SegmentManifest]:
        candidates = self.segment_key_candidates(md)
        cache_key = (uuid_to_str(md.segment_id.id), candidates[0].stem)
        with self._lock:
            cached = self._manifests.get(cache_key)
            if cached is not None:
                self._manifests.move_to_end(cache_key)
                return cached
            loading = self._loading.setdefault(cache_key, threading.Lock())
        # One GET per manifest: a read and the read-ahead reaching a new segment together would each send one.
        with loading:
            try:
                with self._lock:
                    cached = self._manifests.get(cache_key)
                return cached if cached is not None else self._load_manifest(md, candidates, cache_key)
            finally:
                with self._lock:
                    if self._loading.get(cache_key) is loading:
                        del self._loading[cache_key]

    def _load_manifest(self, md: RemoteLogSegmentMetadata, candidates: list[layout.SegmentKeys],
                       cache_key: tuple[str, str]) -> tuple[layout.SegmentKeys, layout.SegmentManifest]:
        raw = None
        for keys in candidates:  # the layouts in turn; the first that holds the manifest has the segment
            try:
                raw = self._get(keys.manifest)
                break
            except FileNotFoundError:
                continue
            except OSError as e:
                raise error_from_os(e, f"cannot read {keys.manifest}") from None
        if raw is None:
            raise resource_not_found(md, "manifest (segment not uploaded, incomplete or deleted)",
                                     candidates[0].manifest) from None
        try:
            manifest = layout.SegmentManifest.from_json(raw)
        except layout.ManifestFormatError as e:
            raise RemoteStorageError(f"{keys.manifest}: {e}") from None
        if manifest.segment_id != md.segment_id.id:
            raise RemoteStorageError(f"{keys.manifest} describes segment {uuid_to_str(manifest.segment_id)}, "
                                     f"not {uuid_to_str(md.segment_id.id)}")
        with self._lock:
            self._manifests[cache_key] = (keys, manifest)
            while len(self._manifests) > _MANIFEST_CACHE_SIZE:
                self._manifests.popitem(last=False)
        return keys, manifest

    def _forget(self, md: RemoteLogSegmentMetadata) -> None:
        segment_id = uuid_to_str(md.segment_id.id)
        with self._lock:
            for cache_key in [k for k in self._manifests if k[0] == segment_id]:
                del self._manifests[cache_key]

    def _read_range(self, md: RemoteLogSegmentMetadata, key: str, start: int, length: int) -> bytes:
        with self._reading(md, key):
            return self._get_range(key, start, length)

    @contextlib.contextmanager
    def _reading(self, md: RemoteLogSegmentMetadata, key: str) -> Iterator[None]:
        try:
            yield
        except FileNotFoundError:
            raise resource_not_found(md, "object", key) from None
        except OSError as e:
            raise error_from_os(e, f"cannot read {key}") from None

    def _drop_earlier_manifest(self, md: RemoteLogSegmentMetadata, key: str) -> None:
        """An earlier attempt's manifest goes before a copy: until the new one is written the segment is
        unreadable instead of mixing old and new objects. A store that fails the delete does not stop the
        copy when there is no such manifest (the broker copies each attempt under a fresh segment id), so
        a failing clean-up never holds up uploads."""
        try:
            self._delete_for(md, [key])
        except RemoteStorageError as e:
            try:
                there = self._exists(key)
            except (OSError, RemoteStorageError):
                there = True  # cannot tell: the delete's error stands
            if there:
                raise
            log.debug("Copying %s although the store failed to delete %s, which does not exist: %s",
                      md.segment_id, key, e)

    def _delete_for(self, md: RemoteLogSegmentMetadata, keys: list[str]) -> None:
        try:
            self._delete(keys)
        except OSError as e:
            raise error_from_os(e, f"cannot delete objects of {md.segment_id}") from None


class CountedChunks:
    """Passes a stream's chunks through, adding up their size (an upload's size is known only once read)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = chunks
        self.total = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.total += len(chunk)
            yield chunk


def _first_batch_compressed(log_path: str) -> bool:
    try:
        with open(log_path, "rb") as f:
            head = f.read(RECORD_BATCH_OVERHEAD)
        return read_header(head).compression != CompressionType.NONE
    except Exception:  # a heuristic: an unreadable header just means "compress"
        return False
