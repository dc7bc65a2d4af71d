/* The record validator's walk (tierlog.records.validation): Kafka's LogValidator checks over the records
 * of one v2 batch, in compiled code. The Python module holds the rules' documentation and the errors. */

#include "kernels.h"

/* Statuses of the walk; validation.py names them. */
enum { OK, END_OF_DATA, VARINT_TOO_LONG_, RECORD_SIZE_BEYOND, RECORD_SIZE_MISMATCH, HEADER_COUNT, HEADER_KEY_SIZE,
       REMAINING, OFFSET_DELTA };
/* Kinds of record errors. */
enum { KEY_MISSING = 1, BAD_TIMESTAMP = 2, LOG_APPEND_TIME = 3 };
/* The switches of the flags argument. */
enum { LAT_BATCH = 1, CREATE_TIME = 2, COMPACTED = 4, CHECK_OFFSETS = 8 };

/* A varint's end as the walk's status. */
#define FAIL_READ(p) ((p) == VARINT_EOF ? END_OF_DATA : VARINT_TOO_LONG_)

static int walk(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end, int64_t count, int64_t base_ts, int64_t max_ts,
                int64_t flags, int64_t now, int64_t before, int64_t after, int64_t *err_index, int8_t *err_kind,
                Py_ssize_t cap, Py_ssize_t *at_out, int64_t *n_err_out) {
    int lat_batch = (flags & LAT_BATCH) != 0, create_time = (flags & CREATE_TIME) != 0;
    int compacted = (flags & COMPACTED) != 0, check_offsets = (flags & CHECK_OFFSETS) != 0;
    int64_t n_err = 0;
    *n_err_out = 0;
    for (int64_t i = 0; i < count; i++) {
        Py_ssize_t at = pos, start, p;
        int64_t size, ts_delta, offset_delta, key_size, value_size, n_headers, hk, hv;
        *at_out = at;
        if ((p = read_varint(buf, pos, end, &size)) < 0)
            return FAIL_READ(p);
        pos = p;
        if (size > end - pos)
            return RECORD_SIZE_BEYOND;
        start = pos;
        if (pos >= end)
            return END_OF_DATA;
        pos += 1; /* attributes: unused in v2 */
        if ((p = read_varlong(buf, pos, end, &ts_delta)) < 0)
            return FAIL_READ(p);
        if ((p = read_varint(buf, p, end, &offset_delta)) < 0)
            return FAIL_READ(p);
        if ((p = read_varint(buf, p, end, &key_size)) < 0)
            return FAIL_READ(p);
        pos = p;
        if (key_size >= 0) {
            if (key_size > end - pos)
                return END_OF_DATA;
            pos += key_size;
        }
        if ((p = read_varint(buf, pos, end, &value_size)) < 0)
            return FAIL_READ(p);
        pos = p;
        if (value_size >= 0) {
            if (value_size > end - pos)
                return END_OF_DATA;
            pos += value_size;
        }
        if ((p = read_varint(buf, pos, end, &n_headers)) < 0)
            return FAIL_READ(p);
        pos = p;
        if (n_headers < 0 || n_headers > end - pos)
            return HEADER_COUNT;
        for (int64_t h = 0; h < n_headers; h++) {
            if ((p = read_varint(buf, pos, end, &hk)) < 0)
                return FAIL_READ(p);
            pos = p;
            if (hk < 0)
                return HEADER_KEY_SIZE;
            if (hk > end - pos)
                return END_OF_DATA;
            pos += hk;
            if ((p = read_varint(buf, pos, end, &hv)) < 0)
                return FAIL_READ(p);
            pos = p;
            if (hv >= 0) {
                if (hv > end - pos)
                    return END_OF_DATA;
                pos += hv;
            }
        }
        if (pos - start != size)
            return RECORD_SIZE_MISMATCH;
        if (check_offsets && offset_delta != i)
            return OFFSET_DELTA;
        /* LogValidator.validateRecord: the key first, then the timestamp; one error a record. */
        int kind = 0;
        if (compacted && key_size < 0) {
            kind = KEY_MISSING;
        } else {
            int64_t ts = lat_batch ? max_ts : wrap_add(base_ts, ts_delta);
            if (create_time && ts != -1) {
                if (wrap_sub(now, ts) > before || wrap_sub(ts, now) > after)
                    kind = BAD_TIMESTAMP;
            } else if (lat_batch) {
                kind = LOG_APPEND_TIME;
            }
        }
        if (kind) {
            if (n_err < cap) {
                err_index[n_err] = i;
                err_kind[n_err] = (int8_t)kind;
            }
            n_err++;
        }
    }
    *at_out = pos;
    *n_err_out = n_err;
    return pos != end ? REMAINING : OK;
}

/* walk(buf, pos, end, count, base_ts, max_ts, flags, now, before, after, err_index, err_kind) ->
 * (status, position of the failing record or the end, record errors). The first len(err_index) record
 * errors go to err_index (int64) and err_kind (int8). Holds the GIL: a walk takes microseconds on the
 * event loop, less than giving the GIL up and taking it back. */
static PyObject *py_walk(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Buffers b = {.n = 0};
    int64_t ints[9];
    Py_ssize_t len, cap, cap2, at = 0;
    int64_t n_err = 0;
    PyObject *result = NULL;
    if (check_nargs("walk", nargs, 12) < 0)
        return NULL;
    const uint8_t *buf = bytes_arg(&b, args[0], &len);
    if (!buf)
        goto done;
    for (int i = 0; i < 9; i++)
        if (int_arg(args[1 + i], &ints[i]) < 0)
            goto done;
    int64_t *err_index = array_arg(&b, args[10], 8, 1, &cap);
    if (!err_index)
        goto done;
    int8_t *err_kind = array_arg(&b, args[11], 1, 1, &cap2);
    if (!err_kind)
        goto done;
    int64_t pos = ints[0], end = ints[1];
    if (pos < 0 || end > len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "walk: pos and end must lie within the buffer");
        goto done;
    }
    int status = walk(buf, (Py_ssize_t)pos, (Py_ssize_t)end, ints[2], ints[3], ints[4], ints[5], ints[6], ints[7],
                      ints[8], err_index, err_kind, cap < cap2 ? cap : cap2, &at, &n_err);
    result = Py_BuildValue("(inL)", status, at, (long long)n_err);
done:
    release_buffers(&b);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))py_walk, METH_FASTCALL, "Walk a v2 batch's records (LogValidator)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_validation", NULL, -1, methods};

PyMODINIT_FUNC PyInit__validation(void) { return PyModule_Create(&module); }
