/* Source "energy": CPU package energy from RAPL through powercap
 * (/sys/class/powercap/intel-rapl:N, also used by AMD). The energy_uj counter
 * wraps at max_energy_range_uj; each tick adds the step since the previous
 * one, so a wrap between two ticks is counted right (two wraps are not: at
 * 10 Hz that needs hours between ticks). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

#define MAX_PACKAGES 16

typedef struct {
  char path[96]; /* .../energy_uj below root */
  unsigned long long max, last;
} package_t;

typedef struct {
  int n;
  package_t pkg[MAX_PACKAGES];
  double total_j; /* since open, all packages */
  double prev_j;  /* total_j at the previous tick */
  uint64_t prev_ns;
  int have; /* a previous tick exists */
  char why[192];
} energy_state;

static int read_ull(const char *root, const char *path, unsigned long long *v) {
  char buf[64];
  if (mlprof__read_at(root, path, buf, sizeof buf) < 0) return -1;
  char *end;
  errno = 0;
  *v = strtoull(buf, &end, 10);
  if (end == buf || errno) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

/* "intel-rapl:N" exactly: "intel-rapl:N:M" are subzones (core, uncore,
 * dram), inside the package's count already. */
static int is_package_zone(const char *d) {
  if (strncmp(d, "intel-rapl:", 11) != 0 || !d[11]) return 0;
  for (const char *p = d + 11; *p; p++)
    if (*p < '0' || *p > '9') return 0;
  return 1;
}

static int energy_open(void **state, const char *root, char *why, size_t len) {
  energy_state *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(why, len, "out of memory");
    return -1;
  }
  DIR *d = mlprof__opendir_at(root, "/sys/class/powercap");
  int zones = 0, err = 0;
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) && s->n < MAX_PACKAGES) {
      if (!is_package_zone(e->d_name)) continue;
      char dir[64], path[96], name[64];
      snprintf(dir, sizeof dir, "/sys/class/powercap/%.40s", e->d_name);
      snprintf(path, sizeof path, "%s/name", dir);
      if (mlprof__read_at(root, path, name, sizeof name) < 0 ||
          strncmp(name, "package-", 8) != 0)
        continue;
      zones++;
      package_t *p = &s->pkg[s->n];
      snprintf(p->path, sizeof p->path, "%s/energy_uj", dir);
      snprintf(path, sizeof path, "%s/max_energy_range_uj", dir);
      if (read_ull(root, p->path, &p->last) < 0 ||
          read_ull(root, path, &p->max) < 0) {
        err = errno;
        continue;
      }
      s->n++;
    }
    closedir(d);
  }
  if (s->n > 0) {
    *state = s;
    return 0;
  }
  if (zones == 0)
    snprintf(why, len, "no RAPL in /sys/class/powercap");
  else
    snprintf(why, len, "RAPL not readable: %s", strerror(err));
  free(s);
  return -1;
}

static int energy_sample(void *state, const mlprof__sample_ctx *ctx,
                         mlprof__row *out, int max, char *why, size_t len) {
  energy_state *s = state;
  if (max < 1) return 0;
  mlprof__row *r = out;
  memset(r, 0, sizeof *r);
  r->subject = MLPROF__SUBJECT_SYSTEM;
  r->n = 2;
  r->m[0].name = "cpu_energy_j";
  r->m[1].name = "cpu_power_w";

  /* All packages or nothing: a partial sum would understate the power. */
  unsigned long long now[MAX_PACKAGES];
  for (int i = 0; i < s->n; i++) {
    if (read_ull(ctx->root, s->pkg[i].path, &now[i]) < 0) {
      snprintf(s->why, sizeof s->why, "cannot read %s: %s", s->pkg[i].path,
               strerror(errno));
      r->m[0].absent = r->m[1].absent = s->why;
      s->have = 0; /* the next power would span the gap: start over */
      return 1;
    }
  }
  for (int i = 0; i < s->n; i++) {
    package_t *p = &s->pkg[i];
    unsigned long long step =
        now[i] >= p->last ? now[i] - p->last
                          : (p->max > p->last ? p->max - p->last : 0) + now[i];
    s->total_j += (double)step / 1e6;
    p->last = now[i];
  }
  r->m[0].value = s->total_j;
  if (!s->have)
    r->m[1].absent = "first sample";
  else if (ctx->now_ns <= s->prev_ns)
    r->m[1].absent = "no time elapsed";
  else
    r->m[1].value =
        (s->total_j - s->prev_j) / ((double)(ctx->now_ns - s->prev_ns) / 1e9);
  s->have = 1;
  s->prev_j = s->total_j;
  s->prev_ns = ctx->now_ns;
  return 1;
}

static void energy_close(void *state) { free(state); }

const mlprof__source mlprof__source_energy = {
    .name = "energy",
    .open = energy_open,
    .sample = energy_sample,
    .close = energy_close,
};
