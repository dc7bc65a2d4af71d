"""The cleaner's offset map over the record scanner's tables (storage/offset_map.py): last offset per key,
Kafka's 24-byte entry budget, keys told apart by both hashes, and the retain decision."""

from __future__ import annotations

import random

import numpy as np

from tierlog.records.record import build_batch
from tierlog.records.scan import scan_batches
from tierlog.storage.offset_map import MAP_DONE, MAP_FULL, OffsetMap, retain_batches


def _log(batches: list[list[tuple[bytes, bytes | None]]]) -> bytes:
    out, offset = [], 0
    for recs in batches:
        out.append(build_batch([(k, v, [], 0) for k, v in recs], base_offset=offset))
        offset += len(recs)
    return b"".join(out)


def _map_all(m: OffsetMap, data: bytes, first_dirty: int = 0):
    sc = scan_batches(data)
    status, at = m.put_batches(0, sc.last_offset, sc.first_record, sc.count, np.ones(len(sc.count), np.bool_),
                               sc.records, first_dirty)
    return sc, status, at


def test_the_map_holds_each_keys_last_offset_and_grows_past_its_first_table():
    rng = random.Random(3)
    keys = [b"key-%d" % i for i in range(5000)]
    batches = [[(rng.choice(keys), b"v") for _ in range(100)] for _ in range(200)]
    data = _log(batches)
    m = OffsetMap(24 * 100_000)
    sc, status, at = _map_all(m, data)
    assert (status, at) == (MAP_DONE, 200)
    last = {}
    for i, (k, _) in enumerate(r for b in batches for r in b):
        last[k] = i
    assert len(m) == len(last) and m.latest_offset == 19_999 and m.records_mapped == 20_000
    assert m.offsets.shape[0] > 1024  # grew
    recs = sc.records
    for i in rng.sample(range(20_000), 300):
        k = bytes(data[recs.key_start[i]:recs.key_start[i] + recs.key_length[i]])
        assert m.get(int(recs.key_hash[i]), int(recs.key_hash2[i])) == last[k]


def test_a_full_map_stops_before_the_batch_that_does_not_fit():
    data = _log([[(b"a%d" % i, b"v") for i in range(10)], [(b"b%d" % i, b"v") for i in range(10)]])
    m = OffsetMap(24 * 15, 1.0)  # 15 entries, Kafka's budget
    _, status, at = _map_all(m, data)
    assert (status, at, len(m), m.latest_offset) == (MAP_FULL, 1, 10, 9)


def test_keys_equal_in_one_hash_stay_apart_and_the_retain_decision_follows_the_map():
    data = _log([[(b"x", b"1"), (b"y", b"2"), (b"x", None), (b"z", b"3"), (None, b"4")]])
    sc = scan_batches(data)
    # Forge equal first hashes: only the second one tells x, y and z apart.
    recs = sc.records._replace(key_hash=np.full_like(sc.records.key_hash, 7))
    m = OffsetMap(24 * 100)
    m.put_batches(0, sc.last_offset, sc.first_record, sc.count, np.ones(1, np.bool_), recs, 0)
    assert len(m) == 3
    one = np.ones(1, np.bool_)
    keep, n_kept, tombstones = retain_batches(m, sc.first_record, sc.count, one, one, recs, m.latest_offset)
    # x at 0 superseded by its tombstone at 2; y, the tombstone, z stay; no key: goes.
    assert keep.tolist() == [False, True, True, True, False] and n_kept[0] == 3 and tombstones[0]
    keep, n_kept, tombstones = retain_batches(m, sc.first_record, sc.count, one, ~one, recs, m.latest_offset)
    assert keep.tolist() == [False, True, False, True, False] and n_kept[0] == 2 and not tombstones[0]
    # Past the map's end every record stays.
    keep, _, _ = retain_batches(m, sc.first_record, sc.count, one, one, recs, 1)
    assert keep.tolist() == [False, True, True, True, True]
