/* The trend check's window fit on contiguous steps, in C (see gatekeeper/checks/trend.py,
rolling_fit).

fit(steps, values, window, slope, growth, all_growth) -> bool

steps: C-contiguous int64, values: C-contiguous float64, both n points; slope: float64,
n - window + 1 entries; growth: float64, n - window + 1 entries (all_growth) or 1 (the
last window's only). When every step is the one before it plus 1 (compared as numpy's
np.diff(steps) == 1 does, in wrapping int64), fills slope and growth with the floats
rolling_fit's contiguous path computes, operation by operation and in its order, and
returns True; otherwise returns False and writes nothing (the caller takes the general
formula). The caller has checked the rest of rolling_fit's conditions (the running sums
of the steps stay exact integers below 2^53, steps[-1] - steps[0] == n - 1).

rolling_fit's operations, per window i of w points (x = 0, 1, ... from the first step):
    cy, cxy: running sums from 0, numpy's cumsum (first entry copied, then left to
             right), of y and of x * y; cy[0] = cxy[0] = 0
    sy = cy[i + w] - cy[i], sxy = cxy[i + w] - cxy[i]
    sx = i * w + w * (w - 1) / 2
    slope = ((sxy * w) - (sx * sy)) / (w^2 (w^2 - 1) / 12)
    growth = (slope * (w - 1)) / |sy / w|, 0 where sy / w == 0
One pass and no array of running sums: the two running sums at i + w are carried, those
at i are read back from a ring of the last w + 1. Built with -ffp-contract=off: no fused
multiply-add may change a rounding.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, const char *format,
                      Py_ssize_t itemsize, const char *what) {
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (f[0] == '=' || f[0] == '<' || f[0] == '@') f++;
    int same = strcmp(f, format) == 0 || (format[0] == 'q' && strcmp(f, "l") == 0 &&
                                          sizeof(long) == 8);
    if (view->itemsize != itemsize || !same || view->ndim != 1) {
        PyErr_Format(PyExc_TypeError, "%s: expected a 1-D C-contiguous '%s' buffer", what,
                     format);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *fit(PyObject *self, PyObject *args) {
    PyObject *steps_obj, *values_obj, *slope_obj, *growth_obj;
    Py_ssize_t w;
    int all_growth;
    if (!PyArg_ParseTuple(args, "OOnOOp", &steps_obj, &values_obj, &w, &slope_obj,
                          &growth_obj, &all_growth))
        return NULL;
    Py_buffer sv, vv, slv, gv;
    if (get_buffer(steps_obj, &sv, 0, "q", 8, "steps") < 0) return NULL;
    if (get_buffer(values_obj, &vv, 0, "d", 8, "values") < 0) {
        PyBuffer_Release(&sv);
        return NULL;
    }
    if (get_buffer(slope_obj, &slv, 1, "d", 8, "slope") < 0) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&vv);
        return NULL;
    }
    if (get_buffer(growth_obj, &gv, 1, "d", 8, "growth") < 0) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&vv);
        PyBuffer_Release(&slv);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = vv.shape[0], m = n - w + 1;
    if (w < 1 || sv.shape[0] != n || m < 1 || slv.shape[0] != m ||
        gv.shape[0] != (all_growth ? m : 1)) {
        PyErr_SetString(PyExc_ValueError,
                        "steps and values of one length n >= window >= 1; slope of "
                        "n - window + 1; growth of that or 1");
        goto done;
    }
    const int64_t *steps = (const int64_t *)sv.buf;
    const double *y = (const double *)vv.buf;
    double *slope = (double *)slv.buf, *growth = (double *)gv.buf;
    for (Py_ssize_t i = 1; i < n; i++) {
        if ((uint64_t)steps[i] - (uint64_t)steps[i - 1] != 1) {
            result = Py_False;
            goto done;
        }
    }
    /* ring[r] holds the running sums cy, cxy at index r mod (w + 1) */
    double *ring = (double *)PyMem_Malloc(2 * ((size_t)w + 1) * sizeof(double));
    if (ring == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    double *ry = ring, *rxy = ring + w + 1;
    const double dw = (double)w, span = (double)(w - 1);
    const double half = (double)(w * (w - 1) / 2);
    const double denom = (double)(w * w * (w * w - 1) / 12);
    double cy = 0.0, cxy = 0.0;
    ry[0] = rxy[0] = 0.0;
    /* ring slots of index j + 1 and of window i = j + 1 - w (kept without a division) */
    Py_ssize_t at = 1 % (w + 1), from = 0;
    for (Py_ssize_t j = 0; j < n; j++) { /* cy, cxy at index j + 1 */
        double xy = (double)j * y[j];
        if (j == 0) { /* numpy's cumsum copies its first entry (a -0.0 stays -0.0) */
            cy = y[0];
            cxy = xy;
        } else {
            cy = cy + y[j];
            cxy = cxy + xy;
        }
        if (j + 1 >= w) { /* window i = j + 1 - w: sums at j + 1 less those at i */
            Py_ssize_t i = j + 1 - w;
            double sy = cy - ry[from];
            double sxy = cxy - rxy[from];
            double sx = (double)i * dw;
            sx = sx + half;
            double a = sxy * dw;
            double b = sx * sy;
            double s = a - b;
            s = s / denom;
            slope[i] = s;
            if (all_growth || i == m - 1) {
                double mean = sy / dw;
                double g = s * span;
                g = g / fabs(mean);
                if (mean == 0) g = 0.0;
                growth[all_growth ? i : 0] = g;
            }
            from = from == w ? 0 : from + 1;
        }
        ry[at] = cy;
        rxy[at] = cxy;
        at = at == w ? 0 : at + 1;
    }
    PyMem_Free(ring);
    result = Py_True;
done:
    PyBuffer_Release(&sv);
    PyBuffer_Release(&vv);
    PyBuffer_Release(&slv);
    PyBuffer_Release(&gv);
    Py_XINCREF(result);
    return result;
}

static PyMethodDef methods[] = {
    {"fit", fit, METH_VARARGS,
     "fit(steps, values, window, slope, growth, all_growth) -> bool: on contiguous steps "
     "fill slope and growth with rolling_fit's floats and return True; else False, "
     "nothing written."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_trend",
    .m_doc = "The trend check's window fit on contiguous steps in C (gatekeeper/checks/trend.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__trend(void) { return PyModule_Create(&module); }
