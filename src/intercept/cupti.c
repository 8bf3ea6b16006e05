/* CUDA activity through CUPTI: kernels, copies, memsets, CUDA runtime and
 * driver API calls and synchronisations, recorded as spans on tracks.
 *
 * The CUDA driver loads the library named by CUDA_INJECTION64_PATH into
 * every process that initialises CUDA and calls its InitializeInjection;
 * `mlprof run` names libmlprof there when MLPROF_CUPTI=1. Capture then
 * starts: libcupti is loaded with dlopen (never linked, never its header:
 * cupti_abi.h holds our declarations), the activity kinds are enabled, and
 * CUPTI hands its filled buffers back to buffer_done, which turns each
 * record into a span:
 *   kernels, memcpy, memset   track "cuda:DEV stream S"  (copies and sets
 *                             carry their bytes as units)
 *   runtime and driver calls  track "cuda api TID"       (the calling thread)
 *   synchronisations          track "cuda:ctx C sync"
 * CUPTI's timestamps are mapped onto CLOCK_MONOTONIC by an offset read at
 * start (cuptiGetTimestamp between two clock reads). A thread of ours asks
 * CUPTI for its buffers every flush interval (cuptiActivityFlushAll), and
 * the session's end forces a last flush before the file is closed. When
 * CUPTI cannot be had the profile's source table says why ("cupti").
 *
 * Only the activity API is used. A kernel and its launching API call carry
 * CUPTI's correlation id as units "cuda.correlation", by which the analysis
 * ties kernels to the zones that launched them (docs/gpu.md). */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/wire.h"
#include "../record/internal.h"
#include "cupti_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define BUFFER_BYTES (4u << 20)
#define MAX_TRACKS 64 /* distinct tracks in one buffer; more: a second pass */

typedef mlprof__cupti_result result;

typedef struct {
  result (*result_string)(result, const char **);
  result (*timestamp)(uint64_t *);
  result (*enable)(uint32_t kind);
  result (*disable)(uint32_t kind);
  result (*register_callbacks)(mlprof__cupti_buf_request,
                               mlprof__cupti_buf_complete);
  result (*next_record)(uint8_t *buffer, size_t valid, void **record);
  result (*flush_all)(uint32_t flag);
  result (*callback_name)(uint32_t domain, uint32_t cbid, const char **name);
} cupti_fns;

static const struct {
  const char *name;
  size_t off;
  int required;
} syms[] = {
#define SYM(f, n, req) \
  { n, offsetof(cupti_fns, f), req }
    SYM(result_string, "cuptiGetResultString", 1),
    SYM(timestamp, "cuptiGetTimestamp", 1),
    SYM(enable, "cuptiActivityEnable", 1),
    SYM(disable, "cuptiActivityDisable", 1),
    SYM(register_callbacks, "cuptiActivityRegisterCallbacks", 1),
    SYM(next_record, "cuptiActivityGetNextRecord", 1),
    SYM(flush_all, "cuptiActivityFlushAll", 1),
    SYM(callback_name, "cuptiGetCallbackName", 0),
#undef SYM
};

/* The kinds enabled; only kernels are required. */
static const struct {
  uint32_t kind;
  const char *name;
  int required;
} kinds[] = {
    {MLPROF__CUPTI_CONCURRENT_KERNEL, "CONCURRENT_KERNEL", 1},
    {MLPROF__CUPTI_MEMCPY, "MEMCPY", 0},
    {MLPROF__CUPTI_MEMSET, "MEMSET", 0},
    {MLPROF__CUPTI_RUNTIME, "RUNTIME", 0},
    {MLPROF__CUPTI_DRIVER, "DRIVER", 0},
    {MLPROF__CUPTI_SYNCHRONIZATION, "SYNCHRONIZATION", 0},
};

static struct {
  void *lib;
  cupti_fns fn;
  int64_t offset;         /* CUPTI time - CLOCK_MONOTONIC, ns */
  _Atomic size_t buffers; /* handed to CUPTI and not yet back */
  size_t max_buffers;
  pthread_t thread;
  int thread_started;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  int stop;
  uint32_t flush_ms;
} cupti = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static _Atomic int started; /* 0 never, 1 capturing, 2 stopped or failed */

static const char *result_text(result r) {
  const char *s = NULL;
  if (cupti.fn.result_string && cupti.fn.result_string(r, &s) != 0) s = NULL;
  return s && *s ? s : "CUPTI error";
}

/* ---- buffers ----------------------------------------------------------- */

static void buffer_request(uint8_t **buffer, size_t *size, size_t *max) {
  *buffer = NULL;
  *size = 0;
  *max = 0;
  /* Past the memory cap CUPTI drops records (and counts them) rather than
   * the program's memory grow. */
  if (atomic_load(&cupti.buffers) >= cupti.max_buffers) return;
  void *p = NULL;
  if (posix_memalign(&p, 8, BUFFER_BYTES) != 0) return;
  atomic_fetch_add(&cupti.buffers, 1);
  *buffer = p;
  *size = BUFFER_BYTES;
}

static uint64_t u64_at(const uint8_t *r, size_t off) {
  uint64_t v;
  memcpy(&v, r + off, sizeof v);
  return v;
}

static uint32_t u32_at(const uint8_t *r, size_t off) {
  uint32_t v;
  memcpy(&v, r + off, sizeof v);
  return v;
}

static uint64_t mono_of(uint64_t t) {
  int64_t m = (int64_t)t - cupti.offset;
  return m > 0 ? (uint64_t)m : 0;
}

static const char *const copy_names[] = {
    "memcpy",      "memcpy HtoD", "memcpy DtoH", "memcpy HtoA",
    "memcpy AtoH", "memcpy AtoA", "memcpy AtoD", "memcpy DtoA",
    "memcpy DtoD", "memcpy HtoH", "memcpy PtoP"};
static const char *const sync_names[] = {
    "sync", "cudaEventSynchronize", "cudaStreamWaitEvent",
    "cudaStreamSynchronize", "cudaCtxSynchronize"};

/* The units a kernel and the API call that launched it both carry: CUPTI's
 * correlation id, an ordinal (the analysis pairs them; no throughput). */
#define CORRELATION "cuda.correlation"

/* One record as a span and its track's name; 0 when it is not one of ours
 * or its times are not whole. */
static int span_of(const uint8_t *r, mlprof_span *s, char *track, size_t len) {
  uint32_t kind = u32_at(r, 0);
  uint64_t b, e;
  const char *name;
  char buf[64];
  memset(s, 0, sizeof *s);
  switch (kind) {
    case MLPROF__CUPTI_CONCURRENT_KERNEL: {
      const char *n;
      memcpy(&n, r + MLPROF__CUPTI_KERNEL_NAME, sizeof n);
      name = n && *n ? n : "(kernel)";
      b = u64_at(r, MLPROF__CUPTI_KERNEL_START);
      e = u64_at(r, MLPROF__CUPTI_KERNEL_END);
      snprintf(track, len, "cuda:%u stream %u",
               u32_at(r, MLPROF__CUPTI_KERNEL_DEVICE),
               u32_at(r, MLPROF__CUPTI_KERNEL_STREAM));
      s->unit = CORRELATION;
      s->units = u32_at(r, MLPROF__CUPTI_KERNEL_CORR);
      break;
    }
    case MLPROF__CUPTI_MEMCPY: {
      uint8_t k = r[MLPROF__CUPTI_MEMCPY_KIND];
      name = copy_names[k < sizeof copy_names / sizeof *copy_names ? k : 0];
      b = u64_at(r, MLPROF__CUPTI_MEMCPY_START);
      e = u64_at(r, MLPROF__CUPTI_MEMCPY_END);
      s->unit = "bytes";
      s->units = u64_at(r, MLPROF__CUPTI_MEMCPY_BYTES);
      snprintf(track, len, "cuda:%u stream %u",
               u32_at(r, MLPROF__CUPTI_MEMCPY_DEVICE),
               u32_at(r, MLPROF__CUPTI_MEMCPY_STREAM));
      break;
    }
    case MLPROF__CUPTI_MEMSET:
      name = "memset";
      b = u64_at(r, MLPROF__CUPTI_MEMSET_START);
      e = u64_at(r, MLPROF__CUPTI_MEMSET_END);
      s->unit = "bytes";
      s->units = u64_at(r, MLPROF__CUPTI_MEMSET_BYTES);
      snprintf(track, len, "cuda:%u stream %u",
               u32_at(r, MLPROF__CUPTI_MEMSET_DEVICE),
               u32_at(r, MLPROF__CUPTI_MEMSET_STREAM));
      break;
    case MLPROF__CUPTI_RUNTIME:
    case MLPROF__CUPTI_DRIVER: {
      uint32_t cbid = u32_at(r, MLPROF__CUPTI_API_CBID);
      const char *n = NULL;
      /* CUpti_CallbackDomain: 1 driver, 2 runtime. */
      uint32_t domain = kind == MLPROF__CUPTI_DRIVER ? 1 : 2;
      if (!cupti.fn.callback_name ||
          cupti.fn.callback_name(domain, cbid, &n) != 0 || !n || !*n) {
        snprintf(buf, sizeof buf, "%s call %u",
                 kind == MLPROF__CUPTI_DRIVER ? "driver" : "runtime", cbid);
        n = buf;
      }
      name = n;
      b = u64_at(r, MLPROF__CUPTI_API_START);
      e = u64_at(r, MLPROF__CUPTI_API_END);
      snprintf(track, len, "cuda api %u", u32_at(r, MLPROF__CUPTI_API_TID));
      s->unit = CORRELATION;
      s->units = u32_at(r, MLPROF__CUPTI_API_CORR);
      break;
    }
    case MLPROF__CUPTI_SYNCHRONIZATION: {
      uint32_t t = u32_at(r, MLPROF__CUPTI_SYNC_TYPE);
      name = sync_names[t < sizeof sync_names / sizeof *sync_names ? t : 0];
      b = u64_at(r, MLPROF__CUPTI_SYNC_START);
      e = u64_at(r, MLPROF__CUPTI_SYNC_END);
      snprintf(track, len, "cuda:ctx %u sync",
               u32_at(r, MLPROF__CUPTI_SYNC_CONTEXT));
      break;
    }
    default:
      return 0;
  }
  if (!b || e < b) return 0;
  s->site = mlprof_site_intern(name, MLPROF_CAT_NONE);
  s->begin_ns = mono_of(b);
  s->end_ns = mono_of(e);
  return s->site != NULL;
}

typedef struct {
  char name[48];
  mlprof_span *spans;
  size_t n, cap;
} track_spans;

/* Every record of a returned buffer, as spans grouped by track (one call of
 * mlprof_track_spans per track). */
static void buffer_done(void *ctx, uint32_t stream, uint8_t *buffer,
                        size_t size, size_t valid) {
  (void)ctx;
  (void)stream;
  (void)size;
  track_spans *t = calloc(MAX_TRACKS, sizeof *t);
  size_t nt = 0;
  void *rec = NULL;
  while (buffer && t &&
         cupti.fn.next_record(buffer, valid, &rec) == MLPROF__CUPTI_SUCCESS &&
         rec) {
    mlprof_span s;
    char track[48];
    if (!span_of(rec, &s, track, sizeof track)) continue;
    size_t i = 0;
    while (i < nt && strcmp(t[i].name, track) != 0) i++;
    if (i == nt) {
      if (nt == MAX_TRACKS)
        continue; /* dropped: a buffer this varied is rare */
      snprintf(t[nt++].name, sizeof t[0].name, "%s", track);
    }
    if (t[i].n == t[i].cap) {
      size_t nc = t[i].cap ? t[i].cap * 2 : 256;
      mlprof_span *np = realloc(t[i].spans, nc * sizeof *np);
      if (!np) continue;
      t[i].spans = np;
      t[i].cap = nc;
    }
    t[i].spans[t[i].n++] = s;
  }
  for (size_t i = 0; i < nt; i++) {
    mlprof_track_spans(t[i].name, t[i].spans, t[i].n);
    free(t[i].spans);
  }
  free(t);
  if (buffer) {
    free(buffer);
    atomic_fetch_sub(&cupti.buffers, 1);
  }
}

/* ---- the flushing thread ----------------------------------------------- */

static void *flusher(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "mlprof-cupti");
  pthread_mutex_lock(&cupti.lock);
  while (!cupti.stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)cupti.flush_ms * 1000000u;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(&cupti.wake, &cupti.lock, &ts);
    if (cupti.stop) break;
    pthread_mutex_unlock(&cupti.lock);
    cupti.fn.flush_all(0);
    pthread_mutex_lock(&cupti.lock);
  }
  pthread_mutex_unlock(&cupti.lock);
  return NULL;
}

/* ---- start and stop ---------------------------------------------------- */

/* Before the session's file is closed: stop the flusher, switch the kinds
 * off and hand every record CUPTI holds to the profile. */
static void cupti_stop(void) {
  int one = 1;
  if (!atomic_compare_exchange_strong(&started, &one, 2)) return;
  pthread_mutex_lock(&cupti.lock);
  cupti.stop = 1;
  pthread_cond_signal(&cupti.wake);
  pthread_mutex_unlock(&cupti.lock);
  if (cupti.thread_started) pthread_join(cupti.thread, NULL);
  cupti.thread_started = 0;
  cupti.fn.flush_all(MLPROF__CUPTI_FLUSH_FORCED);
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    cupti.fn.disable(kinds[i].kind);
}

static void after_fork_child(void) {
  /* CUDA does not carry over into a forked child, nor our thread. */
  if (atomic_load(&started) == 1) atomic_store(&started, 2);
  cupti.thread_started = 0;
}

static void atfork_once(void) { pthread_atfork(NULL, NULL, after_fork_child); }

static int load(char *why, size_t len) {
  const char *env = mlprof__env("MLPROF_CUPTI_LIB");
  static const char *const names[] = {
      "libcupti.so", "libcupti.so.13", "libcupti.so.12",
      "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"};
  if (env && *env) {
    cupti.lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
  } else {
    /* One the program loaded already (PyTorch's own) first. */
    for (size_t i = 0; !cupti.lib && i < sizeof names / sizeof *names; i++)
      cupti.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    for (size_t i = 0; !cupti.lib && i < sizeof names / sizeof *names; i++)
      cupti.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (!cupti.lib) {
    const char *e = dlerror();
    snprintf(why, len, "no CUPTI: %s", e ? e : "libcupti.so not found");
    return -1;
  }
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *p = dlsym(cupti.lib, syms[i].name);
    memcpy((char *)&cupti.fn + syms[i].off, &p, sizeof p);
    if (!p && syms[i].required) {
      snprintf(why, len, "no CUPTI: %s has no %s",
               env && *env ? env : "libcupti.so", syms[i].name);
      dlclose(cupti.lib);
      cupti.lib = NULL;
      return -1;
    }
  }
  return 0;
}

/* Starts capture in this process once; the reason goes to the profile's
 * source table when it cannot. Returns 0 when capturing. */
static int cupti_start(void) {
  int zero = 0;
  if (!atomic_compare_exchange_strong(&started, &zero, 1)) return -1;
  char why[512] = "";
  result r;
  if (load(why, sizeof why) != 0) goto fail;
  size_t cap = mlprof__pool_cap_bytes();
  cupti.max_buffers = cap / 2 / BUFFER_BYTES ? cap / 2 / BUFFER_BYTES : 2;
  r = cupti.fn.register_callbacks(buffer_request, buffer_done);
  if (r != MLPROF__CUPTI_SUCCESS) {
    snprintf(why, sizeof why, "cuptiActivityRegisterCallbacks: %s",
             result_text(r));
    goto fail;
  }
  char off[256] = "";
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    r = cupti.fn.enable(kinds[i].kind);
    if (r == MLPROF__CUPTI_SUCCESS) continue;
    if (kinds[i].required) {
      snprintf(why, sizeof why, "cuptiActivityEnable(%s): %s", kinds[i].name,
               result_text(r));
      for (size_t j = 0; j < i; j++) cupti.fn.disable(kinds[j].kind);
      goto fail;
    }
    size_t n = strlen(off);
    snprintf(off + n, sizeof off - n, "%s%s", n ? ", " : "", kinds[i].name);
  }
  /* CUPTI time against ours: the middle of two reads around one of its. */
  uint64_t a = mlprof__mono_ns(), t = 0;
  cupti.fn.timestamp(&t);
  uint64_t b = mlprof__mono_ns();
  cupti.offset = (int64_t)t - (int64_t)(a + (b - a) / 2);
  cupti.flush_ms = mlprof__session_flush_ms();
  cupti.stop = 0;
  if (mlprof__thread_start(&cupti.thread, flusher, NULL) == 0)
    cupti.thread_started = 1;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, atfork_once);
  mlprof__session_before_end(cupti_stop);
  if (off[0]) {
    snprintf(why, sizeof why, "capturing; not enabled: %s", off);
    mlprof__session_source("cupti", 1, why);
  } else {
    mlprof__session_source("cupti", 1, NULL);
  }
  return 0;
fail:
  /* The library stays loaded: CUPTI may hold our callbacks. */
  mlprof__session_source("cupti", 0, why);
  atomic_store(&started, 2);
  return -1;
}

int mlprof__cupti_capture(void) { return cupti_start(); }

/* Called by the CUDA driver, in a process that initialises CUDA, when
 * CUDA_INJECTION64_PATH names this library. Returns 1 (the driver goes on
 * whatever we return; capture may have failed, and said why). */
EXPORT int InitializeInjection(void) {
  if (mlprof_output_path() || atomic_load(&mlprof__child_pending))
    cupti_start();
  return 1;
}
