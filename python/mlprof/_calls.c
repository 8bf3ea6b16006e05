/* The Python call tracer and line timer of the _mlprof extension.
 *
 * Calls (Profiler(backend="calls")): a C profile function (PyEval_SetProfile)
 * on every thread makes each Python call a zone, named by the function's
 * qualified name, on its thread's timeline with the other zones; the zone's
 * site carries the function's file and first line, so the profile's name
 * table has them. Generators and coroutines get one span per resume (the
 * profile function sees a call at each resume and a return at each yield);
 * an exception leaving a frame is a return too, so it closes the span.
 *
 * The per-call work is small: the code object's extra slot
 * (_PyCode_SetExtra) caches the include/exclude decision and the site, made
 * once per code object and options generation. Sites live until exit (the
 * writer keys names by site pointer), one per (name, file, line).
 *
 * With a minimum duration, a call's begin cannot be written when it begins:
 * the tracer keeps the begin time and sends the spans that last long enough,
 * whole trees at a time, through mlprof_track_spans onto a track per thread
 * ("calls <tid>"); shorter calls are counted as dropped.
 *
 * Lines: a C trace function (PyEval_SetTrace) times the lines of the chosen
 * code objects only: every other frame gets f_trace_lines = False at its
 * first event, so it sends no line events. Per line: hits, time to the next
 * line (total), and that less the time of the calls made from it
 * (exclusive). A chosen plain function is called through lines_call (the
 * Python side makes its __code__ a trampoline to it), which sets the trace
 * function on its thread for the duration of the call only; code that
 * cannot be reached that way (generators, names not resolved yet) is found
 * by the trace function on every thread, which a name's resolution can
 * release (lines_release).
 *
 * Threads: both functions are set on every thread that exists at start, and
 * threading.setprofile/settrace hooks install them in threads started later.
 * Everything here runs with the GIL held. */
#include "_calls.h"

#include <frameobject.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if PY_VERSION_HEX >= 0x030C0000
#define CODE_EXTRA_INDEX PyUnstable_Eval_RequestCodeExtraIndex
#define CODE_GET_EXTRA PyUnstable_Code_GetExtra
#define CODE_SET_EXTRA PyUnstable_Code_SetExtra
#else
#define CODE_EXTRA_INDEX _PyEval_RequestCodeExtraIndex
#define CODE_GET_EXTRA _PyCode_GetExtra
#define CODE_SET_EXTRA _PyCode_SetExtra
#endif

#if PY_VERSION_HEX < 0x030B0000
/* Python 3.9 and 3.10 have the frame's fields, not the accessor. */
static PyObject *PyFrame_GetGlobals(PyFrameObject *frame) {
  Py_XINCREF(frame->f_globals);
  return frame->f_globals;
}
#endif

mlprof__py_recorder mlprof__py_rec;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- options and per-code cache ------------------------------------------ */

typedef struct {
  uint64_t hits, total_ns, excl_ns;
} line_stat;

typedef struct {
  PyObject *code; /* strong reference */
  int first;      /* co_firstlineno */
  int n;          /* lines from first */
  int named;      /* chosen by name, not yet handed to the resolver */
  line_stat *lines;
} line_table;

typedef struct {
  unsigned gen;            /* options generation the decision belongs to */
  const mlprof_site *site; /* NULL: not traced */
  line_table *lt;          /* set when the code's lines are timed */
  int trampoline; /* a chosen function's (lines_trampoline): never traced */
} code_info;

static Py_ssize_t extra_index = -1;
static unsigned options_gen = 1;
static PyObject *opt_include, *opt_exclude; /* tuples of str */
static int opt_builtins, opt_max_depth;
static uint64_t opt_min_ns;
static int calls_on, lines_on;
static int calls_hooked; /* calls go through the frame evaluation hook */
static int paused;       /* set_all is running: its own calls are not traced */
static uint64_t dropped_short; /* calls shorter than the minimum */
/* Calls to record that found no memory for their place on the stack. */
static uint64_t dropped_memory;
static PyObject *sites;       /* (name, file, line) -> capsule of a site */
static PyObject *line_names;  /* {"module:qualname"} whose lines are timed */
static PyObject *line_tables; /* list of capsules of line_table */
static int line_table_attach(PyObject *code, code_info *ci);

/* A site for (name, file, line) that lives until exit; NULL with an
 * exception. */
static const mlprof_site *site_for(PyObject *name, PyObject *file, int line) {
  PyObject *key = Py_BuildValue("(OOi)", name, file, line);
  if (!key) return NULL;
  PyObject *cap = PyDict_GetItemWithError(sites, key);
  if (cap) {
    Py_DECREF(key);
    return PyCapsule_GetPointer(cap, NULL);
  }
  const char *n = PyUnicode_AsUTF8(name), *f = PyUnicode_AsUTF8(file);
  mlprof_site *s = NULL;
  if (n && f && !PyErr_Occurred()) {
    size_t ln = strlen(n) + 1, lf = strlen(f) + 1;
    /* 8-aligned, as the library's event encoding needs. */
    s = PyMem_RawCalloc(1, sizeof *s + ln + lf);
    if (s) {
      char *p = (char *)(s + 1);
      memcpy(p, n, ln);
      memcpy(p + ln, f, lf);
      *s = (mlprof_site){p, NULL, p + ln, (uint32_t)line, MLPROF_CAT_NONE};
      cap = PyCapsule_New(s, NULL, NULL);
      if (!cap || PyDict_SetItem(sites, key, cap) < 0) s = NULL;
      Py_XDECREF(cap);
    } else {
      PyErr_NoMemory();
    }
  }
  Py_DECREF(key);
  return s;
}

/* 1 when s starts with prefix as a module (up to a dot) or a path. */
static int prefix_matches(const char *s, const char *prefix) {
  size_t n = strlen(prefix);
  if (!n || strncmp(s, prefix, n) != 0) return 0;
  return s[n] == 0 || s[n] == '.' || s[n] == '/' || prefix[n - 1] == '/';
}

static int any_matches(PyObject *prefixes, const char *mod, const char *file) {
  for (Py_ssize_t i = 0; prefixes && i < PyTuple_GET_SIZE(prefixes); i++) {
    const char *p = PyUnicode_AsUTF8(PyTuple_GET_ITEM(prefixes, i));
    if (p && (prefix_matches(mod, p) || prefix_matches(file, p))) return 1;
  }
  return 0;
}

/* Whether functions of module `mod` in `file` are traced. mlprof's own
 * Python code never is: its zones would wrap the user's. */
static int wanted(const char *mod, const char *file) {
  if (prefix_matches(mod, "mlprof")) return 0;
  if (opt_include && PyTuple_GET_SIZE(opt_include) &&
      !any_matches(opt_include, mod, file))
    return 0;
  return !any_matches(opt_exclude, mod, file);
}

/* The cache entry of code co (globals: its frame's, borrowed), made or
 * refreshed; NULL when memory is short (the call is then not traced). An
 * exception pending (a generator resumed by throw()) is kept. */
static code_info *code_info_of(PyCodeObject *co, PyObject *globals) {
  void *p = NULL;
  CODE_GET_EXTRA((PyObject *)co, extra_index, &p);
  code_info *ci = p;
  if (ci && (ci->gen == options_gen || ci->trampoline)) return ci;
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  if (!ci) {
    ci = PyMem_RawCalloc(1, sizeof *ci);
    if (!ci || CODE_SET_EXTRA((PyObject *)co, extra_index, ci) < 0) {
      PyMem_RawFree(ci);
      PyErr_Restore(et, ev, tb);
      return NULL;
    }
  }
  ci->gen = options_gen;
  ci->site = NULL;
  PyObject *mod = globals ? PyDict_GetItemString(globals, "__name__") : NULL;
  const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : "";
  const char *f = PyUnicode_AsUTF8(co->co_filename);
#if PY_VERSION_HEX >= 0x030B0000
  PyObject *q = co->co_qualname;
#else
  PyObject *q = co->co_name;
#endif
  if (m && line_names && PySet_GET_SIZE(line_names) && !ci->lt) {
    PyObject *key = PyUnicode_FromFormat("%s:%U", m, q);
    if (key && PySet_Contains(line_names, key) == 1 &&
        line_table_attach((PyObject *)co, ci) == 0)
      ci->lt->named = 1;
    Py_XDECREF(key);
  }
  if (calls_on && m && f && wanted(m, f)) {
    PyObject *name = strcmp(m, "__main__") == 0 || !*m
                         ? (Py_INCREF(q), q)
                         : PyUnicode_FromFormat("%s.%U", m, q);
    if (name) {
      ci->site = site_for(name, co->co_filename, co->co_firstlineno);
      Py_DECREF(name);
    }
  }
  PyErr_Restore(et, ev, tb);
  return ci;
}

/* The cache entry of frame's code (code_info_of). */
static code_info *info_of(PyFrameObject *frame) {
  PyCodeObject *co = PyFrame_GetCode(frame);
  PyObject *globals = PyFrame_GetGlobals(frame);
  code_info *ci = code_info_of(co, globals);
  Py_XDECREF(globals);
  Py_DECREF(co);
  return ci;
}

/* ---- calls: the profile function ------------------------------------------
 */

#define STACK_MAX 1024
#define PENDING_MAX 1024

typedef struct {
  const mlprof_site *site; /* recorded (owed an end, or timed) */
  const void *c;           /* a C function's PyMethodDef; NULL: Python's */
  uint64_t t0;             /* begin, with a minimum duration */
} call_entry;

/* This thread's open calls: the first STACK_MAX in stack, the deeper ones
 * in deep (grown as a recursion goes, freed with the thread), so that
 * every call is recorded, or counted as dropped where the library drops
 * it (zones nested past its limit) or where memory is short. gen tells a
 * stack left by an earlier start. */
typedef struct {
  unsigned gen;
  int depth;       /* open calls */
  int recorded;    /* recorded calls open (max_depth counts these) */
  int lost;        /* the innermost open calls, which found no memory */
  size_t npending; /* finished spans kept for track_spans */
  call_entry *deep;
  size_t deep_cap;
  call_entry stack[STACK_MAX];
  mlprof_span pending[PENDING_MAX];
} call_state;

static __thread call_state *cs;
static unsigned calls_gen;
static void send_pending(call_state *s);

/* A thread's call and line states, freed when it exits (the calls kept for
 * the minimum duration are sent first: that needs no GIL). */
typedef struct {
  void *calls, *lines;
} thread_states;
static pthread_key_t states_key;
static pthread_once_t states_once = PTHREAD_ONCE_INIT;
static __thread struct line_state *ls;

static void states_free(void *p) {
  thread_states *h = p;
  if (h->calls) send_pending(h->calls);
  if ((void *)cs == h->calls) cs = NULL;
  if ((void *)ls == h->lines) ls = NULL;
  if (h->calls) free(((call_state *)h->calls)->deep);
  free(h->calls);
  free(h->lines);
  free(h);
}
/* A forked child leaves the calls kept before the fork to its parent, which
 * sends them. */
static void forget_pending(void) {
  if (cs) cs->npending = 0;
}

static void states_key_make(void) {
  if (pthread_key_create(&states_key, states_free) != 0) states_key = 0;
  pthread_atfork(NULL, NULL, forget_pending);
}

/* n zeroed bytes of this thread's call (lines 0) or line (1) state, freed
 * with the thread; NULL when memory is short. */
static void *thread_alloc(size_t n, int lines) {
  pthread_once(&states_once, states_key_make);
  thread_states *h = pthread_getspecific(states_key);
  if (!h) {
    if (!(h = calloc(1, sizeof *h))) return NULL;
    if (pthread_setspecific(states_key, h) != 0) {
      free(h);
      return NULL;
    }
  }
  void *p = calloc(1, n);
  if (lines)
    h->lines = p;
  else
    h->calls = p;
  return p;
}

static call_state *state(void) {
  if (!cs) cs = thread_alloc(sizeof *cs, 0);
  if (cs && cs->gen != calls_gen) {
    cs->gen = calls_gen;
    cs->depth = cs->recorded = cs->lost = 0;
    cs->npending = 0;
  }
  return cs;
}

static void send_pending(call_state *s) {
  if (!s->npending) return;
  char track[48];
  snprintf(track, sizeof track, "calls %ld", (long)syscall(SYS_gettid));
  mlprof__py_rec.track_spans(track, s->pending, s->npending);
  s->npending = 0;
}

/* A small map from C function descriptors to their sites (NULL: not
 * traced), so a builtin's name is made once. */
#define CFUNC_MAP 4096
static struct {
  const PyMethodDef *def;
  const mlprof_site *site;
  unsigned gen;
} cfuncs[CFUNC_MAP];

/* The site of C function def (module, self: a builtin function's, the
 * bound object of a method; either may be NULL), NULL when not traced. */
static const mlprof_site *cfunc_site(const PyMethodDef *def, PyObject *module,
                                     PyObject *self) {
  size_t h = ((uintptr_t)def >> 4) % CFUNC_MAP;
  for (size_t i = 0; i < 8; i++, h = (h + 1) % CFUNC_MAP) {
    if (cfuncs[h].def == def && cfuncs[h].gen == options_gen)
      return cfuncs[h].site;
    if (!cfuncs[h].def || cfuncs[h].gen != options_gen) break;
  }
  const char *owner = "builtins";
  if (module && PyUnicode_Check(module))
    owner = PyUnicode_AsUTF8(module);
  else if (self && !PyModule_Check(self))
    owner = Py_TYPE(self)->tp_name;
  const mlprof_site *site = NULL;
  if (owner && wanted(owner, "")) {
    PyObject *name = PyUnicode_FromFormat("%s.%s", owner, def->ml_name);
    PyObject *file = PyUnicode_FromString("");
    if (name && file) site = site_for(name, file, 0);
    Py_XDECREF(name);
    Py_XDECREF(file);
  }
  PyErr_Clear();
  cfuncs[h].def = def;
  cfuncs[h].site = site;
  cfuncs[h].gen = options_gen;
  return site;
}

/* The entry of depth d, room made for it; NULL when memory is short. */
static call_entry *entry_at(call_state *s, int d) {
  if (d < STACK_MAX) return &s->stack[d];
  size_t i = (size_t)d - STACK_MAX;
  if (i >= s->deep_cap) {
    size_t cap = s->deep_cap ? 2 * s->deep_cap : STACK_MAX;
    while (cap <= i) cap *= 2;
    call_entry *p = realloc(s->deep, cap * sizeof *p);
    if (!p) return NULL;
    s->deep = p;
    s->deep_cap = cap;
  }
  return &s->deep[i];
}

/* Opens a call (site NULL: one not recorded; c: a C function's key, which
 * its end must match, or NULL). */
static void call_begin(call_state *s, const mlprof_site *site, const void *c) {
  int d = s->depth++;
  if (site && opt_max_depth && s->recorded >= opt_max_depth) site = NULL;
  /* Past a call that found no memory, none is held (a return must find
   * the entry of its own call). */
  call_entry *e = s->lost ? NULL : entry_at(s, d);
  if (!e) {
    s->lost++;
    dropped_memory += site != NULL;
    return;
  }
  if (site) {
    if (opt_min_ns)
      e->t0 = now_ns();
    else if (!mlprof__py_rec.zone_begin_site(site))
      site = NULL; /* recording is off: no end owed */
  }
  e->site = site;
  e->c = c;
  s->recorded += site != NULL;
}

static void call_end(call_state *s) {
  if (s->depth == 0) return; /* a frame that began before start() */
  int d = --s->depth;
  if (s->lost) {
    s->lost--;
    return;
  }
  call_entry *e = d < STACK_MAX ? &s->stack[d] : &s->deep[d - STACK_MAX];
  const mlprof_site *site = e->site;
  if (!site) return;
  s->recorded--;
  if (!opt_min_ns) {
    mlprof__py_rec.zone_end();
    return;
  }
  uint64_t t0 = e->t0, t1 = now_ns();
  if (t1 - t0 < opt_min_ns) {
    dropped_short++;
  } else {
    if (s->npending == PENDING_MAX) send_pending(s);
    s->pending[s->npending++] = (mlprof_span){site, t0, t1, NULL, 0, {0, 0}};
  }
  if (s->recorded == 0) send_pending(s); /* a whole tree */
}

static int profile_fn(PyObject *obj, PyFrameObject *frame, int what,
                      PyObject *arg) {
  call_state *s = paused ? NULL : state();
  if (!s) return 0;
  switch (what) {
    case PyTrace_CALL: {
      code_info *ci = info_of(frame);
      call_begin(s, ci ? ci->site : NULL, NULL);
      break;
    }
    case PyTrace_RETURN:
      call_end(s);
      break;
    case PyTrace_C_CALL:
      if (opt_builtins && PyCFunction_Check(arg)) {
        PyCFunctionObject *f = (PyCFunctionObject *)arg;
        call_begin(s, cfunc_site(f->m_ml, f->m_module, f->m_self), NULL);
      } else if (opt_builtins) {
        call_begin(s, NULL, NULL);
      }
      break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
      if (opt_builtins) call_end(s);
      break;
  }
  return 0;
}

/* ---- calls: the frame evaluation hook (PEP 523) ------------------------
 *
 * On Python 3.9 to 3.11 the tracer wraps the interpreter's frame evaluation
 * function instead: one C call per Python call and per generator or
 * coroutine resume, with no frame object made (the profile function's
 * cost), on every thread of the interpreter at once. The hook returns when
 * the frame returns, yields or raises (NULL), so each span ends there. With
 * a hook set, 3.11 evaluates Python-to-Python calls through C recursion
 * rather than inline; that is part of the cost bench/bench_calls.py
 * measures. The profile function stays for builtins (C calls have no frame)
 * and for an interpreter whose hook someone else holds. */
#if PY_VERSION_HEX < 0x030C0000
#define CALLS_HOOK 1
#if PY_VERSION_HEX >= 0x030B0000
#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
typedef struct _PyInterpreterFrame eval_frame;
#else
typedef PyFrameObject eval_frame;
#endif

/* 1 for the evaluation that only makes a generator or coroutine (3.11 runs
 * its frame up to RETURN_GENERATOR): not a resume, no span. */
static int makes_generator(eval_frame *f) {
#if PY_VERSION_HEX >= 0x030B0000
  return (f->f_code->co_flags &
          (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) &&
         f->owner != FRAME_OWNED_BY_GENERATOR;
#else
  return 0;
#endif
}

static PyObject *eval_hook(PyThreadState *ts, eval_frame *f, int throwflag) {
  call_state *s = paused || makes_generator(f) ? NULL : state();
  if (!s) return _PyEval_EvalFrameDefault(ts, f, throwflag);
  unsigned gen = calls_gen;
  code_info *ci = code_info_of(f->f_code, f->f_globals);
  call_begin(s, ci ? ci->site : NULL, NULL);
  PyObject *r = _PyEval_EvalFrameDefault(ts, f, throwflag);
  if (gen == calls_gen) call_end(s); /* not after calls_stop() */
  return r;
}

/* Sets (on) or removes the hook; 0, or -1 when another one is in place
 * (it is left there). */
static int hook_set(int on) {
  PyInterpreterState *in = PyThreadState_GetInterpreter(PyThreadState_Get());
  _PyFrameEvalFunction cur = _PyInterpreterState_GetEvalFrameFunc(in);
  if (cur != _PyEval_EvalFrameDefault && cur != eval_hook) return -1;
  _PyInterpreterState_SetEvalFrameFunc(
      in, on ? eval_hook : _PyEval_EvalFrameDefault);
  return 0;
}
#endif

/* ---- calls: sys.monitoring (PEP 669) --------------------------------------
 *
 * On Python 3.12+ the tracer is a sys.monitoring tool (sys.monitoring's
 * PROFILER_ID, named "mlprof"): C functions called with the code object, no
 * frame object made, on every thread of the interpreter at once, threads
 * started later included. PY_START, PY_RESUME and PY_THROW (a generator
 * resumed by throw()) begin a call; PY_RETURN, PY_YIELD and PY_UNWIND end
 * it. With builtins, CALL begins a C function's call and C_RETURN or
 * C_RAISE ends it, for the callables the profile function reports as C
 * calls: a builtin, or a method descriptor called with its self
 * (list.append(x)). The id is freed at stop. When another tool holds it,
 * that tool is left alone and the profile function is used instead
 * (calls_fallback says why). */
#if PY_VERSION_HEX >= 0x030C0000
#define CALLS_MONITORING 1

static PyObject *mon;          /* sys.monitoring */
static PyObject *mon_missing;  /* sys.monitoring.MISSING: no first argument */
static long mon_tool = -1;     /* the tool id held; -1: none */
static int calls_monitored;    /* calls go through sys.monitoring */
static char mon_fallback[160]; /* why the profile function is used, or "" */

/* The PyMethodDef of a C function whose call sys.monitoring reports
 * (callable, and its first argument or MISSING) and, when site is not
 * NULL, its site in *site; NULL when it is no C call for the tracer. */
static const PyMethodDef *c_callee(PyObject *callable, PyObject *arg0,
                                   const mlprof_site **site) {
  /* CALL names a bound method where C_RETURN names its function. */
  if (PyMethod_Check(callable)) callable = PyMethod_GET_FUNCTION(callable);
  if (PyCFunction_Check(callable)) {
    PyCFunctionObject *f = (PyCFunctionObject *)callable;
    if (site) *site = cfunc_site(f->m_ml, f->m_module, f->m_self);
    return f->m_ml;
  }
  if (Py_IS_TYPE(callable, &PyMethodDescr_Type) && arg0 != mon_missing) {
    const PyMethodDef *def = ((PyMethodDescrObject *)callable)->d_method;
    /* Bound to arg0, as the profile function sees it. */
    if (site) *site = cfunc_site(def, NULL, arg0);
    return def;
  }
  return NULL;
}

/* PY_START, PY_RESUME, PY_THROW: (code, offset[, exception]). Runs in the
 * frame that begins, whose globals PyEval_GetGlobals gives. */
static PyObject *mon_begin(PyObject *self, PyObject *const *args,
                           Py_ssize_t nargs) {
  call_state *s = calls_on ? state() : NULL;
  if (s && nargs >= 1 && PyCode_Check(args[0])) {
    void *p = NULL;
    CODE_GET_EXTRA(args[0], extra_index, &p);
    code_info *ci = p; /* the globals are looked up on a miss only */
    if (!ci || (ci->gen != options_gen && !ci->trampoline))
      ci = code_info_of((PyCodeObject *)args[0], PyEval_GetGlobals());
    call_begin(s, ci ? ci->site : NULL, NULL);
  }
  Py_RETURN_NONE;
}

/* PY_RETURN, PY_YIELD, PY_UNWIND. */
static PyObject *mon_end(PyObject *self, PyObject *const *args,
                         Py_ssize_t nargs) {
  call_state *s = calls_on ? state() : NULL;
  if (s) call_end(s);
  Py_RETURN_NONE;
}

/* CALL: (code, offset, callable, arg0), for every call, Python's too. */
static PyObject *mon_c_begin(PyObject *self, PyObject *const *args,
                             Py_ssize_t nargs) {
  call_state *s = calls_on && nargs == 4 ? state() : NULL;
  const mlprof_site *site = NULL;
  const PyMethodDef *def = s ? c_callee(args[2], args[3], &site) : NULL;
  if (def) call_begin(s, site, def);
  Py_RETURN_NONE;
}

/* C_RETURN, C_RAISE: (code, offset, callable, arg0). They follow the calls
 * of anything but an inlined Python function: only the end of the C call
 * open on top is taken. */
static PyObject *mon_c_end(PyObject *self, PyObject *const *args,
                           Py_ssize_t nargs) {
  call_state *s = calls_on && nargs == 4 ? state() : NULL;
  const PyMethodDef *def = s ? c_callee(args[2], args[3], NULL) : NULL;
  if (def && s->depth > 0) {
    int d = s->depth - 1;
    call_entry *e = s->lost ? NULL : entry_at(s, d);
    if (!e || e->c == def) call_end(s);
  }
  Py_RETURN_NONE;
}

static PyMethodDef mon_defs[] = {
    {"_calls_begin", (PyCFunction)(void (*)(void))mon_begin, METH_FASTCALL,
     NULL},
    {"_calls_end", (PyCFunction)(void (*)(void))mon_end, METH_FASTCALL, NULL},
    {"_calls_c_begin", (PyCFunction)(void (*)(void))mon_c_begin, METH_FASTCALL,
     NULL},
    {"_calls_c_end", (PyCFunction)(void (*)(void))mon_c_end, METH_FASTCALL,
     NULL},
};
static PyObject *mon_cbs[4]; /* mon_defs as objects */

/* Each event the tracer registers, its callback (mon_defs) and whether it
 * is for builtins only. */
static const struct {
  const char *event;
  int cb, builtins;
} mon_events[] = {
    {"PY_START", 0, 0},  {"PY_RESUME", 0, 0}, {"PY_THROW", 0, 0},
    {"PY_RETURN", 1, 0}, {"PY_YIELD", 1, 0},  {"PY_UNWIND", 1, 0},
    {"CALL", 2, 1},      {"C_RETURN", 3, 1},  {"C_RAISE", 3, 1},
};
#define MON_EVENTS (sizeof mon_events / sizeof *mon_events)

/* sys.monitoring.events.<name> as a bit, -1 with an exception. */
static long mon_event(const char *name) {
  PyObject *events = PyObject_GetAttrString(mon, "events");
  PyObject *v = events ? PyObject_GetAttrString(events, name) : NULL;
  long bit = v ? PyLong_AsLong(v) : -1;
  Py_XDECREF(events);
  Py_XDECREF(v);
  return bit;
}

/* Takes the tool id off the tracer's callbacks and events and frees it,
 * when the tracer still holds it (a tool that took it since is left
 * alone). An exception pending is kept. 0, or -1 with an exception. */
static int mon_stop(void) {
  if (mon_tool < 0) return 0;
  long tool = mon_tool;
  mon_tool = -1;
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  int ok = 0;
  PyObject *holder = PyObject_CallMethod(mon, "get_tool", "l", tool);
  if (holder && PyUnicode_Check(holder) &&
      PyUnicode_CompareWithASCIIString(holder, "mlprof") == 0) {
    PyObject *r = PyObject_CallMethod(mon, "set_events", "li", tool, 0);
    for (size_t i = 0; r && i <= MON_EVENTS; i++) {
      long bit = i < MON_EVENTS ? mon_event(mon_events[i].event) : 0;
      Py_DECREF(r);
      if (bit < 0)
        r = NULL;
      else if (i < MON_EVENTS)
        r = PyObject_CallMethod(mon, "register_callback", "llO", tool, bit,
                                Py_None);
      else
        r = PyObject_CallMethod(mon, "free_tool_id", "l", tool);
    }
    ok = r != NULL;
    Py_XDECREF(r);
  } else {
    ok = holder != NULL;
  }
  Py_XDECREF(holder);
  if (et) {
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
  }
  return ok || et ? 0 : -1;
}

/* Makes the tracer a sys.monitoring tool (builtins: with the C calls'
 * events). 1 when it is; 0 when another tool holds the id (mon_fallback
 * says which); -1 with an exception. */
static int mon_start(int builtins) {
  mon_fallback[0] = 0;
  if (mon_stop() < 0) return -1; /* started again */
  if (!mon) {
    PyObject *sys = PyImport_ImportModule("sys");
    mon = sys ? PyObject_GetAttrString(sys, "monitoring") : NULL;
    Py_XDECREF(sys);
    mon_missing = mon ? PyObject_GetAttrString(mon, "MISSING") : NULL;
    for (int i = 0; mon_missing && i < 4; i++)
      if (!(mon_cbs[i] = PyCFunction_New(&mon_defs[i], NULL))) break;
    if (!mon_missing || !mon_cbs[3]) {
      for (int i = 0; i < 4; i++) Py_CLEAR(mon_cbs[i]);
      Py_CLEAR(mon_missing);
      Py_CLEAR(mon);
      return -1;
    }
  }
  PyObject *id = PyObject_GetAttrString(mon, "PROFILER_ID");
  long tool = id ? PyLong_AsLong(id) : -1;
  Py_XDECREF(id);
  if (tool < 0) return -1;
  PyObject *holder = PyObject_CallMethod(mon, "get_tool", "l", tool);
  if (!holder) return -1;
  if (holder != Py_None) {
    PyObject *r = PyObject_Repr(holder);
    const char *name = r ? PyUnicode_AsUTF8(r) : NULL;
    snprintf(mon_fallback, sizeof mon_fallback,
             "sys.monitoring tool %ld is held by %.100s", tool,
             name ? name : "another tool");
    PyErr_Clear();
    Py_XDECREF(r);
    Py_DECREF(holder);
    return 0;
  }
  Py_DECREF(holder);
  PyObject *r = PyObject_CallMethod(mon, "use_tool_id", "ls", tool, "mlprof");
  if (!r) return -1;
  Py_DECREF(r);
  mon_tool = tool;
  unsigned long mask = 0;
  for (size_t i = 0; i < MON_EVENTS; i++) {
    if (mon_events[i].builtins && !builtins) continue;
    long bit = mon_event(mon_events[i].event);
    r = bit < 0 ? NULL
                : PyObject_CallMethod(mon, "register_callback", "llO", tool,
                                      bit, mon_cbs[mon_events[i].cb]);
    if (!r) {
      mon_stop();
      return -1;
    }
    Py_DECREF(r);
    mask |= (unsigned long)bit;
  }
  r = PyObject_CallMethod(mon, "set_events", "lk", tool, mask);
  if (!r) {
    mon_stop();
    return -1;
  }
  Py_DECREF(r);
  return 1;
}
#endif

/* ---- lines: the trace function ---------------------------------------------
 */

typedef struct {
  line_table *lt;       /* NULL: a frame whose lines are not timed */
  PyFrameObject *frame; /* borrowed; only compared */
  uint64_t t_call, line_t0, child_ns;
  int line;   /* -1: none yet */
  int pinned; /* a frame the resolver saw: holds the trace function */
} line_entry;

typedef struct line_state {
  unsigned gen;
  int depth;
  int pins; /* pinned entries on the stack */
  line_entry stack[STACK_MAX];
} line_state;
static unsigned lines_gen;
static PyObject *line_resolver; /* called with code chosen by name, once */

/* Timed calls running on this thread through lines_call. */
static __thread int local_depth;

/* Whether this thread keeps the trace function when it is not on every
 * thread: a lines_call or a pinned frame runs here. */
static int trace_held(void) {
  return local_depth || (ls && ls->gen == lines_gen && ls->pins);
}

static void line_close(line_entry *e, uint64_t t) {
  if (e->line < 0) return;
  int i = e->line - e->lt->first;
  if (i < 0 || i >= e->lt->n) {
    int n = i < 0 ? e->lt->n : i + 16;
    int shift = i < 0 ? -i : 0;
    line_stat *p = PyMem_RawCalloc((size_t)(n + shift), sizeof *p);
    if (!p) {
      e->line = -1;
      return;
    }
    if (e->lt->lines)
      memcpy(p + shift, e->lt->lines, (size_t)e->lt->n * sizeof *p);
    PyMem_RawFree(e->lt->lines);
    e->lt->lines = p;
    e->lt->n = n + shift;
    e->lt->first -= shift;
    i += shift;
  }
  line_stat *st = &e->lt->lines[i];
  uint64_t d = t - e->line_t0;
  st->hits++;
  st->total_ns += d;
  st->excl_ns += d > e->child_ns ? d - e->child_ns : 0;
  e->line = -1;
}

/* frame.f_trace_lines = False, through the attribute's setter found once
 * (a setattr by name costs a lookup per call). */
static int lines_off(PyObject *frame) {
  static setter set;
  static void *closure;
  if (!set) {
    /* The type's attribute, not tp_dict: a static type has none of its
     * own from Python 3.12 on. The type keeps the descriptor alive. */
    PyObject *d =
        PyObject_GetAttrString((PyObject *)&PyFrame_Type, "f_trace_lines");
    if (!d || Py_TYPE(d) != &PyGetSetDescr_Type) {
      Py_XDECREF(d);
      PyErr_Clear();
      return PyObject_SetAttrString(frame, "f_trace_lines", Py_False);
    }
    set = ((PyGetSetDescrObject *)d)->d_getset->set;
    closure = ((PyGetSetDescrObject *)d)->d_getset->closure;
    Py_DECREF(d);
  }
  return set(frame, Py_False, closure);
}

static int trace_fn(PyObject *obj, PyFrameObject *frame, int what,
                    PyObject *arg) {
  if (paused) return 0;
  if (!lines_on && !trace_held()) {
    /* Released (lines_release): this thread no longer needs it. */
    PyEval_SetTrace(NULL, NULL);
    return 0;
  }
  if (!ls) ls = thread_alloc(sizeof *ls, 1);
  if (!ls) return 0;
  if (ls->gen != lines_gen) {
    ls->gen = lines_gen;
    ls->depth = ls->pins = 0;
  }
  /* The clock is read only for a timed frame and the calls it makes. */
  int d = ls->depth;
  int top_timed = d > 0 && d <= STACK_MAX && ls->stack[d - 1].lt;
  switch (what) {
    case PyTrace_CALL: {
      code_info *ci = info_of(frame);
      line_table *lt = ci ? ci->lt : NULL;
      if (!lt && lines_off((PyObject *)frame) < 0) PyErr_Clear();
      int pin = 0;
      if (lt && lt->named && line_resolver) {
        /* The resolver may release the trace function: this call keeps it
         * on its thread until it returns. */
        lt->named = 0;
        pin = d < STACK_MAX;
        ls->pins += pin;
        PyObject *r = PyObject_CallOneArg(line_resolver, (PyObject *)lt->code);
        if (!r) PyErr_WriteUnraisable(line_resolver);
        Py_XDECREF(r);
      }
      ls->depth++;
      if (d < STACK_MAX)
        ls->stack[d] = (line_entry){
            lt, frame, lt || top_timed ? now_ns() : 0, 0, 0, -1, pin};
      break;
    }
    case PyTrace_LINE: {
      if (!top_timed || ls->stack[d - 1].frame != frame) break;
      line_entry *e = &ls->stack[d - 1];
      uint64_t t = now_ns();
      line_close(e, t);
      e->line = PyFrame_GetLineNumber(frame);
      e->line_t0 = t;
      e->child_ns = 0;
      break;
    }
    case PyTrace_RETURN: {
      if (d == 0) break;
      d = --ls->depth;
      if (d >= STACK_MAX) break;
      line_entry *e = &ls->stack[d];
      ls->pins -= e->pinned;
      int caller_timed = d > 0 && ls->stack[d - 1].lt;
      if (!e->lt && !caller_timed) break;
      uint64_t t = now_ns();
      if (e->lt) line_close(e, t);
      if (caller_timed) ls->stack[d - 1].child_ns += t - e->t_call;
      break;
    }
  }
  return 0;
}

/* ---- switching on and off --------------------------------------------------
 */

static PyObject *thread_hook(PyObject *trace, PyObject *args);
static PyMethodDef hook_defs[2] = {
    {"_calls_profile_hook", thread_hook, METH_VARARGS, NULL},
    {"_calls_trace_hook", thread_hook, METH_VARARGS, NULL},
};
static PyObject *hooks[2]; /* the two above as objects, self = 0 or 1 */

/* A thread started after start() calls this first, as the sys.setprofile
 * (settrace) function that threading.setprofile (settrace) gave it; it puts
 * the C function in its place. */
static PyObject *thread_hook(PyObject *trace, PyObject *args) {
  if (PyObject_IsTrue(trace))
    PyEval_SetTrace(lines_on ? trace_fn : NULL, NULL);
  else
    PyEval_SetProfile(calls_on ? profile_fn : NULL, NULL);
  Py_RETURN_NONE;
}

/* Sets the profile (trace) function of every thread, and of the threads
 * threading starts later; fn NULL clears them. 0, or -1 with an exception. */
static int set_all(int trace, Py_tracefunc fn) {
  if (!hooks[trace]) {
    PyObject *self = PyBool_FromLong(trace);
    hooks[trace] = PyCFunction_New(&hook_defs[trace], self);
    Py_DECREF(self);
    if (!hooks[trace]) return -1;
  }
#if PY_VERSION_HEX >= 0x030C0000
  if (trace)
    PyEval_SetTraceAllThreads(fn, NULL);
  else
    PyEval_SetProfileAllThreads(fn, NULL);
#else
  PyInterpreterState *in = PyThreadState_GetInterpreter(PyThreadState_Get());
  for (PyThreadState *t = PyInterpreterState_ThreadHead(in); t;
       t = PyThreadState_Next(t))
    if ((trace ? _PyEval_SetTrace : _PyEval_SetProfile)(t, fn, NULL) < 0)
      return -1;
#endif
  paused = 1;
  PyObject *threading = PyImport_ImportModule("threading");
  PyObject *r = threading ? PyObject_CallMethod(
                                threading, trace ? "settrace" : "setprofile",
                                "O", fn ? hooks[trace] : Py_None)
                          : NULL;
  paused = 0;
  Py_XDECREF(threading);
  Py_XDECREF(r);
  return r ? 0 : -1;
}

static int setup_cache(void) {
  if (extra_index < 0 && (extra_index = CODE_EXTRA_INDEX(NULL)) < 0) {
    PyErr_SetString(PyExc_RuntimeError, "no code extra slot left");
    return -1;
  }
  if (!sites && !(sites = PyDict_New())) return -1;
  if (!line_tables && !(line_tables = PyList_New(0))) return -1;
  return 0;
}

/* A tuple of str from a sequence of str (None: empty); NULL with an
 * exception. */
static PyObject *str_tuple(PyObject *o, const char *what) {
  if (o == Py_None) return PyTuple_New(0);
  PyObject *t = PySequence_Tuple(o);
  for (Py_ssize_t i = 0; t && i < PyTuple_GET_SIZE(t); i++)
    if (!PyUnicode_Check(PyTuple_GET_ITEM(t, i))) {
      PyErr_Format(PyExc_TypeError,
                   "%s: a list of module names or path "
                   "prefixes (str)",
                   what);
      Py_CLEAR(t);
    }
  return t;
}

static PyObject *calls_start(PyObject *m, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"include",   "exclude",         "builtins",
                           "max_depth", "min_duration_ns", NULL};
  PyObject *inc = Py_None, *exc = Py_None;
  int builtins = 0, max_depth = 0;
  unsigned long long min_ns = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOpiK:calls_start", kwlist, &inc,
                                   &exc, &builtins, &max_depth, &min_ns))
    return NULL;
  if (max_depth < 0)
    return PyErr_Format(PyExc_ValueError, "max_depth must be >= 0");
  if (setup_cache() < 0) return NULL;
  PyObject *ti = str_tuple(inc, "include"),
           *te = ti ? str_tuple(exc, "exclude") : NULL;
  if (!te) {
    Py_XDECREF(ti);
    return NULL;
  }
  Py_XSETREF(opt_include, ti);
  Py_XSETREF(opt_exclude, te);
  opt_builtins = builtins;
  opt_max_depth = max_depth;
  opt_min_ns = min_ns;
  options_gen++;
  calls_gen++;
  dropped_short = dropped_memory = 0;
  calls_on = 1;
#ifdef CALLS_HOOK
  calls_hooked = !builtins && hook_set(1) == 0;
  if (calls_hooked) Py_RETURN_NONE;
#endif
#ifdef CALLS_MONITORING
  int on = mon_start(builtins);
  calls_monitored = on > 0;
  if (on) {
    if (on < 0) calls_on = 0;
    return on < 0 ? NULL : Py_NewRef(Py_None);
  }
#endif
  if (set_all(0, profile_fn) < 0) {
    calls_on = 0;
    set_all(0, NULL);
    return NULL;
  }
  Py_RETURN_NONE;
}

/* Stops tracing calls. The calls still open on this thread are ended now;
 * other threads' open calls end when the session closes. */
static PyObject *calls_stop(PyObject *m, PyObject *unused) {
  if (!calls_on) Py_RETURN_NONE;
  calls_on = 0;
  int rc = 0;
#ifdef CALLS_HOOK
  if (calls_hooked)
    hook_set(0); /* a hook set since by someone else stays */
  else
#endif
#ifdef CALLS_MONITORING
      if (calls_monitored)
    rc = mon_stop();
  else
#endif
    rc = set_all(0, NULL);
  call_state *s = state();
  while (s && s->depth > 0) call_end(s);
  if (s) send_pending(s);
  calls_gen++;
  if (rc < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *calls_dropped(PyObject *m, PyObject *unused) {
  return PyLong_FromUnsignedLongLong(dropped_short);
}

static PyObject *calls_dropped_memory(PyObject *m, PyObject *unused) {
  return PyLong_FromUnsignedLongLong(dropped_memory);
}

/* How calls are traced: "eval_frame" (the hook), "monitoring"
 * (sys.monitoring) or "profile". */
static PyObject *calls_mechanism(PyObject *m, PyObject *unused) {
#ifdef CALLS_MONITORING
  if (calls_monitored) return PyUnicode_FromString("monitoring");
#endif
  return PyUnicode_FromString(calls_hooked ? "eval_frame" : "profile");
}

/* Why the profile function stands in for sys.monitoring (another tool
 * holds its id), or None. */
static PyObject *calls_fallback(PyObject *m, PyObject *unused) {
#ifdef CALLS_MONITORING
  if (mon_fallback[0]) return PyUnicode_FromString(mon_fallback);
#endif
  Py_RETURN_NONE;
}

static void line_table_free(PyObject *cap) {
  line_table *lt = PyCapsule_GetPointer(cap, NULL);
  Py_XDECREF(lt->code);
  PyMem_RawFree(lt->lines);
  PyMem_RawFree(lt);
}

/* Times code's lines from now on (ci: its cache entry). 0, or -1 with an
 * exception. */
static int line_table_attach(PyObject *code, code_info *ci) {
  if (ci->lt) return 0;
  line_table *lt = PyMem_RawCalloc(1, sizeof *lt);
  PyObject *cap = lt ? PyCapsule_New(lt, NULL, line_table_free) : NULL;
  if (!cap) {
    if (!lt) PyErr_NoMemory();
    PyMem_RawFree(lt);
    return -1;
  }
  Py_INCREF(code);
  lt->code = code;
  lt->first = ((PyCodeObject *)code)->co_firstlineno;
  int rc = PyList_Append(line_tables, cap);
  Py_DECREF(cap);
  if (rc == 0) ci->lt = lt;
  return rc;
}

/* The cache entry of a code object, made when missing; NULL with an
 * exception. */
static code_info *info_of_code(PyObject *code) {
  if (!PyCode_Check(code)) {
    PyErr_Format(PyExc_TypeError,
                 "lines: a function or code object, not %.100s",
                 Py_TYPE(code)->tp_name);
    return NULL;
  }
  if (setup_cache() < 0) return NULL;
  void *p = NULL;
  CODE_GET_EXTRA(code, extra_index, &p);
  code_info *ci = p;
  if (!ci) {
    if (!(ci = PyMem_RawCalloc(1, sizeof *ci))) {
      PyErr_NoMemory();
      return NULL;
    }
    if (CODE_SET_EXTRA(code, extra_index, ci) < 0) {
      PyMem_RawFree(ci);
      return NULL;
    }
  }
  return ci;
}

/* lines_add(code): the code's lines are timed from now on. */
static PyObject *lines_add(PyObject *m, PyObject *code) {
  code_info *ci = info_of_code(code);
  if (!ci || line_table_attach(code, ci) < 0) return NULL;
  Py_RETURN_NONE;
}

/* lines_trampoline(code): code is a chosen function's trampoline, which
 * has its name: its frames are neither timed nor zones. */
static PyObject *lines_trampoline(PyObject *m, PyObject *code) {
  code_info *ci = info_of_code(code);
  if (!ci) return NULL;
  ci->trampoline = 1;
  ci->site = NULL;
  Py_RETURN_NONE;
}

/* lines_add_name("module:qualname"): the lines of the functions of that
 * name are timed, from their next call (the module need not be imported
 * yet; a script run as the main program is "__main__"). */
static PyObject *lines_add_name(PyObject *m, PyObject *name) {
  if (!PyUnicode_Check(name) ||
      PyUnicode_FindChar(name, ':', 0, PyUnicode_GET_LENGTH(name), 1) < 1)
    return PyErr_Format(PyExc_ValueError, "lines: MODULE:FUNCTION, not %R",
                        name);
  if (setup_cache() < 0) return NULL;
  if (!line_names && !(line_names = PySet_New(NULL))) return NULL;
  if (PySet_Add(line_names, name) < 0) return NULL;
  options_gen++;
  Py_RETURN_NONE;
}

static PyObject *lines_start(PyObject *m, PyObject *unused) {
  if (lines_on) Py_RETURN_NONE;
  if (setup_cache() < 0) return NULL;
  lines_gen++;
  lines_on = 1;
  if (set_all(1, trace_fn) < 0) {
    lines_on = 0;
    set_all(1, NULL);
    return NULL;
  }
  Py_RETURN_NONE;
}

/* lines_call(fn, *args, **kwargs): fn(*args, **kwargs) with line events
 * on, on this thread, while lines_local(True) is in force (the trampoline
 * of a chosen function calls its original code through this). The trace
 * function is set when the outermost such call begins, unless it is on
 * every thread already, and removed when that call ends. The rest of the
 * program runs untraced. */
static int lines_local_on;

static PyObject *lines_local(PyObject *m, PyObject *on) {
  int v = PyObject_IsTrue(on);
  if (v < 0) return NULL;
  if (v && setup_cache() < 0) return NULL;
  lines_local_on = v;
  Py_RETURN_NONE;
}

static PyObject *lines_call(PyObject *m, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames) {
  if (nargs < 1)
    return PyErr_Format(PyExc_TypeError, "lines_call: a function to call");
  int counted = lines_local_on;
  if (counted && !lines_on && !trace_held()) {
    if (!ls) ls = thread_alloc(sizeof *ls, 1);
    if (ls) ls->depth = ls->pins = 0, ls->gen = lines_gen;
    PyEval_SetTrace(trace_fn, NULL);
  }
  local_depth += counted;
  PyObject *r =
      PyObject_Vectorcall(args[0], args + 1, (size_t)(nargs - 1), kwnames);
  local_depth -= counted;
  if (counted && !lines_on && !trace_held()) PyEval_SetTrace(NULL, NULL);
  return r;
}

/* lines_resolver(fn): fn(code) is called once for each code object chosen
 * by name, at its first call seen by the trace function (None: not). */
static PyObject *lines_resolver(PyObject *m, PyObject *fn) {
  Py_XSETREF(line_resolver, fn == Py_None ? NULL : (Py_INCREF(fn), fn));
  Py_RETURN_NONE;
}

/* lines_release(): the trace function leaves every thread (each at its next
 * event, once no timed call runs there) and threads started later; the
 * chosen code is reached through lines_call. */
static PyObject *lines_release(PyObject *m, PyObject *unused) {
  if (!lines_on) Py_RETURN_NONE;
  lines_on = 0;
  PyObject *threading = PyImport_ImportModule("threading");
  PyObject *r = threading
                    ? PyObject_CallMethod(threading, "settrace", "O", Py_None)
                    : NULL;
  Py_XDECREF(threading);
  if (!r) return NULL;
  Py_DECREF(r);
  if (!trace_held()) PyEval_SetTrace(NULL, NULL);
  Py_RETURN_NONE;
}

static PyObject *lines_stop(PyObject *m, PyObject *unused) {
  lines_gen++; /* frames pinned by the resolver hold it no more */
  if (!lines_on) Py_RETURN_NONE;
  lines_on = 0;
  if (set_all(1, NULL) < 0) return NULL;
  Py_RETURN_NONE;
}

/* lines_stats() -> [(code, [(line, hits, total_ns, exclusive_ns), ...])]
 * for every timed code object, lines that ran only. */
static PyObject *lines_stats(PyObject *m, PyObject *unused) {
  PyObject *out = PyList_New(0);
  for (Py_ssize_t i = 0; out && line_tables && i < PyList_GET_SIZE(line_tables);
       i++) {
    line_table *lt =
        PyCapsule_GetPointer(PyList_GET_ITEM(line_tables, i), NULL);
    PyObject *rows = PyList_New(0);
    for (int j = 0; rows && j < lt->n; j++) {
      line_stat *st = &lt->lines[j];
      if (!st->hits) continue;
      PyObject *r = Py_BuildValue(
          "(iKKK)", lt->first + j, (unsigned long long)st->hits,
          (unsigned long long)st->total_ns, (unsigned long long)st->excl_ns);
      if (!r || PyList_Append(rows, r) < 0) Py_CLEAR(rows);
      Py_XDECREF(r);
    }
    PyObject *t = rows ? Py_BuildValue("(OO)", lt->code, rows) : NULL;
    Py_XDECREF(rows);
    if (!t || PyList_Append(out, t) < 0) Py_CLEAR(out);
    Py_XDECREF(t);
  }
  return out;
}

/* lines_clear(): forgets the timings (the chosen code stays chosen). */
static PyObject *lines_clear(PyObject *m, PyObject *unused) {
  for (Py_ssize_t i = 0; line_tables && i < PyList_GET_SIZE(line_tables); i++) {
    line_table *lt =
        PyCapsule_GetPointer(PyList_GET_ITEM(line_tables, i), NULL);
    if (lt->n) memset(lt->lines, 0, (size_t)lt->n * sizeof *lt->lines);
  }
  Py_RETURN_NONE;
}

PyMethodDef mlprof__calls_methods[] = {
    {"calls_start", (PyCFunction)(void (*)(void))calls_start,
     METH_VARARGS | METH_KEYWORDS,
     "calls_start(include=(), exclude=(), builtins=False, max_depth=0, "
     "min_duration_ns=0): traces every Python call as a zone."},
    {"calls_stop", calls_stop, METH_NOARGS, "Stops tracing calls."},
    {"calls_dropped", calls_dropped, METH_NOARGS,
     "Calls dropped for lasting less than the minimum duration."},
    {"calls_dropped_memory", calls_dropped_memory, METH_NOARGS,
     "Calls not recorded for lack of memory to hold their place."},
    {"calls_mechanism", calls_mechanism, METH_NOARGS,
     "How calls are traced: 'eval_frame', 'monitoring' or 'profile'."},
    {"calls_fallback", calls_fallback, METH_NOARGS,
     "Why the profile function stands in for sys.monitoring, or None."},
    {"lines_add", lines_add, METH_O, "lines_add(code): times its lines."},
    {"lines_trampoline", lines_trampoline, METH_O,
     "lines_trampoline(code): a trampoline's code, never traced."},
    {"lines_add_name", lines_add_name, METH_O,
     "lines_add_name('module:qualname'): times the lines of that function."},
    {"lines_start", lines_start, METH_NOARGS, "Starts timing lines."},
    {"lines_stop", lines_stop, METH_NOARGS, "Stops timing lines."},
    {"lines_local", lines_local, METH_O,
     "lines_local(on): lines_call times lines on its thread."},
    {"lines_call", (PyCFunction)(void (*)(void))lines_call,
     METH_FASTCALL | METH_KEYWORDS,
     "lines_call(fn, *args, **kwargs): fn's call with line events on."},
    {"lines_resolver", lines_resolver, METH_O,
     "lines_resolver(fn): fn(code) at the first call of code chosen by name."},
    {"lines_release", lines_release, METH_NOARGS,
     "The trace function leaves the threads that need it no more."},
    {"lines_stats", lines_stats, METH_NOARGS,
     "[(code, [(line, hits, total_ns, exclusive_ns)])]"},
    {"lines_clear", lines_clear, METH_NOARGS, "Forgets the line timings."},
    {NULL, NULL, 0, NULL},
};
