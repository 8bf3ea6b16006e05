/* mlprof top's frame: one update of the live view as plain text lines
 * (cli/top.c puts them on the terminal). */
#include <mlprof.h>
#include <stdio.h>
#include <string.h>

#include "export.h"
#include "table.h"

/* A measure of s with a value in the window, or NULL. */
static const mlprof__measure_stats *measure(const mlprof__subject_stats *s,
                                            const char *name) {
  const mlprof__measure_stats *m = mlprof__subject_measure(s, name);
  return m && m->count ? m : NULL;
}

/* The processes: pid, name, alive, spans and threads in the window, and
 * their last CPU, RSS and GPU memory. */
static void show_processes(const mlprof__analysis *a, mlprof__out *o) {
  static const char *const heads[] = {"process", "pid",  "state", "threads",
                                      "spans",   "cpu%", "rss",   "gpu mem"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lrlrrrrr")) return;
  const mlprof__report *r = &a->r;
  for (size_t i = 0; i < r->nprocs; i++) {
    const mlprof__proc_stats *p = &r->procs[i];
    if (p->exec_into >= 0) continue; /* shown as the program it became */
    mlprof__table_name(&t, p->name, strlen(p->name), 24);
    mlprof__table_cell(&t, "%llu", (unsigned long long)p->pid);
    mlprof__table_cell(&t, "%s",
                       p->alive == 1   ? "running"
                       : p->alive == 0 ? "ended"
                                       : "?");
    mlprof__table_cell(&t, "%zu", p->threads);
    mlprof__table_cell(&t, "%llu", (unsigned long long)p->spans);
    const mlprof__measure_stats *cpu = NULL, *rss = NULL, *gpu = NULL;
    for (size_t k = 0; k < a->res.nsubjects; k++) {
      const mlprof__subject_stats *s = &a->res.subjects[k];
      if (s->subject != MLPROF__SUBJECT_PROCESS || s->process != (int)i)
        continue;
      cpu = measure(s, "cpu_pct");
      rss = measure(s, "rss_bytes");
      gpu = measure(s, "gpu_mem_bytes");
    }
    if (cpu)
      mlprof__table_cell(&t, "%.0f", cpu->last);
    else
      mlprof__table_cell(&t, "-");
    if (rss)
      mlprof__table_cell(&t, "%.1f MB", rss->last / 1e6);
    else
      mlprof__table_cell(&t, "-");
    if (gpu)
      mlprof__table_cell(&t, "%.1f MB", gpu->last / 1e6);
    else
      mlprof__table_cell(&t, "-");
  }
  mlprof__table_print(&t, o);
}

/* The busiest threads of the window, by the time in their zones. */
static void show_threads(const mlprof__report *r, size_t max, mlprof__out *o) {
  static const char *const heads[] = {"thread", "process", "tid", "spans",
                                      "busy"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "llrrr")) return;
  size_t shown = 0;
  char d[32];
  for (size_t i = 0; i < r->nthreads && shown < max; i++) {
    const mlprof__thread_stats *th = &r->threads[i];
    if (!th->spans) continue;
    shown++;
    mlprof__table_name(&t, th->name_len ? th->name : "-",
                       th->name_len ? th->name_len : 1, 20);
    const char *pn = r->procs[th->proc].name;
    mlprof__table_name(&t, pn, strlen(pn), 20);
    mlprof__table_cell(&t, "%llu", (unsigned long long)th->tid);
    mlprof__table_cell(&t, "%llu", (unsigned long long)th->spans);
    mlprof__fmt_duration(d, sizeof d, (double)th->busy_ns);
    mlprof__table_cell(&t, "%s", d);
  }
  mlprof__table_print(&t, o);
}

static void show_zones(const mlprof__report *r, mlprof__out *o) {
  static const char *const heads[] = {"zone", "count", "total",
                                      "self", "mean",  "p99"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lrrrrr")) return;
  char d[32];
  for (size_t i = 0; i < r->norder; i++) {
    const mlprof__zone_stats *z = &r->zones[r->order[i]];
    mlprof__table_name(&t, z->name, z->name_len, 40);
    mlprof__table_cell(&t, "%llu", (unsigned long long)z->count);
    uint64_t v[] = {z->total_ns, z->self_ns, mlprof__round_ns(z->mean_ns),
                    z->p99_ns};
    for (size_t k = 0; k < 4; k++) {
      mlprof__fmt_duration(d, sizeof d, (double)v[k]);
      mlprof__table_cell(&t, "%s", d);
    }
  }
  mlprof__table_print(&t, o);
}

/* The steps of the window: rate, time and where it goes. */
static void show_steps(const mlprof__steps *s, uint64_t window_ns,
                       mlprof__out *o) {
  if (!s->count) {
    mlprof__out_lit(o, "steps: none in this interval\n");
    return;
  }
  char mean[32], p90[32];
  mlprof__fmt_duration(mean, sizeof mean, s->mean_ns);
  mlprof__fmt_duration(p90, sizeof p90, (double)s->p90_ns);
  mlprof__out_printf(o, "steps: %.1f/s, step time mean %s, p90 %s:",
                     (double)s->count * 1e9 / (double)window_ns, mean, p90);
  for (int k = 0; k < MLPROF__NPARTS; k++)
    mlprof__out_printf(o, " %s %.0f%%", mlprof__part_name(k),
                       s->share[k] * 100);
  mlprof__out_lit(o, "\n");
}

static void show_gpus(const mlprof__resources *res, mlprof__out *o) {
  if (!res->sampled) return;
  if (!res->ngpus) {
    mlprof__out_printf(o, "GPU: none (%s)\n",
                       res->gpu_absent ? res->gpu_absent : "no GPU found");
    return;
  }
  mlprof__out_lit(o, "GPU:");
  for (size_t k = 0; k < res->nsubjects; k++) {
    const mlprof__subject_stats *s = &res->subjects[k];
    if (s->subject != MLPROF__SUBJECT_GPU) continue;
    const mlprof__measure_stats *u = measure(s, "gpu_util_pct");
    mlprof__out_printf(o, " %llu:", (unsigned long long)s->id);
    if (u)
      mlprof__out_printf(o, " %.0f%%", u->last);
    else
      mlprof__out_lit(o, " -");
  }
  mlprof__out_lit(o, "\n");
}

/* The warnings of r that fr shows. */
static void show_warnings(const mlprof__top_frame *fr, const mlprof__report *r,
                          mlprof__out *o) {
  for (size_t i = 0; i < r->nwarnings; i++) {
    const char *w = r->warnings[i];
    size_t n = strlen(w);
    if (fr->show_warning && !fr->show_warning(fr->ctx, w, n)) continue;
    mlprof__out_lit(o, "warning: ");
    mlprof__out_text_str(o, w, n);
    mlprof__out_lit(o, "\n");
  }
}

int mlprof__export_top_text(const mlprof__analysis *a,
                            const mlprof__top_frame *fr, mlprof__out *o) {
  const mlprof__report *r = &a->r;
  mlprof__out_printf(o,
                     "  job time %.1f s, last %.3g s  [q quit; sort: t s m p "
                     "c; now %s]\n",
                     (double)fr->job_ns / 1e9, (double)fr->window_ns / 1e9,
                     mlprof__sort_key_name(fr->sort));
  uint64_t spans = 0;
  for (size_t i = 0; i < r->nzones; i++) spans += r->zones[i].count;
  mlprof__out_printf(o, "%zu processes, %zu threads, %llu spans\n", r->nprocs,
                     r->nthreads, (unsigned long long)spans);
  show_steps(&a->f.steps, fr->window_ns, o);
  show_gpus(&a->res, o);
  mlprof__out_lit(o, "\n");
  show_processes(a, o);
  mlprof__out_lit(o, "\n");
  show_threads(r, 5, o);
  mlprof__out_printf(o, "\nzones of the last interval by %s\n",
                     mlprof__sort_key_name(fr->sort));
  show_zones(r, o);
  show_warnings(fr, r, o);
  for (size_t i = 0; i < a->f.nfindings && i < 3; i++) {
    const mlprof__finding *fi = &a->f.findings[i];
    mlprof__out_lit(o, "finding: ");
    if (fi->zone) {
      mlprof__out_text_str(o, fi->zone, fi->zone_len);
      mlprof__out_lit(o, ": ");
    }
    mlprof__out_text_str(o, fi->summary, strlen(fi->summary));
    mlprof__out_lit(o, "\n");
  }
  return o->err;
}
