"""The leader epoch cache: which leader epoch started at which offset.

Replication (next milestone) truncates followers with it, OffsetsForLeaderEpoch answers from it,
and tiered storage ships it with each remote segment. Persisted to ``leader-epoch-checkpoint``.
"""

from __future__ import annotations

import logging

from tierlog.errors import KafkaStorageError
from tierlog.storage.checkpoints import LeaderEpochCheckpointFile

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, checkpoint: LeaderEpochCheckpointFile, load: bool = True):
        """``load=False``: start empty without reading the file (a log whose dir is offline)."""
        self._checkpoint = checkpoint
        self.unreadable = False
        self._unsynced = False
        if not load:
            self._entries = []
            return
        try:
            self._entries: list[tuple[int, int]] = checkpoint.read()
        except (KafkaStorageError, ValueError) as e:
            log.warning("Ignoring unreadable leader epoch checkpoint %s: %s", checkpoint.path, e)
            self._entries = []
            self.unreadable = True

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, sync: bool = True) -> None:
        """Record that ``epoch`` starts at ``start_offset``; older or equal epochs are ignored. ``sync=False``
        (a leader's new term, as Kafka's assign no longer syncs): the checkpoint is written now and synced on
        the storage background thread, and at the latest by :meth:`make_durable` before the log's recovery
        point passes records of the epoch; until then a crash leaves those records to recovery, which
        assigns their epochs again from their batches."""
        if epoch < 0 or (self._entries and epoch <= self._entries[-1][0]):
            return
        # An epoch can never start before an earlier one: drop entries the new one overrides.
        while self._entries and self._entries[-1][1] >= start_offset:
            self._entries.pop()
        self._entries.append((epoch, start_offset))
        self._flush(sync)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer (LeaderEpochFileCache.endOffsetFor): (largest epoch <=
        ``epoch``, its end offset: the start of the next epoch, or the log end for the latest). An epoch
        newer than the latest is unknown (UNDEFINED); one older than the first answers the first epoch's
        start offset with the epoch asked for."""
        if not self._entries or epoch < 0 or epoch > self._entries[-1][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self._entries[-1][0]:
            return epoch, log_end_offset
        if epoch < self._entries[0][0]:
            return epoch, self._entries[0][1]
        for i in range(len(self._entries) - 1, -1, -1):
            e, _ = self._entries[i]
            if e <= epoch:
                return e, self._entries[i + 1][1]
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET  # pragma: no cover - guarded above

    def epoch_for_offset(self, offset: int) -> int:
        result = UNDEFINED_EPOCH
        for e, start in self._entries:
            if start <= offset:
                result = e
            else:
                break
        return result

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs starting at or after ``end_offset`` (log truncated to it)."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        if kept != self._entries:
            self._entries = kept
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly before ``start_offset``; the one covering it now starts there."""
        i = 0
        while i + 1 < len(self._entries) and self._entries[i + 1][1] <= start_offset:
            i += 1
        kept = self._entries[i:]
        if kept and kept[0][1] < start_offset:
            kept[0] = (kept[0][0], start_offset)
        if kept != self._entries:
            self._entries = kept
            self._flush()

    def clear(self) -> None:
        self._entries = []
        self._flush()

    def _flush(self, sync: bool = True) -> None:
        self._checkpoint.write(self._entries, fsync=sync)
        self._unsynced = not sync

    def make_durable(self) -> None:
        """Sync the checkpoint now if its last write was not (the log calls it before moving its recovery
        point)."""
        if self._unsynced:
            self._checkpoint.sync()
            self._unsynced = False
