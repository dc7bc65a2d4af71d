"""Runs of remote segments of a compacted topic rebuilt from the leader's cleaned local log, for the case
the replacement of a remote segment by the local segment of the same range cannot serve: the leader's
segment boundaries differ from those of the leader that uploaded them (docs/tiered-storage.md, "Compacted
topics", "When the boundaries differ").

What is here: grouping finished remote segments into runs of overlapping ranges, locating a range in the
local segments (file positions, batch-aligned or not at all), and writing a segment file with its indexes
from those positions. The remote log manager decides when, uploads and retires."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from tierlog.storage import LogSegment
from tierlog.storage.transaction_index import AbortedTxn, parse_entries
from tierlog.tiered.metadata import RemoteLogSegmentMetadata

#: Folder of the log dir holding replacement files while they upload (never a partition folder name).
FOLDER = "remote-log-replacements"
#: Bytes read from a local segment at once while a replacement file is written.
_CHUNK = 8 << 20


@dataclass
class Run:
    """Finished remote segments whose ranges overlap one another (chained), taken whole: ``[start, end]``."""

    start: int
    end: int
    members: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    #: (local segment, first position, end position) holding the batches of the range, or None when the
    #: local log does not hold the range between batches.
    pieces: list[tuple[LogSegment, int, int]] | None = None
    stale: bool = False
    replaceable: bool = False
    #: The run ends inside a local segment not uploaded yet (see :func:`ends_before_upload`).
    awaits_upload: bool = False

    @property
    def local_bytes(self) -> int:
        return sum(p1 - p0 for _, p0, p1 in self.pieces or ())

    def overlaps(self, start: int, end_exclusive: int) -> bool:
        return self.start < end_exclusive and start <= self.end


def overlap_runs(finished: list[RemoteLogSegmentMetadata]) -> list[Run]:
    """Group segments into runs: a segment joins the run before it when it overlaps its range."""
    runs: list[Run] = []
    for md in sorted(finished, key=lambda m: (m.start_offset, -m.end_offset)):
        if runs and md.start_offset <= runs[-1].end:
            run = runs[-1]
            run.end = max(run.end, md.end_offset)
            run.members.append(md)
        else:
            runs.append(Run(md.start_offset, md.end_offset, [md]))
    return runs


def ends_before_upload(bases: list[int], log_end_offset: int, run_end: int, highest_remote: int) -> bool:
    """Whether a run ending at ``run_end`` ends inside a local segment (its base offsets ``bases``, the last one
    the active segment's, ending at ``log_end_offset``) whose offsets after the run are not uploaded yet. Its
    upload will overlap the run, which then needs a rebuild from the local batches of the whole range: until
    then local retention keeps the segments the run touches (else the overlap could never be rebuilt)."""
    ends = [b for b in bases if b > run_end]
    holder_end = ends[0] if ends else log_end_offset
    return holder_end != run_end + 1 and holder_end - 1 > highest_remote


def within_lineage(md: RemoteLogSegmentMetadata, log_end_offset: int, entries: list[tuple[int, int]]) -> bool:
    """Whether the segment belongs to the leader's lineage ``entries`` (filtered of empty epochs) as far as a
    compacted log can tell: each of its epochs is one of the lineage's and ends, in the segment, no later
    than the lineage's, and the segment ends below the log end. Unlike Kafka's check, an epoch may start
    earlier in the segment than in the lineage: a replica that fetched after the cleaner emptied the start
    of an epoch begins it at its first surviving batch."""
    if md.end_offset >= log_end_offset or not entries:
        return False
    ends = {e: (entries[i + 1][1] - 1 if i + 1 < len(entries) else log_end_offset - 1)
            for i, (e, _) in enumerate(entries)}
    items = sorted(md.segment_leader_epochs.items(), key=lambda eo: eo[1])
    for i, (epoch, _) in enumerate(items):
        end = items[i + 1][1] - 1 if i + 1 < len(items) else md.end_offset
        if epoch not in ends or end > ends[epoch]:
            return False
    return True


def run_epochs(local: dict[int, int], run: Run) -> dict[int, int]:
    """The leader epochs of a rebuilt run: each epoch from the earliest offset the leader's lineage or any
    replaced segment starts it at. Replicas can disagree there: a follower that fetched after the leader's
    cleaner emptied the start of an epoch begins it at its first surviving batch. Taking the earliest keeps
    every offset a replaced segment served in the epoch it was served in (so the metadata cache moves all of
    them to the rebuild) and names every epoch of the records the rebuild holds. None of the offsets between
    two candidate starts holds a record on any replica (the later start is the first surviving batch)."""
    starts = dict(local)
    for md in run.members:
        for epoch, start in md.segment_leader_epochs.items():
            if start <= run.end and (epoch not in starts or start < starts[epoch]):
                starts[epoch] = max(start, run.start)
    out: dict[int, int] = {}
    for epoch in sorted(starts):  # epochs start at increasing offsets: an empty one gives way, a disorder is dropped
        last = next(reversed(out), None)
        if last is not None and starts[epoch] == out[last]:
            del out[last]
        if last is None or starts[epoch] >= out.get(last, -1):
            out[epoch] = starts[epoch]
    return out


def checkpoint_through(entries, epochs: dict[int, int], start: int) -> list[tuple[int, int]]:
    """The leader-epoch checkpoint shipped with a rebuilt run starting at ``start``: the leader's entries
    before it, then the run's epochs (an epoch already begun before ``start`` keeps its earlier start)."""
    out = {e: o for e, o in entries if o < start}
    for epoch, offset in epochs.items():
        out.setdefault(epoch, offset)
    return sorted(out.items(), key=lambda eo: (eo[1], eo[0]))


def local_pieces(segments: list[LogSegment], start: int, end_exclusive: int
                 ) -> list[tuple[LogSegment, int, int]] | None:
    """Where the local ``segments`` (the log's, oldest first) hold the batches of ``[start, end_exclusive)``:
    (segment, position of the first batch, position after the last) per segment touched. None when the
    range begins before the first segment or a batch reaches across ``start`` or ``end_exclusive``."""
    if not segments or start < segments[0].base_offset:
        return None
    out = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if nxt is not None and nxt <= start:
            continue
        if seg.base_offset >= end_exclusive:
            break
        p0 = 0
        if start > seg.base_offset:
            found = seg.translate_offset(start)
            if found is None:
                p0 = seg.size
            elif found[1].base_offset < start:
                return None
            else:
                p0 = found[0]
        p1 = seg.size
        if nxt is None or end_exclusive < nxt:
            found = seg.translate_offset(end_exclusive)
            if found is not None:
                if found[1].base_offset < end_exclusive:
                    return None
                p1 = found[0]
        out.append((seg, p0, max(p0, p1)))
    return out


@dataclass
class Built:
    """A replacement's files: ``directory`` holds the segment (base offset ``start``) and its indexes."""

    directory: str
    segment: LogSegment
    size: int
    max_timestamp: int  # -1 when no batch is left
    snapshot: str | None
    txn_index: str | None


def aborted_in(segments: list[LogSegment], start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions of the local transaction indexes whose markers lie in ``[start, end]``
    (read from the files: this runs on a worker thread)."""
    out: dict[tuple, AbortedTxn] = {}
    for seg in segments:
        try:
            with open(seg.txn_index.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        for txn in parse_entries(data, seg.txn_index.path):
            if start <= txn.last_offset <= end:
                out[(txn.producer_id, txn.last_offset)] = txn
    return sorted(out.values(), key=lambda t: t.last_offset)


def build(directory: str, start: int, pieces: list[tuple[LogSegment, int, int]], *, index_interval_bytes: int,
          max_index_size: int, aborted: list[AbortedTxn], snapshot: bytes | None) -> Built:
    """Write the segment ``start`` in ``directory`` (new) from the local ``pieces``, its offset and time
    indexes as an append would build them, its transaction index and the producer snapshot. Runs on a worker
    thread; reads the local files with ``pread`` (a segment the cleaner swapped away meanwhile fails the
    read or is noticed by the caller, which then tries again later)."""
    os.makedirs(directory)
    seg = LogSegment(directory, start, index_interval_bytes=index_interval_bytes, max_index_size=max_index_size)
    try:
        max_ts = -1
        for src, p0, p1 in pieces:
            headers = list(src.batches(p0, p1))
            i = 0
            while i < len(headers):  # whole batches, about _CHUNK bytes at a time
                first = headers[i][0]
                j = i + 1
                while j < len(headers) and headers[j][0] + headers[j][1].size - first <= _CHUNK:
                    j += 1
                last_pos, last_h = headers[j - 1]
                length = last_pos + last_h.size - first
                data = os.pread(src.fd, length, first)
                if len(data) != length:
                    raise OSError(f"short read of {src.log_path} at {first}: {len(data)} of {length} bytes")
                seg.append_batches([data], length, [(pos - first, h) for pos, h in headers[i:j]])
                max_ts = max(max_ts, max(h.max_timestamp for _, h in headers[i:j]))
                i = j
        for txn in aborted:
            seg.txn_index.append(txn)
        seg.on_become_inactive()
        seg.fsync()
        snapshot_path = None
        if snapshot is not None:
            snapshot_path = os.path.join(directory, "producer.snapshot")
            with open(snapshot_path, "wb") as f:
                f.write(snapshot)
        return Built(directory, seg, seg.size, max_ts, snapshot_path,
                     seg.txn_index.path if seg.txn_index.exists() else None)
    except BaseException:
        seg.close()
        shutil.rmtree(directory, ignore_errors=True)
        raise


def remove(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def clear_leftovers(root: str, prefix: str) -> None:
    """Remove replacement folders of one partition a crash or a cut-short upload left behind."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(prefix):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
