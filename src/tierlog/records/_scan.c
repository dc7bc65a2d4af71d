/* The record scanner's kernels (tierlog.records.scan): batch and record tables of a buffer of v2 batches,
 * two 64-bit hashes of every key, and the last record of each key. The Python module documents the tables.
 * These run on the cleaner's and the coordinator's threads, so they give up the GIL. */

#include "kernels.h"

#define RECORD_BATCH_OVERHEAD 61
#define COMPRESSION_CODEC_MASK 0x07
#define MIN_RECORD 7 /* length, attributes, timestamp and offset deltas, key and value lengths, header count */

enum { OK, BAD_RECORD, BAD_BATCH };

/* The big-endian signed integer of n bytes at p. */
static inline int64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    int shift = 64 - 8 * n;
    return (int64_t)(v << shift) >> shift;
}

static inline uint64_t fnv(const uint8_t *p, int64_t n) {
    uint64_t h = 0xCBF29CE484222325ULL;
    for (int64_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001B3ULL;
    return h;
}

/* A second key hash of another construction than FNV-1a (a multiply-xorshift per byte and MurmurHash3's
 * finalizer): the cleaner's offset map keys on both, 128 bits like Kafka's MD5. */
static inline uint64_t mix(const uint8_t *p, int64_t n) {
    const uint64_t prime = 0xFF51AFD7ED558CCDULL;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * prime;
        h ^= h >> 29;
    }
    h ^= h >> 33;
    h *= prime;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 33;
    return h;
}

typedef struct {
    int64_t *off, *start, *ks, *kl, *vs, *vl;
    uint64_t *hash, *hash2;
    Py_ssize_t cap;
} RecordTable;

/* Scan count records of buf[pos:end] into the table from row n: the next row, or -1 for a malformed
 * record (or a table too small for them). */
static int64_t records(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end, int64_t count, int64_t base_offset,
                       const RecordTable *t, int hash2, int64_t n) {
    for (int64_t i = 0; i < count; i++) {
        Py_ssize_t start = pos, p;
        int64_t size, ignored, delta, key_len, value_len;
        if (n >= t->cap)
            return -1;
        if ((p = read_varint(buf, pos, end, &size)) < 0 || size < MIN_RECORD - 1 || size > end - p)
            return -1;
        Py_ssize_t rec_end = p + size;
        if ((p = read_varlong(buf, p + 1, rec_end, &ignored)) < 0) /* after the attributes */
            return -1;
        if ((p = read_varint(buf, p, rec_end, &delta)) < 0)
            return -1;
        if ((p = read_varint(buf, p, rec_end, &key_len)) < 0 || key_len > rec_end - p)
            return -1;
        Py_ssize_t key_start = p;
        if (key_len > 0)
            p += key_len;
        else if (key_len < -1)
            return -1;
        if ((p = read_varint(buf, p, rec_end, &value_len)) < 0 || value_len > rec_end - p || value_len < -1)
            return -1;
        t->off[n] = wrap_add(base_offset, delta);
        t->start[n] = start;
        t->ks[n] = key_start;
        t->kl[n] = key_len;
        t->vs[n] = p;
        t->vl[n] = value_len;
        int64_t klen = key_len > 0 ? key_len : 0;
        t->hash[n] = fnv(buf + key_start, klen);
        t->hash2[n] = hash2 ? mix(buf + key_start, klen) : 0;
        n++;
        pos = rec_end; /* headers: not needed by the readers of this table */
    }
    return n;
}

/* The eight record-table arrays from args[0..7], all of at least rows items. */
static int record_table_args(Buffers *b, PyObject *const *args, RecordTable *t) {
    void **cols[8] = {(void **)&t->off, (void **)&t->start, (void **)&t->ks, (void **)&t->kl, (void **)&t->vs,
                      (void **)&t->vl, (void **)&t->hash, (void **)&t->hash2};
    t->cap = PY_SSIZE_T_MAX;
    for (int i = 0; i < 8; i++) {
        Py_ssize_t rows;
        if (!(*cols[i] = array_arg(b, args[i], 8, 1, &rows)))
            return -1;
        if (rows < t->cap)
            t->cap = rows;
    }
    return 0;
}

/* scan_batches(buf, pos, end, hash2, 7 batch columns, 8 record columns) -> (status, batches, records,
 * position after the last whole batch or of the failing one). */
static PyObject *py_scan_batches(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    PyObject *result = NULL;
    Py_ssize_t len, nb_cap = PY_SSIZE_T_MAX;
    int64_t pos, end, hash2, *col[7];
    RecordTable t;
    if (check_nargs("scan_batches", nargs, 19) < 0)
        return NULL;
    const uint8_t *buf = bytes_arg(&b, args[0], &len);
    if (!buf || int_arg(args[1], &pos) < 0 || int_arg(args[2], &end) < 0 || int_arg(args[3], &hash2) < 0)
        goto done;
    for (int i = 0; i < 7; i++) {
        Py_ssize_t rows;
        if (!(col[i] = array_arg(&b, args[4 + i], 8, 1, &rows)))
            goto done;
        if (rows < nb_cap)
            nb_cap = rows;
    }
    if (record_table_args(&b, args + 11, &t) < 0)
        goto done;
    if (end > len)
        end = len;
    if (pos < 0)
        pos = 0;
    int status = OK;
    int64_t nb = 0, nr = 0;
    Py_BEGIN_ALLOW_THREADS
    while (end - pos >= RECORD_BATCH_OVERHEAD) {
        const uint8_t *h = buf + pos;
        int64_t size = be(h + 8, 4) + 12;
        if (h[16] != 2 || size < RECORD_BATCH_OVERHEAD) {
            status = BAD_BATCH;
            break;
        }
        if (size > end - pos)
            break;
        if (nb >= nb_cap) {
            status = BAD_BATCH;
            break;
        }
        int64_t base = be(h, 8), attributes = be(h + 21, 2), count = be(h + 57, 4);
        col[0][nb] = pos;
        col[1][nb] = base;
        col[2][nb] = wrap_add(base, be(h + 23, 4));
        col[3][nb] = attributes;
        col[4][nb] = be(h + 43, 8);
        col[5][nb] = nr;
        if ((attributes & COMPRESSION_CODEC_MASK) && count > 0) {
            col[6][nb] = -1;
        } else {
            int64_t got = count < 0 ? -1 : records(buf, pos + RECORD_BATCH_OVERHEAD, pos + size, count, base, &t,
                                                   (int)hash2, nr);
            if (got < 0) {
                status = BAD_RECORD;
                break;
            }
            col[6][nb] = count;
            nr = got;
        }
        nb++;
        pos += size;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(iLLL)", status, (long long)nb, (long long)nr, (long long)pos);
done:
    release_buffers(&b);
    return result;
}

/* scan_records(buf, count, base_offset, hash2, 8 record columns) -> rows written, -1 if the records are
 * malformed or do not number count. */
static PyObject *py_scan_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    PyObject *result = NULL;
    Py_ssize_t len;
    int64_t count, base_offset, hash2, n;
    RecordTable t;
    if (check_nargs("scan_records", nargs, 12) < 0)
        return NULL;
    const uint8_t *buf = bytes_arg(&b, args[0], &len);
    if (!buf || int_arg(args[1], &count) < 0 || int_arg(args[2], &base_offset) < 0 || int_arg(args[3], &hash2) < 0
        || record_table_args(&b, args + 4, &t) < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    n = records(buf, 0, len, count, base_offset, &t, (int)hash2, 0);
    if (n >= 0 && n != count)
        n = -1;
    Py_END_ALLOW_THREADS
    result = PyLong_FromLongLong(n);
done:
    release_buffers(&b);
    return result;
}

/* last_by_key(buf, key_start, key_length, key_hash, eligible, keep): keep[i] is true where record i is not
 * eligible or no later eligible record has its key. Open addressing on the hash, walked from the last record
 * back; equal hashes compare the key bytes. */
static PyObject *py_last_by_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    PyObject *result = NULL;
    Py_ssize_t len, n, rows[4];
    if (check_nargs("last_by_key", nargs, 6) < 0)
        return NULL;
    const uint8_t *buf = bytes_arg(&b, args[0], &len);
    int64_t *ks = buf ? array_arg(&b, args[1], 8, 0, &rows[0]) : NULL;
    int64_t *kl = ks ? array_arg(&b, args[2], 8, 0, &rows[1]) : NULL;
    uint64_t *hash = kl ? array_arg(&b, args[3], 8, 0, &n) : NULL;
    uint8_t *eligible = hash ? array_arg(&b, args[4], 1, 0, &rows[2]) : NULL;
    uint8_t *keep = eligible ? array_arg(&b, args[5], 1, 1, &rows[3]) : NULL;
    if (!keep)
        goto done;
    for (int i = 0; i < 4; i++)
        if (rows[i] < n) {
            PyErr_SetString(PyExc_ValueError, "last_by_key: columns shorter than the key hashes");
            goto done;
        }
    for (Py_ssize_t i = 0; i < n; i++)
        if (eligible[i] && (ks[i] < 0 || kl[i] > len - ks[i])) {
            PyErr_SetString(PyExc_ValueError, "last_by_key: a key lies outside the buffer");
            goto done;
        }
    uint64_t size = 16;
    while (size < 2 * (uint64_t)n)
        size *= 2;
    int64_t *table = PyMem_RawCalloc(size, sizeof(int64_t)); /* record index + 1; 0: empty */
    if (!table) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        if (!eligible[i]) {
            keep[i] = 1;
            continue;
        }
        uint64_t h = hash[i], slot = h & (size - 1);
        int found = 0;
        while (table[slot] != 0) {
            int64_t j = table[slot] - 1;
            if (hash[j] == h && kl[j] == kl[i]
                && (kl[i] <= 0 || memcmp(buf + ks[i], buf + ks[j], (size_t)kl[i]) == 0)) {
                found = 1;
                break;
            }
            slot = (slot + 1) & (size - 1);
        }
        if (found) {
            keep[i] = 0;
        } else {
            table[slot] = i + 1;
            keep[i] = 1;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(table);
    result = Py_NewRef(Py_None);
done:
    release_buffers(&b);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_batches", (PyCFunction)(void (*)(void))py_scan_batches, METH_FASTCALL, "Table the whole batches."},
    {"scan_records", (PyCFunction)(void (*)(void))py_scan_records, METH_FASTCALL, "Table decompressed records."},
    {"last_by_key", (PyCFunction)(void (*)(void))py_last_by_key, METH_FASTCALL, "Mark each key's last record."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
