"""The RemoteStorageManager plugin contract (KIP-405), its errors and its factory.

The built-in backends live beside this module (``filesystem``, ``objectstore``, sharing
:mod:`tierlog.tiered.rsm.base`); a third-party plugin needs only what is defined here.

Methods are synchronous: the remote log manager calls them from its thread pools, so an
implementation must be safe to call from several threads at once.

Errors. Every failure is a :class:`RemoteStorageError`, a subclass of
``tierlog.errors.KafkaStorageError`` so a request handler that lets one escape answers with
KAFKA_STORAGE_ERROR (56), a code every client knows; the storage errors themselves have no wire code
of their own (Kafka's ``RemoteStorageException`` has none either). The ``retriable`` attribute is the
wire code's flag; whether the *storage operation* may simply be retried (and a partial upload kept) is
``isinstance(e, RetriableRemoteStorageError)``. A configuration that cannot work raises
``tierlog.errors.InvalidConfigError`` from ``configure`` or the factory.
"""

from __future__ import annotations

import abc
import errno
import logging
from collections.abc import Mapping

from tierlog.errors import KafkaStorageError
from tierlog.kafka_uuid import uuid_to_str
from tierlog.tiered import exceptions
from tierlog.tiered.metadata import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from tierlog.tiered.plugins import load_plugin_class
from tierlog.tiered.rsm import layout

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------- errors


class RemoteStorageError(KafkaStorageError):
    """A remote storage operation failed (Kafka's ``RemoteStorageException``)."""


class RetriableRemoteStorageError(RemoteStorageError):
    """A transient failure (timeout, throttling, unreachable endpoint): the same call may succeed later,
    and what an interrupted copy left behind will be overwritten by the retry."""


class RemoteResourceNotFoundError(RemoteStorageError, exceptions.RemoteResourceNotFoundError):
    """A segment object, or one of its indexes, does not exist in remote storage. Also an instance of
    the metadata managers' ``tierlog.tiered.exceptions.RemoteResourceNotFoundError``, so one except
    clause catches both, as Kafka's single RemoteResourceNotFoundException does."""


def resource_not_found(md: RemoteLogSegmentMetadata, what: str, key: str | None = None) -> RemoteResourceNotFoundError:
    """The not-found error for ``what`` (e.g. "transaction index") of segment ``md``, naming the segment
    so an operator can find it in ``__remote_log_metadata`` and in the bucket."""
    tp = md.topic_id_partition
    where = f" (object {key})" if key else ""
    return RemoteResourceNotFoundError(
        f"{what} of remote segment {uuid_to_str(md.segment_id.id)} of {tp.topic}-{tp.partition} "
        f"(topic id {uuid_to_str(tp.topic_id)}, start offset {md.start_offset}) not found{where}")


_TRANSIENT_ERRNOS = frozenset({errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT, errno.ENOSPC,
                               errno.EDQUOT, errno.ESTALE, errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def error_from_os(e: OSError, what: str) -> RemoteStorageError:
    """Wrap a local I/O error: a full disk or a stale NFS handle may heal, anything else will not."""
    cls = RetriableRemoteStorageError if e.errno in _TRANSIENT_ERRNOS else RemoteStorageError
    err = cls(f"{what}: {e}")
    err.__cause__ = e
    return err


# --------------------------------------------------------------------------------------------- contract


class RemoteStorageManager(abc.ABC):
    """Kafka's ``RemoteStorageManager``: stores rolled log segments and their indexes remotely.

    The broker creates one instance with a no-argument constructor, calls :meth:`configure` once with
    every ``rsm.config.*`` broker setting (prefix stripped, values as strings) plus ``broker.id``, and
    :meth:`close` at shutdown.
    """

    #: The key prefix of this manager's objects in :meth:`list_objects`, where they follow the built-in
    #: layout (docs/tiered-storage-layout.md); the reconciler parses keys below it. "" otherwise.
    key_prefix: str = ""

    #: Set by the factory before :meth:`configure` for tools that only read (the Spark reader, audits):
    #: such a manager must change nothing in the store, not even create its root folder or bucket, so
    #: a wrong path stays visibly wrong instead of becoming an empty store. Built-in backends honour it.
    read_only: bool = False

    @abc.abstractmethod
    def configure(self, configs: Mapping[str, str]) -> None:
        """Read the settings; raise InvalidConfigError for unusable ones."""

    @abc.abstractmethod
    def copy_log_segment_data(self, md: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """Upload a rolled segment and its indexes; return KIP-917 custom metadata or None.

        ``md`` is the COPY_SEGMENT_STARTED metadata (never with custom metadata). Every attempt has a
        fresh segment id, yet a retry with the same id must overwrite whatever an earlier, interrupted
        attempt left instead of failing."""

    @abc.abstractmethod
    def fetch_log_segment(self, md: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        """Bytes ``[start_position, end_position]`` of the segment's original ``.log``.

        ``end_position`` is inclusive and clipped to the segment end; None reads to the end. A start at
        or past the end returns ``b""``. A negative start or an end before the start is a caller bug
        (ValueError). A segment that is not (or no longer) stored raises RemoteResourceNotFoundError."""

    def fetch_log_segment_buffer(self, md: RemoteLogSegmentMetadata, start_position: int,
                                 end_position: int | None = None) -> bytes | memoryview:
        """:meth:`fetch_log_segment` as bytes or a read-only buffer the caller keeps (the remote reader's
        read-ahead windows hold them and answer fetches with views into them). Backends whose client
        hands over its own immutable buffer override it to spare copying every ranged read."""
        return self.fetch_log_segment(md, start_position, end_position)

    def read_log_segment_into(self, md: RemoteLogSegmentMetadata, start_position: int, buffer: memoryview) -> int:
        """Up to ``len(buffer)`` bytes of the segment's original ``.log`` from ``start_position`` into
        ``buffer``; returns how many (0 at or past the end). For readers that reuse one buffer, such as
        the Spark reader: a fresh multi-megabyte buffer per read costs about as much as the read
        itself. Backends that can read straight into memory override it."""
        if not len(buffer):
            return 0
        data = self.fetch_log_segment(md, start_position, start_position + len(buffer) - 1)
        buffer[:len(data)] = data
        return len(data)

    def log_segment_file(self, md: RemoteLogSegmentMetadata) -> str | None:
        """A file on this machine holding exactly the segment's original ``.log`` bytes, which never
        changes while it exists, or None (the default). The broker then answers remote fetches with
        ``sendfile`` from it, as it does for local segments, instead of copying the bytes through
        :meth:`fetch_log_segment`; so a backend (or a wrapper) that changes or watches reads returns
        None. Raises like :meth:`fetch_log_segment` for a segment that is not stored."""
        return None

    @abc.abstractmethod
    def fetch_index(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole content of one index, exactly as the local file (leader epoch: the bytes given to
        the copy). An index that was not uploaded (typically the transaction index) raises
        RemoteResourceNotFoundError, never returns None."""

    @abc.abstractmethod
    def delete_log_segment_data(self, md: RemoteLogSegmentMetadata) -> None:
        """Delete everything stored for the segment. Idempotent: nothing to delete is success."""

    def segment_key_candidates(self, md: RemoteLogSegmentMetadata) -> list[layout.SegmentKeys]:
        """Where the segment's objects may be in :meth:`list_objects`, in the built-in layout (the
        reconciler checks them); the built-in managers know both layouts."""
        return [layout.segment_keys(md, self.key_prefix)]

    @abc.abstractmethod
    def list_objects(self, prefix: str = "") -> list[tuple[str, int]]:
        """(key, size) of every stored object whose key starts with ``prefix``, sorted by key; for the
        reconciler and audits. Keys are relative to the storage root (``dir`` or ``url``)."""

    def store_requests(self) -> dict[str, dict[str, int]] | None:
        """The requests sent to the store so far, ``{operation: {"requests": n, "bytes": n}}`` (see
        :mod:`tierlog.tiered.rsm.requests`), for the cost figures; None from a manager that does not count."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing to release
        """Release resources; the instance is not used afterwards."""

    def __enter__(self) -> RemoteStorageManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_fetch_range(start_position: int, end_position: int | None) -> None:
    if start_position < 0:
        raise ValueError(f"start position {start_position} must be >= 0")
    if end_position is not None and end_position < start_position:
        raise ValueError(f"end position {end_position} is before start position {start_position}")


# ---------------------------------------------------------------------------------------------- factory

BUILTIN_MANAGERS: Mapping[str, str] = {
    "filesystem": "tierlog.tiered.rsm.filesystem:FileSystemRemoteStorageManager",
    "objectstore": "tierlog.tiered.rsm.objectstore:ObjectStoreRemoteStorageManager",
}




def load_manager_class(class_name: str, class_path: str | None = None) -> type[RemoteStorageManager]:
    """The remote storage manager class named by ``remote.log.storage.manager.class.name``."""
    hint = " (install tierlog[objectstore] for obstore)" if class_name == "objectstore" else ""
    return load_plugin_class(class_name, BUILTIN_MANAGERS, RemoteStorageManager, class_path, hint)


def create_remote_storage_manager(class_name: str, configs: Mapping[str, str],
                                  class_path: str | None = None, *, read_only: bool = False) -> RemoteStorageManager:
    """Instantiate and configure the remote storage manager named by
    ``remote.log.storage.manager.class.name`` (``read_only``: see :attr:`RemoteStorageManager.read_only`)."""
    manager = load_manager_class(class_name, class_path)()
    if read_only:
        manager.read_only = True
    try:
        manager.configure(configs)
    except BaseException:
        manager.close()
        raise
    return manager
