/* Optional C hot path for aiperf_sdk.stage: the with-block (`__init__`, `__enter__`,
 * `__exit__`) and the decorated-call timer.
 *
 * Only the common case runs here: no hooks registered, no exception, no labels on a `with`
 * block. Everything else calls back into the Python implementation in _stage.py, which stays
 * the reference (and the fallback when this module is not built). The clock is
 * CLOCK_MONOTONIC, the clock of time.perf_counter_ns() on Linux, so values mix with the ones
 * Python code records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

static PyObject *g_current;     /* ContextVar[Request | None] */
static PyObject *g_default;     /* list holding the default Ledger */
static PyObject *g_hooks;       /* _hooks.HOOKS: one list, mutated in place */
static PyObject *g_make_labels; /* _ledger.make_labels */
static PyObject *g_exit_general;/* _stage._exit_general(stage, exc, end, duration) */
static PyObject *g_enter_hooks; /* _stage._enter_hooks(stage) */
static PyObject *g_record_py;   /* _ledger._record_py(ledger, stage, duration_ns, **labels) */

static PyObject *s_stages, *s_ledger, *s_by_name, *s_by_key, *s_buf, *s_window_end, *s_roll,
    *s_last_end, *s_flush_at, *s_fold_series, *s_series_for, *s_gate, *s_empty_tuple;

static inline long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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

/* Record `duration` for stage `name` into the series `key` ((name, labels); NULL for the
 * label-less series): the request breakdown, the series buffer, the window mark and the fold
 * check -- what _stage._record + _Series.add do. `ledger` may be None. Returns 0 or -1. */
static int record_plain(PyObject *name, PyObject *key, PyObject *ledger, long long duration,
                        long long end, int breakdown, PyObject **cache_led,
                        PyObject **cache_series) {
    PyObject *req = NULL, *led = NULL, *series = NULL, *buf = NULL, *dur = NULL;
    PyObject *endobj = NULL, *tmp = NULL;
    int rc = -1;

    if (breakdown) {
        if (PyContextVar_Get(g_current, Py_None, &req) < 0) return -1;
    } else {
        req = Py_NewRef(Py_None);
    }
    dur = PyLong_FromLongLong(duration);
    if (dur == NULL) goto done;
    led = ledger;
    Py_INCREF(led);
    if (req != Py_None) {
        PyObject *stages = PyObject_GetAttr(req, s_stages);
        if (stages == NULL) goto done;
        PyObject *old = PyDict_GetItemWithError(stages, name); /* borrowed; no __missing__ */
        if (old == NULL && PyErr_Occurred()) { Py_DECREF(stages); goto done; }
        PyObject *sum = old ? PyNumber_Add(old, dur) : (Py_INCREF(dur), dur);
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
    tmp = PyObject_GetAttr(led, key == NULL ? s_by_name : s_by_key);
    if (tmp == NULL) goto done;
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
    if (cache_led != NULL) {
        Py_XSETREF(*cache_led, Py_NewRef(led));
        Py_XSETREF(*cache_series, Py_NewRef(series));
    }
have_series:
    buf = PyObject_GetAttr(series, s_buf);
    if (buf == NULL || !PyList_Check(buf)) {
        if (buf != NULL) PyErr_SetString(PyExc_TypeError, "series buffer is not a list");
        goto done;
    }
    if (PyList_Append(buf, dur) < 0) goto done;
    endobj = PyLong_FromLongLong(end);
    if (endobj == NULL) goto done;
    tmp = PyObject_GetAttr(series, s_window_end);
    if (tmp == NULL) goto done;
    long long window_end = PyLong_AsLongLong(tmp);
    Py_CLEAR(tmp);
    if (window_end == -1 && PyErr_Occurred()) goto done;
    if (end >= window_end) {
        tmp = PyObject_CallMethodObjArgs(series, s_roll, endobj, dur, NULL);
        if (tmp == NULL) goto done;
        Py_CLEAR(tmp);
    }
    if (PyObject_SetAttr(series, s_last_end, endobj) < 0) goto done;
    tmp = PyObject_GetAttr(led, s_flush_at);
    if (tmp == NULL) goto done;
    Py_ssize_t flush_at = PyLong_AsSsize_t(tmp);
    Py_CLEAR(tmp);
    if (flush_at == -1 && PyErr_Occurred()) goto done;
    if (PyList_GET_SIZE(buf) >= flush_at) {
        tmp = PyObject_CallMethodOneArg(led, s_fold_series, series);
        if (tmp == NULL) goto done;
        Py_CLEAR(tmp);
    }
    rc = 0;
done:
    Py_XDECREF(req);
    Py_XDECREF(led);
    Py_XDECREF(series);
    Py_XDECREF(buf);
    Py_XDECREF(dur);
    Py_XDECREF(endobj);
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

static PyMethodDef Stage_methods[] = {
    {"__enter__", (PyCFunction)Stage_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Stage_exit, METH_FASTCALL, NULL},
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
            if (record_plain(args[0], NULL, self, duration, now_ns(), 0, NULL, NULL) < 0)
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

static PyTypeObject LedgerBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiperf_sdk._speedups.LedgerBase",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_methods = LedgerBase_methods,
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
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "aiperf_sdk._speedups",
    "Optional C hot path of aiperf_sdk.stage.", -1, module_methods,
};

#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC PyInit__speedups(void) {
    INTERN(s_stages, "stages");
    INTERN(s_ledger, "ledger");
    INTERN(s_by_name, "_by_name");
    INTERN(s_by_key, "_by_key");
    INTERN(s_buf, "buf");
    INTERN(s_window_end, "window_end");
    INTERN(s_roll, "roll");
    INTERN(s_last_end, "last_end");
    INTERN(s_flush_at, "_flush_at");
    INTERN(s_fold_series, "_fold_series");
    INTERN(s_series_for, "_series_for");
    INTERN(s_gate, "gate");
    if ((s_empty_tuple = PyTuple_New(0)) == NULL) return NULL;
    if (PyType_Ready(&StageBaseType) < 0 || PyType_Ready(&TimedType) < 0 ||
        PyType_Ready(&LedgerBaseType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&StageBaseType);
    if (PyModule_AddObject(m, "StageBase", (PyObject *)&StageBaseType) < 0) return NULL;
    Py_INCREF(&LedgerBaseType);
    if (PyModule_AddObject(m, "LedgerBase", (PyObject *)&LedgerBaseType) < 0) return NULL;
    Py_INCREF(&TimedType);
    if (PyModule_AddObject(m, "Timed", (PyObject *)&TimedType) < 0) return NULL;
    return m;
}
