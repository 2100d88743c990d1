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
    10**22, one exact IEEE operation), else PyOS_string_to_double on a NUL-terminated
    copy (David Gay's correctly rounded strtod, locale-independent), called with the
    GIL held;
  - null: NaN;
  - a string that is one of values.MARKERS after stripping spaces and lowercasing,
    written with printable ASCII only and no escapes: NaN / +inf / -inf exactly as
    numpy's float conversion of that string gives them ("-nan" has its sign bit set).
Anything else declines the whole block: returns None (the partly written columns are
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

/* One line [p, e): 1 when it is a row of the keys, its values written to out[j * n]. */
static int parse_line(Ctx *ctx, const char *p, const char *e, const Key *keys,
                      Py_ssize_t width, double *out, Py_ssize_t n) {
    p = skip_ws(p, e);
    if (p >= e || *p != '{') return 0;
    p++;
    for (Py_ssize_t j = 0; j < width; j++) {
        p = skip_ws(p, e);
        if (j > 0) {
            if (p >= e || *p != ',') return 0;
            p = skip_ws(p + 1, e);
        }
        if (e - p < keys[j].len || memcmp(p, keys[j].bytes, (size_t)keys[j].len)) return 0;
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
    if (p >= e || *p != '}') return 0;
    p = skip_ws(p + 1, e);
    return p == e;
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
    int ok = 1;
    Ctx ctx = {NULL};
    ctx.save = PyEval_SaveThread();
    const char *p = base, *stop = base + end;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        const char *nl = memchr(p, '\n', (size_t)(stop - p));
        ok = parse_line(&ctx, p, nl, keys, width, col + i, n);
        p = nl + 1;
    }
    PyEval_RestoreThread(ctx.save);
    if (ok) {
        result = out;
        out = NULL;
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

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     "rows(data, end, keys) -> bytearray | None: a block of rows of one key order into "
     "float64 columns (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rows", "Per-step JSONL rows into float64 columns.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }
