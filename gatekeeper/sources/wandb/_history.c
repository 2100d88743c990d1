/* History records of a `.wandb` file straight into per-key float64 columns.
 *
 * The compiled half of gatekeeper/sources/wandb/decode.py (read that first). A `Decoder`
 * takes one serialized protobuf `Record` at a time. When the record is a plain history
 * record it decodes it here -- no Python object per item -- and appends each item's row
 * index and value to its key's column; otherwise it returns None and the caller parses
 * the record with the SDK's protobuf runtime, as it would without this module.
 *
 * Exactness rule: a record is decoded here only when this code is certain that the
 * protobuf runtime plus the Python path would produce the same result. Anything else --
 * a non-history record, a history record without a step or with a step beyond 2**53, a
 * repeated singular field or sub-message (protobuf merges those), a typed value, a
 * value text that is not a plain JSON number, NaN, Infinity, -Infinity, null, true or
 * false (and not every such number: see parse_value), invalid UTF-8 in a string field, a group or
 * an undefined wire type, a
 * malformed or overlong varint, a length past the end of its message -- is handed back
 * whole (nothing of it is kept), so results and error messages stay those of the Python
 * path. Every length is checked against the bytes it lies in; nothing is read past them.
 *
 * A nested key's parts are joined with 0x1f, decode.py's NESTED. Field numbers are not
 * compiled in: the caller reads them from the SDK's descriptor.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <stdlib.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_KNOWN 64          /* "other known field" numbers per message */
#define MAX_TEXT 40           /* longer value texts go to the Python path */
#define MAX_INT_DIGITS 18     /* integer texts beyond int64 go to the Python path */
#define MAX_PROBES 64         /* a longer hash chain hands the record back */
#define MAX_KEYS (1 << 20)    /* distinct keys kept in the table */
#define EXACT_STEP (INT64_C(1) << 53)

/* Value texts whose float64 depends on the other texts of their key's batch in the
 * Python path (`texts_to_floats`: one orjson parse of the batch, else numpy's cast, else
 * one conversion per text with a mask) are stored as NaNs with payloads no parsed text
 * produces, and flagged on the key; decode.py resolves them per batch as that path does.
 * NaN/Infinity texts are flagged too: they decide which route the batch takes. */
#define NULL_BITS UINT64_C(0x7ff8000000000001)    /* null: NaN, masked route */
#define NEGZERO_BITS UINT64_C(0x7ff8000000000002) /* -0: orjson's int 0, else -0.0 */
#define TRUE_BITS UINT64_C(0x7ff8000000000003)    /* true: 1.0, masked route */
#define FALSE_BITS UINT64_C(0x7ff8000000000004)   /* false: 0.0, masked route */
enum { F_NULL = 1, F_SPECIAL = 2, F_NEGZERO = 4, F_BOOL = 8 };

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
} Span;

typedef struct {
    uint8_t *bytes;      /* the key as logged (UTF-8) */
    Py_ssize_t len;
    uint64_t hash;
    PyObject *name;      /* str */
    int64_t *rows;       /* this batch's column */
    double *vals;
    Py_ssize_t count, cap;
    int flags;           /* F_* of this batch's values */
} Slot;

typedef struct {
    Span key;            /* in the record, or (p NULL) in scratch from scratch_at */
    Py_ssize_t scratch_at;
    double value;
    int flags;
    int skip;            /* a `_` key: read, then dropped as the Python path drops it */
} Pending;

typedef struct {
    int n;
    uint32_t f[MAX_KNOWN];
} FieldSet;

typedef struct {
    PyObject_HEAD
    /* field numbers, from the SDK's descriptor */
    uint32_t rec_history, rec_num, hr_item, hr_step, hs_num, hi_key, hi_nested, hi_value;
    FieldSet rec_other, hr_other, hs_other, hi_other;  /* known fields: hand back if seen */
    uint64_t seed;
    /* key table: open addressing, indices into `slots` (+1; 0 = empty) */
    uint32_t *table;
    size_t table_cap;
    Slot *slots;
    size_t nslots, slots_cap;
    /* slots with values in this batch, in order of first appearance */
    uint32_t *active;
    size_t nactive, active_cap;
    /* one record's items before they are committed */
    Pending *pending;
    size_t pending_cap;
    uint8_t *scratch;    /* this record's joined nested keys */
    Py_ssize_t nscratch;
    size_t scratch_cap;
    /* counters, for tests and the bench */
    long long decoded, handed_back;
} Decoder;

/* ---- wire format ---------------------------------------------------------------- */

/* A varint of at most 10 bytes whose 10th byte is 0 or 1 (a 64-bit value); 0 when
 * malformed, truncated or wider (the protobuf runtime is left to judge those). */
static int read_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return 0;
        uint8_t b = *p++;
        if (i == 9) {
            if (b > 1) return 0;
            v |= (uint64_t)b << 63;
            *pp = p;
            *out = v;
            return 1;
        }
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* A tag of field number >= 1 that fits 32 bits, in at most 5 bytes. */
static int read_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wire) {
    const uint8_t *p = *pp;
    uint64_t v;
    if (!read_varint(&p, end, &v) || p - *pp > 5 || v > UINT32_MAX || (v >> 3) == 0)
        return 0;
    *pp = p;
    *field = (uint32_t)(v >> 3);
    *wire = (int)(v & 7);
    return 1;
}

/* The bytes of a length-delimited field. */
static int read_len(const uint8_t **pp, const uint8_t *end, Span *out) {
    const uint8_t *p = *pp;
    uint64_t n;
    if (!read_varint(&p, end, &n) || n > (uint64_t)(end - p)) return 0;
    out->p = p;
    out->n = (Py_ssize_t)n;
    *pp = p + n;
    return 1;
}

/* Skip an unknown field's value: varint, fixed64, length-delimited, fixed32. Groups
 * (3, 4) and the undefined wire types 6, 7 are left to the protobuf runtime. */
static int skip_field(const uint8_t **pp, const uint8_t *end, int wire) {
    uint64_t v;
    Span s;
    switch (wire) {
    case 0:
        return read_varint(pp, end, &v);
    case 1:
        if (end - *pp < 8) return 0;
        *pp += 8;
        return 1;
    case 2:
        return read_len(pp, end, &s);
    case 5:
        if (end - *pp < 4) return 0;
        *pp += 4;
        return 1;
    default:
        return 0;
    }
}

static int in_set(const FieldSet *s, uint32_t f) {
    for (int i = 0; i < s->n; i++)
        if (s->f[i] == f) return 1;
    return 0;
}

/* Well-formed UTF-8 (Unicode Table 3-7: no overlongs, surrogates or > U+10FFFF), the
 * check the protobuf runtime applies to proto3 string fields. */
static int utf8_ok(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (n - i < 2 || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (n - i < 3) return 0;
            uint8_t c1 = s[i + 1];
            uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
            if (c1 < lo || c1 > hi || (s[i + 2] & 0xC0) != 0x80) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (n - i < 4) return 0;
            uint8_t c1 = s[i + 1];
            uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
            if (c1 < lo || c1 > hi || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* ---- value texts ------------------------------------------------------------------ */

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static double from_bits(uint64_t bits) {
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* A value text as the Python path reads it: its float64 (or a payload above) in *out and
 * its flags (F_*) in *flags; 0 = a text this code does not read (the record is handed
 * back). Read: `null`, `true`, `false`, `NaN`, `Infinity`, `-Infinity`, `-0`, and a JSON
 * number of at most MAX_TEXT characters whose value is a normal finite double or a zero
 * written as zero, with at most MAX_INT_DIGITS digits when it is an integer (orjson's
 * int range) -- the numbers every route of the Python path reads as the same float64. */
static int parse_value(const uint8_t *s, Py_ssize_t n, double *out, int *flags) {
    *flags = 0;
    if (n == 4 && memcmp(s, "null", 4) == 0) {
        *out = from_bits(NULL_BITS);
        *flags = F_NULL;
        return 1;
    }
    if (n == 4 && memcmp(s, "true", 4) == 0) {
        *out = from_bits(TRUE_BITS);
        *flags = F_BOOL;
        return 1;
    }
    if (n == 5 && memcmp(s, "false", 5) == 0) {
        *out = from_bits(FALSE_BITS);
        *flags = F_BOOL;
        return 1;
    }
    if (n == 2 && memcmp(s, "-0", 2) == 0) {
        *out = from_bits(NEGZERO_BITS);
        *flags = F_NEGZERO;
        return 1;
    }
    if (n == 3 && memcmp(s, "NaN", 3) == 0) {
        *out = Py_NAN;
        *flags = F_SPECIAL;
        return 1;
    }
    if (n == 8 && memcmp(s, "Infinity", 8) == 0) {
        *out = Py_HUGE_VAL;
        *flags = F_SPECIAL;
        return 1;
    }
    if (n == 9 && memcmp(s, "-Infinity", 9) == 0) {
        *out = -Py_HUGE_VAL;
        *flags = F_SPECIAL;
        return 1;
    }
    if (n < 1 || n > MAX_TEXT) return 0;
    /* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, with the significant digits as an
     * integer `mant` (while it fits) and the power of ten `exp10` they are scaled by */
    Py_ssize_t i = 0;
    int neg = 0, nonzero = 0, is_int = 1, int_digits = 0, sig = 0;
    uint64_t mant = 0;
    long exp10 = 0, e = 0;
    if (s[i] == '-') {
        neg = 1;
        i++;
    }
    if (i >= n || !is_digit(s[i])) return 0;
    if (s[i] == '0') {
        i++;
        int_digits = 1;
    } else {
        while (i < n && is_digit(s[i])) {
            nonzero = 1;
            int_digits++;
            if (sig++ < 19) mant = mant * 10 + (uint64_t)(s[i] - '0');
            else exp10++;
            i++;
        }
    }
    if (i < n && s[i] == '.') {
        is_int = 0;
        i++;
        if (i >= n || !is_digit(s[i])) return 0;
        while (i < n && is_digit(s[i])) {
            if (s[i] != '0') nonzero = 1;
            if (sig || s[i] != '0') {
                if (sig++ < 19) {
                    mant = mant * 10 + (uint64_t)(s[i] - '0');
                    exp10--;
                }
            } else {
                exp10--; /* a leading zero of the fraction */
            }
            i++;
        }
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        is_int = 0;
        i++;
        int eneg = 0;
        if (i < n && (s[i] == '+' || s[i] == '-')) eneg = s[i++] == '-';
        if (i >= n || !is_digit(s[i])) return 0;
        while (i < n && is_digit(s[i])) {
            if (e < 100000) e = e * 10 + (s[i] - '0'); /* MAX_TEXT bounds the rest */
            i++;
        }
        exp10 += eneg ? -e : e;
    }
    if (i != n) return 0;
    if (is_int && int_digits > MAX_INT_DIGITS) return 0;
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    /* Clinger's fast path: a significand below 2**53 and a power of ten below 10**23 are
     * both exact doubles, so one IEEE multiplication or division rounds correctly. */
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    if (sig <= 19 && mant <= (UINT64_C(1) << 53) && exp10 >= -22 && exp10 <= 22) {
        double v = (double)mant;
        v = exp10 < 0 ? v / pow10[-exp10] : v * pow10[exp10];
        *out = neg ? -v : v;
        return 1;
    }
#endif
    char buf[MAX_TEXT + 1];
    memcpy(buf, s, (size_t)n);
    buf[n] = '\0';
    char *stop = NULL;
    /* C's strtod rounds correctly (glibc, musl, macOS); a locale whose decimal point is
     * not '.' stops it early, and the record is handed back */
    double v = strtod(buf, &stop);
    if (stop != buf + n) return 0;
    if (!isfinite(v)) return 0;                           /* overflow */
    if (v == 0.0 ? nonzero : fabs(v) < DBL_MIN) return 0; /* underflow, subnormal */
    *out = v;
    return 1;
}

/* ---- key table ---------------------------------------------------------------------- */

static uint64_t key_hash(const Decoder *d, const uint8_t *p, Py_ssize_t n) {
    /* FNV-1a from a per-decoder random seed, then a final mix; chains longer than
     * MAX_PROBES hand the record back, so a crafted collision set only costs speed. */
    uint64_t h = d->seed ^ UINT64_C(0xcbf29ce484222325);
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    return h;
}

static int table_grow(Decoder *d) {
    size_t cap = d->table_cap ? d->table_cap * 2 : 256;
    uint32_t *t = PyMem_Calloc(cap, sizeof(uint32_t));
    if (!t) return -1;
    for (size_t i = 0; i < d->nslots; i++) {
        size_t j = d->slots[i].hash & (cap - 1);
        while (t[j]) j = (j + 1) & (cap - 1);
        t[j] = (uint32_t)(i + 1);
    }
    PyMem_Free(d->table);
    d->table = t;
    d->table_cap = cap;
    return 0;
}

/* The slot of key `k`, added when new: index >= 0; -1 a Python error; -2 give up (a
 * long chain or too many keys: the record goes to the Python path). */
static Py_ssize_t lookup(Decoder *d, Span k) {
    uint64_t h = key_hash(d, k.p, k.n);
    size_t mask = d->table_cap - 1, j = h & mask;
    for (int probes = 0; probes < MAX_PROBES; probes++, j = (j + 1) & mask) {
        uint32_t at = d->table[j];
        if (!at) {
            if (d->nslots >= MAX_KEYS) return -2;
            if (d->nslots == d->slots_cap) {
                size_t cap = d->slots_cap ? d->slots_cap * 2 : 64;
                Slot *s = PyMem_Realloc(d->slots, cap * sizeof(Slot));
                if (!s) {
                    PyErr_NoMemory();
                    return -1;
                }
                d->slots = s;
                d->slots_cap = cap;
            }
            PyObject *name = PyUnicode_DecodeUTF8((const char *)k.p, k.n, "strict");
            if (!name) return -1; /* cannot happen: checked by utf8_ok */
            uint8_t *bytes = PyMem_Malloc(k.n ? (size_t)k.n : 1);
            if (!bytes) {
                Py_DECREF(name);
                PyErr_NoMemory();
                return -1;
            }
            memcpy(bytes, k.p, (size_t)k.n);
            Slot *s = &d->slots[d->nslots];
            memset(s, 0, sizeof(*s));
            s->bytes = bytes;
            s->len = k.n;
            s->hash = h;
            s->name = name;
            d->nslots++;
            d->table[j] = (uint32_t)d->nslots;
            if (d->nslots * 2 > d->table_cap && table_grow(d) < 0) {
                PyErr_NoMemory();
                return -1;
            }
            return (Py_ssize_t)d->nslots - 1;
        }
        Slot *s = &d->slots[at - 1];
        if (s->hash == h && s->len == k.n && memcmp(s->bytes, k.p, (size_t)k.n) == 0)
            return (Py_ssize_t)at - 1;
    }
    return -2;
}

static int slot_append(Decoder *d, size_t si, int64_t row, double v, int flags) {
    Slot *s = &d->slots[si];
    if (s->count == 0) {
        if (d->nactive == d->active_cap) {
            size_t cap = d->active_cap ? d->active_cap * 2 : 64;
            uint32_t *a = PyMem_Realloc(d->active, cap * sizeof(uint32_t));
            if (!a) return -1;
            d->active = a;
            d->active_cap = cap;
        }
        d->active[d->nactive++] = (uint32_t)si;
    }
    if (s->count == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 16;
        int64_t *r = PyMem_Realloc(s->rows, (size_t)cap * sizeof(int64_t));
        if (!r) return -1;
        s->rows = r;
        double *v2 = PyMem_Realloc(s->vals, (size_t)cap * sizeof(double));
        if (!v2) return -1;
        s->vals = v2;
        s->cap = cap;
    }
    s->rows[s->count] = row;
    s->vals[s->count] = v;
    s->flags |= flags;
    s->count++;
    return 0;
}

/* ---- records ------------------------------------------------------------------------ */

/* A nested key of several parts, joined with NESTED (0x1f) as decode.py joins them,
 * into d->scratch; its offset there, or -1 when out of memory. */
static Py_ssize_t join_nested(Decoder *d, const uint8_t *p, const uint8_t *end) {
    Py_ssize_t at = d->nscratch;
    int parts = 0;
    while (p < end) {
        uint32_t f;
        int wire;
        read_tag(&p, end, &f, &wire); /* cannot fail: decode_item read these bytes */
        Span s = {NULL, 0};
        if (f == d->hi_nested) {
            read_len(&p, end, &s);
            size_t need = (size_t)d->nscratch + (size_t)s.n + 1;
            if (need > d->scratch_cap) {
                size_t cap = d->scratch_cap ? d->scratch_cap : 256;
                while (cap < need) cap *= 2;
                uint8_t *b = PyMem_Realloc(d->scratch, cap);
                if (!b) return -1;
                d->scratch = b;
                d->scratch_cap = cap;
            }
            if (parts++) d->scratch[d->nscratch++] = 0x1f;
            memcpy(d->scratch + d->nscratch, s.p, (size_t)s.n);
            d->nscratch += s.n;
        } else {
            skip_field(&p, end, wire);
        }
    }
    return at;
}

/* One HistoryItem: its key and value into *out; 1 read, 0 = hand the record back,
 * -1 out of memory. */
static int decode_item(Decoder *d, const uint8_t *p, const uint8_t *end, Pending *out) {
    static const uint8_t empty[1] = {0}; /* an absent key is "", never a NULL pointer */
    const uint8_t *start = p;
    Span key = {empty, 0}, nested = {empty, 0}, value = {empty, 0};
    int have_key = 0, have_value = 0, nnested = 0;
    while (p < end) {
        uint32_t f;
        int wire;
        if (!read_tag(&p, end, &f, &wire)) return 0;
        if (f == d->hi_key || f == d->hi_nested || f == d->hi_value) {
            Span s;
            if (wire != 2 || !read_len(&p, end, &s) || !utf8_ok(s.p, s.n)) return 0;
            if (f == d->hi_key) {
                if (have_key++) return 0; /* a repeated singular field: last wins there */
                key = s;
            } else if (f == d->hi_value) {
                if (have_value++) return 0;
                value = s;
            } else if (!nnested++) {
                nested = s;
            }
        } else if (in_set(&d->hi_other, f)) {
            return 0; /* a typed value */
        } else if (!skip_field(&p, end, wire)) {
            return 0;
        }
    }
    out->scratch_at = -1;
    if (nnested > 1) {
        out->scratch_at = join_nested(d, start, end);
        if (out->scratch_at < 0) return -1;
        out->key.p = NULL;
        out->key.n = d->nscratch - out->scratch_at;
        out->skip = nested.n > 0 && nested.p[0] == '_';
    } else {
        out->key = nnested ? nested : key;
        out->skip = out->key.n > 0 && out->key.p[0] == '_';
    }
    if (out->skip) return 1;
    if (!have_value || value.n == 0) return 0; /* the typed-value path */
    return parse_value(value.p, value.n, &out->value, &out->flags);
}

/* HistoryStep: its num (0 when absent). */
static int decode_step(const Decoder *d, const uint8_t *p, const uint8_t *end, int64_t *num) {
    int seen = 0;
    *num = 0;
    while (p < end) {
        uint32_t f;
        int wire;
        if (!read_tag(&p, end, &f, &wire)) return 0;
        if (f == d->hs_num) {
            uint64_t v;
            if (wire != 0 || seen++ || !read_varint(&p, end, &v)) return 0;
            *num = (int64_t)v;
        } else if (in_set(&d->hs_other, f) || !skip_field(&p, end, wire)) {
            return 0;
        }
    }
    return 1;
}

static int ensure_pending(Decoder *d, size_t n) {
    if (n <= d->pending_cap) return 0;
    size_t cap = d->pending_cap ? d->pending_cap * 2 : 64;
    while (cap < n) cap *= 2;
    Pending *p = PyMem_Realloc(d->pending, cap * sizeof(Pending));
    if (!p) return -1;
    d->pending = p;
    d->pending_cap = cap;
    return 0;
}

/* A HistoryRecord into d->pending; the number of items, or -1 = hand back, -2 = error. */
static Py_ssize_t decode_history(Decoder *d, const uint8_t *p, const uint8_t *end,
                                 int64_t *step) {
    int have_step = 0;
    size_t n = 0;
    while (p < end) {
        uint32_t f;
        int wire;
        if (!read_tag(&p, end, &f, &wire)) return -1;
        if (f == d->hr_item || f == d->hr_step) {
            Span s;
            if (wire != 2 || !read_len(&p, end, &s)) return -1;
            if (f == d->hr_step) {
                if (have_step++) return -1; /* a sub-message twice: protobuf merges them */
                if (!decode_step(d, s.p, s.p + s.n, step)) return -1;
            } else {
                if (ensure_pending(d, n + 1) < 0) return -2;
                int got = decode_item(d, s.p, s.p + s.n, &d->pending[n]);
                if (got < 0) return -2;
                if (!got) return -1;
                n++;
            }
        } else if (in_set(&d->hr_other, f) || !skip_field(&p, end, wire)) {
            return -1;
        }
    }
    if (!have_step) return -1; /* the stepless path reads `_step` items */
    if (*step < -EXACT_STEP || *step > EXACT_STEP) return -1; /* its error message */
    return (Py_ssize_t)n;
}

static PyObject *Decoder_add(Decoder *d, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "add(record: bytes, row: int)");
        return NULL;
    }
    if (!d->table) {
        PyErr_SetString(PyExc_RuntimeError, "Decoder.__init__ was not called");
        return NULL;
    }
    Py_buffer buf;
    if (PyObject_GetBuffer(args[0], &buf, PyBUF_SIMPLE) < 0) return NULL;
    long long row = PyLong_AsLongLong(args[1]);
    if (row == -1 && PyErr_Occurred()) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const uint8_t *p = buf.buf, *end = p + buf.len;
    Span hist = {NULL, 0};
    int nhist = 0, ok = 1;
    while (ok && p < end) {
        uint32_t f;
        int wire;
        if (!read_tag(&p, end, &f, &wire)) {
            ok = 0;
        } else if (f == d->rec_history) {
            ok = wire == 2 && !nhist++ && read_len(&p, end, &hist);
        } else if (f == d->rec_num) {
            uint64_t v;
            ok = wire == 0 && read_varint(&p, end, &v);
        } else if (in_set(&d->rec_other, f)) {
            ok = 0; /* another record type the reader keeps */
        } else {
            ok = skip_field(&p, end, wire);
        }
    }
    int64_t step = 0;
    Py_ssize_t n = -1;
    d->nscratch = 0;
    if (ok && nhist == 1) n = decode_history(d, hist.p, hist.p + hist.n, &step);
    if (n == -2) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    if (n >= 0) {
        /* keys first (a lookup may give up), then the values: all or nothing */
        for (Py_ssize_t i = 0; i < n; i++) {
            Pending *it = &d->pending[i];
            if (it->skip) continue;
            if (it->scratch_at >= 0) it->key.p = d->scratch + it->scratch_at; /* now stable */
            Py_ssize_t si = lookup(d, it->key);
            if (si == -1) {
                PyBuffer_Release(&buf);
                return NULL;
            }
            if (si == -2) {
                n = -1;
                break;
            }
            it->key.n = si; /* reused: the slot index */
        }
    }
    if (n < 0) {
        PyBuffer_Release(&buf);
        d->handed_back++;
        Py_RETURN_NONE;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Pending *it = &d->pending[i];
        if (it->skip) continue;
        if (slot_append(d, (size_t)it->key.n, row, it->value, it->flags) < 0) {
            PyBuffer_Release(&buf);
            return PyErr_NoMemory();
        }
    }
    PyBuffer_Release(&buf);
    d->decoded++;
    return PyFloat_FromDouble((double)step);
}

/* This batch's columns, in order of each key's first appearance:
 * [(key, rows: bytearray of int64, values: bytearray of float64, flags)]; the batch
 * starts again empty. */
static PyObject *Decoder_flush(Decoder *d, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New((Py_ssize_t)d->nactive);
    if (!out) return NULL;
    for (size_t i = 0; i < d->nactive; i++) {
        Slot *s = &d->slots[d->active[i]];
        PyObject *rows = PyByteArray_FromStringAndSize((const char *)s->rows,
                                                       s->count * (Py_ssize_t)sizeof(int64_t));
        PyObject *vals = PyByteArray_FromStringAndSize((const char *)s->vals,
                                                       s->count * (Py_ssize_t)sizeof(double));
        PyObject *item = rows && vals ? Py_BuildValue("(OOOi)", s->name, rows, vals, s->flags)
                                      : NULL;
        Py_XDECREF(rows);
        Py_XDECREF(vals);
        if (!item) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, item);
    }
    for (size_t i = 0; i < d->nactive; i++) {
        Slot *s = &d->slots[d->active[i]];
        s->count = 0;
        s->flags = 0;
        if (s->cap > 4096) { /* a key that filled one batch keeps at most this much */
            PyMem_Free(s->rows);
            PyMem_Free(s->vals);
            s->rows = NULL;
            s->vals = NULL;
            s->cap = 0;
        }
    }
    d->nactive = 0;
    return out;
}

static PyObject *Decoder_stats(Decoder *d, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("{sLsLsn}", "decoded", d->decoded, "handed_back", d->handed_back,
                         "keys", (Py_ssize_t)d->nslots);
}

/* ---- construction -------------------------------------------------------------------- */

static int read_u32(PyObject *dict, const char *name, uint32_t *out) {
    PyObject *v = PyDict_GetItemString(dict, name); /* borrowed */
    if (!v) {
        PyErr_Format(PyExc_KeyError, "field number %s missing", name);
        return -1;
    }
    unsigned long long n = PyLong_AsUnsignedLongLong(v);
    if (PyErr_Occurred()) return -1;
    if (n < 1 || n > 536870911ULL) {
        PyErr_Format(PyExc_ValueError, "field number %s out of range: %llu", name, n);
        return -1;
    }
    *out = (uint32_t)n;
    return 0;
}

static int read_set(PyObject *dict, const char *name, FieldSet *out) {
    PyObject *v = PyDict_GetItemString(dict, name);
    if (!v) {
        PyErr_Format(PyExc_KeyError, "field numbers %s missing", name);
        return -1;
    }
    PyObject *seq = PySequence_Fast(v, "field numbers must be a sequence");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_KNOWN) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "more than %d field numbers in %s", MAX_KNOWN, name);
        return -1;
    }
    out->n = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long f = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        out->f[out->n++] = (uint32_t)f;
    }
    Py_DECREF(seq);
    return 0;
}

static int Decoder_init(Decoder *d, PyObject *args, PyObject *kwds) {
    PyObject *fields;
    unsigned long long seed = 0;
    static char *kwlist[] = {"fields", "seed", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|K", kwlist, &PyDict_Type, &fields, &seed))
        return -1;
    if (read_u32(fields, "record.history", &d->rec_history) < 0 ||
        read_u32(fields, "record.num", &d->rec_num) < 0 ||
        read_u32(fields, "history.item", &d->hr_item) < 0 ||
        read_u32(fields, "history.step", &d->hr_step) < 0 ||
        read_u32(fields, "step.num", &d->hs_num) < 0 ||
        read_u32(fields, "item.key", &d->hi_key) < 0 ||
        read_u32(fields, "item.nested_key", &d->hi_nested) < 0 ||
        read_u32(fields, "item.value_json", &d->hi_value) < 0 ||
        read_set(fields, "record.other", &d->rec_other) < 0 ||
        read_set(fields, "history.other", &d->hr_other) < 0 ||
        read_set(fields, "step.other", &d->hs_other) < 0 ||
        read_set(fields, "item.other", &d->hi_other) < 0)
        return -1;
    d->seed = seed;
    if (!d->table && table_grow(d) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Decoder_dealloc(Decoder *d) {
    for (size_t i = 0; i < d->nslots; i++) {
        Py_XDECREF(d->slots[i].name);
        PyMem_Free(d->slots[i].bytes);
        PyMem_Free(d->slots[i].rows);
        PyMem_Free(d->slots[i].vals);
    }
    PyMem_Free(d->slots);
    PyMem_Free(d->table);
    PyMem_Free(d->active);
    PyMem_Free(d->pending);
    PyMem_Free(d->scratch);
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static PyMethodDef Decoder_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Decoder_add, METH_FASTCALL,
     "add(record, row) -> float | None: the step of a history record decoded here (its "
     "items appended at `row`), or None: parse this record with protobuf instead."},
    {"flush", (PyCFunction)Decoder_flush, METH_NOARGS,
     "flush() -> [(key, rows, values, flags)]: this batch's columns; starts a new one."},
    {"stats", (PyCFunction)Decoder_stats, METH_NOARGS,
     "stats() -> {decoded, handed_back, keys}: records decoded here and handed back."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gatekeeper.sources.wandb._history.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoder(fields: dict, seed: int = 0): wandb history records to columns.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decoder_init,
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_methods = Decoder_methods,
};

static PyObject *parse_value_py(PyObject *Py_UNUSED(m), PyObject *arg) {
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    double v = 0.0;
    int flags = 0;
    int ok = parse_value(buf.buf, buf.len, &v, &flags);
    PyBuffer_Release(&buf);
    if (!ok) Py_RETURN_NONE;
    return Py_BuildValue("(di)", v, flags);
}

static PyMethodDef module_methods[] = {
    {"parse_value", parse_value_py, METH_O,
     "parse_value(text: bytes) -> (float, flags) | None: a value text as the decoder "
     "reads it (None: handed to the Python path). For tests."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_history",
    .m_doc = "wandb history records to per-key columns in C (see decode.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__history(void) {
    if (PyType_Ready(&DecoderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&DecoderType);
    if (PyModule_AddObject(m, "Decoder", (PyObject *)&DecoderType) < 0) {
        Py_DECREF(&DecoderType);
        Py_DECREF(m);
        return NULL;
    }
    struct {
        const char *name;
        unsigned long long value;
    } consts[] = {
        {"NULL_BITS", NULL_BITS}, {"NEGZERO_BITS", NEGZERO_BITS}, {"TRUE_BITS", TRUE_BITS},
        {"FALSE_BITS", FALSE_BITS}, {"F_NULL", F_NULL}, {"F_SPECIAL", F_SPECIAL},
        {"F_NEGZERO", F_NEGZERO}, {"F_BOOL", F_BOOL},
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) {
        if (PyModule_AddObject(m, consts[i].name, PyLong_FromUnsignedLongLong(consts[i].value))
            < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
