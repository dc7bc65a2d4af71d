/* The columnar decoder's kernels (tierlog.spark.columnar): where each record's fields lie in the batches'
 * record sections, and the copy of keys and values into Arrow's contiguous buffers. They give up the GIL:
 * Spark's Python workers decode on several threads. */

#include "../records/kernels.h"

/* scan(buf, sec_start, sec_end, sec_count, base_offset, base_ts, ts_type, max_ts, first, end, offsets, timestamps,
 * types, key_pos, key_len, val_pos, val_len, hdr_pos, hdr_count) -> records found, or -1 - batch for a malformed
 * batch. Locates the fields of every record whose offset is in [first, end); a LogAppendTime batch gives every
 * record its max timestamp. types is int32, the rest int64. */
static PyObject *py_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    PyObject *result = NULL;
    Py_ssize_t len, nb = PY_SSIZE_T_MAX, cap = PY_SSIZE_T_MAX, rows;
    int64_t *sec[7], *out[9], first, end;
    if (check_nargs("scan", nargs, 19) < 0)
        return NULL;
    const uint8_t *buf = bytes_arg(&b, args[0], &len);
    if (!buf)
        goto done;
    for (int i = 0; i < 7; i++) {
        if (!(sec[i] = array_arg(&b, args[1 + i], 8, 0, &rows)))
            goto done;
        if (rows < nb)
            nb = rows;
    }
    if (int_arg(args[8], &first) < 0 || int_arg(args[9], &end) < 0)
        goto done;
    for (int i = 0; i < 9; i++) {
        if (!(out[i] = array_arg(&b, args[10 + i], i == 2 ? 4 : 8, 1, &rows)))
            goto done;
        if (rows < cap)
            cap = rows;
    }
    const int64_t *sec_start = sec[0], *sec_end = sec[1], *sec_count = sec[2], *base_offset = sec[3],
                  *base_ts = sec[4], *ts_type = sec[5], *max_ts = sec[6];
    int64_t *offsets = out[0], *timestamps = out[1], *key_pos = out[3], *key_len = out[4], *val_pos = out[5],
            *val_len = out[6], *hdr_pos = out[7], *hdr_count = out[8];
    int32_t *types = (int32_t *)out[2];
    int64_t n = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t bi = 0; bi < nb && n >= 0; bi++) {
        Py_ssize_t p = sec_start[bi], stop = sec_end[bi];
        if (p < 0 || stop > len || p > stop) {
            n = -1 - bi;
            break;
        }
        for (int64_t r = 0; r < sec_count[bi]; r++) {
            int64_t length, ts_delta, delta, klen, vlen, count;
            if ((p = read_varint(buf, p, stop, &length)) < 0 || length < 1 || length > stop - p) {
                n = -1 - bi;
                break;
            }
            Py_ssize_t rec_end = p + length;
            if ((p = read_varlong(buf, p + 1, rec_end, &ts_delta)) < 0 /* after the attributes */
                || (p = read_varint(buf, p, rec_end, &delta)) < 0) {
                n = -1 - bi;
                break;
            }
            int64_t offset = wrap_add(base_offset[bi], delta);
            if (offset < first || offset >= end) {
                p = rec_end;
                continue;
            }
            if ((p = read_varint(buf, p, rec_end, &klen)) < 0 || (klen > 0 ? klen : 0) > rec_end - p) {
                n = -1 - bi;
                break;
            }
            Py_ssize_t kp = p;
            p += klen > 0 ? klen : 0;
            if ((p = read_varint(buf, p, rec_end, &vlen)) < 0 || (vlen > 0 ? vlen : 0) > rec_end - p) {
                n = -1 - bi;
                break;
            }
            Py_ssize_t vp = p;
            p += vlen > 0 ? vlen : 0;
            if ((p = read_varint(buf, p, rec_end, &count)) < 0 || count < 0 || n >= cap) {
                n = -1 - bi;
                break;
            }
            key_pos[n] = kp;
            key_len[n] = klen;
            val_pos[n] = vp;
            val_len[n] = vlen;
            hdr_pos[n] = p;
            hdr_count[n] = count;
            offsets[n] = offset;
            timestamps[n] = ts_type[bi] ? max_ts[bi] : wrap_add(base_ts[bi], ts_delta);
            types[n] = (int32_t)ts_type[bi];
            n++;
            p = rec_end;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromLongLong(n);
done:
    release_buffers(&b);
    return result;
}

/* gather(buf, pos, lens, out_offsets, out_data): buf[pos[i]:pos[i] + lens[i]] one after another into out_data
 * (negative lengths are nulls), Arrow's int32 offsets into out_offsets (one more than the slices). */
static PyObject *py_gather(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    PyObject *result = NULL;
    Py_ssize_t len, n, n_lens, n_offsets, capacity;
    if (check_nargs("gather", nargs, 5) < 0)
        return NULL;
    const uint8_t *buf = bytes_arg(&b, args[0], &len);
    const int64_t *pos = buf ? array_arg(&b, args[1], 8, 0, &n) : NULL;
    const int64_t *lens = pos ? array_arg(&b, args[2], 8, 0, &n_lens) : NULL;
    int32_t *out_offsets = lens ? array_arg(&b, args[3], 4, 1, &n_offsets) : NULL;
    uint8_t *out_data = out_offsets ? array_arg(&b, args[4], 1, 1, &capacity) : NULL;
    if (!out_data)
        goto done;
    if (n_lens < n)
        n = n_lens;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (lens[i] <= 0)
            continue;
        if (pos[i] < 0 || lens[i] > len - pos[i]) {
            PyErr_SetString(PyExc_ValueError, "gather: a slice lies outside the buffer");
            goto done;
        }
        total += lens[i];
    }
    if (n_offsets < n + 1 || total > capacity || total > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "gather: the slices do not fit the output");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    int64_t o = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        out_offsets[i] = (int32_t)o;
        if (lens[i] > 0) {
            memcpy(out_data + o, buf + pos[i], (size_t)lens[i]);
            o += lens[i];
        }
    }
    out_offsets[n] = (int32_t)o;
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_buffers(&b);
    return result;
}

/* scan_headers(buf, hdr_pos, hdr_count, hk_pos, hk_len, hv_pos, hv_len) -> whether every header of the records
 * found by scan could be located (False: malformed). */
static PyObject *py_scan_headers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    PyObject *result = NULL;
    Py_ssize_t len, n, rows, cap = PY_SSIZE_T_MAX;
    int64_t *out[4];
    if (check_nargs("scan_headers", nargs, 7) < 0)
        return NULL;
    const uint8_t *buf = bytes_arg(&b, args[0], &len);
    const int64_t *hdr_pos = buf ? array_arg(&b, args[1], 8, 0, &n) : NULL;
    const int64_t *hdr_count = hdr_pos ? array_arg(&b, args[2], 8, 0, &rows) : NULL;
    if (!hdr_count)
        goto done;
    if (rows < n)
        n = rows;
    for (int i = 0; i < 4; i++) {
        if (!(out[i] = array_arg(&b, args[3 + i], 8, 1, &rows)))
            goto done;
        if (rows < cap)
            cap = rows;
    }
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    int64_t h = 0;
    for (Py_ssize_t i = 0; i < n && ok; i++) {
        Py_ssize_t p = hdr_pos[i];
        if (p < 0 || p > len) {
            ok = 0;
            break;
        }
        for (int64_t k = 0; k < hdr_count[i]; k++) {
            int64_t klen, vlen;
            if (h >= cap || (p = read_varint(buf, p, len, &klen)) < 0 || klen < 0 || klen > len - p) {
                ok = 0;
                break;
            }
            out[0][h] = p;
            out[1][h] = klen;
            p += klen;
            if ((p = read_varint(buf, p, len, &vlen)) < 0 || (vlen > 0 ? vlen : 0) > len - p) {
                ok = 0;
                break;
            }
            out[2][h] = p;
            out[3][h] = vlen;
            p += vlen > 0 ? vlen : 0;
            h++;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(ok);
done:
    release_buffers(&b);
    return result;
}

/* Kafka's murmur2 (Utils.murmur2: seed 0x9747b28c, little-endian blocks), as tierlog.hashing.murmur2. */
static uint32_t murmur2(const uint8_t *data, int64_t n) {
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)n;
    int64_t end = n - n % 4;
    for (int64_t i = 0; i < end; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 | (uint32_t)data[i + 2] << 16 |
                     (uint32_t)data[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    switch (n - end) {
    case 3: h ^= (uint32_t)data[end + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)data[end + 1] << 8;  /* fall through */
    case 1: h ^= data[end]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* key_partitions(data, offsets, n_partitions, out) -> None. The default partitioner's partition of each key
 * of an Arrow binary column (keys data[offsets[i]:offsets[i + 1]], int32 offsets): Kafka's
 * toPositive(murmur2(key)) % n_partitions, one call per column instead of a hash per record in Python. */
static PyObject *py_key_partitions(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    PyObject *result = NULL;
    Py_ssize_t len, n_offsets, n;
    int64_t parts;
    if (check_nargs("key_partitions", nargs, 4) < 0)
        return NULL;
    const uint8_t *data = bytes_arg(&b, args[0], &len);
    const int32_t *offsets = data ? array_arg(&b, args[1], 4, 0, &n_offsets) : NULL;
    int32_t *out = offsets ? array_arg(&b, args[3], 4, 1, &n) : NULL;
    if (!out || int_arg(args[2], &parts) < 0)
        goto done;
    if (parts <= 0 || n_offsets < n + 1) {
        PyErr_SetString(PyExc_ValueError, "key_partitions: bad partition count or offsets");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (offsets[i] < 0 || offsets[i + 1] < offsets[i] || offsets[i + 1] > len) {
            PyErr_SetString(PyExc_ValueError, "key_partitions: a key lies outside the buffer");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = (int32_t)((murmur2(data + offsets[i], offsets[i + 1] - offsets[i]) & 0x7fffffffu) % (uint32_t)parts);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_buffers(&b);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))py_scan, METH_FASTCALL, "Locate the records' fields."},
    {"gather", (PyCFunction)(void (*)(void))py_gather, METH_FASTCALL, "Copy slices one after another."},
    {"scan_headers", (PyCFunction)(void (*)(void))py_scan_headers, METH_FASTCALL, "Locate the records' headers."},
    {"key_partitions", (PyCFunction)(void (*)(void))py_key_partitions, METH_FASTCALL, "Kafka's partition of each key."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columnar", NULL, -1, methods};

PyMODINIT_FUNC PyInit__columnar(void) { return PyModule_Create(&module); }
