/* The report as JSON, schema "mlprof.report/1" (docs/json-schema.md). Times
 * are integer nanoseconds; strings from the profile are escaped so the result
 * is valid JSON (and safe inside HTML) whatever they hold. */
#include <math.h>
#include <mlprof.h>
#include <string.h>

#include "../format/wire.h"
#include "export.h"

/* "key": then an unsigned integer, with the comma before it. */
static void field_u64(mlprof__out *o, const char *key, uint64_t v) {
  mlprof__out_printf(o, ",\"%s\":", key);
  mlprof__out_u64(o, v);
}

static void field_f64(mlprof__out *o, const char *key, double v) {
  mlprof__out_printf(o, ",\"%s\":", key);
  mlprof__out_f64(o, v);
}

static void field_str(mlprof__out *o, const char *key, const char *s,
                      size_t n) {
  mlprof__out_printf(o, ",\"%s\":", key);
  mlprof__out_json_str(o, s, n);
}

static void field_cstr(mlprof__out *o, const char *key, const char *s) {
  field_str(o, key, s, strlen(s));
}

/* A signed value where negative means unknown: null. */
static void field_known(mlprof__out *o, const char *key, int64_t v) {
  mlprof__out_printf(o, ",\"%s\":", key);
  if (v < 0)
    mlprof__out_lit(o, "null");
  else
    mlprof__out_i64(o, v);
}

/* A number, or null when has is 0. */
static void field_opt(mlprof__out *o, const char *key, int has, double v) {
  if (has)
    field_f64(o, key, v);
  else
    mlprof__out_printf(o, ",\"%s\":null", key);
}

/* A string, or null. */
static void field_opt_str(mlprof__out *o, const char *key, const char *s) {
  if (s)
    field_cstr(o, key, s);
  else
    mlprof__out_printf(o, ",\"%s\":null", key);
}

static void zone_samples(const mlprof__resources *res,
                         const mlprof__zone_stats *z, mlprof__out *o) {
  const mlprof__zone_samples *zs =
      res ? mlprof__resources_zone(res, z->name, z->name_len) : NULL;
  if (!zs) {
    mlprof__out_lit(o, ",\"samples\":null");
    return;
  }
  mlprof__out_lit(o, ",\"samples\":{\"cpu_pct\":");
  if (zs->has_cpu)
    mlprof__out_f64(o, zs->cpu_pct);
  else
    mlprof__out_lit(o, "null");
  field_opt(o, "gpu_util_pct", zs->has_gpu, zs->gpu_util_pct);
  field_opt(o, "rss_change_bytes", zs->has_rss, zs->rss_change_bytes);
  field_opt(o, "iowait_pct", zs->has_iowait, zs->iowait_pct);
  field_opt(o, "runq_wait_pct", zs->has_runq, zs->runq_wait_pct);
  mlprof__out_lit(o, "}");
}

static void zones(const mlprof__report *r, const mlprof__resources *res,
                  mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"zones\":[");
  for (size_t i = 0; i < r->norder; i++) {
    const mlprof__zone_stats *z = &r->zones[r->order[i]];
    mlprof__out_str(o, i ? ",\n{\"name\":" : "\n{\"name\":");
    mlprof__out_json_str(o, z->name, z->name_len);
    field_cstr(o, "category", mlprof_category_name(z->category));
    field_u64(o, "count", z->count);
    field_u64(o, "total_ns", z->total_ns);
    field_u64(o, "self_ns", z->self_ns);
    field_u64(o, "mean_ns", mlprof__round_ns(z->mean_ns));
    field_u64(o, "std_ns", mlprof__round_ns(z->std_ns));
    field_u64(o, "min_ns", z->min_ns);
    field_u64(o, "max_ns", z->max_ns);
    field_u64(o, "p50_ns", z->p50_ns);
    field_u64(o, "p90_ns", z->p90_ns);
    field_u64(o, "p95_ns", z->p95_ns);
    field_u64(o, "p99_ns", z->p99_ns);
    field_f64(o, "share", z->share);
    mlprof__out_lit(o, ",\"units\":[");
    for (size_t k = 0; k < z->nunits; k++) {
      const mlprof__unit_stats *u = &r->units[z->units[k].unit];
      mlprof__out_str(o, k ? ",{\"unit\":" : "{\"unit\":");
      mlprof__out_json_str(o, u->name, u->name_len);
      field_u64(o, "n", z->units[k].n);
      field_f64(o, "per_s", z->units[k].per_s);
      mlprof__out_lit(o, "}");
    }
    mlprof__out_lit(o, "]");
    zone_samples(res, z, o);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
}

static void processes(const mlprof__report *r, mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"processes\":[");
  for (size_t i = 0; i < r->nprocs; i++) {
    const mlprof__proc_stats *p = &r->procs[i];
    mlprof__out_str(o, i ? ",\n{\"index\":" : "\n{\"index\":");
    mlprof__out_u64(o, i);
    field_u64(o, "pid", p->pid);
    field_u64(o, "ppid", p->ppid);
    field_known(o, "parent", p->parent);
    field_known(o, "rank", p->rank);
    field_known(o, "world_size", p->world_size);
    field_cstr(o, "hostname", p->hostname);
    field_cstr(o, "exe", p->exe);
    field_cstr(o, "cmdline", p->cmdline);
    field_cstr(o, "path", p->path);
    field_cstr(o, "clock", p->clock);
    field_u64(o, "offset_ns", p->offset_ns);
    field_u64(o, "wall_ns", p->wall_ns);
    field_u64(o, "flush_interval_ms", p->flush_interval_ms);
    field_u64(o, "spans", p->spans);
    field_u64(o, "threads", p->threads);
    field_u64(o, "dropped", p->dropped);
    field_u64(o, "unmatched", p->unmatched);
    mlprof__out_str(
        o, p->clean_end ? ",\"clean_end\":true" : ",\"clean_end\":false");
    const char *end = mlprof__proc_end(p);
    field_cstr(o, "end", end);
    field_known(o, "status",
                strcmp(end, "exit") == 0 || strcmp(end, "signal") == 0
                    ? p->read.end_status
                    : -1);
    field_known(o, "exec_into", p->exec_into);
    mlprof__out_lit(o, ",\"read\":{\"chunks\":");
    mlprof__out_u64(o, p->read.chunks);
    field_u64(o, "damaged_chunks", p->read.damaged_chunks);
    field_u64(o, "skipped_bytes", p->read.skipped_bytes);
    field_u64(o, "truncated_bytes", p->read.truncated_bytes);
    if (p->read.problem[0])
      field_cstr(o, "problem", p->read.problem);
    else
      mlprof__out_lit(o, ",\"problem\":null");
    if (p->read_error[0])
      field_cstr(o, "error", p->read_error);
    else
      mlprof__out_lit(o, ",\"error\":null");
    mlprof__out_lit(o, "},\"meta\":{");
    for (size_t k = 0; k < p->nmeta; k++) {
      if (k) mlprof__out_lit(o, ",");
      mlprof__out_json_str(o, p->meta[k].key, p->meta[k].key_len);
      mlprof__out_lit(o, ":");
      mlprof__out_json_str(o, p->meta[k].value, p->meta[k].value_len);
    }
    mlprof__out_lit(o, "}}");
  }
  mlprof__out_lit(o, "]");
}

static void threads(const mlprof__report *r, mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"threads\":[");
  for (size_t i = 0; i < r->nthreads; i++) {
    const mlprof__thread_stats *t = &r->threads[i];
    mlprof__out_str(o, i ? ",\n{\"process\":" : "\n{\"process\":");
    mlprof__out_u64(o, t->proc);
    field_u64(o, "pid", t->pid);
    field_u64(o, "tid", t->tid);
    field_str(o, "name", t->name, t->name_len);
    mlprof__out_str(o, t->tid >= MLPROF__TRACK_TID_BASE ? ",\"track\":true"
                                                        : ",\"track\":false");
    field_u64(o, "spans", t->spans);
    field_u64(o, "busy_ns", t->busy_ns);
    field_u64(o, "dropped", t->dropped);
    field_u64(o, "steps", t->steps);
    field_u64(o, "step_mean_ns", t->step_mean_ns);
    field_u64(o, "step_p50_ns", t->step_p50_ns);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
}

static void counters(const mlprof__report *r, mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"counters\":[");
  for (size_t i = 0; i < r->ncounters; i++) {
    const mlprof__counter_stats *c = &r->counters[i];
    mlprof__out_str(o, i ? ",\n{\"name\":" : "\n{\"name\":");
    mlprof__out_json_str(o, c->name, c->name_len);
    field_u64(o, "count", c->count);
    field_f64(o, "min", c->min);
    field_f64(o, "max", c->max);
    field_f64(o, "mean", c->mean);
    field_f64(o, "last", c->last);
    field_f64(o, "p50", c->p50);
    field_f64(o, "p90", c->p90);
    field_f64(o, "p99", c->p99);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
}

static void units(const mlprof__report *r, mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"units\":[");
  for (size_t i = 0; i < r->nunits; i++) {
    const mlprof__unit_stats *u = &r->units[i];
    mlprof__out_str(o, i ? ",\n{\"name\":" : "\n{\"name\":");
    mlprof__out_json_str(o, u->name, u->name_len);
    field_u64(o, "total", u->total);
    field_u64(o, "outside_zones", u->outside);
    field_f64(o, "per_s", u->per_s);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
}

static void open_zones(const mlprof__report *r, mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"open_zones\":[");
  for (size_t i = 0; i < r->nopen; i++) {
    const mlprof__open_zone *z = &r->open[i];
    mlprof__out_str(o, i ? ",\n{\"name\":" : "\n{\"name\":");
    mlprof__out_json_str(o, z->name, z->name_len);
    field_cstr(o, "category", mlprof_category_name(z->category));
    field_u64(o, "process", z->proc);
    field_u64(o, "pid", r->procs[z->proc].pid);
    field_u64(o, "tid", r->threads[z->thread].tid);
    field_u64(o, "depth", z->depth);
    field_u64(o, "begin_ns", z->begin_ns);
    field_u64(o, "open_ns", z->open_ns);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
}

static void measures(const mlprof__subject_stats *s, mlprof__out *o) {
  mlprof__out_lit(o, ",\"measures\":[");
  for (size_t i = 0; i < s->nm; i++) {
    const mlprof__measure_stats *m = &s->m[i];
    mlprof__out_str(o, i ? ",{\"name\":" : "{\"name\":");
    mlprof__out_json_str(o, m->name, strlen(m->name));
    field_u64(o, "count", m->count);
    field_u64(o, "absent_count", m->absent_count);
    field_opt(o, "mean", m->count > 0, m->mean);
    field_opt(o, "min", m->count > 0, m->min);
    field_opt(o, "max", m->count > 0, m->max);
    field_opt(o, "first", m->count > 0, m->first);
    field_opt(o, "last", m->count > 0, m->last);
    field_opt_str(o, "absent", m->absent);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
}

static void subject_fields(const mlprof__subject_stats *s, mlprof__out *o) {
  field_cstr(o, "hostname", s->hostname);
  field_u64(o, "profile", s->profile);
  field_known(o, "process", s->process);
  field_u64(o, "rows", s->rows);
  field_u64(o, "first_ns", s->first_ns);
  field_u64(o, "last_ns", s->last_ns);
  measures(s, o);
}

static void resources(const mlprof__resources *res, mlprof__out *o) {
  if (!res || !res->sampled) {
    mlprof__out_lit(o, ",\n\"resources\":null");
    return;
  }
  mlprof__out_lit(o, ",\n\"resources\":{\"sources\":[");
  for (size_t i = 0; i < res->nsources; i++) {
    const mlprof__source_status *st = &res->sources[i];
    mlprof__out_str(o, i ? ",\n{\"name\":" : "\n{\"name\":");
    mlprof__out_json_str(o, st->name, strlen(st->name));
    mlprof__out_str(
        o, st->available ? ",\"available\":true" : ",\"available\":false");
    field_opt_str(o, "reason", st->available ? NULL : st->reason);
    field_cstr(o, "hostname", st->hostname);
    field_u64(o, "profile", st->profile);
    field_u64(o, "profiles", st->profiles);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
  field_u64(o, "gpus", res->ngpus);
  field_opt_str(o, "gpu_absent", res->gpu_absent);
  mlprof__out_lit(o, ",\n\"subjects\":[");
  for (size_t i = 0; i < res->nsubjects; i++) {
    const mlprof__subject_stats *s = &res->subjects[i];
    mlprof__out_str(o, i ? ",\n{\"subject\":" : "\n{\"subject\":");
    mlprof__out_json_str(o, mlprof__subject_name(s->subject),
                         strlen(mlprof__subject_name(s->subject)));
    field_u64(o, "id", s->id);
    field_cstr(o, "label", s->label);
    subject_fields(s, o);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "],\n\"tree\":");
  if (res->tree.nm) {
    mlprof__out_lit(o, "{\"processes\":");
    mlprof__out_u64(o, res->tree_processes);
    field_u64(o, "ticks", res->tree.rows);
    measures(&res->tree, o);
    mlprof__out_lit(o, "}");
  } else {
    mlprof__out_lit(o, "null");
  }
  mlprof__out_lit(o, ",\n\"energy\":{\"cpu_j\":");
  if (res->has_cpu_energy)
    mlprof__out_f64(o, res->cpu_energy_j);
  else
    mlprof__out_lit(o, "null");
  field_opt_str(o, "cpu_absent",
                res->has_cpu_energy ? NULL : res->cpu_energy_absent);
  field_cstr(o, "cpu_method", res->cpu_energy_method);
  field_opt(o, "gpu_j", res->has_gpu_energy, res->gpu_energy_j);
  field_opt_str(o, "gpu_absent",
                res->has_gpu_energy ? NULL : res->gpu_energy_absent);
  field_cstr(o, "gpu_method", res->gpu_energy_method);
  field_opt(o, "carbon_g", res->has_cpu_energy || res->has_gpu_energy,
            res->carbon_g);
  field_f64(o, "intensity_g_per_kwh", res->intensity_g_per_kwh);
  field_cstr(o, "intensity_source", res->intensity_source);
  mlprof__out_lit(o, "}}");
}

/* A number, or null when it is NaN (not known). */
static void field_num(mlprof__out *o, const char *key, double v) {
  field_opt(o, key, !isnan(v), v);
}

/* A zone name, or null. */
static void field_zone(mlprof__out *o, const char *key, const char *z,
                       size_t n) {
  if (z)
    field_str(o, key, z, n);
  else
    mlprof__out_printf(o, ",\"%s\":null", key);
}

static void steps(const mlprof__steps *s, mlprof__out *o) {
  if (s->source == MLPROF__STEPS_NONE) {
    mlprof__out_lit(o, ",\n\"steps\":null");
    return;
  }
  mlprof__out_lit(o, ",\n\"steps\":{\"source\":");
  mlprof__out_str(o,
                  s->source == MLPROF__STEPS_MARKS ? "\"marks\"" : "\"zone\"");
  field_zone(o, "zone", s->zone, s->zone_len);
  field_u64(o, "count", s->count);
  field_u64(o, "threads", s->threads);
  field_u64(o, "total_ns", s->total_ns);
  field_u64(o, "mean_ns", mlprof__round_ns(s->mean_ns));
  field_u64(o, "p50_ns", s->p50_ns);
  field_u64(o, "p90_ns", s->p90_ns);
  mlprof__out_lit(o, ",\"parts\":[");
  for (int k = 0; k < MLPROF__NPARTS; k++) {
    mlprof__out_str(o, k ? ",{\"part\":" : "{\"part\":");
    mlprof__out_json_str(o, mlprof__part_name(k), strlen(mlprof__part_name(k)));
    field_u64(o, "total_ns", s->part_ns[k]);
    field_u64(o, "per_step_ns",
              s->count
                  ? mlprof__round_ns((double)s->part_ns[k] / (double)s->count)
                  : 0);
    field_f64(o, "share", s->share[k]);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]}");
}

static void findings(const mlprof__findings *f, mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"findings_note\":");
  if (f->note)
    mlprof__out_json_str(o, f->note, strlen(f->note));
  else
    mlprof__out_lit(o, "null");
  mlprof__out_lit(o, ",\n\"findings\":[");
  for (size_t i = 0; i < f->nfindings; i++) {
    const mlprof__finding *x = &f->findings[i];
    mlprof__out_str(o, i ? ",\n{\"rank\":" : "\n{\"rank\":");
    mlprof__out_u64(o, i + 1);
    field_cstr(o, "type", x->type);
    field_zone(o, "zone", x->zone, x->zone_len);
    field_opt_str(o, "flagged", x->flagged);
    field_f64(o, "severity", x->severity);
    field_cstr(o, "summary", x->summary);
    mlprof__out_lit(o, ",\"evidence\":{");
    for (size_t k = 0; k < x->nev; k++) {
      if (k) mlprof__out_lit(o, ",");
      mlprof__out_json_str(o, x->ev[k].key, strlen(x->ev[k].key));
      mlprof__out_lit(o, ":");
      mlprof__out_f64(o, x->ev[k].value);
    }
    mlprof__out_lit(o, "}");
    field_cstr(o, "recommendation", x->recommendation);
    field_opt_str(o, "note", x->note);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
}

static void leaks(const mlprof__findings *f, mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"leak_series\":");
  mlprof__out_u64(o, f->leak_series);
  mlprof__out_lit(o, ",\"leak_thresholds\":{\"min_mb\":");
  mlprof__out_f64(o, f->opts.leak_min_mb);
  field_f64(o, "min_mb_per_step", f->opts.leak_min_mb_per_step);
  field_f64(o, "min_mb_per_min", f->opts.leak_min_mb_per_min);
  mlprof__out_lit(o, "},\n\"leaks\":[");
  for (size_t i = 0; i < f->nleaks; i++) {
    const mlprof__leak *lk = &f->leaks[i];
    mlprof__out_str(o, i ? ",\n{\"measure\":" : "\n{\"measure\":");
    mlprof__out_json_str(o, lk->measure, strlen(lk->measure));
    field_cstr(o, "subject", mlprof__subject_name(lk->subject));
    field_u64(o, "id", lk->id);
    field_cstr(o, "hostname", lk->hostname);
    field_known(o, "process", lk->process);
    field_cstr(o, "axis", lk->by_steps ? "steps" : "time");
    field_num(o, "slope_mb_per_step", lk->slope_mb_per_step);
    field_num(o, "slope_mb_per_min", lk->slope_mb_per_min);
    field_num(o, "growth_mb", lk->growth_mb);
    field_num(o, "trend_z", lk->trend_z);
    field_u64(o, "begin_ns", lk->begin_ns);
    field_u64(o, "end_ns", lk->end_ns);
    field_num(o, "begin_step", lk->begin_step);
    field_num(o, "end_step", lk->end_step);
    field_u64(o, "points", lk->points);
    mlprof__out_lit(o, ",\"zones\":[");
    for (size_t k = 0; k < lk->nzones; k++) {
      const mlprof__leak_zone *z = &lk->zones[k];
      mlprof__out_str(o, k ? ",{\"name\":" : "{\"name\":");
      mlprof__out_json_str(o, z->name, z->name_len);
      field_u64(o, "spans", z->spans);
      field_u64(o, "positive", z->positive);
      field_f64(o, "mean_change_bytes", z->mean_change_bytes);
      mlprof__out_lit(o, "}");
    }
    mlprof__out_lit(o, "]}");
  }
  mlprof__out_lit(o, "]");
}

/* Kernel time by the zone that launched it (docs/gpu.md); only where CUDA
 * activity with correlation ids was captured. */
static void gpu_launched(const mlprof__findings *f, mlprof__out *o) {
  if (!f->nlaunched && !f->launch_unattributed) return; /* no CUPTI launches */
  mlprof__out_lit(o, ",\n\"gpu_launched\":{\"unattributed_kernels\":");
  mlprof__out_u64(o, f->launch_unattributed);
  field_u64(o, "unattributed_ns", f->launch_unattributed_ns);
  mlprof__out_lit(o, ",\"zones\":[");
  for (size_t i = 0; i < f->nlaunched; i++) {
    const mlprof__gpu_launched *l = &f->launched[i];
    mlprof__out_str(o, i ? ",\n{\"zone\":" : "\n{\"zone\":");
    mlprof__out_json_str(o, l->zone, l->zone_len);
    field_u64(o, "kernels", l->kernels);
    field_u64(o, "gpu_ns", l->gpu_ns);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]}");
}

static void slo(const mlprof__findings *f, mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"slo\":[");
  for (size_t i = 0; i < f->nslo; i++) {
    const mlprof__slo_result *s = &f->slo[i];
    /* A gauge's objective: its name as "gauge", its values in its unit
     * (objective, p50...), no _ns fields. */
    mlprof__out_str(o, i ? ",\n{" : "\n{");
    mlprof__out_str(
        o, s->gauge ? "\"zone\":null,\"gauge\":" : "\"gauge\":null,\"zone\":");
    mlprof__out_json_str(o, s->zone, s->zone_len);
    if (s->gauge)
      field_f64(o, "objective", s->objective);
    else
      field_u64(o, "objective_ns", s->objective_ns);
    field_u64(o, "count", s->count);
    field_u64(o, "over", s->over);
    field_f64(o, "share_over", s->share_over);
    if (s->gauge) {
      field_f64(o, "p50", s->count ? s->p50 : NAN);
      field_f64(o, "p95", s->count ? s->p95 : NAN);
      field_f64(o, "p99", s->count ? s->p99 : NAN);
      field_f64(o, "max", s->count ? s->max : NAN);
    } else {
      field_u64(o, "p50_ns", s->p50_ns);
      field_u64(o, "p95_ns", s->p95_ns);
      field_u64(o, "p99_ns", s->p99_ns);
      field_u64(o, "max_ns", s->max_ns);
    }
    field_u64(o, "window_ns", s->window_ns);
    field_u64(o, "windows_missed", s->windows_missed);
    mlprof__out_lit(o, ",\"windows\":[");
    for (size_t k = 0; k < s->nwindows; k++) {
      const mlprof__slo_window *w = &s->windows[k];
      mlprof__out_str(o, k ? ",\n{\"start_ns\":" : "\n{\"start_ns\":");
      mlprof__out_u64(o, w->start_ns);
      field_u64(o, "count", w->count);
      field_u64(o, "over", w->over);
      field_f64(o, "share_over",
                w->count ? (double)w->over / (double)w->count : 0);
      if (s->gauge) {
        field_f64(o, "p50", w->p50);
        field_f64(o, "p95", w->p95);
        field_f64(o, "p99", w->p99);
      } else {
        field_u64(o, "p50_ns", w->p50_ns);
        field_u64(o, "p95_ns", w->p95_ns);
        field_u64(o, "p99_ns", w->p99_ns);
      }
      mlprof__out_lit(o, "}");
    }
    mlprof__out_lit(o, "]}");
  }
  mlprof__out_lit(o, "]");
}

static void distributed(const mlprof__dist *d, mlprof__out *o) {
  if (!d->nranks) {
    mlprof__out_lit(o, ",\n\"distributed\":null");
    return;
  }
  static const char *const clocks[] = {"unknown", "measured", "narrowed",
                                       "collectives"};
  mlprof__out_lit(o, ",\n\"distributed\":{\"ranks\":[");
  for (size_t r = 0; r < d->nranks; r++) {
    const mlprof__dist_rank *x = &d->ranks[r];
    mlprof__out_printf(o, "%s{\"rank\":", r ? ",\n" : "\n");
    mlprof__out_i64(o, x->rank);
    field_opt_str(o, "host", x->hostname);
    field_cstr(o, "clock", clocks[x->clock]);
    field_f64(o, "offset_ns", x->offset_ns);
    field_f64(o, "drift", x->drift);
    field_num(o, "uncertainty_ns",
              isfinite(x->uncertainty_ns) ? x->uncertainty_ns : NAN);
    field_u64(o, "steps", x->steps);
    field_u64(o, "run_ns", x->run_ns);
    field_u64(o, "compute_ns", x->compute_ns);
    field_u64(o, "exposed_comm_ns", x->exposed_ns);
    field_u64(o, "wait_ns", x->wait_ns);
    field_u64(o, "p2p_wait_ns", x->p2p_wait_ns);
    field_u64(o, "async_comm_ns", x->async_ns);
    field_u64(o, "overlap_ns", x->overlap_ns);
    field_f64(o, "overlap_share", x->overlap_share);
    field_u64(o, "straggler_steps", x->straggler_steps);
    field_u64(o, "waits_within_uncertainty", x->waits_uncertain);
    field_u64(o, "host_syncs", x->host_syncs);
    field_u64(o, "host_sync_ns", x->host_sync_ns);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "],\n\"steps\":[");
  for (size_t k = 0; k < d->nsteps; k++) {
    const mlprof__dist_step *s = &d->steps[k];
    mlprof__out_printf(o, "%s{\"step\":", k ? ",\n" : "\n");
    mlprof__out_u64(o, s->index);
    mlprof__out_lit(o, ",\"straggler\":");
    mlprof__out_i64(o, s->straggler);
    field_u64(o, "delay_ns", s->delay_ns);
    field_f64(o, "imbalance", s->imbalance);
    field_u64(o, "mean_compute_ns", s->mean_compute_ns);
    field_u64(o, "max_compute_ns", s->max_compute_ns);
    field_u64(o, "wait_ns", s->wait_ns);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "],\n\"collectives\":[");
  for (size_t k = 0; k < d->ncolls; k++) {
    const mlprof__dist_coll *c = &d->colls[k];
    mlprof__out_printf(o, "%s{\"op\":", k ? ",\n" : "\n");
    mlprof__out_json_str(o, mlprof__op_name(c->op),
                         strlen(mlprof__op_name(c->op)));
    field_u64(o, "size_bytes", c->size_bytes);
    field_u64(o, "ranks", c->ranks);
    field_u64(o, "count", c->count);
    field_u64(o, "bytes", c->bytes);
    field_u64(o, "time_ns", c->time_ns);
    field_u64(o, "wait_ns", c->wait_ns);
    field_u64(o, "transfer_ns", c->transfer_ns);
    field_num(o, "algbw_bytes_per_s", c->algbw);
    field_num(o, "busbw_bytes_per_s", c->busbw);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "],\n\"links\":[");
  for (size_t k = 0; k < d->nlinks; k++) {
    const mlprof__dist_link *l = &d->links[k];
    mlprof__out_printf(o, "%s{\"src\":", k ? ",\n" : "\n");
    mlprof__out_i64(o, l->src);
    mlprof__out_lit(o, ",\"dst\":");
    mlprof__out_i64(o, l->dst);
    field_u64(o, "count", l->count);
    field_u64(o, "bytes", l->bytes);
    field_u64(o, "time_ns", l->time_ns);
    field_u64(o, "matched", l->matched);
    field_u64(o, "wait_ns", l->wait_ns);
    field_num(o, "bandwidth_bytes_per_s", l->bandwidth);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "],\"slowest_link\":");
  if (d->slowest_link < 0)
    mlprof__out_lit(o, "null");
  else
    mlprof__out_i64(o, d->slowest_link);
  field_u64(o, "matched_collectives", d->matched);
  field_u64(o, "unmatched_operations", d->unmatched);
  field_f64(o, "load_balance", d->load_balance);
  field_f64(o, "comm_efficiency", d->comm_efficiency);
  field_f64(o, "parallel_efficiency", d->parallel_efficiency);
  mlprof__out_lit(o, ",\"straggler\":");
  if (d->straggler < 0) {
    mlprof__out_lit(o, "null");
  } else {
    mlprof__out_lit(o, "{\"rank\":");
    mlprof__out_i64(o, d->straggler);
    field_u64(o, "delay_ns", mlprof__round_ns(d->delay_ns));
    mlprof__out_lit(o, ",\"zones\":[");
    for (size_t k = 0; k < d->nzones; k++) {
      mlprof__out_str(o, k ? ",{\"zone\":" : "{\"zone\":");
      mlprof__out_json_str(o, d->zones[k].name, strlen(d->zones[k].name));
      field_u64(o, "straggler_ns", d->zones[k].straggler_ns);
      field_u64(o, "others_mean_ns", mlprof__round_ns(d->zones[k].others_ns));
      field_f64(o, "extra_per_step_ns",
                ((double)d->zones[k].straggler_ns - d->zones[k].others_ns) /
                    (double)d->nsteps);
      mlprof__out_str(o, d->zones[k].outside ? ",\"outside_zones\":true"
                                             : ",\"outside_zones\":false");
      mlprof__out_lit(o, "}");
    }
    mlprof__out_lit(o, "]}");
  }
  mlprof__out_lit(o, "}");
}

/* The report; page: for the HTML page (mlprof__export_json_page). */
static int report_json(const mlprof__report *r, const mlprof__resources *res,
                       const mlprof__findings *f, int page, mlprof__out *o) {
  mlprof__out_printf(o,
                     "{\"schema\":\"mlprof.report/1\",\"generator\":\"mlprof "
                     "%d.%d.%d\"",
                     MLPROF_VERSION_MAJOR, MLPROF_VERSION_MINOR,
                     MLPROF_VERSION_PATCH);
  field_u64(o, "wall_ns", r->wall_ns);
  field_u64(o, "spans", r->spans);
  field_u64(o, "dropped", r->dropped);
  field_cstr(o, "sort", mlprof__sort_key_name(r->sort));
  field_u64(o, "zones_total", r->nzones);
  mlprof__out_lit(o, ",\n\"warnings\":[");
  for (size_t i = 0; i < r->nwarnings; i++) {
    mlprof__out_str(o, i ? ",\n" : "\n");
    mlprof__out_json_str(o, r->warnings[i], strlen(r->warnings[i]));
  }
  mlprof__out_lit(o, "]");
  zones(r, res, o);
  processes(r, o);
  threads(r, o);
  counters(r, o);
  units(r, o);
  open_zones(r, o);
  mlprof__export_lines_json(r, o);
  mlprof__export_memory_json(r, page, o);
  mlprof__export_hot_json(r, o);
  resources(res, o);
  if (f) {
    steps(&f->steps, o);
    findings(f, o);
    leaks(f, o);
    slo(f, o);
    gpu_launched(f, o);
    distributed(&f->dist, o);
  }
  mlprof__out_lit(o, "\n}\n");
  return o->err;
}

int mlprof__export_json(const mlprof__report *r, const mlprof__resources *res,
                        const mlprof__findings *f, mlprof__out *o) {
  return report_json(r, res, f, 0, o);
}

int mlprof__export_json_page(const mlprof__report *r,
                             const mlprof__resources *res,
                             const mlprof__findings *f, mlprof__out *o) {
  return report_json(r, res, f, 1, o);
}

static void json_indices(mlprof__out *o, const size_t *v, size_t n) {
  mlprof__out_lit(o, "[");
  for (size_t i = 0; i < n; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_u64(o, v[i]);
  }
  mlprof__out_lit(o, "]");
}

int mlprof__export_compare_json(const mlprof__compare *c, mlprof__out *o) {
  mlprof__out_printf(o,
                     "{\"schema\":\"mlprof.compare/1\",\"generator\":\"mlprof "
                     "%s\",\n\"runs\":[",
                     mlprof_version());
  for (size_t i = 0; i < c->nruns; i++) {
    const mlprof__compare_run *r = &c->runs[i];
    mlprof__out_printf(o, "%s\n{\"index\":%zu,\"label\":", i ? "," : "", i);
    mlprof__out_json_str(o, r->label, strlen(r->label));
    mlprof__out_lit(o, ",\"path\":");
    mlprof__out_json_str(o, r->path, strlen(r->path));
    mlprof__out_lit(o, ",\"wall_ns\":");
    mlprof__out_u64(o, r->wall_ns);
    mlprof__out_printf(o, ",\"repeats\":%zu", r->repeats);
    mlprof__out_lit(o, ",\"spans\":");
    mlprof__out_u64(o, r->spans);
    mlprof__out_lit(o, ",\"busy_ns\":");
    mlprof__out_u64(o, r->busy_ns);
    mlprof__out_lit(o, ",\"step_intervals\":");
    mlprof__out_u64(o, r->intervals);
    mlprof__out_lit(o, ",\"step_mean_ns\":");
    mlprof__out_f64(o, r->step_mean_ns);
    mlprof__out_lit(o, ",\"step_p50_ns\":");
    mlprof__out_f64(o, r->step_p50_ns);
    mlprof__out_lit(o, ",\"step_p50_interval_ns\":");
    if (isnan(r->step_lo_ns)) {
      mlprof__out_lit(o, "null");
    } else {
      mlprof__out_lit(o, "[");
      mlprof__out_f64(o, r->step_lo_ns);
      mlprof__out_lit(o, ",");
      mlprof__out_f64(o, r->step_hi_ns);
      mlprof__out_lit(o, "]");
    }
    mlprof__out_printf(o, ",\"indistinct\":%s",
                       r->indistinct ? "true" : "false");
    mlprof__out_lit(o, ",\"units_per_s\":");
    mlprof__out_f64(o, r->per_s);
    mlprof__out_printf(o,
                       ",\"rank_total\":%zu,\"rank_step\":%zu,\"warnings\":[",
                       r->rank_total, r->rank_step);
    for (size_t w = 0; w < r->report.nwarnings; w++) {
      if (w) mlprof__out_lit(o, ",");
      mlprof__out_json_str(o, r->report.warnings[w],
                           strlen(r->report.warnings[w]));
    }
    mlprof__out_lit(o, "]}");
  }
  mlprof__out_lit(o, "],\n\"ranking\":{\"total\":");
  json_indices(o, c->by_total, c->nruns);
  mlprof__out_lit(o, ",\"step\":");
  json_indices(o, c->by_step, c->nruns);
  mlprof__out_printf(o, ",\"step_basis\":\"%s\",\"unit\":",
                     mlprof__compare_basis_name(c->step_basis));
  if (c->unit)
    mlprof__out_json_str(o, c->unit, strlen(c->unit));
  else
    mlprof__out_lit(o, "null");
  mlprof__out_printf(o,
                     "},\n\"fastest\":{\"run\":%zu,"
                     "\"slowest\":%zu,\"speedup_vs_slowest\":",
                     c->best, c->worst);
  mlprof__out_f64(o, c->best_vs_slowest);
  mlprof__out_lit(o, ",\"speedup_vs_first\":");
  mlprof__out_f64(o, c->best_vs_first);
  char line[1024];
  mlprof__compare_recommendation(c, line, sizeof line);
  mlprof__out_lit(o, "},\n\"recommendation\":");
  mlprof__out_json_str(o, line, strlen(line));
  mlprof__out_lit(o, ",\n\"zones\":[");
  for (size_t k = 0; k < c->nzones; k++) {
    const mlprof__compare_zone *z = &c->zones[k];
    mlprof__out_str(o, k ? ",\n{\"name\":" : "\n{\"name\":");
    mlprof__out_json_str(o, z->name, z->name_len);
    mlprof__out_printf(o,
                       ",\"category\":\"%s\",\"fastest\":%zu,\"tie\":%s,"
                       "\"slowest\":%zu,\"runs\":[",
                       mlprof_category_name(z->category), z->fastest,
                       z->tie ? "true" : "false", z->slowest);
    for (size_t i = 0; i < c->nruns; i++) {
      const mlprof__zone_stats *s = z->stats[i];
      if (i) mlprof__out_lit(o, ",");
      if (!s) {
        mlprof__out_lit(o, "null");
        continue;
      }
      mlprof__out_lit(o, "{\"count\":");
      mlprof__out_u64(o, s->count);
      mlprof__out_lit(o, ",\"total_ns\":");
      mlprof__out_u64(o, s->total_ns);
      mlprof__out_lit(o, ",\"mean_ns\":");
      mlprof__out_u64(o, mlprof__round_ns(s->mean_ns));
      mlprof__out_lit(o, ",\"p50_ns\":");
      mlprof__out_u64(o, s->p50_ns);
      mlprof__out_lit(o, ",\"p99_ns\":");
      mlprof__out_u64(o, s->p99_ns);
      mlprof__out_lit(o, ",\"speedup_vs_slowest\":");
      mlprof__out_f64(o, z->vs_slowest[i]);
      mlprof__out_lit(o, ",\"speedup_vs_first\":");
      mlprof__out_f64(o, z->vs_first[i]);
      mlprof__out_lit(o, "}");
    }
    mlprof__out_lit(o, "]}");
  }
  mlprof__out_lit(o, "]}\n");
  return o->err;
}
