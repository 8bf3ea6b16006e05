/* _hooks: the per-module hooks of mlprof.torch.profile_model, in C.
 *
 * A module's forward pre and post hooks run on every call of every module,
 * and after each forward the autograd graph the module made is walked to
 * find where its backward ends; written in Python this cost 16-18 µs per
 * module per forward+backward, most of it Python frames, the objects they
 * made and the collector passes those objects brought on. Here:
 *
 *   - layer_hooks() makes one Layer per module; its bound methods pre and
 *     post are the forward hooks (no Python frame);
 *   - the forward zones open on a thread, the backward zones open and the
 *     graph walked in the current forward are per-thread C state;
 *   - a backward zone is a BackwardZone (the hook on the module's output
 *     tensor, which begins it) ended by EndHooks on the module's last
 *     autograd nodes. Neither holds a node nor a container, so neither is
 *     tracked by the collector (a node's hooks referring to the node would
 *     be a cycle the collector clears, hooks and all).
 *
 * What stays in Python (mlprof/torch.py): module_flops (run once per layer
 * and input shape) and the rare count of a module's own operators through
 * torch's profiler. */
#include "_hooks.h"

#include <stdint.h>

/* The graph walk gives up past this many nodes (it left the module through
 * a tensor captured from outside). */
#define MAX_BACKWARD_NODES 20000

/* What the layers of one ModelProfile share: a tuple built by torch.py. */
enum {
  SH_FLOPS,        /* dict: key -> forward FLOPs of the last call */
  SH_CALLS,        /* dict: key -> forward calls */
  SH_INNERMOST,    /* set of keys whose last call ran no hooked module */
  SH_MEASURE,      /* set of keys whose own operators' FLOPs to count */
  SH_FLOP_CACHE,   /* dict: (key, input shape) -> FLOPs */
  SH_MODULE_FLOPS, /* module_flops(module, inputs, output) */
  SH_OWN_BEGIN,    /* () -> a started torch profiler, or None */
  SH_OWN_END,      /* (profiler) -> FLOPs it counted (stops it) */
  SH_GRAD_ENABLED, /* torch.is_grad_enabled */
  SH_TENSOR,       /* torch.Tensor */
  SH_ACCUMULATE,   /* the type of the nodes that store a leaf's gradient */
  SH_N
};

static PyObject *s_shape, *s_grad_fn, *s_next_functions, *s_requires_grad,
    *s_backward_hooks, *s_register_hook_dict, *s_register_hook;

/* ---- per-thread state ---------------------------------------------------- */

typedef struct {
  PyObject *module; /* identity only, not owned */
  uint64_t calls;   /* the thread's hooked calls when it began */
} fwd_open;

/* Module pointers compared by identity; the objects referred to are owned
 * (bwd, measuring, the dicts). A thread's state lives as long as the
 * process (a few pointers and two small dicts). */
static __thread struct {
  fwd_open *fwd; /* forward zones open, innermost last */
  size_t nfwd, capfwd;
  PyObject **bwd; /* BackwardZones open, innermost last */
  size_t nbwd, capbwd;
  uint64_t calls;      /* hooked module calls begun on this thread */
  int backward_off;    /* this forward of the model gets no backward zones */
  PyObject *walked;    /* output node -> (nodes just outside, last cands) */
  PyObject *ends;      /* node -> EndHook put on it in this forward */
  PyObject *measuring; /* torch profiler counting a module's own FLOPs */
  PyObject *measuring_module;
} ts;

static int grow(void **arr, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return 0;
  size_t c = *cap ? 2 * *cap : 16;
  void *p = PyMem_Realloc(*arr, c * size);
  if (!p) {
    PyErr_NoMemory();
    return -1;
  }
  *arr = p;
  *cap = c;
  return 0;
}

/* ---- BackwardZone: the hook on a module call's output ------------------- */

typedef struct {
  PyObject_HEAD const mlprof_site *site;
  Py_ssize_t ends, left; /* last nodes; those not run yet */
  int open;
  uint64_t flops;
} BackwardZone;

static PyTypeObject BackwardZoneType;

/* The gradient of the output is ready: the zone begins. A hook on a tensor
 * changed in place later (ReLU(inplace=True)) runs where the tensor was
 * made, after the module's nodes: no zone then, rather than one that would
 * close another's. */
static PyObject *BackwardZone_call(BackwardZone *z, PyObject *args,
                                   PyObject *kw) {
  if (z->left == z->ends && !z->open) {
    if (grow((void **)&ts.bwd, &ts.capbwd, ts.nbwd, sizeof *ts.bwd) < 0)
      return NULL;
    Py_INCREF(z);
    ts.bwd[ts.nbwd++] = (PyObject *)z;
    z->open = 1;
    mlprof__py_zone_enter(z->site);
    if (z->flops) mlprof__py_units_add("flops", z->flops);
  }
  Py_RETURN_NONE;
}

/* Ends z if open (then the innermost zone open on the thread). */
static void bwd_close(BackwardZone *z) {
  if (z->open) {
    z->open = 0;
    mlprof__py_zone_exit();
  }
}

static PyTypeObject BackwardZoneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mlprof._mlprof.BackwardZone",
    .tp_basicsize = sizeof(BackwardZone),
    .tp_dealloc = (destructor)PyObject_Free,
    .tp_call = (ternaryfunc)BackwardZone_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A module call's backward zone (the hook on its output).",
};

/* ---- EndHook: the hook on a node that backward zones end with ----------- */

/* The zones of a module and of those around it share it (closed inner
 * first, as they were added). */
typedef struct {
  PyObject_HEAD BackwardZone **zones; /* owned */
  Py_ssize_t n, cap;
} EndHook;

static void EndHook_dealloc(EndHook *e) {
  for (Py_ssize_t i = 0; i < e->n; i++) Py_DECREF(e->zones[i]);
  PyMem_Free(e->zones);
  PyObject_Free(e);
}

static PyObject *EndHook_call(EndHook *e, PyObject *args, PyObject *kw) {
  for (Py_ssize_t i = 0; i < e->n; i++) {
    BackwardZone *z = e->zones[i];
    if (--z->left != 0 || !z->open) continue;
    if (ts.nbwd && ts.bwd[ts.nbwd - 1] == (PyObject *)z) {
      ts.nbwd--;
      Py_DECREF(z); /* e still holds it */
    }
    bwd_close(z);
  }
  Py_RETURN_NONE;
}

static PyTypeObject EndHookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mlprof._mlprof.EndHook",
    .tp_basicsize = sizeof(EndHook),
    .tp_dealloc = (destructor)EndHook_dealloc,
    .tp_call = (ternaryfunc)EndHook_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ends backward zones when its node has run.",
};

/* ---- the graph walk ------------------------------------------------------ */

/* Whether any item of the iterable `nodes` is in the set `in`; -1 on error. */
static int any_in(PyObject *nodes, PyObject *in) {
  PyObject *it = PyObject_GetIter(nodes), *n;
  if (!it) return -1;
  int r = 0;
  while (r == 0 && (n = PyIter_Next(it))) {
    r = PySet_Contains(in, n);
    Py_DECREF(n);
  }
  Py_DECREF(it);
  return r < 0 || PyErr_Occurred() ? -1 : r;
}

/* The nodes a node feeds, gradients of leaves left out: a new list. */
static PyObject *node_nexts(PyObject *node, PyObject *acc_type) {
  PyObject *nf = PyObject_GetAttr(node, s_next_functions);
  if (!nf) return NULL;
  PyObject *out = PyList_New(0);
  if (out && PyTuple_Check(nf)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(nf); i++) {
      PyObject *pair = PyTuple_GET_ITEM(nf, i);
      if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) < 1) continue;
      PyObject *n = PyTuple_GET_ITEM(pair, 0);
      if (n == Py_None || (PyObject *)Py_TYPE(n) == acc_type) continue;
      if (PyList_Append(out, n) < 0) {
        Py_CLEAR(out);
        break;
      }
    }
  }
  Py_DECREF(nf);
  return out;
}

/* The autograd nodes a module's backward ends with: those its forward made
 * (reachable from its output node root, the graph of its input tensors xs
 * excluded) that feed none of the others. A new list; Py_None past
 * MAX_BACKWARD_NODES nodes; NULL on error.
 *
 * ts.walked holds the modules already walked in this forward (those inside
 * this one), by output node: (the nodes just outside the module, its last
 * nodes with what each feeds). The walk crosses such a module from its
 * output straight to its outside, so each node is walked once, not once per
 * enclosing module. */
static PyObject *last_nodes(PyObject *root, PyObject *xs, PyObject *acc) {
  PyObject *outside = PySet_New(NULL), *inside = PySet_New(NULL);
  PyObject *stack = PyList_New(0), *cands = PyList_New(0);
  PyObject *last = NULL, *out = NULL, *result = NULL, *node = NULL;
  if (!outside || !inside || !stack || !cands) goto done;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(xs); i++) {
    PyObject *g = PyObject_GetAttr(PyList_GET_ITEM(xs, i), s_grad_fn);
    int rc = g && g != Py_None ? PySet_Add(outside, g) : 0;
    Py_XDECREF(g);
    if (!g || rc < 0) goto done;
  }
  if (PyList_Append(stack, root) < 0) goto done;
  while (PyList_GET_SIZE(stack)) {
    Py_ssize_t top = PyList_GET_SIZE(stack) - 1;
    node = PyList_GET_ITEM(stack, top);
    Py_INCREF(node);
    if (PyList_SetSlice(stack, top, top + 1, NULL) < 0) goto done;
    int seen = PySet_Contains(inside, node);
    if (seen < 0) goto done;
    if (seen) {
      Py_CLEAR(node);
      continue;
    }
    if (PySet_Add(inside, node) < 0) goto done;
    if (PySet_GET_SIZE(inside) > MAX_BACKWARD_NODES) {
      Py_INCREF(Py_None);
      result = Py_None;
      goto done;
    }
    PyObject *nexts, *crossed = PyDict_GetItemWithError(ts.walked, node);
    if (crossed) { /* (out set, list of (node, nexts)) */
      nexts = PyTuple_GET_ITEM(crossed, 0);
      Py_INCREF(nexts);
      PyObject *l = PyTuple_GET_ITEM(crossed, 1);
      if (PyList_SetSlice(cands, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, l) < 0) {
        Py_DECREF(nexts);
        goto done;
      }
    } else {
      if (PyErr_Occurred() || !(nexts = node_nexts(node, acc))) goto done;
      PyObject *c = PyTuple_Pack(2, node, nexts);
      int rc = c ? PyList_Append(cands, c) : -1;
      Py_XDECREF(c);
      if (rc < 0) {
        Py_DECREF(nexts);
        goto done;
      }
    }
    Py_CLEAR(node);
    PyObject *it = PyObject_GetIter(nexts), *n;
    Py_DECREF(nexts);
    if (!it) goto done;
    while ((n = PyIter_Next(it))) {
      int o = PySet_Contains(outside, n),
          in = o ? 0 : PySet_Contains(inside, n);
      int rc = o < 0 || in < 0 ? -1 : !o && !in ? PyList_Append(stack, n) : 0;
      Py_DECREF(n);
      if (rc < 0) break;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) goto done;
  }
  last = PyList_New(0);
  out = PySet_New(NULL);
  if (!last || !out) goto done;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cands); i++) {
    PyObject *c = PyList_GET_ITEM(cands, i), *nexts = PyTuple_GET_ITEM(c, 1);
    int feeds = any_in(nexts, inside);
    if (feeds < 0 || (!feeds && PyList_Append(last, c) < 0)) goto done;
    PyObject *it = PyObject_GetIter(nexts), *n;
    if (!it) goto done;
    while ((n = PyIter_Next(it))) {
      int in = PySet_Contains(inside, n);
      int rc = in < 0 ? -1 : !in ? PySet_Add(out, n) : 0;
      Py_DECREF(n);
      if (rc < 0) break;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) goto done;
  }
  PyObject *w = PyTuple_Pack(2, out, last);
  int rc = w ? PyDict_SetItem(ts.walked, root, w) : -1;
  Py_XDECREF(w);
  if (rc < 0) goto done;
  result = PyList_New(PyList_GET_SIZE(last));
  for (Py_ssize_t i = 0; result && i < PyList_GET_SIZE(last); i++) {
    PyObject *n = PyTuple_GET_ITEM(PyList_GET_ITEM(last, i), 0);
    Py_INCREF(n);
    PyList_SET_ITEM(result, i, n);
  }
done:
  Py_XDECREF(node);
  Py_XDECREF(outside);
  Py_XDECREF(inside);
  Py_XDECREF(stack);
  Py_XDECREF(cands);
  Py_XDECREF(last);
  Py_XDECREF(out);
  return result;
}

/* ---- Layer: one module's hooks ------------------------------------------ */

typedef struct {
  PyObject_HEAD PyObject *key; /* the module's key in the ModelProfile */
  const mlprof_site *fwd, *bwd, *over;
  int root, leaf, backward, flops;
  unsigned long every; /* the model's: backward zones in 1 forward of every */
  unsigned long forwards; /* the model's forwards begun */
  PyObject *params;       /* tuple of the module's parameters */
  PyObject *sh;           /* tuple, SH_* */
} Layer;

/* Appends the tensors in x (a tensor, or lists, tuples and dicts of them)
 * to the list out, in order. */
static int tensors(PyObject *x, PyObject *tensor, PyObject *out) {
  if (PyObject_TypeCheck(x, (PyTypeObject *)tensor))
    return PyList_Append(out, x);
  if (PyDict_Check(x)) {
    PyObject *v = PyDict_Values(x);
    int rc = v ? tensors(v, tensor, out) : -1;
    Py_XDECREF(v);
    return rc;
  }
  if (!PyList_Check(x) && !PyTuple_Check(x)) return 0;
  PyObject *seq = PySequence_Fast(x, "");
  if (!seq) return -1;
  int rc = 0;
  for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++)
    rc = tensors(PySequence_Fast_GET_ITEM(seq, i), tensor, out);
  Py_DECREF(seq);
  return rc;
}

/* Whether any of the objects in seq (a list or tuple) has a true
 * requires_grad; -1 on error. */
static int any_requires_grad(PyObject *seq) {
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject *r =
        PyObject_GetAttr(PySequence_Fast_GET_ITEM(seq, i), s_requires_grad);
    if (!r) return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (t) return t;
  }
  return 0;
}

/* Closes what an earlier forward left open on this thread (an exception in
 * the model, or a backward through part of the graph: autograd.grad), at
 * the start of the model's forward. */
static void thread_reset(Layer *l) {
  PyDict_Clear(ts.walked);
  PyDict_Clear(ts.ends);
  while (ts.nfwd) {
    ts.nfwd--;
    mlprof__py_zone_exit();
  }
  while (ts.nbwd) {
    BackwardZone *z = (BackwardZone *)ts.bwd[--ts.nbwd];
    bwd_close(z);
    Py_DECREF(z);
  }
  if (ts.measuring) {
    PyObject *p = ts.measuring, *r;
    ts.measuring = ts.measuring_module = NULL;
    r = PyObject_CallOneArg(PyTuple_GET_ITEM(l->sh, SH_OWN_END), p);
    if (!r) PyErr_WriteUnraisable(p);
    Py_XDECREF(r);
    Py_DECREF(p);
  }
}

/* The thread's dicts, made at its first hook call. 0, or -1 on error. */
static int thread_init(void) {
  if (!ts.walked && !(ts.walked = PyDict_New())) return -1;
  if (!ts.ends && !(ts.ends = PyDict_New())) return -1;
  return 0;
}

static PyObject *Layer_pre(Layer *l, PyObject *const *args, Py_ssize_t n) {
  if (n != 2) {
    PyErr_SetString(PyExc_TypeError, "pre(module, inputs)");
    return NULL;
  }
  if (thread_init() < 0) return NULL;
  if (l->root) {
    thread_reset(l);
    ts.backward_off = l->forwards++ % l->every != 0;
  }
  PyObject *measure = PyTuple_GET_ITEM(l->sh, SH_MEASURE);
  if (PySet_GET_SIZE(measure) && !ts.measuring) {
    int want = PySet_Contains(measure, l->key);
    if (want < 0) return NULL;
    if (want) {
      mlprof__py_zone_enter(l->over);
      PyObject *p = PyObject_CallNoArgs(PyTuple_GET_ITEM(l->sh, SH_OWN_BEGIN));
      mlprof__py_zone_exit();
      if (!p) return NULL;
      if (p == Py_None) {
        Py_DECREF(p);
      } else {
        ts.measuring = p;
        ts.measuring_module = args[0];
      }
    }
  }
  if (grow((void **)&ts.fwd, &ts.capfwd, ts.nfwd, sizeof *ts.fwd) < 0)
    return NULL;
  ts.fwd[ts.nfwd++] = (fwd_open){args[0], ++ts.calls};
  mlprof__py_zone_enter(l->fwd);
  Py_RETURN_NONE;
}

/* The forward FLOPs of this call, from the cache by input shape (computed
 * by module_flops for a leaf), or NULL for not known: the module's own
 * operators are then counted in its next call. *shape_key gets the cache's
 * key. -1 on error. */
static int call_flops(Layer *l, PyObject *const *args, PyObject *xs,
                      PyObject **f, PyObject **shape_key) {
  PyObject *cache = PyTuple_GET_ITEM(l->sh, SH_FLOP_CACHE);
  PyObject *shape = PyList_GET_SIZE(xs)
                        ? PyObject_GetAttr(PyList_GET_ITEM(xs, 0), s_shape)
                        : (Py_INCREF(Py_None), Py_None);
  if (!shape) return -1;
  *shape_key = PyTuple_Pack(2, l->key, shape);
  Py_DECREF(shape);
  if (!*shape_key) return -1;
  *f = PyDict_GetItemWithError(cache, *shape_key);
  if (*f) {
    Py_INCREF(*f);
    return 0;
  }
  if (PyErr_Occurred()) return -1;
  if (!l->leaf) return 0;
  *f = PyObject_Vectorcall(PyTuple_GET_ITEM(l->sh, SH_MODULE_FLOPS), args, 3,
                           NULL);
  if (!*f) return -1;
  return PyDict_SetItem(cache, *shape_key, *f);
}

/* After a module call that needs gradients: the walk of what it made, a
 * BackwardZone first among its output's hooks (the enclosing module's,
 * added after its children's, must run first so that zones nest) and
 * EndHooks on its last nodes. 0, or -1 on error. */
static int backward_zone(Layer *l, PyObject *y, PyObject *grad_fn, PyObject *xs,
                         uint64_t flops) {
  PyObject *last =
      last_nodes(grad_fn, xs, PyTuple_GET_ITEM(l->sh, SH_ACCUMULATE));
  if (!last) return -1;
  int rc = -1;
  BackwardZone *z = NULL;
  PyObject *hooks = NULL;
  if (last == Py_None || PyList_GET_SIZE(last) == 0) {
    rc = 0;
    goto done;
  }
  if (!(z = PyObject_New(BackwardZone, &BackwardZoneType))) goto done;
  z->site = l->bwd;
  z->ends = z->left = PyList_GET_SIZE(last);
  z->open = 0;
  z->flops = flops;
  /* The tensor's hook dictionary, set directly: Tensor.register_hook's
   * handle costs about a microsecond, and these hooks go with the graph. */
  if (!(hooks = PyObject_GetAttr(y, s_backward_hooks))) goto done;
  if (hooks == Py_None) {
    Py_DECREF(hooks);
    if (!(hooks = PyDict_New()) ||
        PyDict_SetItem(hooks, (PyObject *)z, (PyObject *)z) < 0 ||
        PyObject_SetAttr(y, s_backward_hooks, hooks) < 0)
      goto done;
    PyObject *r = PyObject_CallMethodOneArg(grad_fn, s_register_hook_dict, y);
    if (!r) goto done;
    Py_DECREF(r);
  } else { /* z first; an OrderedDict of the user's hooks too */
    PyObject *rest = PyMapping_Items(hooks);
    if (!rest) goto done;
    PyObject *r = PyObject_CallMethod(hooks, "clear", NULL);
    int bad = !r || PyObject_SetItem(hooks, (PyObject *)z, (PyObject *)z) < 0;
    Py_XDECREF(r);
    for (Py_ssize_t i = 0; !bad && i < PyList_GET_SIZE(rest); i++) {
      PyObject *kv = PyList_GET_ITEM(rest, i);
      bad = PyObject_SetItem(hooks, PyTuple_GET_ITEM(kv, 0),
                             PyTuple_GET_ITEM(kv, 1)) < 0;
    }
    Py_DECREF(rest);
    if (bad) goto done;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(last); i++) {
    PyObject *node = PyList_GET_ITEM(last, i);
    EndHook *e = (EndHook *)PyDict_GetItemWithError(ts.ends, node);
    if (!e) {
      if (PyErr_Occurred()) goto done;
      if (!(e = PyObject_New(EndHook, &EndHookType))) goto done;
      e->zones = NULL;
      e->n = e->cap = 0;
      int bad = PyDict_SetItem(ts.ends, node, (PyObject *)e) < 0;
      Py_DECREF(e); /* ts.ends holds it */
      if (bad) goto done;
      PyObject *h =
          PyObject_CallMethodOneArg(node, s_register_hook, (PyObject *)e);
      if (!h) goto done;
      Py_DECREF(h);
    }
    size_t cap = (size_t)e->cap;
    if (grow((void **)&e->zones, &cap, (size_t)e->n, sizeof *e->zones) < 0)
      goto done;
    e->cap = (Py_ssize_t)cap;
    Py_INCREF(z);
    e->zones[e->n++] = z;
  }
  rc = 0;
done:
  Py_XDECREF(hooks);
  Py_XDECREF(z);
  Py_DECREF(last);
  return rc;
}

static PyObject *Layer_post(Layer *l, PyObject *const *args, Py_ssize_t n) {
  if (n != 3) {
    PyErr_SetString(PyExc_TypeError, "post(module, inputs, output)");
    return NULL;
  }
  if (thread_init() < 0) return NULL;
  PyObject *module = args[0], *sh = l->sh;
  /* This module's zone, closing any left open inside it. */
  int found = 0;
  uint64_t calls = 0;
  while (ts.nfwd) {
    fwd_open e = ts.fwd[--ts.nfwd];
    if (e.module == module) {
      found = 1;
      calls = e.calls;
      break;
    }
    mlprof__py_zone_exit();
  }
  int inner = found && calls == ts.calls; /* no hooked module ran inside */
  PyObject *xs = PyList_New(0), *f = NULL, *shape_key = NULL, *c = NULL;
  int over = 0;
  if (!xs || tensors(args[1], PyTuple_GET_ITEM(sh, SH_TENSOR), xs) < 0)
    goto fail;
  uint64_t nf = 0;
  if (l->flops && (l->leaf || inner)) {
    if (call_flops(l, args, xs, &f, &shape_key) < 0) goto fail;
    if (!f) {
      if (PySet_Add(PyTuple_GET_ITEM(sh, SH_MEASURE), l->key) < 0) goto fail;
    } else {
      if (PyDict_SetItem(PyTuple_GET_ITEM(sh, SH_FLOPS), l->key, f) < 0)
        goto fail;
      nf = PyLong_AsUnsignedLongLong(f);
      if (PyErr_Occurred()) goto fail;
      if (nf) mlprof__py_units_add("flops", nf);
    }
  }
  PyObject *innermost = PyTuple_GET_ITEM(sh, SH_INNERMOST);
  if ((inner ? PySet_Add(innermost, l->key)
             : PySet_Discard(innermost, l->key)) < 0)
    goto fail;
  PyObject *cd = PyTuple_GET_ITEM(sh, SH_CALLS);
  PyObject *was = PyDict_GetItemWithError(cd, l->key);
  if (!was && PyErr_Occurred()) goto fail;
  c = PyLong_FromLongLong(was ? PyLong_AsLongLong(was) + 1 : 1);
  if (!c || PyDict_SetItem(cd, l->key, c) < 0) goto fail;
  if (found) mlprof__py_zone_exit();
  found = 0;
  if (ts.measuring && ts.measuring_module == module) {
    mlprof__py_zone_enter(l->over); /* torch's profiler stops outside */
    over = 1;
    PyObject *p = ts.measuring;
    ts.measuring = ts.measuring_module = NULL;
    PyObject *fm = PyObject_CallOneArg(PyTuple_GET_ITEM(sh, SH_OWN_END), p);
    Py_DECREF(p);
    if (!fm || PySet_Discard(PyTuple_GET_ITEM(sh, SH_MEASURE), l->key) < 0)
      goto fail;
    int bad = inner && shape_key &&
              (PyDict_SetItem(PyTuple_GET_ITEM(sh, SH_FLOP_CACHE), shape_key,
                              fm) < 0 ||
               PyDict_SetItem(PyTuple_GET_ITEM(sh, SH_FLOPS), l->key, fm) < 0);
    Py_DECREF(fm);
    if (bad) goto fail;
    mlprof__py_zone_exit();
    over = 0;
  }
  if (l->backward && !ts.backward_off) {
    PyObject *g = PyObject_CallNoArgs(PyTuple_GET_ITEM(sh, SH_GRAD_ENABLED));
    if (!g) goto fail;
    int on = g == Py_True;
    Py_DECREF(g);
    PyObject *ys = on ? PyList_New(0) : NULL;
    if (on &&
        (!ys || tensors(args[2], PyTuple_GET_ITEM(sh, SH_TENSOR), ys) < 0)) {
      Py_XDECREF(ys);
      goto fail;
    }
    PyObject *y = ys && PyList_GET_SIZE(ys) ? PyList_GET_ITEM(ys, 0) : NULL;
    /* A module that changed its input in place (ReLU(inplace=True))
     * returns it: a hook on it would run where the tensor was made, before
     * the module's backward, not after. */
    for (Py_ssize_t i = 0; y && i < PyList_GET_SIZE(xs); i++)
      if (PyList_GET_ITEM(xs, i) == y) y = NULL;
    PyObject *gf = y ? PyObject_GetAttr(y, s_grad_fn) : NULL;
    int rc = y && !gf ? -1 : 0;
    if (gf && gf != Py_None) {
      mlprof__py_zone_enter(l->over);
      over = 1;
      /* The gradient of the input only when it needs one, the weights'
       * only when they do. */
      int xg = any_requires_grad(xs), pg = any_requires_grad(l->params);
      rc = xg < 0 || pg < 0
               ? -1
               : backward_zone(l, y, gf, xs, nf * (uint64_t)(xg + pg));
    }
    Py_XDECREF(gf);
    Py_XDECREF(ys);
    if (rc < 0) goto fail;
    if (over) mlprof__py_zone_exit();
    over = 0;
  }
  if (l->root) { /* the graph's nodes are not kept alive */
    PyDict_Clear(ts.walked);
    PyDict_Clear(ts.ends);
  }
  Py_DECREF(xs);
  Py_XDECREF(f);
  Py_XDECREF(shape_key);
  Py_DECREF(c);
  Py_RETURN_NONE;
fail:
  if (over) mlprof__py_zone_exit();
  if (found) mlprof__py_zone_exit();
  Py_XDECREF(xs);
  Py_XDECREF(f);
  Py_XDECREF(shape_key);
  Py_XDECREF(c);
  return NULL;
}

static void Layer_dealloc(Layer *l) {
  Py_XDECREF(l->key);
  Py_XDECREF(l->params);
  Py_XDECREF(l->sh);
  PyObject_Free(l);
}

static PyMethodDef Layer_methods[] = {
    {"pre", (PyCFunction)(void (*)(void))Layer_pre, METH_FASTCALL,
     "The forward pre-hook: pre(module, inputs)."},
    {"post", (PyCFunction)(void (*)(void))Layer_post, METH_FASTCALL,
     "The forward hook: post(module, inputs, output)."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject LayerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mlprof._mlprof.LayerHooks",
    .tp_basicsize = sizeof(Layer),
    .tp_dealloc = (destructor)Layer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One module's hooks for mlprof.torch.profile_model.",
    .tp_methods = Layer_methods,
};

/* layer_hooks(key, forward_zone, backward_zone, hooks_zone, root, leaf,
 * backward, flops, backward_every, params, shared) -> LayerHooks. The
 * root's backward_every decides: the forwards of the model numbered 0,
 * N, 2N, ... get backward zones. Holds no reference to
 * the module (the hooks get it as their argument), so the module's hooks
 * make no cycle the collector would have to find. */
static PyObject *mod_layer_hooks(PyObject *m, PyObject *args) {
  PyObject *key, *zf, *zb, *zo, *params, *sh;
  int root, leaf, backward, flops;
  unsigned long every;
  if (!PyArg_ParseTuple(args, "UOOOppppkO!O!:layer_hooks", &key, &zf, &zb, &zo,
                        &root, &leaf, &backward, &flops, &every, &PyTuple_Type,
                        &params, &PyTuple_Type, &sh))
    return NULL;
  if (every < 1) {
    PyErr_SetString(PyExc_ValueError, "backward_every must be at least 1");
    return NULL;
  }
  if (PyTuple_GET_SIZE(sh) != SH_N) {
    PyErr_SetString(PyExc_ValueError, "layer_hooks: shared has a wrong size");
    return NULL;
  }
  if (!s_shape) {
    if (PyType_Ready(&LayerType) < 0 || PyType_Ready(&BackwardZoneType) < 0 ||
        PyType_Ready(&EndHookType) < 0)
      return NULL;
    struct {
      PyObject **s;
      const char *text;
    } names[] = {{&s_grad_fn, "grad_fn"},
                 {&s_next_functions, "next_functions"},
                 {&s_requires_grad, "requires_grad"},
                 {&s_backward_hooks, "_backward_hooks"},
                 {&s_register_hook_dict, "_register_hook_dict"},
                 {&s_register_hook, "register_hook"},
                 {&s_shape, "shape"}}; /* last: set means all are */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
      if (!*names[i].s &&
          !(*names[i].s = PyUnicode_InternFromString(names[i].text)))
        return NULL;
  }
  const mlprof_site *f = mlprof__py_zone_site(zf);
  const mlprof_site *b = f ? mlprof__py_zone_site(zb) : NULL;
  const mlprof_site *o = b ? mlprof__py_zone_site(zo) : NULL;
  if (!o) return NULL;
  Layer *l = PyObject_New(Layer, &LayerType);
  if (!l) return NULL;
  Py_INCREF(key);
  Py_INCREF(params);
  Py_INCREF(sh);
  l->key = key;
  l->fwd = f;
  l->bwd = b;
  l->over = o;
  l->root = root;
  l->leaf = leaf;
  l->backward = backward;
  l->flops = flops;
  l->every = every;
  l->forwards = 0;
  l->params = params;
  l->sh = sh;
  return (PyObject *)l;
}

PyMethodDef mlprof__hooks_methods[] = {
    {"layer_hooks", mod_layer_hooks, METH_VARARGS,
     "layer_hooks(key, forward_zone, backward_zone, hooks_zone, root, leaf, "
     "backward, flops, backward_every, params, shared) -> the hooks of one "
     "module "
     "(mlprof.torch)."},
    {NULL, NULL, 0, NULL}};
