/* A fake libcupti.so for the tests: the CUPTI activity functions mlprof's
 * capture uses (src/intercept/cupti.c), with CUPTI's C signatures and
 * result codes, and records laid out at the offsets of
 * src/intercept/cupti_abi.h (which tests/programs/cupti_abi.c checks against
 * the toolkit's header). No GPU: a test program links this library and
 * makes the records itself with the fake_cupti_* functions below, in
 * CUPTI's clock (fake_cupti_now); cuptiActivityFlushAll hands them to the
 * registered callbacks in buffers CUPTI-style, records of disabled kinds
 * left out.
 *
 * FAKE_CUPTI_SCRIPT names a script, read at the first call; one directive
 * a line, '#' starts a comment:
 *   offset NS         cuptiGetTimestamp is CLOCK_MONOTONIC + NS (default 0)
 *   fail register N   cuptiActivityRegisterCallbacks returns N
 *   fail enable K N   cuptiActivityEnable(K) returns N */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/intercept/cupti_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define REC_SIZE 128 /* every record's room here (a kernel's needs 112) */
#define MAX_RECORDS 65536

typedef int CUptiResult;
typedef mlprof__cupti_buf_request request_fn;
typedef mlprof__cupti_buf_complete complete_fn;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t offset;
static int fail_register;
static int fail_enable[64];
static int enabled[64];
static request_fn on_request;
static complete_fn on_complete;
static uint8_t *pending; /* MAX_RECORDS records of REC_SIZE */
static size_t npending;
static unsigned flushes[2]; /* plain, forced */
static int loaded;

static void load_script(void) {
  if (loaded) return;
  loaded = 1;
  const char *path = getenv("FAKE_CUPTI_SCRIPT");
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    long long a = 0, b = 0;
    if (sscanf(line, "offset %lld", &a) == 1)
      offset = a;
    else if (sscanf(line, "fail register %lld", &a) == 1)
      fail_register = (int)a;
    else if (sscanf(line, "fail enable %lld %lld", &a, &b) == 2 && a >= 0 &&
             a < 64)
      fail_enable[a] = (int)b;
  }
  fclose(f);
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char **s) {
  switch (r) {
    case 0:
      *s = "CUPTI_SUCCESS";
      return 0;
    case 1:
      *s = "CUPTI_ERROR_INVALID_PARAMETER";
      return 0;
    case 15:
      *s = "CUPTI_ERROR_NOT_INITIALIZED";
      return 0;
    case 999:
      *s = "CUPTI_ERROR_UNKNOWN";
      return 0;
    default:
      *s = NULL;
      return 1;
  }
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *t) {
  pthread_mutex_lock(&lock);
  load_script();
  pthread_mutex_unlock(&lock);
  *t = mono_ns() + (uint64_t)offset;
  return 0;
}

EXPORT CUptiResult cuptiActivityEnable(uint32_t kind) {
  pthread_mutex_lock(&lock);
  load_script();
  int r = kind < 64 ? fail_enable[kind] : 21;
  if (!r) enabled[kind] = 1;
  pthread_mutex_unlock(&lock);
  return r;
}

EXPORT CUptiResult cuptiActivityDisable(uint32_t kind) {
  if (kind >= 64) return 21;
  pthread_mutex_lock(&lock);
  enabled[kind] = 0;
  pthread_mutex_unlock(&lock);
  return 0;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(request_fn req,
                                                  complete_fn done) {
  pthread_mutex_lock(&lock);
  load_script();
  int r = fail_register;
  if (!r) {
    on_request = req;
    on_complete = done;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid,
                                              void **record) {
  uint8_t *next = *record ? (uint8_t *)*record + REC_SIZE : buffer;
  if (next + REC_SIZE > buffer + valid) {
    *record = NULL;
    return MLPROF__CUPTI_ERROR_MAX_LIMIT_REACHED;
  }
  *record = next;
  return 0;
}

EXPORT CUptiResult cuptiGetCallbackName(uint32_t domain, uint32_t cbid,
                                        const char **name) {
  if (domain == 2 && cbid == 211) {
    *name = "cudaLaunchKernel_v7000";
    return 0;
  }
  if (domain == 1 && cbid == 307) {
    *name = "cuLaunchKernel";
    return 0;
  }
  return 1;
}

/* Hands the pending records of enabled kinds to the callbacks, in buffers
 * of the size CUPTI's client asks for. */
EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  pthread_mutex_lock(&lock);
  flushes[flag & 1]++;
  request_fn req = on_request;
  complete_fn done = on_complete;
  size_t n = npending;
  uint8_t *recs = pending;
  pending = NULL;
  npending = 0;
  pthread_mutex_unlock(&lock);
  size_t i = 0;
  while (req && done && i < n) {
    uint8_t *buf = NULL;
    size_t size = 0, max = 0;
    req(&buf, &size, &max);
    if (!buf || size < REC_SIZE) break; /* dropped, as CUPTI would */
    size_t used = 0;
    for (; i < n && used + REC_SIZE <= size; i++) {
      uint32_t kind;
      memcpy(&kind, recs + i * REC_SIZE, 4);
      if (kind >= 64 || !enabled[kind]) continue;
      memcpy(buf + used, recs + i * REC_SIZE, REC_SIZE);
      used += REC_SIZE;
    }
    done(NULL, 0, buf, size, used);
  }
  free(recs);
  return 0;
}

/* ---- what test programs call ------------------------------------------- */

static uint8_t *add(uint32_t kind) {
  pthread_mutex_lock(&lock);
  if (!pending) pending = calloc(MAX_RECORDS, REC_SIZE);
  uint8_t *r = NULL;
  if (pending && npending < MAX_RECORDS) {
    r = pending + npending++ * REC_SIZE;
    memset(r, 0, REC_SIZE);
    memcpy(r, &kind, 4);
  }
  return r; /* lock held: put() releases it */
}

static void put(uint8_t *r, size_t off, const void *v, size_t len) {
  if (r) memcpy(r + off, v, len);
}

static void done_adding(void) { pthread_mutex_unlock(&lock); }

/* CUPTI's clock now. */
EXPORT uint64_t fake_cupti_now(void) {
  uint64_t t;
  cuptiGetTimestamp(&t);
  return t;
}

/* cuptiActivityFlushAll calls so far, with flag 0 (forced: 0) or 1. */
EXPORT unsigned fake_cupti_flushes(int forced) {
  pthread_mutex_lock(&lock);
  unsigned n = flushes[forced != 0];
  pthread_mutex_unlock(&lock);
  return n;
}

/* A kernel; name must live until the records are flushed; corr: its
 * correlation id (that of the API call that launched it, 0: none). */
EXPORT void fake_cupti_kernel(const char *name, uint32_t dev, uint32_t stream,
                              uint64_t start, uint64_t end, uint32_t corr) {
  uint8_t *r = add(MLPROF__CUPTI_CONCURRENT_KERNEL);
  put(r, MLPROF__CUPTI_KERNEL_START, &start, 8);
  put(r, MLPROF__CUPTI_KERNEL_END, &end, 8);
  put(r, MLPROF__CUPTI_KERNEL_DEVICE, &dev, 4);
  put(r, MLPROF__CUPTI_KERNEL_STREAM, &stream, 4);
  put(r, MLPROF__CUPTI_KERNEL_NAME, &name, sizeof name);
  put(r, MLPROF__CUPTI_KERNEL_CORR, &corr, 4);
  done_adding();
}

EXPORT void fake_cupti_memcpy(uint8_t copy_kind, uint64_t bytes, uint32_t dev,
                              uint32_t stream, uint64_t start, uint64_t end) {
  uint8_t *r = add(MLPROF__CUPTI_MEMCPY);
  put(r, MLPROF__CUPTI_MEMCPY_KIND, &copy_kind, 1);
  put(r, MLPROF__CUPTI_MEMCPY_BYTES, &bytes, 8);
  put(r, MLPROF__CUPTI_MEMCPY_START, &start, 8);
  put(r, MLPROF__CUPTI_MEMCPY_END, &end, 8);
  put(r, MLPROF__CUPTI_MEMCPY_DEVICE, &dev, 4);
  put(r, MLPROF__CUPTI_MEMCPY_STREAM, &stream, 4);
  done_adding();
}

EXPORT void fake_cupti_memset(uint64_t bytes, uint32_t dev, uint32_t stream,
                              uint64_t start, uint64_t end) {
  uint8_t *r = add(MLPROF__CUPTI_MEMSET);
  put(r, MLPROF__CUPTI_MEMSET_BYTES, &bytes, 8);
  put(r, MLPROF__CUPTI_MEMSET_START, &start, 8);
  put(r, MLPROF__CUPTI_MEMSET_END, &end, 8);
  put(r, MLPROF__CUPTI_MEMSET_DEVICE, &dev, 4);
  put(r, MLPROF__CUPTI_MEMSET_STREAM, &stream, 4);
  done_adding();
}

/* A runtime (kind 5) or driver (kind 4) API call made by thread tid; corr:
 * the correlation id of the kernel it launched (0: none). */
EXPORT void fake_cupti_api(uint32_t kind, uint32_t cbid, uint32_t tid,
                           uint64_t start, uint64_t end, uint32_t corr) {
  uint8_t *r = add(kind);
  put(r, MLPROF__CUPTI_API_CBID, &cbid, 4);
  put(r, MLPROF__CUPTI_API_START, &start, 8);
  put(r, MLPROF__CUPTI_API_END, &end, 8);
  put(r, MLPROF__CUPTI_API_TID, &tid, 4);
  put(r, MLPROF__CUPTI_API_CORR, &corr, 4);
  done_adding();
}

EXPORT void fake_cupti_sync(uint32_t type, uint32_t context, uint32_t stream,
                            uint64_t start, uint64_t end) {
  uint8_t *r = add(MLPROF__CUPTI_SYNCHRONIZATION);
  put(r, MLPROF__CUPTI_SYNC_TYPE, &type, 4);
  put(r, MLPROF__CUPTI_SYNC_START, &start, 8);
  put(r, MLPROF__CUPTI_SYNC_END, &end, 8);
  put(r, MLPROF__CUPTI_SYNC_CONTEXT, &context, 4);
  put(r, MLPROF__CUPTI_SYNC_STREAM, &stream, 4);
  done_adding();
}
