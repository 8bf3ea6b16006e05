/* A fake libnvidia-ml.so.1 for the tests: the NVML functions mlprof's loader
 * uses, with the real C signatures and return codes, answering from a script
 * named by the environment variable FAKE_NVML_SCRIPT. The script is read at
 * every first nvmlInit (so each open of the source starts afresh).
 *
 * Script: one directive per line, '#' starts a comment. DEV is a device
 * index or '*' for every device; later lines override earlier ones.
 *
 *   init CODE               nvmlInit_v2 returns CODE (default 0, success)
 *   devices N               nvmlDeviceGetCount_v2 answers N (default 0)
 *   name DEV TEXT...        device name, the rest of the line
 *   util DEV GPU MEM        utilization, percent
 *   memory DEV USED TOTAL   bytes; free = TOTAL - USED
 *   temp DEV C              GPU temperature, degrees C
 *   power DEV MW [STEP]     power draw, milliwatts: the k-th call on DEV
 *                           answers MW + k * STEP (STEP 0 when left out)
 *   energy DEV START STEP   energy counter, mJ: the k-th call (k = 0, 1...)
 *                           on DEV answers START + k * STEP
 *   clock DEV MHZ           SM clock (other clock types: NOT_SUPPORTED)
 *   pcie DEV RX TX          PCIe throughput, KB/s
 *   throttle DEV MASK       clocks throttle reasons bit mask
 *   process DEV PID BYTES   a compute process on DEV (at most 64 per device)
 *   fail DEV CALL CODE      CALL on DEV returns CODE (3 = NOT_SUPPORTED);
 *                           CALL: handle name util memory temp power energy
 *                           clock pcie throttle processes
 *   lost DEV N              the first N calls of GetUtilizationRates on DEV
 *                           succeed; the next one, and every call on DEV
 *                           after it, returns NVML_ERROR_GPU_IS_LOST (15)
 *
 * A script that cannot be read or parsed makes nvmlInit return
 * NVML_ERROR_UNKNOWN (999) after a line on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999,
};

typedef struct fake_device *nvmlDevice_t;
typedef struct {
  unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;

#define MAX_DEV 64
#define MAX_PROC 64

enum {
  C_HANDLE,
  C_NAME,
  C_UTIL,
  C_MEMORY,
  C_TEMP,
  C_POWER,
  C_ENERGY,
  C_CLOCK,
  C_PCIE,
  C_THROTTLE,
  C_PROCESSES,
  C_COUNT
};
static const char *const call_names[C_COUNT] = {
    "handle", "name",  "util", "memory",   "temp",     "power",
    "energy", "clock", "pcie", "throttle", "processes"};

struct fake_device {
  char name[96];
  unsigned int util_gpu, util_mem, temp, power, clock, pcie_rx, pcie_tx;
  unsigned long long mem_used, mem_total, energy_start, energy_step, throttle;
  unsigned long long energy_calls, util_calls, power_calls;
  unsigned int power_step;
  long long lost_after; /* -1: never */
  int gone;
  int fail[C_COUNT];
  int nproc;
  unsigned int proc_pid[MAX_PROC];
  unsigned long long proc_bytes[MAX_PROC];
};

static struct fake_device dev[MAX_DEV];
static int init_code, ndev, refs;

static void reset(void) {
  memset(dev, 0, sizeof dev);
  for (int i = 0; i < MAX_DEV; i++) {
    snprintf(dev[i].name, sizeof dev[i].name, "Fake GPU %d", i);
    dev[i].lost_after = -1;
  }
  init_code = 0;
  ndev = 0;
}

/* The devices a DEV word names: [lo, hi). */
static int dev_range(const char *w, int *lo, int *hi) {
  if (strcmp(w, "*") == 0) {
    *lo = 0;
    *hi = MAX_DEV;
    return 0;
  }
  char *end;
  long v = strtol(w, &end, 10);
  if (*end || end == w || v < 0 || v >= MAX_DEV) return -1;
  *lo = (int)v;
  *hi = (int)v + 1;
  return 0;
}

static int parse_line(char *line) {
  char *hash = strchr(line, '#');
  if (hash) *hash = '\0';
  char cmd[32], dw[16];
  int off = 0;
  if (sscanf(line, " %31s%n", cmd, &off) != 1) return 0; /* blank */
  char *rest = line + off;
  if (strcmp(cmd, "init") == 0)
    return sscanf(rest, "%d", &init_code) == 1 ? 0 : -1;
  if (strcmp(cmd, "devices") == 0)
    return sscanf(rest, "%d", &ndev) == 1 && ndev >= 0 && ndev <= MAX_DEV ? 0
                                                                          : -1;
  int lo, hi, n = 0;
  if (sscanf(rest, " %15s%n", dw, &n) != 1 || dev_range(dw, &lo, &hi) < 0)
    return -1;
  rest += n;
  for (int i = lo; i < hi; i++) {
    struct fake_device *d = &dev[i];
    int ok = 1;
    if (strcmp(cmd, "name") == 0) {
      while (*rest == ' ' || *rest == '\t') rest++;
      snprintf(d->name, sizeof d->name, "%s", rest);
      d->name[strcspn(d->name, "\r\n")] = '\0';
    } else if (strcmp(cmd, "util") == 0) {
      ok = sscanf(rest, "%u %u", &d->util_gpu, &d->util_mem) == 2;
    } else if (strcmp(cmd, "memory") == 0) {
      ok = sscanf(rest, "%llu %llu", &d->mem_used, &d->mem_total) == 2;
    } else if (strcmp(cmd, "temp") == 0) {
      ok = sscanf(rest, "%u", &d->temp) == 1;
    } else if (strcmp(cmd, "power") == 0) {
      d->power_step = 0;
      ok = sscanf(rest, "%u %u", &d->power, &d->power_step) >= 1;
    } else if (strcmp(cmd, "energy") == 0) {
      ok = sscanf(rest, "%llu %llu", &d->energy_start, &d->energy_step) == 2;
    } else if (strcmp(cmd, "clock") == 0) {
      ok = sscanf(rest, "%u", &d->clock) == 1;
    } else if (strcmp(cmd, "pcie") == 0) {
      ok = sscanf(rest, "%u %u", &d->pcie_rx, &d->pcie_tx) == 2;
    } else if (strcmp(cmd, "throttle") == 0) {
      ok = sscanf(rest, "%llu", &d->throttle) == 1;
    } else if (strcmp(cmd, "process") == 0) {
      ok =
          d->nproc < MAX_PROC && sscanf(rest, "%u %llu", &d->proc_pid[d->nproc],
                                        &d->proc_bytes[d->nproc]) == 2;
      if (ok) d->nproc++;
    } else if (strcmp(cmd, "fail") == 0) {
      char call[32];
      int code, k;
      ok = sscanf(rest, "%31s %d", call, &code) == 2;
      for (k = 0; ok && k < C_COUNT; k++)
        if (strcmp(call, call_names[k]) == 0) break;
      ok = ok && k < C_COUNT;
      if (ok) d->fail[k] = code;
    } else if (strcmp(cmd, "lost") == 0) {
      ok = sscanf(rest, "%lld", &d->lost_after) == 1;
    } else {
      ok = 0;
    }
    if (!ok) return -1;
  }
  return 0;
}

static int load_script(void) {
  reset();
  const char *path = getenv("FAKE_NVML_SCRIPT");
  if (!path || !*path) return 0; /* no script: no device */
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "fake_nvml: cannot open %s\n", path);
    return -1;
  }
  char line[512];
  int lineno = 0, rc = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    if (parse_line(line) < 0) {
      fprintf(stderr, "fake_nvml: %s:%d: bad line\n", path, lineno);
      rc = -1;
      break;
    }
  }
  fclose(f);
  return rc;
}

/* The common entry of every device call: validity, loss, scripted failure. */
static nvmlReturn_t enter(nvmlDevice_t d, int call) {
  if (refs <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!d || d < dev || d >= dev + ndev) return NVML_ERROR_INVALID_ARGUMENT;
  if (d->gone) return NVML_ERROR_GPU_IS_LOST;
  /* The (N+1)-th utilization call is the first to find the GPU gone. */
  if (call == C_UTIL && d->lost_after >= 0 &&
      (long long)d->util_calls >= d->lost_after) {
    d->gone = 1;
    return NVML_ERROR_GPU_IS_LOST;
  }
  return d->fail[call];
}

EXPORT nvmlReturn_t nvmlInit_v2(void) {
  if (refs == 0) {
    if (load_script() < 0) return NVML_ERROR_UNKNOWN;
    if (init_code != NVML_SUCCESS) return init_code;
  }
  refs++;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
  if (refs <= 0) return NVML_ERROR_UNINITIALIZED;
  refs--;
  return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
  if (refs <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = (unsigned int)ndev;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i,
                                                  nvmlDevice_t *h) {
  if (refs <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!h || i >= (unsigned int)ndev) return NVML_ERROR_INVALID_ARGUMENT;
  if (dev[i].fail[C_HANDLE]) return dev[i].fail[C_HANDLE];
  *h = &dev[i];
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name,
                                      unsigned int len) {
  nvmlReturn_t r = enter(d, C_NAME);
  if (r) return r;
  if (!name) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(d->name) >= len) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(name, d->name, strlen(d->name) + 1);
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d,
                                                  nvmlUtilization_t *u) {
  nvmlReturn_t r = enter(d, C_UTIL);
  if (r) return r;
  if (!u) return NVML_ERROR_INVALID_ARGUMENT;
  d->util_calls++;
  u->gpu = d->util_gpu;
  u->memory = d->util_mem;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
  nvmlReturn_t r = enter(d, C_MEMORY);
  if (r) return r;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  m->used = d->mem_used;
  m->total = d->mem_total;
  m->free = d->mem_total > d->mem_used ? d->mem_total - d->mem_used : 0;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor,
                                             unsigned int *t) {
  nvmlReturn_t r = enter(d, C_TEMP);
  if (r) return r;
  if (!t || sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
  *t = d->temp;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
  nvmlReturn_t r = enter(d, C_POWER);
  if (r) return r;
  if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
  *mw = d->power + (unsigned int)d->power_calls++ * d->power_step;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t
nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
  nvmlReturn_t r = enter(d, C_ENERGY);
  if (r) return r;
  if (!mj) return NVML_ERROR_INVALID_ARGUMENT;
  *mj = d->energy_start + d->energy_calls++ * d->energy_step;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type,
                                           unsigned int *mhz) {
  nvmlReturn_t r = enter(d, C_CLOCK);
  if (r) return r;
  if (!mhz) return NVML_ERROR_INVALID_ARGUMENT;
  if (type != 1) return NVML_ERROR_NOT_SUPPORTED; /* only NVML_CLOCK_SM */
  *mhz = d->clock;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter,
                                                unsigned int *kbs) {
  nvmlReturn_t r = enter(d, C_PCIE);
  if (r) return r;
  if (!kbs || (counter != 0 && counter != 1))
    return NVML_ERROR_INVALID_ARGUMENT;
  *kbs = counter == 0 ? d->pcie_tx : d->pcie_rx; /* 0 TX, 1 RX */
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(
    nvmlDevice_t d, unsigned long long *mask) {
  nvmlReturn_t r = enter(d, C_THROTTLE);
  if (r) return r;
  if (!mask) return NVML_ERROR_INVALID_ARGUMENT;
  *mask = d->throttle;
  return NVML_SUCCESS;
}

static nvmlReturn_t processes(nvmlDevice_t d, unsigned int *count, void *infos,
                              int v2) {
  nvmlReturn_t r = enter(d, C_PROCESSES);
  if (r) return r;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int n = (unsigned int)d->nproc;
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (n && !infos) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned int k = 0; k < n; k++) {
    if (v2)
      ((nvmlProcessInfo_v2_t *)infos)[k] = (nvmlProcessInfo_v2_t){
          d->proc_pid[k], d->proc_bytes[k], 0xFFFFFFFFu, 0xFFFFFFFFu};
    else
      ((nvmlProcessInfo_v1_t *)infos)[k] =
          (nvmlProcessInfo_v1_t){d->proc_pid[k], d->proc_bytes[k]};
  }
  *count = n;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v2_t *infos) {
  return processes(d, count, infos, 1);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos) {
  return processes(d, count, infos, 0);
}
