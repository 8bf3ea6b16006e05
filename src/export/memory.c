/* The report's memory section (docs/memory.md), as text and as JSON: the
 * peak of each process and what held memory then, the sites by bytes at
 * the peak and by bytes allocated, the leaks, the zones. */
#include <inttypes.h>
#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "table.h"

#define TOP_SITES 10
#define NAME_COLS 40

void mlprof__fmt_bytes(char *b, size_t len, double v) {
  static const char *const units[] = {"B", "kB", "MB", "GB", "TB"};
  size_t u = 0;
  double a = v < 0 ? -v : v;
  while (a >= 999.5 && u + 1 < sizeof units / sizeof units[0]) {
    a /= 1000;
    v /= 1000;
    u++;
  }
  if (u == 0)
    snprintf(b, len, "%.0f B", v);
  else
    snprintf(b, len, "%.*f %s", a < 9.995 ? 2 : a < 99.95 ? 1 : 0, v, units[u]);
}

static void cell_bytes(mlprof__table *t, double v) {
  char b[32];
  mlprof__fmt_bytes(b, sizeof b, v);
  mlprof__table_cell(t, "%s", b);
}

static uint64_t proc_pid(const mlprof__report *r, size_t proc) {
  return proc < r->nprocs ? r->procs[proc].pid : 0;
}

/* A site as a person reads it: its zone, then its stack. */
static void cell_site(mlprof__table *t, const mlprof__memory *m,
                      const mlprof__mem_site *s) {
  const mlprof__mem_zone *z = &m->zones[s->zone];
  mlprof__table_begin(t);
  if (z->name_len)
    mlprof__out_name(&t->text, z->name, z->name_len, NAME_COLS);
  else
    mlprof__out_lit(&t->text, "(no zone)");
  mlprof__table_end(t);
}

/* Where in the code: the program's Python line(s), else the native frame. */
static void out_where(mlprof__out *o, const mlprof__mem_site *s, size_t max) {
  const char *w = s->python && s->python[0] ? s->python : s->native;
  if (w && w[0])
    mlprof__out_name(o, w, strlen(w), max);
  else
    mlprof__out_lit(o, "-");
  if (s->python && s->python[0] && s->native && s->native[0]) {
    mlprof__out_lit(o, " [");
    mlprof__out_name(o, s->native, strlen(s->native), 40);
    mlprof__out_lit(o, "]");
  }
}

static int by_alloc(const void *x, const void *y) {
  const mlprof__mem_site *a = *(const mlprof__mem_site *const *)x,
                         *b = *(const mlprof__mem_site *const *)y;
  return a->alloc_bytes != b->alloc_bytes
             ? (a->alloc_bytes > b->alloc_bytes ? -1 : 1)
             : 0;
}

static int sites_table(const mlprof__report *r, const mlprof__memory *m,
                       const mlprof__mem_site *const *sites, size_t n,
                       mlprof__out *o) {
  static const char *const heads[] = {
      "pid", "zone", "at peak", "allocated", "count", "live at end", "where"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "rlrrrrl")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    const mlprof__mem_site *s = sites[i];
    mlprof__table_cell(&t, "%" PRIu64, proc_pid(r, s->proc));
    cell_site(&t, m, s);
    cell_bytes(&t, (double)s->at_peak);
    cell_bytes(&t, (double)s->alloc_bytes);
    mlprof__table_cell(&t, "%" PRIu64, s->alloc_count);
    cell_bytes(&t, (double)s->live_end);
    mlprof__table_begin(&t);
    out_where(&t.text, s, 100);
    mlprof__table_end(&t);
  }
  return mlprof__table_print(&t, o);
}

/* The units mlprof.torch's profile_model(memory=True) gives a layer's
 * forward zone: the bytes autograd saved for backward in it (its
 * SAVED_UNIT). */
#define SAVED_UNIT "saved_bytes"
#define TOP_LAYERS 20

typedef struct {
  const mlprof__zone_stats *z;
  uint64_t saved; /* per forward */
} layer_row;

static int by_saved(const void *x, const void *y) {
  const layer_row *a = x, *b = y;
  return a->saved != b->saved ? (a->saved > b->saved ? -1 : 1) : 0;
}

/* Activation memory per layer: the zones with SAVED_UNIT units, their bytes
 * saved for backward per call beside what their calls allocated (when
 * allocations were recorded). Nothing when no zone has such units. */
static int activation_table(const mlprof__report *r, mlprof__out *o, int head) {
  size_t u = 0;
  while (u < r->nunits &&
         !(r->units[u].name_len == sizeof SAVED_UNIT - 1 &&
           !memcmp(r->units[u].name, SAVED_UNIT, sizeof SAVED_UNIT - 1)))
    u++;
  if (u == r->nunits) return 0;
  layer_row *rows = malloc(r->nzones * sizeof *rows + 1);
  if (!rows) return MLPROF_ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < r->nzones; i++) {
    const mlprof__zone_stats *z = &r->zones[i];
    uint64_t saved = 0;
    for (size_t k = 0; k < z->nunits; k++)
      if (z->units[k].unit == u) saved = z->units[k].n;
    if (z->count &&
        (saved || (z->name_len > 8 &&
                   !memcmp(z->name + z->name_len - 8, ":forward", 8))))
      rows[n++] = (layer_row){z, saved / z->count};
  }
  mlprof__sort(rows, n, sizeof *rows, by_saved);
  static const char *const heads[] = {"zone",      "calls",      "saved/call",
                                      "allocated", "high-water", "at peak"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lrrrrr")) {
    free(rows);
    return MLPROF_ENOMEM;
  }
  if (head) mlprof__out_lit(o, "\nMemory (allocations not recorded)\n");
  mlprof__out_lit(o,
                  "\n  Activation memory per layer (saved for backward by "
                  "each forward; allocated: over the run)\n");
  const mlprof__memory *m = &r->mem;
  for (size_t i = 0; i < n && i < TOP_LAYERS; i++) {
    const mlprof__zone_stats *z = rows[i].z;
    const mlprof__mem_zone *mz = NULL;
    for (size_t k = 0; k < m->nzones && !mz; k++)
      if (m->zones[k].name_len == z->name_len &&
          !memcmp(m->zones[k].name, z->name, z->name_len))
        mz = &m->zones[k];
    mlprof__table_name(&t, z->name, z->name_len, NAME_COLS);
    mlprof__table_cell(&t, "%" PRIu64, z->count);
    cell_bytes(&t, (double)rows[i].saved);
    if (!m->nprocs) {
      for (int k = 0; k < 3; k++) mlprof__table_cell(&t, "-");
    } else {
      cell_bytes(&t, mz ? (double)mz->alloc_bytes : 0);
      cell_bytes(&t, mz ? (double)mz->peak : 0);
      cell_bytes(&t, mz ? (double)mz->at_peak : 0);
    }
  }
  free(rows);
  return mlprof__table_print(&t, o);
}

/* " cuda:N" after the pid of a CUDA device's memory (memory.h). */
static void space_label(const mlprof__mem_proc *p, mlprof__out *o) {
  if (p->device >= 0) mlprof__out_printf(o, " cuda:%d", p->device);
}

/* What the leak detector cannot see in process p (mlprof__mem_proc's
 * leak_floor), one line. */
static void leak_floor_line(const mlprof__mem_proc *p, mlprof__out *o) {
  char mode[48], rate[32], need[32];
  if (p->exact)
    snprintf(mode, sizeof mode, "--memory=all");
  else if (p->mean > 0)
    snprintf(mode, sizeof mode, "--memory=sampled:%.0f", p->mean);
  else
    return; /* sampled, mean unknown: nothing to say */
  mlprof__out_printf(o, "  pid %" PRIu64, p->pid);
  space_label(p, o);
  mlprof__out_lit(o, ": ");
  if (isnan(p->leak_floor)) {
    mlprof__out_printf(o,
                       "%zu step marks: leaks by site need %d at least "
                       "(mlprof_step)\n",
                       p->nsteps, MLPROF__MEM_LEAK_MIN_STEPS);
    return;
  }
  mlprof__fmt_bytes(rate, sizeof rate, p->leak_floor);
  mlprof__fmt_bytes(need, sizeof need, MLPROF__MEM_LEAK_MIN_BYTES);
  /* Sampled, the floor is the growth or the samples, the larger. */
  int samples = p->leak_floor * (double)(p->nsteps - 1) >
                MLPROF__MEM_LEAK_MIN_BYTES * 1.001;
  mlprof__out_printf(o,
                     "leaks under ~%s a step over %zu steps may go unseen "
                     "at %s (%s%s%s)\n",
                     rate, p->nsteps, mode,
                     samples ? "too few of their bytes would be sampled"
                             : "a leak must grow by ",
                     samples ? "" : need, samples ? "" : " in all");
}

int mlprof__export_memory_text(const mlprof__report *r, mlprof__out *o) {
  const mlprof__memory *m = &r->mem;
  if (!m->nprocs) return activation_table(r, o, 1);
  int exact = 1;
  for (size_t i = 0; i < m->nprocs; i++) exact &= m->procs[i].exact;
  mlprof__out_printf(o, "\nMemory (%s)\n",
                     exact ? "every allocation recorded"
                           : "allocations sampled by bytes: estimates");
  for (size_t i = 0; i < m->nprocs; i++) {
    const mlprof__mem_proc *p = &m->procs[i];
    char peak[32], alloc[32], live[32], at[32];
    mlprof__fmt_bytes(peak, sizeof peak, (double)p->peak);
    mlprof__fmt_bytes(alloc, sizeof alloc, (double)p->alloc_bytes);
    mlprof__fmt_bytes(live, sizeof live, (double)p->live_end);
    mlprof__fmt_duration(at, sizeof at, (double)p->peak_t);
    mlprof__out_printf(o, "  pid %" PRIu64, p->pid);
    space_label(p, o);
    mlprof__out_printf(
        o,
        ": peak %s live at %s; %s allocated "
        "(%" PRIu64 " recorded); %s live at the end%s\n",
        peak, at, alloc, p->allocs, live,
        p->device >= 0 ? " (CUDA, torch's allocator history)" : "");
  }
  for (size_t i = 0; i < m->nprocs; i++) leak_floor_line(&m->procs[i], o);
  size_t n = 0;
  const mlprof__mem_site **top = malloc(m->nsites * sizeof *top + 1);
  if (!top) return MLPROF_ENOMEM;
  /* Sites are sorted leaks first, then by bytes at the peak. */
  for (size_t i = 0; i < m->nsites && n < TOP_SITES; i++)
    if (m->sites[i].at_peak) top[n++] = &m->sites[i];
  int rc = 0;
  if (n) {
    mlprof__out_lit(o, "\n  What held memory at the peak (top sites)\n");
    rc = sites_table(r, m, top, n, o);
  }
  for (size_t i = 0; i < m->nsites; i++) top[i] = &m->sites[i];
  mlprof__sort(top, m->nsites, sizeof *top, by_alloc);
  n = m->nsites < TOP_SITES ? m->nsites : TOP_SITES;
  if (!rc && n) {
    mlprof__out_lit(o, "\n  Most bytes allocated (top sites)\n");
    rc = sites_table(r, m, top, n, o);
  }
  free(top);
  if (rc) return rc;
  if (m->nleaks) {
    mlprof__out_lit(o,
                    "\n  Leaks (live bytes of a site growing step after "
                    "step)\n");
    for (size_t i = 0; i < m->nsites; i++) {
      const mlprof__mem_site *s = &m->sites[i];
      if (!s->leak) continue;
      const mlprof__mem_zone *z = &m->zones[s->zone];
      char rate[32], live[32];
      mlprof__fmt_bytes(rate, sizeof rate, s->slope);
      mlprof__fmt_bytes(live, sizeof live, (double)s->live_end);
      mlprof__out_printf(o, "    pid %" PRIu64 " ", proc_pid(r, s->proc));
      if (z->name_len)
        mlprof__out_name(o, z->name, z->name_len, NAME_COLS);
      else
        mlprof__out_lit(o, "(no zone)");
      mlprof__out_printf(o,
                         ": +%s per step (Theil-Sen, Mann-Kendall z %.1f), "
                         "%s still live at the end\n      at ",
                         rate, s->mk_z, live);
      out_where(o, s, 200);
      mlprof__out_lit(o, "\n");
    }
  }
  static const char *const heads[] = {"zone", "allocated",  "count",  "freed",
                                      "net",  "high-water", "at peak"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lrrrrrr")) return MLPROF_ENOMEM;
  mlprof__out_lit(o,
                  "\n  Zones (where memory was allocated: the innermost "
                  "open zone)\n");
  for (size_t i = 0; i < m->nzones; i++) {
    const mlprof__mem_zone *z = &m->zones[i];
    if (!z->alloc_count) continue;
    if (z->name_len)
      mlprof__table_name(&t, z->name, z->name_len, NAME_COLS);
    else
      mlprof__table_cell(&t, "(no zone)");
    cell_bytes(&t, (double)z->alloc_bytes);
    mlprof__table_cell(&t, "%" PRIu64, z->alloc_count);
    cell_bytes(&t, (double)z->freed_bytes);
    cell_bytes(&t, (double)z->alloc_bytes - (double)z->freed_bytes);
    cell_bytes(&t, (double)z->peak);
    cell_bytes(&t, (double)z->at_peak);
  }
  rc = mlprof__table_print(&t, o);
  return rc ? rc : activation_table(r, o, 0);
}

static void json_site(const mlprof__report *r, const mlprof__memory *m,
                      const mlprof__mem_site *s, mlprof__out *o) {
  const mlprof__mem_zone *z = &m->zones[s->zone];
  mlprof__out_printf(o, "{\"pid\":%" PRIu64 ",\"zone\":", proc_pid(r, s->proc));
  mlprof__out_json_str(o, z->name, z->name_len);
  mlprof__out_printf(o,
                     ",\"stack\":%" PRIu64 ",\"allocated_bytes\":%" PRIu64
                     ",\"count\":%" PRIu64 ",\"at_peak_bytes\":%" PRIu64
                     ",\"live_end_bytes\":%" PRIu64 ",\"leak\":%s",
                     s->stack, s->alloc_bytes, s->alloc_count, s->at_peak,
                     s->live_end, s->leak ? "true" : "false");
  mlprof__out_lit(o, ",\"python\":");
  mlprof__out_json_str(o, s->python ? s->python : "",
                       s->python ? strlen(s->python) : 0);
  mlprof__out_lit(o, ",\"native\":");
  mlprof__out_json_str(o, s->native ? s->native : "",
                       s->native ? strlen(s->native) : 0);
  mlprof__out_lit(o, ",\"bytes_per_step\":");
  mlprof__out_f64(o, s->slope);
  mlprof__out_lit(o, ",\"mk_z\":");
  mlprof__out_f64(o, s->mk_z);
  mlprof__out_lit(o, ",\"allocated_se_bytes\":");
  mlprof__out_f64(o, sqrt(s->alloc_var));
  mlprof__out_lit(o, ",\"at_peak_se_bytes\":");
  mlprof__out_f64(o, sqrt(s->at_peak_var));
  mlprof__out_lit(o, "}");
}

void mlprof__export_memory_json(const mlprof__report *r, int page,
                                mlprof__out *o) {
  const mlprof__memory *m = &r->mem;
  mlprof__out_lit(o, ",\n\"memory\":{\"processes\":[");
  for (size_t i = 0; i < m->nprocs; i++) {
    const mlprof__mem_proc *p = &m->procs[i];
    char dev[32] = "";
    if (p->device >= 0)
      snprintf(dev, sizeof dev, ",\"cuda_device\":%d", p->device);
    mlprof__out_printf(
        o,
        "%s\n{\"pid\":%" PRIu64 "%s,\"exact\":%s,\"allocs\":%" PRIu64
        ",\"frees\":%" PRIu64 ",\"allocated_bytes\":%" PRIu64
        ",\"freed_bytes\":%" PRIu64 ",\"live_end_bytes\":%" PRIu64
        ",\"peak_bytes\":%" PRIu64 ",\"peak_ns\":%" PRIu64,
        i ? "," : "", p->pid, dev, p->exact ? "true" : "false", p->allocs,
        p->frees, p->alloc_bytes, p->freed_bytes, p->live_end, p->peak,
        p->peak_t);
    if (!page) {
      mlprof__out_lit(o, ",\"step_peak_bytes\":[");
      for (size_t k = 0; k < p->nsteps; k++)
        mlprof__out_printf(o, "%s%" PRIu64, k ? "," : "", p->step_peak[k]);
      mlprof__out_lit(o, "]");
    }
    mlprof__out_lit(o, ",\"peak_se_bytes\":");
    mlprof__out_f64(o, sqrt(p->peak_var));
    mlprof__out_lit(o, ",\"sampling_mean_bytes\":");
    mlprof__out_f64(o, p->mean);
    mlprof__out_lit(o, ",\"leak_floor_bytes_per_step\":");
    mlprof__out_f64(o, p->leak_floor);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "],\n\"zones\":[");
  size_t n = 0;
  for (size_t i = 0; i < m->nzones; i++) {
    const mlprof__mem_zone *z = &m->zones[i];
    if (!z->alloc_count) continue;
    mlprof__out_str(o, n++ ? ",\n{\"zone\":" : "\n{\"zone\":");
    mlprof__out_json_str(o, z->name, z->name_len);
    mlprof__out_printf(o,
                       ",\"allocated_bytes\":%" PRIu64 ",\"count\":%" PRIu64
                       ",\"freed_bytes\":%" PRIu64 ",\"freed_count\":%" PRIu64
                       ",\"peak_bytes\":%" PRIu64 ",\"at_peak_bytes\":%" PRIu64
                       ",\"peak_se_bytes\":",
                       z->alloc_bytes, z->alloc_count, z->freed_bytes,
                       z->freed_count, z->peak, z->at_peak);
    mlprof__out_f64(o, sqrt(z->peak_var));
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
  if (!page) {
    mlprof__out_lit(o, ",\n\"sites\":[");
    for (size_t i = 0; i < m->nsites; i++) {
      mlprof__out_str(o, i ? ",\n" : "\n");
      json_site(r, m, &m->sites[i], o);
    }
    mlprof__out_lit(o, "]");
  }
  mlprof__out_lit(o, "}");
}
