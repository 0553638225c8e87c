/* shape_arg.h: a row shape from Python, for both extensions (csrc/rows.c, csrc/rowcopies.c).
 *
 * The shape is the tuple (e_max, f_ent, g_glob, n_heads, head_max) that
 * w3async.sync.layout.Layout.shape gives; it is laid out by the header's own
 * w3s_layout_make(), so an extension's offsets are the shim's. */
#ifndef W3ASYNC_SHAPE_ARG_H
#define W3ASYNC_SHAPE_ARG_H

#include <Python.h>

#include "w3s_table.h"

/* 0 and *L laid out, or -1 with a TypeError (not five whole numbers) or ValueError
 * (outside w3s_layout_make()'s ranges) that starts with `who`. */
static int shape_arg(PyObject *shape, const char *who, w3s_layout *L)
{
    unsigned int e, f, g, h, m;
    if (!shape || !PyTuple_Check(shape) || !PyArg_ParseTuple(shape, "IIIII", &e, &f, &g, &h, &m)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: shape must be (e_max, f_ent, g_glob, n_heads, head_max)", who);
        return -1;
    }
    if (w3s_layout_make(L, e, f, g, h, m) < 0) {
        PyErr_Format(PyExc_ValueError, "%s: shape (%u, %u, %u, %u, %u) is out of range", who, e, f, g, h, m);
        return -1;
    }
    return 0;
}

#endif
