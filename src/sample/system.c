/* Source "system": one row for the whole machine, from /proc/stat,
 * /proc/loadavg, /proc/meminfo, /proc/diskstats and /proc/net/dev. CPU
 * shares and byte rates are deltas since the previous tick. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

#define BIG_FILE (64 * 1024) /* diskstats and net/dev of a large machine */

typedef struct {
  unsigned long long user, system, iowait, idle, steal, total;
  int has_steal; /* the line has the steal field (Linux 2.6.11 on) */
} cpu_t;

/* What the lines of diskstats were at the previous tick: whether each is
 * a whole disk, decided by a look in /sys/block when its name changed. */
#define DISK_LINES 256
typedef struct {
  char name[32];
  int whole;
} disk_line;

typedef struct {
  int have; /* a previous tick exists */
  uint64_t ns;
  cpu_t cpu;
  int cpu_ok, disk_ok, net_ok;
  unsigned long long disk_rd, disk_wr, net_rx, net_tx;
  int sysblock; /* root/sys/block exists: it decides what a whole disk is */
  char *buf;    /* BIG_FILE bytes */
  disk_line disks[DISK_LINES];
} sys_state;

static int sys_open(void **state, const char *root, char *why, size_t len) {
  char line[256];
  if (mlprof__read_at(root, "/proc/stat", line, sizeof line) < 0) {
    snprintf(why, len, "cannot read /proc/stat: %s", strerror(errno));
    return -1;
  }
  sys_state *s = calloc(1, sizeof *s);
  if (s) s->buf = malloc(BIG_FILE);
  if (!s || !s->buf) {
    free(s);
    snprintf(why, len, "out of memory");
    return -1;
  }
  DIR *d = mlprof__opendir_at(root, "/sys/block");
  if (d) {
    s->sysblock = 1;
    closedir(d);
  }
  *state = s;
  return 0;
}

static void sys_close(void *state) {
  sys_state *s = state;
  if (!s) return;
  free(s->buf);
  free(s);
}

/* Up to n unsigned decimal fields, separated by blanks, from *p on (*p is
 * left after them). Returns how many were read. */
static int fields(const char **p, unsigned long long *v, int n) {
  int k = 0;
  for (; k < n; k++) {
    const char *q = *p;
    while (*q == ' ' || *q == '\t') q++;
    if (*q < '0' || *q > '9') break;
    char *end;
    v[k] = strtoull(q, &end, 10);
    *p = end;
  }
  return k;
}

/* The "cpu " line of /proc/stat: user nice system idle iowait irq softirq
 * steal (guest time is already inside user). */
static int read_cpu(const char *root, cpu_t *c) {
  char buf[512];
  unsigned long long v[8] = {0};
  if (mlprof__read_at(root, "/proc/stat", buf, sizeof buf) < 0) return -1;
  if (strncmp(buf, "cpu ", 4) != 0) return -1;
  const char *p = buf + 4;
  int n = fields(&p, v, 8);
  if (n < 4) return -1;
  c->has_steal = n == 8;
  c->steal = v[7];
  c->user = v[0] + v[1];
  c->system = v[2] + v[5] + v[6];
  c->idle = v[3];
  c->iowait = v[4];
  c->total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
  return 0;
}

static int meminfo_kb(const char *buf, const char *key, double *bytes) {
  size_t kl = strlen(key);
  for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
    if (strncmp(p, key, kl) == 0) {
      char *end;
      unsigned long long v = strtoull(p + kl, &end, 10);
      if (end == p + kl) return -1;
      *bytes = (double)v * 1024.0;
      return 0;
    }
  }
  return -1;
}

/* Devices that sit on other disks or in memory: counting them would count
 * the same bytes twice, or bytes that never reach a disk. */
static int stacked(const char *name) {
  static const char *const skip[] = {"loop", "ram", "zram", "dm-", "md"};
  for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
    if (mlprof__has_prefix(name, skip[i])) return 1;
  return 0;
}

static int whole_disk(const sys_state *s, const char *root, const char *name,
                      const char *last_disk) {
  if (stacked(name)) return 0;
  if (s->sysblock) {
    /* /sys/block holds whole disks only; a '/' in a name is '!' there. */
    char path[300];
    snprintf(path, sizeof path, "/sys/block/%s", name);
    for (char *p = path + strlen("/sys/block/"); *p; p++)
      if (*p == '/') *p = '!';
    DIR *d = mlprof__opendir_at(root, path);
    if (!d) return 0;
    closedir(d);
    return 1;
  }
  /* Without /sys, a partition follows its disk and extends its name. */
  return !(last_disk[0] && mlprof__has_prefix(name, last_disk));
}

/* The blank-separated word at *p into name (cut to len - 1), *p after it.
 * 0, or -1 when there is none. */
static int word(const char **p, char *name, size_t len) {
  const char *q = *p;
  while (*q == ' ' || *q == '\t') q++;
  size_t n = strcspn(q, " \t\n");
  if (!n) return -1;
  snprintf(name, len, "%.*s", (int)n, q);
  *p = q + n;
  return 0;
}

/* Sectors (512 bytes whatever the device) read and written by whole disks. */
static int read_disks(sys_state *s, const char *root, unsigned long long *rd,
                      unsigned long long *wr) {
  if (mlprof__read_at(root, "/proc/diskstats", s->buf, BIG_FILE) < 0) return -1;
  char last[64] = "";
  *rd = *wr = 0;
  size_t i = 0;
  for (char *line = s->buf; line && *line; i++) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    const char *p = line;
    char name[64];
    unsigned long long dev[2], f[7];
    /* major minor name reads merged sectors ms writes merged sectors */
    if (fields(&p, dev, 2) == 2 && word(&p, name, sizeof name) == 0 &&
        fields(&p, f, 7) == 7) {
      disk_line *c = s->sysblock && i < DISK_LINES ? &s->disks[i] : NULL;
      int whole;
      if (c && strcmp(c->name, name) == 0) {
        whole = c->whole;
      } else {
        whole = whole_disk(s, root, name, last);
        if (c && strlen(name) < sizeof c->name) {
          memcpy(c->name, name, strlen(name) + 1);
          c->whole = whole;
        }
      }
      if (whole) {
        *rd += f[2] * 512;
        *wr += f[6] * 512;
        snprintf(last, sizeof last, "%s", name);
      }
    }
    line = nl ? nl + 1 : NULL;
  }
  return 0;
}

static int read_net(sys_state *s, const char *root, unsigned long long *rx,
                    unsigned long long *tx) {
  if (mlprof__read_at(root, "/proc/net/dev", s->buf, BIG_FILE) < 0) return -1;
  *rx = *tx = 0;
  for (char *line = s->buf; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    char *colon = strchr(line, ':');
    if (colon) {
      *colon = '\0';
      char *name = line;
      while (*name == ' ') name++;
      unsigned long long f[9];
      const char *p = colon + 1;
      if (strcmp(name, "lo") != 0 && fields(&p, f, 9) == 9) {
        *rx += f[0];
        *tx += f[8];
      }
    }
    line = nl ? nl + 1 : NULL;
  }
  return 0;
}

static double pct(unsigned long long part, unsigned long long total) {
  return total ? (double)part / (double)total * 100.0 : 0.0;
}

/* A byte rate between two readings of a counter, or the reason it has none. */
static void put_rate(mlprof__row *r, const char *name, int have, int ok_prev,
                     int ok_now, unsigned long long prev,
                     unsigned long long now, double dt, const char *unread) {
  if (!ok_now)
    mlprof__row_put(r, name, 0, unread);
  else if (!have || !ok_prev)
    mlprof__row_put(r, name, 0, "first sample");
  else if (dt <= 0)
    mlprof__row_put(r, name, 0, "no time elapsed");
  else if (now < prev)
    mlprof__row_put(r, name, 0, "counters went back (device removed)");
  else
    mlprof__row_put(r, name, (double)(now - prev) / dt, NULL);
}

static int sys_sample(void *state, const mlprof__sample_ctx *ctx,
                      mlprof__row *out, int max, char *why, size_t len) {
  sys_state *s = state;
  const char *root = ctx->root;
  if (max < 1) return 0;
  mlprof__row *r = out;
  memset(r, 0, sizeof *r);
  r->subject = MLPROF__SUBJECT_SYSTEM;
  r->id = 0;
  double dt =
      s->have && ctx->now_ns > s->ns ? (double)(ctx->now_ns - s->ns) / 1e9 : 0;

  cpu_t c;
  int cpu_ok = read_cpu(root, &c) == 0;
  static const char *const cpu_names[] = {"cpu_user_pct", "cpu_system_pct",
                                          "cpu_iowait_pct", "cpu_idle_pct",
                                          "cpu_steal_pct"};
  const char *cpu_why = NULL;
  if (!cpu_ok)
    cpu_why = "cannot read /proc/stat";
  else if (!s->have || !s->cpu_ok)
    cpu_why = "first sample";
  else if (c.total <= s->cpu.total)
    cpu_why = "no time elapsed";
  if (cpu_why) {
    for (int i = 0; i < 5; i++) mlprof__row_put(r, cpu_names[i], 0, cpu_why);
  } else {
    unsigned long long t = c.total - s->cpu.total;
    /* Each share is clamped at 0: idle can step back on some kernels. */
#define DELTA(f) (c.f > s->cpu.f ? c.f - s->cpu.f : 0)
    mlprof__row_put(r, cpu_names[0], pct(DELTA(user), t), NULL);
    mlprof__row_put(r, cpu_names[1], pct(DELTA(system), t), NULL);
    mlprof__row_put(r, cpu_names[2], pct(DELTA(iowait), t), NULL);
    mlprof__row_put(r, cpu_names[3], pct(DELTA(idle), t), NULL);
    /* Time the hypervisor ran other guests on our virtual CPUs: a process
     * that waits for it is not on a run queue, so only this shows it. */
    if (c.has_steal && s->cpu.has_steal)
      mlprof__row_put(r, cpu_names[4], pct(DELTA(steal), t), NULL);
    else
      mlprof__row_put(r, cpu_names[4], 0, "not provided by this kernel");
#undef DELTA
  }

  char buf[256], *end;
  double load;
  if (mlprof__read_at(root, "/proc/loadavg", buf, sizeof buf) >= 0 &&
      (load = strtod(buf, &end), end != buf))
    mlprof__row_put(r, "load1", load, NULL);
  else
    mlprof__row_put(r, "load1", 0, "cannot read /proc/loadavg");

  double total = 0, avail = 0, stotal, sfree;
  if (mlprof__read_at(root, "/proc/meminfo", s->buf, BIG_FILE) < 0) {
    mlprof__row_put(r, "mem_used_bytes", 0, "cannot read /proc/meminfo");
    mlprof__row_put(r, "mem_available_bytes", 0, "cannot read /proc/meminfo");
    mlprof__row_put(r, "mem_total_bytes", 0, "cannot read /proc/meminfo");
    mlprof__row_put(r, "swap_used_bytes", 0, "cannot read /proc/meminfo");
  } else {
    const char *mi = s->buf;
    int tok = meminfo_kb(mi, "MemTotal:", &total) == 0;
    int aok = meminfo_kb(mi, "MemAvailable:", &avail) == 0;
    if (tok && aok)
      mlprof__row_put(r, "mem_used_bytes", total - avail, NULL);
    else
      mlprof__row_put(r, "mem_used_bytes", 0,
                      "no MemTotal/MemAvailable in /proc/meminfo");
    mlprof__row_put(r, "mem_available_bytes", avail,
                    aok ? NULL : "no MemAvailable in /proc/meminfo");
    mlprof__row_put(r, "mem_total_bytes", total,
                    tok ? NULL : "no MemTotal in /proc/meminfo");
    if (meminfo_kb(mi, "SwapTotal:", &stotal) == 0 &&
        meminfo_kb(mi, "SwapFree:", &sfree) == 0)
      mlprof__row_put(r, "swap_used_bytes", stotal - sfree, NULL);
    else
      mlprof__row_put(r, "swap_used_bytes", 0,
                      "no SwapTotal/SwapFree in /proc/meminfo");
  }

  unsigned long long rd = 0, wr = 0, rx = 0, tx = 0;
  int disk_ok = read_disks(s, root, &rd, &wr) == 0;
  put_rate(r, "disk_read_bytes_s", s->have, s->disk_ok, disk_ok, s->disk_rd, rd,
           dt, "cannot read /proc/diskstats");
  put_rate(r, "disk_write_bytes_s", s->have, s->disk_ok, disk_ok, s->disk_wr,
           wr, dt, "cannot read /proc/diskstats");
  int net_ok = read_net(s, root, &rx, &tx) == 0;
  put_rate(r, "net_rx_bytes_s", s->have, s->net_ok, net_ok, s->net_rx, rx, dt,
           "cannot read /proc/net/dev");
  put_rate(r, "net_tx_bytes_s", s->have, s->net_ok, net_ok, s->net_tx, tx, dt,
           "cannot read /proc/net/dev");

  s->have = 1;
  s->ns = ctx->now_ns;
  s->cpu_ok = cpu_ok;
  if (cpu_ok) s->cpu = c;
  s->disk_ok = disk_ok;
  s->disk_rd = rd;
  s->disk_wr = wr;
  s->net_ok = net_ok;
  s->net_rx = rx;
  s->net_tx = tx;
  return 1;
}

const mlprof__source mlprof__source_system = {
    .name = "system",
    .open = sys_open,
    .sample = sys_sample,
    .close = sys_close,
};
