"""``RemotePartitionState``: what the remote log manager holds for one partition this broker leads. The
tasks (copy, expiration, compaction rebuild) keep no state of their own: a task object is cheap and any
number of them may act on the same state, as the scheduler's runs and a test's runs do."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from tierlog.storage import Log
from tierlog.tiered.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.tiered.partition import TopicPartitionLog

#: Every task logs under the manager's logger, as before the tasks had modules of their own: logging
#: configurations name it.
LOGGER_NAME = "tierlog.tiered.remote_log_manager"
log = logging.getLogger(LOGGER_NAME)

#: (leader epoch, ZooKeeper session) a leadership holds under; see ``RLMTask.term``.
Term = tuple[int, object]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class RemotePartitionState:
    """The remote log manager's state for one leader partition, shared by its tasks."""

    tp: TopicIdPartition
    partition: TopicPartitionLog

    # Scheduling: the periodic runs of the copy and expiration tasks (None while not scheduled).
    copy_task: asyncio.Task | None = None
    expiration_task: asyncio.Task | None = None
    copy_tasks_started: int = 0  # tells the expiration task whether an upload may have started meanwhile
    term: Term | None = None  # (leader epoch, session) this broker leads in; see RLMTask.term

    # Copy.
    first_copy_run: bool = True  # the next run reads the remote offsets first
    stop_copy: bool = False  # copying turned off: no new upload starts
    copy_stopped: str | None = None  # why copying stopped for good (KIP-917), until leadership changes
    being_copied: set[RemoteLogSegmentId] = field(default_factory=set)  # uploads in flight
    # Uploads whose copy task was cancelled (leadership moved, the partition stopped) before it could
    # publish COPY_SEGMENT_FINISHED; stop_tasks abandons them once their store calls have returned.
    cut_short: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    # Failed or unfinished uploads whose DELETE_SEGMENT_STARTED event could not be written yet; the
    # expiration task writes it (then deletes them like any other).
    abandoned: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = field(default_factory=dict)
    in_flight: set[asyncio.Future] = field(default_factory=set)  # executor futures of uploads and deletes

    # Errors.
    failing: dict[str, str] = field(default_factory=dict)  # task ("copy", "expiration") -> its last error
    last_error: str | None = None  # the first error of the current outage; None once all tasks work
    last_error_ms: int = -1

    @property
    def log(self) -> Log:
        return self.partition.log

    def record_error(self, what: str, message: str) -> None:
        """A run of task ``what`` failed. The first failure of an outage stays the partition's
        ``last_error``: what follows (clean-up failing too) is usually a consequence."""
        if not self.failing:
            self.last_error = message
            self.last_error_ms = now_ms()
        self.failing[what] = message

    def record_success(self, what: str) -> None:
        """A run of task ``what`` completed; once no task of the partition is failing, the outage is over."""
        if self.failing.pop(what, None) is not None and not self.failing:
            log.info("Remote log tasks of %s work again (the outage began at %s with: %s)", self.tp,
                     time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.last_error_ms / 1000)), self.last_error)
            self.last_error = None
            self.last_error_ms = -1
