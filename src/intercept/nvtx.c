/* NVTX injection: libmlprof is an NVTX tool. A program built with the NVTX
 * v3 headers (PyTorch, NCCL, TensorRT, a user's annotations) loads the
 * library named by NVTX_INJECTION64_PATH at its first NVTX call and calls
 * its InitializeInjectionNvtx2 with a getter of the loader's function
 * tables; the functions below fill the core and core2 (domain) tables.
 * `mlprof run` sets the variable to the libmlprof it preloads.
 *
 * The types and ids are declared here from NVTX's documented, versioned
 * ABI (the NVTX v3 headers, nvtxDetail/nvtxTypes.h), never included: the
 * library builds where no CUDA toolkit is, and the ABI is frozen (new ids
 * are only ever appended).
 *
 * What becomes of each call:
 * - push/pop ranges are zones of the calling thread, one stack per thread
 *   whatever their domain (so pops should follow pushes in stack order, as
 *   NVTX asks of each domain);
 * - start/end ranges may end on another thread than the one that started
 *   them: each is a span on the track "nvtx" (or "nvtx DOMAIN");
 * - marks with a numeric payload set a gauge of that name to the payload;
 *   other marks are zones of no length;
 * - a range of a domain other than the default one is named
 *   "DOMAIN:message"; its category is the mlprof category its NVTX category
 *   was named after (nvtxNameCategory(id, "forward")), else the one the
 *   domain is named after ("forward", "communication", "NCCL" counts as
 *   communication), else none;
 * - registered strings are looked up once, when registered;
 * - nvtxNameOsThread names the thread in the profile. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <wchar.h>

#include "../format/wire.h"
#include "../record/internal.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- NVTX's ABI (nvtxDetail/nvtxTypes.h, nvToolsExt.h) ------------------ */

typedef void (*nvtx_fn)(void);
typedef nvtx_fn **nvtx_table;
typedef const void *(*nvtx_get_export_table)(uint32_t id);

enum { ETID_CALLBACKS = 1, ETID_VERSIONINFO = 3 };
enum { MODULE_CORE = 1, MODULE_CORE2 = 5 };

typedef struct {
  size_t struct_size;
  int (*get_module_function_table)(int module, nvtx_table *out_table,
                                   unsigned *out_size);
} nvtx_callbacks;

typedef struct {
  size_t struct_size;
  uint32_t version, reserved0;
  void (*set_injection_version)(uint32_t version);
} nvtx_version_info;

enum {
  CORE_MarkEx = 1,
  CORE_MarkA = 2,
  CORE_MarkW = 3,
  CORE_RangeStartEx = 4,
  CORE_RangeStartA = 5,
  CORE_RangeStartW = 6,
  CORE_RangeEnd = 7,
  CORE_RangePushEx = 8,
  CORE_RangePushA = 9,
  CORE_RangePushW = 10,
  CORE_RangePop = 11,
  CORE_NameCategoryA = 12,
  CORE_NameCategoryW = 13,
  CORE_NameOsThreadA = 14,
  CORE_NameOsThreadW = 15,
};

enum {
  CORE2_DomainMarkEx = 1,
  CORE2_DomainRangeStartEx = 2,
  CORE2_DomainRangeEnd = 3,
  CORE2_DomainRangePushEx = 4,
  CORE2_DomainRangePop = 5,
  CORE2_DomainNameCategoryA = 8,
  CORE2_DomainNameCategoryW = 9,
  CORE2_DomainRegisterStringA = 10,
  CORE2_DomainRegisterStringW = 11,
  CORE2_DomainCreateA = 12,
  CORE2_DomainCreateW = 13,
  CORE2_DomainDestroy = 14,
  CORE2_Initialize = 15,
};

enum { MSG_ASCII = 1, MSG_UNICODE = 2, MSG_REGISTERED = 3 };
enum {
  PAY_U64 = 1,
  PAY_I64 = 2,
  PAY_DOUBLE = 3,
  PAY_U32 = 4,
  PAY_I32 = 5,
  PAY_FLOAT = 6,
};

/* nvtxEventAttributes_v2: 48 bytes on 64-bit targets. */
typedef struct {
  uint16_t version, size;
  uint32_t category;
  int32_t color_type;
  uint32_t color;
  int32_t payload_type, reserved0;
  union {
    uint64_t u64;
    int64_t i64;
    double d;
    uint32_t u32;
    int32_t i32;
    float f;
  } payload;
  int32_t message_type;
  union {
    const char *ascii;
    const wchar_t *unicode;
    const void *registered;
  } message;
} nvtx_attr;

#define ATTR_MESSAGE_END (offsetof(nvtx_attr, message) + sizeof(void *))

/* ---- domains, categories and registered strings ------------------------ */

#define NVTX_CATEGORIES 256

typedef struct domain {
  struct domain *next;
  char *name;  /* NULL: the default domain */
  char *track; /* "nvtx" or "nvtx NAME" */
  uint8_t category;
  /* per NVTX category id below 256: mlprof category + 1 (0: not named) */
  _Atomic uint8_t categories[NVTX_CATEGORIES];
} domain;

typedef struct {
  char *name; /* as the zone is named: "DOMAIN:text" or "text" */
  _Atomic(const mlprof_site *) sites[MLPROF_CAT_COUNT];
} registered;

static domain default_domain = {.track = "nvtx"};
static domain *domains;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The mlprof category a name means, + 1 (0: none). */
static uint8_t category_named(const char *name) {
  if (!name) return 0;
  for (int c = 1; c < MLPROF_CAT_COUNT; c++)
    if (strcasecmp(name, mlprof_category_name((mlprof_category)c)) == 0)
      return (uint8_t)(c + 1);
  if (strcasecmp(name, "comm") == 0 || strcasecmp(name, "nccl") == 0)
    return MLPROF_CAT_COMM + 1;
  return 0;
}

static unsigned category_of(const domain *d, uint32_t id) {
  uint8_t c = id < NVTX_CATEGORIES ? atomic_load_explicit(&d->categories[id],
                                                          memory_order_relaxed)
                                   : 0;
  return c ? c - 1u : d->category;
}

static domain *dom_of(const void *handle) {
  return handle ? (domain *)(uintptr_t)handle : &default_domain;
}

/* A wide string in UTF-8, malloc'd (NULL when memory is short). */
static char *utf8(const wchar_t *w) {
  if (!w) return NULL;
  size_t n = wcslen(w);
  char *s = malloc(n * 4 + 1), *p = s;
  if (!s) return NULL;
  for (size_t i = 0; i < n; i++) {
    uint32_t c = (uint32_t)w[i];
    if (c > 0x10ffff || (c >= 0xd800 && c < 0xe000)) c = 0xfffd;
    if (c < 0x80) {
      *p++ = (char)c;
    } else if (c < 0x800) {
      *p++ = (char)(0xc0 | c >> 6);
      *p++ = (char)(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      *p++ = (char)(0xe0 | c >> 12);
      *p++ = (char)(0x80 | (c >> 6 & 0x3f));
      *p++ = (char)(0x80 | (c & 0x3f));
    } else {
      *p++ = (char)(0xf0 | c >> 18);
      *p++ = (char)(0x80 | (c >> 12 & 0x3f));
      *p++ = (char)(0x80 | (c >> 6 & 0x3f));
      *p++ = (char)(0x80 | (c & 0x3f));
    }
  }
  *p = 0;
  return s;
}

/* The name of a range of d called text, as a site of kind (zone, gauge). */
static const mlprof_site *site_named(int kind, const domain *d, unsigned cat,
                                     const char *text) {
  if (!text) text = "(unnamed)";
  if (!d->name) return mlprof__intern(kind, cat, text);
  char buf[512];
  snprintf(buf, sizeof buf, "%s:%s", d->name, text);
  return mlprof__intern(kind, cat, buf);
}

static const mlprof_site *site_registered(registered *r, unsigned cat) {
  const mlprof_site *s =
      atomic_load_explicit(&r->sites[cat], memory_order_acquire);
  if (MLPROF__LIKELY(s != NULL)) return s;
  s = mlprof__intern(MLPROF__NAME_ZONE, cat, r->name);
  atomic_store_explicit(&r->sites[cat], s, memory_order_release);
  return s;
}

/* The site an event's attributes name, of kind; NULL when memory is short. */
static const mlprof_site *site_of(int kind, const domain *d,
                                  const nvtx_attr *a) {
  if (!a || a->size < ATTR_MESSAGE_END)
    return site_named(kind, d, d->category, NULL);
  unsigned cat = category_of(d, a->category);
  switch (a->message_type) {
    case MSG_ASCII:
      return site_named(kind, d, cat, a->message.ascii);
    case MSG_REGISTERED:
      if (a->message.registered && kind == MLPROF__NAME_ZONE)
        return site_registered((registered *)(uintptr_t)a->message.registered,
                               cat);
      if (a->message.registered)
        return mlprof__intern(
            kind, cat, ((const registered *)a->message.registered)->name);
      return site_named(kind, d, cat, NULL);
    case MSG_UNICODE: {
      char *s = utf8(a->message.unicode);
      const mlprof_site *site = site_named(kind, d, cat, s);
      free(s);
      return site;
    }
    default:
      return site_named(kind, d, cat, NULL);
  }
}

/* ---- push/pop ranges: zones of the calling thread ---------------------- */

static __thread int depth __attribute__((tls_model("initial-exec")));

static int push_site(const mlprof_site *s) {
  static const mlprof_site unnamed = {"(unnamed)", NULL, NULL, 0, 0};
  mlprof_zone_begin_site(s ? s : &unnamed);
  return depth++;
}

static int range_pop(void) {
  if (depth <= 0) return -1;
  mlprof_zone_end();
  return --depth;
}

static int range_push_a(const char *message) {
  return push_site(site_named(MLPROF__NAME_ZONE, &default_domain,
                              default_domain.category, message));
}

static int range_push_w(const wchar_t *message) {
  char *s = utf8(message);
  int level = range_push_a(s);
  free(s);
  return level;
}

static int domain_range_push_ex(const void *dom, const nvtx_attr *a) {
  return push_site(site_of(MLPROF__NAME_ZONE, dom_of(dom), a));
}

static int range_push_ex(const nvtx_attr *a) {
  return domain_range_push_ex(NULL, a);
}

static int domain_range_pop(const void *dom) { return range_pop(); }

/* ---- marks ------------------------------------------------------------- */

static void mark_site(const mlprof_site *s) {
  if (s && mlprof_zone_begin_site(s)) mlprof_zone_end();
}

static void domain_mark_ex(const void *dom, const nvtx_attr *a) {
  const domain *d = dom_of(dom);
  double v;
  int has = a && a->size >= ATTR_MESSAGE_END;
  switch (has ? a->payload_type : 0) {
    case PAY_U64:
      v = (double)a->payload.u64;
      break;
    case PAY_I64:
      v = (double)a->payload.i64;
      break;
    case PAY_DOUBLE:
      v = a->payload.d;
      break;
    case PAY_U32:
      v = a->payload.u32;
      break;
    case PAY_I32:
      v = a->payload.i32;
      break;
    case PAY_FLOAT:
      v = a->payload.f;
      break;
    default:
      mark_site(site_of(MLPROF__NAME_ZONE, d, a));
      return;
  }
  const mlprof_site *s = site_of(MLPROF__NAME_GAUGE, d, a);
  if (s) mlprof_gauge_set(s->name, v);
}

static void mark_ex(const nvtx_attr *a) { domain_mark_ex(NULL, a); }

static void mark_a(const char *message) {
  mark_site(site_named(MLPROF__NAME_ZONE, &default_domain,
                       default_domain.category, message));
}

static void mark_w(const wchar_t *message) {
  char *s = utf8(message);
  mark_a(s);
  free(s);
}

/* ---- start/end ranges: spans on the domain's track ---------------------- */

#define OPEN_MAX 65536 /* start/end ranges open at once; more are dropped */

typedef struct {
  uint64_t id, begin_ns;
  const mlprof_site *site;
  const domain *dom;
} open_range;

static open_range *open_table; /* OPEN_MAX slots, id 0: free */
static unsigned open_len;
static uint64_t next_id = 1;

static uint64_t domain_range_start_ex(const void *dom, const nvtx_attr *a) {
  const domain *d = dom_of(dom);
  const mlprof_site *s = site_of(MLPROF__NAME_ZONE, d, a);
  uint64_t now = mlprof__mono_ns(), id = 0;
  if (!s) return 0;
  pthread_mutex_lock(&lock);
  if (!open_table) open_table = calloc(OPEN_MAX, sizeof *open_table);
  if (open_table && open_len < OPEN_MAX / 2) {
    id = next_id++;
    unsigned j = (unsigned)(id * 0x9e3779b97f4a7c15u >> 48) & (OPEN_MAX - 1);
    while (open_table[j].id) j = (j + 1) & (OPEN_MAX - 1);
    open_table[j] = (open_range){id, now, s, d};
    open_len++;
  }
  pthread_mutex_unlock(&lock);
  return id;
}

static uint64_t range_start_ex(const nvtx_attr *a) {
  return domain_range_start_ex(NULL, a);
}

static uint64_t range_start_a(const char *message) {
  nvtx_attr a = {.size = sizeof a, .message_type = MSG_ASCII};
  a.message.ascii = message;
  return range_start_ex(&a);
}

static uint64_t range_start_w(const wchar_t *message) {
  nvtx_attr a = {.size = sizeof a, .message_type = MSG_UNICODE};
  a.message.unicode = message;
  return range_start_ex(&a);
}

/* Takes the open range id out of the table (linear probing, so the entries
 * after it move up); 0 when it is not open. */
static int open_take(uint64_t id, open_range *out) {
  if (!open_table || !id) return 0;
  unsigned j = (unsigned)(id * 0x9e3779b97f4a7c15u >> 48) & (OPEN_MAX - 1);
  while (open_table[j].id && open_table[j].id != id)
    j = (j + 1) & (OPEN_MAX - 1);
  if (!open_table[j].id) return 0;
  *out = open_table[j];
  open_table[j].id = 0;
  open_len--;
  for (unsigned k = (j + 1) & (OPEN_MAX - 1); open_table[k].id;
       k = (k + 1) & (OPEN_MAX - 1)) {
    open_range e = open_table[k];
    open_table[k].id = 0;
    unsigned h = (unsigned)(e.id * 0x9e3779b97f4a7c15u >> 48) & (OPEN_MAX - 1);
    while (open_table[h].id) h = (h + 1) & (OPEN_MAX - 1);
    open_table[h] = e;
  }
  return 1;
}

static void range_end(uint64_t id) {
  open_range r;
  uint64_t now = mlprof__mono_ns();
  pthread_mutex_lock(&lock);
  int found = open_take(id, &r);
  pthread_mutex_unlock(&lock);
  if (!found) return;
  mlprof_span span = {.site = r.site, .begin_ns = r.begin_ns, .end_ns = now};
  mlprof_track_spans(r.dom->track, &span, 1);
}

static void domain_range_end(const void *dom, uint64_t id) { range_end(id); }

/* ---- names: categories, threads, domains, strings ------------------------ */

static void domain_name_category_a(const void *dom, uint32_t id,
                                   const char *name) {
  domain *d = dom_of(dom);
  if (id < NVTX_CATEGORIES)
    atomic_store(&d->categories[id], category_named(name));
}

static void domain_name_category_w(const void *dom, uint32_t id,
                                   const wchar_t *name) {
  char *s = utf8(name);
  domain_name_category_a(dom, id, s);
  free(s);
}

static void name_category_a(uint32_t id, const char *name) {
  domain_name_category_a(NULL, id, name);
}

static void name_category_w(uint32_t id, const wchar_t *name) {
  domain_name_category_w(NULL, id, name);
}

static void name_os_thread_a(uint32_t tid, const char *name) {
  if (!name) return;
  if (tid == (uint32_t)syscall(SYS_gettid))
    mlprof_thread_name(name);
  else
    mlprof__thread_name_tid(tid, name);
}

static void name_os_thread_w(uint32_t tid, const wchar_t *name) {
  char *s = utf8(name);
  name_os_thread_a(tid, s);
  free(s);
}

/* The domain called name, made on first use and kept until exit (its names
 * live as long as the sites made from them); NULL when memory is short. */
static const void *domain_create_a(const char *name) {
  if (!name) return NULL;
  domain *d;
  pthread_mutex_lock(&lock);
  for (d = domains; d; d = d->next)
    if (strcmp(d->name, name) == 0) goto out;
  d = calloc(1, sizeof *d);
  size_t n = strlen(name);
  char *copy = malloc(n + 1), *track = malloc(n + 6);
  if (!d || !copy || !track) {
    free(d);
    free(copy);
    free(track);
    d = NULL;
    goto out;
  }
  memcpy(copy, name, n + 1);
  memcpy(track, "nvtx ", 5);
  memcpy(track + 5, name, n + 1);
  d->name = copy;
  d->track = track;
  uint8_t c = category_named(name);
  d->category = c ? c - 1u : 0;
  d->next = domains;
  domains = d;
out:
  pthread_mutex_unlock(&lock);
  return d;
}

static const void *domain_create_w(const wchar_t *name) {
  char *s = utf8(name);
  const void *d = domain_create_a(s);
  free(s);
  return d;
}

/* Domains live until exit: a handle stays valid for the sites named by it. */
static void domain_destroy(const void *dom) {}

static const void *domain_register_string_a(const void *dom, const char *text) {
  if (!text) return NULL;
  domain *d = dom_of(dom);
  registered *r = calloc(1, sizeof *r);
  size_t n = strlen(text), pre = d->name ? strlen(d->name) + 1 : 0;
  char *name = malloc(pre + n + 1);
  if (!r || !name) {
    free(r);
    free(name);
    return NULL;
  }
  if (pre) {
    memcpy(name, d->name, pre - 1);
    name[pre - 1] = ':';
  }
  memcpy(name + pre, text, n + 1);
  r->name = name;
  /* Looked up now, so that a range named by it costs no lookup. */
  atomic_store(&r->sites[d->category],
               mlprof__intern(MLPROF__NAME_ZONE, d->category, name));
  return r;
}

static const void *domain_register_string_w(const void *dom,
                                            const wchar_t *text) {
  char *s = utf8(text);
  const void *r = domain_register_string_a(dom, s);
  free(s);
  return r;
}

static void initialize(const void *reserved) {}

/* ---- the loader's entry point ------------------------------------------ */

typedef struct {
  unsigned id;
  nvtx_fn fn;
} slot;

#define FN(f) ((nvtx_fn)(void (*)(void))(f))

static const slot core[] = {
    {CORE_MarkEx, FN(mark_ex)},
    {CORE_MarkA, FN(mark_a)},
    {CORE_MarkW, FN(mark_w)},
    {CORE_RangeStartEx, FN(range_start_ex)},
    {CORE_RangeStartA, FN(range_start_a)},
    {CORE_RangeStartW, FN(range_start_w)},
    {CORE_RangeEnd, FN(range_end)},
    {CORE_RangePushEx, FN(range_push_ex)},
    {CORE_RangePushA, FN(range_push_a)},
    {CORE_RangePushW, FN(range_push_w)},
    {CORE_RangePop, FN(range_pop)},
    {CORE_NameCategoryA, FN(name_category_a)},
    {CORE_NameCategoryW, FN(name_category_w)},
    {CORE_NameOsThreadA, FN(name_os_thread_a)},
    {CORE_NameOsThreadW, FN(name_os_thread_w)},
};

static const slot core2[] = {
    {CORE2_DomainMarkEx, FN(domain_mark_ex)},
    {CORE2_DomainRangeStartEx, FN(domain_range_start_ex)},
    {CORE2_DomainRangeEnd, FN(domain_range_end)},
    {CORE2_DomainRangePushEx, FN(domain_range_push_ex)},
    {CORE2_DomainRangePop, FN(domain_range_pop)},
    {CORE2_DomainNameCategoryA, FN(domain_name_category_a)},
    {CORE2_DomainNameCategoryW, FN(domain_name_category_w)},
    {CORE2_DomainRegisterStringA, FN(domain_register_string_a)},
    {CORE2_DomainRegisterStringW, FN(domain_register_string_w)},
    {CORE2_DomainCreateA, FN(domain_create_a)},
    {CORE2_DomainCreateW, FN(domain_create_w)},
    {CORE2_DomainDestroy, FN(domain_destroy)},
    {CORE2_Initialize, FN(initialize)},
};

/* Fills the loader's table of module with ours; 0 when it has none. */
static int fill(const nvtx_callbacks *cb, int module, const slot *s, size_t n) {
  nvtx_table table = NULL;
  unsigned size = 0;
  if (!cb->get_module_function_table(module, &table, &size) || !table) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i].id <= size && table[s[i].id]) *table[s[i].id] = s[i].fn;
  return 1;
}

static void lock_before_fork(void) { pthread_mutex_lock(&lock); }
static void unlock_after_fork(void) { pthread_mutex_unlock(&lock); }
static void lock_atfork(void) {
  pthread_atfork(lock_before_fork, unlock_after_fork, unlock_after_fork);
}

/* Called by the NVTX loader of each program image that uses NVTX, once,
 * with its export table getter: fills that image's core and core2 tables.
 * Returns 1 (the tool is attached), or 0 when the loader offers no
 * callbacks table, and NVTX then stays a no-op. */
EXPORT int InitializeInjectionNvtx2(nvtx_get_export_table get) {
  if (!get) return 0;
  const nvtx_callbacks *cb = get(ETID_CALLBACKS);
  if (!cb || cb->struct_size < sizeof *cb || !cb->get_module_function_table)
    return 0;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, lock_atfork);
  if (!fill(cb, MODULE_CORE, core, sizeof core / sizeof core[0])) return 0;
  fill(cb, MODULE_CORE2, core2, sizeof core2 / sizeof core2[0]);
  const nvtx_version_info *vi = get(ETID_VERSIONINFO);
  if (vi && vi->struct_size >= sizeof *vi && vi->set_injection_version)
    vi->set_injection_version(3);
  return 1;
}
