"""Plain-Python references of the compiled record kernels, for the tests only (tests/records/test_kernels.py).

Each function takes and returns what its C twin does (same arguments, same output arrays filled, same
answer), written the slow and obvious way: Kafka's ByteUtils varint readers, the validator's walk
(records/_validation.c), the scanner (records/_scan.c), the offset map (storage/_offset_map.c) and the
columnar decoder (spark/_columnar.c). Java's long arithmetic wraps; Python's ints do not, so sums of values
read from a batch go through :func:`s64`.
"""

from __future__ import annotations

EOF_, TOO_LONG = -1, -2
U64 = (1 << 64) - 1


def s64(x: int) -> int:
    """``x`` wrapped to a signed 64-bit integer, as Java's long arithmetic leaves it."""
    x = int(x) & U64
    return x - (1 << 64) if x >> 63 else x


def varint(buf, pos: int, end: int) -> tuple[int, int]:
    """ByteUtils.readVarint: (value, next position), the position -1 at the end of the data, -2 for a sixth byte."""
    value = 0
    for shift in range(0, 35, 7):
        if pos >= end:
            return 0, EOF_
        b = int(buf[pos])
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            value &= 0xFFFFFFFF
            return (value >> 1) ^ -(value & 1), pos
    return 0, TOO_LONG


def varlong(buf, pos: int, end: int) -> tuple[int, int]:
    """ByteUtils.readVarlong, as :func:`varint` with ten bytes."""
    value = 0
    for shift in range(0, 70, 7):
        if pos >= end:
            return 0, EOF_
        b = int(buf[pos])
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            value &= U64
            return (value >> 1) ^ -(value & 1), pos
    return 0, TOO_LONG


# ------------------------------------------------------------------------------------------------ validator

def walk(buf, pos, end, count, base_ts, max_ts, flags, now, before, after, err_index, err_kind):
    """records/_validation.c's walk: (status, position, record errors)."""
    lat_batch, create_time, compacted, check_offsets = (bool(flags & f) for f in (1, 2, 4, 8))
    n_err = 0
    cap = min(len(err_index), len(err_kind))
    for i in range(count):
        at = pos
        size, pos = varint(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        if size > end - pos:
            return 3, at, 0
        start = pos
        if pos >= end:
            return 1, at, 0
        pos += 1
        ts_delta, pos = varlong(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        offset_delta, pos = varint(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        key_size, pos = varint(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        if key_size >= 0:
            if key_size > end - pos:
                return 1, at, 0
            pos += key_size
        value_size, pos = varint(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        if value_size >= 0:
            if value_size > end - pos:
                return 1, at, 0
            pos += value_size
        n_headers, pos = varint(buf, pos, end)
        if pos < 0:
            return -pos, at, 0
        if n_headers < 0 or n_headers > end - pos:
            return 5, at, 0
        for _ in range(n_headers):
            hk, pos = varint(buf, pos, end)
            if pos < 0:
                return -pos, at, 0
            if hk < 0:
                return 6, at, 0
            if hk > end - pos:
                return 1, at, 0
            pos += hk
            hv, pos = varint(buf, pos, end)
            if pos < 0:
                return -pos, at, 0
            if hv >= 0:
                if hv > end - pos:
                    return 1, at, 0
                pos += hv
        if pos - start != size:
            return 4, at, 0
        if check_offsets and offset_delta != i:
            return 8, at, 0
        kind = 0
        if compacted and key_size < 0:
            kind = 1
        else:
            ts = max_ts if lat_batch else s64(base_ts + ts_delta)
            if create_time and ts != -1:
                if s64(now - ts) > before or s64(ts - now) > after:
                    kind = 2
            elif lat_batch:
                kind = 3
        if kind:
            if n_err < cap:
                err_index[n_err] = i
                err_kind[n_err] = kind
            n_err += 1
    return (7 if pos != end else 0), pos, n_err


# -------------------------------------------------------------------------------------------------- scanner

def be(buf, pos: int, n: int) -> int:
    return int.from_bytes(bytes(buf[pos:pos + n]), "big", signed=True)


def fnv(key: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in key:
        h = ((h ^ b) * 0x100000001B3) & U64
    return h


def mix(key: bytes) -> int:
    prime = 0xFF51AFD7ED558CCD
    h = 0x9E3779B97F4A7C15 ^ len(key)
    for b in key:
        h = ((h ^ b) * prime) & U64
        h ^= h >> 29
    h ^= h >> 33
    h = (h * prime) & U64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & U64
    return h ^ (h >> 33)


def records(buf, pos, end, count, base_offset, table, hash2, n):
    """Rows of the record table (offset, start, key start, key length, value start, value length, hash, hash2)
    for ``count`` records of ``buf[pos:end]`` from row ``n``: the next row, or -1 if malformed."""
    for _ in range(count):
        if n >= len(table[0]):
            return -1
        start = pos
        size, pos = varint(buf, pos, end)
        if pos < 0 or size < 6 or size > end - pos:
            return -1
        rec_end = pos + size
        _, pos = varlong(buf, pos + 1, rec_end)
        if pos < 0:
            return -1
        delta, pos = varint(buf, pos, rec_end)
        if pos < 0:
            return -1
        key_len, pos = varint(buf, pos, rec_end)
        if pos < 0 or key_len > rec_end - pos:
            return -1
        key_start = pos
        if key_len > 0:
            pos += key_len
        elif key_len < -1:
            return -1
        value_len, pos = varint(buf, pos, rec_end)
        if pos < 0 or value_len > rec_end - pos or value_len < -1:
            return -1
        key = bytes(buf[key_start:key_start + max(key_len, 0)])
        row = (s64(base_offset + delta), start, key_start, key_len, pos, value_len, fnv(key), mix(key) if hash2 else 0)
        for column, value in zip(table, row):
            column[n] = value
        n += 1
        pos = rec_end
    return n


def scan_batches(buf, pos, end, hash2, *columns):
    """records/_scan.c's scan_batches: (status, batches, records, position)."""
    batches, table = columns[:7], columns[7:]
    end = min(end, len(buf))
    nb = nr = 0
    while end - pos >= 61:
        size = be(buf, pos + 8, 4) + 12
        if buf[pos + 16] != 2 or size < 61:
            return 2, nb, nr, pos
        if size > end - pos:
            break
        if nb >= len(batches[0]):
            return 2, nb, nr, pos
        base, attributes, count = be(buf, pos, 8), be(buf, pos + 21, 2), be(buf, pos + 57, 4)
        for column, value in zip(batches, (pos, base, s64(base + be(buf, pos + 23, 4)), attributes,
                                           be(buf, pos + 43, 8), nr)):
            column[nb] = value
        if attributes & 7 and count > 0:
            batches[6][nb] = -1
        else:
            got = -1 if count < 0 else records(buf, pos + 61, pos + size, count, base, table, hash2, nr)
            if got < 0:
                return 1, nb, nr, pos
            batches[6][nb] = count
            nr = got
        nb += 1
        pos += size
    return 0, nb, nr, pos


def scan_records(buf, count, base_offset, hash2, *table):
    n = records(buf, 0, len(buf), count, base_offset, table, hash2, 0)
    return -1 if n >= 0 and n != count else n


def last_by_key(buf, key_start, key_length, key_hash, eligible, keep):
    """Each eligible record's key compared with every later eligible record's (no hashing)."""
    seen = set()
    for i in range(len(key_hash) - 1, -1, -1):
        if not eligible[i]:
            keep[i] = True
            continue
        key = None if key_length[i] < 0 else bytes(buf[key_start[i]:key_start[i] + key_length[i]])
        keep[i] = key not in seen
        seen.add(key)


# --------------------------------------------------------------------------------------------- offset map

def slot_of(t_h1, t_h2, t_off, h1, h2) -> int:
    size = len(t_off)
    if size == 0:
        return -1
    slot = h1 % size
    for _ in range(size):
        if t_off[slot] < 0 or (t_h1[slot] == h1 and t_h2[slot] == h2):
            return slot
        slot = (slot + 1) % size
    return -1


def put_batches(start, b_last, b_first, b_count, eligible, r_off, r_kl, r_h1, r_h2, first_dirty, t_h1, t_h2, t_off,
                count, max_entries, latest, mapped):
    for b in range(start, len(b_last)):
        last = b_last[b]
        if last < first_dirty:
            continue
        if eligible[b]:
            c = b_count[b]
            if c < 0:
                return 1, b, count, latest, mapped
            if count + c > max_entries:
                return 2, b, count, latest, mapped
            for i in range(b_first[b], b_first[b] + c):
                if r_kl[i] >= 0 and r_off[i] >= first_dirty:
                    slot = slot_of(t_h1, t_h2, t_off, int(r_h1[i]), int(r_h2[i]))
                    if t_off[slot] < 0:
                        count += 1
                        t_h1[slot], t_h2[slot] = r_h1[i], r_h2[i]
                    t_off[slot] = r_off[i]
            mapped += c
        latest = max(latest, last)
    return 0, len(b_last), count, latest, mapped


def retain_batches(b_first, b_count, decide, keep_deletes, r_off, r_kl, r_vl, r_h1, r_h2, t_h1, t_h2, t_off, latest,
                   keep, n_kept, tombstones):
    for b in range(len(b_first)):
        if not decide[b] or b_count[b] < 0:
            continue
        n, tomb = 0, False
        for i in range(b_first[b], b_first[b] + b_count[b]):
            o = r_off[i]
            if o > latest:
                k = True
            elif r_kl[i] >= 0:
                slot = slot_of(t_h1, t_h2, t_off, int(r_h1[i]), int(r_h2[i]))
                mapped = t_off[slot] if slot >= 0 else -1
                k = o >= mapped and (r_vl[i] >= 0 or bool(keep_deletes[b]))
            else:
                k = False
            keep[i] = k
            n += k
            tomb |= k and r_vl[i] < 0
        n_kept[b], tombstones[b] = n, tomb


# ------------------------------------------------------------------------------------------- columnar decoder

def columnar_scan(buf, sec_start, sec_end, sec_count, base_offset, base_ts, ts_type, max_ts, first, end, *out):
    """spark/_columnar.c's scan: records found, or -1 - batch for a malformed batch."""
    sec_start, sec_end, sec_count, base_offset, base_ts, ts_type, max_ts = (
        [int(x) for x in c] for c in (sec_start, sec_end, sec_count, base_offset, base_ts, ts_type, max_ts))
    n = 0
    for b in range(len(sec_start)):
        p, stop = sec_start[b], sec_end[b]
        for _ in range(sec_count[b]):
            length, p = varint(buf, p, stop)
            if p < 0 or length < 1 or p + length > stop:
                return -1 - b
            rec_end = p + length
            ts_delta, p = varlong(buf, p + 1, rec_end)
            if p < 0:
                return -1 - b
            delta, p = varint(buf, p, rec_end)
            if p < 0:
                return -1 - b
            offset = s64(base_offset[b] + delta)
            if not first <= offset < end:
                p = rec_end
                continue
            klen, p = varint(buf, p, rec_end)
            if p < 0 or p + max(klen, 0) > rec_end:
                return -1 - b
            kp = p
            p += max(klen, 0)
            vlen, p = varint(buf, p, rec_end)
            if p < 0 or p + max(vlen, 0) > rec_end:
                return -1 - b
            vp = p
            p += max(vlen, 0)
            count, p = varint(buf, p, rec_end)
            if p < 0 or count < 0:
                return -1 - b
            ts = max_ts[b] if ts_type[b] else s64(base_ts[b] + ts_delta)
            for column, value in zip(out, (offset, ts, ts_type[b], kp, klen, vp, vlen, p, count)):
                column[n] = value
            n += 1
            p = rec_end
    return n


def gather(buf, pos, lens, out_offsets, out_data):
    o = 0
    for i in range(len(pos)):
        out_offsets[i] = o
        if lens[i] > 0:
            out_data[o:o + lens[i]] = bytearray(buf[pos[i]:pos[i] + lens[i]])
            o += lens[i]
    out_offsets[len(pos)] = o


def scan_headers(buf, hdr_pos, hdr_count, hk_pos, hk_len, hv_pos, hv_len) -> bool:
    h = 0
    for i in range(len(hdr_pos)):
        p = hdr_pos[i]
        for _ in range(hdr_count[i]):
            klen, p = varint(buf, p, len(buf))
            if p < 0 or klen < 0 or p + klen > len(buf):
                return False
            hk_pos[h], hk_len[h] = p, klen
            p += klen
            vlen, p = varint(buf, p, len(buf))
            if p < 0 or p + max(vlen, 0) > len(buf):
                return False
            hv_pos[h], hv_len[h] = p, vlen
            p += max(vlen, 0)
            h += 1
    return True
