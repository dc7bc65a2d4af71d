"""Leader-epoch lineage rules of the remote log manager (Kafka's RemoteLogManager helpers).

A remote segment belongs to the log only if its leader epochs agree with the local leader-epoch
cache: retention, the copied-offset computation and reads all follow that lineage, so segments left
behind by a deposed leader (or an unclean election) are ignored and later cleaned up. Pure functions
over ``[(epoch, start offset), ...]`` lists, ascending.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tierlog.tiered.metadata import RemoteLogSegmentMetadata

Epochs = Sequence[tuple[int, int]]


def filtered_epochs(entries: Epochs) -> list[tuple[int, int]]:
    """Drop epochs that hold no records (their start equals the next epoch's start); Kafka's
    ``buildFilteredLeaderEpochMap``."""
    out = []
    for i, (epoch, start) in enumerate(entries):
        if i + 1 < len(entries) and entries[i + 1][1] == start:
            continue
        out.append((epoch, start))
    return out


def epoch_end_offsets(entries: Epochs, log_end_offset: int) -> dict[int, int]:
    """Each epoch's end offset, exclusive (the next epoch's start, or the log end offset)."""
    return {epoch: (entries[i + 1][1] if i + 1 < len(entries) else log_end_offset)
            for i, (epoch, _) in enumerate(entries)}


def epochs_in_range(entries: Epochs, start: int, end_exclusive: int) -> dict[int, int]:
    """The epochs with records in ``[start, end_exclusive)``, each mapped to its first offset there
    (the segment leader epochs of a segment about to be copied)."""
    out: dict[int, int] = {}
    for i, (epoch, epoch_start) in enumerate(entries):
        epoch_end = entries[i + 1][1] if i + 1 < len(entries) else None
        if epoch_end is not None and epoch_end <= start:
            continue
        if epoch_start >= end_exclusive:
            break
        out[epoch] = max(epoch_start, start)
    return out


def find_highest_remote_offset(entries: Epochs, log_end_offset: int,
                               highest_for_epoch: Callable[[int], int | None]) -> tuple[int, int]:
    """(offset, epoch) of the highest offset copied within the local lineage; (-1, -1) when none.

    Walk epochs from the latest: the first with a remote highest offset H wins; if the epoch ends
    locally at E (exclusive) with E <= H, the remote data went past this lineage and E - 1 counts."""
    ends = epoch_end_offsets(entries, log_end_offset)
    for epoch, _ in reversed(entries):
        highest = highest_for_epoch(epoch)
        if highest is None or highest < 0:
            continue
        end = ends[epoch]
        return (end - 1, epoch) if end <= highest else (highest, epoch)
    return -1, -1


def segment_within_leader_epochs(md: RemoteLogSegmentMetadata, log_end_offset: int, entries: Epochs) -> bool:
    """Kafka's ``isRemoteSegmentWithinLeaderEpochs``: the segment's epochs are a contiguous piece of the
    local lineage (``entries`` already filtered of empty epochs)."""
    if not entries:
        return False
    cache = dict(entries)
    cache_epochs = [e for e, _ in entries]
    seg = filtered_epochs(list(md.segment_leader_epochs.items()))
    if not seg:
        return False
    last_seg_epoch = seg[-1][0]
    if last_seg_epoch < cache_epochs[0] or last_seg_epoch > cache_epochs[-1]:
        return False
    usable = [(e, s) for e, s in seg if e >= cache_epochs[0]]
    if not usable:
        return False
    for i, (epoch, seg_start) in enumerate(usable):
        if epoch not in cache:
            return False
        pos = cache_epochs.index(epoch)
        if i == 0 and pos != 0 and seg_start < cache[epoch]:
            return False
        if i == len(usable) - 1:
            if pos + 1 < len(cache_epochs) and md.end_offset > entries[pos + 1][1] - 1:
                return False
        else:
            if pos + 1 >= len(cache_epochs) or entries[pos + 1] != usable[i + 1]:
                return False
    return md.end_offset < log_end_offset
