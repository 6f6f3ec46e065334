/* A tuned kernel's cache-hit launch, in C: what patched/launch.py's fast ``run`` closure and
 * direct.Launcher's guarded path do, without an interpreter frame between the call and Triton's C
 * launcher. Built at run time (compiled_hit.py), as Triton builds its own launchers.
 *
 * It serves the common case: kernel arguments positional or by keyword, the launch keywords
 * ``grid`` and ``warmup`` (false), a key already tuned, a launcher whose guard plan knows this shape
 * of call and whose entry holds this call's kernel. Anything else, and any error before the launch, hands
 * the call to the Python path it mirrors (``slow``), which redoes every step and so behaves, raises
 * and learns exactly as it would alone. Only what that path would also call runs before the
 * launch, and nothing is written but ``best_config`` (which the Python path writes too). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

static PyObject *s_grid, *s_warmup, *s_cache, *s_best_config, *s_pre_hook, *s_dtype, *s_data_ptr, *s_calls,
    *s_c_state, *s_off, *s_plans, *s_program, *s_entries, *s_pre_run_hooks, *s_used_global_vals,
    *s_stage_hook, *s_enter, *s_leave, *s_active, *s_get_device, *s_get_stream, *s_device_caches, *s_debug;
static PyObject *t_tensor, *t_param, *t_chain, *dims[3], *sizes[4];

enum { OP_CONST, OP_TENSOR, OP_INT, OP_NONE, OP_CONSTEXPR, OP_BOOL, OP_FLOAT };

/* Truth of an attribute; -1 on an error. */
static int attr_true(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* A launch hook nobody listens to: None, or Triton's empty hook chain; -1 on an error. */
static int quiet(PyObject *runtime, PyObject *name) {
    PyObject *hook = PyObject_GetAttr(runtime, name);
    if (hook == NULL) return -1;
    int q = hook == Py_None;
    if (!q && t_chain != NULL && Py_TYPE(hook) == (PyTypeObject *)t_chain) {
        int busy = attr_true(hook, s_calls);
        q = busy < 0 ? -1 : !busy;
    }
    Py_DECREF(hook);
    return q;
}

/* Triton's facts of an integer, ``a == 1``, ``a & 15 == 0`` and its size class (launch_guard's),
 * as bits: 1 for one, 2 for a multiple of 16, the class shifted by 2; -1 on an error. */
static int int_facts(PyObject *a) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    unsigned long long low = PyLong_AsUnsignedLongLongMask(a);
    if (low == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    int size;
    if (!overflow) {
        size = (v >= -2147483648LL && v < 2147483648LL) ? 0 : 1;
    } else if (overflow > 0) {
        PyLong_AsUnsignedLongLong(a);
        size = PyErr_Occurred() ? 3 : 2;
        PyErr_Clear(); /* only the OverflowError just raised */
    } else {
        size = 3;
    }
    return (!overflow && v == 1) | ((low & 15) == 0) << 1 | size << 2;
}

/* A call's keywords as vectorcall gives them: ``names`` (a tuple, or NULL for none) and their values. */
typedef struct {
    PyObject *names;
    PyObject *const *values;
} Keywords;

static Py_ssize_t kw_count(const Keywords *kw) { return kw->names ? PyTuple_GET_SIZE(kw->names) : 0; }

/* ``kw[name]`` (borrowed), or NULL (no error) where the call has no such keyword. */
static PyObject *kw_get(const Keywords *kw, PyObject *name) {
    for (Py_ssize_t j = 0; j < kw_count(kw); j++) {
        PyObject *given = PyTuple_GET_ITEM(kw->names, j);
        if (given == name || PyUnicode_Compare(given, name) == 0) return kw->values[j];
    }
    PyErr_Clear(); /* a comparison with a str subclass that failed: not this keyword */
    return NULL;
}

/* The keywords as the dict the Python path is given (in their order); a new reference, or NULL. */
static PyObject *kw_dict(const Keywords *kw) {
    PyObject *d = PyDict_New();
    for (Py_ssize_t j = 0; d != NULL && j < kw_count(kw); j++)
        if (PyDict_SetItem(d, PyTuple_GET_ITEM(kw->names, j), kw->values[j]) < 0) Py_CLEAR(d);
    return d;
}

/* An op's argument (borrowed): ``source`` a keyword's name or a positional index. NULL without an
 * error where the call has no such argument, with one where ``source`` is no index. */
static PyObject *argument(PyObject *source, PyObject *args, const Keywords *kw) {
    if (PyUnicode_Check(source)) return kw_get(kw, source);
    Py_ssize_t at = PyLong_AsSsize_t(source);
    return at >= 0 && at < PyTuple_GET_SIZE(args) ? PyTuple_GET_ITEM(args, at) : NULL;
}

/* Most parameters a compiled guard reads (a kernel with more keeps the Python guard). */
#define MOST_OPS 256

/* A plan's guard (launch_guard._source) run from its program ``(arity, device attribute, ops,
 * keyword count, parameter names)``: 1 with ``*facts`` and ``*values`` set, 0 where the call is not of the
 * plan's kinds (or the program is not one ``_program`` makes), -1 on an error. Each op reads a
 * positional argument (its index) or a keyword (its name). Every call into Python (the device
 * check, ``data_ptr``, ``dtype``) comes before the key and values are built, so no Python code ever
 * sees them half filled. */
static int guard(PyObject *program, PyObject *args, const Keywords *kw, PyObject **facts_out, PyObject **values_out) {
    if (!PyTuple_CheckExact(program) || PyTuple_GET_SIZE(program) != 5) return 0;
    PyObject *device_attr = PyTuple_GET_ITEM(program, 1), *ops = PyTuple_GET_ITEM(program, 2),
             *names = PyTuple_GET_ITEM(program, 4);
    Py_ssize_t arity = PyLong_AsSsize_t(PyTuple_GET_ITEM(program, 0));
    Py_ssize_t keywords = arity < 0 ? -1 : PyLong_AsSsize_t(PyTuple_GET_ITEM(program, 3));
    if (PyErr_Occurred()) return -1;
    if (!PyTuple_CheckExact(ops) || !PyUnicode_Check(device_attr) || keywords < 0 ||
        PyTuple_GET_SIZE(args) != arity || kw_count(kw) != keywords || !PyTuple_CheckExact(names) ||
        PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(ops))
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(ops);
    if (n > MOST_OPS) return 0;
    for (Py_ssize_t i = 0; i < n; i++) /* the parameters' names, for ``bound_of`` */
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, i))) return 0;
    long codes[MOST_OPS];
    PyObject *given[MOST_OPS], *pointers[MOST_OPS], *dtypes[MOST_OPS];
    for (Py_ssize_t i = 0; i < n; i++) { /* the kinds first, as the generated guard checks them */
        PyObject *op = PyTuple_GET_ITEM(ops, i);
        if (!PyTuple_CheckExact(op) || PyTuple_GET_SIZE(op) != 2) return 0;
        long code = codes[i] = PyLong_AsLong(PyTuple_GET_ITEM(op, 0));
        if (code == -1 && PyErr_Occurred()) return -1;
        if (code == OP_CONST) {
            given[i] = PyTuple_GET_ITEM(op, 1);
            continue;
        }
        PyObject *a = argument(PyTuple_GET_ITEM(op, 1), args, kw);
        if (a == NULL) return PyErr_Occurred() ? -1 : 0; /* missing: the call is of another shape */
        given[i] = a;
        PyTypeObject *t = Py_TYPE(a);
        int ok = code == OP_TENSOR ? (t == (PyTypeObject *)t_tensor || t == (PyTypeObject *)t_param)
                 : code == OP_INT ? PyLong_CheckExact(a)
                 : code == OP_NONE ? a == Py_None
                 : code == OP_BOOL ? PyBool_Check(a)
                 : code == OP_FLOAT ? PyFloat_CheckExact(a)
                 : code == OP_CONSTEXPR;
        if (!ok) return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* then that every tensor is on the device */
        if (codes[i] != OP_TENSOR) continue;
        int on = attr_true(given[i], device_attr);
        if (on <= 0) return on;
    }
    Py_ssize_t at = 0, count = 0;
    int result = -1, bits[MOST_OPS];
    PyObject *facts = NULL, *values = NULL;
    for (Py_ssize_t i = 0; i < n; i++) pointers[i] = dtypes[i] = NULL;
    for (Py_ssize_t i = 0; i < n; i++) { /* the tensors' pointers and dtypes as the launcher would read them, */
        long code = codes[i];         /* and every fact, before any container of the result exists */
        count += code == OP_TENSOR ? 2 : code == OP_INT ? 3 : code == OP_CONSTEXPR ? 1 : 0;
        if (code == OP_INT && (bits[i] = int_facts(given[i])) < 0) goto done;
        if (code != OP_TENSOR) continue;
        if ((pointers[i] = PyObject_CallMethodNoArgs(given[i], s_data_ptr)) == NULL) goto done;
        if ((dtypes[i] = PyObject_GetAttr(given[i], s_dtype)) == NULL) goto done;
        if (!PyLong_Check(pointers[i])) { result = 0; goto done; }
        unsigned long long low = PyLong_AsUnsignedLongLongMask(pointers[i]);
        if (low == (unsigned long long)-1 && PyErr_Occurred()) goto done;
        bits[i] = (low & 15) == 0;
    }
    /* The key whole before the values are made: allocating those may run a collection, and a
     * collection's callbacks are Python code, which must never meet a tuple half filled. Nothing
     * here allocates but the tuple itself (the size classes are small ints, which are cached). */
    if ((facts = PyTuple_New(count)) == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (codes[i] == OP_TENSOR) {
            PyTuple_SET_ITEM(facts, at++, Py_NewRef(dtypes[i]));
            PyTuple_SET_ITEM(facts, at++, Py_NewRef(bits[i] ? Py_True : Py_False));
        } else if (codes[i] == OP_INT) {
            PyTuple_SET_ITEM(facts, at++, Py_NewRef(bits[i] & 1 ? Py_True : Py_False));
            PyTuple_SET_ITEM(facts, at++, Py_NewRef(bits[i] & 2 ? Py_True : Py_False));
            PyTuple_SET_ITEM(facts, at++, Py_NewRef(sizes[bits[i] >> 2]));
        } else if (codes[i] == OP_CONSTEXPR) {
            PyTuple_SET_ITEM(facts, at++, Py_NewRef(given[i]));
        }
    }
    if ((values = PyTuple_New(n)) == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(values, i, Py_NewRef(codes[i] == OP_TENSOR ? pointers[i] : given[i]));
    *facts_out = facts, *values_out = values;
    facts = values = NULL;
    result = 1;
done:
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(pointers[i]);
        Py_XDECREF(dtypes[i]);
    }
    Py_XDECREF(facts);
    Py_XDECREF(values);
    return result;
}

/* The plan's ``bound(args, kw)`` from its program, for a call its guard admitted: every parameter
 * by name, in signature order (a constant, a positional argument or a keyword), the dict Triton's
 * binder gives a callable grid. A new reference, or NULL with an error. */
static PyObject *bound_of(PyObject *program, PyObject *args, const Keywords *kw) {
    PyObject *ops = PyTuple_GET_ITEM(program, 2), *names = PyTuple_GET_ITEM(program, 4);
    PyObject *d = PyDict_New();
    for (Py_ssize_t i = 0; d != NULL && i < PyTuple_GET_SIZE(ops); i++) {
        PyObject *op = PyTuple_GET_ITEM(ops, i), *source = PyTuple_GET_ITEM(op, 1), *v;
        long code = PyLong_AsLong(PyTuple_GET_ITEM(op, 0));
        v = code == OP_CONST ? source : argument(source, args, kw);
        if (v == NULL && !PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, source); /* the guard admitted it */
        if (v == NULL || PyDict_SetItem(d, PyTuple_GET_ITEM(names, i), v) < 0) Py_CLEAR(d);
    }
    return d;
}

/* Clear an ordinary error (an ``Exception``: the Python path meets it again and deals with it as it
 * would); 0 with anything else still raised (KeyboardInterrupt, SystemExit), which goes to the caller. */
static int clear_ordinary(void) {
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) return 0;
    PyErr_Clear();
    return 1;
}

/* ``callable(a, b, c, d, ...)`` */
static PyObject *call(PyObject *f, PyObject *const *argv, Py_ssize_t n) { return PyObject_Vectorcall(f, argv, n, NULL); }

/* The keywords' dict, made once a call needs it (``*made``: NULL until then; the caller's to release). */
static PyObject *kw_made(const Keywords *kw, PyObject **made) {
    if (*made == NULL) *made = kw_dict(kw);
    return *made;
}

/* direct.Launcher's guarded launch of ``args`` and the keywords ``kw`` (``grid`` among them): the
 * kernel launched, or NULL with ``*declined`` set and no error where the launcher must take the call
 * itself (it then redoes everything), or NULL with an error raised by the grid, the stream or the
 * launch. */
static PyObject *launch(PyObject *launcher, PyObject *args, const Keywords *kw, PyObject *grid, int *declined) {
    PyObject *state = NULL, *plans = NULL, *facts = NULL, *values = NULL, *active = NULL, *current = NULL,
             *device = NULL, *caches_map = NULL, *caches = NULL, *debug = NULL, *knobs = NULL, *key = NULL,
             *entries = NULL, *entry = NULL, *stream = NULL, *bound = NULL, *shape = NULL, *result = NULL,
             *g[3] = {NULL, NULL, NULL}, *plan = NULL, *program = NULL;
    *declined = 1;
    state = PyObject_GetAttr(launcher, s_c_state);
    if (state == NULL || !PyTuple_CheckExact(state) || PyTuple_GET_SIZE(state) != 8) goto decline;
    PyObject *fn = PyTuple_GET_ITEM(state, 0), *runtime = PyTuple_GET_ITEM(state, 1),
             *driver = PyTuple_GET_ITEM(state, 2), *torch_device = PyTuple_GET_ITEM(state, 3),
             *raw_device = PyTuple_GET_ITEM(state, 4), *read = PyTuple_GET_ITEM(state, 5),
             *compilation = PyTuple_GET_ITEM(state, 6), *stage_hook = PyTuple_GET_ITEM(state, 7);
    if (attr_true(launcher, s_off) != 0 || attr_true(fn, s_pre_run_hooks) != 0 ||
        attr_true(fn, s_used_global_vals) != 0)
        goto decline;
    if (stage_hook == Py_True) {
        PyObject *h = PyObject_GetAttr(runtime, s_stage_hook);
        int none = h == Py_None;
        Py_XDECREF(h);
        if (!none) goto decline;
    }
    if (quiet(runtime, s_enter) != 1 || quiet(runtime, s_leave) != 1) goto decline;
    plans = PyObject_GetAttr(launcher, s_plans);
    if (plans == NULL || !PyTuple_CheckExact(plans)) goto decline;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plans) && facts == NULL; i++) {
        plan = PyTuple_GET_ITEM(plans, i);
        Py_XDECREF(program);
        program = PyObject_GetAttr(plan, s_program);
        if (program == NULL || guard(program, args, kw, &facts, &values) < 0) goto decline;
    }
    if (facts == NULL) goto decline;
    active = PyObject_GetAttr(driver, s_active);
    current = active ? PyObject_GetAttr(active, s_get_device) : NULL;
    if (current == NULL) goto decline;
    device = call(current == torch_device ? raw_device : current, NULL, 0);
    caches_map = device ? PyObject_GetAttr(fn, s_device_caches) : NULL;
    caches = caches_map ? PyObject_GetItem(caches_map, device) : NULL;
    debug = caches ? PyObject_GetAttr(fn, s_debug) : NULL;
    if (debug == NULL) goto decline;
    int on = PyObject_IsTrue(debug);
    if (on < 0) goto decline;
    if (!on) {
        Py_DECREF(debug);
        debug = PyObject_GetAttr(runtime, s_debug);
        if (debug == NULL) goto decline;
    }
    knobs = call(read, &compilation, 1);
    key = knobs ? PyTuple_Pack(4, facts, device, debug, knobs) : NULL;
    entries = key ? PyObject_GetAttr(plan, s_entries) : NULL;
    if (entries == NULL || !PyDict_CheckExact(entries)) goto decline;
    entry = PyDict_GetItemWithError(entries, key);
    if (entry == NULL) goto decline;
    Py_INCREF(entry);
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 4 || PyTuple_GET_ITEM(entry, 0) != caches)
        goto decline;
    *declined = 0; /* from here on, what fails is the launch's own error */
    PyObject *stream_args[2] = {active, device};
    stream = PyObject_VectorcallMethod(s_get_stream, stream_args, 2, NULL);
    if (stream == NULL) goto done;
    if (PyCallable_Check(grid)) {
        bound = bound_of(program, args, kw);
        shape = bound ? call(grid, &bound, 1) : NULL;
    } else {
        shape = grid;
        Py_INCREF(shape);
    }
    if (shape == NULL) goto done;
    Py_ssize_t size = PyObject_Size(shape); /* ``len(grid)`` and ``grid[d]``, as the Python path asks */
    if (size < 0) goto done;
    for (Py_ssize_t d = 0; d < 3; d++) {
        g[d] = d == 0 || d < size ? PyObject_GetItem(shape, dims[d]) : Py_NewRef(dims[1]); /* grid[0] always */
        if (g[d] == NULL) goto done;
    }
    PyObject *spec = PyTuple_GET_ITEM(entry, 2);
    PyObject *ran;
    if (PyTuple_CheckExact(spec) && PyTuple_GET_SIZE(spec) == 3) { /* Triton's C launcher, called as it is */
        PyObject *c_launch = PyTuple_GET_ITEM(spec, 0), *prefix = PyTuple_GET_ITEM(spec, 1);
        int splat = PyTuple_GET_ITEM(spec, 2) == Py_True;
        Py_ssize_t np = PyTuple_GET_SIZE(prefix), nv = splat ? PyTuple_GET_SIZE(values) : 1, total = 4 + np + nv;
        PyObject *small[64], **argv = total <= 64 ? small : PyMem_Malloc(total * sizeof(PyObject *));
        if (argv == NULL) { PyErr_NoMemory(); goto done; }
        argv[0] = g[0], argv[1] = g[1], argv[2] = g[2], argv[3] = stream;
        for (Py_ssize_t k = 0; k < np; k++) argv[4 + k] = PyTuple_GET_ITEM(prefix, k);
        for (Py_ssize_t k = 0; k < nv; k++) argv[4 + np + k] = splat ? PyTuple_GET_ITEM(values, k) : values;
        ran = call(c_launch, argv, total);
        if (argv != small) PyMem_Free(argv);
    } else {
        PyObject *argv[5] = {g[0], g[1], g[2], stream, values};
        ran = call(PyTuple_GET_ITEM(entry, 1), argv, 5);
    }
    if (ran == NULL) goto done;
    Py_DECREF(ran);
    result = PyTuple_GET_ITEM(entry, 3);
    Py_INCREF(result);
    goto done;
decline:
    if (!clear_ordinary()) *declined = 0; /* a KeyboardInterrupt, say: raised, as the Python path would */
done:
    Py_XDECREF(state); Py_XDECREF(plans); Py_XDECREF(program); Py_XDECREF(facts); Py_XDECREF(values);
    Py_XDECREF(active); Py_XDECREF(current); Py_XDECREF(device); Py_XDECREF(caches_map); Py_XDECREF(caches);
    Py_XDECREF(debug); Py_XDECREF(knobs); Py_XDECREF(key); Py_XDECREF(entries); Py_XDECREF(entry);
    Py_XDECREF(stream); Py_XDECREF(bound); Py_XDECREF(shape);
    Py_XDECREF(g[0]); Py_XDECREF(g[1]); Py_XDECREF(g[2]);
    return result;
}

/* A dict's items as a call's keywords (for the test entry points); ``names`` a new tuple, or NULL. */
static int kw_from(PyObject *kwargs, Keywords *kw, PyObject **store) {
    kw->names = PyDict_Keys(kwargs);
    PyObject *values = kw->names ? PyDict_Values(kwargs) : NULL;
    if (values == NULL) return -1;
    Py_SETREF(kw->names, PyList_AsTuple(kw->names));
    *store = PyList_AsTuple(values);
    Py_DECREF(values);
    if (kw->names == NULL || *store == NULL) return -1;
    kw->values = &PyTuple_GET_ITEM(*store, 0);
    return 0;
}

/* ``launch(launcher, args, kwargs)``: the guarded launch alone (tests compare it with the launcher's
 * own); ``(kernel,)``, or ``None`` where the launcher must take the call. */
static PyObject *launch_py(PyObject *self, PyObject *const *argv, Py_ssize_t n) {
    if (n != 3 || !PyTuple_CheckExact(argv[1]) || !PyDict_CheckExact(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "launch(launcher, args: tuple, kwargs: dict)");
        return NULL;
    }
    Keywords kw = {NULL, NULL};
    PyObject *store = NULL, *out = NULL, *grid = PyDict_GetItemWithError(argv[2], s_grid);
    if (grid == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "grid");
        return NULL;
    }
    if (kw_from(argv[2], &kw, &store) == 0) {
        int declined;
        PyObject *kernel = launch(argv[0], argv[1], &kw, grid, &declined);
        out = kernel ? PyTuple_Pack(1, kernel) : declined ? Py_NewRef(Py_None) : NULL;
        Py_XDECREF(kernel);
    }
    Py_XDECREF(kw.names);
    Py_XDECREF(store);
    return out;
}

/* ``guard(program, args, kwargs)``: a plan's guard alone, ``(facts, values)`` or None (tests
 * compare it with the generated one). */
static PyObject *guard_py(PyObject *self, PyObject *const *argv, Py_ssize_t n) {
    if (n != 3 || !PyTuple_CheckExact(argv[1]) || !PyDict_CheckExact(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "guard(program, args: tuple, kwargs: dict)");
        return NULL;
    }
    Keywords kw = {NULL, NULL};
    PyObject *store = NULL, *facts, *values, *out = NULL;
    if (kw_from(argv[2], &kw, &store) == 0) {
        int found = guard(argv[0], argv[1], &kw, &facts, &values);
        if (found > 0) {
            out = PyTuple_Pack(2, facts, values);
            Py_DECREF(facts);
            Py_DECREF(values);
        } else if (found == 0) {
            out = Py_NewRef(Py_None);
        }
    }
    Py_XDECREF(kw.names);
    Py_XDECREF(store);
    return out;
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *instance, *fast, *shapes, *key_pos, *no_dtype, *slow;
    Py_ssize_t min_args;
} Hit;

/* ``getattr(obj, name, None)`` without raising AttributeError where there is none: 1 and ``*out``
 * set, 0 and ``*out`` NULL where there is none, -1 on another error. */
static int optional_attr(PyObject *obj, PyObject *name, PyObject **out) {
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(obj, name, out);
#else
    return _PyObject_LookupAttr(obj, name, out);
#endif
}

/* launch.py's ``_key_getter``: the key values, then each argument's dtype object (or the marker);
 * the dtypes are read before the tuple is made (a dtype may run Python code). NULL with an error
 * (IndexError where there are too many arguments to hold: the Python path serves those). */
static PyObject *raw_key(Hit *self, PyObject *args) {
    Py_ssize_t nk = PyTuple_GET_SIZE(self->key_pos), n = PyTuple_GET_SIZE(args);
    PyObject *dtypes[MOST_OPS];
    if (n > MOST_OPS) {
        PyErr_SetString(PyExc_IndexError, "too many arguments for the compiled key");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (optional_attr(PyTuple_GET_ITEM(args, i), s_dtype, &dtypes[i]) < 0) {
            for (Py_ssize_t j = 0; j < i; j++) Py_DECREF(dtypes[j]);
            return NULL;
        }
        if (dtypes[i] == NULL) dtypes[i] = Py_NewRef(self->no_dtype);
    }
    PyObject *key = PyTuple_New(nk + n);
    for (Py_ssize_t i = 0; key != NULL && i < nk; i++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(self->key_pos, i));
        if (at < 0 || at >= n) { /* min_args keeps this from happening */
            Py_CLEAR(key);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "key position");
            break;
        }
        PyTuple_SET_ITEM(key, i, Py_NewRef(PyTuple_GET_ITEM(args, at)));
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (key != NULL) PyTuple_SET_ITEM(key, nk + i, dtypes[i]);
        else Py_DECREF(dtypes[i]);
    }
    return key;
}

static PyObject *hit_call(PyObject *op, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    Hit *self = (Hit *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Keywords kw = {kwnames, argv + nargs};
    PyObject *grid, *warmup, *args = NULL, *key = NULL, *hit = NULL, *cache = NULL, *pre = NULL, *made = NULL,
             *shape = NULL, *result = NULL;
    if (kwnames == NULL) goto slow;
    for (Py_ssize_t j = 0; j < kw_count(&kw); j++) /* names a dict would look up otherwise: Python's */
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(kwnames, j))) goto slow;
    if ((grid = kw_get(&kw, s_grid)) == NULL || (warmup = kw_get(&kw, s_warmup)) == NULL ||
        PyObject_IsTrue(warmup) != 0)
        goto slow;
    args = PyTuple_New(nargs);
    if (args == NULL) goto slow;
    for (Py_ssize_t i = 0; i < nargs; i++) PyTuple_SET_ITEM(args, i, Py_NewRef(argv[i]));
    if (kw_count(&kw) == 2) { /* every kernel argument positional */
        if (nargs < self->min_args) goto slow;
        key = raw_key(self, args);
    } else { /* kernel arguments by keyword: the raw key of this shape of launch, as the Python path finds it */
        PyObject *count = PyLong_FromSsize_t(nargs);
        shape = count ? PyTuple_Pack(2, count, kwnames) : NULL;
        Py_XDECREF(count);
        PyObject *keyed = shape ? PyDict_GetItemWithError(self->shapes, shape) : NULL;
        if (keyed == NULL || keyed == Py_None || kw_made(&kw, &made) == NULL) goto slow;
        PyObject *pair[2] = {args, made};
        key = call(keyed, pair, 2);
    }
    hit = key ? PyDict_GetItemWithError(self->fast, key) : NULL;
    if (hit == NULL) goto slow;
    Py_INCREF(hit);
    if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 4 || PyTuple_GET_ITEM(hit, 2) == Py_None) goto slow;
    PyObject *config = PyTuple_GET_ITEM(hit, 0);
    cache = PyObject_GetAttr(self->instance, s_cache);
    if (cache == NULL || !PyDict_CheckExact(cache) || PyDict_GetItemWithError(cache, PyTuple_GET_ITEM(hit, 3)) != config)
        goto slow;
    pre = PyObject_GetAttr(config, s_pre_hook);
    if (pre != Py_None) goto slow;
    if (PyObject_SetAttr(self->instance, s_best_config, config) < 0) goto done;
    int declined;
    result = launch(PyTuple_GET_ITEM(hit, 2), args, &kw, grid, &declined);
    if (result == NULL && declined && kw_made(&kw, &made) != NULL) { /* the launcher takes it, as the Python path */
        PyObject *pair[2] = {args, made};
        result = call(PyTuple_GET_ITEM(hit, 2), pair, 2);
    }
    goto done;
slow:
    if (clear_ordinary())
        result = PyObject_Vectorcall(self->slow, argv, nargsf, kwnames);
done:
    Py_XDECREF(args); Py_XDECREF(key); Py_XDECREF(hit); Py_XDECREF(cache); Py_XDECREF(pre); Py_XDECREF(made);
    Py_XDECREF(shape);
    return result;
}

static PyObject *hit_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
    PyObject *instance, *fast, *shapes, *key_pos, *no_dtype, *slow;
    Py_ssize_t min_args;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Hit takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(a, "OO!O!O!OOn", &instance, &PyDict_Type, &fast, &PyDict_Type, &shapes, &PyTuple_Type,
                          &key_pos, &no_dtype, &slow, &min_args))
        return NULL;
    Hit *self = (Hit *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = hit_call;
    Py_INCREF(instance); Py_INCREF(fast); Py_INCREF(shapes); Py_INCREF(key_pos); Py_INCREF(no_dtype);
    Py_INCREF(slow);
    self->instance = instance, self->fast = fast, self->shapes = shapes, self->key_pos = key_pos,
    self->no_dtype = no_dtype,
    self->slow = slow, self->min_args = min_args;
    return (PyObject *)self;
}

static int hit_traverse(Hit *self, visitproc visit, void *arg) {
    Py_VISIT(self->instance); Py_VISIT(self->fast); Py_VISIT(self->shapes); Py_VISIT(self->key_pos);
    Py_VISIT(self->no_dtype);
    Py_VISIT(self->slow);
    return 0;
}

static int hit_clear(Hit *self) {
    Py_CLEAR(self->instance); Py_CLEAR(self->fast); Py_CLEAR(self->shapes); Py_CLEAR(self->key_pos);
    Py_CLEAR(self->no_dtype);
    Py_CLEAR(self->slow);
    return 0;
}

static void hit_dealloc(Hit *self) {
    PyObject_GC_UnTrack(self);
    hit_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *hit_slow(Hit *self, void *closure) {
    Py_INCREF(self->slow);
    return self->slow;
}

static PyGetSetDef hit_getset[] = {{"slow", (getter)hit_slow, NULL, "the Python path this one hands calls to", NULL},
                                   {NULL}};

static PyTypeObject HitType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_tdp_hit.Hit",
    .tp_basicsize = sizeof(Hit),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Hit(instance, fast, shapes, key_pos, no_dtype, slow, min_args): an Autotuner's cache-hit run",
    .tp_new = hit_new,
    .tp_dealloc = (destructor)hit_dealloc,
    .tp_traverse = (traverseproc)hit_traverse,
    .tp_clear = (inquiry)hit_clear,
    .tp_vectorcall_offset = offsetof(Hit, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getset = hit_getset,
};

/* ``tuner[grid]``, as ``KernelInterface.__getitem__``'s lambda does it: a callable that calls
 * ``tuner.run(grid=grid, warmup=False, *args, **kwargs)``, ``run`` looked up at the call. Installed as
 * ``Autotuner.__getitem__`` while the plugin is active (activation.py); it makes no frame, closure or
 * dict, and passes the keywords in the lambda's order (``grid``, ``warmup``, then the call's). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *instance, *grid, *weakrefs;
} Proxy;

static PyObject *launch_names, *s_run, *again; /* ("grid", "warmup"); "run"; the lambda's Python form */

static PyObject *proxy_call(PyObject *op, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    Proxy *self = (Proxy *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t j = 0; j < nkw; j++) { /* ``grid`` or ``warmup`` given again: the lambda's own error */
        PyObject *name = PyTuple_GET_ITEM(kwnames, j);
        if (!PyUnicode_CheckExact(name) || PyUnicode_Compare(name, s_grid) == 0 ||
            PyUnicode_Compare(name, s_warmup) == 0) {
            PyObject *args = PyTuple_New(nargs), *kwargs = PyDict_New(), *out = NULL;
            for (Py_ssize_t i = 0; args != NULL && i < nargs; i++) PyTuple_SET_ITEM(args, i, Py_NewRef(argv[i]));
            for (Py_ssize_t k = 0; kwargs != NULL && k < nkw; k++)
                if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, k), argv[nargs + k]) < 0) Py_CLEAR(kwargs);
            if (again == NULL) {
                PyErr_SetString(PyExc_RuntimeError, "_tdp_hit is not configured");
            } else if (args != NULL && kwargs != NULL) {
                PyObject *four[4] = {self->instance, self->grid, args, kwargs};
                out = PyObject_Vectorcall(again, four, 4, NULL);
            }
            Py_XDECREF(args);
            Py_XDECREF(kwargs);
            return out;
        }
    }
    PyObject *run = PyObject_GetAttr(self->instance, s_run), *names = NULL, *out = NULL;
    if (run == NULL) return NULL;
    if (nkw == 0) {
        names = Py_NewRef(launch_names);
    } else if ((names = PyTuple_New(2 + nkw)) != NULL) {
        PyTuple_SET_ITEM(names, 0, Py_NewRef(s_grid));
        PyTuple_SET_ITEM(names, 1, Py_NewRef(s_warmup));
        for (Py_ssize_t k = 0; k < nkw; k++) PyTuple_SET_ITEM(names, 2 + k, Py_NewRef(PyTuple_GET_ITEM(kwnames, k)));
    }
    Py_ssize_t total = nargs + 2 + nkw;
    PyObject *small[65], **stack = total < 65 ? small : PyMem_Malloc((total + 1) * sizeof(PyObject *));
    if (names != NULL && stack != NULL) {
        PyObject **at = stack + 1; /* a free slot before the arguments (PY_VECTORCALL_ARGUMENTS_OFFSET) */
        for (Py_ssize_t i = 0; i < nargs; i++) at[i] = argv[i];
        at[nargs] = self->grid, at[nargs + 1] = Py_False;
        for (Py_ssize_t k = 0; k < nkw; k++) at[nargs + 2 + k] = argv[nargs + k];
        out = PyObject_Vectorcall(run, at, nargs | PY_VECTORCALL_ARGUMENTS_OFFSET, names);
    } else if (stack == NULL) {
        PyErr_NoMemory();
    }
    if (stack != NULL && stack != small) PyMem_Free(stack);
    Py_DECREF(run);
    Py_XDECREF(names);
    return out;
}

static int proxy_traverse(Proxy *self, visitproc visit, void *arg) {
    Py_VISIT(self->instance); Py_VISIT(self->grid);
    return 0;
}

static int proxy_clear(Proxy *self) {
    Py_CLEAR(self->instance); Py_CLEAR(self->grid);
    return 0;
}

static void proxy_dealloc(Proxy *self) {
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, proxy_dealloc) /* a long chain of them (each the next one's grid) frees iteratively */
    if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
    proxy_clear(self);
    PyObject_GC_Del(self);
    Py_TRASHCAN_END
}

/* What a copy of the lambda is: the lambda itself (``copy`` treats functions as atomic). */
static PyObject *proxy_copy(PyObject *self, PyObject *const *argv, Py_ssize_t n) {
    (void)argv, (void)n;
    return Py_NewRef(self);
}

static PyObject *proxy_name(PyObject *self, void *closure) {
    (void)self;
    return PyUnicode_FromString(closure != NULL ? "KernelInterface.__getitem__.<locals>.<lambda>" : "<lambda>");
}

static PyMethodDef proxy_methods[] = {
    {"__copy__", (PyCFunction)(void (*)(void))proxy_copy, METH_FASTCALL, "the same object, as for a function"},
    {"__deepcopy__", (PyCFunction)(void (*)(void))proxy_copy, METH_FASTCALL, "the same object, as for a function"},
    {NULL, NULL, 0, NULL}};

/* The lambda's names, for code that prints or logs them. */
static PyGetSetDef proxy_getset[] = {{"__name__", proxy_name, NULL, "the lambda's name", NULL},
                                     {"__qualname__", proxy_name, NULL, "the lambda's qualified name", (void *)1},
                                     {NULL}};

static PyTypeObject ProxyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_tdp_hit.Launch",
    .tp_basicsize = sizeof(Proxy),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "tuner[grid]: calling it calls tuner.run(grid=grid, warmup=False, *args, **kwargs)",
    .tp_dealloc = (destructor)proxy_dealloc,
    .tp_traverse = (traverseproc)proxy_traverse,
    .tp_clear = (inquiry)proxy_clear,
    .tp_vectorcall_offset = offsetof(Proxy, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_weaklistoffset = offsetof(Proxy, weakrefs),
    .tp_methods = proxy_methods,
    .tp_getset = proxy_getset,
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
} Subscript;

static PyObject *s_self;

/* ``Subscript()(tuner, grid)``, either by keyword as the function's parameters: the ``Launch`` for
 * ``tuner[grid]``. */
static PyObject *subscript_call(PyObject *op, PyObject *const *argv, size_t nargsf, PyObject *kwnames) {
    (void)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *given[2] = {nargs > 0 ? argv[0] : NULL, nargs > 1 ? argv[1] : NULL};
    int bad = nargs > 2;
    for (Py_ssize_t k = 0; k < nkw && !bad; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int slot = PyUnicode_Check(name) && PyUnicode_Compare(name, s_self) == 0 ? 0
                   : PyUnicode_Check(name) && PyUnicode_Compare(name, s_grid) == 0 ? 1 : -1;
        if (PyErr_Occurred()) return NULL;
        if (slot < 0 || given[slot] != NULL) bad = 1;
        else given[slot] = argv[nargs + k];
    }
    if (bad || given[0] == NULL || given[1] == NULL) {
        PyErr_SetString(PyExc_TypeError, "__getitem__() takes exactly the arguments self and grid");
        return NULL;
    }
    Proxy *p = PyObject_GC_New(Proxy, &ProxyType);
    if (p == NULL) return NULL;
    p->vectorcall = proxy_call;
    p->instance = Py_NewRef(given[0]), p->grid = Py_NewRef(given[1]), p->weakrefs = NULL;
    PyObject_GC_Track(p);
    return (PyObject *)p;
}

static PyObject *subscript_name(PyObject *self, void *closure) {
    (void)self;
    return PyUnicode_FromString(closure != NULL ? "KernelInterface.__getitem__" : "__getitem__");
}

static PyObject *subscript_signature(PyObject *self, void *closure) {
    (void)self, (void)closure;
    return PyUnicode_FromString("(self, grid)");
}

/* The function's names and signature, for ``inspect`` and ``help``. */
static PyGetSetDef subscript_getset[] = {
    {"__name__", subscript_name, NULL, "the function's name", NULL},
    {"__qualname__", subscript_name, NULL, "the function's qualified name", (void *)1},
    {"__text_signature__", subscript_signature, NULL, "its parameters, for inspect.signature", NULL},
    {NULL}};

/* Looked up on an instance (``tuner.__getitem__``), it binds as a function does. */
static PyObject *subscript_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *subscript_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
    if (PyTuple_GET_SIZE(a) || (kw != NULL && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "Subscript() takes no arguments");
        return NULL;
    }
    Subscript *self = (Subscript *)type->tp_alloc(type, 0);
    if (self != NULL) self->vectorcall = subscript_call;
    return (PyObject *)self;
}

static PyTypeObject SubscriptType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_tdp_hit.Subscript",
    .tp_basicsize = sizeof(Subscript),
    /* a method descriptor: ``tuner[grid]`` calls it with the tuner first, binding nothing */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "Autotuner.__getitem__ in C: tuner[grid] is a Launch",
    .tp_new = subscript_new,
    .tp_vectorcall_offset = offsetof(Subscript, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = subscript_get,
    .tp_getset = subscript_getset,
};

/* ``configure(tensor type, parameter type, hook chain type or None, again)``: what the guard and the
 * hook check compare with, and ``again(tuner, grid, args, kwargs)``, the launch lambda in Python. */
static PyObject *configure(PyObject *self, PyObject *const *argv, Py_ssize_t n) {
    if (n != 4 || !PyType_Check(argv[0]) || !PyType_Check(argv[1]) || (argv[2] != Py_None && !PyType_Check(argv[2])) ||
        !PyCallable_Check(argv[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "configure(tensor type, parameter type, hook chain type or None, the launch lambda's form)");
        return NULL;
    }
    Py_XSETREF(again, Py_NewRef(argv[3]));
    Py_XDECREF(t_tensor);
    Py_XDECREF(t_param);
    Py_XDECREF(t_chain);
    t_tensor = Py_NewRef(argv[0]);
    t_param = Py_NewRef(argv[1]);
    t_chain = argv[2] == Py_None ? NULL : Py_NewRef(argv[2]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL, "set the tensor and hook-chain types"},
    {"launch", (PyCFunction)(void (*)(void))launch_py, METH_FASTCALL, "launch(launcher, args, kwargs)"},
    {"guard", (PyCFunction)(void (*)(void))guard_py, METH_FASTCALL, "guard(program, args, kwargs)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tdp_hit", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tdp_hit(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_grid, "grid"}, {&s_warmup, "warmup"}, {&s_cache, "cache"}, {&s_best_config, "best_config"},
        {&s_pre_hook, "pre_hook"}, {&s_dtype, "dtype"}, {&s_data_ptr, "data_ptr"}, {&s_calls, "calls"},
        {&s_c_state, "c_state"}, {&s_off, "off"}, {&s_plans, "plans"}, {&s_program, "program"},
        {&s_entries, "entries"}, {&s_pre_run_hooks, "pre_run_hooks"},
        {&s_used_global_vals, "used_global_vals"}, {&s_stage_hook, "add_stages_inspection_hook"},
        {&s_enter, "launch_enter_hook"}, {&s_leave, "launch_exit_hook"}, {&s_active, "active"},
        {&s_get_device, "get_current_device"}, {&s_get_stream, "get_current_stream"},
        {&s_device_caches, "device_caches"}, {&s_debug, "debug"}, {&s_run, "run"}, {&s_self, "self"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    for (long d = 0; d < 3; d++)
        if ((dims[d] = PyLong_FromLong(d)) == NULL) return NULL;
    for (long c = 0; c < 4; c++) /* an integer's size classes, made once */
        if ((sizes[c] = PyLong_FromLong(c)) == NULL) return NULL;
    if ((launch_names = PyTuple_Pack(2, s_grid, s_warmup)) == NULL) return NULL;
    if (PyType_Ready(&HitType) < 0 || PyType_Ready(&ProxyType) < 0 || PyType_Ready(&SubscriptType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&HitType);
    if (PyModule_AddObject(m, "Hit", (PyObject *)&HitType) < 0) return NULL;
    Py_INCREF(&SubscriptType);
    if (PyModule_AddObject(m, "Subscript", (PyObject *)&SubscriptType) < 0) return NULL;
    return m;
}
