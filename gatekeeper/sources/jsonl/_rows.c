/* Per-step rows of one key order, a whole block in one call (see
gatekeeper/sources/jsonl/reader.py, JsonlParser.parse_block, and docs/jsonl-reading.md).

rows(data, end, keys) -> bytearray | None

data: a bytes-like block; its first `end` bytes are whole lines, each ending in '\n'.
keys: a tuple of bytes, each key as orjson.dumps writes it (quotes included), in the
order of the block's first line. Returns a bytearray of len(keys) * n float64 (native
byte order), n = the number of lines, column-major: double [j * n + i] is field j of
line i (so each column is contiguous, and the caller's views of it need no copy).

Each line must be exactly: JSON whitespace (space, tab, CR), '{', then for each key in
order the key's bytes, ':', a value, separated by ',', then '}' (whitespace allowed
between all tokens as orjson allows it). A value is:
  - a number in strict JSON grammar: an integer (no fraction, no exponent) of at most 19
    digits that fits int64 becomes the double Python's float(int) gives (correctly
    rounded; -0 is the integer 0, +0.0); any other number is a float, correctly
    rounded: Clinger's fast path (decimal significand <= 2**53, power of ten within
    10**22, one exact IEEE operation), else on a NUL-terminated copy glibc's strtod_l
    in the "C" locale (exact, thread safe: no GIL needed) or, where that is not
    available, PyOS_string_to_double (David Gay's correctly rounded strtod,
    locale-independent) called with the GIL taken back;
  - null: NaN;
  - a string that is one of values.MARKERS after stripping spaces and lowercasing,
    written with printable ASCII only and no escapes: NaN / +inf / -inf exactly as
    numpy's float conversion of that string gives them ("-nan" has its sign bit set).
When a line's keys are not `keys` (a key where another was expected, more or fewer keys),
`rows` returns the byte offset of that line's start instead: the caller may try `grouped` (below), rows of a
few key orders, one table each. Anything else declines the whole block: returns None (the partly written columns are
freed): a line that is blank, another key order, true/false,
nested values, other strings, bare NaN/Infinity, leading zeros, '+1', '.5', '1.',
integers of more than 19 digits or outside int64, a number token longer than 64 bytes, a
float that overflows to infinity. The caller then reads the block with the Python ways,
which decide every error and message. The parse runs with the GIL released.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_NUMBER 64

/* glibc's strtod_l in the "C" locale: correctly rounded (exact multi-precision), thread
   safe, so it needs no GIL; elsewhere PyOS_string_to_double with the GIL taken back. */
#if defined(__GLIBC__) && !defined(GATEKEEPER_NO_STRTOD_L)
#define HAVE_STRTOD_L 1
#include <locale.h>
#include <stdlib.h>
static locale_t c_locale = (locale_t)0;
#endif
static int libc_strtod = 1; /* tests switch it off to check the other path here too */

typedef struct {
    const char *bytes;
    Py_ssize_t len;
} Key;

static const double POW10[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

typedef struct {
    PyThreadState *save; /* the released thread state: re-taken for strtod */
} Ctx;

static inline const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    return p;
}

/* The correctly rounded double of the number text [s, s+n), with the GIL taken back. */
static int slow_double(Ctx *ctx, const char *s, Py_ssize_t n, double *out) {
    char buf[MAX_NUMBER + 1];
    if (n > MAX_NUMBER) return 0;
    memcpy(buf, s, (size_t)n);
    buf[n] = '\0';
#ifdef HAVE_STRTOD_L
    if (libc_strtod && c_locale != (locale_t)0) {
        char *end = NULL;
        double v = strtod_l(buf, &end, c_locale);
        if (end != buf + n || isinf(v) || isnan(v)) return 0;
        *out = v;
        return 1;
    }
#endif
    PyEval_RestoreThread(ctx->save);
    char *endp = NULL;
    double v = PyOS_string_to_double(buf, &endp, NULL);
    int ok = 1;
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        ok = 0;
    } else if (endp != buf + n || isinf(v) || isnan(v)) {
        ok = 0;
    }
    ctx->save = PyEval_SaveThread();
    if (ok) *out = v;
    return ok;
}

/* A JSON number at p (p < e). Returns the position after it, or NULL to decline. */
static const char *parse_number(Ctx *ctx, const char *p, const char *e, double *out) {
    const char *s = p;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
        if (p >= e) return NULL;
    }
    /* w takes every digit (it may wrap beyond 19 significant digits: then `many`, and
       only the text is used); nd counts the significant ones (from the first non-zero) */
    uint64_t w = 0;
    int nd = 0;
    int fracd = 0; /* digits after the point */
    int isfloat = 0;
    if (*p == '0') {
        p++;
        if (p < e && (unsigned)(*p - '0') < 10) return NULL; /* leading zero */
    } else if ((unsigned)(*p - '1') < 9) {
        while (p < e && (unsigned)(*p - '0') < 10) {
            w = w * 10 + (uint64_t)(*p - '0');
            nd++;
            p++;
        }
    } else {
        return NULL;
    }
    if (p < e && *p == '.') {
        isfloat = 1;
        p++;
        const char *f = p;
        while (p < e && (unsigned)(*p - '0') < 10) {
            w = w * 10 + (uint64_t)(*p - '0');
            nd += w != 0;
            p++;
        }
        fracd = (int)(p - f);
        if (fracd == 0) return NULL;
    }
    int many = nd > 19; /* w is not the significand: the slow path reads the text */
    long exp10 = 0;
    if (p < e && (*p == 'e' || *p == 'E')) {
        isfloat = 1;
        p++;
        int eneg = 0;
        if (p < e && (*p == '+' || *p == '-')) {
            eneg = *p == '-';
            p++;
        }
        if (p >= e || *p < '0' || *p > '9') return NULL;
        while (p < e && *p >= '0' && *p <= '9') {
            if (exp10 < 100000) exp10 = exp10 * 10 + (*p - '0');
            p++;
        }
        if (eneg) exp10 = -exp10;
    }
    if (!isfloat) {
        if (many) return NULL; /* more than 19 digits: left to Python */
        if (neg ? w > ((uint64_t)1 << 63) : w > (uint64_t)INT64_MAX) return NULL;
        if (w == 0) {
            *out = 0.0; /* -0 is the integer 0 */
        } else {
            double v = (double)w; /* correctly rounded (round to nearest even) */
            *out = neg ? -v : v;
        }
        return p;
    }
    long e10 = exp10 - fracd;
    if (!many && w <= ((uint64_t)1 << 53) && e10 >= -22 && e10 <= 22) {
        double v = (double)w; /* exact */
        v = e10 < 0 ? v / POW10[-e10] : v * POW10[e10];
        *out = neg ? -v : v;
        return p;
    }
    if (!many && w == 0) {
        *out = neg ? -0.0 : 0.0;
        return p;
    }
    if (!slow_double(ctx, s, p - s, out)) return NULL;
    return p;
}

/* A marker string at p ('"'). Returns the position after it, or NULL to decline. */
static const char *parse_marker(const char *p, const char *e, double *out) {
    const char *s = ++p;
    while (p < e && *p != '"') {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c > 0x7e || c == '\\') return NULL;
        p++;
    }
    if (p >= e) return NULL;
    const char *t = p;
    while (s < t && *s == ' ') s++;
    while (t > s && t[-1] == ' ') t--;
    char low[12];
    Py_ssize_t n = t - s;
    if (n == 0 || n > 10) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        low[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    low[n] = '\0';
    if (!strcmp(low, "nan") || !strcmp(low, "+nan")) {
        *out = copysign(NAN, 1.0);
    } else if (!strcmp(low, "-nan")) {
        *out = copysign(NAN, -1.0);
    } else if (!strcmp(low, "inf") || !strcmp(low, "+inf") || !strcmp(low, "infinity") ||
               !strcmp(low, "+infinity")) {
        *out = HUGE_VAL;
    } else if (!strcmp(low, "-inf") || !strcmp(low, "-infinity")) {
        *out = -HUGE_VAL;
    } else {
        return NULL;
    }
    return p + 1;
}

#define DECLINE 0
#define ROW 1
#define OTHER_KEYS 2 /* a key where another was expected, or more or fewer keys */

/* One line [p, e): ROW when it is a row of the keys, its values written to out[j * n];
   OTHER_KEYS when its keys are not these (so far as it was read); DECLINE otherwise. */
static int parse_line(Ctx *ctx, const char *p, const char *e, const Key *keys,
                      Py_ssize_t width, double *out, Py_ssize_t n) {
    p = skip_ws(p, e);
    if (p >= e || *p != '{') return DECLINE;
    p++;
    for (Py_ssize_t j = 0; j < width; j++) {
        p = skip_ws(p, e);
        if (j > 0) {
            if (p < e && *p == '}') return OTHER_KEYS;
            if (p >= e || *p != ',') return DECLINE;
            p = skip_ws(p + 1, e);
        }
        if (e - p < keys[j].len || memcmp(p, keys[j].bytes, (size_t)keys[j].len))
            return OTHER_KEYS;
        p = skip_ws(p + keys[j].len, e);
        if (p >= e || *p != ':') return 0;
        p = skip_ws(p + 1, e);
        if (p >= e) return 0;
        double v;
        char c = *p;
        if (c == 'n') {
            if (e - p < 4 || memcmp(p, "null", 4)) return 0;
            v = NAN;
            p += 4;
        } else if (c == '"') {
            p = parse_marker(p, e, &v);
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            p = parse_number(ctx, p, e, &v);
        } else {
            return 0;
        }
        if (p == NULL) return 0;
        out[j * n] = v;
    }
    p = skip_ws(p, e);
    if (p < e && *p == ',') return OTHER_KEYS;
    if (p >= e || *p != '}') return 0;
    p = skip_ws(p + 1, e);
    return p == e ? ROW : DECLINE;
}

/* The keys of a tuple of bytes as Key structs (borrowed), or NULL with an exception. */
static Key *keys_of(PyObject *keys_obj, Py_ssize_t *width) {
    if (!PyTuple_Check(keys_obj) || PyTuple_GET_SIZE(keys_obj) == 0) {
        PyErr_SetString(PyExc_TypeError, "rows: keys must be a non-empty tuple of bytes");
        return NULL;
    }
    *width = PyTuple_GET_SIZE(keys_obj);
    Key *keys = PyMem_Malloc(sizeof(Key) * (size_t)*width);
    if (keys == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t j = 0; j < *width; j++) {
        PyObject *k = PyTuple_GET_ITEM(keys_obj, j);
        if (!PyBytes_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "rows: keys must be bytes");
            PyMem_Free(keys);
            return NULL;
        }
        keys[j].bytes = PyBytes_AS_STRING(k);
        keys[j].len = PyBytes_GET_SIZE(k);
    }
    return keys;
}

static Py_ssize_t count_lines(const char *base, Py_ssize_t end) {
    Py_ssize_t n = 0;
    for (const char *q = base, *stop = base + end;
         (q = memchr(q, '\n', (size_t)(stop - q))) != NULL; q++)
        n++;
    return n;
}

static PyObject *rows(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    Py_ssize_t end;
    PyObject *keys_obj;
    if (!PyArg_ParseTuple(args, "y*nO!", &data, &end, &PyTuple_Type, &keys_obj))
        return NULL;
    PyObject *result = NULL, *out = NULL;
    Key *keys = NULL;
    Py_ssize_t width = PyTuple_GET_SIZE(keys_obj);
    if (end < 0 || end > data.len || width == 0) {
        PyErr_SetString(PyExc_ValueError, "rows: bad end or no keys");
        goto done;
    }
    keys = PyMem_Malloc(sizeof(Key) * (size_t)width);
    if (keys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < width; j++) {
        PyObject *k = PyTuple_GET_ITEM(keys_obj, j);
        if (!PyBytes_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "rows: keys must be bytes");
            goto done;
        }
        keys[j].bytes = PyBytes_AS_STRING(k);
        keys[j].len = PyBytes_GET_SIZE(k);
    }
    const char *base = (const char *)data.buf;
    Py_ssize_t n = 0;
    for (const char *q = base, *stop = base + end;
         (q = memchr(q, '\n', (size_t)(stop - q))) != NULL; q++)
        n++;
    if (n == 0 || width > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(double) / n) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)sizeof(double) * width * n);
    if (out == NULL) goto done;
    double *col = (double *)PyByteArray_AS_STRING(out);
    int ok = ROW;
    Py_ssize_t i = 0;
    Ctx ctx = {NULL};
    ctx.save = PyEval_SaveThread();
    const char *p = base, *stop = base + end;
    for (; i < n; i++) {
        const char *nl = memchr(p, '\n', (size_t)(stop - p));
        ok = parse_line(&ctx, p, nl, keys, width, col + i, n);
        if (ok != ROW) break;
        p = nl + 1;
    }
    PyEval_RestoreThread(ctx.save);
    if (ok == ROW) {
        result = out;
        out = NULL;
    } else if (ok == OTHER_KEYS) {
        result = PyLong_FromSsize_t(p - base);
    } else {
        result = Py_None;
        Py_INCREF(result);
    }
done:
    Py_XDECREF(out);
    PyMem_Free(keys);
    PyBuffer_Release(&data);
    return result;
}

/* grouped(data, end, tables) -> list[(first, lines, values)] | int | None

tables: a tuple of key tuples (as `rows` takes one). Each line must be a row of one of
them (tried from the table of the line before on). Returns, per table in the order given,
(index of its first line or -1, a bytearray of the int64 indices of its lines, a
bytearray of their float64 values row-major: len(lines) x len(keys)); an int, the byte
offset of the first line whose keys are none of the tables' (the caller may add them and
call again); None to decline, as `rows` does. */
static PyObject *grouped(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    Py_ssize_t end;
    PyObject *tables_obj;
    if (!PyArg_ParseTuple(args, "y*nO!", &data, &end, &PyTuple_Type, &tables_obj))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t ntab = PyTuple_GET_SIZE(tables_obj), made = 0;
    Key **keys = NULL;
    Py_ssize_t *width = NULL, *count = NULL, *first = NULL;
    PyObject **lines = NULL, **vals = NULL;
    double **vbuf = NULL;  /* the buffers of vals and lines, read with the GIL released */
    int64_t **lbuf = NULL;
    if (end < 0 || end > data.len || ntab == 0) {
        PyErr_SetString(PyExc_ValueError, "grouped: bad end or no tables");
        goto done;
    }
    keys = PyMem_Calloc((size_t)ntab, sizeof(Key *));
    width = PyMem_Calloc((size_t)ntab, sizeof(Py_ssize_t));
    count = PyMem_Calloc((size_t)ntab, sizeof(Py_ssize_t));
    first = PyMem_Calloc((size_t)ntab, sizeof(Py_ssize_t));
    lines = PyMem_Calloc((size_t)ntab, sizeof(PyObject *));
    vals = PyMem_Calloc((size_t)ntab, sizeof(PyObject *));
    vbuf = PyMem_Calloc((size_t)ntab, sizeof(double *));
    lbuf = PyMem_Calloc((size_t)ntab, sizeof(int64_t *));
    if (!keys || !width || !count || !first || !lines || !vals || !vbuf || !lbuf) {
        PyErr_NoMemory();
        goto done;
    }
    const char *base = (const char *)data.buf;
    Py_ssize_t n = count_lines(base, end);
    if (n == 0) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    for (made = 0; made < ntab; made++) {
        keys[made] = keys_of(PyTuple_GET_ITEM(tables_obj, made), &width[made]);
        if (keys[made] == NULL) goto done;
        first[made] = -1;
        if (width[made] > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(double) / n) {
            PyErr_NoMemory();
            made++;
            goto done;
        }
        /* room for every line: pages never written are never touched */
        lines[made] = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)sizeof(int64_t) * n);
        vals[made] = PyByteArray_FromStringAndSize(
            NULL, (Py_ssize_t)sizeof(double) * width[made] * n);
        if (lines[made] == NULL || vals[made] == NULL) {
            made++;
            goto done;
        }
        lbuf[made] = (int64_t *)PyByteArray_AS_STRING(lines[made]);
        vbuf[made] = (double *)PyByteArray_AS_STRING(vals[made]);
    }
    int ok = ROW;
    Py_ssize_t i = 0, t = 0;
    Ctx ctx = {NULL};
    ctx.save = PyEval_SaveThread();
    const char *p = base, *stop = base + end, *line = base;
    for (; i < n && ok == ROW; i++) {
        line = p;
        const char *nl = memchr(p, '\n', (size_t)(stop - p));
        for (Py_ssize_t tried = 0; tried < ntab; tried++, t = (t + 1) % ntab) {
            ok = parse_line(&ctx, p, nl, keys[t], width[t], vbuf[t] + count[t] * width[t], 1);
            if (ok != OTHER_KEYS) break;
        }
        if (ok == ROW) {
            lbuf[t][count[t]++] = (int64_t)i;
            if (first[t] < 0) first[t] = i;
        }
        p = nl + 1;
    }
    PyEval_RestoreThread(ctx.save);
    if (ok == OTHER_KEYS) {
        result = PyLong_FromSsize_t(line - base);
        goto done;
    }
    if (ok != ROW) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    PyObject *list = PyList_New(ntab);
    if (list == NULL) goto done;
    for (Py_ssize_t k = 0; k < ntab; k++) {
        if (PyByteArray_Resize(lines[k], (Py_ssize_t)sizeof(int64_t) * count[k]) < 0 ||
            PyByteArray_Resize(vals[k], (Py_ssize_t)sizeof(double) * width[k] * count[k]) < 0) {
            Py_DECREF(list);
            goto done;
        }
        PyObject *item = Py_BuildValue("nOO", first[k], lines[k], vals[k]);
        if (item == NULL) {
            Py_DECREF(list);
            goto done;
        }
        PyList_SET_ITEM(list, k, item);
    }
    result = list;
done:
    for (Py_ssize_t k = 0; k < made; k++) {
        PyMem_Free(keys[k]);
        Py_XDECREF(lines[k]);
        Py_XDECREF(vals[k]);
    }
    PyMem_Free(keys);
    PyMem_Free(width);
    PyMem_Free(count);
    PyMem_Free(first);
    PyMem_Free(lines);
    PyMem_Free(vals);
    PyMem_Free(vbuf);
    PyMem_Free(lbuf);
    PyBuffer_Release(&data);
    return result;
}

/* use_libc_strtod(flag) -> bool: whether long number texts are read by strtod_l (when
it is available, glibc), else by PyOS_string_to_double; returns whether it was before. */
static PyObject *use_libc_strtod(PyObject *self, PyObject *arg) {
    (void)self;
    int flag = PyObject_IsTrue(arg);
    if (flag < 0) return NULL;
    int before = libc_strtod;
#ifdef HAVE_STRTOD_L
    before = before && c_locale != (locale_t)0;
#else
    before = 0;
#endif
    libc_strtod = flag;
    return PyBool_FromLong(before);
}

static PyMethodDef methods[] = {
    {"use_libc_strtod", use_libc_strtod, METH_O,
     "use_libc_strtod(flag) -> bool: read long number texts with glibc's strtod_l (else "
     "PyOS_string_to_double); returns whether it did before (False where unavailable)."},
    {"rows", rows, METH_VARARGS,
     "rows(data, end, keys) -> bytearray | int | None: a block of rows of one key order "
     "into float64 columns (see the module's source)."},
    {"grouped", grouped, METH_VARARGS,
     "grouped(data, end, tables) -> list | int | None: a block of rows of a few key orders "
     "into one float64 table each (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rows", "Per-step JSONL rows into float64 columns.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void) {
#ifdef HAVE_STRTOD_L
    if (c_locale == (locale_t)0) c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
#endif
    return PyModule_Create(&module);
}
