/* rows.c: the supervisor's hot path over the shared table, in C (w3async._rows).
 *
 * One Gatherer per table holds every buffer it touches (the rows, the batch it fills,
 * the row->game map, the supervisor's own record of each row's act_seq and the games'
 * act doorbells), so a round is two calls: gather() scans every row, copies each
 * waiting one into the batch, checks the copy and keeps the valid ones, entities padded
 * to a bucket (padding zeroed every time), holding them if asked; answer() releases the
 * held rows it answers if asked, writes the actions, publishes act_seq and rings each
 * answered game's doorbell once.
 *
 * The game is untrusted and runs beside us: a value it wrote may change between two
 * reads. Every field is read from the table once, into memory the supervisor owns
 * (locals, the batch), and only that copy is checked and used; whether a row waits is
 * decided by our own act_seq (`acked`), never by the table's.
 * w3async/sync/gather.py has the numpy path with the same contract (NumpyGatherer);
 * tests/sync/test_gather.py proves both give identical batches, bad-row reports and answers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "shape_arg.h"

/* The first cache line of a row: what a waiting row's scalars are read from, once. */
typedef struct {
    uint64_t obs_seq, act_seq;
    uint32_t row_magic, lane, side, flags;
    uint64_t episode;
    uint32_t step, n_ent;
    float reward;
    uint32_t discarded;
    uint64_t state_hash;
} g_head;
typedef char g_check_head[(sizeof(g_head) == offsetof(w3s_row, action)) ? 1 : -1];

typedef struct {
    PyObject_HEAD
    Py_buffer table;  /* the rows (no header) */
    Py_buffer row_game; /* int32[n_rows]: game slot of each row, -1 when none runs */
    Py_buffer acked;    /* uint64[n_rows]: the act_seq we last published per row */
    Py_buffer act_fd;   /* int32[n_games]: the act doorbell's fd */
    Py_buffer act_len;  /* int32[n_games]: bytes to write to ring it (8 eventfd, 1 FIFO) */
    /* the batch: capacity n_rows */
    Py_buffer b_rows, b_obs_seq, b_lane, b_side, b_episode, b_step, b_flags, b_reward, b_n_ent,
        b_state_hash, b_discarded, b_glob, b_ent, b_ent_type, b_mask;
    Py_buffer buckets; /* int32[], ascending, the last == the layout's e_max */
    w3s_layout L; /* the run's row shape and offsets */
    int n_types;
    int n_rows, n_games;
    int held; /* buffers acquired */
    int32_t *ring_seen; /* per game: the answer() call that last rang it */
    uint8_t *ring_seen_row; /* per answered row of the current call: written (1) or stale (0) */
    g_head *heads;          /* gather's first pass: each waiting row's scalars, read once */
    int32_t *cand;          /* the rows whose scalars passed */
    int32_t ring_epoch;
} Gatherer;

#define G_N_BUFFERS 21 /* the Py_buffer fields, table to buckets: g_specs names each */

static Py_buffer *g_buffers(Gatherer *g, int *count)
{
    *count = G_N_BUFFERS;
    return &g->table;
}

static void Gatherer_dealloc(Gatherer *g)
{
    if (g->held) {
        int n;
        Py_buffer *b = g_buffers(g, &n);
        for (int i = 0; i < n; i++)
            if (b[i].obj)
                PyBuffer_Release(&b[i]);
    }
    PyMem_Free(g->ring_seen);
    PyMem_Free(g->ring_seen_row);
    PyMem_Free(g->heads);
    PyMem_Free(g->cand);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

/* Gets a writable C-contiguous buffer of at least min_bytes; NULL and an exception
 * naming the argument otherwise. */
static int g_get(PyObject *obj, Py_buffer *view, const char *name, Py_ssize_t min_bytes)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Format(PyExc_TypeError, "Gatherer: %s must be a writable contiguous buffer", name);
        return -1;
    }
    if (view->len < min_bytes) {
        PyErr_Format(PyExc_ValueError, "Gatherer: %s holds %zd bytes, needs %zd", name, view->len, min_bytes);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The Gatherer's buffers, in the order of its Py_buffer fields (g_buffers), each with
 * the keyword that passes it (CGatherer in w3async/sync/gather.py passes every one by
 * name) and the bytes it must hold: per_row x n_rows + fixed. A per_row of -1 is the
 * row's size, of -2..-5 the layout's globals, entities, types and masks (g_per_row). */
typedef struct {
    const char *name;
    Py_ssize_t per_row, fixed;
} g_buf_spec;

static Py_ssize_t g_per_row(const w3s_layout *L, Py_ssize_t per_row)
{
    switch (per_row) {
    case -1: return L->row_size;
    case -2: return (Py_ssize_t)L->g_glob * 4;
    case -3: return (Py_ssize_t)L->e_max * L->f_ent * 4;
    case -4: return (Py_ssize_t)L->e_max * 2;
    case -5: return (Py_ssize_t)L->n_heads * L->head_max;
    default: return per_row;
    }
}

static const g_buf_spec g_specs[] = {
    {"table", -1, 0},
    {"row_game", 4, 0},
    {"acked", 8, 0},
    {"act_fd", 0, 0},
    {"act_len", 0, 0},
    {"rows", 4, 0},
    {"obs_seq", 8, 0},
    {"lane", 4, 0},
    {"side", 4, 0},
    {"episode", 8, 0},
    {"step", 4, 0},
    {"flags", 4, 0},
    {"reward", 4, 0},
    {"n_ent", 4, 0},
    {"state_hash", 8, 0},
    {"discarded", 4, 0},
    {"glob", -2, 0},
    {"ent", -3, 0},
    {"ent_type", -4, 0},
    {"mask", -5, 0},
    {"buckets", 0, 4},
};
typedef char g_check_specs[(sizeof(g_specs) / sizeof(g_specs[0]) == G_N_BUFFERS) ? 1 : -1];
typedef char g_check_buffers[(offsetof(Gatherer, buckets) - offsetof(Gatherer, table)) ==
                             (G_N_BUFFERS - 1) * sizeof(Py_buffer) ? 1 : -1];

/* Gatherer(n_rows=, n_types=, shape=, table=, row_game=, ..., buckets=): keywords only,
 * every one of g_specs, the two sizes and the row shape (e_max, f_ent, g_glob, n_heads,
 * head_max), nothing else. Returns 0, or -1 with the exception
 * set (naming the keyword) and nothing held. */
static int Gatherer_init(Gatherer *g, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) != 0 || !kw || PyDict_Size(kw) != G_N_BUFFERS + 3) {
        PyErr_Format(PyExc_TypeError, "Gatherer: takes keywords only: n_rows, n_types, shape and the %d buffers "
                     "(w3async/sync/gather.py's CGatherer passes them)", G_N_BUFFERS);
        return -1;
    }
    if (g->held) {
        PyErr_SetString(PyExc_RuntimeError, "Gatherer: already initialised");
        return -1;
    }
    PyObject *on = PyDict_GetItemString(kw, "n_rows"), *ot = PyDict_GetItemString(kw, "n_types");
    long n_rows = on ? PyLong_AsLong(on) : -1, n_types = ot ? PyLong_AsLong(ot) : -1;
    if (PyErr_Occurred())
        return -1;
    if (n_rows <= 0 || n_rows > INT32_MAX || n_types <= 0 || n_types > 32767) {
        PyErr_Format(PyExc_ValueError, "Gatherer: n_rows=%ld must be > 0, n_types=%ld in 1..32767", n_rows, n_types);
        return -1;
    }
    if (shape_arg(PyDict_GetItemString(kw, "shape"), "Gatherer", &g->L) < 0)
        return -1;
    Py_buffer *slots = &g->table;
    int got = 0;
    for (; got < G_N_BUFFERS; got++) {
        const g_buf_spec *sp = &g_specs[got];
        PyObject *obj = PyDict_GetItemString(kw, sp->name);
        if (!obj) {
            PyErr_Format(PyExc_TypeError, "Gatherer: missing keyword %s", sp->name);
            goto err;
        }
        if (g_get(obj, &slots[got], sp->name, g_per_row(&g->L, sp->per_row) * (Py_ssize_t)n_rows + sp->fixed) < 0)
            goto err;
    }
    g->n_games = (int)(g->act_fd.len / 4);
    if (g->act_len.len / 4 != g->n_games) {
        PyErr_SetString(PyExc_ValueError, "Gatherer: act_fd and act_len differ in length");
        goto err;
    }
    const int32_t *bk = g->buckets.buf;
    Py_ssize_t nb = g->buckets.len / 4;
    if (nb < 1 || bk[nb - 1] != (int32_t)g->L.e_max) {
        PyErr_Format(PyExc_ValueError, "Gatherer: the last bucket must be %u", g->L.e_max);
        goto err;
    }
    g->ring_seen = PyMem_Calloc(g->n_games ? g->n_games : 1, sizeof(int32_t));
    g->ring_seen_row = PyMem_Calloc((size_t)n_rows, 1);
    g->heads = PyMem_Calloc((size_t)n_rows, sizeof(g_head));
    g->cand = PyMem_Calloc((size_t)n_rows, sizeof(int32_t));
    if (!g->ring_seen || !g->ring_seen_row || !g->heads || !g->cand) {
        PyErr_NoMemory();
        goto err;
    }
    g->n_rows = n_rows;
    g->n_types = n_types;
    g->held = 1;
    return 0;
err:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&slots[i]);
    return -1;
}

/* A bad row as (row, field, index, value); index -1 when the field is a scalar. */
static int g_bad(PyObject *list, int row, const char *field, long index, PyObject *value)
{
    if (!value)
        return -1;
    PyObject *t = Py_BuildValue("(isiN)", row, field, (int)index, value);
    if (!t)
        return -1;
    int rc = PyList_Append(list, t);
    Py_DECREF(t);
    return rc;
}

/* First pass over a waiting row: its scalars read once into hd, then checked. 0 valid,
 * 1 bad (appended to bad), -1 on a Python error. The order of all the checks (here, then
 * g_body) is the contract shared with the numpy path. */
static int g_head_take(const w3s_layout *L, const w3s_row *r, int row, uint64_t obs, uint64_t act, g_head *hd,
                       PyObject *bad)
{
    if (obs != act + 1)
        return g_bad(bad, row, "obs_seq", -1, PyLong_FromUnsignedLongLong(obs)) < 0 ? -1 : 1;
    memcpy(hd, (const void *)r, sizeof(*hd));
    if (hd->row_magic != W3S_ROW_MAGIC)
        return g_bad(bad, row, "row_magic", -1, PyLong_FromUnsignedLong(hd->row_magic)) < 0 ? -1 : 1;
    if (hd->n_ent > L->e_max)
        return g_bad(bad, row, "n_ent", -1, PyLong_FromUnsignedLong(hd->n_ent)) < 0 ? -1 : 1;
    if (hd->flags & ~(uint32_t)(W3S_FLAG_FIRST | W3S_FLAG_DONE | W3S_FLAG_TRUNCATED | W3S_FLAG_TIME_LIMIT))
        return g_bad(bad, row, "flags", -1, PyLong_FromUnsignedLong(hd->flags)) < 0 ? -1 : 1;
    if (!isfinite(hd->reward))
        return g_bad(bad, row, "reward", -1, PyFloat_FromDouble(hd->reward)) < 0 ? -1 : 1;
    return 0;
}

/* Second pass: row r's observation copied into batch slot k (entities at stride
 * `bucket`, n_ent from the first pass, never read again), then the copy checked. */
static int g_body(Gatherer *g, const w3s_row *r, int row, uint32_t n_ent, int k, int bucket, PyObject *bad)
{
    const w3s_layout *L = &g->L;
    const uint32_t G = L->g_glob, F = L->f_ent, H = L->n_heads, M = L->head_max;
    w3s_row *rw = (w3s_row *)r; /* the accessors' type: only read here */
    float *glob = (float *)g->b_glob.buf + (size_t)k * G;
    memcpy(glob, (const void *)w3s_glob(L, rw), (size_t)G * sizeof(float));
    for (uint32_t i = 0; i < G; i++)
        if (!isfinite(glob[i]))
            return g_bad(bad, row, "glob", (long)i, PyFloat_FromDouble(glob[i])) < 0 ? -1 : 1;
    float *ent = (float *)g->b_ent.buf + (size_t)k * bucket * F;
    memcpy(ent, (const void *)w3s_ent(L, rw, 0), (size_t)n_ent * F * sizeof(float));
    for (uint32_t i = 0; i < n_ent * F; i++)
        if (!isfinite(ent[i]))
            return g_bad(bad, row, "ent", (long)i, PyFloat_FromDouble(ent[i])) < 0 ? -1 : 1;
    memset(ent + (size_t)n_ent * F, 0, (size_t)(bucket - n_ent) * F * sizeof(float));
    int16_t *type = (int16_t *)g->b_ent_type.buf + (size_t)k * bucket;
    memcpy(type, (const void *)w3s_ent_type(L, rw), (size_t)n_ent * sizeof(int16_t));
    for (uint32_t e = 0; e < n_ent; e++)
        if (type[e] < 0 || type[e] >= g->n_types)
            return g_bad(bad, row, "ent_type", (long)e, PyLong_FromLong(type[e])) < 0 ? -1 : 1;
    memset(type + n_ent, 0, (size_t)(bucket - n_ent) * sizeof(int16_t));
    uint8_t *mask = (uint8_t *)g->b_mask.buf + (size_t)k * H * M;
    memcpy(mask, (const void *)w3s_mask(L, rw, 0), (size_t)H * M);
    for (uint32_t h = 0; h < H; h++) {
        int any = 0;
        for (uint32_t c = 0; c < M; c++) {
            uint8_t m = mask[h * M + c];
            if (m > 1)
                return g_bad(bad, row, "mask", (long)(h * M + c), PyLong_FromLong(m)) < 0 ? -1 : 1;
            any |= m;
        }
        if (!any)
            return g_bad(bad, row, "mask", (long)(h * M), PyLong_FromLong(0)) < 0 ? -1 : 1;
    }
    return 0;
}

/* gather(hold=False) -> (n, bucket, bad): n valid waiting rows copied into the batch
 * buffers, their entities padded to `bucket` (entity blocks are n x bucket, contiguous),
 * and the bad rows as a list of (row, field, index, value). The bucket fits the largest
 * n_ent of the rows whose scalars passed (a row found bad in the second pass may have
 * been that largest: the bucket stays, padding is zero either way). hold: each valid row
 * gathered is held too (row_game -2 - game, as hold() in gather.py), in the same pass. */
static PyObject *Gatherer_gather(Gatherer *g, PyObject *args)
{
    int hold = 0;
    if (!PyArg_ParseTuple(args, "|p", &hold))
        return NULL;
    const char *table = g->table.buf;
    const size_t row_size = g->L.row_size;
#define G_ROW(i) ((const w3s_row *)(table + (size_t)(i) * row_size))
    int32_t *row_game = g->row_game.buf;
    const uint64_t *acked = g->acked.buf;
    int32_t *out_rows = g->b_rows.buf;
    uint64_t *out_seq = g->b_obs_seq.buf;
    uint32_t *lane = g->b_lane.buf, *side = g->b_side.buf, *step = g->b_step.buf, *flags = g->b_flags.buf,
             *n_ent = g->b_n_ent.buf, *disc = g->b_discarded.buf;
    uint64_t *episode = g->b_episode.buf, *hash = g->b_state_hash.buf;
    float *reward = g->b_reward.buf;
    PyObject *bad = PyList_New(0);
    if (!bad)
        return NULL;
    int nc = 0;
    uint32_t max_ent = 0;
    for (int i = 0; i < g->n_rows; i++) {
        if (row_game[i] < 0)
            continue;
        /* Acquire: the observation fields are read after the sequence number. */
        uint64_t obs = __atomic_load_n(&G_ROW(i)->obs_seq, __ATOMIC_ACQUIRE);
        uint64_t act = acked[i];
        if (obs == act)
            continue;
        int rc = g_head_take(&g->L, G_ROW(i), i, obs, act, &g->heads[nc], bad);
        if (rc < 0)
            goto err;
        if (rc)
            continue;
        g->heads[nc].obs_seq = obs;
        g->cand[nc++] = i;
        if (g->heads[nc - 1].n_ent > max_ent)
            max_ent = g->heads[nc - 1].n_ent;
    }
    const int32_t *bk = g->buckets.buf;
    int bucket = bk[0];
    for (Py_ssize_t b = 0; bucket < (int)max_ent; b++)
        bucket = bk[b + 1];
    int n = 0;
    for (int c = 0; c < nc; c++) {
        const g_head *hd = &g->heads[c];
        int rc = g_body(g, G_ROW(g->cand[c]), g->cand[c], hd->n_ent, n, bucket, bad);
        if (rc < 0)
            goto err;
        if (rc)
            continue; /* slot n is reused by the next row */
        out_rows[n] = g->cand[c];
        out_seq[n] = hd->obs_seq;
        lane[n] = hd->lane;
        side[n] = hd->side;
        episode[n] = hd->episode;
        step[n] = hd->step;
        flags[n] = hd->flags;
        reward[n] = hd->reward;
        n_ent[n] = hd->n_ent;
        hash[n] = hd->state_hash;
        disc[n] = hd->discarded;
        if (hold)
            row_game[g->cand[c]] = -2 - row_game[g->cand[c]];
        n++;
    }
    if (PyList_GET_SIZE(bad) > 1 && PyList_Sort(bad) < 0) /* in row order, as one pass would give */
        goto err;
    return Py_BuildValue("(iiN)", n, bucket, bad);
err:
    Py_DECREF(bad);
    return NULL;
#undef G_ROW
}

/* answer(rows, obs_seq, actions, versions, release=False) -> rung: for k < len(rows), writes
 * actions[k] (int32[n][n_heads], C-contiguous) and versions[k] (uint32) into table row
 * rows[k] (int32), then act_seq = obs_seq[k] (uint64, the sequence gathered) with a
 * release store, then rings each answered game's act doorbell once. A row that no
 * longer waits at obs_seq[k] (its game restarted meanwhile) or belongs to no game (or
 * is held) is skipped: a late answer never lands on a new game's rows. The round keeps
 * its own rows and obs_seq, so the next round may gather while this one computes.
 * Returns the number of games rung. A ring that fails with EAGAIN (a FIFO already
 * full: the game has a wake-up pending anyway) is not an error. release: each held row
 * of `rows` is released first (as release() in gather.py), so a round's held rows are
 * answered in this one call. */
static PyObject *Gatherer_answer(Gatherer *g, PyObject *args)
{
    Py_buffer rowsb, seqb, actions, versions;
    int release = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*y*|p", &rowsb, &seqb, &actions, &versions, &release))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = rowsb.len / 4;
    if (n > g->n_rows) {
        PyErr_Format(PyExc_ValueError, "answer: %zd rows, the table has %d", n, g->n_rows);
        goto done;
    }
    const uint32_t H = g->L.n_heads;
    if (seqb.len < n * 8 || actions.len < n * (Py_ssize_t)H * 4 || versions.len < n * 4) {
        PyErr_Format(PyExc_ValueError, "answer: %zd rows but obs_seq %zd bytes, actions %zd, versions %zd", n,
                     seqb.len, actions.len, versions.len);
        goto done;
    }
    char *table = g->table.buf;
    const size_t row_size = g->L.row_size;
    uint64_t *acked = g->acked.buf;
    const int32_t *idx = rowsb.buf;
    int32_t *row_game = g->row_game.buf;
    const int32_t *fds = g->act_fd.buf, *lens = g->act_len.buf;
    const uint64_t *seq = seqb.buf;
    const int32_t *act = actions.buf;
    const uint32_t *ver = versions.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (idx[k] < 0 || idx[k] >= g->n_rows) {
            PyErr_Format(PyExc_IndexError, "answer: row %d is not in a table of %d rows", idx[k], g->n_rows);
            goto done;
        }
    }
    if (release)
        for (Py_ssize_t k = 0; k < n; k++)
            if (row_game[idx[k]] <= -2) /* held: its game's again (a detached row, -1, stays) */
                row_game[idx[k]] = -2 - row_game[idx[k]];
    int32_t epoch = ++g->ring_epoch;
    for (Py_ssize_t k = 0; k < n; k++) {
        w3s_row *r = (w3s_row *)(table + (size_t)idx[k] * row_size);
        /* A stale answer (the game restarted while its round computed, or the row went
         * to no game) is dropped: its row no longer holds the sequence it answers. */
        if (row_game[idx[k]] < 0 || acked[idx[k]] + 1 != seq[k] ||
            __atomic_load_n(&r->obs_seq, __ATOMIC_ACQUIRE) != seq[k]) {
            g->ring_seen_row[k] = 0;
            continue;
        }
        g->ring_seen_row[k] = 1;
        acked[idx[k]] = seq[k];
        memcpy(r->action, act + (size_t)k * H, H * sizeof(int32_t));
        r->policy_version = ver[k];
        __atomic_store_n(&r->act_seq, seq[k], __ATOMIC_RELEASE);
    }
    int rung = 0;
    static const uint64_t one = 1;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (!g->ring_seen_row[k])
            continue;
        int gi = row_game[idx[k]];
        if (gi < 0 || gi >= g->n_games || g->ring_seen[gi] == epoch || fds[gi] < 0)
            continue;
        g->ring_seen[gi] = epoch;
        ssize_t w;
        do
            w = write(fds[gi], &one, (size_t)lens[gi]);
        while (w < 0 && errno == EINTR);
        if (w < 0 && errno != EAGAIN) {
            PyErr_Format(PyExc_OSError, "answer: write(act doorbell of game %d, fd %d) failed: %s", gi, fds[gi],
                         strerror(errno));
            goto done;
        }
        rung++;
    }
    result = PyLong_FromLong(rung);
done:
    PyBuffer_Release(&rowsb);
    PyBuffer_Release(&seqb);
    PyBuffer_Release(&actions);
    PyBuffer_Release(&versions);
    return result;
}

static PyMethodDef Gatherer_methods[] = {
    {"gather", (PyCFunction)Gatherer_gather, METH_VARARGS, "gather(hold=False) -> (n, bucket, bad)"},
    {"answer", (PyCFunction)Gatherer_answer, METH_VARARGS,
     "answer(rows, obs_seq, actions, versions, release=False) -> games rung"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GathererType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "w3async._rows.Gatherer",
    .tp_basicsize = sizeof(Gatherer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The supervisor's row checks, gathers and answers over a shared table.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Gatherer_init,
    .tp_dealloc = (destructor)Gatherer_dealloc,
    .tp_methods = Gatherer_methods,
};

/* layout(e_max, f_ent, g_glob, n_heads, head_max) -> (glob, ent, ent_type, mask, obs_end,
 * row_size): w3s_layout_make's offsets, as this extension was built; ValueError out of range. */
static PyObject *rows_layout(PyObject *self, PyObject *args)
{
    (void)self;
    w3s_layout L;
    if (shape_arg(args, "layout", &L) < 0)
        return NULL;
    return Py_BuildValue("(IIIIII)", L.glob, L.ent, L.ent_type, L.mask, L.obs_end, L.row_size);
}

static PyObject *rows_layout_hash(PyObject *self, PyObject *args)
{
    (void)self;
    w3s_layout L;
    if (shape_arg(args, "layout_hash", &L) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(w3s_layout_hash(&L));
}

static PyMethodDef module_methods[] = {
    {"layout", rows_layout, METH_VARARGS, "w3s_layout_make()'s offsets for a shape, as this extension was built"},
    {"layout_hash", rows_layout_hash, METH_VARARGS, "w3s_layout_hash() of a shape, as this extension was built"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef rows_module = {
    PyModuleDef_HEAD_INIT, "w3async._rows", "The supervisor's hot path over the shared table.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__rows(void)
{
    if (PyType_Ready(&GathererType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&rows_module);
    if (!m)
        return NULL;
    Py_INCREF(&GathererType);
    if (PyModule_AddObject(m, "Gatherer", (PyObject *)&GathererType) < 0) {
        Py_DECREF(&GathererType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "VERSION", (long)W3S_VERSION);
    return m;
}
