"""Errors shared by tierlog's remote storage and remote log metadata managers."""

from __future__ import annotations

from tierlog.errors import KafkaStorageError


class RemoteResourceNotFoundError(KafkaStorageError):
    """Kafka's ``RemoteResourceNotFoundException``: a remote segment, its metadata or a partition's
    metadata is unknown. It is a storage error, so a fetch that hits it answers KAFKA_STORAGE_ERROR."""
