"""A partition's local log: ordered segments plus the offsets Kafka tracks for it.

Offsets, in Kafka's terms:
- log start offset: first offset a consumer may read (remote tier included when tiering is on);
- local log start offset: first offset still on local disk;
- log end offset (LEO): the offset the next appended record gets;
- high watermark: last offset + 1 that is safe to serve consumers (set by the replica manager);
- last stable offset: high watermark, or the first offset of the oldest ongoing transaction (or of one
  whose marker the high watermark has not passed yet);
- recovery point: everything below it was fsynced and needs no validation after a crash.

Appends and reads work on whole batches as bytes; only ListOffsets by timestamp and the producer
state replay look inside a batch, and only at one batch.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
)
from tierlog.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    decode_batch,
    iter_batches,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    read_header,
    recompress_batches,
    validate_batches,
    verify_crc,
    walk_batches,
)
from tierlog.records.control import ABORT, end_txn_marker_batch, parse_end_txn_marker
from tierlog.records.validation import validate_batch_records
from tierlog.storage.background import remove_tree_later
from tierlog.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA_FILE,
    LeaderEpochCheckpointFile,
    PartitionMetadataFile,
    fsync_dir,
)
from tierlog.storage.epoch import LeaderEpochCache
from tierlog.storage.failure import describe
from tierlog.storage.log_config import LogConfig
from tierlog.storage.producer_state import SENTINEL, ProducerStateManager, VerificationGuard, list_snapshots
from tierlog.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    FileRegion,
    LogSegment,
    segment_file_name,
)
from tierlog.storage.transaction_index import AbortedTxn

log = logging.getLogger(__name__)


# ListOffsets special timestamps (Kafka's ListOffsetsRequest constants).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # KIP-1023, ListOffsets v11


def _now_ms() -> int:
    return int(time.time() * 1000)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``my-topic-3`` -> ("my-topic", 3); None for anything that is not a partition folder."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit() or "." in part:
        return None
    return topic, int(part)


def _io(what: str):
    """Kafka's ``maybeHandleIOException`` around a Log operation: a log that is offline refuses at once with
    KAFKA_STORAGE_ERROR, and an OSError from the disk takes the log (and, through the log dir failure
    channel, its whole dir) offline and is raised as KAFKA_STORAGE_ERROR naming the dir and the cause."""
    def wrap(method):
        @functools.wraps(method)
        def guarded(self, *args, **kwargs):
            if self.offline is not None:
                raise self.offline_error()
            try:
                return method(self, *args, **kwargs)
            except OSError as e:
                raise self._io_failed(what, e) from e
        return guarded
    return wrap


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    valid_bytes: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    fetch_offset: int
    region: FileRegion | None  # None or an empty region when there is nothing to return
    first_batch_offset: int = -1
    # read_committed: (producer id, first offset) of the aborted transactions overlapping the region
    aborted_transactions: list[tuple[int, int]] | None = None

    @property
    def size(self) -> int:
        return self.region.length if self.region is not None else 0

    def read(self) -> bytes:
        return self.region.read() if self.region is not None and self.region.length else b""


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int


def _older_than(now_ms: int, retention_ms: int):
    """Time retention's test of a segment (and its successor): its newest record is past retention."""
    return lambda seg, nxt: now_ms - seg.largest_timestamp() > retention_ms


def _over_size(excess: int):
    """Size retention's test, oldest segment first: a segment goes while the bytes over retention still
    cover it whole (stateful: each segment that goes takes its size off the excess)."""
    def over(seg, nxt) -> bool:
        nonlocal excess
        if excess - seg.size >= 0:
            excess -= seg.size
            return True
        return False
    return over


class Log:
    """One partition's log in its folder ``<log dir>/<topic>-<partition>``."""

    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig, *, offline: str | None = None):
        """``offline``: why the log cannot be used (then nothing is read from its folder)."""
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        # Set by the remote log manager (tiered storage): last offset known to be copied.
        self.highest_offset_in_remote_storage = -1
        # A compacted tiered log's leader: gives, for one retention pass, whether the remote copy of a local
        # segment (segment, its end offset exclusive) is current; local retention keeps one the cleaner
        # changed after its upload until the replacement is uploaded (docs/tiered-storage.md, "Compacted
        # topics"). Set by the remote log manager; None: any copied segment may go.
        self.remote_copy_current = None
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        # Why the log is closed to reads and writes (its log dir failed), or None while it serves.
        self.offline: str | None = offline
        # Called as failure_handler(log dir, what was being done, OSError) when the disk fails: the log
        # manager hands it to the log dir failure channel.
        self.failure_handler: Callable[[str, str, OSError], None] | None = None
        self._dir_unsynced = False  # a segment file was created since the folder was last fsynced
        self.leader_epoch_cache = LeaderEpochCache(
            LeaderEpochCheckpointFile(os.path.join(directory, LEADER_EPOCH_CHECKPOINT)), load=offline is None)
        self._epochs_lost = self.leader_epoch_cache.unreadable
        self.producer_state = ProducerStateManager(directory, self.name)
        # Set by recovery: the transaction indexes from this offset on are rebuilt by the producer state replay.
        self._txn_index_rebuild_from: int | None = None
        self._partition_metadata = PartitionMetadataFile(os.path.join(directory, PARTITION_METADATA_FILE))
        self.topic_id: uuid.UUID | None = None
        # The lowest offset a truncation cut the log to since the log cleaner last looked (its checkpoint
        # must not stay above it), or None.
        self.truncated_below: int | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def parent_dir(self) -> str:
        """The log dir holding this partition's folder (Kafka's ``parentDir``)."""
        return os.path.dirname(self.dir)

    # ------------------------------------------------------------------ offline (log dir failure)

    @classmethod
    def offline_log(cls, directory: str, topic: str, partition: int, config: LogConfig, cause: str,
                    topic_id: uuid.UUID | None = None) -> Log:
        """A log that could not be opened: it refuses every read and write with KAFKA_STORAGE_ERROR, so its
        partition stays hosted here (and offline) instead of being created again elsewhere."""
        self = cls(directory, topic, partition, config, offline=cause)
        self.topic_id = topic_id
        return self

    def offline_error(self) -> KafkaStorageError:
        return KafkaStorageError(f"the log of {self.name} in {self.parent_dir} is offline: {self.offline}")

    def mark_offline(self, cause: str) -> None:
        """Close the log to reads and writes (its dir failed). Its files stay open until
        :meth:`close_handles`: a response being sent may still hold a region of them."""
        if self.offline is None:
            self.offline = cause

    def close_handles(self) -> None:
        """Close every file without writing anything (Kafka's ``closeHandlers``)."""
        for seg in self.segments:
            seg.close_handles()
        for _, seg in self._pending_deletes:
            seg.close_handles()

    def _io_failed(self, what: str, error: OSError) -> KafkaStorageError:
        message = f"error while {what} {self.name}"
        cause = f"{message}: {describe(error)}"
        first = self.offline is None
        self.mark_offline(cause)
        if self.failure_handler is not None:
            self.failure_handler(self.parent_dir, message, error)
        elif first:
            log.error("The log of %s in %s is offline: %s", self.name, self.parent_dir, cause)
        return KafkaStorageError(f"{cause} (log dir {self.parent_dir} is offline)")

    # ------------------------------------------------------------------ loading

    @classmethod
    def open(cls, directory: str, topic: str, partition: int, config: LogConfig, *, recovery_point: int = 0,
             log_start_offset: int = 0, clean_shutdown: bool = True, topic_id: uuid.UUID | None = None) -> Log:
        os.makedirs(directory, exist_ok=True)
        self = cls(directory, topic, partition, config)
        try:
            self._load(recovery_point, log_start_offset, clean_shutdown, topic_id)
        except BaseException:
            self.close_handles()  # a log that cannot be opened keeps no file open
            raise
        return self

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool,
              topic_id: uuid.UUID | None) -> None:
        directory, config = self.dir, self.config
        stored_id = self._partition_metadata.read()
        if topic_id is not None and stored_id is not None and stored_id != topic_id:
            raise KafkaStorageError(f"partition folder {directory} belongs to topic id {stored_id}, "
                                    f"not {topic_id}")
        self.topic_id = stored_id or topic_id
        if stored_id is None and topic_id is not None:
            self._partition_metadata.write(topic_id)
        self._load_segments(recovery_point, clean_shutdown)
        self.log_end_offset = self.active_segment.next_offset()
        first_base = self.segments[0].base_offset
        if config.remote_storage_enable:
            self.log_start_offset = min(max(log_start_offset, 0), self.log_end_offset)
        else:
            self.log_start_offset = min(max(log_start_offset, first_base), self.log_end_offset)
        # A clean shutdown fsynced everything, and recovery fsyncs what it validated.
        self.recovery_point = self.log_end_offset
        if self._epochs_lost:
            # The checkpoint was unreadable: every batch header carries its leader epoch.
            log.warning("Rebuilding the leader epoch cache of %s from its batches", self.name)
            for _, _, h in self.batches():
                self._on_recovered_batch(h)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self._load_producer_state()
        # A single replica: everything that is on disk is committed (replication refines this later).
        self.high_watermark = self.log_end_offset

    def _new_segment(self, base_offset: int) -> LogSegment:
        # Each segment draws its own jitter below segment.jitter.ms (and segment.ms), as Kafka does, so
        # that partitions created together do not all roll at the same moment.
        bound = min(self.config.segment_jitter_ms, self.config.roll_ms)
        seg = LogSegment(self.dir, base_offset, index_interval_bytes=self.config.index_interval_bytes,
                         max_index_size=self.config.segment_index_bytes,
                         roll_jitter_ms=random.randrange(bound) if bound > 0 else 0)
        self._dir_unsynced = True
        return seg

    def _load_segments(self, recovery_point: int, clean_shutdown: bool) -> None:
        swapped = complete_swaps(self.dir)
        names = os.listdir(self.dir)
        bases = []
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith((DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX, SWAP_SUFFIX)):
                os.remove(path)  # leftovers of an interrupted delete or write
                continue
            stem, ext = os.path.splitext(name)
            if ext == LOG_SUFFIX and stem.isdigit():
                bases.append(int(stem))
        bases.sort()
        base_set = set(bases)
        for name in os.listdir(self.dir):
            stem, ext = os.path.splitext(name)
            if ext in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) and stem.isdigit() \
                    and int(stem) not in base_set:
                os.remove(os.path.join(self.dir, name))  # an index without its log
        for b in bases:  # one by one: should one fail to open, the others are closed again
            self.segments.append(self._new_segment(b))
        if not self.segments:
            self.segments = [self._new_segment(0)]
        self._bases = [s.base_offset for s in self.segments]

        # Where validation must start: after the recovery point on an unclean stop, and at any
        # segment whose batch chain does not end exactly at its file end.
        start = len(self.segments)
        if not clean_shutdown:
            start = max(0, bisect_right(self._bases, recovery_point) - 1)
        if swapped:  # a cleaned segment swapped in at start-up has its indexes rebuilt by recovery
            start = min(start, self._segment_index_for(min(swapped)))
        for i in range(min(start, len(self.segments))):
            if not self.segments[i].sanity_check_end():
                log.warning("Log segment %s does not end on a batch boundary or has a bad index; recovering "
                            "from it", self.segments[i].log_path)
                start = i
                break
        if start < len(self.segments):
            self._recover_from(start)

    def _recover_from(self, index: int) -> None:
        """Validate segments[index:]: each segment loses only its invalid bytes (see LogSegment.recover), and
        later segments stay, since their batches are intact; a segment recovery left empty before the last
        one goes (it holds no offset). One that was empty already stays: the log cleaner empties segments
        whose records were all superseded, and their offset range still belongs to the log (a tiered
        compacted log replaces its remote copy of that range from it)."""
        expected = self.segments[index - 1].next_offset() if index > 0 else None
        # Each recovered segment's transaction index is emptied and rebuilt from its markers, which needs
        # the producer state as of its start (Kafka's LogLoader.recoverSegment): see _load_producer_state.
        self._txn_index_rebuild_from = self.segments[index].base_offset
        emptied = set()
        for i in range(index, len(self.segments)):
            seg = self.segments[i]
            if expected is not None and seg.size and seg.base_offset < expected:
                log.warning("Log segment %s starts at offset %d, below the previous segment's end %d",
                            seg.log_path, seg.base_offset, expected)
            removed = seg.recover(self._on_recovered_batch)
            expected = seg.next_offset()
            if removed and seg.size == 0:
                emptied.add(seg)
            if removed:
                later = len(self.segments) - i - 1
                log.warning("Recovery of %s removed %d invalid bytes (the segment now ends at offset %d)%s",
                            seg.log_path, removed, expected,
                            f"; the {later} later segment(s) are kept: their batches are intact" if later else "")
        empty = [seg for seg in self.segments[index:-1] if seg in emptied]
        for seg in empty:
            log.warning("Removing log segment %s: recovery left it empty", seg.log_path)
            seg.delete_files()
        self.segments = [seg for seg in self.segments if seg not in empty]
        self._bases = [s.base_offset for s in self.segments]
        for seg in self.segments[index:]:
            seg.fsync()

    def _on_recovered_batch(self, h: BatchHeader) -> None:
        if h.partition_leader_epoch >= 0 and h.partition_leader_epoch > self.leader_epoch_cache.latest_epoch():
            self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)

    def _load_producer_state(self) -> None:
        ps = self.producer_state
        for off in list_snapshots(self.dir):
            if off > self.log_end_offset:
                ps.delete_snapshot(off)
        rebuild_from = self._txn_index_rebuild_from
        snap = ps.latest_snapshot_at_or_below(self.log_end_offset if rebuild_from is None else rebuild_from)
        loaded = False
        if snap is not None and snap >= self.log_start_offset:
            try:
                ps.load_snapshot(snap)
                loaded = True
            except KafkaStorageError as e:
                log.warning("Ignoring producer snapshot of %s: %s", self.name, e)
                ps.delete_snapshot(snap)
        if not loaded:
            ps.clear()
            ps.map_end_offset = self.local_log_start_offset
        self._replay_producer_state(ps.map_end_offset, index_txns_from=rebuild_from)
        self._txn_index_rebuild_from = None

    def _replay_producer_state(self, from_offset: int, index_txns_from: int | None = None) -> None:
        """Rebuild producer state from batch headers in [from_offset, LEO); aborted transactions whose marker
        is at or after ``index_txns_from`` also go to their segment's transaction index (recovery)."""
        if from_offset >= self.log_end_offset:
            return
        for seg, pos, h in self.batches(from_offset):
            self._update_producer_state(h, pos, seg, index_txns_from is not None and h.base_offset >= index_txns_from)

    def _update_producer_state(self, h: BatchHeader, pos: int, seg: LogSegment, index_txns: bool = True) -> None:
        """Producer state after batch ``h`` of ``seg``; an aborted transaction's marker also writes its entry
        in ``seg``'s transaction index with ``index_txns`` (appends, recovery; not a replay of a log whose
        indexes are intact)."""
        if h.producer_id < 0:
            return
        if h.is_control:
            control_type, coordinator_epoch, timestamp = None, -1, -1
            try:
                _, records = decode_batch(seg_region_bytes(seg, pos, h.size), 0)
                if not records:
                    return  # Kafka: an empty control batch is a transaction the cleaner removed whole
                control_type, coordinator_epoch = parse_end_txn_marker(records[0])
                timestamp = records[0].timestamp
            except Exception as e:  # noqa: BLE001 - a marker that cannot be read still ends the transaction
                log.warning("Unreadable transaction marker at offset %d of %s: %s", h.base_offset, self.name, e)
            completed = self.producer_state.complete_txn(h.producer_id, h.producer_epoch, h.last_offset,
                                                         coordinator_epoch, timestamp, control_type == ABORT)
            if completed is not None and completed.is_aborted and index_txns:
                seg.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                                completed.last_offset, completed.last_stable_offset))
        else:
            self.producer_state.update(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                                       h.base_offset, h.last_offset, h.max_timestamp, h.is_transactional)

    # ------------------------------------------------------------------ offsets

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def local_log_start_offset(self) -> int:
        if not self.segments:  # an offline log that could not be opened
            return self.log_start_offset
        return max(self.log_start_offset, self.segments[0].base_offset)

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset(self.high_watermark)
        if first_unstable is None:
            return self.high_watermark
        # Never below the log start offset (Kafka's maybeIncrementFirstUnstableOffset): retention or
        # DeleteRecords may have removed the start of an open transaction.
        return min(max(first_unstable, self.log_start_offset), self.high_watermark)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_high_watermark(self, offset: int) -> int:
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    # ------------------------------------------------------------------ append

    @_io("appending to")
    def append_as_leader(self, data: bytes | bytearray | memoryview, leader_epoch: int = 0,
                         now_ms: int | None = None, allow_multiple_batches: bool = False,
                         from_coordinator: bool = False, verification_guard: VerificationGuard | None = None,
                         ) -> LogAppendInfo:
        """Validate, assign offsets to and append a client's record batch (Produce), or a coordinator's
        (``from_coordinator``: Kafka's origin COORDINATOR, whose producer batches carry no sequence).

        ``verification_guard`` (KIP-890 part 1; None when verification is off): a transactional batch that
        opens no transaction of its producer and epoch here is appended only with the guard its verification
        took (:meth:`maybe_start_transaction_verification`), still the producer's; else INVALID_TXN_STATE.

        A produce request carries exactly one batch per partition (Kafka's rule since v3);
        internal writers may pass several with ``allow_multiple_batches``."""
        now = _now_ms() if now_ms is None else now_ms
        view = memoryview(data)
        cfg = self.config
        headers = validate_batches(view, max_batch_bytes=cfg.max_message_bytes,
                                   allow_multiple_batches=allow_multiple_batches,
                                   from_coordinator=from_coordinator)
        # Kafka's LogValidator: every record of every batch, before anything is written (compiled code).
        create_time = not cfg.log_append_time
        compacted = "compact" in cfg.cleanup_policy
        pos = 0
        for h in headers:
            validate_batch_records(view, pos, h, now_ms=now, create_time=create_time,
                                   before_max_ms=cfg.message_timestamp_before_max_ms,
                                   after_max_ms=cfg.message_timestamp_after_max_ms, compacted=compacted,
                                   max_message_bytes=cfg.max_message_bytes, topic_partition=self.name)
            pos += h.size
        recompression = cfg.recompression
        if recompression is not None and any(h.compression is not recompression[0] for h in headers):
            # The topic's compression.type differs from the producer's: the broker recompresses (as
            # Kafka's LogValidator does), and the result must fit max.message.bytes too.
            view = memoryview(recompress_batches(view, headers, *recompression))
            headers = validate_batches(view, max_batch_bytes=cfg.max_message_bytes,
                                       allow_multiple_batches=allow_multiple_batches,
                                       from_coordinator=from_coordinator)
        positions = []
        pos = 0
        pending_seq: dict[int, tuple[int, int]] = {}
        for h in headers:
            positions.append(pos)
            if h.producer_id >= 0:
                prior = pending_seq.get(h.producer_id)
                if prior is not None:
                    if prior[0] == h.producer_epoch and h.base_sequence != (prior[1] + 1) & 0x7FFFFFFF:
                        raise OutOfOrderSequenceNumberError(
                            f"out of order sequence {h.base_sequence} within one request "
                            f"for producer {h.producer_id} in {self.name}")
                else:
                    dup = self.producer_state.check(h.producer_id, h.producer_epoch, h.base_sequence,
                                                    h.last_sequence, self.log_end_offset,
                                                    is_transactional=h.is_transactional,
                                                    check_sequence=not from_coordinator)
                    if dup is not None:
                        # Kafka answers a duplicate with the original batch's timestamp as its
                        # log append time, whatever the topic's timestamp type.
                        return LogAppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, dup.timestamp,
                                             self.log_start_offset, 0, duplicate=True)
                    # After the duplicate check, as Kafka: a retried batch is answered with its offsets.
                    if verification_guard is not None and h.is_transactional and not (
                            self.producer_state.has_ongoing_transaction(h.producer_id, h.producer_epoch)
                            or self.producer_state.verification_guard(h.producer_id).verify(verification_guard)):
                        raise InvalidTxnStateError(f"Record was not part of an ongoing transaction ({self.name})")
                pending_seq[h.producer_id] = (h.producer_epoch, h.last_sequence)
            pos += h.size

        total = len(view)
        first_offset = self.log_end_offset
        last_offset = first_offset + sum(h.last_offset_delta + 1 for h in headers) - 1
        max_ts = max(h.max_timestamp for h in headers)
        seg = self.active_segment
        if seg.should_roll(total, max_ts, last_offset, now, cfg.segment_bytes, cfg.roll_ms):
            seg = self.roll(now)

        # Only the 61 header bytes of each batch are copied and patched; the records are written
        # straight from the request's buffer with writev. LogAppendTime rewrites the CRC, which
        # covers the whole batch, so that (rare) setting patches a full copy instead.
        next_offset = first_offset
        placed = []
        pieces: list = []
        full = bytearray(view) if cfg.log_append_time else None
        for h, p in zip(headers, positions):
            if full is not None:
                patch_base_offset(full, p, next_offset)
                patch_partition_leader_epoch(full, p, leader_epoch)
                patch_log_append_time(full, p, now)
                h = h._replace(max_timestamp=now, attributes=h.attributes | 0x08)
            else:
                head = bytearray(view[p:p + RECORD_BATCH_OVERHEAD])
                patch_base_offset(head, 0, next_offset)
                patch_partition_leader_epoch(head, 0, leader_epoch)
                pieces += (head, view[p + RECORD_BATCH_OVERHEAD:p + h.size])
            h = h._replace(base_offset=next_offset, partition_leader_epoch=leader_epoch)
            placed.append((p, h))
            next_offset = h.last_offset + 1
        if leader_epoch > self.leader_epoch_cache.latest_epoch():
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        seg.append_batches([full] if full is not None else pieces, total, placed)
        base_in_segment = seg.size - total
        for p, h in placed:
            self._update_producer_state(h, base_in_segment + p, seg)
        self.log_end_offset = next_offset
        self._unflushed_messages += next_offset - first_offset
        if self._unflushed_messages >= cfg.flush_messages:
            self.flush()
        return LogAppendInfo(first_offset, next_offset - 1, now if cfg.log_append_time else max_ts,
                             now if cfg.log_append_time else -1, self.log_start_offset, total)

    def find_duplicate(self, data: bytes | bytearray | memoryview) -> LogAppendInfo | None:
        """The answer to a produce batch that repeats one of its producer's last five batches here (what
        :meth:`append_as_leader` answers it), or None: nothing is validated or written. For a retry that comes
        while the ISR is below ``min.insync.replicas``: its records are already in the log."""
        try:
            h = read_header(data)
        except KafkaError:
            return None
        entry = self.producer_state.producers.get(h.producer_id) if h.producer_id >= 0 else None
        dup = entry.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence) if entry else None
        if dup is None:
            return None
        return LogAppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, dup.timestamp, self.log_start_offset,
                             0, duplicate=True)

    def maybe_start_transaction_verification(self, producer_id: int, sequence: int,
                                             epoch: int) -> VerificationGuard:
        """KIP-890 part 1: ``SENTINEL`` when the producer's transaction at ``epoch`` is already open here (no
        verification needed), else the guard its verification must bring back to the append."""
        ps = self.producer_state
        if ps.has_ongoing_transaction(producer_id, epoch):
            return SENTINEL
        return ps.maybe_create_verification_state_entry(producer_id, sequence, epoch, _now_ms()).guard

    @_io("appending a transaction marker to")
    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          leader_epoch: int = 0, now_ms: int | None = None) -> LogAppendInfo:
        """Append a COMMIT or ABORT marker for the producer's transaction, as the leader (Kafka's appendAsLeader
        with origin COORDINATOR, for WriteTxnMarkers). A stale producer epoch is INVALID_PRODUCER_EPOCH, a
        marker of an older coordinator epoch TRANSACTION_COORDINATOR_FENCED; nothing is written then. An
        aborted transaction gets its entry in the active segment's transaction index."""
        now = _now_ms() if now_ms is None else now_ms
        offset = self.log_end_offset
        ps = self.producer_state
        ps.check_end_txn(producer_id, producer_epoch, coordinator_epoch, offset)
        batch = bytearray(end_txn_marker_batch(producer_id, producer_epoch, coordinator_epoch, commit, now))
        patch_base_offset(batch, 0, offset)
        patch_partition_leader_epoch(batch, 0, leader_epoch)
        if self.config.log_append_time:
            patch_log_append_time(batch, 0, now)
        h = read_header(batch)
        seg = self.active_segment
        if seg.should_roll(len(batch), h.max_timestamp, offset, now, self.config.segment_bytes,
                           self.config.roll_ms):
            seg = self.roll(now)
        if leader_epoch > self.leader_epoch_cache.latest_epoch():
            self.leader_epoch_cache.assign(leader_epoch, offset)
        seg.append_batches([batch], len(batch), [(0, h)])
        completed = ps.complete_txn(producer_id, producer_epoch, offset, coordinator_epoch, now, not commit)
        if completed is not None and completed.is_aborted:
            seg.txn_index.append(AbortedTxn(producer_id, completed.first_offset, offset,
                                            completed.last_stable_offset))
        self.log_end_offset = offset + 1
        self._unflushed_messages += 1
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return LogAppendInfo(offset, offset, h.max_timestamp, now if self.config.log_append_time else -1,
                             self.log_start_offset, len(batch))

    @_io("appending to")
    def append_as_follower(self, data: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches that already carry offsets and epochs (replication, tests, tools)."""
        headers = _validate_replicated(data)
        if headers[0].base_offset < self.log_end_offset:
            raise InvalidRecordError(f"batch base offset {headers[0].base_offset} is below the log end offset "
                                     f"{self.log_end_offset} of {self.name}")
        seg = self.active_segment
        last = headers[-1].last_offset
        if seg.should_roll(len(data), max(h.max_timestamp for h in headers), last, _now_ms(),
                           self.config.segment_bytes, self.config.roll_ms):
            seg = self.roll(base_offset=headers[0].base_offset)
        placed = []
        pos = 0
        for h in headers:
            placed.append((pos, h))
            pos += h.size
            if h.partition_leader_epoch > self.leader_epoch_cache.latest_epoch():
                self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
        seg.append_batches([memoryview(data)], len(data), placed)
        base_in_segment = seg.size - len(data)
        for p, h in placed:
            self._update_producer_state(h, base_in_segment + p, seg)
        self._unflushed_messages += last + 1 - self.log_end_offset
        self.log_end_offset = last + 1
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return LogAppendInfo(headers[0].base_offset, last, max(h.max_timestamp for h in headers), -1,
                             self.log_start_offset, len(data))

    @_io("rolling a segment of")
    def roll(self, now_ms: int | None = None, base_offset: int | None = None) -> LogSegment:
        """Close the active segment and start a new one at the log end offset."""
        old = self.active_segment
        new_base = self.log_end_offset if base_offset is None else base_offset
        if old.size == 0 and old.base_offset == new_base:
            return old
        old.on_become_inactive()
        # Producer state as of the new segment's base: tiered storage ships it with the old segment.
        self.producer_state.map_end_offset = max(self.producer_state.map_end_offset, new_base)
        self.producer_state.take_snapshot(fsync=False)
        seg = self._new_segment(new_base)
        self.segments.append(seg)
        self._bases.append(new_base)
        # Kafka flushes the rolled segment right away (in the background); the segment is complete.
        old.fsync()
        self.leader_epoch_cache.make_durable()  # the epochs of the records the recovery point now passes
        self.recovery_point = max(self.recovery_point, new_base)
        return seg

    # ------------------------------------------------------------------ read

    @_io("reading from")
    def read(self, offset: int, max_bytes: int, *, isolation: str = "high_watermark",
             min_one_message: bool = True) -> FetchDataInfo:
        """Read whole batches from ``offset`` up to ``max_bytes``.

        ``isolation`` bounds the read: "log_end" (replication), "high_watermark" (consumers,
        read_uncommitted) or "committed" (read_committed, up to the last stable offset).
        """
        if isolation == "log_end":
            upper = self.log_end_offset
        elif isolation == "committed":
            upper = self.last_stable_offset
        else:
            upper = self.high_watermark
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.name}: log start offset {self.log_start_offset}, "
                f"log end offset {self.log_end_offset}")
        if offset < self.local_log_start_offset:
            raise OffsetMovedToTieredStorageError(
                f"offset {offset} of {self.name} is below the local log start offset "
                f"{self.local_log_start_offset}; it is served from remote storage")
        if offset >= upper:
            return FetchDataInfo(offset, None)
        i = self._segment_index_for(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            max_position = None
            next_base = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else None
            if upper < self.log_end_offset and (next_base is None or upper < next_base):
                found = seg.translate_offset(upper)
                max_position = found[0] if found is not None else seg.size
            got = seg.read(offset, max_bytes, max_position, min_one_message)
            if got is not None and got[0].length:
                region, first = got
                aborted = self._aborted_in_read(i, offset, region) if isolation == "committed" else None
                return FetchDataInfo(offset, region, first, aborted)
            if max_position is not None:
                break
            i += 1
        return FetchDataInfo(offset, None)

    def _aborted_in_read(self, index: int, offset: int, region: FileRegion) -> list[tuple[int, int]]:
        """The aborted transactions overlapping a read_committed read of segment ``index`` (Kafka's
        addAbortedTransactions): up to the offset after the region, from that segment on."""
        segments = self.segments
        if not any(seg.txn_index.entries for seg in segments[index:]):
            return []  # the usual case: no abort recorded from here on, no header read
        seg = segments[index]
        end = region.position + region.length
        after = seg.read_header_at(end) if end < seg.size else None
        if after is not None:
            upper = after.base_offset
        else:
            upper = segments[index + 1].base_offset if index + 1 < len(segments) else self.log_end_offset
        return self.collect_aborted_transactions(offset, upper, index)[0]

    def collect_aborted_transactions(self, start: int, upper: int, from_index: int | None = None
                                     ) -> tuple[list[tuple[int, int]], bool]:
        """(producer id, first offset) of the aborted transactions overlapping ``[start, upper)`` in the local
        transaction indexes, from segment ``from_index`` (default: the one holding ``start``) on, and whether
        the search completed (Kafka's collectAbortedTransactions; the remote tier's reader continues here
        when its indexes did not complete it)."""
        found: list[tuple[int, int]] = []
        if from_index is None:
            from_index = self._segment_index_for(start)
        for seg in self.segments[from_index:]:
            got, complete = seg.txn_index.collect(start, upper)
            found += got
            if complete:
                return found, True
        return found, False

    # ------------------------------------------------------------------ ListOffsets

    @_io("looking up an offset of")
    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's UnifiedLog.fetchOffsetByTimestamp for the local log (and the special values)."""
        epoch_of = self.leader_epoch_cache.epoch_for_offset
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_start_offset, epoch_of(self.log_start_offset))
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return TimestampAndOffset(-1, self.local_log_start_offset, epoch_of(self.local_log_start_offset))
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_end_offset, self.leader_epoch_cache.latest_epoch())
        if timestamp == LATEST_TIERED_TIMESTAMP:
            off = self.highest_offset_in_remote_storage
            return TimestampAndOffset(-1, off, epoch_of(off) if off >= 0 else -1)
        if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
            return self._earliest_pending_upload()
        if timestamp == MAX_TIMESTAMP:
            best = None
            for seg in self.segments:
                ts, off = seg.max_timestamp_and_offset()
                if best is None or ts > best[0]:
                    best = (ts, off, seg)
            if best is None or best[0] < 0:
                return TimestampAndOffset(-1, -1, -1)
            ts, off, seg = best
            found = seg.find_batch_by_timestamp(ts, max(seg.base_offset, self.local_log_start_offset))
            if found is None:
                return TimestampAndOffset(-1, -1, -1)
            rec = self._first_record_at_or_after(seg, *found, ts, exact=True)
            return TimestampAndOffset(ts, rec, epoch_of(rec))
        if timestamp < 0:
            raise InvalidRequestError(f"unsupported ListOffsets timestamp {timestamp}")
        for seg in self.segments:
            if seg.largest_timestamp() < timestamp and seg is not self.active_segment:
                continue
            found = seg.find_batch_by_timestamp(timestamp, self.local_log_start_offset)
            if found is None:
                continue
            pos, h = found
            off = self._first_record_at_or_after(seg, pos, h, timestamp)
            ts = self._record_timestamp(seg, pos, h, off)
            return TimestampAndOffset(ts, off, epoch_of(off))
        return None

    def _earliest_pending_upload(self) -> TimestampAndOffset:
        """Kafka 4.3's earliest pending upload offset: the next offset to upload (never below the log start);
        with nothing uploaded, the log start while nothing was deleted locally either, else -1 (the
        uploads are not known yet). -1 without remote storage."""
        if not self.config.remote_storage_enable:
            return TimestampAndOffset(-1, -1, -1)
        tiered = self.highest_offset_in_remote_storage
        if tiered < 0:
            if self.local_log_start_offset != self.log_start_offset:
                return TimestampAndOffset(-1, -1, -1)
            off = self.log_start_offset
        else:
            off = max(tiered + 1, self.log_start_offset)
        return TimestampAndOffset(-1, off, self.leader_epoch_cache.epoch_for_offset(off))

    def _first_record_at_or_after(self, seg: LogSegment, pos: int, h: BatchHeader, ts: int,
                                  exact: bool = False) -> int:
        if h.timestamp_type == 1:  # LogAppendTime: every record carries the batch timestamp
            return max(h.base_offset, self.log_start_offset)
        _, records = decode_batch(seg_region_bytes(seg, pos, h.size), 0)
        for r in records:
            if r.offset >= self.log_start_offset and (r.timestamp == ts if exact else r.timestamp >= ts):
                return r.offset
        return h.last_offset

    def _record_timestamp(self, seg: LogSegment, pos: int, h: BatchHeader, offset: int) -> int:
        if h.timestamp_type == 1:
            return h.max_timestamp
        _, records = decode_batch(seg_region_bytes(seg, pos, h.size), 0)
        for r in records:
            if r.offset == offset:
                return r.timestamp
        return h.max_timestamp

    # ------------------------------------------------------------------ retention and truncation

    @_io("applying retention to")
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention: returns the number of segments deleted.

        Without tiering: time and size retention (when cleanup.policy has delete) and segments
        wholly below the log start offset; the log start offset follows. With tiering: only
        segments already copied to remote storage may go, by local retention; the log start
        offset stays (the remote log manager enforces total retention).
        """
        now = _now_ms() if now_ms is None else now_ms
        cfg = self.config
        deleted = self._delete_while(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
                                     now)
        tiered = self._tiered_copy
        if not cfg.delete_enabled and not tiered:  # a tiered compacted log still has local retention
            return deleted
        retention_ms = cfg.effective_local_retention_ms if tiered else cfg.retention_ms
        retention_bytes = cfg.effective_local_retention_bytes if tiered else cfg.retention_bytes
        if tiered:
            self._maybe_roll_for_tiering(now, retention_ms, retention_bytes)
        if retention_ms >= 0:
            deleted += self._delete_while(_older_than(now, retention_ms), now)
        if retention_bytes >= 0:
            deleted += self._delete_while(_over_size(self.size_in_bytes - retention_bytes), now)
        return deleted

    @property
    def _tiered_copy(self) -> bool:
        """Remote storage in effect with uploads on: local deletion waits for uploads and only moves the
        local log start offset. With ``remote.log.copy.disable`` the local log expires by total
        retention and moves the log start offset, as a plain log (KAFKA-17236)."""
        return self.config.remote_storage_enable and not self.config.remote_log_copy_disable

    def _maybe_roll_for_tiering(self, now: int, retention_ms: int, retention_bytes: int) -> None:
        """Roll an active segment that breaches local retention itself, so it can be uploaded and then
        deleted locally, as Kafka's ``deletableSegments`` does for tiered logs: its retention pass reaches
        the active segment only past older segments it may delete, and then applies the same test to it.
        For size that test (the bytes over retention still cover the whole segment) holds only with
        ``local.retention.bytes=0``: with 1, say, the last records stay local, as on Kafka."""
        seg = self.active_segment
        if seg.size == 0 or self.high_watermark < self.log_end_offset:
            return
        older = len(self.segments) - 1
        predicates = ([_older_than(now, retention_ms)] if retention_ms >= 0 else []) + (
            [_over_size(self.size_in_bytes - retention_bytes)] if retention_bytes >= 0 else [])
        for predicate in predicates:
            if len(self._deletable(predicate)) == older and predicate(seg, None):
                self.roll(now)
                return

    @_io("moving the log start offset of")
    def increment_log_start_offset_from_remote(self, offset: int) -> None:
        """Remote retention (or the oldest remote segment after leadership) moved the log start
        offset (Kafka's ``updateLogStartOffsetFromRemoteTier``); only forward, never past the log end."""
        offset = min(offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return
        self.log_start_offset = offset
        self.high_watermark = max(self.high_watermark, offset)
        self.leader_epoch_cache.truncate_from_start(offset)
        self._delete_while(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset)

    def segments_due_for_deletion(self, now_ms: int | None = None) -> list[LogSegment]:
        """The segments the next retention check deletes (``delete_old_segments`` without deleting): on a
        tiered log, those already copied and past local retention (``tierlog tier status``)."""
        now = _now_ms() if now_ms is None else now_ms
        cfg = self.config
        due = self._deletable(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset)
        tiered = self._tiered_copy
        if not cfg.delete_enabled and not tiered:
            return due
        retention_ms = cfg.effective_local_retention_ms if tiered else cfg.retention_ms
        retention_bytes = cfg.effective_local_retention_bytes if tiered else cfg.retention_bytes
        if retention_ms >= 0:
            due += self._deletable(lambda seg, nxt: now - seg.largest_timestamp() > retention_ms, len(due))
        if retention_bytes >= 0:
            excess = self.size_in_bytes - sum(seg.size for seg in due) - retention_bytes

            def over_size(seg, nxt):
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False
            due += self._deletable(over_size, len(due))
        return due

    def _delete_while(self, predicate, now_ms: int | None = None) -> int:
        doomed = self._deletable(predicate)
        if not doomed:
            return 0
        return self._delete_segments(doomed, now_ms)

    def _deletable(self, predicate, start: int = 0) -> list[LogSegment]:
        """The segments from index ``start`` on that retention may delete, oldest first, while
        ``predicate(segment, next segment)`` holds."""
        tiered = self._tiered_copy
        # one check per pass: it walks the partition's remote segments once, not once per local segment
        current = self.remote_copy_current() if tiered and self.remote_copy_current is not None else None
        doomed = []
        for i in range(start, len(self.segments)):
            seg = self.segments[i]
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            end = nxt.base_offset if nxt is not None else self.log_end_offset
            if seg.size == 0 and nxt is None:
                break
            if self.high_watermark < end:
                break  # never delete what consumers cannot have read yet
            if tiered and end - 1 > self.highest_offset_in_remote_storage and end > self.log_start_offset:
                break  # not yet in the remote tier (and still readable)
            if current is not None and end > self.log_start_offset and not current(seg, end):
                break  # cleaned again after its upload: its replacement is not uploaded yet
            if not predicate(seg, nxt):
                break
            doomed.append(seg)
        return doomed

    def _delete_segments(self, doomed: list[LogSegment], now_ms: int | None) -> int:
        tiered = self._tiered_copy
        if len(doomed) == len(self.segments):
            self.roll()  # there must always be an active segment
        due = (_now_ms() if now_ms is None else now_ms) + self.config.file_delete_delay_ms
        for seg in doomed:
            self._schedule_delete(seg, due)
        del self.segments[:len(doomed)]
        self._bases = [s.base_offset for s in self.segments]
        new_local_start = self.segments[0].base_offset
        if not tiered:
            self.log_start_offset = max(self.log_start_offset, new_local_start)
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.producer_state.delete_snapshots_below(new_local_start)
        return len(doomed)

    def _schedule_delete(self, seg: LogSegment, due_ms: int) -> None:
        """Kafka's async delete: rename to .deleted now, remove after file.delete.delay.ms."""
        seg.flush_indexes()
        seg.rename_suffix(DELETED_SUFFIX)
        self._pending_deletes.append((due_ms, seg))

    @_io("deleting old segments of")
    def delete_expired_files(self, now_ms: int | None = None, force: bool = False) -> None:
        now = _now_ms() if now_ms is None else now_ms
        keep = []
        for due, seg in self._pending_deletes:
            if force or due <= now:
                seg.delete_files()
            else:
                keep.append((due, seg))
        self._pending_deletes = keep

    @_io("deleting records of")
    def maybe_increment_log_start_offset(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the high watermark)."""
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(f"cannot delete records of {self.name} up to {offset}: beyond the "
                                        f"high watermark {self.high_watermark}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self._delete_while(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset)
        return self.log_start_offset

    @_io("truncating")
    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` (replication truncation)."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to negative offset {offset}")
        if offset >= self.log_end_offset:
            return
        if offset < self.local_log_start_offset:
            raise KafkaStorageError(f"cannot truncate {self.name} to {offset}, below the local log start offset")
        self.truncated_below = offset if self.truncated_below is None else min(self.truncated_below, offset)
        i = self._segment_index_for(offset)
        for seg in self.segments[i + 1:]:
            seg.delete_files()
        del self.segments[i + 1:]
        self._bases = [s.base_offset for s in self.segments]
        seg = self.segments[i]
        seg.truncate_to(offset)
        self.log_end_offset = seg.next_offset() if seg.size else seg.base_offset
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.producer_state.truncate_and_reload(self.local_log_start_offset, self.log_end_offset)
        snap = self.producer_state.latest_snapshot_at_or_below(self.log_end_offset)
        if snap is not None and snap >= self.local_log_start_offset:
            self.producer_state.load_snapshot(snap)
        self._replay_producer_state(self.producer_state.map_end_offset)

    @_io("truncating")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset`` (a follower whose log end is below the leader's
        log start, Kafka's truncateFullyAndStartAt): log start, log end and high watermark all become
        ``offset``; leader epochs and producer state start over."""
        if offset < 0:
            raise ValueError(f"cannot start {self.name} at negative offset {offset}")
        for seg in self.segments:
            seg.delete_files()
        self.truncated_below = 0
        self.segments = [self._new_segment(offset)]
        self._bases = [offset]
        self.log_start_offset = self.log_end_offset = self.high_watermark = self.recovery_point = offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_and_reload(offset, offset)
        for snap in list_snapshots(self.dir):
            self.producer_state.delete_snapshot(snap)
        self._unflushed_messages = 0

    def start_at_restore_point(self, log_start_offset: int, log_end_offset: int,
                               leader_epochs: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> bool:
        """Position a new, empty log of a topic rebuilt from the remote tier (``tierlog tier restore``): the
        local log starts empty at ``log_end_offset``, the log starts at ``log_start_offset`` (the remote
        tier serves what lies between) and the leader-epoch cache holds the restored segments' epochs.
        Only a log that never held a record is positioned; False (nothing changed) for any other, so a
        restart or a second image push never moves a log that has data."""
        if self.log_end_offset != 0 or self.log_start_offset != 0 or self.leader_epoch_cache.entries \
                or self.active_segment.size:
            return False
        self.truncate_fully_and_start_at(log_end_offset)
        self.log_start_offset = log_start_offset
        for epoch, offset in leader_epochs:
            self.leader_epoch_cache.assign(epoch, offset)
        log.info("Positioned %s at the remote tier's restore point: log start %d, log end %d, leader epochs %s",
                 self.name, log_start_offset, log_end_offset, list(leader_epochs))
        return True

    # ------------------------------------------------------------------ the log cleaner

    @_io("swapping cleaned segments into")
    def replace_segments(self, base_offset: int, old: list[LogSegment], old_sizes: list[int]) -> LogSegment | None:
        """Put the cleaned segment ``<base_offset>.*.cleaned`` (written and fsynced by the cleaner) in place of
        ``old``, Kafka's crash-safe order: the cleaned files become ``.swap`` (indexes first, the ``.log``
        last: a ``.log.swap`` means the segment is complete), the old segments become ``.deleted`` (removed
        after file.delete.delay.ms, so a read in flight still has its file), then the ``.swap`` files take
        their final names (``.log`` last). :func:`complete_swaps` finishes or undoes an interrupted swap at
        the next start. Only renames: this runs on the event loop. None, and the cleaned files removed, when
        the log changed meanwhile (retention, truncation, deletion took or cut one of ``old``)."""
        n = len(old)
        try:
            i = self.segments.index(old[0])
        except ValueError:
            i = -1
        if (i < 0 or self.segments[i:i + n] != old or i + n >= len(self.segments)
                or any(seg.size != size for seg, size in zip(old, old_sizes))):
            discard_cleaned(self.dir, base_offset)
            return None
        paths = _cleaned_paths(self.dir, base_offset)
        present = [(suffix, path) for suffix, path in paths if os.path.exists(path + CLEANED_SUFFIX)]
        for _, path in present:  # the .log is last in _cleaned_paths
            os.replace(path + CLEANED_SUFFIX, path + SWAP_SUFFIX)
        fsync_dir(self.dir)
        due = _now_ms() + self.config.file_delete_delay_ms
        for seg in old:
            self._schedule_delete(seg, due)
        for _, path in present:
            os.replace(path + SWAP_SUFFIX, path)
        fsync_dir(self.dir)
        cfg = self.config
        seg = LogSegment(self.dir, base_offset, index_interval_bytes=cfg.index_interval_bytes,
                         max_index_size=cfg.segment_index_bytes)
        self.segments[i:i + n] = [seg]
        self._bases = [s.base_offset for s in self.segments]
        return seg

    # ------------------------------------------------------------------ flush and close

    @_io("flushing")
    def flush(self, up_to: int | None = None) -> None:
        """fsync segments below ``up_to`` (default: everything) and advance the recovery point."""
        target = self.log_end_offset if up_to is None else up_to
        for seg in self.segments:
            if seg.base_offset >= target:
                break
            seg.fsync()
        if self._dir_unsynced:  # new segment files: their names must survive a power loss too (as Kafka)
            self._dir_unsynced = False
            fsync_dir(self.dir)
        self.leader_epoch_cache.make_durable()  # the epochs of the records the recovery point now passes
        self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms()

    @_io("flushing")
    def flush_if_due(self, now_ms: int) -> None:
        if self.config.flush_ms < 2**62 and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush()

    def close(self) -> None:
        """Clean close: fsync everything and snapshot producer state at the log end. When that fails (or the
        log is offline) the files are closed without writing more and KafkaStorageError is raised: the
        log dir then gets no clean-shutdown marker, and the next start recovers the log."""
        if self.offline is not None:
            self.close_handles()
            raise self.offline_error()
        try:
            self.flush()
            for seg in self.segments:
                seg.flush_indexes()
            self.producer_state.map_end_offset = self.log_end_offset
            self.producer_state.take_snapshot()
            for seg in self.segments:
                seg.close()
            self.delete_expired_files(force=True)
            return
        except OSError as e:
            error = self._io_failed("closing", e)
            error.__cause__ = e
        except KafkaStorageError as e:  # flush or delete_expired_files failed and reported it
            error = e
        self.close_handles()
        raise error

    @_io("deleting")
    def delete(self) -> None:
        """Delete the partition's folder (topic deletion)."""
        for seg in self.segments:
            seg.close()
        self.delete_expired_files(force=True)
        doomed = f"{self.dir}.{uuid.uuid4().hex}-delete"
        os.replace(self.dir, doomed)
        remove_tree_later(doomed)  # off the loop: a DeleteTopics of thousands of partitions

    # ------------------------------------------------------------------ tools and tests

    def batches(self, from_offset: int | None = None):
        """Yield (segment, position, header) for every batch holding offsets >= ``from_offset``."""
        start = self.local_log_start_offset if from_offset is None else from_offset
        i = self._segment_index_for(start)
        for seg in self.segments[i:]:
            found = seg.translate_offset(start) if seg.base_offset <= start else (0, None)
            if found is None:
                continue
            for pos, h in seg.batches(found[0]):
                yield seg, pos, h


def _cleaned_paths(directory: str, base_offset: int) -> list[tuple[str, str]]:
    """(suffix, final path) of a segment's files, its ``.log`` last (the swap order)."""
    return [(suffix, os.path.join(directory, segment_file_name(base_offset, suffix)))
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)]


def discard_cleaned(directory: str, base_offset: int) -> None:
    """Remove a cleaned segment's ``.cleaned`` files (a round that did not finish). Never its ``.swap``
    files: once the ``.log.swap`` exists the old segments may be going, and only :func:`complete_swaps`
    at the next start may settle it."""
    for _, path in _cleaned_paths(directory, base_offset):
        try:
            os.remove(path + CLEANED_SUFFIX)
        except FileNotFoundError:
            pass


def complete_swaps(directory: str) -> list[int]:
    """Finish the cleaner's swaps a crash interrupted (Kafka's rule for ``.swap`` files at start-up): a
    ``<base>.log.swap`` is a complete cleaned segment, so the segments whose base offsets lie in its offset
    range (the ones it replaces) go and it takes the name ``<base>.log``; its index files are removed and
    rebuilt by recovery. Any other ``.swap`` or ``.cleaned`` file is an unfinished cleaning and goes (the
    caller removes it). Returns the base offsets of the segments swapped in."""
    swapped = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        stem = name[:-len(LOG_SUFFIX + SWAP_SUFFIX)]
        if not stem.isdigit():
            continue
        base = int(stem)
        swap_path = os.path.join(directory, name)
        end = _next_offset_of_file(swap_path, base)
        for other in os.listdir(directory):
            o_stem, ext = os.path.splitext(other)
            if ext in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) and o_stem.isdigit() \
                    and base <= int(o_stem) < max(end, base + 1):
                os.remove(os.path.join(directory, other))  # a replaced segment, or the swap's own indexes
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            try:
                os.remove(os.path.join(directory, segment_file_name(base, suffix)) + SWAP_SUFFIX)
            except FileNotFoundError:
                pass
        os.replace(swap_path, os.path.join(directory, segment_file_name(base, LOG_SUFFIX)))
        log.warning("Completed the swap of cleaned segment %s interrupted by a stop; the segments it replaces "
                    "(offsets %d to %d) are removed", swap_path, base, end - 1)
        swapped.append(base)
    if swapped:
        fsync_dir(directory)
    return swapped


def _next_offset_of_file(path: str, base_offset: int) -> int:
    """The offset after the last whole batch of a segment file (its base offset when it has none)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        nxt = base_offset

        def header_at(pos: int):
            if pos + RECORD_BATCH_OVERHEAD > size:
                return None
            return read_header(os.pread(fd, RECORD_BATCH_OVERHEAD, pos))
        try:
            for pos, h in walk_batches(header_at):
                if pos + h.size > size:
                    break
                nxt = h.last_offset + 1
        except (CorruptMessageError, InvalidRecordError):
            pass
        return nxt
    finally:
        os.close(fd)


def _validate_replicated(data) -> list[BatchHeader]:
    """Complete, CRC-valid batches with increasing offsets and no trailing bytes."""
    headers = []
    end = 0
    for pos, h in iter_batches(data):
        verify_crc(data, pos, h)
        if headers and h.base_offset <= headers[-1].last_offset:
            raise InvalidRecordError(f"batch at position {pos} has base offset {h.base_offset}, not above "
                                     f"the previous batch's last offset {headers[-1].last_offset}")
        headers.append(h)
        end = pos + h.size
    if not headers or end != len(data):
        raise CorruptMessageError(f"replicated data has {len(data) - end} trailing bytes that are not a "
                                  f"complete record batch")
    return headers


def seg_region_bytes(seg: LogSegment, position: int, length: int) -> bytes:
    data = os.pread(seg.fd, length, position)
    if len(data) != length:
        raise CorruptMessageError(f"short read of {seg.log_path} at position {position}")
    return data


__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP", "EARLIEST_TIMESTAMP", "LATEST_TIERED_TIMESTAMP", "LATEST_TIMESTAMP",
    "LOG_OVERHEAD", "MAX_TIMESTAMP", "FetchDataInfo", "Log", "LogAppendInfo", "OffsetMovedToTieredStorageError",
    "TimestampAndOffset", "parse_partition_dir",
]
