/* Source "nvml": NVIDIA GPUs through NVML, loaded with dlopen at open (never
 * linked, never its header: the few declarations below are ours and follow
 * the NVML C API). One GPU row per device every tick; every SLOW_EVERY-th
 * tick also the PCIe throughput (each of those calls blocks about 20 ms in
 * the driver) and one PROCESS row per sampled pid that holds GPU memory. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

#define SLOW_EVERY 10
#define MAX_GPUS 64
#define MAX_PIDS 1024      /* profiled pids given a GPU memory row */
#define MAX_GPU_PROCS 4096 /* processes asked for per device */

/* ---- our declarations of the NVML C API -------------------------------- */

typedef int nvml_ret; /* nvmlReturn_t */
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_GPU_IS_LOST = 15,
};
enum { NVML_TEMPERATURE_GPU = 0 };
enum { NVML_CLOCK_SM = 1 };
enum { NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1 };
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)
#define NVML_NAME_LEN 96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */

typedef struct nvml_device_st *nvml_device; /* nvmlDevice_t */
typedef struct {
  unsigned int gpu, memory; /* percent */
} nvml_utilization;
typedef struct {
  unsigned long long total, free, used; /* bytes */
} nvml_memory;
typedef struct { /* nvmlProcessInfo_v1_t */
  unsigned int pid;
  unsigned long long used_gpu_memory;
} nvml_process_v1;
typedef struct { /* nvmlProcessInfo_v2_t, taken by _v2 and _v3 */
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
} nvml_process_v2;

typedef struct {
  nvml_ret (*init)(void);
  nvml_ret (*shutdown)(void);
  const char *(*error_string)(nvml_ret);
  nvml_ret (*count)(unsigned int *);
  nvml_ret (*handle)(unsigned int, nvml_device *);
  nvml_ret (*name)(nvml_device, char *, unsigned int);
  nvml_ret (*utilization)(nvml_device, nvml_utilization *);
  nvml_ret (*memory)(nvml_device, nvml_memory *);
  nvml_ret (*temperature)(nvml_device, int, unsigned int *);
  nvml_ret (*power)(nvml_device, unsigned int *);          /* mW */
  nvml_ret (*energy)(nvml_device, unsigned long long *);   /* mJ */
  nvml_ret (*clock)(nvml_device, int, unsigned int *);     /* MHz */
  nvml_ret (*pcie)(nvml_device, int, unsigned int *);      /* KB/s */
  nvml_ret (*throttle)(nvml_device, unsigned long long *); /* mask */
  nvml_ret (*procs_v2)(nvml_device, unsigned int *, nvml_process_v2 *);
  nvml_ret (*procs_v1)(nvml_device, unsigned int *, nvml_process_v1 *);
} nvml_fns;

/* What we look up: the newest name first, the older one as fallback. */
static const struct {
  const char *name, *fallback;
  size_t off;
  int required;
} syms[] = {
#define SYM(f, n, fb, req) \
  { n, fb, offsetof(nvml_fns, f), req }
    SYM(init, "nvmlInit_v2", "nvmlInit", 1),
    SYM(shutdown, "nvmlShutdown", NULL, 1),
    SYM(error_string, "nvmlErrorString", NULL, 1),
    SYM(count, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount", 1),
    SYM(handle, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex",
        1),
    SYM(name, "nvmlDeviceGetName", NULL, 0),
    SYM(utilization, "nvmlDeviceGetUtilizationRates", NULL, 0),
    SYM(memory, "nvmlDeviceGetMemoryInfo", NULL, 0),
    SYM(temperature, "nvmlDeviceGetTemperature", NULL, 0),
    SYM(power, "nvmlDeviceGetPowerUsage", NULL, 0),
    SYM(energy, "nvmlDeviceGetTotalEnergyConsumption", NULL, 0),
    SYM(clock, "nvmlDeviceGetClockInfo", NULL, 0),
    SYM(pcie, "nvmlDeviceGetPcieThroughput", NULL, 0),
    SYM(throttle, "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetCurrentClocksEventReasons", 0),
    SYM(procs_v2, "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2", 0),
    SYM(procs_v1, "nvmlDeviceGetComputeRunningProcesses", NULL, 0),
#undef SYM
};

/* ---- state -------------------------------------------------------------- */

enum { ENERGY_COUNTER, ENERGY_INTEGRATED };

typedef struct {
  nvml_device h;
  const char *err; /* the handle could not be had: every measure absent */
  char name[NVML_NAME_LEN];
  int energy_mode;
  unsigned long long energy_base; /* mJ, counter mode: reading at open */
  double energy_j;                /* integrated mode: since the first tick */
  double last_w;                  /* integrated mode: previous power */
  uint64_t last_ns;
  int have_w;
} gpu_t;

typedef struct {
  void *lib;
  nvml_fns fn;
  unsigned int n;
  gpu_t gpu[MAX_GPUS];
  nvml_process_v2 *procs; /* per-device process list, grown up to the cap */
  unsigned int procs_cap;
  unsigned long long pid_mem[MAX_PIDS];
  unsigned char pid_seen[MAX_PIDS];
  char why[256];
} nvml_state;

static const char *reason(const nvml_state *s, nvml_ret r) {
  if (r == NVML_ERROR_NOT_SUPPORTED) return "not supported by this GPU";
  const char *t = s->fn.error_string ? s->fn.error_string(r) : NULL;
  return t && *t ? t : "NVML error";
}

static void unload(nvml_state *s) {
  if (s->lib) dlclose(s->lib);
  free(s->procs);
  free(s);
}

static int nvml_open(void **state, const char *root, char *why, size_t len) {
  const char *env = mlprof__env("MLPROF_NVML_LIB");
  const char *path = env && *env ? env : "libnvidia-ml.so.1";
  nvml_state *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(why, len, "out of memory");
    return -1;
  }
  dlerror();
  s->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!s->lib) {
    const char *e = dlerror();
    if (!e || strstr(e, "No such file"))
      snprintf(why, len, "no NVML: %s not found", path);
    else
      snprintf(why, len, "no NVML: %s", e);
    unload(s);
    return -1;
  }
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *p = dlsym(s->lib, syms[i].name);
    if (!p && syms[i].fallback) p = dlsym(s->lib, syms[i].fallback);
    if (!p && syms[i].required) {
      snprintf(why, len, "no NVML: %s has no %s", path, syms[i].name);
      unload(s);
      return -1;
    }
    /* POSIX lets a data pointer from dlsym stand for a function pointer. */
    memcpy((char *)&s->fn + syms[i].off, &p, sizeof p);
  }
  *state = s;
  return 0;
}

/* NVML itself, in the program's descriptor table (program_fds): the
 * library was loaded by nvml_open in the sampler's own table, so that the
 * loader's descriptors never were the program's. */
static int nvml_start(void *state, char *why, size_t len) {
  nvml_state *s = state;
  nvml_ret r = s->fn.init();
  if (r != NVML_SUCCESS) {
    snprintf(why, len, "NVML init failed: %s", reason(s, r));
    unload(s);
    return -1;
  }
  unsigned int n = 0;
  r = s->fn.count(&n);
  if (r != NVML_SUCCESS || n == 0) {
    if (r != NVML_SUCCESS)
      snprintf(why, len, "NVML device count failed: %s", reason(s, r));
    else
      snprintf(why, len, "NVML found no GPU");
    s->fn.shutdown();
    unload(s);
    return -1;
  }
  s->n = n < MAX_GPUS ? n : MAX_GPUS;
  for (unsigned int i = 0; i < s->n; i++) {
    gpu_t *g = &s->gpu[i];
    snprintf(g->name, sizeof g->name, "GPU %u", i);
    r = s->fn.handle(i, &g->h);
    if (r != NVML_SUCCESS) {
      g->err = reason(s, r);
      continue;
    }
    if (s->fn.name) {
      char name[NVML_NAME_LEN] = "";
      if (s->fn.name(g->h, name, sizeof name) == NVML_SUCCESS && name[0])
        snprintf(g->name, sizeof g->name, "%s", name);
    }
    /* The energy counter (Volta and later) or, without it, integrated power. */
    g->energy_mode = ENERGY_INTEGRATED;
    if (s->fn.energy && s->fn.energy(g->h, &g->energy_base) == NVML_SUCCESS)
      g->energy_mode = ENERGY_COUNTER;
  }
  return 0;
}

static void nvml_close(void *state) {
  nvml_state *s = state;
  if (!s) return;
  s->fn.shutdown();
  unload(s);
}

/* Ends the source for good when a call found its GPU lost. */
#define LOST_CHECK(ret, i)                                          \
  do {                                                              \
    if ((ret) == NVML_ERROR_GPU_IS_LOST) {                          \
      snprintf(why, len, "GPU %u lost: %s", (i), reason(s, (ret))); \
      return -1;                                                    \
    }                                                               \
  } while (0)

#define MISSING "not in this NVML version"

/* One device's row; -1 with why set when the GPU is lost. */
static int gpu_row(nvml_state *s, unsigned int i, const mlprof__sample_ctx *ctx,
                   mlprof__row *r, char *why, size_t len) {
  gpu_t *g = &s->gpu[i];
  memset(r, 0, sizeof *r);
  r->subject = MLPROF__SUBJECT_GPU;
  r->id = i;
  r->label = g->name;
  int slow = ctx->tick % SLOW_EVERY == 0;
  static const char *const names[] = {
      "gpu_util_pct",        "gpu_mem_util_pct",    "gpu_mem_used_bytes",
      "gpu_mem_total_bytes", "gpu_temp_c",          "gpu_power_w",
      "gpu_energy_j",        "gpu_sm_clock_mhz",    "gpu_pcie_rx_bytes_s",
      "gpu_pcie_tx_bytes_s", "gpu_throttle_reasons"};
  if (g->err) {
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
      if (slow || (k != 8 && k != 9)) mlprof__row_put(r, names[k], 0, g->err);
    return 0;
  }
  nvml_ret ret;

  if (!s->fn.utilization) {
    mlprof__row_put(r, names[0], 0, MISSING);
    mlprof__row_put(r, names[1], 0, MISSING);
  } else {
    nvml_utilization u = {0, 0};
    ret = s->fn.utilization(g->h, &u);
    LOST_CHECK(ret, i);
    const char *a = ret == NVML_SUCCESS ? NULL : reason(s, ret);
    mlprof__row_put(r, names[0], u.gpu, a);
    mlprof__row_put(r, names[1], u.memory, a);
  }

  if (!s->fn.memory) {
    mlprof__row_put(r, names[2], 0, MISSING);
    mlprof__row_put(r, names[3], 0, MISSING);
  } else {
    nvml_memory m = {0, 0, 0};
    ret = s->fn.memory(g->h, &m);
    LOST_CHECK(ret, i);
    const char *a = ret == NVML_SUCCESS ? NULL : reason(s, ret);
    mlprof__row_put(r, names[2], (double)m.used, a);
    mlprof__row_put(r, names[3], (double)m.total, a);
  }

  unsigned int v = 0;
  if (!s->fn.temperature) {
    mlprof__row_put(r, names[4], 0, MISSING);
  } else {
    ret = s->fn.temperature(g->h, NVML_TEMPERATURE_GPU, &v);
    LOST_CHECK(ret, i);
    mlprof__row_put(r, names[4], v,
                    ret == NVML_SUCCESS ? NULL : reason(s, ret));
  }

  const char *power_why = MISSING;
  double w = 0;
  if (s->fn.power) {
    ret = s->fn.power(g->h, &v);
    LOST_CHECK(ret, i);
    power_why = ret == NVML_SUCCESS ? NULL : reason(s, ret);
    w = (double)v / 1000.0;
  }
  mlprof__row_put(r, names[5], w, power_why);

  if (g->energy_mode == ENERGY_COUNTER) {
    unsigned long long mj = 0;
    ret = s->fn.energy(g->h, &mj);
    LOST_CHECK(ret, i);
    if (ret != NVML_SUCCESS)
      mlprof__row_put(r, names[6], 0, reason(s, ret));
    else
      mlprof__row_put(
          r, names[6],
          mj >= g->energy_base ? (double)(mj - g->energy_base) / 1000.0 : 0,
          mj >= g->energy_base ? NULL
                               : "energy counter went back (driver reloaded)");
  } else if (power_why) {
    mlprof__row_put(r, names[6], 0, power_why);
  } else {
    /* Trapezoids between ticks; a tick without power is bridged over. */
    if (g->have_w && ctx->now_ns > g->last_ns)
      g->energy_j +=
          (g->last_w + w) / 2.0 * ((double)(ctx->now_ns - g->last_ns) / 1e9);
    g->have_w = 1;
    g->last_w = w;
    g->last_ns = ctx->now_ns;
    mlprof__row_put(r, names[6], g->energy_j, NULL);
  }

  if (!s->fn.clock) {
    mlprof__row_put(r, names[7], 0, MISSING);
  } else {
    ret = s->fn.clock(g->h, NVML_CLOCK_SM, &v);
    LOST_CHECK(ret, i);
    mlprof__row_put(r, names[7], v,
                    ret == NVML_SUCCESS ? NULL : reason(s, ret));
  }

  if (slow) {
    static const int counter[2] = {NVML_PCIE_UTIL_RX_BYTES,
                                   NVML_PCIE_UTIL_TX_BYTES};
    for (int k = 0; k < 2; k++) {
      if (!s->fn.pcie) {
        mlprof__row_put(r, names[8 + k], 0, MISSING);
        continue;
      }
      ret = s->fn.pcie(g->h, counter[k], &v);
      LOST_CHECK(ret, i);
      mlprof__row_put(r, names[8 + k], (double)v * 1024.0,
                      ret == NVML_SUCCESS ? NULL : reason(s, ret));
    }
  }

  if (!s->fn.throttle) {
    mlprof__row_put(r, names[10], 0, MISSING);
  } else {
    unsigned long long mask = 0;
    ret = s->fn.throttle(g->h, &mask);
    LOST_CHECK(ret, i);
    mlprof__row_put(r, names[10], (double)mask,
                    ret == NVML_SUCCESS ? NULL : reason(s, ret));
  }
  return 0;
}

/* The compute processes of one device into s->procs; count in *n. */
static nvml_ret device_procs(nvml_state *s, gpu_t *g, unsigned int *n) {
  for (int attempt = 0; attempt < 2; attempt++) {
    if (!s->procs) {
      s->procs_cap = 64;
      s->procs = calloc(s->procs_cap, sizeof *s->procs);
      if (!s->procs) return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int cnt = s->procs_cap;
    nvml_ret r;
    if (s->fn.procs_v2) {
      r = s->fn.procs_v2(g->h, &cnt, s->procs);
    } else {
      /* The v1 layout is smaller: fill the same buffer, then widen in place
       * from the end. */
      nvml_process_v1 *p1 = (nvml_process_v1 *)s->procs;
      r = s->fn.procs_v1(g->h, &cnt, p1);
      if (r == NVML_SUCCESS)
        for (unsigned int k = cnt; k-- > 0;) {
          nvml_process_v1 one = p1[k];
          s->procs[k] = (nvml_process_v2){one.pid, one.used_gpu_memory, 0, 0};
        }
    }
    if (r != NVML_ERROR_INSUFFICIENT_SIZE || attempt == 1 ||
        s->procs_cap >= MAX_GPU_PROCS) {
      *n = r == NVML_SUCCESS ? (cnt < s->procs_cap ? cnt : s->procs_cap) : 0;
      return r;
    }
    /* On INSUFFICIENT_SIZE the count says how many there are. */
    unsigned int want =
        cnt + 16 > s->procs_cap * 2 ? cnt + 16 : s->procs_cap * 2;
    if (want > MAX_GPU_PROCS) want = MAX_GPU_PROCS;
    nvml_process_v2 *np = realloc(s->procs, want * sizeof *np);
    if (!np) return NVML_ERROR_INSUFFICIENT_SIZE;
    s->procs = np;
    s->procs_cap = want;
  }
  return NVML_ERROR_INSUFFICIENT_SIZE;
}

/* GPU memory of the profiled pids: one row per pid that NVML lists (a pid
 * not listed has no context on any GPU; in a container NVML may list host
 * pids, which then match nothing: no row rather than a false 0). */
static int process_rows(nvml_state *s, const mlprof__sample_ctx *ctx,
                        mlprof__row *out, int max, char *why, size_t len) {
  size_t np = ctx->npids < MAX_PIDS ? ctx->npids : MAX_PIDS;
  if (np == 0 || max <= 0) return 0;
  memset(s->pid_mem, 0, np * sizeof s->pid_mem[0]);
  memset(s->pid_seen, 0, np);
  const char *fail = NULL;
  int ok = 0;
  int callable = s->fn.procs_v2 || s->fn.procs_v1;
  if (!callable) fail = MISSING;
  for (unsigned int i = 0; i < s->n && callable; i++) {
    gpu_t *g = &s->gpu[i];
    if (g->err) continue;
    unsigned int cnt = 0;
    nvml_ret r = device_procs(s, g, &cnt);
    LOST_CHECK(r, i);
    if (r != NVML_SUCCESS) {
      if (!ok) fail = reason(s, r);
      continue;
    }
    ok = 1;
    fail = NULL;
    for (unsigned int k = 0; k < cnt; k++)
      for (size_t j = 0; j < np; j++)
        if ((pid_t)s->procs[k].pid == ctx->pids[j]) {
          unsigned long long b = s->procs[k].used_gpu_memory;
          if (b == NVML_VALUE_NOT_AVAILABLE)
            s->pid_seen[j] = 2;
          else {
            s->pid_mem[j] += b;
            if (!s->pid_seen[j]) s->pid_seen[j] = 1;
          }
        }
  }
  int rows = 0;
  for (size_t j = 0; j < np && rows < max; j++) {
    if (!fail && !s->pid_seen[j]) continue;
    mlprof__row *r = &out[rows++];
    memset(r, 0, sizeof *r);
    r->subject = MLPROF__SUBJECT_PROCESS;
    r->id = (uint64_t)ctx->pids[j];
    if (fail)
      mlprof__row_put(r, "gpu_mem_bytes", 0, fail);
    else if (s->pid_seen[j] == 2)
      mlprof__row_put(r, "gpu_mem_bytes", 0, "not available from NVML");
    else
      mlprof__row_put(r, "gpu_mem_bytes", (double)s->pid_mem[j], NULL);
  }
  return rows;
}

static int nvml_sample(void *state, const mlprof__sample_ctx *ctx,
                       mlprof__row *out, int max, char *why, size_t len) {
  nvml_state *s = state;
  int rows = 0;
  for (unsigned int i = 0; i < s->n && rows < max; i++) {
    if (gpu_row(s, i, ctx, &out[rows], why, len) < 0) return -1;
    rows++;
  }
  if (ctx->tick % SLOW_EVERY == 0) {
    int p = process_rows(s, ctx, out + rows, max - rows, why, len);
    if (p < 0) return -1;
    rows += p;
  }
  return rows;
}

const mlprof__source mlprof__source_nvml = {
    .name = "nvml",
    .open = nvml_open,
    .start = nvml_start,
    .sample = nvml_sample,
    .close = nvml_close,
    /* NVML keeps /dev/nvidia* descriptors for the whole process, shared with
     * the program's own NVML calls: they must be numbers of its table. */
    .program_fds = 1,
};
