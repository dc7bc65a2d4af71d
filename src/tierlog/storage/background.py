"""The storage's background file thread: work a new or deleted partition causes that must not run on the
event loop, where thousands of partitions at once (one CreateTopics or DeleteTopics) would stall every
client. One daemon thread runs the queued work in order; fsync and unlink release the GIL.

- :func:`sync_later`: a small file written without fsync (a new partition's partition.metadata and first
  leader-epoch checkpoint) and its folder made durable soon, as Kafka flushes partition.metadata on its
  scheduler and no longer syncs the epoch checkpoint on assign. A crash before the sync loses at most what
  start-up rebuilds: the topic id from the cluster metadata, the epochs from the batches recovery re-reads.
- :func:`remove_tree_later`: a deleted partition's folder, already renamed ``*-delete`` (Kafka deletes such
  folders on its scheduler too); start-up removes any a crash left behind.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


def sync_later(path: str) -> None:
    _WORKER.submit(lambda: _sync(path))


def remove_tree_later(path: str) -> None:
    _WORKER.submit(lambda: shutil.rmtree(path, ignore_errors=True))


def drain(timeout: float | None = None) -> bool:
    """Wait until the work queued so far is done (a clean shutdown; tests); False on timeout."""
    done = threading.Event()
    _WORKER.submit(done.set)
    return done.wait(timeout)


def fsync_with_folder(path: str) -> None:
    """fsync a file, then its folder (so its name survives a power loss too)."""
    for target in (path, os.path.dirname(path) or "."):
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _sync(path: str) -> None:
    try:
        fsync_with_folder(path)
    except FileNotFoundError:
        pass  # replaced since (synced by its writer) or deleted with its partition
    except OSError as e:
        log.error("Cannot sync %s: %s", path, e)


class _Worker:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, work: Callable[[], object]) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="storage-background", daemon=True)
                self._thread.start()
        self._queue.put(work)

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            try:
                work()
            except Exception:  # noqa: BLE001 - one failed job must not end the thread
                log.exception("Background storage work failed")


_WORKER = _Worker()
