/* The spike check's exact path in C (see gatekeeper/checks/spike.py, Spike.violations).

violations(part, out, window, factor, min_scale, direction[, simd]) -> bool

part: C-contiguous float64, the `window` points before the first point judged, then the
points judged; out: C-contiguous bool, one per judged point (part.size - window). For
each judged point x with window W (the `window` points before it): med and mad of W
exactly as median_and_mad computes them, then
    deviation(x - med) > factor * max(1.4826 * mad, min_scale)
operation by operation in double, as Spike._exceeds does. direction: 0 up, 1 down,
2 both.

W is kept as a sorted copy, O(window) memory: per point one pass over it (`slide`, no
branch and no search: a comparison and a select per entry, vectorized) writes the next
window, the outgoing value removed and the incoming one inserted. The median is the middle of the
copy (even window: 0.5 * (a + b)); the deviations below and above it are two ascending
runs (med - x, x - med), and the MAD is the k-th smallest of their merge (even window:
0.5 * (k-th + (k+1)-th)), the same values median_and_mad selects. The MAD is selected
only for points a cheap lower bound of it does not clear (kth_floor).

Returns False, writing nothing, when any value of `part` is NaN, +-inf or of magnitude
above 1e300: the caller then takes the Python path, so such values keep exactly its
semantics. Built with -O3 (which vectorizes slide) and -ffp-contract=off: no fused
multiply-add may change a rounding. On x86-64 the loop is compiled twice, for the
baseline instruction set and for AVX2, and the AVX2 copy runs where the CPU has it
(simd=False forces the baseline copy: the tests compare both).
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An AVX2 copy of the loop where the compiler can make one and pick it at run time */
#if defined(__x86_64__) && defined(__GNUC__)
#define SPIKE_AVX2 1
#else
#define SPIKE_AVX2 0
#endif
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif
#if defined(_MSC_VER)
#define restrict __restrict
#endif
#define MAD_TO_SIGMA 1.4826
#define HUGE_VALUE 1e300

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The window after the next step, sorted: s (w entries, ascending, holding `gone`; s[-1]
   = -inf and s[w] = +inf readable) less one copy of `gone`, plus x, written to t[0, w).
   Without a branch on the data or a position count (a short window's positions are
   unpredictable): with r = s less gone, r[i] = s[i] where s[i] < gone (i is before
   gone's first copy), else s[i + 1]; then t[i] = r[i] where r[i] < x, x where r[i - 1]
   < x <= r[i] (r[-1] = -inf), else r[i - 1]. Every step a comparison and a select of
   doubles, the same for every entry: the loop vectorizes. Only moves values, so exact.
   Ties: any copy of `gone` removed leaves the same values. */
static ALWAYS_INLINE void slide(
    double *restrict t, const double *restrict s, Py_ssize_t w, double gone, double x) {
    for (Py_ssize_t i = 0; i < w; i++) {
        double prev = s[i - 1], cur = s[i], nxt = s[i + 1];
        double r = cur < gone ? cur : nxt;      /* r[i] (+inf at i = w - 1) */
        double rp = prev < gone ? prev : cur;   /* r[i - 1] (-inf at i = 0) */
        double other = rp < x ? x : rp;
        t[i] = r < x ? r : other;
    }
}

/* The m-th smallest (1-based, 1 <= m <= 2k) of the merge of the ascending runs
   A[i] = med - s[top - i] and B[i] = s[bot + i] - med, i < k: the split i (entries taken
   from A) where A[i - 1] <= B[m - i] and B[m - i - 1] <= A[i], found by halving. The
   value is the order statistic median_and_mad's min-over-max selects, each entry
   computed by the same subtraction. With `next`, also the (m+1)-th (m + 1 <= 2k): the
   smaller of the two runs' next entries after that split. */
static double kth_merged(const double *s, double med, Py_ssize_t top, Py_ssize_t bot,
                         Py_ssize_t k, Py_ssize_t m, double *next) {
    Py_ssize_t lo = m > k ? m - k : 0, hi = m < k ? m : k;
    /* smallest i in [lo, hi] where not (i < hi and A[i] < B[m - i - 1]) */
    while (lo < hi) {
        Py_ssize_t i = lo + (hi - lo) / 2;
        if (med - s[top - i] < s[bot + m - i - 1] - med)
            lo = i + 1;
        else
            hi = i;
    }
    Py_ssize_t i = lo, j = m - lo;
    double a = i > 0 ? med - s[top - (i - 1)] : -INFINITY;
    double b = j > 0 ? s[bot + j - 1] - med : -INFINITY;
    if (next != NULL) {
        double na = i < k ? med - s[top - i] : INFINITY;
        double nb = j < k ? s[bot + j] - med : INFINITY;
        *next = na <= nb ? na : nb;
    }
    return a >= b ? a : b;
}

/* A lower bound of kth_merged(..., m, ...), itself one of the merge's entries (so
   computed as median_and_mad computes it): of the m smallest, ceil(m / 2) come from one
   run, so the m-th is >= the smaller of the two runs' ceil(m / 2)-th entries. */
static double kth_floor(const double *s, double med, Py_ssize_t top, Py_ssize_t bot,
                        Py_ssize_t m) {
    Py_ssize_t h = (m + 1) / 2 - 1;
    double a = med - s[top - h], b = s[bot + h] - med;
    return a <= b ? a : b;
}

/* Every judged point's verdict (see the top of this file), s and t as `violations`
   prepares them. Inlined into two copies: one for the machine's baseline instruction set
   and one for AVX2 (chosen at run time), where slide's selects take four doubles at a
   time. The same operations either way (no fused multiply-add: -ffp-contract=off; the
   AVX2 copy does its arithmetic one double at a time as the other), so the same bits. */
static ALWAYS_INLINE void judge(
    const double *v, unsigned char *out, Py_ssize_t n, Py_ssize_t w, double *s, double *t,
    double factor, double min_scale, int direction) {
    Py_ssize_t k = w / 2;
    int odd = (int)(w % 2);
    double floor_scale = factor * min_scale;
    for (Py_ssize_t j = 0; j < n; j++) {
        double x = v[j + w];
        double med = odd ? s[k] : 0.5 * (s[k - 1] + s[k]);
        double dev = x - med;
        if (direction == 1)
            dev = -dev;
        else if (direction == 2)
            dev = fabs(dev);
        /* factor * scale >= factor * min_scale >= 0 (scale >= min_scale >= 0, factor >
           0, multiplication monotone): a deviation not above factor * min_scale cannot
           be above factor * scale, whatever the MAD. */
        /* The verdict's threshold only grows with the MAD (every step rounds
           monotonically): a point not above it for a lower bound of the MAD is no spike,
           and most points are cleared so, without selecting the MAD; nor is a point not
           above factor * min_scale. Both tests computed without a branch (their outcome
           is as random as the noise). */
        double low = kth_floor(s, med, k - 1, odd ? k + 1 : k, k);
        double scale = MAD_TO_SIGMA * low;
        scale = scale < min_scale ? min_scale : scale;
        unsigned char hit = (dev > floor_scale) & (dev > factor * scale);
        if (hit) {
            double mad;
            if (odd) {
                mad = kth_merged(s, med, k - 1, k + 1, k, k, NULL);
            } else {
                double second;
                double first = kth_merged(s, med, k - 1, k, k, k, &second);
                mad = 0.5 * (first + second);
            }
            scale = MAD_TO_SIGMA * mad;
            scale = scale < min_scale ? min_scale : scale;
            hit = dev > factor * scale;
        }
        out[j] = hit;
        if (j + 1 == n) break;
        slide(t, s, w, v[j], x);
        double *swap = s;
        s = t;
        t = swap;
    }
}

static void judge_base(const double *v, unsigned char *out, Py_ssize_t n, Py_ssize_t w,
                       double *s, double *t, double factor, double min_scale,
                       int direction) {
    judge(v, out, n, w, s, t, factor, min_scale, direction);
}

#if SPIKE_AVX2
__attribute__((target("avx2"))) static void judge_avx2(
    const double *v, unsigned char *out, Py_ssize_t n, Py_ssize_t w, double *s, double *t,
    double factor, double min_scale, int direction) {
    judge(v, out, n, w, s, t, factor, min_scale, direction);
}
#endif

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, const char *format,
                      Py_ssize_t itemsize, const char *what) {
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (f[0] == '=' || f[0] == '<' || f[0] == '@') f++;
    if (view->itemsize != itemsize || strcmp(f, format) != 0 || view->ndim != 1) {
        PyErr_Format(PyExc_TypeError, "%s: expected a 1-D C-contiguous '%s' buffer", what,
                     format);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *violations(PyObject *self, PyObject *args) {
    PyObject *part_obj, *out_obj;
    Py_ssize_t w;
    double factor, min_scale;
    int direction, simd = 1;
    if (!PyArg_ParseTuple(args, "OOnddi|p", &part_obj, &out_obj, &w, &factor, &min_scale,
                          &direction, &simd))
        return NULL;
    if (w < 3 || direction < 0 || direction > 2) {
        PyErr_SetString(PyExc_ValueError, "window >= 3 and direction 0, 1 or 2");
        return NULL;
    }
    Py_buffer pv, ov;
    if (get_buffer(part_obj, &pv, 0, "d", sizeof(double), "part") < 0) return NULL;
    if (get_buffer(out_obj, &ov, 1, "?", 1, "out") < 0) {
        PyBuffer_Release(&pv);
        return NULL;
    }
    const double *v = (const double *)pv.buf;
    unsigned char *out = (unsigned char *)ov.buf;
    Py_ssize_t size = pv.shape[0], n = size - w;
    if (n < 0 || ov.shape[0] != n) {
        PyBuffer_Release(&pv);
        PyBuffer_Release(&ov);
        PyErr_SetString(PyExc_ValueError, "out must hold part.size - window points");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        /* NaN fails the comparison: non-finite and huge values all hand back */
        if (!(fabs(v[i]) <= HUGE_VALUE)) {
            PyBuffer_Release(&pv);
            PyBuffer_Release(&ov);
            Py_RETURN_FALSE;
        }
    }
    /* two copies of the window, each with sentinels -inf before and +inf after (slide
       reads one entry beyond either end); each step writes the next window into the
       other copy */
    double *mem = (double *)PyMem_Malloc(2 * ((size_t)w + 2) * sizeof(double));
    if (mem == NULL) {
        PyBuffer_Release(&pv);
        PyBuffer_Release(&ov);
        return PyErr_NoMemory();
    }
    double *s = mem + 1, *t = mem + w + 3;
    s[-1] = t[-1] = -INFINITY;
    s[w] = t[w] = INFINITY;
    memcpy(s, v, (size_t)w * sizeof(double));
    qsort(s, (size_t)w, sizeof(double), cmp_double);
#if SPIKE_AVX2
    if (simd && __builtin_cpu_supports("avx2"))
        judge_avx2(v, out, n, w, s, t, factor, min_scale, direction);
    else
#endif
        judge_base(v, out, n, w, s, t, factor, min_scale, direction);
    PyMem_Free(mem);
    PyBuffer_Release(&pv);
    PyBuffer_Release(&ov);
    Py_RETURN_TRUE;
}

static PyObject *simd(PyObject *self, PyObject *unused) {
#if SPIKE_AVX2
    if (__builtin_cpu_supports("avx2")) return PyUnicode_FromString("avx2");
#endif
    return PyUnicode_FromString("baseline");
}

static PyMethodDef methods[] = {
    {"violations", violations, METH_VARARGS,
     "violations(part, out, window, factor, min_scale, direction, simd=True) -> bool: "
     "fill `out` with Spike's verdicts, exactly as its Python path; False (nothing "
     "written) when a value is non-finite or above 1e300 in magnitude. simd=False runs "
     "the baseline copy of the loop even where the AVX2 one would (the tests compare "
     "both)."},
    {"simd", simd, METH_NOARGS,
     "simd() -> str: which copy of the loop violations() runs here: 'avx2' or "
     "'baseline'."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_spike",
    .m_doc = "The spike check's exact path in C (gatekeeper/checks/spike.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__spike(void) { return PyModule_Create(&module); }
