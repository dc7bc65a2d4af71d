"""Loading a partition drops the records a later non-transactional record of the same key supersedes
(:class:`~tierlog.coordinator.storage.PartitionRecords`, over the compiled record scanner): the state a shard
replays from what is kept equals the state from every record, transactional offsets and markers included."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tierlog.coordinator import CoordinatorConfig, KeyedTimer
from tierlog.coordinator.records import GroupMetadataKey, OffsetCommitKey, OffsetCommitValue, encode_key, encode_value
from tierlog.coordinator.shard import GroupCoordinatorShard
from tierlog.coordinator.storage import LoadedMarker, LoadedRecord, OffsetsTopicStore, PartitionRecords
from tierlog.coordinator.timer import ScopedTimer
from tierlog.errors import CorruptMessageError
from tierlog.records import scan
from tierlog.records.control import end_txn_marker_batch
from tierlog.records.record import build_batch

from .support import Clock, LocalTopicLog


def _shard(entries) -> GroupCoordinatorShard:
    clock = Clock()
    shard = GroupCoordinatorShard(0, CoordinatorConfig(), None, ScopedTimer(KeyedTimer(clock), 0), clock)
    shard.replay_all(entries)
    return shard


def _state(shard: GroupCoordinatorShard):
    om = shard.offset_metadata_manager
    return om.offsets, om.pending, om.open_transactions_by_group


def _with_offset(batch: bytes, base_offset: int) -> bytes:
    return base_offset.to_bytes(8, "big") + batch[8:]


def _random_log(seed: int):
    """Batches of plain commits and tombstones (some compressed), transactional commits and their markers, over
    few keys so most records are superseded; returns (log bytes, every entry as a loader without dropping
    would yield it)."""
    rng = random.Random(seed)
    keys = [OffsetCommitKey(f"g{g}", "t", p) for g in range(3) for p in range(4)]
    out, entries = [], []
    offset = 0
    open_txns: dict[int, int] = {}
    for _ in range(rng.randrange(20, 60)):
        kind = rng.random()
        if kind < 0.15 and open_txns:  # a marker ends an open transaction
            pid = rng.choice(sorted(open_txns))
            del open_txns[pid]
            commit = rng.random() < 0.6
            out.append(_with_offset(end_txn_marker_batch(pid, 0, 0, commit, 0), offset))
            entries.append(LoadedMarker(pid, commit, offset))
            offset += 1
            continue
        pid = rng.choice([100, 101, 102]) if kind < 0.35 else -1
        batch = []
        for _ in range(rng.randrange(1, 8)):
            key = rng.choice(keys)
            value = None if pid < 0 and rng.random() < 0.15 else \
                OffsetCommitValue(rng.randrange(1000), rng.choice(["", "m"]), 5, rng.choice([-1, 3]))
            batch.append((encode_key(key), encode_value(value)))
        if pid < 0 and rng.random() < 0.2:  # a group's metadata tombstone: a key of another type
            batch.append((encode_key(GroupMetadataKey("g9")), None))
        codec = rng.choice(["none", "none", "gzip", "lz4"])
        out.append(build_batch([(k, v, [], 0) for k, v in batch], base_offset=offset, compression=codec,
                               producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                               is_transactional=pid >= 0))
        for i, (k, v) in enumerate(batch):
            entries.append(LoadedRecord(k, v, offset + i, pid))
        if pid >= 0:
            open_txns[pid] = 1
        offset += len(batch)
    return b"".join(out), entries


@pytest.mark.parametrize("seed", range(40))
def test_replaying_what_is_kept_gives_the_state_of_replaying_everything(seed):
    data, entries = _random_log(seed)
    everything = _shard(entries)
    # In one read, and in reads of a few batches each (the dropping spans reads).
    whole = PartitionRecords()
    whole.add_read(data)
    pieces = PartitionRecords()
    scanned = scan.scan_batches(data)
    cuts = [*scanned.position.tolist()[::3], len(data)]
    for a, b in zip(cuts, cuts[1:]):
        pieces.add_read(data[a:b])
    for loaded in (whole, pieces):
        assert loaded.records_read == sum(isinstance(e, LoadedRecord) for e in entries) + \
            sum(isinstance(e, LoadedMarker) for e in entries)
        kept = list(loaded)
        assert [e.offset for e in kept] == sorted(e.offset for e in kept)
        assert _state(_shard(kept)) == _state(everything)
        # Every transactional record and marker is kept; of the others, the last of each key, and before it
        # the key's last tombstone when the last record is a value.
        plain = [e for e in kept if isinstance(e, LoadedRecord) and e.producer_id < 0]
        for key in {e.key for e in plain}:
            of_key = [e.value is None for e in plain if e.key == key]
            assert of_key in ([True], [False], [True, False])
        assert [e for e in kept if not isinstance(e, LoadedRecord) or e.producer_id >= 0] == \
            [e for e in entries if not isinstance(e, LoadedRecord) or e.producer_id >= 0]


def test_equal_hashes_never_merge_different_keys():
    keys = [b"a", b"b", b"a", b"c", b"b", b"ab"]
    data = build_batch([(k, b"v", [], 0) for k in keys])
    records = scan.scan_batches(data).records
    assert records.key_hash.tolist() == [scan.key_hash(k) for k in keys]
    forged = records._replace(key_hash=np.zeros_like(records.key_hash))  # every key collides
    for table in (records, forged):
        keep = scan.last_by_key(data, table, np.ones(len(keys), dtype=np.bool_))
        assert keep.tolist() == [False, False, True, True, True, True]


def test_a_malformed_record_is_refused_not_read_past():
    good = build_batch([(b"key", b"value", [], 0)])
    # The key's length varint says 50 bytes, past the record: the scan stops with an error.
    at = good.index(b"key") - 1
    bad = good[:at] + bytes([100]) + good[at + 1:]
    with pytest.raises(CorruptMessageError):
        scan.scan_batches(bad)
    with pytest.raises(CorruptMessageError):  # the loader checks CRCs too: the bytes changed
        PartitionRecords().add_read(good[:30] + bytes([good[30] ^ 1]) + good[31:])


def test_the_store_loads_from_real_logs_with_superseded_commits_dropped(tmp_path):
    topic = LocalTopicLog(str(tmp_path / "logs"))
    store = OffsetsTopicStore(topic, num_partitions=1, replication_factor=1)
    key = OffsetCommitKey("g", "t", 0)
    for i in range(50):
        store.append(0, [(encode_key(key), encode_value(OffsetCommitValue(i, "", 1, 0))),
                         (encode_key(OffsetCommitKey("g", "t", 1)), encode_value(OffsetCommitValue(i, "", 1, 0)))])
    loaded = store.read_partition(0)
    kept = list(loaded)
    assert loaded.records_read == 100 and [e.offset for e in kept] == [98, 99]
    assert _shard(kept).offset_metadata_manager.offsets["g"][("t", 0)].offset == 49
    topic.close()
