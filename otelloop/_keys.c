/* otelloop._keys: the search over a session's typed key arrays (see otelloop/keys.py).
 *
 * The progress tracker keeps each session's result keys, recent calls, polls and batch forms as
 * array('Q') of 64-bit hashes (8 bytes a key, no int object each). Finding a key is done for every
 * judged tool step, several times; in Python it costs a copy of the array and a byte search, here a
 * loop over the array's own memory. The pure-Python search in otelloop/keys.py gives the same answers
 * (tests/test_keys.py compares the two).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* find_entry(values, value, stride=1) -> index of the first entry (stride values each) whose first
 * value is value, or -1. values: any buffer of unsigned 64-bit items (format 'Q' or 'L' of 8 bytes). */
static PyObject *find_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "find_entry(values, value, stride=1) takes 2 or 3 arguments");
        return NULL;
    }
    unsigned long long value = PyLong_AsUnsignedLongLong(args[1]);
    if (value == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t stride = nargs == 3 ? PyLong_AsSsize_t(args[2]) : 1;
    if (stride == -1 && PyErr_Occurred())
        return NULL;
    if (stride < 1) {
        PyErr_SetString(PyExc_ValueError, "stride must be at least 1");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.itemsize != 8 || view.format == NULL || (strcmp(view.format, "Q") && strcmp(view.format, "L"))) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "values must be an array of unsigned 64-bit integers");
        return NULL;
    }
    const uint64_t *items = (const uint64_t *)view.buf;
    Py_ssize_t n = view.len / 8, found = -1;
    for (Py_ssize_t i = 0; i < n; i += stride) {
        if (items[i] == (uint64_t)value) {
            found = i;
            break;
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(found);
}

static PyMethodDef methods[] = {
    {"find_entry", (PyCFunction)(void (*)(void))find_entry, METH_FASTCALL,
     "find_entry(values, value, stride=1) -> index of the entry whose first value is value, or -1."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otelloop._keys",
    "The search over a session's typed key arrays (see otelloop.keys).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__keys(void) { return PyModule_Create(&module); }
