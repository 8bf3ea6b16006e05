/* The report as aligned tables for a person at a terminal. */
#include <inttypes.h>
#include <math.h>
#include <mlprof.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/wire.h"
#include "export.h"
#include "table.h"

/* Widest a name column gets; longer names are cut with an ellipsis. */
#define NAME_WIDTH 48

static void cell_dur(mlprof__table *t, uint64_t ns) {
  char b[32];
  mlprof__fmt_duration(b, sizeof b, (double)ns);
  mlprof__table_cell(t, "%s", b);
}

static void cell_dur_f(mlprof__table *t, double ns) {
  char b[32];
  mlprof__fmt_duration(b, sizeof b, ns);
  mlprof__table_cell(t, "%s", b);
}

/* A rate or a measured value, short: 950, 12.3k, 4.56M. */
static void cell_num(mlprof__table *t, double v) {
  if (!isfinite(v)) {
    mlprof__table_cell(t, "-");
    return;
  }
  double a = fabs(v);
  if (a >= 1e12)
    mlprof__table_cell(t, "%.3gT", v / 1e12);
  else if (a >= 1e9)
    mlprof__table_cell(t, "%.3gG", v / 1e9);
  else if (a >= 1e6)
    mlprof__table_cell(t, "%.3gM", v / 1e6);
  else if (a >= 1e4)
    mlprof__table_cell(t, "%.3gk", v / 1e3);
  else
    mlprof__table_cell(t, "%.4g", v);
}

/* Why no zone was recorded, from what mlprof run's Python start-up module
 * noted in the processes' metadata (python/mlprof/auto.py). */
static void no_zones_reason(const mlprof__report *r, mlprof__out *o) {
  size_t loaded = 0, torch_on = 0, torch_off = 0, torch_failed = 0;
  for (size_t i = 0; i < r->nprocs; i++) {
    const char *py = mlprof__proc_meta(&r->procs[i], "mlprof.python");
    const char *pt = mlprof__proc_meta(&r->procs[i], "mlprof.torch");
    loaded += py && strcmp(py, "loaded") == 0;
    torch_on += pt && strncmp(pt, "instrumented", 12) == 0;
    torch_off += pt && strncmp(pt, "off", 3) == 0;
    torch_failed += pt && strncmp(pt, "not instrumented", 16) == 0;
  }
  if (!loaded) {
    mlprof__out_lit(o, "no code in these processes marks any");
    return;
  }
  mlprof__out_printf(o,
                     "mlprof's Python instrumentation was loaded in %zu "
                     "process%s, and ",
                     loaded, loaded == 1 ? "" : "es");
  if (torch_on)
    mlprof__out_lit(o,
                    "PyTorch was instrumented, but no DataLoader batch, "
                    "module call, backward or optimizer step ran");
  else if (torch_failed)
    mlprof__out_lit(o,
                    "PyTorch was imported but could not be instrumented "
                    "(mlprof.torch in the session metadata says why)");
  else if (torch_off)
    mlprof__out_lit(o, "PyTorch's steps were switched off (--no-torch)");
  else
    mlprof__out_lit(o,
                    "the program did not import torch (PyTorch's steps are "
                    "recorded with no code change in programs that do)");
}

static int zones_section(const mlprof__report *r, mlprof__out *o) {
  if (!r->nzones) {
    /* What a first run of an unmodified program shows: say what to do. */
    mlprof__out_lit(o, "\nNo zones recorded: ");
    no_zones_reason(r, o);
    mlprof__out_lit(
        o,
        ". To time "
        "parts of a program:\n"
        "  Python   with prof.zone(\"forward\"): ...   (prof = "
        "mlprof.Profiler(); docs/python.md)\n"
        "  PyTorch  mlprof.torch.profile_model(model, prof): a zone per "
        "layer, forward and backward\n"
        "  C, C++   MLPROF_ZONE(\"decode\"); in any scope, from <mlprof.h> "
        "(docs/guide.md)\n");
    return 0;
  }
  mlprof__out_printf(o, "\nZones by %s", mlprof__sort_key_name(r->sort));
  if (r->norder < r->nzones)
    mlprof__out_printf(o, " (top %zu of %zu; --top 0 shows all)", r->norder,
                       r->nzones);
  mlprof__out_lit(o, "\n");
  static const char *const heads[] = {
      "zone", "category", "count", "total", "self", "mean", "std",
      "min",  "p50",      "p90",   "p95",   "p99",  "max",  "wall%"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "llrrrrrrrrrrrr")) return MLPROF_ENOMEM;
  int any_units = 0;
  for (size_t i = 0; i < r->norder; i++) {
    const mlprof__zone_stats *z = &r->zones[r->order[i]];
    any_units |= z->nunits > 0;
    mlprof__table_name(&t, z->name, z->name_len, NAME_WIDTH);
    mlprof__table_cell(&t, "%s",
                       z->category ? mlprof_category_name(z->category) : "");
    mlprof__table_cell(&t, "%" PRIu64, z->count);
    cell_dur(&t, z->total_ns);
    cell_dur(&t, z->self_ns);
    cell_dur(&t, mlprof__round_ns(z->mean_ns));
    cell_dur(&t, mlprof__round_ns(z->std_ns));
    cell_dur(&t, z->min_ns);
    cell_dur(&t, z->p50_ns);
    cell_dur(&t, z->p90_ns);
    cell_dur(&t, z->p95_ns);
    cell_dur(&t, z->p99_ns);
    cell_dur(&t, z->max_ns);
    mlprof__table_cell(&t, "%.1f", z->share * 100);
  }
  int rc = mlprof__table_print(&t, o);
  if (rc || !any_units) return rc;

  mlprof__out_lit(o, "\nThroughput by zone (per second of the zone's time)\n");
  static const char *const uheads[] = {"zone", "unit", "units", "per s"};
  if (mlprof__table_open(&t, uheads, "llrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->norder; i++) {
    const mlprof__zone_stats *z = &r->zones[r->order[i]];
    for (size_t k = 0; k < z->nunits; k++) {
      const mlprof__unit_stats *u = &r->units[z->units[k].unit];
      mlprof__table_name(&t, z->name, z->name_len, NAME_WIDTH);
      mlprof__table_name(&t, u->name, u->name_len, NAME_WIDTH);
      mlprof__table_cell(&t, "%" PRIu64, z->units[k].n);
      cell_num(&t, z->units[k].per_s);
    }
  }
  return mlprof__table_print(&t, o);
}

static int procs_section(const mlprof__report *r, mlprof__out *o) {
  mlprof__out_lit(o, "\nProcesses\n");
  static const char *const heads[] = {"pid",  "ppid",   "rank",    "host",
                                      "wall", "spans",  "threads", "dropped",
                                      "end",  "command"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "rrrlrrrrll")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nprocs; i++) {
    const mlprof__proc_stats *p = &r->procs[i];
    if (p->exec_into >= 0) continue; /* the program it became stands for it */
    mlprof__table_cell(&t, "%" PRIu64, p->pid);
    mlprof__table_cell(&t, "%" PRIu64, p->ppid);
    if (p->rank >= 0)
      mlprof__table_cell(&t, "%" PRId64, p->rank);
    else
      mlprof__table_cell(&t, "-");
    mlprof__table_name(&t, p->hostname, strlen(p->hostname), 24);
    cell_dur(&t, p->wall_ns);
    mlprof__table_cell(&t, "%" PRIu64, p->spans);
    mlprof__table_cell(&t, "%zu", p->threads);
    mlprof__table_cell(&t, "%" PRIu64, p->dropped);
    const char *end = mlprof__proc_end(p);
    int status = p->read.end_status;
    const char *sig = sigabbrev_np(status);
    if (p->read_error[0])
      mlprof__table_cell(&t, "read error");
    else if (strcmp(end, "exit") == 0)
      mlprof__table_cell(&t, "exit %d", status);
    else if (strcmp(end, "signal") == 0 && sig)
      mlprof__table_cell(&t, "SIG%s", sig);
    else if (strcmp(end, "signal") == 0)
      mlprof__table_cell(&t, "signal %d", status);
    else
      mlprof__table_cell(&t, "%s", end);
    mlprof__table_name(&t, p->cmdline, strlen(p->cmdline), 60);
  }
  return mlprof__table_print(&t, o);
}

/* A track that holds no span (torch's CUDA allocator history, recorded by
 * mlprof_track_allocs, holds allocations only): no row of the thread table,
 * whose figures are spans'. */
static int spanless_track(const mlprof__thread_stats *th) {
  return th->tid >= MLPROF__TRACK_TID_BASE && !th->spans && !th->dropped;
}

static int threads_section(const mlprof__report *r, mlprof__out *o) {
  size_t rows = 0;
  for (size_t i = 0; i < r->nthreads; i++)
    rows += !spanless_track(&r->threads[i]);
  if (!rows) return 0;
  mlprof__out_lit(o, "\nThreads (busy: time in top-level zones)\n");
  static const char *const heads[] = {"pid",  "tid",   "name",   "spans",
                                      "busy", "busy%", "dropped"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "rrlrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nthreads; i++) {
    const mlprof__thread_stats *th = &r->threads[i];
    uint64_t wall = r->procs[th->proc].wall_ns;
    if (spanless_track(th)) continue;
    mlprof__table_cell(&t, "%" PRIu64, th->pid);
    if (th->tid >= MLPROF__TRACK_TID_BASE)
      mlprof__table_cell(&t, "track");
    else
      mlprof__table_cell(&t, "%" PRIu64, th->tid);
    mlprof__table_name(&t, th->name, th->name_len, 32);
    mlprof__table_cell(&t, "%" PRIu64, th->spans);
    cell_dur(&t, th->busy_ns);
    mlprof__table_cell(&t, "%.1f",
                       wall ? 100.0 * (double)th->busy_ns / (double)wall : 0.0);
    mlprof__table_cell(&t, "%" PRIu64, th->dropped);
  }
  return mlprof__table_print(&t, o);
}

static int steps_section(const mlprof__report *r, mlprof__out *o) {
  size_t any = 0;
  for (size_t i = 0; i < r->nthreads; i++) any += r->threads[i].steps > 0;
  if (!any) return 0;
  mlprof__out_lit(o, "\nSteps (interval between consecutive step marks)\n");
  static const char *const heads[] = {"pid",   "tid",  "marks",
                                      "steps", "mean", "p50"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "rrrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nthreads; i++) {
    const mlprof__thread_stats *th = &r->threads[i];
    if (!th->steps) continue;
    mlprof__table_cell(&t, "%" PRIu64, th->pid);
    mlprof__table_cell(&t, "%" PRIu64, th->tid);
    mlprof__table_cell(&t, "%" PRIu64, th->steps);
    /* The intervals the breakdown counts too (10 marks: 9 steps). */
    mlprof__table_cell(&t, "%" PRIu64, (uint64_t)th->marks.steps);
    cell_dur(&t, th->step_mean_ns);
    cell_dur(&t, th->step_p50_ns);
  }
  return mlprof__table_print(&t, o);
}

static int counters_section(const mlprof__report *r, mlprof__out *o) {
  if (!r->ncounters) return 0;
  mlprof__out_lit(o, "\nCounters\n");
  static const char *const heads[] = {"counter", "count", "min",  "p50", "p90",
                                      "p99",     "max",   "mean", "last"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lrrrrrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->ncounters; i++) {
    const mlprof__counter_stats *c = &r->counters[i];
    mlprof__table_name(&t, c->name, c->name_len, NAME_WIDTH);
    mlprof__table_cell(&t, "%" PRIu64, c->count);
    cell_num(&t, c->min);
    cell_num(&t, c->p50);
    cell_num(&t, c->p90);
    cell_num(&t, c->p99);
    cell_num(&t, c->max);
    cell_num(&t, c->mean);
    cell_num(&t, c->last);
  }
  return mlprof__table_print(&t, o);
}

static int units_section(const mlprof__report *r, mlprof__out *o) {
  if (!r->nunits) return 0;
  mlprof__out_lit(o, "\nUnits (throughput over the job's wall time)\n");
  static const char *const heads[] = {"unit", "total", "per s",
                                      "outside zones"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nunits; i++) {
    const mlprof__unit_stats *u = &r->units[i];
    mlprof__table_name(&t, u->name, u->name_len, NAME_WIDTH);
    mlprof__table_cell(&t, "%" PRIu64, u->total);
    cell_num(&t, u->per_s);
    mlprof__table_cell(&t, "%" PRIu64, u->outside);
  }
  return mlprof__table_print(&t, o);
}

static int open_section(const mlprof__report *r, mlprof__out *o) {
  if (!r->nopen) return 0;
  mlprof__out_lit(o, "\nZones still open at the end\n");
  static const char *const heads[] = {"zone",  "pid",   "tid",
                                      "depth", "began", "open for"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lrrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nopen; i++) {
    const mlprof__open_zone *z = &r->open[i];
    mlprof__table_name(&t, z->name, z->name_len, NAME_WIDTH);
    mlprof__table_cell(&t, "%" PRIu64, r->procs[z->proc].pid);
    mlprof__table_cell(&t, "%" PRIu64, r->threads[z->thread].tid);
    mlprof__table_cell(&t, "%" PRIu32, z->depth);
    cell_dur(&t, z->begin_ns);
    cell_dur(&t, z->open_ns);
  }
  return mlprof__table_print(&t, o);
}

static int meta_section(const mlprof__report *r, mlprof__out *o) {
  size_t any = 0;
  for (size_t i = 0; i < r->nprocs; i++) any += r->procs[i].nmeta;
  if (!any) return 0;
  mlprof__out_lit(o, "\nSession metadata\n");
  static const char *const heads[] = {"pid", "key", "value"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "rll")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nprocs; i++) {
    const mlprof__proc_stats *p = &r->procs[i];
    for (size_t k = 0; k < p->nmeta; k++) {
      mlprof__table_cell(&t, "%" PRIu64, p->pid);
      mlprof__table_name(&t, p->meta[k].key, p->meta[k].key_len, 32);
      mlprof__table_name(&t, p->meta[k].value, p->meta[k].value_len, 72);
    }
  }
  return mlprof__table_print(&t, o);
}

/* ---- resources ------------------------------------------------------------
 */

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* A value scaled by 1000s with 3 significant digits: "812 B", "1.25 MB". */
static void fmt_scaled(char *b, size_t len, double v, const char *const *units,
                       size_t nunits, const char *tail) {
  double a = fabs(v);
  size_t u = 0;
  while (u + 1 < nunits && a >= 999.5) {
    a /= 1000;
    v /= 1000;
    u++;
  }
  snprintf(b, len,
           u == 0 && v == floor(v) ? "%.0f %s%s"
           : a < 10                ? "%.2f %s%s"
           : a < 100               ? "%.1f %s%s"
                                   : "%.0f %s%s",
           v, units[u], tail);
}

/* A measured value with the unit its name's suffix gives (docs/sampling.md):
 * bytes in B/kB/MB/GB/TB (powers of 1000), percent, W, degrees C, J, MHz,
 * seconds; a bare number otherwise. */
static void fmt_measure(char *b, size_t len, const char *name, double v) {
  static const char *const bytes[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  static const char *const joules[] = {"J", "kJ", "MJ", "GJ"};
  if (!isfinite(v))
    snprintf(b, len, "-");
  else if (ends_with(name, "_bytes_s") || ends_with(name, "_bytes_per_s"))
    fmt_scaled(b, len, v, bytes, 6, "/s");
  else if (ends_with(name, "_bytes"))
    fmt_scaled(b, len, v, bytes, 6, "");
  else if (ends_with(name, "_pct"))
    snprintf(b, len, "%.1f%%", v);
  else if (ends_with(name, "_w"))
    snprintf(b, len, "%.1f W", v);
  else if (ends_with(name, "_c"))
    snprintf(b, len,
             "%.1f \xc2\xb0"
             "C",
             v);
  else if (ends_with(name, "_j"))
    fmt_scaled(b, len, v, joules, 4, "");
  else if (ends_with(name, "_mhz"))
    snprintf(b, len, "%.0f MHz", v);
  else if (ends_with(name, "_s"))
    snprintf(b, len, "%.2f s", v);
  else if (fabs(v) >= 1e4) {
    static const char *const plain[] = {"", "k", "M", "G", "T"};
    fmt_scaled(b, len, v, plain, 5, "");
  } else if (v != floor(v))
    snprintf(b, len, "%.4g", v);
  else
    snprintf(b, len, "%.0f", v);
}

static void cell_measure(mlprof__table *t, const char *name, double v) {
  char b[64];
  fmt_measure(b, sizeof b, name, v);
  mlprof__table_cell(t, "%s", b);
}

/* One row per measure of s; who names the subject in the first column. */
static void subject_rows(mlprof__table *t, const char *who,
                         const mlprof__subject_stats *s) {
  for (size_t i = 0; i < s->nm; i++) {
    const mlprof__measure_stats *m = &s->m[i];
    mlprof__table_name(t, i ? "" : who, i ? 0 : strlen(who), 40);
    mlprof__table_name(t, m->name, strlen(m->name), 32);
    if (m->count) {
      cell_measure(t, m->name, m->mean);
      cell_measure(t, m->name, m->max);
    } else {
      mlprof__table_cell(t, "-");
      mlprof__table_cell(t, "-");
    }
    mlprof__table_cell(t, "%" PRIu64, m->count);
    mlprof__table_begin(t);
    if (!m->count) {
      mlprof__out_lit(&t->text, "absent: ");
      mlprof__out_text_str(&t->text, m->absent, strlen(m->absent));
    } else if (m->absent_count) {
      mlprof__out_printf(&t->text, "absent in %" PRIu64 " of %" PRIu64,
                         m->absent_count, m->absent_count + m->count);
    }
    mlprof__table_end(t);
  }
}

/* name: the process's name from its profile, NULL for the sampler's label. */
static void subject_who(char *b, size_t len, const mlprof__subject_stats *s,
                        const char *name, int hosts) {
  char host[80] = "";
  if (hosts) snprintf(host, sizeof host, "%s: ", s->hostname);
  switch (s->subject) {
    case MLPROF__SUBJECT_SYSTEM:
      snprintf(b, len, "%ssystem", host);
      break;
    case MLPROF__SUBJECT_GPU:
      snprintf(b, len,
               s->label[0] ? "%sGPU %" PRIu64 " (%s)" : "%sGPU %" PRIu64, host,
               s->id, s->label);
      break;
    case MLPROF__SUBJECT_PROCESS:
      if (!name) name = s->label;
      snprintf(b, len, name[0] ? "%spid %" PRIu64 " (%s)" : "%spid %" PRIu64,
               host, s->id, name);
      break;
    default:
      snprintf(b, len, "%s%s %" PRIu64, host, mlprof__subject_name(s->subject),
               s->id);
  }
}

static int resources_section(const mlprof__report *r,
                             const mlprof__resources *res, mlprof__out *o) {
  if (!res || !res->sampled) return 0;
  int hosts = 0;
  for (size_t i = 1; i < res->nsubjects; i++)
    hosts |= strcmp(res->subjects[i].hostname, res->subjects[0].hostname) != 0;
  mlprof__out_lit(o, "\nResources (sampled: mean and peak of each measure)\n");
  if (res->gpu_absent) {
    mlprof__out_lit(o, "  GPUs: none: ");
    mlprof__out_text_str(o, res->gpu_absent, strlen(res->gpu_absent));
    mlprof__out_lit(o, "\n");
  }
  static const char *const heads[] = {"subject", "measure", "mean",
                                      "peak",    "samples", "note"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "llrrrl")) return MLPROF_ENOMEM;
  char who[256];
  /* The machines first: systems and GPUs. */
  for (size_t i = 0; i < res->nsubjects; i++) {
    const mlprof__subject_stats *s = &res->subjects[i];
    if (s->subject == MLPROF__SUBJECT_PROCESS) continue;
    subject_who(who, sizeof who, s, NULL, hosts);
    subject_rows(&t, who, s);
  }
  /* Then each process of the report, with its own rows. */
  for (size_t p = 0; p < r->nprocs; p++)
    for (size_t i = 0; i < res->nsubjects; i++) {
      const mlprof__subject_stats *s = &res->subjects[i];
      if (s->subject != MLPROF__SUBJECT_PROCESS || s->process != (int)p)
        continue;
      subject_who(who, sizeof who, s, r->procs[p].name, hosts);
      subject_rows(&t, who, s);
    }
  if (res->tree.nm) {
    snprintf(who, sizeof who, "tree (%zu process%s, %" PRIu64 " ticks)",
             res->tree_processes, res->tree_processes == 1 ? "" : "es",
             res->tree.rows);
    subject_rows(&t, who, &res->tree);
  }
  /* Processes of the tree that wrote no profile of their own. */
  for (size_t i = 0; i < res->nsubjects; i++) {
    const mlprof__subject_stats *s = &res->subjects[i];
    if (s->subject != MLPROF__SUBJECT_PROCESS || s->process >= 0) continue;
    subject_who(who, sizeof who, s, NULL, hosts);
    snprintf(who + strlen(who), sizeof who - strlen(who), ", no profile");
    subject_rows(&t, who, s);
  }
  int rc = mlprof__table_print(&t, o);
  if (rc) return rc;

  size_t down = 0;
  for (size_t i = 0; i < res->nsources; i++) down += !res->sources[i].available;
  if (down) {
    mlprof__out_lit(o, "\nSampling sources not running\n");
    static const char *const sheads[] = {"host", "source", "processes",
                                         "reason"};
    if (mlprof__table_open(&t, sheads, "llrl")) return MLPROF_ENOMEM;
    for (size_t i = 0; i < res->nsources; i++) {
      const mlprof__source_status *st = &res->sources[i];
      if (st->available) continue;
      mlprof__table_name(&t, st->hostname, strlen(st->hostname), 24);
      mlprof__table_name(&t, st->name, strlen(st->name), 24);
      mlprof__table_cell(&t, "%zu", st->profiles);
      mlprof__table_name(&t, st->reason, strlen(st->reason), 100);
    }
    if ((rc = mlprof__table_print(&t, o))) return rc;
  }

  mlprof__out_lit(o, "\nEnergy and carbon\n");
  static const char *const eheads[] = {"what", "value", "how"};
  if (mlprof__table_open(&t, eheads, "lrl")) return MLPROF_ENOMEM;
  mlprof__table_cell(&t, "CPU energy");
  if (res->has_cpu_energy) {
    cell_measure(&t, "cpu_energy_j", res->cpu_energy_j);
    mlprof__table_name(&t, res->cpu_energy_method,
                       strlen(res->cpu_energy_method), 100);
  } else {
    mlprof__table_cell(&t, "-");
    mlprof__table_begin(&t);
    mlprof__out_lit(&t.text, "unavailable: ");
    mlprof__out_text_str(&t.text, res->cpu_energy_absent,
                         strlen(res->cpu_energy_absent));
    mlprof__table_end(&t);
  }
  mlprof__table_cell(&t, "GPU energy");
  if (res->has_gpu_energy) {
    cell_measure(&t, "gpu_energy_j", res->gpu_energy_j);
    mlprof__table_name(&t, res->gpu_energy_method,
                       strlen(res->gpu_energy_method), 100);
  } else {
    mlprof__table_cell(&t, "-");
    mlprof__table_begin(&t);
    mlprof__out_lit(&t.text, "unavailable: ");
    mlprof__out_text_str(&t.text, res->gpu_energy_absent,
                         strlen(res->gpu_energy_absent));
    mlprof__table_end(&t);
  }
  mlprof__table_cell(&t, "carbon");
  if (res->has_cpu_energy || res->has_gpu_energy) {
    mlprof__table_cell(&t, "%.3g g CO2e", res->carbon_g);
    mlprof__table_cell(&t, "%s energy x %.0f g/kWh (%s)",
                       res->has_cpu_energy && res->has_gpu_energy ? "CPU + GPU"
                       : res->has_cpu_energy                      ? "CPU only"
                                                                  : "GPU only",
                       res->intensity_g_per_kwh, res->intensity_source);
  } else {
    mlprof__table_cell(&t, "-");
    mlprof__table_cell(&t, "unavailable: no energy measured");
  }
  return mlprof__table_print(&t, o);
}

/* ---- findings ------------------------------------------------------------
 */

static int breakdown_section(const mlprof__findings *f, mlprof__out *o) {
  const mlprof__steps *s = &f->steps;
  if (s->source == MLPROF__STEPS_NONE) return 0;
  char mean[32], p50[32], p90[32];
  mlprof__fmt_duration(mean, sizeof mean, (double)mlprof__round_ns(s->mean_ns));
  mlprof__fmt_duration(p50, sizeof p50, (double)s->p50_ns);
  mlprof__fmt_duration(p90, sizeof p90, (double)s->p90_ns);
  if (s->source == MLPROF__STEPS_MARKS) {
    mlprof__out_printf(o,
                       "\nSteps: %" PRIu64
                       " from step marks (%zu thread%s): mean %s, p50 %s, "
                       "p90 %s\n",
                       s->count, s->threads, s->threads == 1 ? "" : "s", mean,
                       p50, p90);
  } else {
    mlprof__out_printf(o, "\nSteps: %" PRIu64 " spans of zone \"", s->count);
    mlprof__out_text_str(o, s->zone, s->zone_len);
    mlprof__out_printf(o,
                       "\" (outermost repeated zone; no step marks): mean %s, "
                       "p50 %s, p90 %s\n",
                       mean, p50, p90);
  }
  static const char *const heads[] = {"part", "per step", "total", "share"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lrrr")) return MLPROF_ENOMEM;
  for (int k = 0; k < MLPROF__NPARTS; k++) {
    mlprof__table_cell(&t, "%s", mlprof__part_name(k));
    cell_dur(&t, s->count ? mlprof__round_ns((double)s->part_ns[k] /
                                             (double)s->count)
                          : 0);
    cell_dur(&t, s->part_ns[k]);
    mlprof__table_cell(&t, "%.1f%%", s->share[k] * 100);
  }
  return mlprof__table_print(&t, o);
}

/* An evidence number in the unit its key's suffix names. */
static void evidence_value(char *b, size_t len, const char *key, double v) {
  if (!isfinite(v))
    snprintf(b, len, "-");
  else if (ends_with(key, "_ns"))
    mlprof__fmt_duration(b, len, (double)mlprof__round_ns(v));
  else if (ends_with(key, "_share"))
    snprintf(b, len, "%.1f%%", v * 100);
  else if (ends_with(key, "_mb"))
    snprintf(b, len, "%.1f MB", v);
  else if (ends_with(key, "_mb_per_min"))
    snprintf(b, len, "%.2f MB/min", v);
  else if (ends_with(key, "_mb_per_step"))
    snprintf(b, len, "%.3f MB/step", v);
  else if (ends_with(key, "_bytes") || ends_with(key, "_bytes_per_s") ||
           ends_with(key, "_pct"))
    fmt_measure(b, len, key, v);
  else if (v == floor(v) && fabs(v) < 1e15)
    snprintf(b, len, "%.0f", v);
  else
    snprintf(b, len, "%.3g", v);
}

/* A line of text from the analysis, indented, made safe. */
static void text_line(mlprof__out *o, const char *lead, const char *s) {
  mlprof__out_str(o, lead);
  mlprof__out_text_str(o, s, strlen(s));
  mlprof__out_lit(o, "\n");
}

static int findings_section(const mlprof__findings *f, mlprof__out *o) {
  if (!f->nfindings) {
    mlprof__out_lit(o, "\nFindings: none\n");
    if (f->note) text_line(o, "  note: ", f->note);
    return 0;
  }
  mlprof__out_lit(o,
                  "\nFindings (most severe first; severity 0-100, see "
                  "docs/findings.md)\n");
  if (f->note) text_line(o, "  note: ", f->note);
  for (size_t i = 0; i < f->nfindings; i++) {
    const mlprof__finding *x = &f->findings[i];
    mlprof__out_printf(o, "  %zu. severity %.0f  %s", i + 1, x->severity,
                       x->type);
    if (x->zone) {
      mlprof__out_lit(o, "  zone \"");
      mlprof__out_name(o, x->zone, x->zone_len, NAME_WIDTH);
      mlprof__out_lit(o, "\"");
    }
    if (x->flagged) mlprof__out_printf(o, "  (%s)", x->flagged);
    mlprof__out_lit(o, "\n");
    text_line(o, "     ", x->summary);
    mlprof__out_lit(o, "     evidence:");
    for (size_t k = 0; k < x->nev; k++) {
      char v[64];
      evidence_value(v, sizeof v, x->ev[k].key, x->ev[k].value);
      mlprof__out_printf(o, "%s %s=%s", k ? "," : "", x->ev[k].key, v);
    }
    mlprof__out_lit(o, "\n");
    text_line(o, "     do: ", x->recommendation);
    if (x->note) text_line(o, "     note: ", x->note);
  }
  return o->err;
}

static int leaks_section(const mlprof__findings *f, mlprof__out *o) {
  if (!f->sampled && !f->nleaks) return 0;
  if (!f->nleaks) {
    mlprof__out_printf(o,
                       "\nLeaks: none in %zu memory series (thresholds: %g MB "
                       "growth, %g MB/step, %g MB/min)\n",
                       f->leak_series, f->opts.leak_min_mb,
                       f->opts.leak_min_mb_per_step,
                       f->opts.leak_min_mb_per_min);
    return o->err;
  }
  mlprof__out_printf(o,
                     "\nLeaks (sustained growth; thresholds: %g MB growth, %g "
                     "MB/step, %g MB/min)\n",
                     f->opts.leak_min_mb, f->opts.leak_min_mb_per_step,
                     f->opts.leak_min_mb_per_min);
  static const char *const heads[] = {"who",    "measure", "MB/step", "MB/min",
                                      "growth", "over",    "zones"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "llrrrll")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < f->nleaks; i++) {
    const mlprof__leak *lk = &f->leaks[i];
    mlprof__table_cell(&t, "%s %" PRIu64,
                       lk->subject == MLPROF__SUBJECT_GPU ? "GPU" : "pid",
                       lk->id);
    mlprof__table_cell(&t, "%s", lk->measure);
    if (lk->by_steps)
      mlprof__table_cell(&t, "%.3g", lk->slope_mb_per_step);
    else
      mlprof__table_cell(&t, "-");
    mlprof__table_cell(&t, "%.3g", lk->slope_mb_per_min);
    mlprof__table_cell(&t, "%.0f MB", lk->growth_mb);
    if (lk->by_steps)
      mlprof__table_cell(&t, "steps %.0f-%.0f", lk->begin_step, lk->end_step);
    else
      mlprof__table_cell(&t, "%.1f s",
                         (double)(lk->end_ns - lk->begin_ns) / 1e9);
    mlprof__table_begin(&t);
    for (size_t k = 0; k < lk->nzones; k++) {
      if (k) mlprof__out_lit(&t.text, ", ");
      mlprof__out_text_str(
          &t.text, lk->zones[k].name,
          lk->zones[k].name_len > 32 ? 32 : lk->zones[k].name_len);
    }
    mlprof__table_end(&t);
  }
  return mlprof__table_print(&t, o);
}

/* Kernel time by the zone that launched it (docs/gpu.md). */
static int launched_section(const mlprof__findings *f, mlprof__out *o) {
  if (!f->nlaunched && !f->launch_unattributed) return 0;
  uint64_t total = f->launch_unattributed_ns;
  for (size_t i = 0; i < f->nlaunched; i++) total += f->launched[i].gpu_ns;
  mlprof__out_lit(o,
                  "\nGPU time launched by zone (kernels by the zone open "
                  "on the launching thread)\n");
  static const char *const heads[] = {"zone", "kernels", "GPU time", "share"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i <= f->nlaunched; i++) {
    const mlprof__gpu_launched *l = i < f->nlaunched ? &f->launched[i] : NULL;
    if (!l && !f->launch_unattributed) break;
    if (l)
      mlprof__table_name(&t, l->zone, l->zone_len, NAME_WIDTH);
    else
      mlprof__table_cell(&t, "(launch not seen, or under no zone)");
    mlprof__table_cell(&t, "%" PRIu64, l ? l->kernels : f->launch_unattributed);
    uint64_t ns = l ? l->gpu_ns : f->launch_unattributed_ns;
    cell_dur(&t, ns);
    mlprof__table_cell(&t, "%.1f%%",
                       total ? 100.0 * (double)ns / (double)total : 0.0);
  }
  return mlprof__table_print(&t, o);
}

static int slo_section(const mlprof__findings *f, mlprof__out *o) {
  if (!f->nslo) return 0;
  char win[32];
  mlprof__fmt_duration(win, sizeof win, (double)f->slo[0].window_ns);
  mlprof__out_printf(o, "\nLatency objectives (windows of %s)\n", win);
  /* Named for what the objectives target: zones, gauges, or both. */
  int zones = 0, gauges = 0;
  for (size_t i = 0; i < f->nslo; i++) {
    gauges += f->slo[i].gauge;
    zones += !f->slo[i].gauge;
  }
  const char *heads[] = {zones && gauges ? "zone or gauge"
                         : gauges        ? "gauge"
                                         : "zone",
                         "objective",
                         zones && gauges ? "calls or values"
                         : gauges        ? "values"
                                         : "calls",
                         "over",
                         "over%",
                         "p50",
                         "p95",
                         "p99",
                         "max",
                         "windows missed"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lrrrrrrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < f->nslo; i++) {
    const mlprof__slo_result *s = &f->slo[i];
    mlprof__table_name(&t, s->zone, s->zone_len, NAME_WIDTH);
    /* A zone's times are durations; a gauge's values are in its unit. */
    void (*cell)(mlprof__table *, double) = s->gauge ? cell_num : cell_dur_f;
    cell(&t, s->objective);
    mlprof__table_cell(&t, "%" PRIu64, s->count);
    mlprof__table_cell(&t, "%" PRIu64, s->over);
    mlprof__table_cell(&t, "%.2f", s->share_over * 100);
    cell(&t, s->p50);
    cell(&t, s->p95);
    cell(&t, s->p99);
    cell(&t, s->max);
    mlprof__table_cell(&t, "%zu of %zu", s->windows_missed, s->nwindows);
  }
  int rc = mlprof__table_print(&t, o);
  /* The worst windows of each objective: most calls over, first five. */
  for (size_t i = 0; i < f->nslo && !rc; i++) {
    const mlprof__slo_result *s = &f->slo[i];
    if (!s->windows_missed) continue;
    mlprof__out_lit(o, "  worst windows of ");
    mlprof__out_name(o, s->zone, s->zone_len, NAME_WIDTH);
    mlprof__out_lit(o, ":");
    int used[5] = {-1, -1, -1, -1, -1};
    for (int k = 0; k < 5; k++) {
      int best = -1;
      for (size_t w = 0; w < s->nwindows; w++) {
        int taken = 0;
        for (int j = 0; j < k; j++) taken |= used[j] == (int)w;
        if (taken || !s->windows[w].over) continue;
        if (best < 0 || s->windows[w].over * s->windows[best].count >
                            s->windows[best].over * s->windows[w].count)
          best = (int)w;
      }
      if (best < 0) break;
      used[k] = best;
      const mlprof__slo_window *w = &s->windows[best];
      char at[32], p99[32];
      mlprof__fmt_duration(at, sizeof at, (double)w->start_ns);
      if (s->gauge)
        snprintf(p99, sizeof p99, "%.4g", w->p99);
      else
        mlprof__fmt_duration(p99, sizeof p99, w->p99);
      mlprof__out_printf(o, "%s at %s: %" PRIu64 " of %" PRIu64 " over, p99 %s",
                         k ? ";" : "", at, w->over, w->count, p99);
    }
    mlprof__out_lit(o, "\n");
  }
  return rc ? rc : o->err;
}

/* A job of several ranks: the clocks, each rank's time, the collectives
 * and the point-to-point links. */
static int dist_section(const mlprof__findings *f, mlprof__out *o) {
  const mlprof__dist *d = &f->dist;
  if (!d->nranks) return 0;
  mlprof__out_printf(
      o,
      "\nDistributed: %zu ranks, %zu steps; load balance %.0f%%, "
      "communication efficiency %.0f%%, parallel efficiency "
      "%.0f%%\n",
      d->nranks, d->nsteps, 100 * d->load_balance, 100 * d->comm_efficiency,
      100 * d->parallel_efficiency);
  if (d->straggler >= 0) {
    char delay[32];
    mlprof__fmt_duration(delay, sizeof delay, d->delay_ns);
    mlprof__out_printf(o, "Straggler: rank %" PRId64 ", %s behind a step",
                       d->straggler, delay);
    for (size_t k = 0; k < d->nzones; k++) {
      mlprof__fmt_duration(
          delay, sizeof delay,
          ((double)d->zones[k].straggler_ns - d->zones[k].others_ns) /
              (double)d->nsteps);
      mlprof__out_str(o, k ? ", " : "; more time a step in ");
      if (d->zones[k].outside)
        mlprof__out_lit(o, "time outside zones");
      else
        mlprof__out_text_str(o, d->zones[k].name, strlen(d->zones[k].name));
      mlprof__out_printf(o, " (+%s)", delay);
    }
    mlprof__out_lit(o, "\n");
  }
  static const char *const heads[] = {
      "rank",    "host",         "clock offset", "drift",   "uncertainty",
      "compute", "exposed comm", "waiting",      "overlap", "straggler steps"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "rlrrrrrrrr")) return MLPROF_ENOMEM;
  for (size_t r = 0; r < d->nranks; r++) {
    const mlprof__dist_rank *x = &d->ranks[r];
    char b[32];
    mlprof__table_cell(&t, "%" PRId64, x->rank);
    mlprof__table_name(&t, x->hostname ? x->hostname : "",
                       x->hostname ? strlen(x->hostname) : 0, 24);
    mlprof__fmt_duration(b, sizeof b, fabs(x->offset_ns));
    mlprof__table_cell(&t, "%s%s", x->offset_ns < 0 ? "-" : "", b);
    mlprof__table_cell(&t, "%.3g ppm", x->drift * 1e6);
    if (isfinite(x->uncertainty_ns)) {
      mlprof__fmt_duration(b, sizeof b, x->uncertainty_ns);
      mlprof__table_cell(&t, "±%s", b);
    } else {
      mlprof__table_cell(&t, "unknown");
    }
    cell_dur(&t, x->compute_ns);
    cell_dur(&t, x->exposed_ns);
    mlprof__fmt_duration(b, sizeof b, (double)x->wait_ns);
    mlprof__table_cell(&t, "%s%s", b, x->waits_uncertain ? " ~" : "");
    mlprof__table_cell(&t, "%.0f%%", 100 * x->overlap_share);
    mlprof__table_cell(&t, "%" PRIu64, x->straggler_steps);
  }
  int rc = mlprof__table_print(&t, o);
  if (rc) return rc;
  for (size_t r = 0; r < d->nranks; r++)
    if (d->ranks[r].waits_uncertain) {
      mlprof__out_lit(o,
                      "~: some waits are shorter than the clocks' "
                      "uncertainty\n");
      break;
    }
  uint64_t syncs = 0, sync_ns = 0, steps = 0;
  for (size_t r = 0; r < d->nranks; r++) {
    syncs += d->ranks[r].host_syncs;
    sync_ns += d->ranks[r].host_sync_ns;
    steps += d->ranks[r].steps;
  }
  if (syncs && steps) {
    char b[32];
    mlprof__fmt_duration(b, sizeof b, (double)sync_ns / (double)steps);
    mlprof__out_printf(o,
                       "Host syncs (.item(), .cpu() of device tensors): %.3g "
                       "a step per rank, %s a step\n",
                       (double)syncs / (double)steps, b);
  }
  if (d->ncolls) {
    static const char *const ch[] = {
        "collective", "size",    "ranks",    "count",     "bytes",
        "time",       "waiting", "transfer", "algbw B/s", "busbw B/s"};
    if (mlprof__table_open(&t, ch, "lrrrrrrrrr")) return MLPROF_ENOMEM;
    for (size_t k = 0; k < d->ncolls; k++) {
      const mlprof__dist_coll *c = &d->colls[k];
      mlprof__table_cell(&t, "%s", mlprof__op_name(c->op));
      cell_num(&t, (double)c->size_bytes);
      mlprof__table_cell(&t, "%zu", c->ranks);
      mlprof__table_cell(&t, "%" PRIu64, c->count);
      cell_num(&t, (double)c->bytes);
      cell_dur(&t, c->time_ns);
      cell_dur(&t, c->wait_ns);
      cell_dur(&t, c->transfer_ns);
      cell_num(&t, c->algbw);
      cell_num(&t, c->busbw);
    }
    if ((rc = mlprof__table_print(&t, o))) return rc;
  }
  if (d->nlinks) {
    static const char *const lh[] = {
        "from",         "to", "count", "bytes", "transfer", "receiver waiting",
        "bandwidth B/s"};
    if (mlprof__table_open(&t, lh, "rrrrrrr")) return MLPROF_ENOMEM;
    for (size_t k = 0; k < d->nlinks; k++) {
      const mlprof__dist_link *l = &d->links[k];
      mlprof__table_cell(&t, "%" PRId64, l->src);
      mlprof__table_cell(&t, "%" PRId64 "%s", l->dst,
                         (int)k == d->slowest_link ? " (slowest)" : "");
      mlprof__table_cell(&t, "%" PRIu64, l->count);
      cell_num(&t, (double)l->bytes);
      cell_dur(&t, l->time_ns);
      cell_dur(&t, l->wait_ns);
      cell_num(&t, l->bandwidth);
    }
    if ((rc = mlprof__table_print(&t, o))) return rc;
  }
  return 0;
}

int mlprof__export_text(const mlprof__report *r, const mlprof__resources *res,
                        const mlprof__findings *f, mlprof__out *o) {
  char wall[32], sampled[64] = "";
  mlprof__fmt_duration(wall, sizeof wall, (double)r->wall_ns);
  /* Processes the sampler saw that wrote no profile (DataLoader workers
   * that never recorded) are processes of the job too. */
  size_t only = 0;
  for (size_t i = 0; res && i < res->nsubjects; i++)
    only += res->subjects[i].subject == MLPROF__SUBJECT_PROCESS &&
            res->subjects[i].process < 0;
  if (only)
    snprintf(sampled, sizeof sampled, " (%zu profiled, %zu sampled only)",
             r->nprocs, only);
  size_t nprocs = r->nprocs + only;
  mlprof__out_printf(o,
                     "mlprof report: %zu process%s%s, %zu thread%s, %" PRIu64
                     " spans, wall %s, %" PRIu64 " events dropped\n",
                     nprocs, nprocs == 1 ? "" : "es", sampled, r->nthreads,
                     r->nthreads == 1 ? "" : "s", r->spans, wall, r->dropped);
  for (size_t i = 0; i < r->nwarnings; i++) {
    mlprof__out_lit(o, "warning: ");
    mlprof__out_text_str(o, r->warnings[i], strlen(r->warnings[i]));
    mlprof__out_lit(o, "\n");
  }
  int (*const sections[])(const mlprof__report *, mlprof__out *) = {
      zones_section,
      procs_section,
      threads_section,
      steps_section,
      counters_section,
      units_section,
      open_section,
      meta_section,
      mlprof__export_lines_text,
      mlprof__export_hot_text,
      mlprof__export_memory_text};
  for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
    int rc = sections[i](r, o);
    if (rc) return rc;
    /* Resources right after the processes they belong to. */
    if (sections[i] == procs_section && (rc = resources_section(r, res, o)))
      return rc;
    /* What is wrong and what to do, right after the zones. */
    if (sections[i] == zones_section && f &&
        ((rc = breakdown_section(f, o)) ||
         (f->steps.source != MLPROF__STEPS_NONE &&
          f->steps.part_ns[MLPROF__PART_OTHER] &&
          (rc = mlprof__export_hot_other_text(r, o))) ||
         (rc = dist_section(f, o)) || (rc = findings_section(f, o)) ||
         (rc = leaks_section(f, o)) || (rc = slo_section(f, o)) ||
         (rc = launched_section(f, o))))
      return rc;
  }
  return o->err;
}

/* ---- mlprof compare ------------------------------------------------------ */

static void fmt_speedup(char *b, size_t len, double x) {
  if (isnan(x) || isinf(x))
    snprintf(b, len, "-");
  else
    snprintf(b, len, "%.2fx", x);
}

static void out_recommendation_text(const mlprof__compare *c, mlprof__out *o) {
  char line[1024];
  mlprof__compare_recommendation(c, line, sizeof line);
  mlprof__out_lit(o, "\nRecommendation: ");
  mlprof__out_text_str(o, line, strlen(line));
  mlprof__out_lit(o, "\n");
}

int mlprof__export_compare_text(const mlprof__compare *c, size_t top,
                                mlprof__out *o) {
  size_t all = 0;
  for (size_t i = 0; i < c->nruns; i++) all += c->runs[i].repeats;
  if (all > c->nruns)
    mlprof__out_printf(o,
                       "mlprof compare: %zu configurations, %zu runs\n\nRuns\n",
                       c->nruns, all);
  else
    mlprof__out_printf(o, "mlprof compare: %zu runs\n\nRuns\n", c->nruns);
  static const char *const rheads[] = {
      "run",       "label",    "path",
      "wall",      "spans",    "steps",
      "step mean", "step p50", "p50 95% interval",
      "rank wall", "rank step"};
  mlprof__table t;
  if (mlprof__table_open(&t, rheads, "rllrrrrrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < c->nruns; i++) {
    const mlprof__compare_run *r = &c->runs[i];
    char w[32], s[32], p50[32], lo[32], hi[32];
    mlprof__fmt_duration(w, sizeof w, (double)r->wall_ns);
    mlprof__fmt_duration(s, sizeof s, r->step_mean_ns);
    mlprof__fmt_duration(p50, sizeof p50, r->step_p50_ns);
    mlprof__fmt_duration(lo, sizeof lo, r->step_lo_ns);
    mlprof__fmt_duration(hi, sizeof hi, r->step_hi_ns);
    mlprof__table_cell(&t, "%zu", i + 1);
    mlprof__table_name(&t, r->label, strlen(r->label), 24);
    if (r->repeats > 1) {
      char more[512];
      int n = snprintf(more, sizeof more, "%.400s +%zu runs", r->path,
                       r->repeats - 1);
      mlprof__table_name(&t, more, n > 0 ? (size_t)n : 0, 40);
    } else {
      mlprof__table_name(&t, r->path, strlen(r->path), 40);
    }
    mlprof__table_cell(&t, "%s", w);
    mlprof__table_cell(&t, "%llu", (unsigned long long)r->spans);
    mlprof__table_cell(&t, "%llu", (unsigned long long)r->intervals);
    mlprof__table_cell(&t, "%s", s);
    mlprof__table_cell(&t, "%s", p50);
    if (isnan(r->step_lo_ns))
      mlprof__table_cell(&t, "-");
    else
      mlprof__table_cell(&t, "%s .. %s", lo, hi);
    mlprof__table_cell(&t, "%zu", r->rank_total);
    mlprof__table_cell(&t, "%zu", r->rank_step);
  }
  int rc = mlprof__table_print(&t, o);
  if (rc) return rc;

  size_t shown = top && top < c->nzones ? top : c->nzones;
  mlprof__out_printf(
      o,
      "\nZones (%zu of %zu, by largest total; speedup = the other "
      "run's mean / this run's mean)\n",
      shown, c->nzones);
  static const char *const zheads[] = {"zone",       "run",      "count",
                                       "mean",       "p50",      "p99",
                                       "vs slowest", "vs first", ""};
  if (mlprof__table_open(&t, zheads, "llrrrrrrl")) return MLPROF_ENOMEM;
  for (size_t k = 0; k < shown; k++) {
    const mlprof__compare_zone *z = &c->zones[k];
    for (size_t i = 0; i < c->nruns; i++) {
      const mlprof__zone_stats *s = z->stats[i];
      if (i == 0)
        mlprof__table_name(&t, z->name, z->name_len, 40);
      else
        mlprof__table_cell(&t, "%s", "");
      mlprof__table_name(&t, c->runs[i].label, strlen(c->runs[i].label), 24);
      if (!s) {
        for (int col = 0; col < 6; col++) mlprof__table_cell(&t, "-");
        mlprof__table_cell(&t, "absent");
        continue;
      }
      char m[32], p50[32], p99[32], vs[32], vf[32];
      mlprof__fmt_duration(m, sizeof m, s->mean_ns);
      mlprof__fmt_duration(p50, sizeof p50, (double)s->p50_ns);
      mlprof__fmt_duration(p99, sizeof p99, (double)s->p99_ns);
      fmt_speedup(vs, sizeof vs, z->vs_slowest[i]);
      fmt_speedup(vf, sizeof vf, z->vs_first[i]);
      mlprof__table_cell(&t, "%llu", (unsigned long long)s->count);
      mlprof__table_cell(&t, "%s", m);
      mlprof__table_cell(&t, "%s", p50);
      mlprof__table_cell(&t, "%s", p99);
      mlprof__table_cell(&t, "%s", vs);
      mlprof__table_cell(&t, "%s", vf);
      mlprof__table_cell(&t, "%s",
                         c->nruns < 2                  ? ""
                         : !mlprof__compare_tied(z, i) ? ""
                         : z->tie                      ? "tie"
                                                       : "fastest");
    }
  }
  rc = mlprof__table_print(&t, o);
  if (rc) return rc;
  int heading = 0;
  for (size_t i = 0; i < c->nruns; i++)
    for (size_t w = 0; w < c->runs[i].report.nwarnings; w++) {
      const char *line = c->runs[i].report.warnings[w];
      if (!heading++) mlprof__out_lit(o, "\nWarnings\n");
      mlprof__out_lit(o, "  ");
      mlprof__out_text_str(o, c->runs[i].label, strlen(c->runs[i].label));
      mlprof__out_lit(o, ": ");
      mlprof__out_text_str(o, line, strlen(line));
      mlprof__out_lit(o, "\n");
    }
  out_recommendation_text(c, o);
  return 0;
}
