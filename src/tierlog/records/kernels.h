/* What the compiled record kernels share: Kafka's varint readers and the buffer arguments.
 *
 * Included by each kernel module (records/_validation.c, records/_scan.c, storage/_offset_map.c,
 * spark/_columnar.c); everything is static, so each module carries its own copy. Arithmetic on values
 * read from a batch wraps (through uint64_t) as Java's long does, never overflowing a signed type. */

#ifndef TIERLOG_KERNELS_H
#define TIERLOG_KERNELS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Ends of a varint read, as negative next positions. */
#define VARINT_EOF (-1)      /* the data ends before the varint does */
#define VARINT_TOO_LONG (-2) /* a sixth byte (varlong: an eleventh) */

/* A zigzag varint of at most 5 bytes (Kafka's ByteUtils.readVarint) at buf[pos], pos < end: the next
 * position, or VARINT_EOF / VARINT_TOO_LONG; *value set on success. */
static inline Py_ssize_t read_varint(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end, int64_t *value) {
    uint32_t u = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (pos >= end)
            return VARINT_EOF;
        uint8_t b = buf[pos++];
        u |= (uint32_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *value = (int32_t)((u >> 1) ^ (0u - (u & 1)));
            return pos;
        }
    }
    return VARINT_TOO_LONG;
}

/* A zigzag varlong of at most 10 bytes (ByteUtils.readVarlong), as read_varint. */
static inline Py_ssize_t read_varlong(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end, int64_t *value) {
    uint64_t u = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (pos >= end)
            return VARINT_EOF;
        uint8_t b = buf[pos++];
        u |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *value = (int64_t)((u >> 1) ^ (0 - (u & 1)));
            return pos;
        }
    }
    return VARINT_TOO_LONG;
}

/* Java's long arithmetic: wraps instead of overflowing. */
static inline int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }

/* The buffer arguments of one call, released together on every way out. */
#define MAX_BUFFERS 24
typedef struct {
    Py_buffer views[MAX_BUFFERS];
    int n;
} Buffers;

static inline void release_buffers(Buffers *b) {
    while (b->n > 0)
        PyBuffer_Release(&b->views[--b->n]);
}

/* The bytes of any contiguous buffer (bytes, bytearray, memoryview, a uint8 array), read-only. */
static inline const uint8_t *bytes_arg(Buffers *b, PyObject *obj, Py_ssize_t *len) {
    Py_buffer *v = &b->views[b->n];
    if (PyObject_GetBuffer(obj, v, PyBUF_SIMPLE) < 0)
        return NULL;
    b->n++;
    *len = v->len;
    return (const uint8_t *)v->buf;
}

/* A one-dimensional contiguous array of ``itemsize``-byte items (numpy int64, uint64, int32, int8, bool),
 * writable if asked: its data and number of items. The element type is the caller's; the item size is
 * checked, so a wrong dtype is a TypeError rather than a read past the end. */
static inline void *array_arg(Buffers *b, PyObject *obj, Py_ssize_t itemsize, int writable, Py_ssize_t *rows) {
    Py_buffer *v = &b->views[b->n];
    if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return NULL;
    b->n++;
    if (v->ndim != 1 || v->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "expected a one-dimensional array of %zd-byte items", itemsize);
        return NULL;
    }
    *rows = v->shape[0];
    return v->buf;
}

/* An integer argument. */
static inline int int_arg(PyObject *obj, int64_t *out) {
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

static inline int check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t expected) {
    if (nargs == expected)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, expected, nargs);
    return -1;
}

#endif
