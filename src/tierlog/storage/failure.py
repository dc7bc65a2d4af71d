"""Kafka's log-dir failure channel: an I/O error in a log dir takes the whole dir offline.

Every storage operation that touches a disk (append, roll, flush, index and snapshot writes, checkpoint
writes, reads, deletes) reports an ``OSError`` here with the dir it happened in, as Kafka's classes
report any ``IOException`` to ``LogDirFailureChannel.maybeAddOfflineLogDir``. The first report of a
dir logs ONE error line naming the dir and the cause and calls the listeners: the log manager first
(it closes the dir's logs to reads and writes, so each answers KAFKA_STORAGE_ERROR from then on),
then whoever else registered (the replica manager wakes the fetches waiting on those partitions and
stops tiering them). Later reports for the same dir only log at debug level. A dir stays offline
until the broker restarts, as in Kafka.

Listeners run on the thread that hit the error; in the broker every storage call runs on the event
loop, so they may use it, and must not block or await.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._offline: dict[str, str] = {}  # log dir -> what took it offline
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(log_dir)`` runs once per dir, when the dir goes offline."""
        self._listeners.append(listener)

    def has_offline_log_dir(self, log_dir: str) -> bool:
        return log_dir in self._offline

    @property
    def offline_log_dirs(self) -> dict[str, str]:
        """Each offline dir and the error that took it offline."""
        with self._lock:
            return dict(self._offline)

    def maybe_add_offline_log_dir(self, log_dir: str, message: str, error: BaseException) -> bool:
        """Take ``log_dir`` offline because of ``error`` (``message`` says what was being done). Returns
        True for the report that took the dir offline, False when it already was."""
        cause = f"{message}: {describe(error)}"
        with self._lock:
            first = log_dir not in self._offline
            if first:
                self._offline[log_dir] = cause
        if not first:
            log.debug("Log dir %s is already offline; another error: %s", log_dir, cause)
            return False
        log.error("Log dir %s is offline: %s; its partitions answer KAFKA_STORAGE_ERROR until the broker "
                  "restarts", log_dir, cause)
        log.debug("Error that took log dir %s offline", log_dir, exc_info=error)
        for listener in self._listeners:
            try:
                listener(log_dir)
            except Exception:  # noqa: BLE001 - one failing reaction must not stop the others
                log.exception("Reacting to the failure of log dir %s failed", log_dir)
        return True


def describe(error: BaseException) -> str:
    """``[Errno 28] No space left on device`` for an OSError, else the error's text (or its type)."""
    text = str(error)
    return text or type(error).__name__
