/* rowcopies.c: the env bridge's copies of the rows in C (w3async.env._rowcopies).
 *
 * w3async/env/rowcopies.py has the contract and the numpy path (NumpyRowCopies);
 * tests/env/test_env_rows.py proves both leave the same copies and hand out the same arrays.
 * Each row has two banks of its observation: bank[r] holds the last one handed out to
 * the caller, a post goes into the other. put() copies a gathered batch's rows in and
 * marks them posted, take() hands rows out to the caller's new arrays with the step's
 * rewards and ends and moves each row's state on, ready() counts the rows it could hand
 * out; each is one call where numpy took 5-20 (a step of 8 null games paid 40-60 us of
 * numpy's per-call cost).
 *
 * Only the supervisor's own memory is read here (the batch, already checked), never the
 * shared table. Entities: a bank row is zero past ent_hi[bank][r], what put() wrote of
 * it; put() zeroes only what a larger bucket left, take() copies up to ent_hi and
 * zeroes the rest of the caller's array.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "shape_arg.h"


typedef struct {
    PyObject_HEAD
    /* the banks, [2][n_rows][...] */
    Py_buffer glob, ent, ent_type, n_ent, mask, ent_hi;
    /* per row: the bank last handed out, the last post's scalars, its state (bool) and game
     * slot, the generation it was held at and when it was posted (put's stamp) */
    Py_buffer bank, reward, flags, episode, step, obs_seq, posted, handed, cut, in_episode, slot_of, gen, stamp;
    /* the gatherer's batch (capacity rows; entities at stride bucket) */
    Py_buffer b_glob, b_ent, b_ent_type, b_n_ent, b_mask, b_reward, b_flags, b_episode, b_step, b_obs_seq;
    int n_rows, capacity;
    size_t G, E, F, ENT, MASK; /* the row shape: globals, entities, features, E x F, heads x choices */
    int held; /* buffers acquired */
} Copies;

#define RC_N_BUFFERS 29 /* the Py_buffer fields, glob to b_obs_seq: rc_specs names each */

typedef struct {
    const char *name;
    Py_ssize_t per_row; /* bytes a row; -1..-4: the shape's globals, entities, types, masks (rc_per_row) */
    int banks;          /* 2: two banks of n_rows, 1: n_rows, 0: the batch's capacity */
} rc_buf_spec;

static Py_ssize_t rc_per_row(const Copies *c, Py_ssize_t per_row)
{
    switch (per_row) {
    case -1: return (Py_ssize_t)c->G * 4;
    case -2: return (Py_ssize_t)c->ENT * 4;
    case -3: return (Py_ssize_t)c->E * 2;
    case -4: return (Py_ssize_t)c->MASK;
    default: return per_row;
    }
}

static const rc_buf_spec rc_specs[] = {
    {"glob", -1, 2},             {"ent", -2, 2},             {"ent_type", -3, 2},
    {"n_ent", 8, 2},             {"mask", -4, 2},            {"ent_hi", 8, 2},
    {"bank", 8, 1},              {"reward", 4, 1},           {"flags", 4, 1},
    {"episode", 8, 1},           {"step", 4, 1},             {"obs_seq", 8, 1},
    {"posted", 1, 1},            {"handed", 1, 1},           {"cut", 1, 1},
    {"in_episode", 1, 1},        {"slot_of", 4, 1},          {"gen", 8, 1},
    {"stamp", 8, 1},
    {"b_glob", -1, 0},           {"b_ent", -2, 0},           {"b_ent_type", -3, 0},
    {"b_n_ent", 4, 0},           {"b_mask", -4, 0},          {"b_reward", 4, 0},
    {"b_flags", 4, 0},           {"b_episode", 8, 0},        {"b_step", 4, 0},
    {"b_obs_seq", 8, 0},
};
typedef char rc_check_specs[(sizeof(rc_specs) / sizeof(rc_specs[0]) == RC_N_BUFFERS) ? 1 : -1];
typedef char rc_check_fields[(offsetof(Copies, b_obs_seq) - offsetof(Copies, glob)) ==
                             (RC_N_BUFFERS - 1) * sizeof(Py_buffer) ? 1 : -1];

static void Copies_dealloc(Copies *c)
{
    if (c->held)
        for (int i = 0; i < RC_N_BUFFERS; i++)
            PyBuffer_Release(&(&c->glob)[i]);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

/* Copies(n_rows=, capacity=, shape=, glob=, ..., b_obs_seq=): keywords only, every one
 * of rc_specs, n_rows, the batch's capacity and the row shape (e_max, f_ent, g_glob,
 * n_heads, head_max). 0, or -1 with the exception set (naming the
 * keyword) and nothing held. */
static int Copies_init(Copies *c, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) != 0 || !kw || PyDict_Size(kw) != RC_N_BUFFERS + 3) {
        PyErr_Format(PyExc_TypeError, "Copies: takes keywords only: n_rows, capacity, shape and the %d buffers "
                     "(w3async/env/rowcopies.py's CRowCopies passes them)", RC_N_BUFFERS);
        return -1;
    }
    if (c->held) {
        PyErr_SetString(PyExc_RuntimeError, "Copies: already initialised");
        return -1;
    }
    PyObject *on = PyDict_GetItemString(kw, "n_rows"), *oc = PyDict_GetItemString(kw, "capacity");
    long n_rows = on ? PyLong_AsLong(on) : -1, capacity = oc ? PyLong_AsLong(oc) : -1;
    if (PyErr_Occurred())
        return -1;
    if (n_rows <= 0 || n_rows > INT32_MAX || capacity <= 0 || capacity > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "Copies: n_rows=%ld and capacity=%ld must be > 0", n_rows, capacity);
        return -1;
    }
    w3s_layout L;
    if (shape_arg(PyDict_GetItemString(kw, "shape"), "Copies", &L) < 0)
        return -1;
    c->G = L.g_glob, c->E = L.e_max, c->F = L.f_ent, c->ENT = (size_t)L.e_max * L.f_ent;
    c->MASK = (size_t)L.n_heads * L.head_max;
    Py_buffer *slots = &c->glob;
    int got = 0;
    for (; got < RC_N_BUFFERS; got++) {
        const rc_buf_spec *sp = &rc_specs[got];
        PyObject *obj = PyDict_GetItemString(kw, sp->name);
        if (!obj) {
            PyErr_Format(PyExc_TypeError, "Copies: missing keyword %s", sp->name);
            goto err;
        }
        if (PyObject_GetBuffer(obj, &slots[got], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Format(PyExc_TypeError, "Copies: %s must be a writable contiguous buffer", sp->name);
            goto err;
        }
        Py_ssize_t need = rc_per_row(c, sp->per_row) * (sp->banks ? sp->banks * (Py_ssize_t)n_rows : (Py_ssize_t)capacity);
        if (slots[got].len < need) {
            PyErr_Format(PyExc_ValueError, "Copies: %s holds %zd bytes, needs %zd", sp->name, slots[got].len, need);
            got++;
            goto err;
        }
    }
    c->n_rows = (int)n_rows;
    c->capacity = (int)capacity;
    c->held = 1;
    return 0;
err:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&slots[i]);
    return -1;
}

/* rows as int64 indexes, each checked in 0..n_rows-1: their count, or -1 with ValueError. */
static Py_ssize_t rc_rows(Copies *c, Py_buffer *rows, const char *fn)
{
    if (rows->len % 8) {
        PyErr_Format(PyExc_ValueError, "%s: rows must be int64", fn);
        return -1;
    }
    Py_ssize_t n = rows->len / 8;
    const int64_t *r = rows->buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (r[i] < 0 || r[i] >= c->n_rows) {
            PyErr_Format(PyExc_ValueError, "%s: row %lld is not in 0..%d", fn, (long long)r[i], c->n_rows - 1);
            return -1;
        }
    return n;
}

/* put(rows, bucket, gens, stamp): the batch's first len(rows) rows, posted for these
 * table rows, into each row's other bank, and their scalars; each row posted, its
 * generation gens[r] (int64 per table row: the run's, as the rows were held), its stamp. */
static PyObject *Copies_put(Copies *c, PyObject *args)
{
    Py_buffer rows, gens;
    int bucket;
    long long stamp;
    if (!PyArg_ParseTuple(args, "y*iy*L", &rows, &bucket, &gens, &stamp))
        return NULL;
    Py_ssize_t n = rc_rows(c, &rows, "put");
    if (n >= 0 && (bucket < 0 || (size_t)bucket > c->E || n > c->capacity)) {
        PyErr_Format(PyExc_ValueError, "put: bucket %d not in 0..%zu, or %zd rows", bucket, c->E, n);
        n = -1;
    }
    if (n >= 0 && gens.len < (Py_ssize_t)c->n_rows * 8) {
        PyErr_Format(PyExc_ValueError, "put: gens holds %zd bytes, needs one int64 a row (%d)", gens.len, c->n_rows);
        n = -1;
    }
    if (n < 0) {
        PyBuffer_Release(&rows);
        PyBuffer_Release(&gens);
        return NULL;
    }
    const int64_t *gen_of = gens.buf;
    int64_t *gen = c->gen.buf, *stamps = c->stamp.buf;
    uint8_t *posted = c->posted.buf;
    const int64_t *rw = rows.buf;
    const size_t N = (size_t)c->n_rows;
    int64_t *bank = c->bank.buf, *hi = c->ent_hi.buf, *n_ent = c->n_ent.buf;
    const size_t G = c->G, E = c->E, F = c->F, ENT = c->ENT, MASK = c->MASK;
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t r = (size_t)rw[i], at = (size_t)(bank[r] ^ 1) * N + r;
        memcpy((float *)c->glob.buf + at * G, (float *)c->b_glob.buf + i * G, G * 4);
        float *ent = (float *)c->ent.buf + at * ENT;
        int16_t *type = (int16_t *)c->ent_type.buf + at * E;
        memcpy(ent, (float *)c->b_ent.buf + (size_t)i * bucket * F, (size_t)bucket * F * 4);
        memcpy(type, (int16_t *)c->b_ent_type.buf + (size_t)i * bucket, (size_t)bucket * 2);
        if (hi[at] > bucket) {
            memset(ent + (size_t)bucket * F, 0, (size_t)(hi[at] - bucket) * F * 4);
            memset(type + bucket, 0, (size_t)(hi[at] - bucket) * 2);
        }
        hi[at] = bucket;
        n_ent[at] = ((uint32_t *)c->b_n_ent.buf)[i];
        memcpy((uint8_t *)c->mask.buf + at * MASK, (uint8_t *)c->b_mask.buf + i * MASK, MASK);
        ((float *)c->reward.buf)[r] = ((float *)c->b_reward.buf)[i];
        ((uint32_t *)c->flags.buf)[r] = ((uint32_t *)c->b_flags.buf)[i];
        ((uint64_t *)c->episode.buf)[r] = ((uint64_t *)c->b_episode.buf)[i];
        ((uint32_t *)c->step.buf)[r] = ((uint32_t *)c->b_step.buf)[i];
        ((uint64_t *)c->obs_seq.buf)[r] = ((uint64_t *)c->b_obs_seq.buf)[i];
        posted[r] = 1;
        gen[r] = gen_of[r];
        stamps[r] = stamp;
    }
    PyBuffer_Release(&rows);
    PyBuffer_Release(&gens);
    Py_RETURN_NONE;
}

/* ready(rows=None) -> how many of these rows (int64; None: every row) can be handed
 * out: posted or cut. A step's wait asks it each round. */
static PyObject *Copies_ready(Copies *c, PyObject *args)
{
    PyObject *arg = Py_None;
    if (!PyArg_ParseTuple(args, "|O", &arg))
        return NULL;
    const uint8_t *posted = c->posted.buf, *cut = c->cut.buf;
    long count = 0;
    if (arg == Py_None) {
        for (int r = 0; r < c->n_rows; r++)
            count += (posted[r] | cut[r]) != 0;
        return PyLong_FromLong(count);
    }
    Py_buffer rows;
    if (PyObject_GetBuffer(arg, &rows, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = rc_rows(c, &rows, "ready");
    const int64_t *rw = rows.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        count += (posted[rw[i]] | cut[rw[i]]) != 0;
    PyBuffer_Release(&rows);
    return n < 0 ? NULL : PyLong_FromLong(count);
}

/* take(rows, glob, ent, ent_type, n_ent, mask, reward, terminated, truncated, cut,
 * episode, step, slot): hand out these rows (each posted or cut) into the caller's new
 * arrays, whose first len(rows) rows it fills whole: a row's post, or for a cut row the
 * last observation handed out, reward 0 and truncated. A post becomes the last handed out
 * (handed, no longer posted, in an episode unless it ended it); a cut is reported once.
 * The same as NumpyRowCopies.take in w3async/env/rowcopies.py. */
static PyObject *Copies_take(Copies *c, PyObject *args)
{
    enum { N_OUT = 12 };
    Py_buffer rows, o[N_OUT];
    if (!PyArg_ParseTuple(args, "y*w*w*w*w*w*w*w*w*w*w*w*w*", &rows, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &o[9], &o[10], &o[11]))
        return NULL;
    const size_t G = c->G, E = c->E, F = c->F, ENT = c->ENT, MASK = c->MASK;
    const Py_ssize_t per_row[N_OUT] = {(Py_ssize_t)G * 4, (Py_ssize_t)ENT * 4, (Py_ssize_t)E * 2, 8,
                                       (Py_ssize_t)MASK, 4, 1, 1, 1, 8, 4, 4};
    static const char *names[N_OUT] = {"glob", "ent", "ent_type", "n_ent", "mask", "reward",
                                       "terminated", "truncated", "cut", "episode", "step", "slot"};
    Py_ssize_t n = rc_rows(c, &rows, "take");
    for (int k = 0; n >= 0 && k < N_OUT; k++)
        if (o[k].len < n * per_row[k]) {
            PyErr_Format(PyExc_ValueError, "take: %s holds %zd bytes, needs %zd", names[k], o[k].len, n * per_row[k]);
            n = -1;
        }
    const int64_t *rw = rows.buf;
    const size_t N = (size_t)c->n_rows;
    int64_t *bank = c->bank.buf, *hi = c->ent_hi.buf;
    uint8_t *posted = c->posted.buf, *handed = c->handed.buf, *cut = c->cut.buf, *in_ep = c->in_episode.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t r = (size_t)rw[i];
        int was_cut = cut[r] != 0;
        int64_t src = was_cut ? bank[r] : (bank[r] ^ 1);
        size_t at = (size_t)src * N + r, h = (size_t)hi[at];
        memcpy((float *)o[0].buf + i * G, (float *)c->glob.buf + at * G, G * 4);
        float *ent = (float *)o[1].buf + (size_t)i * ENT;
        memcpy(ent, (float *)c->ent.buf + at * ENT, h * F * 4);
        memset(ent + h * F, 0, (E - h) * F * 4);
        int16_t *type = (int16_t *)o[2].buf + (size_t)i * E;
        memcpy(type, (int16_t *)c->ent_type.buf + at * E, h * 2);
        memset(type + h, 0, (E - h) * 2);
        ((int64_t *)o[3].buf)[i] = ((int64_t *)c->n_ent.buf)[at];
        memcpy((uint8_t *)o[4].buf + i * MASK, (uint8_t *)c->mask.buf + at * MASK, MASK);
        uint32_t f = ((uint32_t *)c->flags.buf)[r];
        int term = !was_cut && (f & W3S_FLAG_DONE), trunc = was_cut || (f & W3S_FLAG_TRUNCATED);
        ((float *)o[5].buf)[i] = (was_cut || (f & W3S_FLAG_FIRST)) ? 0.0f : ((float *)c->reward.buf)[r];
        ((uint8_t *)o[6].buf)[i] = (uint8_t)term;
        ((uint8_t *)o[7].buf)[i] = (uint8_t)trunc;
        ((uint8_t *)o[8].buf)[i] = (uint8_t)was_cut;
        ((uint64_t *)o[9].buf)[i] = ((uint64_t *)c->episode.buf)[r];
        ((uint32_t *)o[10].buf)[i] = ((uint32_t *)c->step.buf)[r];
        ((int32_t *)o[11].buf)[i] = ((int32_t *)c->slot_of.buf)[r];
        if (was_cut) {
            cut[r] = 0;
        } else {
            in_ep[r] = !(f & (W3S_FLAG_DONE | W3S_FLAG_TRUNCATED));
            handed[r] = 1;
            posted[r] = 0;
            bank[r] = src;
        }
    }
    PyBuffer_Release(&rows);
    for (int k = 0; k < N_OUT; k++)
        PyBuffer_Release(&o[k]);
    if (n < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef Copies_methods[] = {
    {"put", (PyCFunction)Copies_put, METH_VARARGS, "put(rows, bucket, gens, stamp)"},
    {"ready", (PyCFunction)Copies_ready, METH_VARARGS, "ready(rows=None) -> rows posted or cut"},
    {"take", (PyCFunction)Copies_take, METH_VARARGS,
     "take(rows, glob, ent, ent_type, n_ent, mask, reward, terminated, truncated, cut, episode, step, slot)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CopiesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "w3async.env._rowcopies.Copies",
    .tp_basicsize = sizeof(Copies),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The env bridge's two banks of each row's observation, and the batch they are filled from.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Copies_init,
    .tp_dealloc = (destructor)Copies_dealloc,
    .tp_methods = Copies_methods,
};

static PyObject *rc_layout_hash(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned int e, f, g, h, m;
    w3s_layout L;
    if (!PyArg_ParseTuple(args, "IIIII", &e, &f, &g, &h, &m))
        return NULL;
    if (w3s_layout_make(&L, e, f, g, h, m) < 0) {
        PyErr_Format(PyExc_ValueError, "shape (%u, %u, %u, %u, %u) is out of range", e, f, g, h, m);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(w3s_layout_hash(&L));
}

static PyMethodDef module_methods[] = {
    {"layout_hash", rc_layout_hash, METH_VARARGS, "w3s_layout_hash() of a shape, as this extension was built"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef rc_module = {
    PyModuleDef_HEAD_INIT, "w3async.env._rowcopies", "The env bridge's copies of the rows.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__rowcopies(void)
{
    if (PyType_Ready(&CopiesType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&rc_module);
    if (!m)
        return NULL;
    Py_INCREF(&CopiesType);
    if (PyModule_AddObject(m, "Copies", (PyObject *)&CopiesType) < 0) {
        Py_DECREF(&CopiesType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
