"""The requests a storage manager sends its object store, counted by operation with the bytes they carry:
an object store bills per request as well as per byte stored, and the request count is what segment
size, part size and the index layout move.

Operations are named as the S3 API bills them: ``PUT`` (one-request upload), ``CREATE_MULTIPART``,
``UPLOAD_PART`` and ``COMPLETE_MULTIPART`` (a multipart upload), ``GET`` (whole object), ``GET_RANGE``,
``HEAD``, ``LIST`` (one page of a listing) and ``DELETE`` (one request, which may delete up to 1000 keys).

The counts are of the requests a manager makes, not of the client library's retries (obstore retries
transient failures inside one call); bench/cost.py checks them against a server's own count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import obstore

from tierlog.tiered.rsm.base import CountedChunks

OPERATIONS = ("PUT", "CREATE_MULTIPART", "UPLOAD_PART", "COMPLETE_MULTIPART", "GET", "GET_RANGE", "HEAD", "LIST",
              "DELETE")
#: Keys per page of an S3 ListObjectsV2 answer, and per DeleteObjects request.
LIST_PAGE_KEYS = 1000
DELETE_BATCH_KEYS = 1000
OBSTORE_CHUNK_SIZE = 5 * 1024 * 1024  # obstore.put's default part size

_T = TypeVar("_T")


class StoreRequests:
    """Thread-safe counters: requests and bytes per operation (bytes sent for uploads, received for reads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {op: [0, 0] for op in OPERATIONS}

    def add(self, operation: str, requests: int = 1, nbytes: int = 0) -> None:
        with self._lock:
            row = self._counts[operation]
            row[0] += requests
            row[1] += nbytes

    def upload(self, size: int, part_size: int, multipart: bool) -> None:
        """An upload of ``size`` bytes: one PUT, or a multipart upload of parts of ``part_size`` (the last
        shorter; an empty one still sends one part)."""
        if not multipart:
            self.add("PUT", 1, size)
            return
        self.add("CREATE_MULTIPART")
        self.add("UPLOAD_PART", max(1, -(-size // part_size)), size)
        self.add("COMPLETE_MULTIPART")

    def listed(self, objects: int) -> None:
        """A listing that returned ``objects`` keys, one request per page (an empty listing is one)."""
        self.add("LIST", max(1, -(-objects // LIST_PAGE_KEYS)))

    def deleted(self, keys: int) -> None:
        """A bulk delete of ``keys`` keys."""
        self.add("DELETE", max(1, -(-keys // DELETE_BATCH_KEYS)))

    def call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)``, counting the requests of uploads (``obstore.put``, by obstore's rule for
        when it goes multipart), deletes (``obstore.delete``) and ``obstore.head``; other calls are counted by
        their callers. A failed upload counts its first request only: what it sent before failing is unknown."""
        if fn is obstore.put:
            return self._put(fn, *args, **kwargs)
        if fn is obstore.delete:
            self.deleted(len(args[1])) if isinstance(args[1], list) else self.add("DELETE")
        elif fn is obstore.head:
            self.add("HEAD")
        return fn(*args, **kwargs)

    def _put(self, fn: Callable[..., _T], store: Any, key: str, data: Any, *rest: Any, **kwargs: Any) -> _T:
        part = kwargs.get("chunk_size", OBSTORE_CHUNK_SIZE)
        multipart = kwargs.get("use_multipart")
        counted = None
        if isinstance(data, (bytes, bytearray, memoryview)):
            size = len(data)
        elif isinstance(data, Path):
            size = data.stat().st_size
        else:  # a stream: its size is known once obstore has read it
            data = counted = CountedChunks(data)
            size = 0
        if multipart is None:
            multipart = counted is not None or size > part
        try:
            result = fn(store, key, data, *rest, **kwargs)
        except BaseException:
            self.add("CREATE_MULTIPART" if multipart else "PUT")
            raise
        self.upload(counted.total if counted is not None else size, part, multipart)
        return result

    def snapshot(self) -> dict[str, dict[str, int]]:
        """``{operation: {"requests": n, "bytes": n}}`` for every operation, zeros included."""
        with self._lock:
            return {op: {"requests": r, "bytes": b} for op, (r, b) in self._counts.items()}


