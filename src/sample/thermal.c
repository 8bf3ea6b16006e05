/* Source "thermal": CPU temperature from hwmon chips of CPU drivers, else from
 * thermal zones of CPU type. The row carries the hottest of the sensors
 * found; its label names the chip or zone type they came from. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

#define MAX_SENSORS 64

typedef struct {
  int n;
  char path[MAX_SENSORS][128]; /* below root */
  char label[64];
  char why[192];
} thermal_state;

static const char *const hwmon_cpu[] = {
    "coretemp",    "k10temp",     "k8temp",      "zenpower",
    "via_cputemp", "cpu_thermal", "cpu-thermal",
};

static int is_cpu_chip(const char *name) {
  for (size_t i = 0; i < sizeof hwmon_cpu / sizeof hwmon_cpu[0]; i++)
    if (strcmp(name, hwmon_cpu[i]) == 0) return 1;
  return 0;
}

static int is_cpu_zone(const char *type) {
  return strcmp(type, "x86_pkg_temp") == 0 || strncmp(type, "cpu", 3) == 0 ||
         strncmp(type, "soc", 3) == 0;
}

/* First line of a small sysfs file, without its newline; -1 with errno. */
static int read_line(const char *root, const char *path, char *buf,
                     size_t len) {
  if (mlprof__read_at(root, path, buf, len) < 0) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

/* Millidegrees from a temp file; -1 with errno (EINVAL when unparsable). */
static int read_milli(const char *root, const char *path, long long *v) {
  char buf[64];
  if (mlprof__read_at(root, path, buf, sizeof buf) < 0) return -1;
  char *end;
  errno = 0;
  *v = strtoll(buf, &end, 10);
  if (end == buf || errno) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

static void add(thermal_state *s, const char *path) {
  if (s->n < MAX_SENSORS && (size_t)snprintf(s->path[s->n], sizeof s->path[0],
                                             "%s", path) < sizeof s->path[0])
    s->n++;
}

/* The temp*_input files of one hwmon directory (dir is below root). */
static void add_inputs(thermal_state *s, const char *root, const char *dir) {
  DIR *d = mlprof__opendir_at(root, dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (strncmp(e->d_name, "temp", 4) == 0 && l > 6 &&
        strcmp(e->d_name + l - 6, "_input") == 0) {
      char path[256];
      if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) <
          sizeof path)
        add(s, path);
    }
  }
  closedir(d);
}

static void scan_hwmon(thermal_state *s, const char *root) {
  DIR *d = mlprof__opendir_at(root, "/sys/class/hwmon");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "hwmon", 5) != 0) continue;
    /* Older drivers keep name and inputs under device/. */
    static const char *const sub[] = {"", "/device"};
    for (int k = 0; k < 2; k++) {
      char dir[128], path[160], name[64];
      snprintf(dir, sizeof dir, "/sys/class/hwmon/%.40s%s", e->d_name, sub[k]);
      snprintf(path, sizeof path, "%s/name", dir);
      if (read_line(root, path, name, sizeof name) < 0) continue;
      if (is_cpu_chip(name)) {
        int before = s->n;
        add_inputs(s, root, dir);
        if (s->n > before && !s->label[0])
          snprintf(s->label, sizeof s->label, "%s", name);
      }
      break;
    }
  }
  closedir(d);
}

static void scan_zones(thermal_state *s, const char *root) {
  DIR *d = mlprof__opendir_at(root, "/sys/class/thermal");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "thermal_zone", 12) != 0) continue;
    char path[128], type[64];
    snprintf(path, sizeof path, "/sys/class/thermal/%.60s/type", e->d_name);
    if (read_line(root, path, type, sizeof type) < 0 || !is_cpu_zone(type))
      continue;
    snprintf(path, sizeof path, "/sys/class/thermal/%.60s/temp", e->d_name);
    add(s, path);
    if (!s->label[0]) snprintf(s->label, sizeof s->label, "%s", type);
  }
  closedir(d);
}

/* The hottest readable sensor in degrees C; -1 with errno of the last
 * failure when none can be read. */
static int hottest(const thermal_state *s, const char *root, double *c) {
  int got = 0, err = ENOENT;
  long long best = 0;
  for (int i = 0; i < s->n; i++) {
    long long v;
    if (read_milli(root, s->path[i], &v) < 0) {
      err = errno;
      continue;
    }
    if (!got || v > best) best = v;
    got = 1;
  }
  if (!got) {
    errno = err;
    return -1;
  }
  *c = (double)best / 1000.0;
  return 0;
}

static int thermal_open(void **state, const char *root, char *why, size_t len) {
  thermal_state *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(why, len, "out of memory");
    return -1;
  }
  scan_hwmon(s, root);
  if (s->n == 0) scan_zones(s, root);
  double c;
  if (s->n == 0) {
    snprintf(why, len,
             "no CPU temperature sensor in /sys/class/hwmon or "
             "/sys/class/thermal");
  } else if (hottest(s, root, &c) < 0) {
    snprintf(why, len, "CPU temperature sensor not readable: %s",
             strerror(errno));
  } else {
    *state = s;
    return 0;
  }
  free(s);
  return -1;
}

static int thermal_sample(void *state, const mlprof__sample_ctx *ctx,
                          mlprof__row *out, int max, char *why, size_t len) {
  thermal_state *s = state;
  if (max < 1) return 0;
  mlprof__row *r = out;
  memset(r, 0, sizeof *r);
  r->subject = MLPROF__SUBJECT_SYSTEM;
  r->label = s->label;
  r->n = 1;
  r->m[0].name = "cpu_temp_c";
  double c;
  if (hottest(s, ctx->root, &c) == 0) {
    r->m[0].value = c;
  } else {
    snprintf(s->why, sizeof s->why, "cannot read %s: %s", s->path[0],
             strerror(errno));
    r->m[0].absent = s->why;
  }
  return 1;
}

static void thermal_close(void *state) { free(state); }

const mlprof__source mlprof__source_thermal = {
    .name = "thermal",
    .open = thermal_open,
    .sample = thermal_sample,
    .close = thermal_close,
};
