/* The log cleaner's offset map kernels (tierlog.storage.offset_map): open addressing (linear probing) on two
 * 64-bit key hashes in three arrays, the puts of a cleaning round's first pass and the retain decision of its
 * second. They run on the cleaner's threads, so they give up the GIL. */

#include "../records/kernels.h"

enum { MAP_DONE, MAP_COMPRESSED, MAP_FULL };

typedef struct {
    uint64_t *h1, *h2;
    int64_t *off; /* -1: empty */
    Py_ssize_t size;
} Table;

/* The slot holding (h1, h2), else the empty slot where it would go; -1 when the table is full without it. */
static inline Py_ssize_t slot_of(const Table *t, uint64_t h1, uint64_t h2) {
    if (t->size == 0)
        return -1;
    Py_ssize_t slot = (Py_ssize_t)(h1 % (uint64_t)t->size);
    for (Py_ssize_t i = 0; i < t->size; i++) {
        if (t->off[slot] < 0 || (t->h1[slot] == h1 && t->h2[slot] == h2))
            return slot;
        if (++slot == t->size)
            slot = 0;
    }
    return -1;
}

/* Three table arrays from args[0..2]. */
static int table_args(Buffers *b, PyObject *const *args, Table *t) {
    Py_ssize_t r1, r2, r3;
    if (!(t->h1 = array_arg(b, args[0], 8, 1, &r1)) || !(t->h2 = array_arg(b, args[1], 8, 1, &r2))
        || !(t->off = array_arg(b, args[2], 8, 1, &r3)))
        return -1;
    if (r1 != r3 || r2 != r3) {
        PyErr_SetString(PyExc_ValueError, "offset map: table arrays of different sizes");
        return -1;
    }
    t->size = r3;
    return 0;
}

/* Read-only int64/uint64 (size 8) or bool (size 1) columns from args, the shortest length in *rows. */
static int columns(Buffers *b, PyObject *const *args, int n, void **out, const int *itemsize, Py_ssize_t *rows) {
    *rows = PY_SSIZE_T_MAX;
    for (int i = 0; i < n; i++) {
        Py_ssize_t r;
        if (!(out[i] = array_arg(b, args[i], itemsize[i], 0, &r)))
            return -1;
        if (r < *rows)
            *rows = r;
    }
    return 0;
}

/* Whether batch b's record rows [first, first + count) lie within a record table of nr rows. */
static inline int rows_inside(int64_t first, int64_t count, Py_ssize_t nr) {
    return first >= 0 && count <= (int64_t)nr - first;
}

static PyObject *out_of_table(void) {
    PyErr_SetString(PyExc_ValueError, "offset map: a batch's records lie outside the record table");
    return NULL;
}

/* put_batches(start, b_last, b_first, b_count, eligible, r_off, r_kl, r_h1, r_h2, first_dirty, t_h1, t_h2, t_off,
 * count, max_entries, latest, mapped) -> (why it stopped, the batch it stopped at, entries, latest offset, records
 * mapped). Maps batches from start, each whole or not at all, as Kafka's buildOffsetMapForSegment. */
static PyObject *py_put_batches(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    PyObject *result = NULL;
    void *c[8];
    static const int sizes[8] = {8, 8, 8, 1, 8, 8, 8, 8};
    Py_ssize_t nb, nr;
    int64_t start, first_dirty, count, max_entries, latest, mapped;
    Table t;
    if (check_nargs("put_batches", nargs, 17) < 0)
        return NULL;
    if (int_arg(args[0], &start) < 0 || columns(&b, args + 1, 4, c, sizes, &nb) < 0
        || columns(&b, args + 5, 4, c + 4, sizes + 4, &nr) < 0 || int_arg(args[9], &first_dirty) < 0
        || table_args(&b, args + 10, &t) < 0 || int_arg(args[13], &count) < 0 || int_arg(args[14], &max_entries) < 0
        || int_arg(args[15], &latest) < 0 || int_arg(args[16], &mapped) < 0)
        goto done;
    const int64_t *b_last = c[0], *b_first = c[1], *b_count = c[2], *r_off = c[4], *r_kl = c[5];
    const uint8_t *eligible = c[3];
    const uint64_t *r_h1 = c[6], *r_h2 = c[7];
    int status = MAP_DONE, bad = 0;
    int64_t at = start < 0 ? 0 : start;
    Py_BEGIN_ALLOW_THREADS
    for (; at < nb; at++) {
        int64_t last = b_last[at];
        if (last < first_dirty)
            continue;
        if (eligible[at]) {
            int64_t n = b_count[at], first = b_first[at];
            if (n < 0) {
                status = MAP_COMPRESSED;
                break;
            }
            if (!rows_inside(first, n, nr)) {
                bad = 1;
                break;
            }
            if (count + n > max_entries) {
                status = MAP_FULL;
                break;
            }
            for (int64_t i = first; i < first + n; i++) {
                if (r_kl[i] < 0 || r_off[i] < first_dirty)
                    continue;
                Py_ssize_t slot = slot_of(&t, r_h1[i], r_h2[i]);
                if (slot < 0) { /* cannot happen: the caller grows the table first; stop rather than corrupt it */
                    status = MAP_FULL;
                    break;
                }
                if (t.off[slot] < 0) {
                    count++;
                    t.h1[slot] = r_h1[i];
                    t.h2[slot] = r_h2[i];
                }
                t.off[slot] = r_off[i];
            }
            if (status == MAP_FULL)
                break;
            mapped += n;
        }
        if (last > latest)
            latest = last;
    }
    Py_END_ALLOW_THREADS
    if (status == MAP_DONE)
        at = nb;
    if (bad)
        result = out_of_table();
    else
        result = Py_BuildValue("(iLLLL)", status, (long long)at, (long long)count, (long long)latest,
                               (long long)mapped);
done:
    release_buffers(&b);
    return result;
}

/* rehash(o_h1, o_h2, o_off, t_h1, t_h2, t_off): every entry of the old table into the new (larger) one. */
static PyObject *py_rehash(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    PyObject *result = NULL;
    Table old, t;
    if (check_nargs("rehash", nargs, 6) < 0)
        return NULL;
    if (table_args(&b, args, &old) < 0 || table_args(&b, args + 3, &t) < 0)
        goto done;
    int full = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < old.size && !full; i++) {
        if (old.off[i] < 0)
            continue;
        Py_ssize_t slot = slot_of(&t, old.h1[i], old.h2[i]);
        if (slot < 0) {
            full = 1;
            break;
        }
        t.h1[slot] = old.h1[i];
        t.h2[slot] = old.h2[i];
        t.off[slot] = old.off[i];
    }
    Py_END_ALLOW_THREADS
    if (full)
        PyErr_SetString(PyExc_ValueError, "rehash: the new table is too small");
    else
        result = Py_NewRef(Py_None);
done:
    release_buffers(&b);
    return result;
}

/* retain_batches(b_first, b_count, decide, keep_deletes, r_off, r_kl, r_vl, r_h1, r_h2, t_h1, t_h2, t_off, latest,
 * keep, n_kept, tombstones): Kafka's shouldRetainRecord for every record of the batches marked in decide. A record
 * past the map's end stays; one without a key goes; one whose key's last mapped offset is later goes; a tombstone
 * goes once its batch's delete horizon passed (keep_deletes false). Per batch: records kept, whether a tombstone
 * is among them. */
static PyObject *py_retain_batches(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    PyObject *result = NULL;
    void *c[9];
    static const int sizes[9] = {8, 8, 1, 1, 8, 8, 8, 8, 8};
    Py_ssize_t nb, nr, keep_rows, nk, nt;
    int64_t latest;
    Table t;
    if (check_nargs("retain_batches", nargs, 16) < 0)
        return NULL;
    if (columns(&b, args, 4, c, sizes, &nb) < 0 || columns(&b, args + 4, 5, c + 4, sizes + 4, &nr) < 0
        || table_args(&b, args + 9, &t) < 0 || int_arg(args[12], &latest) < 0)
        goto done;
    uint8_t *keep = array_arg(&b, args[13], 1, 1, &keep_rows);
    int64_t *n_kept = keep ? array_arg(&b, args[14], 8, 1, &nk) : NULL;
    uint8_t *tombstones = n_kept ? array_arg(&b, args[15], 1, 1, &nt) : NULL;
    if (!tombstones)
        goto done;
    if (keep_rows < nr)
        nr = keep_rows;
    if (nk < nb || nt < nb) {
        PyErr_SetString(PyExc_ValueError, "retain_batches: per-batch outputs shorter than the batches");
        goto done;
    }
    const int64_t *b_first = c[0], *b_count = c[1], *r_off = c[4], *r_kl = c[5], *r_vl = c[6];
    const uint8_t *decide = c[2], *keep_deletes = c[3];
    const uint64_t *r_h1 = c[7], *r_h2 = c[8];
    for (Py_ssize_t bi = 0; bi < nb; bi++)
        if (decide[bi] && b_count[bi] >= 0 && !rows_inside(b_first[bi], b_count[bi], nr)) {
            result = out_of_table();
            goto done;
        }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t bi = 0; bi < nb; bi++) {
        int64_t n = b_count[bi];
        if (!decide[bi] || n < 0)
            continue;
        int64_t kept = 0;
        uint8_t tomb = 0;
        for (int64_t i = b_first[bi]; i < b_first[bi] + n; i++) {
            int64_t o = r_off[i];
            uint8_t k = 0;
            if (o > latest) {
                k = 1;
            } else if (r_kl[i] >= 0) {
                Py_ssize_t slot = slot_of(&t, r_h1[i], r_h2[i]);
                int64_t mapped = slot >= 0 ? t.off[slot] : -1;
                k = o >= mapped && (r_vl[i] >= 0 || keep_deletes[bi]);
            }
            keep[i] = k;
            if (k) {
                kept++;
                if (r_vl[i] < 0)
                    tomb = 1;
            }
        }
        n_kept[bi] = kept;
        tombstones[bi] = tomb;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_buffers(&b);
    return result;
}

static PyMethodDef methods[] = {
    {"put_batches", (PyCFunction)(void (*)(void))py_put_batches, METH_FASTCALL, "Map the keys of batches."},
    {"rehash", (PyCFunction)(void (*)(void))py_rehash, METH_FASTCALL, "Move a table's entries into a larger one."},
    {"retain_batches", (PyCFunction)(void (*)(void))py_retain_batches, METH_FASTCALL, "Which records stay."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_offset_map", NULL, -1, methods};

PyMODINIT_FUNC PyInit__offset_map(void) { return PyModule_Create(&module); }
