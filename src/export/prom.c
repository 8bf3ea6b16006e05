/* Reports in the Prometheus text exposition format (prom.h). */
#include "prom.h"

#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A metric name part from a measure name: [a-zA-Z0-9_] kept, anything else
 * '_'; at most 100 bytes, then unit suffixes spelled out (_s: _seconds,
 * _bytes_s: _bytes_per_second). */
static void sanitise(const char *s, char *out, size_t cap) {
  size_t k = 0;
  for (; *s && k + 1 < cap && k < 100; s++) {
    char c = *s;
    out[k++] = ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9') || c == '_')
                   ? c
                   : '_';
  }
  out[k] = '\0';
  /* Units spelled out, as Prometheus names want them. */
  static const struct {
    const char *from, *to;
  } units[] = {{"_bytes_s", "_bytes_per_second"}, {"_s", "_seconds"}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    size_t f = strlen(units[i].from), t = strlen(units[i].to);
    if (k >= f && strcmp(out + k - f, units[i].from) == 0 &&
        k - f + t + 1 <= cap) {
      memcpy(out + k - f, units[i].to, t + 1);
      break;
    }
  }
}

static void label(mlprof__out *o, const char *key, const char *v, size_t n,
                  int first) {
  if (!first) mlprof__out_lit(o, ",");
  mlprof__out_str(o, key);
  mlprof__out_lit(o, "=\"");
  mlprof__out_prom_label(o, v, n);
  mlprof__out_lit(o, "\"");
}

static void run_label(mlprof__out *o, const mlprof__prom_run *run) {
  label(o, "run", run->run, strlen(run->run), 1);
}

/* A sample's value: NaN and infinities as the format spells them
 * (mlprof__out_f64 writes JSON's null for those). */
static void value(mlprof__out *o, double v) {
  mlprof__out_lit(o, " ");
  if (isnan(v))
    mlprof__out_lit(o, "NaN");
  else if (isinf(v))
    mlprof__out_str(o, v > 0 ? "+Inf" : "-Inf");
  else
    mlprof__out_f64(o, v);
  mlprof__out_lit(o, "\n");
}

static void family(mlprof__out *o, const char *name, const char *type,
                   const char *help) {
  mlprof__out_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A run-level gauge over every run. */
static void run_gauge(mlprof__out *o, const mlprof__prom_run *runs, size_t n,
                      const char *name, const char *help, int which) {
  family(o, name, "gauge", help);
  for (size_t i = 0; i < n; i++) {
    const mlprof__report *r = runs[i].r;
    double v = which == 0   ? (double)r->wall_ns / 1e9
               : which == 1 ? (double)r->spans
               : which == 2 ? (double)r->dropped
               : which == 3 ? (double)r->nprocs
                            : (double)r->nzones;
    mlprof__out_str(o, name);
    mlprof__out_lit(o, "{");
    run_label(o, &runs[i]);
    mlprof__out_lit(o, "}");
    value(o, v);
  }
}

static void zone_labels(mlprof__out *o, const mlprof__prom_run *run,
                        const mlprof__zone_stats *z) {
  run_label(o, run);
  label(o, "zone", z->name, z->name_len, 0);
  if (!mlprof__prom_label_exact(z->name, z->name_len)) {
    /* Its label has a U+FFFD, as another zone's may: the bytes tell them
     * apart, or the two would be one series twice. */
    static const char hex[] = "0123456789abcdef";
    mlprof__out_lit(o, ",zone_bytes=\"");
    for (size_t i = 0; i < z->name_len; i++) {
      unsigned char c = (unsigned char)z->name[i];
      char h[2] = {hex[c >> 4], hex[c & 15]};
      mlprof__out_write(o, h, 2);
    }
    mlprof__out_lit(o, "\"");
  }
  const char *c = mlprof_category_name(z->category);
  label(o, "category", c, strlen(c), 0);
}

static void zones(mlprof__out *o, const mlprof__prom_run *runs, size_t n) {
  static const struct {
    const char *q;
    size_t off;
  } qs[] = {{"0.5", offsetof(mlprof__zone_stats, p50_ns)},
            {"0.9", offsetof(mlprof__zone_stats, p90_ns)},
            {"0.95", offsetof(mlprof__zone_stats, p95_ns)},
            {"0.99", offsetof(mlprof__zone_stats, p99_ns)}};
  family(o, "mlprof_zone_duration_seconds", "summary",
         "Durations of a zone's spans: exact quantiles (nearest rank), sum "
         "and count.");
  for (size_t i = 0; i < n; i++) {
    const mlprof__report *r = runs[i].r;
    for (size_t k = 0; k < r->nzones; k++) {
      const mlprof__zone_stats *z = &r->zones[k];
      for (size_t q = 0; q < sizeof qs / sizeof qs[0]; q++) {
        uint64_t ns;
        memcpy(&ns, (const char *)z + qs[q].off, sizeof ns);
        mlprof__out_lit(o, "mlprof_zone_duration_seconds{");
        zone_labels(o, &runs[i], z);
        mlprof__out_printf(o, ",quantile=\"%s\"}", qs[q].q);
        value(o, (double)ns / 1e9);
      }
      mlprof__out_lit(o, "mlprof_zone_duration_seconds_sum{");
      zone_labels(o, &runs[i], z);
      mlprof__out_lit(o, "}");
      value(o, (double)z->total_ns / 1e9);
      mlprof__out_lit(o, "mlprof_zone_duration_seconds_count{");
      zone_labels(o, &runs[i], z);
      mlprof__out_lit(o, "}");
      value(o, (double)z->count);
    }
  }
  family(o, "mlprof_zone_self_seconds", "gauge",
         "Self time of a zone: its spans' durations less their child "
         "zones'.");
  for (size_t i = 0; i < n; i++) {
    const mlprof__report *r = runs[i].r;
    for (size_t k = 0; k < r->nzones; k++) {
      mlprof__out_lit(o, "mlprof_zone_self_seconds{");
      zone_labels(o, &runs[i], &r->zones[k]);
      mlprof__out_lit(o, "}");
      value(o, (double)r->zones[k].self_ns / 1e9);
    }
  }
}

/* The subjects of a run of one kind (system, process, GPU; the tree). */
static size_t subjects_of(const mlprof__resources *res, uint8_t kind,
                          const mlprof__subject_stats **out, size_t cap) {
  size_t k = 0;
  if (!res || !res->sampled) return 0;
  if (kind == MLPROF__SUBJECT_TREE) {
    if (res->tree.nm && cap) out[k++] = &res->tree;
    return k;
  }
  for (size_t i = 0; i < res->nsubjects && k < cap; i++)
    if (res->subjects[i].subject == kind) out[k++] = &res->subjects[i];
  return k;
}

typedef struct {
  char name[160];
} fam;

/* Gauges of the last value of each sampled measure, one family per subject
 * kind and measure: mlprof_system_<measure>, mlprof_process_<measure>,
 * mlprof_gpu_<measure>, mlprof_tree_<measure> (the tree's sum, mean over
 * ticks). */
static int resources(mlprof__out *o, const mlprof__prom_run *runs, size_t n) {
  static const struct {
    uint8_t kind;
    const char *idkey;
  } kinds[] = {{MLPROF__SUBJECT_SYSTEM, NULL},
               {MLPROF__SUBJECT_PROCESS, "pid"},
               {MLPROF__SUBJECT_GPU, "gpu"},
               {MLPROF__SUBJECT_TREE, NULL}};
  enum { MAXSUB = 4096 };
  const mlprof__subject_stats **subs = malloc(MAXSUB * sizeof *subs);
  fam *fams = NULL;
  size_t nfams = 0, capfams = 0;
  if (!subs) return MLPROF_ENOMEM;
  int rc = 0;
  for (size_t kd = 0; kd < sizeof kinds / sizeof kinds[0] && !rc; kd++) {
    /* mlprof_<subject>_: the subjects' names, as everywhere. */
    char prefix[32];
    snprintf(prefix, sizeof prefix, "mlprof_%s_",
             mlprof__subject_name(kinds[kd].kind));
    nfams = 0;
    /* Distinct family names of this kind over every run, of measures with
     * a value (a family without samples would only say nothing). */
    for (size_t i = 0; i < n && !rc; i++) {
      size_t ns = subjects_of(runs[i].res, kinds[kd].kind, subs, MAXSUB);
      for (size_t s = 0; s < ns && !rc; s++)
        for (size_t m = 0; m < subs[s]->nm; m++) {
          char part[128], name[160];
          if (subs[s]->m[m].count == 0) continue;
          sanitise(subs[s]->m[m].name, part, sizeof part);
          snprintf(name, sizeof name, "%s%s", prefix, part);
          size_t f;
          for (f = 0; f < nfams && strcmp(fams[f].name, name); f++) {
          }
          if (f < nfams) continue;
          if (mlprof__grow(&fams, &capfams, nfams + 1, sizeof *fams)) {
            rc = MLPROF_ENOMEM;
            break;
          }
          snprintf(fams[nfams++].name, sizeof fams[0].name, "%s", name);
        }
    }
    for (size_t f = 0; f < nfams && !rc; f++) {
      const char *name = fams[f].name;
      family(o, name, "gauge",
             kinds[kd].kind == MLPROF__SUBJECT_TREE
                 ? "Process tree total of a sampled measure (mean over ticks)."
                 : "Latest sampled value of the measure (docs/sampling.md).");
      for (size_t i = 0; i < n; i++) {
        size_t ns = subjects_of(runs[i].res, kinds[kd].kind, subs, MAXSUB);
        for (size_t s = 0; s < ns; s++) {
          /* The first measure of this subject with that family name and
           * a value. */
          const mlprof__measure_stats *ms = NULL;
          for (size_t m = 0; m < subs[s]->nm && !ms; m++) {
            char part[128], full[160];
            if (subs[s]->m[m].count == 0) continue;
            sanitise(subs[s]->m[m].name, part, sizeof part);
            snprintf(full, sizeof full, "%s%s", prefix, part);
            if (strcmp(full, name) == 0) ms = &subs[s]->m[m];
          }
          if (!ms) continue;
          mlprof__out_str(o, name);
          mlprof__out_lit(o, "{");
          run_label(o, &runs[i]);
          if (kinds[kd].kind != MLPROF__SUBJECT_TREE) {
            const char *host = subs[s]->hostname ? subs[s]->hostname : "";
            label(o, "host", host, strlen(host), 0);
          }
          if (kinds[kd].idkey) {
            char id[24];
            char *e = mlprof__fmt_u64(id, subs[s]->id);
            label(o, kinds[kd].idkey, id, (size_t)(e - id), 0);
            const char *lb = subs[s]->label ? subs[s]->label : "";
            label(o, "label", lb, strlen(lb), 0);
          }
          mlprof__out_lit(o, "}");
          value(o,
                kinds[kd].kind == MLPROF__SUBJECT_TREE ? ms->mean : ms->last);
        }
      }
    }
  }
  free(fams);
  free(subs);
  return rc;
}

static int has_ranks(const mlprof__prom_run *run) {
  return run->dist && run->dist->nranks;
}

/* Per rank of each distributed run: its figures over its steps, and which
 * rank is the straggler; per run the POP efficiencies. */
static void ranks(mlprof__out *o, const mlprof__prom_run *runs, size_t n) {
  static const struct {
    const char *name, *help;
    size_t off;
    int kind; /* 0 a count, 1 ns as seconds, 2 the straggler flag */
  } figs[] = {
      {"mlprof_rank_steps", "Steps of the rank matched across ranks.",
       offsetof(mlprof__dist_rank, steps), 0},
      {"mlprof_rank_run_seconds", "Time of the rank's steps.",
       offsetof(mlprof__dist_rank, run_ns), 1},
      {"mlprof_rank_compute_seconds",
       "Time of the rank's steps less its exposed communication.",
       offsetof(mlprof__dist_rank, compute_ns), 1},
      {"mlprof_rank_exposed_communication_seconds",
       "Time the rank spent in blocking communication.",
       offsetof(mlprof__dist_rank, exposed_ns), 1},
      {"mlprof_rank_wait_seconds",
       "Of the exposed communication, time waiting for the last participant "
       "of a collective.",
       offsetof(mlprof__dist_rank, wait_ns), 1},
      {"mlprof_rank_async_communication_seconds",
       "Nonblocking operations, start to completion.",
       offsetof(mlprof__dist_rank, async_ns), 1},
      {"mlprof_rank_overlap_seconds",
       "Of the asynchronous communication, time overlapped by computation.",
       offsetof(mlprof__dist_rank, overlap_ns), 1},
      {"mlprof_rank_straggler_steps", "Steps where the rank computed longest.",
       offsetof(mlprof__dist_rank, straggler_steps), 0},
      {"mlprof_rank_straggler",
       "1 for the straggler of the job (docs/distributed.md), 0 for the "
       "other ranks.",
       0, 2}};
  size_t i;
  for (i = 0; i < n && !has_ranks(&runs[i]); i++) {
  }
  if (i == n) return;
  for (size_t f = 0; f < sizeof figs / sizeof figs[0]; f++) {
    family(o, figs[f].name, "gauge", figs[f].help);
    for (i = 0; i < n; i++) {
      if (!has_ranks(&runs[i])) continue;
      const mlprof__dist *d = runs[i].dist;
      for (size_t r = 0; r < d->nranks; r++) {
        const mlprof__dist_rank *x = &d->ranks[r];
        char id[24];
        char *e = mlprof__fmt_i64(id, x->rank);
        const char *host = x->hostname ? x->hostname : "";
        mlprof__out_str(o, figs[f].name);
        mlprof__out_lit(o, "{");
        run_label(o, &runs[i]);
        label(o, "rank", id, (size_t)(e - id), 0);
        label(o, "host", host, strlen(host), 0);
        mlprof__out_lit(o, "}");
        uint64_t v = 0;
        if (figs[f].kind == 2)
          v = x->rank == d->straggler;
        else
          memcpy(&v, (const char *)x + figs[f].off, sizeof v);
        value(o, figs[f].kind == 1 ? (double)v / 1e9 : (double)v);
      }
    }
  }
  static const struct {
    const char *name, *help;
    size_t off;
  } effs[] = {{"mlprof_dist_load_balance",
               "Mean over max of the ranks' compute time (POP).",
               offsetof(mlprof__dist, load_balance)},
              {"mlprof_dist_communication_efficiency",
               "Max compute time over max run time of the ranks (POP).",
               offsetof(mlprof__dist, comm_efficiency)},
              {"mlprof_dist_parallel_efficiency",
               "Load balance times communication efficiency (POP).",
               offsetof(mlprof__dist, parallel_efficiency)}};
  for (size_t f = 0; f < sizeof effs / sizeof effs[0]; f++) {
    family(o, effs[f].name, "gauge", effs[f].help);
    for (i = 0; i < n; i++) {
      if (!has_ranks(&runs[i])) continue;
      double v;
      memcpy(&v, (const char *)runs[i].dist + effs[f].off, sizeof v);
      mlprof__out_str(o, effs[f].name);
      mlprof__out_lit(o, "{");
      run_label(o, &runs[i]);
      mlprof__out_lit(o, "}");
      value(o, v);
    }
  }
}

int mlprof__export_prom(const mlprof__prom_run *runs, size_t n,
                        mlprof__out *o) {
  run_gauge(o, runs, n, "mlprof_run_wall_seconds", "Wall time of the run.", 0);
  run_gauge(o, runs, n, "mlprof_run_spans", "Completed spans read.", 1);
  run_gauge(o, runs, n, "mlprof_run_dropped_events",
            "Events the recording library dropped at its memory cap.", 2);
  run_gauge(o, runs, n, "mlprof_run_processes", "Profiles of the run.", 3);
  run_gauge(o, runs, n, "mlprof_run_zones", "Distinct zone names.", 4);
  zones(o, runs, n);
  ranks(o, runs, n);
  int rc = resources(o, runs, n);
  return rc ? rc : o->err;
}
