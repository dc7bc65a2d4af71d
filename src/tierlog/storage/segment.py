"""One log segment: ``<base offset>.log`` plus its ``.index``, ``.timeindex`` and, once a transaction is
aborted in it, ``.txnindex``.

The .log file holds record batches exactly as they travel on the wire. Appends go to the end of
the file through an O_APPEND descriptor; reads use pread on the same descriptor and hand out file
regions that the network layer can send with sendfile, so record bytes never need to become
Python objects on the fetch path.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tierlog.errors import CorruptMessageError, KafkaError, KafkaStorageError
from tierlog.records import RECORD_BATCH_OVERHEAD, BatchHeader, read_header, verify_crc, walk_batches
from tierlog.records.batch import MIN_BATCH_LENGTH
from tierlog.storage.checkpoints import fsync_dir
from tierlog.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from tierlog.storage.transaction_index import SUFFIX as TXN_INDEX_SUFFIX
from tierlog.storage.transaction_index import TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"  # a segment being rewritten (recovery, the cleaner); removed at start-up if left behind
SWAP_SUFFIX = ".swap"  # a cleaned segment being swapped in (see Log.replace_segments)
INT32_MAX = 2**31 - 1
_SCAN_CHUNK = 8 << 20  # bytes read at a time when recovery looks for the next valid batch
_MAGIC_POS = 16  # byte of the magic in a batch header
_LENGTH_POS = 8  # batch length (int32) in a batch header


class UnrecoverableSegmentError(KafkaStorageError):
    """Recovery found a CRC-valid batch that it cannot keep where it is (its offsets go backwards or leave
    the segment's range; the base offset is not covered by the CRC). Rather than drop intact data it
    changes nothing in the ``.log`` file and the log stays offline for an operator to look at."""


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """A byte range of a segment file, sendable with os.sendfile without copying into Python. ``fd`` -1:
    no descriptor is held and the file is opened by ``path`` (remote objects, which are never rewritten)."""

    fd: int
    path: str
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    def open(self) -> int:
        """A descriptor of its own for the file (the caller closes it): a segment closed meanwhile can
        then never make its number, reused, point at another file."""
        return os.dup(self.fd) if self.fd >= 0 else os.open(self.path, os.O_RDONLY)

    def read(self) -> bytes:
        fd = self.fd if self.fd >= 0 else self.open()
        try:
            data = os.pread(fd, self.length, self.position)
        finally:
            if fd != self.fd:
                os.close(fd)
        if len(data) != self.length:
            raise CorruptMessageError(f"short read from {self.path} at position {self.position}: "
                                      f"{len(data)} of {self.length} bytes")
        return data


class LogSegment:
    def __init__(self, directory: str, base_offset: int, *, index_interval_bytes: int, max_index_size: int,
                 roll_jitter_ms: int = 0, created_ms: int | None = None):
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.log_path = os.path.join(directory, segment_file_name(base_offset, LOG_SUFFIX))
        self.offset_index = OffsetIndex(os.path.join(directory, segment_file_name(base_offset, INDEX_SUFFIX)),
                                        base_offset, max_index_size)
        self.time_index = TimeIndex(os.path.join(directory, segment_file_name(base_offset, TIME_INDEX_SUFFIX)),
                                    base_offset, max_index_size)
        # Created on the first aborted transaction only (Kafka's lazy TransactionIndex).
        self.txn_index = TransactionIndex(os.path.join(directory, segment_file_name(base_offset, TXN_INDEX_SUFFIX)),
                                          base_offset)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size
        # Kafka creates both indexes with the segment; its loader treats a missing .index as damage.
        for index in (self.offset_index, self.time_index):
            if not os.path.exists(index.path):
                os.close(os.open(index.path, os.O_WRONLY | os.O_CREAT, 0o644))
        self.created_ms = created_ms if created_ms is not None else int(time.time() * 1000)
        self._bytes_since_last_index_entry = 0
        self._max_ts: tuple[int, int] | None = None  # (max timestamp, offset of its batch), lazily known
        self._rolling_based_timestamp: int | None = None
        self._next_offset: int | None = None  # lazily known next offset after the last batch
        # (offset, position, header or None) where the next sequential read starts; reset when
        # the file shrinks.
        self._read_hint: tuple[int, int, BatchHeader | None] | None = None
        self.unflushed = False
        self._torn = False  # a failed append left bytes that could not be cut off again

    # -- lifecycle --

    @property
    def fd(self) -> int:
        return self._fd

    def close(self) -> None:
        self.flush_indexes()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def close_handles(self) -> None:
        """Close the file without writing anything (Kafka's closeHandlers: the log dir went offline)."""
        self.offset_index.discard_pending()
        self.time_index.discard_pending()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def is_intact(self) -> bool:
        """The file holds exactly the batches the segment accounts for: no failed append left a partial
        batch behind its last one (tiered storage uploads only intact segments)."""
        return not self._torn and self._fd >= 0 and os.fstat(self._fd).st_size == self.size

    def flush_indexes(self) -> None:
        self.offset_index.flush()
        self.time_index.flush()

    def fsync(self) -> None:
        if self._fd >= 0 and self.unflushed:
            os.fsync(self._fd)
            self.unflushed = False
        self.offset_index.fsync()
        self.time_index.fsync()
        self.txn_index.fsync()

    def on_become_inactive(self) -> None:
        """Called on roll: record the segment's final max timestamp in the time index (as Kafka does)."""
        ts, off = self.max_timestamp_and_offset()
        if ts >= 0:
            self.time_index.maybe_append(ts, off, skip_full_check=True)
        self.flush_indexes()

    def rename_suffix(self, suffix: str) -> None:
        """Rename the files by appending ``suffix`` (Kafka's async delete uses ``.deleted``)."""
        new_log = self.log_path + suffix
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        self.offset_index.rename(self.offset_index.path + suffix)
        self.time_index.rename(self.time_index.path + suffix)
        self.txn_index.rename(self.txn_index.path + suffix)

    def delete_files(self) -> None:
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
        self.txn_index.delete()

    # -- append --

    def append_batches(self, pieces: list, total: int, headers: list[tuple[int, BatchHeader]]) -> None:
        """Append validated batches given as buffers (written with writev, no joining copy).

        ``headers`` are (position within the appended bytes, header) pairs; ``total`` the byte count.
        """
        physical = self.size
        if self._torn:
            raise OSError(f"{self.log_path} ends in a partial batch of a failed append; nothing more is appended")
        try:
            _write_all(self._fd, pieces, total)
        except OSError as e:
            # Part of the batches may be in the file (ENOSPC mid-write). Cut them off so the file ends at
            # its last complete batch; the caller takes the log dir offline either way, and should the
            # cut fail too, recovery truncates the torn tail at the next start.
            try:
                os.ftruncate(self._fd, physical)
            except OSError as undo:
                self._torn = True
                e.add_note(f"the partial write could not be cut off {self.log_path}: {undo}")
            raise
        if physical == 0 and headers:
            self._rolling_based_timestamp = headers[0][1].max_timestamp
        self.unflushed = True
        max_ts = self.max_timestamp_and_offset()
        for pos, h in headers:
            if h.max_timestamp > max_ts[0]:
                max_ts = (h.max_timestamp, h.last_offset)
            # One index entry per batch at most, keyed by the batch's last offset, as Kafka writes
            # them (DumpLogSegments checks each entry against the first batch at its position).
            if self._bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(h.last_offset, physical + pos)
                self.time_index.maybe_append(max_ts[0], max_ts[1])
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += h.size
        self._max_ts = max_ts
        self.size = physical + total
        self._next_offset = headers[-1][1].last_offset + 1 if headers else self._next_offset

    # -- queries --

    def read_header_at(self, position: int) -> BatchHeader | None:
        """The batch header at ``position``, or None at the end of the file."""
        if position + RECORD_BATCH_OVERHEAD > self.size:
            if position < self.size:
                raise CorruptMessageError(f"truncated batch header in {self.log_path} at position {position}")
            return None
        return read_header(os.pread(self._fd, RECORD_BATCH_OVERHEAD, position))

    def batches(self, position: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Position and header of each batch from ``position`` (a batch start) on, before ``end``."""
        return walk_batches(self.read_header_at, position, end)

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        hint = self._read_hint
        if hint is not None and hint[0] == offset and hint[1] >= start_position:
            h = hint[2] if hint[2] is not None else self.read_header_at(hint[1])
            if h is not None:
                return hint[1], h
        _, indexed = self.offset_index.lookup(offset)
        for pos, h in self.batches(max(indexed, start_position)):
            if h.last_offset >= offset:
                return pos, h
        return None

    def read(self, offset: int, max_bytes: int, max_position: int | None = None,
             min_one_message: bool = True) -> tuple[FileRegion, int] | None:
        """Batch-aligned region starting at the batch holding ``offset``.

        Returns (region, first batch base offset) or None when ``offset`` is past the end. The
        region holds whole batches only, as many as fit in ``max_bytes`` (at least one when
        ``min_one_message``), never beyond ``max_position``.
        """
        found = self.translate_offset(offset)
        if found is None:
            return None
        start, first = found
        limit = self.size if max_position is None else min(max_position, self.size)
        if start >= limit:
            return FileRegion(self._fd, self.log_path, start, 0), first.base_offset
        end_cap = min(limit, start + max_bytes)
        if start + first.size > end_cap:
            length = min(first.size, limit - start) if min_one_message else 0
            return FileRegion(self._fd, self.log_path, start, length), first.base_offset
        # The first batch fits. Jump with the index to the last indexed batch start within the
        # limit (every batch before it fits too), then walk the few batches after it.
        pos = start + first.size
        next_offset: int | None = first.last_offset + 1
        _, indexed = self.offset_index.lookup_position(end_cap)
        if indexed > pos:
            pos, next_offset = indexed, None
        next_header = None
        for at, h in self.batches(pos, end_cap):
            if at + h.size > end_cap:
                next_header = h
                break
            pos = at + h.size
            next_offset = h.last_offset + 1
        # Remember where the next sequential read starts, so it needs no index search.
        if next_header is not None:
            self._read_hint = (next_header.base_offset, pos, next_header)
        elif next_offset is not None:
            self._read_hint = (next_offset, pos, None)
        return FileRegion(self._fd, self.log_path, start, pos - start), first.base_offset

    def next_offset(self) -> int:
        """Offset after the segment's last batch (the base offset when empty)."""
        if self._next_offset is None:
            _, pos = self.offset_index.lookup(2**62)
            nxt = self.base_offset
            for _, h in self.batches(pos):
                nxt = h.last_offset + 1
            self._next_offset = nxt
        return self._next_offset

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        if self._max_ts is None:
            self._max_ts = self.time_index.peek_last_entry()
        return self._max_ts

    def largest_timestamp(self) -> int:
        """Kafka's LogSegment.largestTimestamp: max batch timestamp, else the file's mtime."""
        ts, _ = self.max_timestamp_and_offset()
        if ts >= 0:
            return ts
        return int(os.path.getmtime(self.log_path) * 1000)

    def should_roll(self, incoming_bytes: int, max_timestamp: int, last_offset: int, now_ms: int,
                    segment_bytes: int, segment_ms: int) -> bool:
        if self.size > segment_bytes - incoming_bytes:
            return self.size > 0
        if self.size > 0:
            if self._rolling_based_timestamp is None:
                self._rolling_based_timestamp = self._first_batch_timestamp()
            if self._rolling_based_timestamp is not None and self._rolling_based_timestamp >= 0:
                waited = max_timestamp - self._rolling_based_timestamp
            else:
                waited = now_ms - self.created_ms
            if waited > segment_ms - self.roll_jitter_ms:
                return True
        return (self.offset_index.is_full() or self.time_index.is_full()
                or last_offset - self.base_offset > INT32_MAX)

    def first_batch_timestamp(self) -> int | None:
        """The max timestamp of the first batch (Kafka's getFirstBatchTimestamp), None when empty."""
        return self._first_batch_timestamp()

    def _first_batch_timestamp(self) -> int | None:
        h = self.read_header_at(0)
        return h.max_timestamp if h is not None else None

    def find_batch_by_timestamp(self, target_ts: int, start_offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch at/after ``start_offset`` with max timestamp >= target."""
        _, ts_offset = self.time_index.lookup(target_ts)
        _, indexed = self.offset_index.lookup(max(ts_offset, start_offset))
        for pos, h in self.batches(indexed):
            if h.max_timestamp >= target_ts and h.last_offset >= start_offset:
                return pos, h
        return None

    # -- recovery --

    def sanity_check_end(self) -> bool:
        """Cheap check that the batch chain from the last index entry ends exactly at the file end."""
        try:
            self.offset_index.sanity_check(self.size)
            self.time_index.sanity_check()
            self.txn_index.sanity_check()  # a bad one: the segment is recovered, which rebuilds it
            _, pos = self.offset_index.last_entry()
            for at, h in self.batches(pos, self.size):
                pos = at + h.size
            return pos == self.size
        except (KafkaError, CorruptIndexError):
            return False

    def recover(self, on_batch=None) -> int:
        """Validate every batch, rebuild both indexes (and empty the transaction index: the log rebuilds it
        as it replays producer state over the segment), remove the bytes that are not a valid batch.

        A batch is valid when its header parses, it lies wholly in the file and its CRC32C matches. Bytes
        that are not a valid batch are removed, and a valid batch never is: invalid bytes that run to the
        end of the file are a torn tail and are truncated (a write the crash or a full disk cut short);
        invalid bytes followed by a valid batch (the next position whose CRC matches, found by scanning
        forward) are cut out, and the segment is rewritten without them, through a ``.cleaned`` copy
        renamed over it. A valid batch whose offsets do not follow the previous one, or leave the
        segment's range, raises :class:`UnrecoverableSegmentError` before the ``.log`` file changes.

        ``on_batch(header)`` is called for each kept batch (producer state, epochs). Returns the number
        of bytes removed.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()  # the log replays the producer state over the segment and rebuilds it
        self._read_hint = None
        self._max_ts = (-1, self.base_offset)
        keep: list[tuple[int, int]] = []  # byte ranges of the file that stay, in order
        run_start = 0  # where the current run of valid batches started
        cut = 0  # bytes cut out before ``pos``: a kept batch moves down by this much
        pos = 0
        last_index_entry = 0
        next_offset = self.base_offset
        accepted = False
        while pos < self.size:
            h, problem = self._valid_batch_at(pos)
            if problem is not None:
                keep.append((run_start, pos))
                resume = self._next_valid_batch(pos + 1)
                if resume is None:
                    log.warning("Found invalid data in log segment %s at byte position %d (after offset %d): %s; "
                                "no valid batch follows, so the %d bytes from there are a torn tail",
                                self.log_path, pos, next_offset - 1, problem, self.size - pos)
                    break
                log.warning("Found invalid data in log segment %s at byte positions %d-%d (after offset %d): %s; "
                            "a valid batch follows at position %d, so only those %d bytes are cut out",
                            self.log_path, pos, resume, next_offset - 1, problem, resume, resume - pos)
                cut += resume - pos
                pos = run_start = resume
                continue
            if h.base_offset < self.base_offset or h.last_offset - self.base_offset > INT32_MAX or \
                    (accepted and h.base_offset < next_offset):
                raise UnrecoverableSegmentError(
                    f"log segment {self.log_path} holds a batch with a valid CRC at byte position {pos} whose "
                    f"offsets {h.base_offset}..{h.last_offset} cannot follow offset {next_offset - 1} in a segment "
                    f"starting at {self.base_offset}; the segment is left unchanged and its log offline")
            new_pos = pos - cut
            if h.max_timestamp > self._max_ts[0]:
                self._max_ts = (h.max_timestamp, h.last_offset)
            if new_pos - last_index_entry > self.index_interval_bytes:
                self.offset_index.append(h.last_offset, new_pos)
                self.time_index.maybe_append(*self._max_ts)
                last_index_entry = new_pos
            if on_batch is not None:
                on_batch(h)
            next_offset = h.last_offset + 1
            accepted = True
            pos += h.size
        else:
            keep.append((run_start, self.size))
        ranges = [(a, b) for a, b in keep if b > a]
        valid = sum(b - a for a, b in ranges)
        removed = self.size - valid
        if removed:
            if not ranges or (len(ranges) == 1 and ranges[0][0] == 0):
                os.ftruncate(self._fd, valid)
            else:
                self._rewrite_keeping(ranges)
            self.size = valid
        if self._max_ts[0] >= 0:
            self.time_index.maybe_append(*self._max_ts, skip_full_check=True)
        self.flush_indexes()
        self._bytes_since_last_index_entry = valid - last_index_entry
        self._next_offset = next_offset
        self._rolling_based_timestamp = None
        self._torn = False
        return removed

    def _valid_batch_at(self, pos: int) -> tuple[BatchHeader | None, str | None]:
        """(header, None) when a whole batch with a matching CRC starts at ``pos``, else (None, why not)."""
        try:
            head = os.pread(self._fd, RECORD_BATCH_OVERHEAD, pos)
            if len(head) < RECORD_BATCH_OVERHEAD:
                raise CorruptMessageError(f"torn batch header at position {pos}")
            h = read_header(head)
            if pos + h.size > self.size:
                raise CorruptMessageError(f"batch at position {pos} needs {h.size} bytes, "
                                          f"only {self.size - pos} remain")
            if h.size <= 1 << 20:
                verify_crc(os.pread(self._fd, h.size, pos), 0, h)
            else:
                verify_crc(_read_exact(self._fd, pos, h.size), 0, h)
        except KafkaError as e:
            return None, str(e)
        return h, None

    def _next_valid_batch(self, start: int) -> int | None:
        """The first position at or after ``start`` where a valid batch starts, or None. Candidates are the
        positions whose magic byte is 2 and whose length fits the file; the CRC decides."""
        base = start
        while base + RECORD_BATCH_OVERHEAD <= self.size:
            chunk = os.pread(self._fd, min(_SCAN_CHUNK + RECORD_BATCH_OVERHEAD, self.size - base), base)
            candidates = min(_SCAN_CHUNK, len(chunk) - RECORD_BATCH_OVERHEAD + 1)
            i = _MAGIC_POS
            while (i := chunk.find(b"\x02", i, candidates + _MAGIC_POS)) >= 0:
                c = i - _MAGIC_POS
                length = int.from_bytes(chunk[c + _LENGTH_POS:c + _LENGTH_POS + 4], "big", signed=True)
                if length >= MIN_BATCH_LENGTH and base + c + 12 + length <= self.size and \
                        self._valid_batch_at(base + c)[1] is None:
                    return base + c
                i += 1
            base += _SCAN_CHUNK
        return None

    def _rewrite_keeping(self, ranges: list[tuple[int, int]]) -> None:
        """Replace the file by the concatenation of ``ranges`` of it: written to ``<name>.cleaned``, fsynced,
        renamed over the segment (a crash before the rename leaves the old file, recovered again)."""
        tmp = self.log_path + CLEANED_SUFFIX
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for a, b in ranges:
                while a < b:
                    data = os.pread(self._fd, min(b - a, _SCAN_CHUNK), a)
                    if not data:
                        raise OSError(f"{self.log_path} ended at {a} while rewriting it")
                    _write_all(out, [data], len(data))
                    a += len(data)
            os.fsync(out)
        except OSError:
            os.close(out)
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise
        os.close(out)
        os.replace(tmp, self.log_path)
        fsync_dir(self.directory)
        old, self._fd = self._fd, os.open(self.log_path, os.O_RDWR | os.O_APPEND)
        os.close(old)
        log.warning("Rewrote log segment %s without its invalid bytes: %d bytes kept", self.log_path,
                    sum(b - a for a, b in ranges))

    def truncate_to(self, offset: int) -> int:
        """Remove every batch at or after ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        pos, _ = found  # Kafka's rule: the batch holding ``offset`` goes too (batches never split)
        self._read_hint = None
        self.flush_indexes()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - pos
        os.ftruncate(self._fd, pos)
        self.size = pos
        self._max_ts = None
        self._next_offset = None
        self._rolling_based_timestamp = None
        if removed:
            # Recompute the tail state (max timestamp, bytes since last index entry) from the index.
            _, last_pos = self.offset_index.last_entry()
            self._bytes_since_last_index_entry = self.size - last_pos if self.offset_index.entries else self.size
            self._max_ts = self._scan_max_timestamp()
        return removed

    def _scan_max_timestamp(self) -> tuple[int, int]:
        best = (-1, self.base_offset)
        for _, h in self.batches():
            if h.max_timestamp > best[0]:
                best = (h.max_timestamp, h.last_offset)
        return best


def _write_all(fd: int, pieces: list, total: int) -> None:
    """writev every piece, resuming after short writes; at most IOV_MAX buffers per call."""
    written = 0
    views = [memoryview(p) for p in pieces if len(p)]
    while views:
        n = os.writev(fd, views[:1024])
        written += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]
    if written != total:
        raise OSError(f"wrote {written} of {total} bytes")


def _read_exact(fd: int, position: int, length: int) -> bytes:
    parts = []
    got = 0
    while got < length:
        part = os.pread(fd, min(length - got, 1 << 24), position + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)
