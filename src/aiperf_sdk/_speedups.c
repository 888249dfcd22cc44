/* Optional C hot path for aiperf_sdk.stage: the with-block (`__init__`, `__enter__`,
 * `__exit__`, and `__aenter__`/`__aexit__` returning an already-done awaitable) and the
 * decorated-call timer (whose record/record_since also serve the async decorator).
 *
 * Only the common case runs here: no hooks registered, no exception, no labels on a `with`
 * block. Everything else calls back into the Python implementation in _stage.py, which stays
 * the reference (and the fallback when this module is not built). The clock is
 * CLOCK_MONOTONIC, the clock of time.perf_counter_ns() on Linux, so values mix with the ones
 * Python code records (_ledger loads this module on Linux only).
 *
 * Also here: the series buffer (SeriesBase: C integers, taken atomically by the fold), the
 * ledger's series maps (LedgerBase) and fold(), which folds a taken buffer into the HDR
 * counts without numpy temporaries.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <string.h>
#include <time.h>

static PyObject *g_current;     /* ContextVar[Request | None] */
static PyObject *g_default;     /* list holding the default Ledger */
static PyObject *g_hooks;       /* _hooks.HOOKS: one list, mutated in place */
static PyObject *g_make_labels; /* _ledger.make_labels */
static PyObject *g_exit_general;/* _stage._exit_general(stage, exc, end, duration) */
static PyObject *g_enter_hooks; /* _stage._enter_hooks(stage) */
static PyObject *g_record_py;   /* _ledger._record_py(ledger, stage, duration_ns, **labels) */

static PyObject *s_stages, *s_ledger, *s_fold_series, *s_series_for, *s_gate, *s_empty_tuple;

static inline long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The same clock, read at its last tick (a few ms behind; ~5x cheaper where available). */
static inline long long coarse_ns(void) {
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
#else
    return now_ns();
#endif
}

/* 1 when some registered hook must run for a stage, 0 when none is registered or every one
 * is gated off: a hook may expose `gate` = (object, attribute name), and is skipped while
 * that attribute is false (a profiler hook with no profiler running). -1 on error. */
static int hooks_active(void) {
    Py_ssize_t n = PyList_GET_SIZE(g_hooks);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *gate = PyObject_GetAttr(PyList_GET_ITEM(g_hooks, i), s_gate);
        if (gate == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
            PyErr_Clear();
            return 1; /* no gate: always runs */
        }
        if (!PyTuple_Check(gate) || PyTuple_GET_SIZE(gate) != 2) {
            Py_DECREF(gate);
            return 1;
        }
        PyObject *flag = PyObject_GetAttr(PyTuple_GET_ITEM(gate, 0), PyTuple_GET_ITEM(gate, 1));
        Py_DECREF(gate);
        if (flag == NULL) return -1;
        int on = PyObject_IsTrue(flag);
        Py_DECREF(flag);
        if (on != 0) return on; /* 1, or -1 on error */
    }
    return 0;
}

/* ---- SeriesBase: one series' hot-path buffer ------------------------------------------
 *
 * Durations are buffered as C integers (no Python int per value); `take()` hands the whole
 * buffer and its window marks to the fold in one step that no other thread can interleave
 * with (the GIL is held throughout and nothing in it can run Python code), so a value is
 * never lost, folded twice, or attributed to a mark of another chunk. */

typedef struct {
    PyObject_HEAD
    PyObject *ledger;           /* the Ledger; its _fold_series(series) folds this buffer */
    PyObject *marks;            /* list of (buffer position, window index from there on) */
    long long window_end;       /* perf_counter_ns at which the current window ends */
    long long last_end;         /* end of the last value recorded */
    long long first_start;      /* start of the first value recorded (0: none yet) */
    long long window_ns, unix_offset_ns;
    Py_ssize_t n, cap, flush_at;
    long long *buf;
} SeriesBase;

static PyTypeObject SeriesBaseType;

/* The C part of Ledger: the two series maps the hot path reads (Ledger assigns them as
 * ordinary attributes, `_by_name` and `_by_key`; they live here so C reads them directly). */
typedef struct {
    PyObject_HEAD
    PyObject *by_name; /* dict: stage name -> its label-less series */
    PyObject *by_key;  /* dict: (stage, labels) -> series */
} LedgerBase;

static PyTypeObject LedgerBaseType;

static inline long long floordiv(long long a, long long b) {
    long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* The value about to be appended at position n ends in a new window: mark where it starts. */
static int series_roll(SeriesBase *s, long long duration, long long end) {
    long long w = floordiv(end + s->unix_offset_ns, s->window_ns);
    PyObject *mark = PyTuple_New(2); /* the only allocation that may run the GC: first */
    if (mark == NULL) return -1;
    PyObject *pos = PyLong_FromSsize_t(s->n), *win = PyLong_FromLongLong(w);
    if (pos == NULL || win == NULL) {
        Py_XDECREF(pos); Py_XDECREF(win); Py_DECREF(mark);
        return -1;
    }
    PyTuple_SET_ITEM(mark, 0, pos);
    PyTuple_SET_ITEM(mark, 1, win);
    int rc = PyList_Append(s->marks, mark);
    Py_DECREF(mark);
    if (rc < 0) return -1;
    s->window_end = (w + 1) * s->window_ns - s->unix_offset_ns;
    if (!s->first_start) s->first_start = end - duration;
    return 0;
}

static int series_reserve(SeriesBase *s, Py_ssize_t extra) {
    if (s->n + extra <= s->cap) return 0;
    /* start small (a large buffer_size fills gradually); double when full, also while a
     * fold waits for the lock */
    Py_ssize_t cap = s->cap ? s->cap : (s->flush_at < 4096 ? s->flush_at : 4096);
    if (cap < 1) cap = 1;
    while (cap < s->n + extra) {
        if (cap > PY_SSIZE_T_MAX / (2 * (Py_ssize_t)sizeof(long long))) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    long long *buf = PyMem_Realloc(s->buf, (size_t)cap * sizeof(long long));
    if (buf == NULL) { PyErr_NoMemory(); return -1; }
    s->buf = buf;
    s->cap = cap;
    return 0;
}

static int series_maybe_fold(SeriesBase *s) {
    if (s->n < s->flush_at) return 0;
    PyObject *r = PyObject_CallMethodOneArg(s->ledger, s_fold_series, (PyObject *)s);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

static int series_uninitialised(SeriesBase *s) {
    if (s->marks != NULL) return 0;
    PyErr_SetString(PyExc_RuntimeError, "series is not initialised (or was cleared)");
    return 1;
}

/* Hot path: buffer one value ending at `end`; fold when the buffer is full. */
static int series_add(SeriesBase *s, long long duration, long long end) {
    if (series_uninitialised(s)) return -1;
    /* roll first: its allocation is the one step that may run Python code (the GC) */
    if (end >= s->window_end && series_roll(s, duration, end) < 0) return -1;
    if (s->n >= s->cap && series_reserve(s, 1) < 0) return -1;
    s->buf[s->n++] = duration;
    if (end > s->last_end) s->last_end = end; /* a coarse stamp may trail a precise one */
    return series_maybe_fold(s);
}

static int Series_init(SeriesBase *self, PyObject *args, PyObject *kwds) {
    PyObject *ledger;
    Py_ssize_t flush_at;
    long long window_ns, offset;
    if (!PyArg_ParseTuple(args, "OnLL:SeriesBase", &ledger, &flush_at, &window_ns, &offset))
        return -1;
    if (flush_at < 1 || flush_at > (1 << 24) || window_ns < 1) {
        PyErr_SetString(PyExc_ValueError, "flush_at must be 1..2**24, window_ns >= 1");
        return -1;
    }
    PyObject *marks = PyList_New(0);
    if (marks == NULL) return -1;
    Py_XSETREF(self->ledger, Py_NewRef(ledger));
    Py_XSETREF(self->marks, marks);
    self->flush_at = flush_at;
    self->window_ns = window_ns;
    self->unix_offset_ns = offset;
    self->window_end = self->last_end = self->first_start = 0;
    self->n = 0;
    return 0;
}

static int Series_traverse(SeriesBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->ledger);
    Py_VISIT(self->marks);
    return 0;
}

static int Series_clear(SeriesBase *self) {
    Py_CLEAR(self->ledger);
    Py_CLEAR(self->marks);
    return 0;
}

static void Series_dealloc(SeriesBase *self) {
    PyObject_GC_UnTrack(self);
    Series_clear(self);
    PyMem_Free(self->buf);
    self->buf = NULL;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int as_duration(PyObject *o, long long *out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v < 0) {
        PyErr_Format(PyExc_ValueError, "series values must be validated int64 >= 0, got %R", o);
        return -1;
    }
    *out = v;
    return 0;
}

static PyObject *Series_add(SeriesBase *self, PyObject *const *args, Py_ssize_t nargs) {
    long long duration, end;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "add(duration_ns, end_ns)");
        return NULL;
    }
    if (as_duration(args[0], &duration) < 0) return NULL;
    end = PyLong_AsLongLong(args[1]);
    if (end == -1 && PyErr_Occurred()) return NULL;
    if (series_add(self, duration, end) < 0) return NULL;
    Py_RETURN_NONE;
}

/* add_many(durations, end): values that all end at `end` (a batch), as add() per value. */
static PyObject *Series_add_many(SeriesBase *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "add_many(durations: list[int], end_ns)");
        return NULL;
    }
    if (series_uninitialised(self)) return NULL;
    PyObject *lst = args[0];
    long long end = PyLong_AsLongLong(args[1]);
    if (end == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t k = PyList_GET_SIZE(lst);
    if (k == 0) Py_RETURN_NONE;
    long long *vals = PyMem_Malloc((size_t)k * sizeof(long long));
    if (vals == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < k; i++) { /* convert all first: a bad value adds nothing */
        if (as_duration(PyList_GET_ITEM(lst, i), &vals[i]) < 0) { PyMem_Free(vals); return NULL; }
    }
    if ((end >= self->window_end && series_roll(self, vals[0], end) < 0) ||
        series_reserve(self, k) < 0) {
        PyMem_Free(vals);
        return NULL;
    }
    memcpy(self->buf + self->n, vals, (size_t)k * sizeof(long long));
    self->n += k;
    if (end > self->last_end) self->last_end = end;
    PyMem_Free(vals);
    if (series_maybe_fold(self) < 0) return NULL;
    Py_RETURN_NONE;
}

/* take() -> (bytes of int64 values, marks): everything buffered, atomically. */
static PyObject *Series_take(SeriesBase *self, PyObject *Py_UNUSED(ignored)) {
    if (series_uninitialised(self)) return NULL;
    PyObject *fresh = PyList_New(0); /* may run the GC: before the state is read */
    if (fresh == NULL) return NULL;
    /* from here to the reset nothing can run Python code (bytes are not GC-tracked) */
    PyObject *values = PyBytes_FromStringAndSize(
        self->n ? (const char *)self->buf : NULL, self->n * (Py_ssize_t)sizeof(long long));
    if (values == NULL) { Py_DECREF(fresh); return NULL; }
    self->n = 0;
    PyObject *marks = self->marks;
    self->marks = fresh;
    if (self->cap > 4 * self->flush_at) { /* grown while a fold waited: give it back */
        PyMem_Free(self->buf);
        self->buf = NULL;
        self->cap = 0;
    }
    PyObject *r = PyTuple_Pack(2, values, marks);
    Py_DECREF(values);
    Py_DECREF(marks);
    return r;
}

/* reset(): drop the buffer and the window state (Ledger.reset). */
static PyObject *Series_reset(SeriesBase *self, PyObject *Py_UNUSED(ignored)) {
    if (series_uninitialised(self)) return NULL;
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL) return NULL;
    self->n = 0;
    Py_SETREF(self->marks, fresh);
    self->window_end = self->last_end = self->first_start = 0;
    Py_RETURN_NONE;
}

static PyObject *Series_pending(SeriesBase *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->n);
}

static PyMethodDef Series_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Series_add, METH_FASTCALL,
     "add(duration_ns, end_ns): buffer one validated value; fold when full."},
    {"add_many", (PyCFunction)(void (*)(void))Series_add_many, METH_FASTCALL,
     "add_many(durations, end_ns): buffer validated values that all end at end_ns."},
    {"take", (PyCFunction)Series_take, METH_NOARGS,
     "take() -> (bytes of int64 values, marks): empty the buffer atomically."},
    {"reset", (PyCFunction)Series_reset, METH_NOARGS, "Drop the buffer and window state."},
    {NULL}
};

static PyMemberDef Series_members[] = {
    {"ledger", T_OBJECT_EX, offsetof(SeriesBase, ledger), READONLY, NULL},
    {"window_end", T_LONGLONG, offsetof(SeriesBase, window_end), 0, NULL},
    {"last_end", T_LONGLONG, offsetof(SeriesBase, last_end), 0, NULL},
    {"first_start", T_LONGLONG, offsetof(SeriesBase, first_start), 0, NULL},
    {NULL}
};

static PyGetSetDef Series_getset[] = {
    {"pending", (getter)Series_pending, NULL, "values buffered, not yet folded", NULL},
    {NULL}
};

static PyTypeObject SeriesBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiperf_sdk._speedups.SeriesBase",
    .tp_basicsize = sizeof(SeriesBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Series_init,
    .tp_dealloc = (destructor)Series_dealloc,
    .tp_traverse = (traverseproc)Series_traverse,
    .tp_clear = (inquiry)Series_clear,
    .tp_methods = Series_methods,
    .tp_members = Series_members,
    .tp_getset = Series_getset,
};

/* Record `duration` for stage `name` into the series `key` ((name, labels); NULL for the
 * label-less series): the request breakdown, then the series buffer -- what
 * _stage._record + _Series.add do. `ledger` may be None. Returns 0 or -1. */
static int record_plain(PyObject *name, PyObject *key, PyObject *ledger, long long duration,
                        long long end, int breakdown, PyObject **cache_led,
                        PyObject **cache_series) {
    PyObject *req = NULL, *led = NULL, *series = NULL, *tmp = NULL;
    int rc = -1;

    if (breakdown) {
        if (PyContextVar_Get(g_current, Py_None, &req) < 0) return -1;
    } else {
        req = Py_NewRef(Py_None);
    }
    led = Py_NewRef(ledger);
    if (req != Py_None) {
        PyObject *stages = PyObject_GetAttr(req, s_stages);
        if (stages == NULL) goto done;
        PyObject *old = PyDict_GetItemWithError(stages, name); /* borrowed; no __missing__ */
        if (old == NULL && PyErr_Occurred()) { Py_DECREF(stages); goto done; }
        PyObject *sum = PyLong_FromLongLong(duration);
        if (sum != NULL && old != NULL) Py_SETREF(sum, PyNumber_Add(old, sum));
        if (sum == NULL) { Py_DECREF(stages); goto done; }
        int err = PyDict_SetItem(stages, name, sum);
        Py_DECREF(sum);
        Py_DECREF(stages);
        if (err < 0) goto done;
        if (led == Py_None) {
            Py_DECREF(led);
            led = PyObject_GetAttr(req, s_ledger);
            if (led == NULL) goto done;
        }
    }
    if (led == Py_None) {
        Py_DECREF(led);
        led = PyList_GetItem(g_default, 0);
        if (led == NULL) goto done;
        Py_INCREF(led);
    }
    if (cache_led != NULL && *cache_led == led && *cache_series != NULL) {
        series = Py_NewRef(*cache_series); /* a decorator's series for its last ledger */
        goto have_series;
    }
    /* stage(), request() and set_default_ledger() accept Ledgers only, and a Ledger is a
     * LedgerBase wherever this module is loaded */
    if (!PyObject_TypeCheck(led, &LedgerBaseType)) {
        PyErr_Format(PyExc_TypeError, "ledger must be a perf.Ledger, got %s",
                     Py_TYPE(led)->tp_name);
        goto done;
    }
    tmp = key == NULL ? ((LedgerBase *)led)->by_name : ((LedgerBase *)led)->by_key;
    if (tmp == NULL || !PyDict_CheckExact(tmp)) {
        PyErr_SetString(PyExc_TypeError, "ledger is not initialised");
        tmp = NULL;
        goto done;
    }
    Py_INCREF(tmp);
    series = PyDict_GetItemWithError(tmp, key == NULL ? name : key);
    Py_XINCREF(series);
    Py_CLEAR(tmp);
    if (series == NULL) {
        if (PyErr_Occurred()) goto done;
        PyObject *k = key != NULL ? (Py_INCREF(key), key) : PyTuple_Pack(2, name, s_empty_tuple);
        if (k == NULL) goto done;
        series = PyObject_CallMethodOneArg(led, s_series_for, k);
        Py_DECREF(k);
        if (series == NULL) goto done;
    }
    if (!PyObject_TypeCheck(series, &SeriesBaseType)) {
        PyErr_SetString(PyExc_TypeError, "ledger series is not a SeriesBase");
        goto done;
    }
    if (cache_led != NULL) {
        Py_XSETREF(*cache_led, Py_NewRef(led));
        Py_XSETREF(*cache_series, Py_NewRef(series));
    }
have_series:
    rc = series_add((SeriesBase *)series, duration, end);
done:
    Py_XDECREF(req);
    Py_XDECREF(led);
    Py_XDECREF(series);
    Py_XDECREF(tmp);
    return rc;
}

/* ---- StageBase: the with-block ------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *name;
    PyObject *labels;
    PyObject *ledger;
    PyObject *tokens;
    PyObject *key; /* (name, labels) when labelled, else NULL */
    long long t0;
} StageBase;

static int Stage_init(StageBase *self, PyObject *args, PyObject *kwds) {
    PyObject *name;
    if (PyTuple_GET_SIZE(args) != 1) {
        PyErr_Format(PyExc_TypeError, "stage() takes exactly one positional argument (the "
                     "name), got %zd", PyTuple_GET_SIZE(args));
        return -1;
    }
    name = PyTuple_GET_ITEM(args, 0);
    if (!PyUnicode_CheckExact(name) || PyUnicode_GET_LENGTH(name) == 0) {
        PyErr_Format(PyExc_TypeError, "stage name must be a non-empty str, got %R", name);
        return -1;
    }
    PyObject *ledger = Py_None, *labels = s_empty_tuple;
    Py_INCREF(labels);
    if (kwds != NULL && PyDict_GET_SIZE(kwds) > 0) {
        PyObject *rest = PyDict_Copy(kwds);
        if (rest == NULL) { Py_DECREF(labels); return -1; }
        PyObject *led = PyDict_GetItemString(rest, "ledger"); /* borrowed */
        if (led != NULL) {
            ledger = led;
            Py_INCREF(ledger);
            if (PyDict_DelItemString(rest, "ledger") < 0) {
                Py_DECREF(ledger); Py_DECREF(rest); Py_DECREF(labels); return -1;
            }
        } else {
            Py_INCREF(ledger);
        }
        if (PyDict_GET_SIZE(rest) > 0) {
            Py_DECREF(labels);
            labels = PyObject_CallOneArg(g_make_labels, rest);
            if (labels == NULL) { Py_DECREF(ledger); Py_DECREF(rest); return -1; }
        }
        Py_DECREF(rest);
    } else {
        Py_INCREF(ledger);
    }
    PyObject *key = NULL;
    if (PyTuple_GET_SIZE(labels) > 0) {
        key = PyTuple_Pack(2, name, labels);
        if (key == NULL) { Py_DECREF(ledger); Py_DECREF(labels); return -1; }
    }
    if (ledger != Py_None && !PyObject_TypeCheck(ledger, &LedgerBaseType)) {
        PyErr_Format(PyExc_TypeError, "stage(): ledger must be a perf.Ledger or None, got %s",
                     Py_TYPE(ledger)->tp_name);
        Py_XDECREF(key);
        Py_DECREF(ledger);
        Py_DECREF(labels);
        return -1;
    }
    Py_XSETREF(self->key, key);
    Py_INCREF(name);
    Py_XSETREF(self->name, name);
    Py_XSETREF(self->labels, labels);
    Py_XSETREF(self->ledger, ledger);
    Py_INCREF(Py_None);
    Py_XSETREF(self->tokens, Py_None);
    self->t0 = 0;
    return 0;
}

static int Stage_traverse(StageBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->name);
    Py_VISIT(self->labels);
    Py_VISIT(self->ledger);
    Py_VISIT(self->tokens);
    Py_VISIT(self->key);
    return 0;
}

static int Stage_clear(StageBase *self) {
    Py_CLEAR(self->name);
    Py_CLEAR(self->labels);
    Py_CLEAR(self->ledger);
    Py_CLEAR(self->tokens);
    Py_CLEAR(self->key);
    return 0;
}

static void Stage_dealloc(StageBase *self) {
    PyObject_GC_UnTrack(self);
    Stage_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Stage_enter(StageBase *self, PyObject *Py_UNUSED(ignored)) {
    if (self->t0) {
        PyErr_Format(PyExc_RuntimeError, "stage %R object is already active; use a new "
                     "perf.stage(...) per with-block", self->name);
        return NULL;
    }
    int active = hooks_active();
    if (active < 0) return NULL;
    if (active) {
        PyObject *r = PyObject_CallOneArg(g_enter_hooks, (PyObject *)self);
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
    self->t0 = now_ns();
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *Stage_exit(StageBase *self, PyObject *const *args, Py_ssize_t nargs) {
    long long end = now_ns();
    long long duration = end - self->t0;
    self->t0 = 0;
    PyObject *exc = nargs >= 2 ? args[1] : Py_None;
    if (exc != Py_None || self->tokens != Py_None) {
        PyObject *e = PyLong_FromLongLong(end), *d = PyLong_FromLongLong(duration);
        PyObject *r = (e && d) ? PyObject_CallFunctionObjArgs(
            g_exit_general, (PyObject *)self, exc, e, d, NULL) : NULL;
        Py_XDECREF(e);
        Py_XDECREF(d);
        return r;
    }
    if (record_plain(self->name, self->key, self->ledger, duration, end, 1, NULL, NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- Ready: an awaitable that is already done (for `async with`) ---------------------
 *
 * `async with` awaits what __aenter__/__aexit__ return. Entering and leaving a stage never
 * suspends, so the C methods do their work when called and return a Ready holding the
 * result: awaiting it finishes at once with that value (no coroutine object per call). */

typedef struct {
    PyObject_HEAD
    PyObject *result;
} Ready;

static PyTypeObject ReadyType;

static PyObject *ready_new(PyObject *result) { /* steals `result` */
    if (result == NULL) return NULL;
    Ready *r = PyObject_New(Ready, &ReadyType);
    if (r == NULL) { Py_DECREF(result); return NULL; }
    r->result = result;
    return (PyObject *)r;
}

static void Ready_dealloc(Ready *self) {
    Py_XDECREF(self->result);
    PyObject_Free(self);
}

static PyObject *Ready_await(Ready *self) {
    return Py_NewRef(self); /* its own iterator */
}

static PyObject *Ready_iternext(Ready *self) {
    PyObject *result = self->result;
    if (result == NULL || result == Py_None) return NULL; /* StopIteration(None) */
    self->result = NULL;
    /* StopIteration(result): an instance, so a tuple result is not taken as its args */
    PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result);
    Py_DECREF(result);
    if (stop == NULL) return NULL;
    PyErr_SetObject(PyExc_StopIteration, stop);
    Py_DECREF(stop);
    return NULL;
}

static PyObject *Ready_send(Ready *self, PyObject *value) {
    PyObject *r = Ready_iternext(self);
    if (r == NULL && !PyErr_Occurred()) PyErr_SetNone(PyExc_StopIteration);
    return r;
}

static PyObject *Ready_throw(Ready *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "throw() needs an exception");
        return NULL;
    }
    PyObject *typ = args[0], *val = nargs > 1 ? args[1] : NULL;
    Py_CLEAR(self->result); /* finished: the exception ends it */
    if (PyExceptionInstance_Check(typ)) {
        PyErr_SetObject((PyObject *)Py_TYPE(typ), typ);
    } else if (!PyExceptionClass_Check(typ)) {
        PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
    } else if (val != NULL && val != Py_None) {
        PyErr_SetObject(typ, val);
    } else {
        PyErr_SetNone(typ);
    }
    return NULL;
}

static PyObject *Ready_close(Ready *self, PyObject *Py_UNUSED(ignored)) {
    Py_CLEAR(self->result);
    Py_RETURN_NONE;
}

static PyMethodDef Ready_methods[] = {
    {"send", (PyCFunction)Ready_send, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))Ready_throw, METH_FASTCALL, NULL},
    {"close", (PyCFunction)Ready_close, METH_NOARGS, NULL},
    {NULL}
};

static PyAsyncMethods Ready_as_async = {
    .am_await = (unaryfunc)Ready_await,
};

static PyTypeObject ReadyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiperf_sdk._speedups.Ready",
    .tp_basicsize = sizeof(Ready),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Ready_dealloc,
    .tp_as_async = &Ready_as_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Ready_iternext,
    .tp_methods = Ready_methods,
};

static PyObject *Stage_aenter(StageBase *self, PyObject *Py_UNUSED(ignored)) {
    return ready_new(Stage_enter(self, NULL));
}

static PyObject *Stage_aexit(StageBase *self, PyObject *const *args, Py_ssize_t nargs) {
    return ready_new(Stage_exit(self, args, nargs));
}

static PyMethodDef Stage_methods[] = {
    {"__enter__", (PyCFunction)Stage_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Stage_exit, METH_FASTCALL, NULL},
    {"__aenter__", (PyCFunction)Stage_aenter, METH_NOARGS, NULL},
    {"__aexit__", (PyCFunction)(void (*)(void))Stage_aexit, METH_FASTCALL, NULL},
    {NULL}
};

static PyMemberDef Stage_members[] = {
    {"_name", T_OBJECT_EX, offsetof(StageBase, name), 0, NULL},
    {"_labels", T_OBJECT_EX, offsetof(StageBase, labels), 0, NULL},
    {"_ledger", T_OBJECT, offsetof(StageBase, ledger), 0, NULL},
    {"_tokens", T_OBJECT, offsetof(StageBase, tokens), 0, NULL},
    {"_t0", T_LONGLONG, offsetof(StageBase, t0), 0, NULL},
    {NULL}
};

static PyTypeObject StageBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiperf_sdk._speedups.StageBase",
    .tp_basicsize = sizeof(StageBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Stage_init,
    .tp_dealloc = (destructor)Stage_dealloc,
    .tp_traverse = (traverseproc)Stage_traverse,
    .tp_clear = (inquiry)Stage_clear,
    .tp_methods = Stage_methods,
    .tp_members = Stage_members,
};

/* ---- LedgerBase.record: the plain-int, label-less case of Ledger.record --------------- */

static PyObject *LedgerBase_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs == 2 && nkw == 0 && g_record_py != NULL && PyUnicode_CheckExact(args[0]) &&
        PyUnicode_GET_LENGTH(args[0]) > 0 && PyLong_CheckExact(args[1])) {
        int overflow = 0;
        long long duration = PyLong_AsLongLongAndOverflow(args[1], &overflow);
        if (!overflow && duration >= 0) {
            /* the value was timed by the caller; its end only places it in an interval
             * window, for which the coarse clock (a few ms) is exact enough */
            if (record_plain(args[0], NULL, self, duration, coarse_ns(), 0, NULL, NULL) < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    if (g_record_py == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "aiperf_sdk._speedups is not configured");
        return NULL;
    }
    /* everything else (labels, validation errors): the Python implementation */
    PyObject *small[8];
    Py_ssize_t total = 1 + nargs + nkw;
    PyObject **stack = total <= 8 ? small : PyMem_Malloc(total * sizeof(PyObject *));
    if (stack == NULL) return PyErr_NoMemory();
    stack[0] = self;
    for (Py_ssize_t i = 0; i < nargs + nkw; i++) stack[i + 1] = args[i];
    PyObject *r = PyObject_Vectorcall(g_record_py, stack, 1 + nargs, kwnames);
    if (stack != small) PyMem_Free(stack);
    return r;
}

static PyMethodDef LedgerBase_methods[] = {
    {"record", (PyCFunction)(void (*)(void))LedgerBase_record, METH_FASTCALL | METH_KEYWORDS,
     "record(stage, duration_ns, /, **labels)\n--\n\n"
     "Record one duration (integer nanoseconds) for ``stage`` under ``labels``."},
    {NULL}
};

static int LedgerBase_traverse(LedgerBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->by_name);
    Py_VISIT(self->by_key);
    return 0;
}

static int LedgerBase_clear(LedgerBase *self) {
    Py_CLEAR(self->by_name);
    Py_CLEAR(self->by_key);
    return 0;
}

static void LedgerBase_dealloc(LedgerBase *self) {
    PyObject_GC_UnTrack(self);
    LedgerBase_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef LedgerBase_members[] = {
    {"_by_name", T_OBJECT, offsetof(LedgerBase, by_name), 0, NULL},
    {"_by_key", T_OBJECT, offsetof(LedgerBase, by_key), 0, NULL},
    {NULL}
};

static PyTypeObject LedgerBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiperf_sdk._speedups.LedgerBase",
    .tp_basicsize = sizeof(LedgerBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)LedgerBase_dealloc,
    .tp_traverse = (traverseproc)LedgerBase_traverse,
    .tp_clear = (inquiry)LedgerBase_clear,
    .tp_methods = LedgerBase_methods,
    .tp_members = LedgerBase_members,
};

static PyObject *configure_ledger(PyObject *mod, PyObject *record_py) {
    Py_XSETREF(g_record_py, Py_NewRef(record_py));
    Py_RETURN_NONE;
}

/* ---- timed(fn, name, ledger, slow): the decorated sync call -------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *fn, *name, *key, *ledger, *slow;
    PyObject *cache_led, *cache_series; /* the series of `key` in the ledger used last */
    PyObject *dict; /* functools.update_wrapper's __name__, __doc__, __wrapped__, ... */
    vectorcallfunc vectorcall;
} Timed;

static PyObject *Timed_vectorcall(Timed *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    int active = hooks_active();
    if (active < 0) return NULL;
    if (active) return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    long long t0 = now_ns();
    PyObject *result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    long long end = now_ns();
    if (result == NULL) {
        /* the body raised: let the Python path label it outcome=error/cancelled */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb != NULL && value != NULL) PyException_SetTraceback(value, tb);
        PyObject *e = PyLong_FromLongLong(end), *d = PyLong_FromLongLong(end - t0);
        PyObject *r = (e && d) ? PyObject_CallMethod(self->slow, "record_error", "OOO",
                                                     value ? value : Py_None, e, d) : NULL;
        Py_XDECREF(e);
        Py_XDECREF(d);
        if (r == NULL) { /* recording failed: the body's exception still wins */
            PyErr_Clear();
        } else {
            Py_DECREF(r);
        }
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    if (record_plain(self->name, self->key == Py_None ? NULL : self->key, self->ledger,
                     end - t0, end, 1, &self->cache_led, &self->cache_series) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static int Timed_traverse(Timed *self, visitproc visit, void *arg) {
    Py_VISIT(self->fn);
    Py_VISIT(self->name);
    Py_VISIT(self->ledger);
    Py_VISIT(self->slow);
    Py_VISIT(self->key);
    Py_VISIT(self->cache_led);
    Py_VISIT(self->cache_series);
    Py_VISIT(self->dict);
    return 0;
}

static int Timed_clear(Timed *self) {
    Py_CLEAR(self->fn);
    Py_CLEAR(self->name);
    Py_CLEAR(self->ledger);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->key);
    Py_CLEAR(self->cache_led);
    Py_CLEAR(self->cache_series);
    Py_CLEAR(self->dict);
    return 0;
}

static void Timed_dealloc(Timed *self) {
    PyObject_GC_UnTrack(self);
    Timed_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Timed_get(PyObject *self, PyObject *obj, PyObject *type) {
    /* bind like a function, so a decorated method receives `self` */
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

/* record(duration_ns, end_ns): what a decorated call records, for callers that time
 * themselves (the async wrapper): the request breakdown and the series, cached per ledger. */
static PyObject *Timed_record(Timed *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "record(duration_ns, end_ns)");
        return NULL;
    }
    long long duration, end;
    if (as_duration(args[0], &duration) < 0) return NULL;
    end = PyLong_AsLongLong(args[1]);
    if (end == -1 && PyErr_Occurred()) return NULL;
    if (record_plain(self->name, self->key == Py_None ? NULL : self->key, self->ledger,
                     duration, end, 1, &self->cache_led, &self->cache_series) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* record_since(t0_ns): record(now - t0, now), reading the clock here. */
static PyObject *Timed_record_since(Timed *self, PyObject *t0obj) {
    long long end = now_ns();
    long long t0 = PyLong_AsLongLong(t0obj);
    if (t0 == -1 && PyErr_Occurred()) return NULL;
    if (t0 > end) {
        PyErr_SetString(PyExc_ValueError, "record_since(): t0 is in the future");
        return NULL;
    }
    if (record_plain(self->name, self->key == Py_None ? NULL : self->key, self->ledger,
                     end - t0, end, 1, &self->cache_led, &self->cache_series) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef Timed_methods[] = {
    {"record", (PyCFunction)(void (*)(void))Timed_record, METH_FASTCALL,
     "record(duration_ns, end_ns): record one timed call (no hooks, no error)."},
    {"record_since", (PyCFunction)Timed_record_since, METH_O,
     "record_since(t0_ns): record a call that started at perf_counter_ns() t0_ns and ends now."},
    {NULL}
};

static PyGetSetDef Timed_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}
};

static PyTypeObject TimedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiperf_sdk._speedups.Timed",
    .tp_basicsize = sizeof(Timed),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Timed, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)Timed_dealloc,
    .tp_traverse = (traverseproc)Timed_traverse,
    .tp_clear = (inquiry)Timed_clear,
    .tp_descr_get = Timed_get,
    .tp_dictoffset = offsetof(Timed, dict),
    .tp_getset = Timed_getset,
    .tp_methods = Timed_methods,
};

static PyObject *timed(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "timed(fn, name, key_or_None, ledger, slow)");
        return NULL;
    }
    Timed *t = PyObject_GC_New(Timed, &TimedType);
    if (t == NULL) return NULL;
    t->fn = Py_NewRef(args[0]);
    t->name = Py_NewRef(args[1]);
    t->key = Py_NewRef(args[2]);
    t->ledger = Py_NewRef(args[3]);
    t->slow = Py_NewRef(args[4]);
    t->cache_led = NULL;
    t->cache_series = NULL;
    t->dict = NULL;
    t->vectorcall = (vectorcallfunc)Timed_vectorcall;
    PyObject_GC_Track(t);
    return (PyObject *)t;
}

/* ---- fold(raw, counts, highest, half_mag, sub_bucket_mask, half_count) ---------------
 *
 * Fold a series' taken buffer (bytes of int64 values) into its HDR counts array (int64,
 * writable, HdrHistogram's index layout with lowest trackable value 1), in C: what
 * _hdr.Histogram.add_values does with numpy, without a Python int or a temporary array per
 * value. Values above `highest` are clamped to it and counted.
 *
 * Returns the counts index it needs when `counts` is too short (nothing is changed: grow
 * and call again), else (uniq, cnt, total, sum, min, max, clamped): the chunk's distinct
 * indices (sorted) and their counts as bytes of int64 (what the interval windows add), and
 * the chunk's statistics over clamped values. None when the sum would overflow int64 (the
 * caller falls back to numpy). The GIL is held throughout, so one scratch array serves. */

static long long *g_scratch = NULL; /* zero between calls */
static Py_ssize_t g_scratch_len = 0;

static inline Py_ssize_t hdr_index(long long v, int half_mag, long long mask, long long half) {
    int bit_length = 64 - __builtin_clzll((unsigned long long)(v | mask));
    int bucket = bit_length - (half_mag + 1);
    return (Py_ssize_t)((((long long)bucket + 1) << half_mag) + (v >> bucket) - half);
}

static PyObject *fold(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "fold(raw, counts, highest, half_mag, sub_bucket_mask, half_count)");
        return NULL;
    }
    long long highest = PyLong_AsLongLong(args[2]);
    long half_mag = PyLong_AsLong(args[3]);
    long long mask = PyLong_AsLongLong(args[4]);
    long long half = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred()) return NULL;
    if (half_mag < 0 || half_mag > 40 || mask != (2LL << half_mag) - 1 ||
        half != (1LL << half_mag) || highest < 1) {
        PyErr_SetString(PyExc_ValueError, "fold(): invalid HDR layout");
        return NULL;
    }
    Py_buffer raw, counts;
    if (PyObject_GetBuffer(args[0], &raw, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &counts,
                           PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&raw);
        return NULL;
    }
    PyObject *result = NULL;
    if (raw.len % 8 != 0 || counts.itemsize != 8 || counts.format == NULL ||
        (strcmp(counts.format, "q") != 0 && strcmp(counts.format, "l") != 0 &&
         strcmp(counts.format, "<q") != 0 && strcmp(counts.format, "<l") != 0)) {
        PyErr_SetString(PyExc_TypeError, "fold(): raw must hold int64 values, counts be int64");
        goto done;
    }
    const long long *v = (const long long *)raw.buf;
    Py_ssize_t n = raw.len / 8;
    long long *c = (long long *)counts.buf;
    Py_ssize_t clen = counts.len / 8;
    long long vmin = LLONG_MAX, vmax = 0, sum = 0, clamped = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long x = v[i];
        if (x < 0) {
            PyErr_SetString(PyExc_ValueError, "fold(): negative value");
            goto done;
        }
        if (x > highest) { x = highest; clamped++; }
        if (x < vmin) vmin = x;
        if (x > vmax) vmax = x;
        if (__builtin_add_overflow(sum, x, &sum)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "fold(): nothing to fold");
        goto done;
    }
    Py_ssize_t lo = hdr_index(vmin, (int)half_mag, mask, half);
    Py_ssize_t hi = hdr_index(vmax, (int)half_mag, mask, half);
    if (hi >= clen) {
        result = PyLong_FromSsize_t(hi);
        goto done;
    }
    if (hi >= g_scratch_len) {
        Py_ssize_t len = hi + 1 > 4096 ? hi + 1 : 4096;
        long long *s = PyMem_Calloc((size_t)len, sizeof(long long));
        if (s == NULL) { PyErr_NoMemory(); goto done; }
        PyMem_Free(g_scratch);
        g_scratch = s;
        g_scratch_len = len;
    }
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long x = v[i] > highest ? highest : v[i];
        Py_ssize_t idx = hdr_index(x, (int)half_mag, mask, half);
        distinct += g_scratch[idx] == 0;
        g_scratch[idx]++;
    }
    PyObject *uniq = PyBytes_FromStringAndSize(NULL, distinct * 8);
    PyObject *cnt = PyBytes_FromStringAndSize(NULL, distinct * 8);
    if (uniq == NULL || cnt == NULL) {
        Py_XDECREF(uniq);
        Py_XDECREF(cnt);
        memset(g_scratch + lo, 0, (size_t)(hi - lo + 1) * sizeof(long long));
        goto done;
    }
    long long *u = (long long *)PyBytes_AS_STRING(uniq), *k = (long long *)PyBytes_AS_STRING(cnt);
    Py_ssize_t j = 0;
    for (Py_ssize_t idx = lo; idx <= hi; idx++) {
        long long m = g_scratch[idx];
        if (m) {
            c[idx] += m;
            u[j] = idx;
            k[j++] = m;
            g_scratch[idx] = 0;
        }
    }
    result = Py_BuildValue("(NNnLLLL)", uniq, cnt, n, sum, vmin, vmax, clamped);
done:
    PyBuffer_Release(&raw);
    PyBuffer_Release(&counts);
    return result;
}

static PyObject *configure(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "configure() takes 6 arguments");
        return NULL;
    }
    Py_XSETREF(g_current, Py_NewRef(args[0]));
    Py_XSETREF(g_default, Py_NewRef(args[1]));
    if (!PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "configure(): hooks must be the HOOKS list");
        return NULL;
    }
    Py_XSETREF(g_hooks, Py_NewRef(args[2]));
    Py_XSETREF(g_make_labels, Py_NewRef(args[3]));
    Py_XSETREF(g_exit_general, Py_NewRef(args[4]));
    Py_XSETREF(g_enter_hooks, Py_NewRef(args[5]));
    Py_RETURN_NONE;
}

static PyObject *clock_ns(PyObject *mod, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLongLong(now_ns());
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL, NULL},
    {"timed", (PyCFunction)(void (*)(void))timed, METH_FASTCALL, NULL},
    {"configure_ledger", configure_ledger, METH_O, NULL},
    {"clock_ns", clock_ns, METH_NOARGS, NULL},
    {"fold", (PyCFunction)(void (*)(void))fold, METH_FASTCALL, NULL},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "aiperf_sdk._speedups",
    "Optional C hot path of aiperf_sdk (stage timing, series buffers, HDR fold).", -1, module_methods,
};

#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC PyInit__speedups(void) {
    INTERN(s_stages, "stages");
    INTERN(s_ledger, "ledger");
    INTERN(s_fold_series, "_fold_series");
    INTERN(s_series_for, "_series_for");
    INTERN(s_gate, "gate");
    if ((s_empty_tuple = PyTuple_New(0)) == NULL) return NULL;
    if (PyType_Ready(&StageBaseType) < 0 || PyType_Ready(&TimedType) < 0 ||
        PyType_Ready(&LedgerBaseType) < 0 || PyType_Ready(&SeriesBaseType) < 0 ||
        PyType_Ready(&ReadyType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&StageBaseType);
    if (PyModule_AddObject(m, "StageBase", (PyObject *)&StageBaseType) < 0) return NULL;
    Py_INCREF(&LedgerBaseType);
    if (PyModule_AddObject(m, "LedgerBase", (PyObject *)&LedgerBaseType) < 0) return NULL;
    Py_INCREF(&SeriesBaseType);
    if (PyModule_AddObject(m, "SeriesBase", (PyObject *)&SeriesBaseType) < 0) return NULL;
    Py_INCREF(&TimedType);
    if (PyModule_AddObject(m, "Timed", (PyObject *)&TimedType) < 0) return NULL;
    return m;
}
