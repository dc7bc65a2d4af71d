"""A remote storage manager that injects faults into another one, for tests and drills.

Use it as the broker's plugin (``remote.log.storage.manager.class.name=tierlog.tiered.rsm.faults:
FaultInjectingRemoteStorageManager``) with ``rsm.config.fault.delegate=filesystem`` (or
``objectstore``) and the delegate's own settings under ``rsm.config.`` as usual. What fails is read
from a JSON control file (``rsm.config.fault.control.file``) before every call, so a test can break
and heal the store of a running broker::

    {"copy": "error", "fetch": "timeout", "delete": "error", "latency_ms": 200,
     "copy_partial": true, "fetch_error_rate": 0.3}

- ``"error"``: the call raises a RemoteStorageError; ``"timeout"``: a RetriableRemoteStorageError
  after ``timeout_ms`` (default 1000); ``"hold"``: the call waits until the control file no longer
  says ``"hold"`` for it, then goes on as that says (a store that hangs until the test lets it go).
  While a call is held, ``<control file>.held`` names it (``{"op": ..., "what": ...}``; a copy also
  gives ``segment_id``, ``start_offset`` and ``end_offset``), so a test waits for the hold to be
  reached instead of guessing. ``<op>_release``, a list of segment ids, lets exactly those held calls go
  on while the mode stays ``"hold"``, so the next call is held with no window between the two;
- ``copy_partial``: a failing copy first uploads the segment object only (no indexes, no manifest),
  as a crash mid-upload would leave it;
- ``latency_ms``: every call sleeps that long first (slow store);
- ``<op>_error_rate``: a random share of calls fails (seeded by ``seed``).
Operations: ``copy``, ``fetch`` (segment reads), ``index`` (index reads), ``delete``, ``list``.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

from tierlog.errors import InvalidConfigError
from tierlog.tiered.metadata import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from tierlog.tiered.rsm import layout
from tierlog.tiered.rsm.api import (
    RemoteStorageError,
    RemoteStorageManager,
    RetriableRemoteStorageError,
    create_remote_storage_manager,
)


class FaultInjectingRemoteStorageManager(RemoteStorageManager):
    def __init__(self) -> None:
        self.delegate: RemoteStorageManager | None = None
        self.control_file: str | None = None
        self.calls: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self._random = random.Random(0)
        self._lock = threading.Lock()

    def configure(self, configs: Mapping[str, str]) -> None:
        delegate = configs.get("fault.delegate")
        if not delegate:
            raise InvalidConfigError("fault.delegate (the storage manager to wrap) is required")
        self.control_file = configs.get("fault.control.file")
        inner = {k: v for k, v in configs.items() if not k.startswith("fault.")}
        self.delegate = create_remote_storage_manager(delegate, inner)

    @property
    def key_prefix(self) -> str:  # the wrapped manager's objects are the ones listed
        return self.delegate.key_prefix if self.delegate is not None else ""

    def segment_key_candidates(self, md: RemoteLogSegmentMetadata) -> list[layout.SegmentKeys]:
        return self.delegate.segment_key_candidates(md)

    def control(self) -> dict[str, Any]:
        if not self.control_file:
            return {}
        try:
            with open(self.control_file) as f:
                return json.load(f) or {}
        except (OSError, ValueError):
            return {}

    def _held(self, detail: dict[str, Any] | None) -> None:
        """Write (``detail``) or remove (None) the marker naming the call held now."""
        if not self.control_file:
            return
        marker = f"{self.control_file}.held"
        if detail is None:
            try:
                os.remove(marker)
            except FileNotFoundError:
                pass
        else:
            write_control(marker, **detail)

    def _maybe_fail(self, op: str, ctl: dict[str, Any], what: str, detail: dict[str, Any] | None = None) -> None:
        with self._lock:
            self.calls[op] = self.calls.get(op, 0) + 1
            if "seed" in ctl:
                self._random.seed(f"{ctl['seed']}-{op}-{self.calls[op]}")
            rate = float(ctl.get(f"{op}_error_rate", 0))
            unlucky = rate > 0 and self._random.random() < rate
        latency = float(ctl.get("latency_ms", 0)) / 1000
        if latency:
            time.sleep(latency)
        mode = ctl.get(op) or ("error" if unlucky else None)
        if mode == "hold":
            self._held({"op": op, "what": what, **(detail or {})})
            key = (detail or {}).get("segment_id")
            while mode == "hold":
                time.sleep(0.02)
                ctl = self.control()
                mode = ctl.get(op)
                if mode == "hold" and key is not None and key in ctl.get(f"{op}_release", ()):
                    mode = None  # this one was let go; the others stay held
            self._held(None)
        if not mode:
            return
        with self._lock:
            self.failures[op] = self.failures.get(op, 0) + 1
        if mode == "timeout":
            time.sleep(float(ctl.get("timeout_ms", 1000)) / 1000)
            raise RetriableRemoteStorageError(f"injected timeout: {what}")
        raise RemoteStorageError(f"injected error: {what}")

    def copy_log_segment_data(self, md: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        ctl = self.control()
        try:
            self._maybe_fail("copy", ctl, f"copy of segment {md.start_offset} of {md.topic_id_partition}",
                             {"segment_id": str(md.segment_id.id), "start_offset": md.start_offset,
                              "end_offset": md.end_offset})
        except RemoteStorageError:
            if ctl.get("copy_partial") and hasattr(self.delegate, "_put_file"):
                keys = self.delegate.write_keys(md) if hasattr(self.delegate, "write_keys") else \
                    layout.segment_keys(md, self.key_prefix)
                self.delegate._put_file(keys.log, str(data.log_segment))
            raise
        return self.delegate.copy_log_segment_data(md, data)

    def fetch_log_segment(self, md: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        self._maybe_fail("fetch", self.control(), f"read of segment {md.start_offset} of {md.topic_id_partition}")
        return self.delegate.fetch_log_segment(md, start_position, end_position)

    def fetch_index(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        self._maybe_fail("index", self.control(), f"{index_type.value} index of segment {md.start_offset}")
        return self.delegate.fetch_index(md, index_type)

    def delete_log_segment_data(self, md: RemoteLogSegmentMetadata) -> None:
        self._maybe_fail("delete", self.control(), f"delete of segment {md.start_offset} of {md.topic_id_partition}")
        self.delegate.delete_log_segment_data(md)

    def list_objects(self, prefix: str = "") -> list[tuple[str, int]]:
        self._maybe_fail("list", self.control(), f"listing of {prefix or 'everything'}")
        return self.delegate.list_objects(prefix)

    def store_requests(self) -> dict[str, dict[str, int]] | None:
        return self.delegate.store_requests() if self.delegate is not None else None

    def close(self) -> None:
        if self.delegate is not None:
            self.delegate.close()


def write_control(path: str | os.PathLike[str], **faults: Any) -> None:
    """Atomically replace the control file (tests call this while the broker runs)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(faults, f)
    os.replace(tmp, path)
