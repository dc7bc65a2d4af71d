"""The compiled record kernels (C, built by pip install) against their plain-Python references
(tests/harness/kernel_reference.py): the validator's walk, the scanner, the cleaner's offset map and the
columnar decoder give the same answers and fill the same tables, on good batches and on corrupt, truncated
and hostile ones (varints of every length up to too long, lengths at the int32 limits, timestamps whose sums
wrap)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.harness import kernel_reference as ref
from tests.harness import poison

from tierlog.records import build_batch, encode_varint, encode_varlong, iter_batches
from tierlog.records._scan import last_by_key, scan_batches, scan_records
from tierlog.records._validation import walk
from tierlog.spark._columnar import gather, scan, scan_headers
from tierlog.storage._offset_map import put_batches, retain_batches

LONG = st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 1_700_000_000_000]) | st.integers(
    -(2**63), 2**63 - 1)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _raw_varint(draw) -> bytes:
    """A varint's bytes: any value's encoding, or a run of continuation bytes of any length (too long ones too),
    or a cut-off one."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return encode_varint(draw(st.integers(-(2**31), 2**31 - 1)))
    if kind == 1:
        return encode_varlong(draw(st.integers(-(2**63), 2**63 - 1)))
    n = draw(st.integers(1, 12))
    body = bytes(draw(st.integers(0x80, 0xFF)) for _ in range(n))
    return body + (bytes([draw(st.integers(0, 0x7F))]) if kind == 2 else b"")


@st.composite
def record_sections(draw) -> tuple[bytes, int]:
    """A records section of good records with some fields replaced by arbitrary varints, then maybe cut or with
    bytes flipped; and a record count near the true one."""
    n = draw(st.integers(0, 6))
    parts = []
    for i in range(n):
        key = draw(st.none() | st.binary(max_size=8))
        value = draw(st.none() | st.binary(max_size=8))
        headers = draw(st.lists(st.tuples(st.binary(max_size=4), st.none() | st.binary(max_size=4)), max_size=2))
        rec = poison.record(key, value, offset_delta=draw(st.sampled_from([i, i, i, i + 1, -1])),
                            ts_delta=draw(LONG), headers=headers)
        if draw(st.integers(0, 4)) == 0:  # a field's varint replaced by anything
            cut = draw(st.integers(0, len(rec)))
            rec = rec[:cut] + _raw_varint(draw) + rec[cut + 1:]
        parts.append(rec)
    data = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 2))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()) and data:
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data), max(0, n + draw(st.sampled_from([0, 0, 0, -1, 1])))


def _both(compiled, reference, arrays, args):
    """Run the kernel and its reference on copies of the output arrays: (answers, arrays) of each."""
    mine, theirs = [a.copy() for a in arrays], [a.copy() for a in arrays]
    return (compiled(*args(mine)), mine), (reference(*args(theirs)), theirs)


def _assert_same(got, expected):
    assert got[0] == expected[0]
    for a, b in zip(got[1], expected[1]):
        assert a.tolist() == b.tolist()


@SETTINGS
@given(record_sections(), st.integers(0, 15), LONG, LONG, LONG, LONG, LONG, st.integers(0, 4),
       st.sampled_from(["bytes", "array", "offset"]))
def test_the_validator_walk_agrees_with_its_reference(section, flags, base_ts, max_ts, now, before, after, cap, form):
    data, count = section
    pad = b"\xff" * 7
    buf, pos = {"bytes": (data, 0), "array": (np.frombuffer(data, np.uint8), 0), "offset": (pad + data + pad, 7)}[form]
    end = pos + len(data)
    arrays = [np.zeros(cap, np.int64), np.zeros(cap, np.int8)]
    got, expected = _both(walk, ref.walk, arrays,
                          lambda a: (buf, pos, end, count, base_ts, max_ts, flags, now, before, after, *a))
    _assert_same(got, expected)


@SETTINGS
@given(st.binary(max_size=64), st.integers(0, 8), st.integers(0, 15))
def test_the_walk_over_arbitrary_bytes(data, count, flags):
    arrays = [np.zeros(4, np.int64), np.zeros(4, np.int8)]
    got, expected = _both(walk, ref.walk, arrays, lambda a: (data, 0, len(data), count, 0, 0, flags, 0, 0, 0, *a))
    _assert_same(got, expected)


def test_varints_at_and_past_their_length_limits():
    """A 5-byte varint and a 10-byte varlong are read; one more byte is VARINT_TOO_LONG (status 2); a varint cut
    short is the end of the data (status 1)."""
    none = [np.zeros(0, np.int64), np.zeros(0, np.int8)]
    five = encode_varint(-(2**31))
    assert len(five) == 5
    for body, status in ((b"\x80" * 5 + b"\x01", 2), (b"\xff" * 4, 1), (b"\x80" * 10 + b"\x01", 2)):
        assert walk(body, 0, len(body), 1, 0, 0, 0, 0, 0, 0, *none)[0] == status
    record = poison.record(b"k", b"v", ts_delta=-(2**63))
    assert len(encode_varlong(-(2**63))) == 10
    for data in (record, encode_varint(len(record) + 1) + record[1:] + b"\x00"):
        assert walk(data, 0, len(data), 1, 0, 0, 2, 0, 0, 0, *none) == ref.walk(data, 0, len(data), 1, 0, 0, 2, 0, 0,
                                                                                  0, *none)


def _log(draw) -> bytes:
    out, offset = [], draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 4))):
        recs = draw(st.lists(st.tuples(st.none() | st.sampled_from([b"a", b"b", b"c", b"dd", b""]),
                                       st.none() | st.binary(max_size=6)), min_size=1, max_size=6))
        codec = draw(st.sampled_from(["none", "none", "none", "lz4"]))
        out.append(build_batch([(k, v, [], 0) for k, v in recs], base_offset=offset, compression=codec))
        offset += len(recs)
    return b"".join(out)


@st.composite
def logs(draw) -> bytes:
    """A log of a few batches (some compressed), maybe cut short or with bytes changed."""
    data = bytearray(_log(draw))
    for _ in range(draw(st.sampled_from([0, 0, 1, 3]))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


def _tables(batches: int, rows: int) -> list[np.ndarray]:
    return [np.zeros(batches, np.int64) for _ in range(7)] + [np.zeros(rows, np.int64) for _ in range(6)] + [
        np.zeros(rows, np.uint64) for _ in range(2)]


@SETTINGS
@given(logs(), st.booleans(), st.integers(0, 70))
def test_the_scanner_agrees_with_its_reference(data, hash2, start):
    start = min(start, len(data))
    arrays = _tables(len(data) // 61 + 1, len(data) // 7 + 1)
    got, expected = _both(scan_batches, ref.scan_batches, arrays, lambda a: (data, start, len(data), hash2, *a))
    _assert_same(got, expected)
    status, nb, nr, _ = got[0]
    if status == 0 and nr:
        records = got[1][7:]
        eligible = np.frombuffer(bytes((i % 3 != 0) for i in range(nr)), np.bool_)
        keep, keep_ref = np.zeros(nr, np.bool_), np.zeros(nr, np.bool_)
        last_by_key(data, records[2][:nr], records[3][:nr], records[6][:nr], eligible, keep)
        ref.last_by_key(data, records[2][:nr], records[3][:nr], records[6][:nr], eligible, keep_ref)
        assert keep.tolist() == keep_ref.tolist()


@SETTINGS
@given(record_sections(), st.booleans())
def test_the_scan_of_decompressed_records_agrees(section, hash2):
    data, count = section
    arrays = [np.zeros(count, np.int64) for _ in range(6)] + [np.zeros(count, np.uint64) for _ in range(2)]
    got, expected = _both(scan_records, ref.scan_records, arrays, lambda a: (data, count, 5, hash2, *a))
    _assert_same(got, expected)


@SETTINGS
@given(st.data())
def test_the_offset_map_agrees_with_its_reference(data):
    log = _log(data.draw)
    tables = _tables(len(log) // 61 + 1, len(log) // 7 + 1)
    status, nb, nr, _ = scan_batches(log, 0, len(log), True, *tables)
    assert status == 0
    b_last, b_first, b_count = (tables[i][:nb] for i in (2, 5, 6))
    r_off, r_kl, r_vl, r_h1, r_h2 = (tables[i][:nr] for i in (7, 10, 12, 13, 14))
    if data.draw(st.booleans()):  # keys equal in one hash: only the second tells them apart
        r_h1 = np.full_like(r_h1, 7)
    flags = st.lists(st.booleans(), min_size=nb, max_size=nb).map(lambda f: np.array(f, np.bool_))
    eligible, decide, keep_deletes = data.draw(flags), data.draw(flags), data.draw(flags)
    size = data.draw(st.sampled_from([0, 4, 64]))
    table = [np.zeros(size, np.uint64), np.zeros(size, np.uint64), np.full(size, -1, np.int64)]
    first_dirty, max_entries = data.draw(st.integers(0, 2**40 + 8)), data.draw(st.integers(0, size))
    got, expected = _both(put_batches, ref.put_batches, table, lambda t: (
        0, b_last, b_first, b_count, eligible, r_off, r_kl, r_h1, r_h2, first_dirty, *t, 0, max_entries, -1, 0))
    _assert_same(got, expected)
    latest = got[0][3]
    outputs = [np.zeros(nr, np.bool_), np.zeros(nb, np.int64), np.zeros(nb, np.bool_)]
    got, expected = _both(retain_batches, ref.retain_batches, outputs, lambda o: (
        b_first, b_count, decide, keep_deletes, r_off, r_kl, r_vl, r_h1, r_h2, *got[1], latest, *o))
    _assert_same(got, expected)


@SETTINGS
@given(st.data())
def test_the_columnar_decoder_agrees_with_its_reference(data):
    recs = data.draw(st.lists(st.tuples(st.none() | st.binary(max_size=6), st.none() | st.binary(max_size=6),
                                        st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=3)),
                                                 max_size=2), st.integers(0, 2**40)), min_size=1, max_size=8))
    log = bytearray(build_batch(recs, base_offset=10) + build_batch(recs, base_offset=10 + len(recs)))
    per_batch = [[pos + 61, pos + h.size, h.records_count, h.base_offset, h.base_timestamp, int(i % 2),
                  h.max_timestamp] for i, (pos, h) in enumerate(iter_batches(bytes(log)))]
    for _ in range(data.draw(st.sampled_from([0, 0, 1, 2]))):  # records corrupted after the headers were read
        log[data.draw(st.integers(0, len(log) - 1))] = data.draw(st.integers(0, 255))
    log = bytes(log)
    columns = [np.array(c, np.int64) for c in zip(*per_batch)]
    first, end = data.draw(st.integers(0, 30)), data.draw(st.integers(0, 40))
    total = 2 * len(recs)
    out = [np.zeros(total, np.int64) for _ in range(9)]
    out[2] = np.zeros(total, np.int32)
    got, expected = _both(scan, ref.columnar_scan, out, lambda o: (log, *columns, first, end, *o))
    _assert_same(got, expected)
    n = got[0]
    if n <= 0:
        return
    _, _, _, key_pos, key_len, val_pos, val_len, hdr_pos, hdr_count = got[1]
    for pos, lens in ((key_pos[:n], key_len[:n]), (val_pos[:n], val_len[:n])):
        arrays = [np.zeros(n + 1, np.int32), np.zeros(int(np.maximum(lens, 0).sum()), np.uint8)]
        _assert_same(*_both(gather, ref.gather, arrays, lambda a, pos=pos, lens=lens: (log, pos, lens, *a)))
    h = int(hdr_count[:n].sum())
    arrays = [np.zeros(h, np.int64) for _ in range(4)]
    _assert_same(*_both(scan_headers, ref.scan_headers, arrays, lambda a: (log, hdr_pos[:n], hdr_count[:n], *a)))


def test_wrong_arrays_are_refused_not_overrun():
    """A table of the wrong item size or too short for the records is an error, never a write past its end."""
    batch = build_batch([(b"k", b"v", [], 0)] * 3)
    tables = _tables(2, 10)
    tables[7] = np.zeros(10, np.int32)
    try:
        scan_batches(batch, 0, len(batch), True, *tables)
    except TypeError:
        pass
    else:
        raise AssertionError("an int32 column was accepted")
    short = _tables(2, 2)
    assert scan_batches(batch, 0, len(batch), True, *short)[0] == 1  # the records do not fit: malformed
    arrays = [np.zeros(2, np.int32), np.zeros(1, np.uint8)]
    try:
        gather(b"abcdef", np.array([0], np.int64), np.array([4], np.int64), *arrays)
    except ValueError:
        pass
    else:
        raise AssertionError("a gather into a too small buffer was accepted")
