/* _mlprof: the CPython extension under the `mlprof` package.
 *
 * The analysis side (reader, job model, statistics, exporters) is compiled
 * into this module; the recording library is not. One recorder per process,
 * by design: every recording call goes through a table of libmlprof's
 * functions, resolved once at import (api_setup): the libmlprof.so already
 * in the process when there is one (preloaded by `mlprof run`, or a
 * dependency of the program or of another library; by its soname, else by
 * dlsym(RTLD_DEFAULT)), else the copy bundled
 * in the package (mlprof/_lib/libmlprof.so), loaded RTLD_GLOBAL so that C
 * libraries loaded later record into it too. That library starts a session
 * from MLPROF_OUTPUT when it loads, as it does for C programs.
 *
 * Hot path: `with prof.zone("x"):` is a C method call that finds a cached
 * Zone object (by the identity of the name string, then by a dict lookup),
 * and C __enter__/__exit__ that call zone_begin_site/zone_end. Nothing is
 * allocated in the common case.
 *
 * Plain CPython C API, static types with designated initialisers; builds for
 * any CPython >= 3.9. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <mlprof.h>

#include "_calls.h"
#include "_hooks.h"
#include "_stacks.h"
#include "analyze/analysis.h"
#include "export/export.h"
#include "format/reader.h"
#include "model/job.h"

/* ---- the recording library in use: libmlprof.so, loaded once ----------- */

#define MLPROF_API(X)                                                    \
  X(void, config_init, (mlprof_config *))                                \
  X(int, init, (const mlprof_config *))                                  \
  X(int, shutdown, (void))                                               \
  X(int, flush, (void))                                                  \
  X(const char *, output_path, (void))                                   \
  X(void, set_enabled, (int))                                            \
  X(int, is_enabled, (void))                                             \
  X(int, memory_set, (const char *))                                     \
  X(int, memory_active, (void))                                          \
  X(int, zone_begin_site, (const mlprof_site *))                         \
  X(void, zone_end, (void))                                              \
  X(const mlprof_site *, site_intern, (const char *, mlprof_category))   \
  X(void, zone_meta, (const char *, const char *))                       \
  X(void, gauge_set, (const char *, double))                             \
  X(void, units_add, (const char *, uint64_t))                           \
  X(void, step, (void))                                                  \
  X(void, step_end, (void))                                              \
  X(void, meta, (const char *, const char *))                            \
  X(void, thread_name, (const char *))                                   \
  X(int, track_spans, (const char *, const mlprof_span *, size_t))       \
  X(int, lines_set,                                                      \
    (const char *, const char *, uint32_t, const mlprof_line *, size_t)) \
  X(uint64_t, dropped, (void))                                           \
  X(const char *, strerror, (int))                                       \
  X(const char *, version, (void))

static struct {
#define API_FIELD(ret, name, args) ret(*name) args;
  MLPROF_API(API_FIELD)
#undef API_FIELD
} api;

/* mlprof_track_allocs of the library in use, NULL in one older than 1.5's
 * (resolved apart from the api table, which a missing symbol fails). */
static int (*track_allocs_fn)(const char *, const char *, const mlprof_alloc *,
                              size_t);

/* The library's _exit, which flushes and finishes the profile before it
 * ends the process (src/intercept/exec.c); NULL where the process's _exit
 * is already that one (the library preloaded, or linked into the program). */
static void (*lib_exit)(int);

/* Path of the library in use (mlprof._mlprof.LIBRARY). */
static char api_origin[4096];

/* Whether this interpreter's stack walker is registered with the library
 * (mlprof._mlprof.STACKS): the stack sampler then samples its threads. */
static int stacks_walker;
static void (*stacks_fork_child)(void);

#define STR_(x) #x
#define STR(x) STR_(x)
#define LIB_SONAME "libmlprof.so." STR(MLPROF_VERSION_MAJOR)

/* Fills api from the libmlprof.so in the process, else from the one bundled
 * next to this module (_lib/libmlprof.so). 0, or -1 with an ImportError. */
static int api_setup(void) {
  void *h = dlopen(LIB_SONAME, RTLD_NOW | RTLD_NOLOAD);
  if (!h && dlsym(RTLD_DEFAULT, "mlprof_zone_begin_site")) h = RTLD_DEFAULT;
  char bundled[sizeof api_origin] = "_lib/libmlprof.so";
  Dl_info self;
  if (!h && dladdr((void *)&api_setup, &self) && self.dli_fname) {
    const char *slash = strrchr(self.dli_fname, '/');
    int dir = slash ? (int)(slash - self.dli_fname) + 1 : 0;
    snprintf(bundled, sizeof bundled, "%.*s_lib/libmlprof.so", dir,
             self.dli_fname);
  }
  if (!h && !(h = dlopen(bundled, RTLD_NOW | RTLD_GLOBAL))) {
    const char *why = dlerror();
    PyErr_Format(PyExc_ImportError, "mlprof: cannot load %s: %s", bundled,
                 why ? why : "not found");
    return -1;
  }
  void *fn;
  const char *want;
#define API_LOOKUP(ret, name, args)                           \
  if (!(fn = dlsym(h, want = "mlprof_" #name))) goto missing; \
  memcpy(&api.name, &fn, sizeof fn);
  MLPROF_API(API_LOOKUP)
#undef API_LOOKUP
  void *ta = dlsym(h, "mlprof_track_allocs");
  if (ta) memcpy(&track_allocs_fn, &ta, sizeof ta);
  stacks_walker = mlprof_stacks_register(h, &stacks_fork_child);
  Dl_info lib;
  snprintf(api_origin, sizeof api_origin, "%s",
           dladdr(fn, &lib) && lib.dli_fname ? lib.dli_fname : bundled);
  /* A library loaded here does not interpose the C library's _exit for the
   * interpreter, as a preloaded or linked one does: os._exit goes through
   * the library's own (wrap_os_exit). */
  void *own = h == RTLD_DEFAULT ? NULL : dlsym(h, "_exit");
  if (own && own != dlsym(RTLD_DEFAULT, "_exit"))
    memcpy(&lib_exit, &own, sizeof own);
  return 0;
missing:
  PyErr_Format(PyExc_ImportError,
               "mlprof: the libmlprof in this process lacks %s (older than "
               "this package?)",
               want);
  return -1;
}

/* ---- which zones this thread owes an end ---------------------------------
 *
 * api.zone_begin_site() returns 0 when recording is off; calling
 * api.zone_end() for such a zone would close an enclosing zone that was
 * begun while recording was on. So each __enter__ pushes whether an end is
 * owed and each __exit__ pops it. `with` blocks nest per thread, so a
 * per-thread stack is exact. Past OWED_MAX levels an end is always sent
 * (the library ignores an end with no begin). An entry is 0 when no end is
 * owed, else 1 + the metadata keys attached to the zone so far, so that a
 * key past the library's limit is not dropped without a word. */
#define OWED_MAX 1024
#define ZONE_META_MAX 6 /* keys per zone the library keeps (mlprof.h) */
typedef struct {
  uint32_t top;
  uint8_t owed[OWED_MAX];
} owed_stack;
static __thread owed_stack owed __attribute__((tls_model("initial-exec")));

static inline void zone_enter(const mlprof_site *site) {
  int r = api.zone_begin_site(site);
  uint32_t t = owed.top;
  if (t < OWED_MAX) owed.owed[t] = r != 0;
  owed.top = t + 1;
}

static inline void zone_exit(void) {
  uint32_t t = owed.top;
  if (t == 0) return; /* more exits than enters (e.g. after fork) */
  owed.top = --t;
  if (t >= OWED_MAX || owed.owed[t]) api.zone_end();
}

static PyObject *ErrorObject; /* mlprof.Error */

/* Counts n more metadata keys on this thread's innermost zone (when it is
 * recorded) and warns, once per process, when the zone holds more than the
 * library keeps. 0, or -1 with an exception (the warning made an error). */
static int count_zone_meta(size_t n) {
  static int warned;
  uint32_t t = owed.top;
  if (t == 0 || t > OWED_MAX || !owed.owed[t - 1]) return 0;
  size_t have = owed.owed[t - 1] - 1u + n;
  owed.owed[t - 1] = (uint8_t)(1 + (have > 255 ? 255 : have));
  if (have <= ZONE_META_MAX || warned) return 0;
  warned = 1;
  return PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                          "mlprof: a zone keeps at most %d metadata keys "
                          "(zone(**metadata), record_metric, zone_meta); "
                          "the ones after the %dth are dropped",
                          ZONE_META_MAX, ZONE_META_MAX);
}

static PyObject *raise_mlprof(int rc, const char *what) {
  PyErr_Format(ErrorObject, "%s: %s", what, api.strerror(rc));
  return NULL;
}

/* ---- categories ---------------------------------------------------------- */

static const char *const cat_names[MLPROF_CAT_COUNT] = {
#define CAT_NAME(name, code, text) [code] = text,
    MLPROF_CATEGORY_MAP(CAT_NAME)
#undef CAT_NAME
};

/* A category from None, an int or a name; -1 with an exception set. */
static int parse_category(PyObject *o) {
  if (!o || o == Py_None) return MLPROF_CAT_NONE;
  if (PyLong_Check(o)) {
    long v = PyLong_AsLong(o);
    if (v >= 0 && v < MLPROF_CAT_COUNT) return (int)v;
  } else if (PyUnicode_Check(o)) {
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) PyErr_Clear(); /* lone surrogates: no category has them */
    for (int i = 0; s && i < MLPROF_CAT_COUNT; i++)
      if (strcmp(s, cat_names[i]) == 0) return i;
    if (s && strcmp(s, "comm") == 0) return MLPROF_CAT_COMM;
  }
  if (!PyErr_Occurred())
    PyErr_Format(PyExc_ValueError,
                 "unknown category %R: use data, forward, backward, "
                 "optimizer, communication, io or user",
                 o);
  return -1;
}

/* The UTF-8 bytes of a str as the profile stores names: the surrogates of
 * os.fsdecode() (bytes that are not UTF-8) become the bytes they stand for
 * (surrogateescape), any other lone surrogate a '?'; never fails on the
 * text. New reference, NULL with an exception (memory only). */
static PyObject *name_encode(PyObject *s) {
  PyObject *b = PyUnicode_AsEncodedString(s, "utf-8", "surrogateescape");
  if (!b && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
    PyErr_Clear();
    b = PyUnicode_AsEncodedString(s, "utf-8", "replace");
  }
  return b;
}

/* A str name (zone, counter, unit, thread, track) as a NUL-free C string,
 * encoded as name_encode says. *keep gets a reference to release once the
 * string is used (NULL when the str's own UTF-8 serves). NULL with an
 * exception for a non-str or a name with a NUL. */
static const char *c_name(PyObject *o, const char *what, PyObject **keep) {
  *keep = NULL;
  if (!PyUnicode_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what,
                 Py_TYPE(o)->tp_name);
    return NULL;
  }
  Py_ssize_t len;
  const char *s = PyUnicode_AsUTF8AndSize(o, &len);
  if (!s) {
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return NULL;
    PyErr_Clear();
    if (!(*keep = name_encode(o))) return NULL;
    s = PyBytes_AS_STRING(*keep);
    len = PyBytes_GET_SIZE(*keep);
  }
  if ((size_t)len != strlen(s)) {
    Py_CLEAR(*keep);
    PyErr_Format(PyExc_ValueError, "%s contains a NUL character", what);
    return NULL;
  }
  return s;
}

/* A site for a str name; NULL with an exception set. */
static const mlprof_site *intern_name(PyObject *name, int cat) {
  PyObject *keep;
  const char *s = c_name(name, "zone name", &keep);
  if (!s) return NULL;
  const mlprof_site *site = api.site_intern(s, (mlprof_category)cat);
  Py_XDECREF(keep);
  if (!site) PyErr_SetString(PyExc_MemoryError, "cannot intern the zone name");
  return site;
}

/* ---- Zone: a cached context manager for one (name, category) ------------- */

typedef struct {
  PyObject_HEAD const mlprof_site *site;
  PyObject *name;
  int category;
} ZoneObject;

static PyTypeObject ZoneType;

static PyObject *zone_new_for(PyObject *name, int cat) {
  const mlprof_site *site = intern_name(name, cat);
  if (!site) return NULL;
  ZoneObject *z = PyObject_New(ZoneObject, &ZoneType);
  if (!z) return NULL;
  z->site = site;
  Py_INCREF(name);
  z->name = name;
  z->category = cat;
  return (PyObject *)z;
}

static PyObject *Zone_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"name", "category", NULL};
  PyObject *name, *catobj = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "U|O:Zone", kwlist, &name,
                                   &catobj))
    return NULL;
  int cat = parse_category(catobj);
  if (cat < 0) return NULL;
  return zone_new_for(name, cat);
}

static void Zone_dealloc(ZoneObject *z) {
  Py_XDECREF(z->name);
  PyObject_Free(z);
}

static PyObject *Zone_enter(ZoneObject *z, PyObject *unused) {
  zone_enter(z->site);
  Py_INCREF(z);
  return (PyObject *)z;
}

static PyObject *Zone_exit(PyObject *z, PyObject *const *args,
                           Py_ssize_t nargs) {
  zone_exit();
  Py_RETURN_FALSE; /* never swallows the exception */
}

void mlprof__py_zone_enter(const mlprof_site *site) { zone_enter(site); }

void mlprof__py_zone_exit(void) { zone_exit(); }

void mlprof__py_units_add(const char *name, uint64_t n) {
  api.units_add(name, n);
}

const mlprof_site *mlprof__py_zone_site(PyObject *zone) {
  if (PyObject_TypeCheck(zone, &ZoneType)) return ((ZoneObject *)zone)->site;
  PyErr_Format(PyExc_TypeError, "a mlprof Zone is needed, not %.100s",
               Py_TYPE(zone)->tp_name);
  return NULL;
}

static PyObject *Zone_repr(ZoneObject *z) {
  return PyUnicode_FromFormat("<mlprof.Zone %R category=%s>", z->name,
                              cat_names[z->category]);
}

static PyObject *Zone_get_name(ZoneObject *z, void *c) {
  Py_INCREF(z->name);
  return z->name;
}

static PyObject *Zone_get_category(ZoneObject *z, void *c) {
  return PyUnicode_FromString(cat_names[z->category]);
}

static PyMethodDef Zone_methods[] = {
    {"__enter__", (PyCFunction)Zone_enter, METH_NOARGS,
     "Begins the zone (recorded when recording is on)."},
    {"__exit__", (PyCFunction)(void (*)(void))Zone_exit, METH_FASTCALL,
     "Ends the zone, also when the block raised."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Zone_getset[] = {
    {"name", (getter)Zone_get_name, NULL, "the zone's name", NULL},
    {"category", (getter)Zone_get_category, NULL, "the zone's category", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject ZoneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mlprof._mlprof.Zone",
    .tp_basicsize = sizeof(ZoneObject),
    .tp_dealloc = (destructor)Zone_dealloc,
    .tp_repr = (reprfunc)Zone_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "Zone(name, category=None): a reusable context manager that "
        "records a zone\nper `with` block. Reentrant and usable from "
        "any thread.",
    .tp_methods = Zone_methods,
    .tp_getset = Zone_getset,
    .tp_new = Zone_new,
};

/* ---- SyncMethod: a tensor method that is a host sync off the CPU --------- */

/* SyncMethod(fn, zone) stands for torch's Tensor method fn
 * (mlprof/distributed.py): called on a tensor whose is_cpu is True it is fn,
 * with one attribute read more; on any other tensor the call is recorded as
 * zone. A method descriptor with vectorcall, so `t.item()` makes no bound
 * method; other attributes (__name__, __doc__) are fn's. */
typedef struct {
  PyObject_HEAD PyObject *fn;
  const mlprof_site *site;
  vectorcallfunc vectorcall;
} SyncMethodObject;

static PyTypeObject SyncMethodType;
static PyObject *str_is_cpu;
/* A call of ours is running on this thread: a tensor subclass's
 * __torch_function__ calls torch.Tensor.NAME, this method, from within. */
static __thread int syncing;

static PyObject *SyncMethod_vectorcall(PyObject *o, PyObject *const *args,
                                       size_t nargsf, PyObject *kwnames) {
  SyncMethodObject *m = (SyncMethodObject *)o;
  if (PyVectorcall_NARGS(nargsf) < 1 || syncing)
    return PyObject_Vectorcall(m->fn, args, nargsf, kwnames);
  PyObject *cpu = PyObject_GetAttr(args[0], str_is_cpu);
  if (!cpu) PyErr_Clear(); /* not a tensor: fn says what is wrong */
  Py_XDECREF(cpu);
  if (!cpu || cpu == Py_True)
    return PyObject_Vectorcall(m->fn, args, nargsf, kwnames);
  syncing = 1;
  zone_enter(m->site);
  PyObject *r = PyObject_Vectorcall(m->fn, args, nargsf, kwnames);
  zone_exit();
  syncing = 0;
  return r;
}

static PyObject *SyncMethod_new(PyTypeObject *type, PyObject *args,
                                PyObject *kw) {
  PyObject *fn, *zone;
  if (kw && PyDict_GET_SIZE(kw)) {
    PyErr_SetString(PyExc_TypeError, "SyncMethod takes no keywords");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "OO!:SyncMethod", &fn, &ZoneType, &zone))
    return NULL;
  SyncMethodObject *m = PyObject_New(SyncMethodObject, &SyncMethodType);
  if (!m) return NULL;
  Py_INCREF(fn);
  m->fn = fn;
  m->site = ((ZoneObject *)zone)->site;
  m->vectorcall = SyncMethod_vectorcall;
  return (PyObject *)m;
}

static void SyncMethod_dealloc(SyncMethodObject *m) {
  Py_XDECREF(m->fn);
  PyObject_Free(m);
}

static PyObject *SyncMethod_get(PyObject *m, PyObject *obj, PyObject *type) {
  if (!obj || obj == Py_None) {
    Py_INCREF(m);
    return m;
  }
  return PyMethod_New(m, obj);
}

static PyObject *SyncMethod_getattro(PyObject *o, PyObject *name) {
  PyObject *r = PyObject_GenericGetAttr(o, name);
  if (r || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
  PyErr_Clear();
  return PyObject_GetAttr(((SyncMethodObject *)o)->fn, name);
}

static PyObject *SyncMethod_get_doc(SyncMethodObject *m, void *c) {
  return PyObject_GetAttrString(m->fn, "__doc__");
}

static PyObject *SyncMethod_repr(SyncMethodObject *m) {
  return PyUnicode_FromFormat("<mlprof host sync %R>", m->fn);
}

static PyGetSetDef SyncMethod_getset[] = {
    {"__doc__", (getter)SyncMethod_get_doc, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef SyncMethod_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(SyncMethodObject, fn), READONLY,
     "torch's method"},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject SyncMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mlprof._mlprof.SyncMethod",
    .tp_basicsize = sizeof(SyncMethodObject),
    .tp_dealloc = (destructor)SyncMethod_dealloc,
    .tp_vectorcall_offset = offsetof(SyncMethodObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getattro = SyncMethod_getattro,
    .tp_descr_get = SyncMethod_get,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc =
        "SyncMethod(fn, zone): torch's Tensor method fn, recorded as "
        "zone when\ncalled on a tensor that is not on the CPU.",
    .tp_members = SyncMethod_members,
    .tp_getset = SyncMethod_getset,
    .tp_repr = (reprfunc)SyncMethod_repr,
    .tp_new = SyncMethod_new,
};

/* ---- MetaZone: a zone with key=value metadata (slower path) -------------- */

typedef struct {
  PyObject_HEAD const mlprof_site *site;
  PyObject *name;
  PyObject *items; /* tuple of (bytes key, bytes value) */
} MetaZoneObject;

static PyTypeObject MetaZoneType;

static void MetaZone_dealloc(MetaZoneObject *z) {
  Py_XDECREF(z->name);
  Py_XDECREF(z->items);
  PyObject_Free(z);
}

static PyObject *MetaZone_enter(MetaZoneObject *z, PyObject *unused) {
  zone_enter(z->site);
  Py_ssize_t n = PyTuple_GET_SIZE(z->items);
  if (owed.top <= OWED_MAX && owed.owed[owed.top - 1]) {
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *kv = PyTuple_GET_ITEM(z->items, i);
      api.zone_meta(PyBytes_AS_STRING(PyTuple_GET_ITEM(kv, 0)),
                    PyBytes_AS_STRING(PyTuple_GET_ITEM(kv, 1)));
    }
    /* The zone is open: a warning turned into an error is raised by the
     * `with` statement, which then does not call __exit__; so end it. */
    if (count_zone_meta((size_t)n) < 0) {
      zone_exit();
      return NULL;
    }
  }
  Py_INCREF(z);
  return (PyObject *)z;
}

static PyMethodDef MetaZone_methods[] = {
    {"__enter__", (PyCFunction)MetaZone_enter, METH_NOARGS,
     "Begins the zone and attaches its metadata."},
    {"__exit__", (PyCFunction)(void (*)(void))Zone_exit, METH_FASTCALL,
     "Ends the zone, also when the block raised."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject MetaZoneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mlprof._mlprof.MetaZone",
    .tp_basicsize = sizeof(MetaZoneObject),
    .tp_dealloc = (destructor)MetaZone_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A zone with key=value metadata (made by Profiler.zone).",
    .tp_methods = MetaZone_methods,
};

/* The bytes of str(o) as name_encode gives them, without NULs. */
static PyObject *meta_bytes(PyObject *o) {
  PyObject *s = PyUnicode_Check(o) ? (Py_INCREF(o), o) : PyObject_Str(o);
  if (!s) return NULL;
  PyObject *b = name_encode(s);
  Py_DECREF(s);
  if (b && memchr(PyBytes_AS_STRING(b), 0, (size_t)PyBytes_GET_SIZE(b))) {
    Py_DECREF(b);
    PyErr_SetString(PyExc_ValueError, "zone metadata contains a NUL character");
    return NULL;
  }
  return b;
}

/* ---- ProfilerBase: the C half of mlprof.Profiler ------------------------- */

#define ZCACHE 64
typedef struct {
  PyObject_HEAD PyObject
      *cache; /* dict: name -> Zone (category none); (name, cat) -> Zone */
  struct {
    PyObject *key; /* the str object last asked for (borrowed from zone) */
    PyObject *zone;
  } fast[ZCACHE];
  PyObject *dict; /* instance __dict__ for the Python subclass */
  PyObject *weakrefs;
} ProfilerObject;

static int Profiler_init(ProfilerObject *self, PyObject *args, PyObject *kw) {
  return 0; /* the Python subclass does the configuration */
}

static PyObject *Profiler_new(PyTypeObject *type, PyObject *args,
                              PyObject *kw) {
  ProfilerObject *self = (ProfilerObject *)type->tp_alloc(type, 0);
  if (!self) return NULL;
  self->cache = PyDict_New();
  if (!self->cache) {
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject *)self;
}

static int Profiler_traverse(ProfilerObject *self, visitproc visit, void *arg) {
  Py_VISIT(self->cache);
  Py_VISIT(self->dict);
  for (int i = 0; i < ZCACHE; i++) Py_VISIT(self->fast[i].zone);
  return 0;
}

static int Profiler_clear(ProfilerObject *self) {
  Py_CLEAR(self->cache);
  Py_CLEAR(self->dict);
  for (int i = 0; i < ZCACHE; i++) {
    self->fast[i].key = NULL;
    Py_CLEAR(self->fast[i].zone);
  }
  return 0;
}

static void Profiler_dealloc(ProfilerObject *self) {
  PyObject_GC_UnTrack(self);
  if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
  Profiler_clear(self);
  /* A Python subclass's type reference is released by subtype_dealloc. */
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The cached Zone for (name, cat), made on first use. New reference. */
static PyObject *cached_zone(ProfilerObject *self, PyObject *name, int cat) {
  PyObject *key;
  if (cat == MLPROF_CAT_NONE) {
    key = name;
    Py_INCREF(key);
  } else {
    key = Py_BuildValue("(Oi)", name, cat);
    if (!key) return NULL;
  }
  PyObject *z = PyDict_GetItemWithError(self->cache, key);
  if (z) {
    Py_INCREF(z);
  } else if (!PyErr_Occurred() && (z = zone_new_for(name, cat)) &&
             PyDict_SetItem(self->cache, key, z) < 0) {
    Py_CLEAR(z);
  }
  Py_DECREF(key);
  return z;
}

static PyObject *Profiler_zone(ProfilerObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames) {
  if (__builtin_expect(nargs == 1 && !kwnames, 1)) {
    PyObject *name = args[0];
    size_t slot = ((uintptr_t)name >> 4) & (ZCACHE - 1);
    if (self->fast[slot].key == name) {
      PyObject *z = self->fast[slot].zone;
      Py_INCREF(z);
      return z;
    }
    if (!PyUnicode_Check(name)) goto slow;
    PyObject *z = cached_zone(self, name, MLPROF_CAT_NONE);
    if (!z) return NULL;
    /* The zone keeps its name alive, so the borrowed key stays valid as
     * long as the slot holds the zone. */
    Py_XSETREF(self->fast[slot].zone, z);
    Py_INCREF(z);
    self->fast[slot].key = ((ZoneObject *)z)->name == name ? name : NULL;
    return z;
  }
slow:;
  PyObject *name = NULL, *catobj = NULL;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs < 1 || nargs > 2) {
    PyErr_SetString(PyExc_TypeError,
                    "zone(name, category=None, **metadata) takes a name");
    return NULL;
  }
  name = args[0];
  if (nargs == 2) catobj = args[1];
  PyObject *items = PyList_New(0);
  if (!items) return NULL;
  for (Py_ssize_t i = 0; i < nkw; i++) {
    PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
    if (PyUnicode_CompareWithASCIIString(k, "category") == 0) {
      catobj = v;
      continue;
    }
    PyObject *kb = meta_bytes(k), *vb = kb ? meta_bytes(v) : NULL;
    PyObject *pair = vb ? PyTuple_Pack(2, kb, vb) : NULL;
    Py_XDECREF(kb);
    Py_XDECREF(vb);
    if (!pair || PyList_Append(items, pair) < 0) {
      Py_XDECREF(pair);
      Py_DECREF(items);
      return NULL;
    }
    Py_DECREF(pair);
  }
  int cat = parse_category(catobj);
  if (cat < 0) {
    Py_DECREF(items);
    return NULL;
  }
  if (PyList_GET_SIZE(items) == 0) {
    Py_DECREF(items);
    if (!PyUnicode_Check(name)) return intern_name(name, cat), NULL;
    return cached_zone(self, name, cat);
  }
  PyObject *z = cached_zone(self, name, cat);
  if (!z) {
    Py_DECREF(items);
    return NULL;
  }
  MetaZoneObject *mz = PyObject_New(MetaZoneObject, &MetaZoneType);
  if (!mz) {
    Py_DECREF(z);
    Py_DECREF(items);
    return NULL;
  }
  mz->site = ((ZoneObject *)z)->site;
  mz->name = ((ZoneObject *)z)->name;
  Py_INCREF(mz->name);
  Py_DECREF(z);
  mz->items = PyList_AsTuple(items);
  Py_DECREF(items);
  if (!mz->items) {
    Py_DECREF(mz);
    return NULL;
  }
  return (PyObject *)mz;
}

/* record_metric(name, value), deprecated: gauge(name, value), and
 * name=value on the innermost open zone of this thread. */
static PyObject *Profiler_record_metric(ProfilerObject *self,
                                        PyObject *const *args,
                                        Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "record_metric(name, value)");
    return NULL;
  }
  double v = PyFloat_AsDouble(args[1]);
  if (v == -1.0 && PyErr_Occurred()) return NULL;
  PyObject *keep;
  const char *name = c_name(args[0], "metric name", &keep);
  if (!name) return NULL;
  api.gauge_set(name, v);
  char buf[64];
  PyOS_snprintf(buf, sizeof buf, "%.17g", v);
  api.zone_meta(name, buf);
  Py_XDECREF(keep);
  if (count_zone_meta(1) < 0) return NULL;
  Py_RETURN_NONE;
}

/* record_throughput(n, unit="samples"), deprecated: units(unit, n). */
static PyObject *Profiler_record_throughput(ProfilerObject *self,
                                            PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"n", "unit", NULL};
  PyObject *nobj, *unit = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|U:record_throughput", kwlist,
                                   &nobj, &unit))
    return NULL;
  unsigned long long n = PyLong_AsUnsignedLongLong(nobj);
  if (n == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_SetString(PyExc_ValueError,
                    "record_throughput wants a whole number >= 0");
    return NULL;
  }
  PyObject *keep = NULL;
  const char *u = unit ? c_name(unit, "unit", &keep) : "samples";
  if (!u) return NULL;
  api.units_add(u, (uint64_t)n);
  Py_XDECREF(keep);
  Py_RETURN_NONE;
}

/* gauge(name, value) and units(name, n): the module's functions and the
 * profiler's methods (self unused), as mlprof_gauge_set and
 * mlprof_units_add. */
static PyObject *mod_gauge(PyObject *m, PyObject *const *args,
                           Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "gauge(name, value)");
    return NULL;
  }
  double v = PyFloat_AsDouble(args[1]);
  if (v == -1.0 && PyErr_Occurred()) return NULL;
  PyObject *keep;
  const char *name = c_name(args[0], "gauge name", &keep);
  if (!name) return NULL;
  api.gauge_set(name, v);
  Py_XDECREF(keep);
  Py_RETURN_NONE;
}

static PyObject *mod_units(PyObject *m, PyObject *const *args,
                           Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "units(name, n)");
    return NULL;
  }
  unsigned long long n = PyLong_AsUnsignedLongLong(args[1]);
  if (n == (unsigned long long)-1 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError))
      PyErr_SetString(PyExc_ValueError, "units wants a whole number >= 0");
    return NULL;
  }
  PyObject *keep;
  const char *name = c_name(args[0], "units name", &keep);
  if (!name) return NULL;
  api.units_add(name, (uint64_t)n);
  Py_XDECREF(keep);
  Py_RETURN_NONE;
}

static PyMethodDef Profiler_methods[] = {
    {"zone", (PyCFunction)(void (*)(void))Profiler_zone,
     METH_FASTCALL | METH_KEYWORDS,
     "zone(name, category=None, **metadata): a context manager recording a "
     "zone.\nWithout metadata the same cached object is returned for a name."},
    {"gauge", (PyCFunction)(void (*)(void))mod_gauge, METH_FASTCALL,
     "gauge(name, value): sets the gauge name to value (a time series: loss, "
     "learning rate, queue depth)."},
    {"units", (PyCFunction)(void (*)(void))mod_units, METH_FASTCALL,
     "units(name, n): n units of work (samples, tokens, bytes) for the "
     "innermost open zone."},
    {"counter", (PyCFunction)(void (*)(void))mod_gauge, METH_FASTCALL,
     "Deprecated: gauge(name, value)."},
    {"record_metric", (PyCFunction)(void (*)(void))Profiler_record_metric,
     METH_FASTCALL,
     "Deprecated: gauge(name, value), and name=value on the innermost open "
     "zone."},
    {"record_throughput",
     (PyCFunction)(void (*)(void))Profiler_record_throughput,
     METH_VARARGS | METH_KEYWORDS,
     "Deprecated: record_throughput(n, unit='samples') is units(unit, n)."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ProfilerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mlprof._mlprof.ProfilerBase",
    .tp_basicsize = sizeof(ProfilerObject),
    .tp_dealloc = (destructor)Profiler_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C half of mlprof.Profiler: zones, metrics, throughput.",
    .tp_traverse = (traverseproc)Profiler_traverse,
    .tp_clear = (inquiry)Profiler_clear,
    .tp_weaklistoffset = offsetof(ProfilerObject, weakrefs),
    .tp_methods = Profiler_methods,
    .tp_dictoffset = offsetof(ProfilerObject, dict),
    .tp_init = (initproc)Profiler_init,
    .tp_new = Profiler_new,
};

/* ---- the no-op baseline for the benchmark --------------------------------
 * NoopProfiler().zone(name) returns one shared context manager whose
 * __enter__/__exit__ do nothing: the same call shape as Profiler.zone with
 * none of the work, so the benchmark's ratio is the cost of recording. */

typedef struct {
  PyObject_HEAD
} NoopObject;

static PyObject *noop_zone_singleton;

static PyObject *Noop_enter(PyObject *self, PyObject *unused) {
  Py_INCREF(self);
  return self;
}

static PyObject *Noop_exit(PyObject *self, PyObject *const *args,
                           Py_ssize_t nargs) {
  Py_RETURN_FALSE;
}

static PyMethodDef NoopZone_methods[] = {
    {"__enter__", (PyCFunction)Noop_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Noop_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject NoopZoneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mlprof._mlprof.NoopZone",
    .tp_basicsize = sizeof(NoopObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A context manager written in C that does nothing (benchmarks).",
    .tp_methods = NoopZone_methods,
    .tp_new = PyType_GenericNew,
};

static PyObject *NoopProfiler_zone(PyObject *self, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames) {
  Py_INCREF(noop_zone_singleton);
  return noop_zone_singleton;
}

static PyMethodDef NoopProfiler_methods[] = {
    {"zone", (PyCFunction)(void (*)(void))NoopProfiler_zone,
     METH_FASTCALL | METH_KEYWORDS,
     "zone(name): a shared no-op context manager."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject NoopProfilerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mlprof._mlprof.NoopProfiler",
    .tp_basicsize = sizeof(NoopObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "NoopProfiler().zone(name): the benchmark's no-op baseline, "
        "written in C.",
    .tp_methods = NoopProfiler_methods,
    .tp_new = PyType_GenericNew,
};

/* ---- session functions --------------------------------------------------- */

/* _after_fork_child(): os.register_at_fork's after_in_child hook (the
 * package's __init__): a child of a parent that sampled stacks starts its
 * own profile and sampler now. */
static PyObject *mod_after_fork_child(PyObject *m, PyObject *noargs) {
  if (stacks_fork_child) stacks_fork_child();
  Py_RETURN_NONE;
}

/* _stacks_finalizing(): the package's atexit hook; the stack sampler walks
 * no thread state of this interpreter from now on. */
static PyObject *mod_stacks_finalizing(PyObject *m, PyObject *noargs) {
  mlprof_stacks_finalizing();
  Py_RETURN_NONE;
}

/* init(output=None, flush_ms=0, memory_cap=0, enabled=True, sample_ms=0,
 *      gpu=True, stacks_hz=0, stacks_native=False) -> bool
 * True: this call started the session; False: one was running already (the
 * package joins it). sample_ms: 0 the default interval, < 0 no sampling.
 * stacks_hz: 0 the default rate of stack samples, < 0 none. stacks_native:
 * native frames too (MLPROF_STACKS_NATIVE). */
static PyObject *mod_init(PyObject *m, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"output",    "flush_ms",      "memory_cap",
                           "enabled",   "sample_ms",     "gpu",
                           "stacks_hz", "stacks_native", NULL};
  PyObject *out = Py_None;
  unsigned int flush_ms = 0;
  Py_ssize_t cap = 0;
  int enabled = 1, sample_ms = 0, gpu = 1, stacks_hz = 0, native = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|OInpipip:init", kwlist, &out,
                                   &flush_ms, &cap, &enabled, &sample_ms, &gpu,
                                   &stacks_hz, &native))
    return NULL;
  if (cap < 0) {
    PyErr_SetString(PyExc_ValueError, "memory_cap must be >= 0");
    return NULL;
  }
  PyObject *outb = NULL;
  if (out != Py_None && !PyUnicode_FSConverter(out, &outb)) return NULL;
  mlprof_config cfg;
  api.config_init(&cfg);
  cfg.output = outb ? PyBytes_AS_STRING(outb) : NULL;
  cfg.flush_interval_ms = flush_ms;
  cfg.memory_cap = (size_t)cap;
  cfg.enabled = enabled;
  if (sample_ms) cfg.sample_interval_ms = sample_ms;
  cfg.no_gpu = !gpu;
  if (stacks_hz) cfg.stacks_hz = stacks_hz < 0 ? 0 : stacks_hz;
  if (native) cfg.stacks_flags |= MLPROF_STACKS_NATIVE;
  int rc, e;
  Py_BEGIN_ALLOW_THREADS rc = api.init(&cfg);
  e = errno;
  Py_END_ALLOW_THREADS;
  /* cfg.output is outb's: the message is made before outb goes. */
  if (rc != 0 && rc != MLPROF_EALREADY)
    PyErr_Format(ErrorObject, "cannot start profiling to %s: %s (%s)",
                 cfg.output ? cfg.output : "the default output",
                 api.strerror(rc), strerror(e));
  Py_XDECREF(outb);
  if (rc == MLPROF_EALREADY) Py_RETURN_FALSE;
  if (rc != 0) return NULL;
  Py_RETURN_TRUE;
}

static PyObject *mod_shutdown(PyObject *m, PyObject *unused) {
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = api.shutdown();
  Py_END_ALLOW_THREADS return PyBool_FromLong(rc == 0);
}

static PyObject *mod_flush(PyObject *m, PyObject *unused) {
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = api.flush();
  Py_END_ALLOW_THREADS if (rc == MLPROF_ENOTSTARTED) Py_RETURN_FALSE;
  if (rc != 0) return raise_mlprof(rc, "flush");
  Py_RETURN_TRUE;
}

static PyObject *mod_output_path(PyObject *m, PyObject *unused) {
  const char *p = api.output_path();
  if (!p) Py_RETURN_NONE;
  return PyUnicode_DecodeFSDefault(p);
}

static PyObject *mod_set_enabled(PyObject *m, PyObject *arg) {
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  api.set_enabled(on);
  Py_RETURN_NONE;
}

static PyObject *mod_memory_set(PyObject *m, PyObject *arg) {
  const char *mode = PyUnicode_AsUTF8(arg);
  if (!mode) return NULL;
  if (api.memory_set(mode) != 0)
    return PyErr_Format(PyExc_ValueError,
                        "memory must be 'sampled', 'sampled:BYTES' (BYTES > "
                        "0), 'all' or 'off', not %R",
                        arg);
  Py_RETURN_NONE;
}

static PyObject *mod_memory_active(PyObject *m, PyObject *unused) {
  return PyBool_FromLong(api.memory_active());
}

static PyObject *mod_is_enabled(PyObject *m, PyObject *unused) {
  return PyBool_FromLong(api.is_enabled());
}

static PyObject *mod_step(PyObject *m, PyObject *unused) {
  api.step();
  Py_RETURN_NONE;
}

static PyObject *mod_step_end(PyObject *m, PyObject *unused) {
  api.step_end();
  Py_RETURN_NONE;
}

static PyObject *mod_meta(PyObject *m, PyObject *args) {
  PyObject *k, *v;
  if (!PyArg_ParseTuple(args, "OO:meta", &k, &v)) return NULL;
  PyObject *kb = meta_bytes(k), *vb = kb ? meta_bytes(v) : NULL;
  if (vb) api.meta(PyBytes_AS_STRING(kb), PyBytes_AS_STRING(vb));
  Py_XDECREF(kb);
  Py_XDECREF(vb);
  if (!vb) return NULL;
  Py_RETURN_NONE;
}

static PyObject *mod_zone_meta(PyObject *m, PyObject *args) {
  PyObject *k, *v;
  if (!PyArg_ParseTuple(args, "OO:zone_meta", &k, &v)) return NULL;
  PyObject *kb = meta_bytes(k), *vb = kb ? meta_bytes(v) : NULL;
  if (vb) api.zone_meta(PyBytes_AS_STRING(kb), PyBytes_AS_STRING(vb));
  Py_XDECREF(kb);
  Py_XDECREF(vb);
  if (!vb || count_zone_meta(1) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *mod_thread_name(PyObject *m, PyObject *arg) {
  PyObject *keep;
  const char *s = c_name(arg, "thread name", &keep);
  if (!s) return NULL;
  api.thread_name(s);
  Py_XDECREF(keep);
  Py_RETURN_NONE;
}

/* About this many spans per call of api.track_spans: a call ends only where
 * no span given before is still open, so each call gets whole trees. */
#define TRACK_BATCH 65536

static int span_by_begin(const void *a, const void *b) {
  const mlprof_span *x = a, *y = b;
  return x->begin_ns < y->begin_ns ? -1 : x->begin_ns > y->begin_ns;
}

/* One (name, category, begin_ns, end_ns[, unit, units]) tuple as a span; -1
 * with an exception set. The unit string belongs to the tuple, or to an
 * object appended to the list `keep`. */
static int parse_span(PyObject *t, Py_ssize_t i, mlprof_span *s,
                      PyObject *keep) {
  Py_ssize_t k = PyTuple_Check(t) ? PyTuple_GET_SIZE(t) : 0;
  if (k != 4 && k != 6) {
    PyErr_Format(PyExc_TypeError,
                 "span %zd: want a tuple (name, category, begin_ns, end_ns"
                 "[, unit, units])",
                 i);
    return -1;
  }
  int cat = parse_category(PyTuple_GET_ITEM(t, 1));
  if (cat < 0) return -1;
  *s = (mlprof_span){.site = intern_name(PyTuple_GET_ITEM(t, 0), cat)};
  if (!s->site) return -1;
  s->begin_ns = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 2));
  s->end_ns = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 3));
  if (k == 6 && PyTuple_GET_ITEM(t, 4) != Py_None && !PyErr_Occurred()) {
    PyObject *owner;
    s->unit = c_name(PyTuple_GET_ITEM(t, 4), "unit", &owner);
    if (owner && PyList_Append(keep, owner) < 0) s->unit = NULL;
    Py_XDECREF(owner);
    if (s->unit) s->units = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 5));
  }
  if (PyErr_Occurred()) return -1;
  if (s->end_ns < s->begin_ns) {
    PyErr_Format(PyExc_ValueError, "span %zd ends before it begins", i);
    return -1;
  }
  return 0;
}

/* Sorts the spans by begin and hands them to the library in batches cut
 * only where no earlier span is open, so that each batch holds whole trees.
 * Spans already in order of their begins keep the order they were given,
 * which decides which of two identical intervals encloses the other
 * (mlprof_track_spans). Returns 0 or the library's error. */
static int send_spans(const char *track, mlprof_span *s, size_t n) {
  size_t i = 1;
  while (i < n && s[i - 1].begin_ns <= s[i].begin_ns) i++;
  if (i < n) qsort(s, n, sizeof *s, span_by_begin);
  size_t start = 0;
  uint64_t open_end = 0; /* the latest end of the spans before i */
  for (i = 0; i <= n; i++) {
    if (i == n ? i > start
               : i - start >= TRACK_BATCH && s[i].begin_ns >= open_end) {
      int rc = api.track_spans(track, s + start, i - start);
      if (rc) return rc;
      start = i;
    }
    if (i < n && s[i].end_ns > open_end) open_end = s[i].end_ns;
  }
  return 0;
}

/* track_spans(track, spans) -> int: spans measured elsewhere (another
 * profiler's operators, GPU kernels), recorded on the track named `track`.
 * spans: (name, category, begin_ns, end_ns[, unit, units]) tuples in any
 * order, times CLOCK_MONOTONIC; nesting follows from the times (of two
 * identical intervals, the one given first encloses the other when the
 * spans come in order of their begins). */
static PyObject *mod_track_spans(PyObject *m, PyObject *args) {
  PyObject *trackobj, *seq;
  if (!PyArg_ParseTuple(args, "OO:track_spans", &trackobj, &seq)) return NULL;
  PyObject *tkeep, *keep = NULL, *items = NULL;
  const char *track = c_name(trackobj, "track name", &tkeep);
  /* keep: the units' encoded names; items: the unit strings */
  if (!track || !(keep = PyList_New(0)) || !(items = PySequence_Tuple(seq))) {
    Py_XDECREF(tkeep);
    Py_XDECREF(keep);
    return NULL;
  }
  size_t n = (size_t)PyTuple_GET_SIZE(items);
  mlprof_span *s = PyMem_Malloc((n ? n : 1) * sizeof *s);
  if (!s) {
    Py_DECREF(items);
    Py_DECREF(keep);
    Py_XDECREF(tkeep);
    return PyErr_NoMemory();
  }
  int rc = 0, bad = 0;
  for (size_t i = 0; i < n && !bad; i++)
    bad =
        parse_span(PyTuple_GET_ITEM(items, i), (Py_ssize_t)i, &s[i], keep) < 0;
  if (!bad) {
    Py_BEGIN_ALLOW_THREADS rc = send_spans(track, s, n);
    Py_END_ALLOW_THREADS
  }
  PyMem_Free(s);
  Py_DECREF(items);
  Py_DECREF(keep);
  Py_XDECREF(tkeep);
  if (bad) return NULL;
  if (rc) return raise_mlprof(rc, "track_spans");
  return PyLong_FromSize_t(n);
}

/* A frame's string as UTF-8 owned by the frame's tuple (surrogates
 * replaced: kept in keep); NULL with an exception set. */
static const char *frame_str(PyObject *o, PyObject *keep) {
  if (!PyUnicode_Check(o)) {
    PyErr_SetString(PyExc_TypeError, "a frame's file and name must be str");
    return NULL;
  }
  const char *s = PyUnicode_AsUTF8(o);
  if (s) return s;
  PyErr_Clear();
  PyObject *b = PyUnicode_AsEncodedString(o, "utf-8", "replace");
  if (!b) return NULL;
  int bad = PyList_Append(keep, b);
  Py_DECREF(b);
  return bad ? NULL : PyBytes_AS_STRING(b);
}

/* track_allocs(track, zone, stacks, allocs) -> int: allocations measured
 * elsewhere (mlprof_track_allocs), on the track named `track`, in zone
 * `zone`. stacks: a sequence of stacks, each a sequence of (file, line,
 * name) frames, innermost first; allocs: (time_ns, address, size,
 * stack) tuples, CLOCK_MONOTONIC ns, size 0 for a free, stack an index in
 * stacks or -1. Returns the records handed over. */
static PyObject *mod_track_allocs(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *trackobj, *zoneobj, *stacks_in, *allocs_in;
  if (!PyArg_ParseTuple(args, "OOOO:track_allocs", &trackobj, &zoneobj,
                        &stacks_in, &allocs_in))
    return NULL;
  if (!track_allocs_fn) {
    PyErr_SetString(ErrorObject,
                    "the libmlprof in this process has no "
                    "mlprof_track_allocs (older than 1.5?)");
    return NULL;
  }
  PyObject *tkeep = NULL, *zkeep = NULL, *keep = NULL, *stacks = NULL,
           *items = NULL;
  mlprof_frame **fr = NULL;
  size_t *nfr = NULL, ns = 0, n = 0;
  mlprof_alloc *a = NULL;
  int rc = 0, bad = 1;
  const char *track = c_name(trackobj, "track name", &tkeep);
  const char *zone = track ? c_name(zoneobj, "zone name", &zkeep) : NULL;
  if (!zone || !(keep = PyList_New(0)) ||
      !(stacks = PySequence_Tuple(stacks_in)) ||
      !(items = PySequence_Tuple(allocs_in)))
    goto out;
  ns = (size_t)PyTuple_GET_SIZE(stacks);
  n = (size_t)PyTuple_GET_SIZE(items);
  fr = PyMem_Calloc(ns ? ns : 1, sizeof *fr);
  nfr = PyMem_Calloc(ns ? ns : 1, sizeof *nfr);
  a = PyMem_Calloc(n ? n : 1, sizeof *a);
  if (!fr || !nfr || !a) {
    PyErr_NoMemory();
    goto out;
  }
  for (size_t i = 0; i < ns; i++) {
    PyObject *st = PySequence_Tuple(PyTuple_GET_ITEM(stacks, i));
    if (!st || PyList_Append(keep, st) < 0) {
      Py_XDECREF(st);
      goto out;
    }
    Py_DECREF(st); /* keep holds it */
    size_t k = (size_t)PyTuple_GET_SIZE(st);
    if (!(fr[i] = PyMem_Calloc(k ? k : 1, sizeof **fr))) {
      PyErr_NoMemory();
      goto out;
    }
    nfr[i] = k;
    for (size_t j = 0; j < k; j++) {
      PyObject *f = PyTuple_GET_ITEM(st, j);
      if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 3) {
        PyErr_Format(PyExc_TypeError,
                     "stack %zu, frame %zu: want (file, line, name)", i, j);
        goto out;
      }
      fr[i][j].file = frame_str(PyTuple_GET_ITEM(f, 0), keep);
      fr[i][j].function =
          fr[i][j].file ? frame_str(PyTuple_GET_ITEM(f, 2), keep) : NULL;
      if (!fr[i][j].function) goto out;
      unsigned long line = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(f, 1));
      if (PyErr_Occurred()) goto out;
      fr[i][j].line = line > UINT32_MAX ? UINT32_MAX : (uint32_t)line;
    }
  }
  for (size_t i = 0; i < n; i++) {
    PyObject *t = PyTuple_GET_ITEM(items, i);
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4) {
      PyErr_Format(PyExc_TypeError,
                   "allocation %zu: want (time_ns, address, size, stack)", i);
      goto out;
    }
    a[i].time_ns = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 0));
    a[i].address = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 1));
    a[i].size = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 2));
    long long k = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 3));
    if (PyErr_Occurred()) goto out;
    if (k >= 0) {
      if ((size_t)k >= ns) {
        PyErr_Format(PyExc_ValueError, "allocation %zu: no stack %lld", i, k);
        goto out;
      }
      a[i].frames = fr[k];
      a[i].nframes = nfr[k];
    }
  }
  bad = 0;
  Py_BEGIN_ALLOW_THREADS rc = track_allocs_fn(track, zone, a, n);
  Py_END_ALLOW_THREADS out : if (fr) for (size_t i = 0; i < ns; i++)
                                 PyMem_Free(fr[i]);
  PyMem_Free(fr);
  PyMem_Free(nfr);
  PyMem_Free(a);
  Py_XDECREF(items);
  Py_XDECREF(stacks);
  Py_XDECREF(keep);
  Py_XDECREF(zkeep);
  Py_XDECREF(tkeep);
  if (bad) return NULL;
  if (rc) return raise_mlprof(rc, "track_allocs");
  return PyLong_FromSize_t(n);
}

/* A PyArg "O&" converter: a count, an int in [0, 2^64) (ValueError or
 * OverflowError otherwise, not a silent wrap). */
static int count_arg(PyObject *o, void *out) {
  if (!PyLong_Check(o)) {
    PyErr_Format(PyExc_TypeError, "a count must be an int, not %.100s",
                 Py_TYPE(o)->tp_name);
    return 0;
  }
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) return 0;
  *(uint64_t *)out = v;
  return 1;
}

/* lines_record(function, file, first_line, rows): one function's line
 * timings into the profile (mlprof_lines_set); rows are (line, hits,
 * total_ns, exclusive_ns, source) tuples, counts in [0, 2^64) and each
 * exclusive_ns at most its total_ns (ValueError, OverflowError). */
static PyObject *mod_lines_record(PyObject *m, PyObject *args) {
  PyObject *fo, *fileo, *seq, *fkeep = NULL, *filekeep = NULL, *keep = NULL,
                              *items = NULL;
  unsigned int first;
  if (!PyArg_ParseTuple(args, "OOIO:lines_record", &fo, &fileo, &first, &seq))
    return NULL;
  const char *f = c_name(fo, "function", &fkeep);
  const char *file = f ? c_name(fileo, "file", &filekeep) : NULL;
  mlprof_line *rows = NULL;
  int rc = 0, bad = 1;
  if (!file || !(keep = PyList_New(0)) || !(items = PySequence_Tuple(seq)))
    goto out;
  size_t n = (size_t)PyTuple_GET_SIZE(items);
  if (!(rows = PyMem_Calloc(n ? n : 1, sizeof *rows))) {
    PyErr_NoMemory();
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    PyObject *t = PyTuple_GET_ITEM(items, i), *src, *owner;
    mlprof_line *l = &rows[i];
    if (!PyArg_ParseTuple(t,
                          "IO&O&O&O;a row is (line, hits, total_ns, "
                          "exclusive_ns, source)",
                          &l->line, count_arg, &l->hits, count_arg,
                          &l->total_ns, count_arg, &l->exclusive_ns, &src))
      goto out;
    if (l->exclusive_ns > l->total_ns) {
      PyErr_Format(PyExc_ValueError,
                   "line %u: exclusive_ns %llu is above total_ns %llu (the "
                   "exclusive time is part of the total)",
                   l->line, (unsigned long long)l->exclusive_ns,
                   (unsigned long long)l->total_ns);
      goto out;
    }
    if (!(l->source = c_name(src, "source", &owner))) goto out;
    if (owner && PyList_Append(keep, owner) < 0) {
      Py_DECREF(owner);
      goto out;
    }
    Py_XDECREF(owner);
  }
  bad = 0;
  rc = api.lines_set(f, file, first, rows, n);
out:
  PyMem_Free(rows);
  Py_XDECREF(items);
  Py_XDECREF(keep);
  Py_XDECREF(fkeep);
  Py_XDECREF(filekeep);
  if (bad) return NULL;
  if (rc) return raise_mlprof(rc, "lines_record");
  Py_RETURN_NONE;
}

static PyObject *mod_dropped(PyObject *m, PyObject *unused) {
  return PyLong_FromUnsignedLongLong(api.dropped());
}

static PyObject *mod_version(PyObject *m, PyObject *unused) {
  return PyUnicode_FromString(api.version());
}

/* Depth of `with` zones this thread has open through the package. */
static PyObject *mod_open_depth(PyObject *m, PyObject *unused) {
  return PyLong_FromUnsignedLong(owed.top);
}

/* Monotonic clock in ns, the clock profiles are placed on. */
static PyObject *mod_monotonic_ns(PyObject *m, PyObject *unused) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return PyLong_FromUnsignedLongLong((unsigned long long)ts.tv_sec *
                                         1000000000ull +
                                     (unsigned long long)ts.tv_nsec);
}

/* ---- reading profiles: the project's reader, stats and exporters --------- */

static PyObject *str_n(const char *s, size_t n) {
  return PyUnicode_DecodeUTF8(s ? s : "", s ? (Py_ssize_t)n : 0, "replace");
}

static PyObject *str_z(const char *s) { return str_n(s, s ? strlen(s) : 0); }

/* Paths (a list of str/PathLike) as a C array; frees with free_paths. */
static int take_paths(PyObject *seq, PyObject **holder, const char ***out,
                      size_t *n) {
  PyObject *fast = PySequence_Fast(seq, "paths must be a sequence");
  if (!fast) return -1;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
  PyObject *list = PyList_New(len);
  const char **v = len ? calloc((size_t)len, sizeof *v) : calloc(1, sizeof *v);
  if (!list || !v) {
    Py_DECREF(fast);
    Py_XDECREF(list);
    free(v);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < len; i++) {
    PyObject *b;
    if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(fast, i), &b)) {
      Py_DECREF(fast);
      Py_DECREF(list);
      free(v);
      return -1;
    }
    PyList_SET_ITEM(list, i, b);
    v[i] = PyBytes_AS_STRING(b);
  }
  Py_DECREF(fast);
  *holder = list;
  *out = v;
  *n = (size_t)len;
  return 0;
}

/* Builds a dict from alternating key, value (new references; NULL values
 * make the whole call fail). */
static PyObject *dict_of(int npairs, ...) {
  PyObject *d = PyDict_New();
  va_list ap;
  va_start(ap, npairs);
  int ok = d != NULL;
  for (int i = 0; i < npairs; i++) {
    const char *k = va_arg(ap, const char *);
    PyObject *v = va_arg(ap, PyObject *);
    if (ok && (!v || PyDict_SetItemString(d, k, v) < 0)) ok = 0;
    Py_XDECREF(v);
  }
  va_end(ap);
  if (!ok) Py_CLEAR(d);
  return d;
}

#define U64(x) PyLong_FromUnsignedLongLong((unsigned long long)(x))
#define I64(x) PyLong_FromLongLong((long long)(x))
#define F64(x) PyFloat_FromDouble((double)(x))

/* profiles(paths) -> list of dicts: the header facts of each profile, on
 * one timeline (path, pid, ppid, parent index, start_mono_ns, offset_ns). */
static PyObject *mod_profiles(PyObject *m, PyObject *arg) {
  PyObject *holder;
  const char **paths;
  size_t n;
  if (take_paths(arg, &holder, &paths, &n) < 0) return NULL;
  mlprof__job job;
  char err[512];
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = mlprof__job_open(&job, paths, n, err, sizeof err);
  Py_END_ALLOW_THREADS free(paths);
  Py_DECREF(holder);
  if (rc) {
    PyErr_SetString(ErrorObject, err);
    return NULL;
  }
  PyObject *list = PyList_New(0);
  for (size_t i = 0; list && i < job.count; i++) {
    mlprof__job_profile *p = &job.profiles[i];
    PyObject *d = dict_of(9, "path", PyUnicode_DecodeFSDefault(p->path), "pid",
                          U64(p->pid), "ppid", U64(p->ppid), "parent",
                          PyLong_FromLong(p->parent), "start_mono_ns",
                          U64(p->start_mono_ns), "start_wall_ns",
                          U64(p->start_wall_ns), "offset_ns", U64(p->offset_ns),
                          "cmdline", str_z(p->cmdline), "exe", str_z(p->exe));
    if (!d || PyList_Append(list, d) < 0) Py_CLEAR(list);
    Py_XDECREF(d);
  }
  mlprof__job_close(&job);
  return list;
}

static int parse_sort(PyObject *o, mlprof__sort_key *key) {
  if (!o || o == Py_None) {
    *key = MLPROF__SORT_TOTAL;
    return 0;
  }
  const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
  if (!s || mlprof__sort_key_parse(s, key)) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_ValueError,
                   "unknown sort key %R: use total, self, mean, p99 or count",
                   o);
    return -1;
  }
  return 0;
}

/* The filters of mlprof.report(): keyword -> the filter option it is
 * (src/analyze/filter.h, which parses every spec). */
static const struct {
  const char *kw;
  int kind;
} filter_kws[] = {
    {"zone", MLPROF__SEL_ZONE},
    {"exclude", MLPROF__SEL_EXCLUDE},
    {"category", MLPROF__FILTER_CATEGORY},
    {"process", MLPROF__SEL_PROCESS},
    {"thread", MLPROF__SEL_THREAD},
    {"track", MLPROF__SEL_TRACK},
    {"rank", MLPROF__SEL_RANK},
    {"steps", MLPROF__FILTER_STEPS},
    {"skip_warmup", MLPROF__FILTER_SKIP_WARMUP},
    {"window", MLPROF__FILTER_WINDOW},
};

/* Adds one spec (a str, or an int as its digits) of filter option kind to
 * f; the str it reads is kept in holder (the filter borrows it). 0, or -1
 * with ValueError (a bad spec) or another exception set. */
static int add_filter_spec(mlprof__filter *f, int kind, PyObject *v,
                           PyObject *holder) {
  PyObject *str =
      PyUnicode_Check(v) || PyLong_Check(v) ? PyObject_Str(v) : NULL;
  if (!str) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_TypeError,
                   "a filter wants a str or an int (or a list of them), not "
                   "%.64s",
                   Py_TYPE(v)->tp_name);
    return -1;
  }
  int rc = PyList_Append(holder, str);
  const char *s = rc < 0 ? NULL : PyUnicode_AsUTF8(str);
  Py_DECREF(str);
  if (!s) return -1;
  char err[512];
  rc = mlprof__filter_add(f, kind, s, err, sizeof err);
  if (rc) {
    PyErr_SetString(rc == MLPROF_ENOMEM ? PyExc_MemoryError : PyExc_ValueError,
                    err);
    return -1;
  }
  return 0;
}

/* The filter a dict {keyword: spec or list of specs} (None: none) says,
 * into *f (zeroed), with the strs it borrows in a new list *holder. 0, or
 * -1 with an exception set (f then freed). */
static int take_filter(PyObject *d, mlprof__filter *f, PyObject **holder) {
  memset(f, 0, sizeof *f);
  if (!(*holder = PyList_New(0))) return -1;
  if (!d || d == Py_None) return 0;
  if (!PyDict_Check(d)) {
    PyErr_SetString(PyExc_TypeError, "filters wants a dict");
    goto fail;
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(d, &pos, &key, &value)) {
    const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
    size_t i = 0, n = sizeof filter_kws / sizeof filter_kws[0];
    while (k && i < n && strcmp(k, filter_kws[i].kw) != 0) i++;
    if (!k || i == n) {
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_TypeError,
                     "unknown filter %R: use zone, exclude, category, "
                     "process, thread, track, rank, steps, skip_warmup or "
                     "window",
                     key);
      goto fail;
    }
    if (value == Py_None) continue;
    if (PyList_Check(value) || PyTuple_Check(value)) {
      PyObject *seq = PySequence_Fast(value, "");
      for (Py_ssize_t j = 0; seq && j < PySequence_Fast_GET_SIZE(seq); j++)
        if (add_filter_spec(f, filter_kws[i].kind,
                            PySequence_Fast_GET_ITEM(seq, j), *holder) < 0)
          Py_CLEAR(seq);
      if (!seq) goto fail;
      Py_DECREF(seq);
    } else if (add_filter_spec(f, filter_kws[i].kind, value, *holder) < 0) {
      goto fail;
    }
  }
  return 0;
fail:
  mlprof__filter_free(f);
  Py_CLEAR(*holder);
  return -1;
}

/* Opens the job and runs the analyses `mlprof report` runs (report,
 * resources, findings) through filter (NULL: none) into *a; 0, or -1 with
 * an exception set. */
static int build_report(PyObject *pathseq, mlprof__sort_key sort, size_t top,
                        const mlprof__filter *filter, mlprof__analysis *a) {
  PyObject *holder;
  const char **paths;
  size_t n;
  if (take_paths(pathseq, &holder, &paths, &n) < 0) return -1;
  mlprof__analysis_opts o;
  mlprof__analysis_opts_init(&o);
  o.want = MLPROF__ANALYSIS_FINDINGS;
  o.sort = sort;
  o.top = top;
  o.filter = filter;
  mlprof__job job;
  char err[512];
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = mlprof__job_open(&job, paths, n, err, sizeof err);
  if (!rc) {
    rc = mlprof__analysis_run(&job, &o, a, err, sizeof err);
    mlprof__job_close(&job);
  }
  Py_END_ALLOW_THREADS free(paths);
  Py_DECREF(holder);
  if (rc) {
    PyErr_SetString(rc == MLPROF_ENOMEM ? PyExc_MemoryError : ErrorObject, err);
    return -1;
  }
  return 0;
}

/* report_json(paths, sort="total", top=0, filters=None) -> str: the whole
 * JSON report (schema mlprof.report/1, docs/json-schema.md), resources and
 * findings included; filters: {keyword: spec or list of specs}, the
 * command line's filter options (take_filter). mlprof.report() and
 * Profiler.summary() are this, parsed. */
static PyObject *mod_report_json(PyObject *m, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"paths", "sort", "top", "filters", NULL};
  PyObject *paths, *sortobj = NULL, *filters = NULL, *holder;
  Py_ssize_t top = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OnO:report_json", kwlist,
                                   &paths, &sortobj, &top, &filters))
    return NULL;
  mlprof__sort_key sort;
  mlprof__filter filter;
  if (parse_sort(sortobj, &sort) < 0 ||
      take_filter(filters, &filter, &holder) < 0)
    return NULL;
  mlprof__analysis a;
  int brc = build_report(paths, sort, top < 0 ? 0 : (size_t)top, &filter, &a);
  mlprof__filter_free(&filter);
  Py_DECREF(holder);
  if (brc < 0) return NULL;
  mlprof__out o;
  int rc = mlprof__out_open(&o, -1);
  if (!rc) rc = mlprof__export_json(&a.r, &a.res, &a.f, &o);
  PyObject *s =
      rc ? NULL : PyUnicode_DecodeUTF8(o.buf, (Py_ssize_t)o.len, "replace");
  if (!rc) mlprof__out_close(&o);
  mlprof__analysis_free(&a);
  if (rc) PyErr_NoMemory();
  return s;
}

typedef struct {
  const mlprof__analysis *a;
  const mlprof__report_format *format;
  const mlprof__job *job;
} export_ctx;

static int export_report_fn(void *vctx, mlprof__out *o, char *err,
                            size_t errlen) {
  export_ctx *c = vctx;
  return c->format->write(c->a, o);
}

static int export_trace_fn(void *vctx, mlprof__out *o, char *err,
                           size_t errlen) {
  export_ctx *c = vctx;
  return mlprof__export_chrome(c->job, NULL, o, NULL, err, errlen);
}

/* export(paths, out_path, format, sort="total", top=0): format is one of
 * the report's (export/formats.c: text, json, csv, findings-csv) or trace
 * (Chrome trace JSON). The file appears only complete. */
static PyObject *mod_export(PyObject *m, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"paths", "out", "format", "sort", "top", NULL};
  PyObject *paths, *outobj, *sortobj = NULL;
  const char *format;
  Py_ssize_t top = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&s|On:export", kwlist, &paths,
                                   PyUnicode_FSConverter, &outobj, &format,
                                   &sortobj, &top))
    return NULL;
  const char *out = PyBytes_AS_STRING(outobj);
  mlprof__sort_key sort;
  char err[512] = "";
  int rc = 0;
  if (parse_sort(sortobj, &sort) < 0) goto fail;
  if (strcmp(format, "trace") == 0) {
    PyObject *holder;
    const char **pv;
    size_t n;
    if (take_paths(paths, &holder, &pv, &n) < 0) goto fail;
    mlprof__job job;
    Py_BEGIN_ALLOW_THREADS rc = mlprof__job_open(&job, pv, n, err, sizeof err);
    if (!rc) {
      export_ctx c = {.job = &job};
      rc = mlprof__write_atomically(out, export_trace_fn, &c, err, sizeof err);
      mlprof__job_close(&job);
    }
    Py_END_ALLOW_THREADS free(pv);
    Py_DECREF(holder);
  } else if (mlprof__report_format_find(format)) {
    mlprof__analysis a;
    if (build_report(paths, sort, top < 0 ? 0 : (size_t)top, NULL, &a) < 0)
      goto fail;
    export_ctx c = {.a = &a, .format = mlprof__report_format_find(format)};
    Py_BEGIN_ALLOW_THREADS rc =
        mlprof__write_atomically(out, export_report_fn, &c, err, sizeof err);
    Py_END_ALLOW_THREADS mlprof__analysis_free(&a);
  } else {
    PyErr_Format(PyExc_ValueError,
                 "unknown format '%s': use json, csv, findings-csv, text or "
                 "trace",
                 format);
    goto fail;
  }
  Py_DECREF(outobj);
  if (rc) {
    PyErr_SetString(ErrorObject, err[0] ? err : api.strerror(rc));
    return NULL;
  }
  Py_RETURN_NONE;
fail:
  Py_DECREF(outobj);
  return NULL;
}

/* ---- raw events, for tests and tools: read_events(path) -> dict ---------- */

typedef struct {
  PyObject *names; /* dict id -> (kind, category, name) */
  PyObject *spans; /* list of dicts */
  PyObject *counters, *steps, *threads, *units;
  PyObject *allocs;                 /* list of tuples (ev_alloc) */
  PyObject *funcs, *frames, *nodes; /* dicts id -> tuple (stack tables) */
  PyObject *last; /* the last span dict (for its metadata and units) */
  PyObject *header;
} events_ctx;

static PyObject *name_of(events_ctx *c, uint32_t id) {
  PyObject *k = PyLong_FromUnsignedLong(id);
  PyObject *t = k ? PyDict_GetItem(c->names, k) : NULL;
  Py_XDECREF(k);
  if (!t) return PyUnicode_FromString("?");
  PyObject *n = PyTuple_GET_ITEM(t, 2);
  Py_INCREF(n);
  return n;
}

static int ev_header(void *ud, const mlprof__header *h) {
  events_ctx *c = ud;
  c->header = dict_of(5, "pid", U64(h->pid), "ppid", U64(h->ppid),
                      "start_mono_ns", U64(h->start_mono_ns), "start_wall_ns",
                      U64(h->start_wall_ns), "exe", str_z(h->exe));
  return c->header ? 0 : MLPROF_ENOMEM;
}

static int ev_name(void *ud, const mlprof__name *n) {
  events_ctx *c = ud;
  PyObject *k = PyLong_FromUnsignedLong(n->id);
  PyObject *v = Py_BuildValue("(iiNNI)", n->kind, n->category,
                              str_n(n->name, n->name_len), str_z(n->file),
                              (unsigned)n->line);
  int rc = (k && v && PyDict_SetItem(c->names, k, v) == 0) ? 0 : MLPROF_ENOMEM;
  Py_XDECREF(k);
  Py_XDECREF(v);
  return rc;
}

static int ev_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  events_ctx *c = ud;
  PyObject *k = PyLong_FromUnsignedLong(tid), *v = str_n(name, len);
  int rc =
      (k && v && PyDict_SetItem(c->threads, k, v) == 0) ? 0 : MLPROF_ENOMEM;
  Py_XDECREF(k);
  Py_XDECREF(v);
  return rc;
}

static int ev_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  events_ctx *c = ud;
  PyObject *d = dict_of(7, "tid", U64(tid), "name", name_of(c, name), "depth",
                        U64(depth), "begin_ns", U64(begin), "end_ns", U64(end),
                        "meta", PyDict_New(), "units", PyDict_New());
  /* The call site's file and line, when it has one (the call tracer's). */
  PyObject *k = PyLong_FromUnsignedLong(name);
  PyObject *t = k ? PyDict_GetItem(c->names, k) : NULL;
  Py_XDECREF(k);
  if (d && t && PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(t, 3)) &&
      (PyDict_SetItemString(d, "file", PyTuple_GET_ITEM(t, 3)) < 0 ||
       PyDict_SetItemString(d, "line", PyTuple_GET_ITEM(t, 4)) < 0))
    Py_CLEAR(d);
  if (!d || PyList_Append(c->spans, d) < 0) {
    Py_XDECREF(d);
    return MLPROF_ENOMEM;
  }
  Py_XSETREF(c->last, d);
  return 0;
}

static int ev_span_meta(void *ud, uint32_t tid, uint32_t key, uint32_t value) {
  events_ctx *c = ud;
  if (!c->last) return 0;
  PyObject *k = name_of(c, key), *v = name_of(c, value);
  int rc = PyDict_SetItem(PyDict_GetItemString(c->last, "meta"), k, v);
  Py_DECREF(k);
  Py_DECREF(v);
  return rc ? MLPROF_ENOMEM : 0;
}

static int ev_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  events_ctx *c = ud;
  if (!c->last) return 0;
  PyObject *k = name_of(c, name), *v = U64(n);
  int rc = PyDict_SetItem(PyDict_GetItemString(c->last, "units"), k, v);
  Py_DECREF(k);
  Py_XDECREF(v);
  return rc ? MLPROF_ENOMEM : 0;
}

static int ev_counter(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                      double v) {
  events_ctx *c = ud;
  PyObject *e = Py_BuildValue("(KNKd)", (unsigned long long)tid,
                              name_of(c, name), (unsigned long long)t, v);
  int rc = (e && PyList_Append(c->counters, e) == 0) ? 0 : MLPROF_ENOMEM;
  Py_XDECREF(e);
  return rc;
}

static int ev_units(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                    uint64_t n) {
  events_ctx *c = ud;
  PyObject *e =
      Py_BuildValue("(KNKK)", (unsigned long long)tid, name_of(c, name),
                    (unsigned long long)t, (unsigned long long)n);
  int rc = (e && PyList_Append(c->units, e) == 0) ? 0 : MLPROF_ENOMEM;
  Py_XDECREF(e);
  return rc;
}

/* An allocation: (tid, t, address, size, weight, zone, stack); a free:
 * (tid, t, address, 0, 0, "", 0). */
static int ev_alloc(void *ud, const mlprof__alloc *a) {
  events_ctx *c = ud;
  PyObject *e =
      Py_BuildValue("(KKKKKNK)", (unsigned long long)a->tid,
                    (unsigned long long)a->t, (unsigned long long)a->addr,
                    (unsigned long long)a->size, (unsigned long long)a->weight,
                    a->zone ? name_of(c, a->zone) : PyUnicode_FromString(""),
                    (unsigned long long)a->stack);
  int rc = (e && PyList_Append(c->allocs, e) == 0) ? 0 : MLPROF_ENOMEM;
  Py_XDECREF(e);
  return rc;
}

static int ev_alloc_free(void *ud, uint32_t tid, uint64_t t, uint64_t addr) {
  events_ctx *c = ud;
  PyObject *e =
      Py_BuildValue("(KKKKKsK)", (unsigned long long)tid, (unsigned long long)t,
                    (unsigned long long)addr, 0ull, 0ull, "", 0ull);
  int rc = (e && PyList_Append(c->allocs, e) == 0) ? 0 : MLPROF_ENOMEM;
  Py_XDECREF(e);
  return rc;
}

/* Sets d[id] = v (v's reference taken); MLPROF_ENOMEM on failure. */
static int put_id(PyObject *d, uint32_t id, PyObject *v) {
  PyObject *k = PyLong_FromUnsignedLong(id);
  int rc = (k && v && PyDict_SetItem(d, k, v) == 0) ? 0 : MLPROF_ENOMEM;
  Py_XDECREF(k);
  Py_XDECREF(v);
  return rc;
}

static int ev_stack_func(void *ud, const mlprof__stack_func *f) {
  events_ctx *c = ud;
  return put_id(c->funcs, f->id,
                Py_BuildValue("(NNI)", str_z(f->file), str_z(f->function),
                              (unsigned)f->first_line));
}

static int ev_stack_frame(void *ud, const mlprof__stack_frame *f) {
  events_ctx *c = ud;
  return put_id(c->frames, f->id,
                Py_BuildValue("(IIiNNK)", (unsigned)f->func, (unsigned)f->line,
                              f->native, str_z(f->module), str_z(f->symbol),
                              (unsigned long long)f->offset));
}

static int ev_stack_node(void *ud, uint32_t id, uint32_t parent,
                         uint32_t frame) {
  events_ctx *c = ud;
  return put_id(c->nodes, id,
                Py_BuildValue("(II)", (unsigned)parent, (unsigned)frame));
}

static int ev_step(void *ud, uint32_t tid, uint64_t t) {
  events_ctx *c = ud;
  PyObject *e =
      Py_BuildValue("(KK)", (unsigned long long)tid, (unsigned long long)t);
  int rc = (e && PyList_Append(c->steps, e) == 0) ? 0 : MLPROF_ENOMEM;
  Py_XDECREF(e);
  return rc;
}

/* read_events(path) -> {"header", "threads", "spans", "counters", "units",
 * "steps", "allocs", "stack_funcs", "stack_frames", "stack_nodes",
 * "clean_end"}: every record of one profile, for tests and tools. allocs:
 * allocation records in the order read (ev_alloc); the stack tables: id ->
 * (file, function, first_line), (func, line, native, module, symbol,
 * offset), (parent, frame). */
static PyObject *mod_read_events(PyObject *m, PyObject *arg) {
  PyObject *pathb;
  if (!PyUnicode_FSConverter(arg, &pathb)) return NULL;
  events_ctx c = {.names = PyDict_New(),
                  .spans = PyList_New(0),
                  .counters = PyList_New(0),
                  .steps = PyList_New(0),
                  .threads = PyDict_New(),
                  .units = PyList_New(0),
                  .allocs = PyList_New(0),
                  .funcs = PyDict_New(),
                  .frames = PyDict_New(),
                  .nodes = PyDict_New()};
  PyObject *res = NULL;
  if (!c.names || !c.spans || !c.counters || !c.steps || !c.threads ||
      !c.units || !c.allocs || !c.funcs || !c.frames || !c.nodes)
    goto out;
  mlprof__visitor v = {.ud = &c,
                       .header = ev_header,
                       .name = ev_name,
                       .thread = ev_thread,
                       .span = ev_span,
                       .span_meta = ev_span_meta,
                       .span_units = ev_span_units,
                       .counter = ev_counter,
                       .units = ev_units,
                       .step = ev_step,
                       .alloc = ev_alloc,
                       .alloc_free = ev_alloc_free,
                       .stack_func = ev_stack_func,
                       .stack_frame = ev_stack_frame,
                       .stack_node = ev_stack_node};
  mlprof__read_report rep;
  memset(&rep, 0, sizeof rep);
  char err[512] = "";
  int rc =
      mlprof__read_file(PyBytes_AS_STRING(pathb), &v, &rep, err, sizeof err);
  if (rc) {
    if (!PyErr_Occurred())
      PyErr_SetString(ErrorObject, err[0] ? err : api.strerror(rc));
    goto out;
  }
  res = dict_of(11, "header",
                c.header ? (Py_INCREF(c.header), c.header)
                         : (Py_INCREF(Py_None), Py_None),
                "threads", (Py_INCREF(c.threads), c.threads), "spans",
                (Py_INCREF(c.spans), c.spans), "counters",
                (Py_INCREF(c.counters), c.counters), "units",
                (Py_INCREF(c.units), c.units), "steps",
                (Py_INCREF(c.steps), c.steps), "allocs",
                (Py_INCREF(c.allocs), c.allocs), "stack_funcs",
                (Py_INCREF(c.funcs), c.funcs), "stack_frames",
                (Py_INCREF(c.frames), c.frames), "stack_nodes",
                (Py_INCREF(c.nodes), c.nodes), "clean_end",
                PyBool_FromLong(rep.clean_end));
out:
  Py_DECREF(pathb);
  Py_XDECREF(c.names);
  Py_XDECREF(c.spans);
  Py_XDECREF(c.counters);
  Py_XDECREF(c.steps);
  Py_XDECREF(c.threads);
  Py_XDECREF(c.units);
  Py_XDECREF(c.allocs);
  Py_XDECREF(c.funcs);
  Py_XDECREF(c.frames);
  Py_XDECREF(c.nodes);
  Py_XDECREF(c.last);
  Py_XDECREF(c.header);
  return res;
}

/* resources() -> dict: this process's CPU time and peak memory so far. */
static PyObject *mod_resources(PyObject *m, PyObject *unused) {
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
#define TV(tv) ((double)(tv).tv_sec + (double)(tv).tv_usec / 1e6)
  return dict_of(5, "cpu_user_s", F64(TV(self.ru_utime)), "cpu_system_s",
                 F64(TV(self.ru_stime)), "max_rss_bytes",
                 U64((uint64_t)self.ru_maxrss * 1024), "children_cpu_s",
                 F64(TV(kids.ru_utime) + TV(kids.ru_stime)),
                 "children_max_rss_bytes",
                 U64((uint64_t)kids.ru_maxrss * 1024));
#undef TV
}

static PyMethodDef module_methods[] = {
    {"_stacks_finalizing", mod_stacks_finalizing, METH_NOARGS,
     "_stacks_finalizing(): the interpreter is finalizing; stop walking its "
     "thread states"},
    {"_after_fork_child", mod_after_fork_child, METH_NOARGS,
     "_after_fork_child(): in a forked child, starts its profile and stack "
     "sampler when its parent sampled stacks"},
    {"init", (PyCFunction)(void (*)(void))mod_init,
     METH_VARARGS | METH_KEYWORDS,
     "init(output=None, flush_ms=0, memory_cap=0, enabled=True, sample_ms=0, "
     "gpu=True, stacks_hz=0, stacks_native=False) -> bool: "
     "starts the session;\nFalse when one was running already (joined)."},
    {"shutdown", mod_shutdown, METH_NOARGS,
     "Flushes and closes the session; False when none was running."},
    {"flush", mod_flush, METH_NOARGS,
     "Writes what was recorded so far; False when no session runs."},
    {"output_path", mod_output_path, METH_NOARGS,
     "The current profile file, or None."},
    {"set_enabled", mod_set_enabled, METH_O, "Run-time switch."},
    {"memory_set", mod_memory_set, METH_O,
     "Which allocations are recorded (docs/memory.md)."},
    {"memory_active", mod_memory_active, METH_NOARGS,
     "Whether this process's allocations are being captured."},
    {"is_enabled", mod_is_enabled, METH_NOARGS, "Whether recording is on."},
    {"gauge", (PyCFunction)(void (*)(void))mod_gauge, METH_FASTCALL,
     "gauge(name, value): sets the gauge name to value."},
    {"units", (PyCFunction)(void (*)(void))mod_units, METH_FASTCALL,
     "units(name, n): n units of work for the innermost open zone."},
    {"step", mod_step, METH_NOARGS, "Marks a step boundary."},
    {"step_end", mod_step_end, METH_NOARGS,
     "Ends the current step; none follows until the next step mark."},
    {"meta", mod_meta, METH_VARARGS, "meta(key, value): session metadata."},
    {"zone_meta", mod_zone_meta, METH_VARARGS,
     "zone_meta(key, value): metadata on the innermost open zone."},
    {"thread_name", mod_thread_name, METH_O, "Names the calling thread."},
    {"track_spans", mod_track_spans, METH_VARARGS,
     "track_spans(track, spans) -> int: records spans measured elsewhere on "
     "a track;\nspans are (name, category, begin_ns, end_ns[, unit, units]) "
     "tuples, CLOCK_MONOTONIC ns."},
    {"track_allocs", mod_track_allocs, METH_VARARGS,
     "track_allocs(track, zone, stacks, allocs) -> int: records allocations "
     "measured elsewhere;\nstacks: sequences of (file, line, name) frames, "
     "innermost first; allocs: (time_ns, address, size, stack index or -1) "
     "tuples, CLOCK_MONOTONIC ns, size 0 for a free."},
    {"lines_record", mod_lines_record, METH_VARARGS,
     "lines_record(function, file, first_line, rows): a function's line "
     "timings\ninto the profile; rows are (line, hits, total_ns, "
     "exclusive_ns, source)."},
    {"dropped", mod_dropped, METH_NOARGS, "Events lost to the memory cap."},
    {"version", mod_version, METH_NOARGS, "Version of the recording library."},
    {"open_depth", mod_open_depth, METH_NOARGS,
     "Zones this thread has open through the package."},
    {"monotonic_ns", mod_monotonic_ns, METH_NOARGS, "CLOCK_MONOTONIC in ns."},
    {"profiles", mod_profiles, METH_O,
     "profiles(paths) -> list of header facts on one timeline."},
    {"report_json", (PyCFunction)(void (*)(void))mod_report_json,
     METH_VARARGS | METH_KEYWORDS,
     "report_json(paths, sort='total', top=0, filters=None) -> str: the "
     "JSON report\n(schema mlprof.report/1), resources and findings "
     "included; filters: {name: spec}\nas mlprof report's filter options."},
    {"export", (PyCFunction)(void (*)(void))mod_export,
     METH_VARARGS | METH_KEYWORDS,
     "export(paths, out, format, sort='total', top=0): json, csv, "
     "findings-csv, "
     "text or trace."},
    {"read_events", mod_read_events, METH_O,
     "read_events(path) -> every record of one profile."},
    {"resources", mod_resources, METH_NOARGS,
     "CPU time and peak memory of this process."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mlprof._mlprof",
    .m_doc =
        "C half of the mlprof package: the recording library, its "
        "statistics and exporters.",
    .m_size = -1,
    .m_methods = module_methods,
};

/* ---- os._exit ------------------------------------------------------------
 *
 * os._exit() ends the process at once, with no exit handler: where the
 * library was loaded by this package, the C library's _exit would lose what
 * was recorded since the last flush and the profile's end. os._exit (and
 * posix._exit) become this function, which takes the same argument and
 * calls the library's _exit: it flushes and finishes the profile, then ends
 * the process as os._exit does. */
static PyObject *os_exit(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"status", NULL};
  int status;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "i:_exit", kwlist, &status))
    return NULL;
  lib_exit(status);
  Py_UNREACHABLE();
}

static PyMethodDef os_exit_def = {
    "_exit", (PyCFunction)(void (*)(void))os_exit, METH_VARARGS | METH_KEYWORDS,
    "_exit($module, /, status)\n--\n\n"
    "Exit to the system with specified status, without normal exit "
    "processing.\n\nmlprof's: finishes this process's profile first."};

static int wrap_os_exit(void) {
  if (!lib_exit) return 0;
  PyObject *name = PyUnicode_FromString("posix");
  PyObject *fn = name ? PyCFunction_NewEx(&os_exit_def, NULL, name) : NULL;
  int rc = fn ? 0 : -1;
  const char *mods[] = {"posix", "os"};
  for (size_t i = 0; rc == 0 && i < sizeof mods / sizeof mods[0]; i++) {
    PyObject *mod = PyImport_ImportModule(mods[i]);
    rc = mod ? PyObject_SetAttrString(mod, "_exit", fn) : -1;
    Py_XDECREF(mod);
  }
  Py_XDECREF(fn);
  Py_XDECREF(name);
  return rc;
}

PyMODINIT_FUNC PyInit__mlprof(void) {
  PyObject *m = NULL;
  if (api_setup() < 0) return NULL;
  mlprof__py_rec =
      (mlprof__py_recorder){api.zone_begin_site, api.zone_end, api.track_spans};
  if (!(str_is_cpu = PyUnicode_InternFromString("is_cpu"))) return NULL;
  if (PyType_Ready(&ZoneType) < 0 || PyType_Ready(&MetaZoneType) < 0 ||
      PyType_Ready(&SyncMethodType) < 0 || PyType_Ready(&ProfilerType) < 0 ||
      PyType_Ready(&NoopZoneType) < 0 || PyType_Ready(&NoopProfilerType) < 0)
    return NULL;
  m = PyModule_Create(&module_def);
  if (!m) return NULL;
  if (PyModule_AddFunctions(m, mlprof__calls_methods) < 0) goto fail;
  noop_zone_singleton = PyObject_CallNoArgs((PyObject *)&NoopZoneType);
  if (!noop_zone_singleton) goto fail;
  ErrorObject = PyErr_NewException("mlprof.Error", PyExc_RuntimeError, NULL);
  if (!ErrorObject) goto fail;
  if (PyModule_AddObject(m, "Error", ErrorObject) < 0) goto fail_error;
  Py_INCREF(ErrorObject);
  struct {
    const char *name;
    PyTypeObject *type;
  } types[] = {{"Zone", &ZoneType},
               {"MetaZone", &MetaZoneType},
               {"SyncMethod", &SyncMethodType},
               {"ProfilerBase", &ProfilerType},
               {"NoopZone", &NoopZoneType},
               {"NoopProfiler", &NoopProfilerType}};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    Py_INCREF(types[i].type);
    if (PyModule_AddObject(m, types[i].name, (PyObject *)types[i].type) < 0) {
      Py_DECREF(types[i].type);
      goto fail;
    }
  }
  for (int i = 0; i < MLPROF_CAT_COUNT; i++) {
    char name[32];
    snprintf(name, sizeof name, "CAT_%s", cat_names[i]);
    for (char *c = name; *c; c++)
      if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 32);
    if (PyModule_AddIntConstant(m, name, i) < 0) goto fail;
  }
  PyObject *cats = PyTuple_New(MLPROF_CAT_COUNT);
  for (int i = 0; cats && i < MLPROF_CAT_COUNT; i++) {
    PyObject *c = PyUnicode_FromString(cat_names[i]);
    if (!c)
      Py_CLEAR(cats);
    else
      PyTuple_SET_ITEM(cats, i, c);
  }
  if (!cats || PyModule_AddObject(m, "CATEGORIES", cats) < 0) {
    Py_XDECREF(cats);
    goto fail;
  }
  if (PyModule_AddStringConstant(m, "LIBRARY", api_origin) < 0) goto fail;
  if (PyModule_AddObject(m, "STACKS", PyBool_FromLong(stacks_walker)) < 0)
    goto fail;
  if (PyModule_AddFunctions(m, mlprof__hooks_methods) < 0) goto fail;
  if (wrap_os_exit() < 0) goto fail;
  return m;
fail_error:
  Py_DECREF(ErrorObject);
fail:
  Py_DECREF(m);
  return NULL;
}
