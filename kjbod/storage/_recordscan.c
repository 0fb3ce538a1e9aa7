/* The fast paths of kjbod.storage.records: the record walk of one magic-2 batch (scan_records) and the snappy
 * block reader (snappy_block, at the end).
 *
 * scan(payload, count) -> (min_timestamp_delta, max_timestamp_delta), or None when the records are malformed.
 *
 * It answers only "valid or not" (and the two timestamp deltas the caller needs); on None the caller runs the
 * pure-Python scanner over the same bytes to say which record is wrong and why, so both give the same verdict
 * by construction and the tests compare them on every input they build. The rules, record by record (the
 * record layout of Kafka's DefaultRecord, varints zigzag-encoded):
 *
 *   length        varint32 >= 0, the record must fit in what is left of the payload
 *   attributes    1 byte (unused by magic 2, not checked)
 *   timestampDelta varint64
 *   offsetDelta   varint32, equal to the record's index (consecutive from 0)
 *   key, value    varint32 length >= -1 (-1 = null), then that many bytes
 *   headers       varint32 count >= 0, then per header: key length >= 0 and that many bytes of UTF-8,
 *                 value length >= -1 and that many bytes
 *   the fields end exactly at the record's length; after `count` records the payload ends.
 *
 * A varint32 has at most 5 bytes and its value fits 32 bits; a varint64 at most 10 bytes and 64 bits. Every
 * read is bounded by the end of the current record.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} cursor;

/* 0 on success, -1 on a malformed or truncated varint. */
static inline int read_varint32(cursor *c, int32_t *out) {
    uint32_t raw = 0;
    for (int i = 0; i < 5; i++) {
        if (c->p >= c->end)
            return -1;
        uint8_t b = *c->p++;
        if (i == 4 && (b & 0xF0))
            return -1; /* more than 32 bits, or a continuation on the fifth byte */
        raw |= (uint32_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *out = (int32_t)((raw >> 1) ^ (~(raw & 1) + 1));
            return 0;
        }
    }
    return -1;
}

static inline int read_varint64(cursor *c, int64_t *out) {
    uint64_t raw = 0;
    for (int i = 0; i < 10; i++) {
        if (c->p >= c->end)
            return -1;
        uint8_t b = *c->p++;
        if (i == 9 && (b & 0xFE))
            return -1;
        raw |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
            return 0;
        }
    }
    return -1;
}

/* Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF), as Python's decoder accepts it. */
static int valid_utf8(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        int need;
        uint32_t cp;
        if (b >= 0xC2 && b <= 0xDF) {
            need = 1;
            cp = b & 0x1F;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2;
            cp = b & 0x0F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3;
            cp = b & 0x07;
        } else {
            return 0;
        }
        if (i + need >= n)
            return 0; /* truncated sequence */
        for (int k = 1; k <= need; k++) {
            uint8_t cb = s[i + k];
            if ((cb & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (cb & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += need + 1;
    }
    return 1;
}

/* 0 when the blob (length, then bytes) is well formed; min_len is -1 (nullable) or 0. */
static inline int skip_blob(cursor *c, int32_t min_len, int utf8) {
    int32_t n;
    if (read_varint32(c, &n) || n < min_len)
        return -1;
    if (n > 0) {
        if ((Py_ssize_t)n > c->end - c->p)
            return -1;
        if (utf8 && !valid_utf8(c->p, n))
            return -1;
        c->p += n;
    }
    return 0;
}

static int scan_payload(const uint8_t *buf, Py_ssize_t size, long long count, int64_t *min_delta, int64_t *max_delta) {
    cursor all = {buf, buf + size};
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (long long i = 0; i < count; i++) {
        int32_t length;
        if (read_varint32(&all, &length) || length < 0 || (Py_ssize_t)length > all.end - all.p)
            return -1;
        cursor rec = {all.p, all.p + length};
        if (rec.p >= rec.end)
            return -1;
        rec.p++; /* attributes */
        int64_t ts_delta;
        int32_t off_delta, headers;
        if (read_varint64(&rec, &ts_delta) || read_varint32(&rec, &off_delta) || off_delta != i)
            return -1;
        if (skip_blob(&rec, -1, 0) || skip_blob(&rec, -1, 0))
            return -1;
        if (read_varint32(&rec, &headers) || headers < 0 || (Py_ssize_t)headers > rec.end - rec.p)
            return -1;
        for (int32_t h = 0; h < headers; h++) {
            if (skip_blob(&rec, 0, 1) || skip_blob(&rec, -1, 0))
                return -1;
        }
        if (rec.p != rec.end)
            return -1;
        all.p = rec.end;
        if (ts_delta < lo)
            lo = ts_delta;
        if (ts_delta > hi)
            hi = ts_delta;
    }
    if (all.p != all.end)
        return -1;
    *min_delta = lo;
    *max_delta = hi;
    return 0;
}

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    long long count;
    if (!PyArg_ParseTuple(args, "y*L", &view, &count))
        return NULL;
    int64_t lo = 0, hi = 0;
    int rc;
    if (count < 1) {
        rc = -1;
    } else {
        /* The GIL is kept: a walk of 1 MiB takes tens of microseconds, and giving the GIL away can cost a
         * switch interval (5 ms) to get it back when another thread wants it. */
        rc = scan_payload((const uint8_t *)view.buf, view.len, count, &lo, &hi);
    }
    PyBuffer_Release(&view);
    if (rc)
        Py_RETURN_NONE;
    return Py_BuildValue("(LL)", (long long)lo, (long long)hi);
}

/* One raw snappy block (the format of google/snappy's format_description.txt): a varint of the uncompressed
 * length, then literals and back-references. Returns the bytes, or None when the block is malformed (the
 * pure-Python reader, kjbod.storage.records._snappy_block, then says why). */
static PyObject *snappy_block(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    const uint8_t *p = (const uint8_t *)view.buf, *end = p + view.len;
    uint64_t expected = 0;
    int shift = 0;
    for (;;) {
        if (p >= end || shift > 28)
            goto bad;
        uint8_t b = *p++;
        expected |= (uint64_t)(b & 0x7F) << shift;
        shift += 7;
        if (!(b & 0x80))
            break;
    }
    /* No element yields more than 32 times its own size (a 3-byte copy of 64 bytes at most): a larger claim
     * is a lie, refused before allocating it. */
    if (expected > (uint64_t)view.len * 32)
        goto bad;
    PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)expected);
    if (result == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    size_t used = 0;
    while (p < end) {
        uint8_t tag = *p++;
        size_t length, offset;
        switch (tag & 3) {
        case 0: /* literal */
            length = (tag >> 2) + 1;
            if (length > 60) {
                size_t extra = length - 60;
                if ((size_t)(end - p) < extra)
                    goto bad_result;
                length = 0;
                for (size_t k = 0; k < extra; k++)
                    length |= (size_t)p[k] << (8 * k);
                length += 1;
                p += extra;
            }
            if ((size_t)(end - p) < length || expected - used < length)
                goto bad_result;
            memcpy(out + used, p, length);
            used += length;
            p += length;
            continue;
        case 1:
            if (end - p < 1)
                goto bad_result;
            length = 4 + ((tag >> 2) & 7);
            offset = ((size_t)(tag >> 5) << 8) | p[0];
            p += 1;
            break;
        case 2:
            if (end - p < 2)
                goto bad_result;
            length = (tag >> 2) + 1;
            offset = (size_t)p[0] | ((size_t)p[1] << 8);
            p += 2;
            break;
        default:
            if (end - p < 4)
                goto bad_result;
            length = (tag >> 2) + 1;
            offset = (size_t)p[0] | ((size_t)p[1] << 8) | ((size_t)p[2] << 16) | ((size_t)p[3] << 24);
            p += 4;
            break;
        }
        if (offset == 0 || offset > used || expected - used < length)
            goto bad_result;
        if (offset >= length) {
            memcpy(out + used, out + used - offset, length);
        } else { /* overlapping: byte by byte, so the copied bytes repeat */
            for (size_t k = 0; k < length; k++)
                out[used + k] = out[used - offset + k];
        }
        used += length;
    }
    if (used != expected)
        goto bad_result;
    PyBuffer_Release(&view);
    return result;
bad_result:
    Py_DECREF(result);
bad:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(payload, count) -> (min_ts_delta, max_ts_delta) or None if malformed"},
    {"snappy_block", snappy_block, METH_VARARGS, "snappy_block(block) -> bytes, or None if malformed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recordscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recordscan(void) { return PyModule_Create(&module); }
