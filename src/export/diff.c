/* mlprof diff's outputs: text, JSON (schema mlprof.diff/1,
 * docs/json-schema.md) and JUnit XML. */
#include "diff.h"

#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <string.h>

#include "escape.h"
#include "export.h"
#include "table.h"

/* ---- memory (mlprof__memdiff) ------------------------------------------- */

/* Whether a memory item is shown in text and JUnit: processes and zones
 * always, sites when they changed (the JSON lists them all). */
static int mem_shown(const mlprof__memdiff_item *it) {
  return it->kind == MLPROF__MEMDIFF_PEAK || it->kind == MLPROF__MEMDIFF_ZONE ||
         it->verdict != MLPROF__MEMDIFF_UNCHANGED;
}

/* What the item is, for a person: "pid A -> B", the zone, or the site's
 * zone, Python lines and native frame. */
static void mem_where(mlprof__out *o, const mlprof__memdiff_item *it,
                      size_t max) {
  if (it->kind == MLPROF__MEMDIFF_PEAK) {
    mlprof__out_printf(o, "process %zu: pid ", it->proc + 1);
    for (int k = 0; k < 2; k++) {
      if (k) mlprof__out_lit(o, " -> ");
      if (it->pid[k])
        mlprof__out_u64(o, it->pid[k]);
      else
        mlprof__out_lit(o, "-");
    }
    return;
  }
  if (it->zone_len)
    mlprof__out_name(o, it->zone, it->zone_len, 40);
  else
    mlprof__out_lit(o, "(no zone)");
  if (it->kind == MLPROF__MEMDIFF_ZONE) return;
  const char *w = it->python && it->python[0] ? it->python : NULL;
  mlprof__out_lit(o, ": ");
  if (w) mlprof__out_name(o, w, strlen(w), max);
  if (it->native && it->native[0]) {
    mlprof__out_str(o, w ? " [" : "[");
    mlprof__out_name(o, it->native, strlen(it->native), 40);
    mlprof__out_lit(o, "]");
  }
  if (!w && !(it->native && it->native[0])) mlprof__out_lit(o, "-");
}

/* "381 MB" or "381 MB ± 2.10 MB" (one standard error). */
static void fmt_estimate(char *b, size_t len, double v, double se) {
  char x[32], e[32];
  mlprof__fmt_bytes(x, sizeof x, v);
  if (se > 0) {
    mlprof__fmt_bytes(e, sizeof e, se);
    snprintf(b, len, "%s +/- %s", x, e);
  } else {
    snprintf(b, len, "%s", x);
  }
}

static void fmt_mem_change(char *b, size_t len,
                           const mlprof__memdiff_item *it) {
  if (it->value[0] > 0)
    snprintf(b, len, "%+.1f%%", (it->value[1] / it->value[0] - 1) * 100);
  else
    snprintf(b, len, "%s", it->value[1] > 0 ? "+inf" : "-");
}

static void fmt_mem_p(char *b, size_t len, double p) {
  if (p < 1e-300)
    snprintf(b, len, "<1e-300");
  else
    snprintf(b, len, "%.2g", p);
}

static void json_mem(mlprof__out *o, const mlprof__memdiff *m) {
  if (!m->compared) {
    mlprof__out_lit(o, "null");
    return;
  }
  mlprof__out_printf(o, "{\"exact\":[%s,%s],\"sampling_mean_bytes\":[",
                     m->exact[0] ? "true" : "false",
                     m->exact[1] ? "true" : "false");
  mlprof__out_f64(o, m->mean[0]);
  mlprof__out_lit(o, ",");
  mlprof__out_f64(o, m->mean[1]);
  mlprof__out_printf(o, "],\"min_share\":%g,\"regression\":%s,\"summary\":{",
                     MLPROF__MEMDIFF_MIN_SHARE,
                     m->regression ? "true" : "false");
  for (int v = 0; v < MLPROF__MEMDIFF_VERDICTS; v++)
    mlprof__out_printf(o, "%s\"%s\":%zu", v ? "," : "",
                       mlprof__memdiff_verdict_name((mlprof__memdiff_verdict)v),
                       m->count[v]);
  mlprof__out_lit(o, "},\"items\":[");
  for (size_t i = 0; i < m->nitems; i++) {
    const mlprof__memdiff_item *it = &m->items[i];
    mlprof__out_printf(o, "%s\n{\"kind\":\"%s\",\"verdict\":\"%s\"",
                       i ? "," : "", mlprof__memdiff_kind_name(it->kind),
                       mlprof__memdiff_verdict_name(it->verdict));
    if (it->kind != MLPROF__MEMDIFF_ZONE) {
      mlprof__out_printf(o, ",\"process\":%zu,\"pid_base\":", it->proc);
      mlprof__out_u64(o, it->pid[0]);
      mlprof__out_lit(o, ",\"pid_new\":");
      mlprof__out_u64(o, it->pid[1]);
    }
    if (it->kind != MLPROF__MEMDIFF_PEAK) {
      mlprof__out_lit(o, ",\"zone\":");
      mlprof__out_json_str(o, it->zone, it->zone_len);
    }
    if (it->kind == MLPROF__MEMDIFF_SITE_PEAK ||
        it->kind == MLPROF__MEMDIFF_SITE_STEP) {
      const char *py = it->python ? it->python : "",
                 *nat = it->native ? it->native : "";
      mlprof__out_lit(o, ",\"python\":");
      mlprof__out_json_str(o, py, strlen(py));
      mlprof__out_lit(o, ",\"native\":");
      mlprof__out_json_str(o, nat, strlen(nat));
    }
    if (it->kind == MLPROF__MEMDIFF_SITE_STEP)
      mlprof__out_printf(o, ",\"per_step\":%s",
                         it->per_step ? "true" : "false");
    static const char *const keys[] = {
        ",\"base_bytes\":",   ",\"new_bytes\":",  ",\"base_se_bytes\":",
        ",\"new_se_bytes\":", ",\"z\":",          ",\"p\":",
        ",\"p_holm\":",       ",\"floor_bytes\":"};
    double vals[] = {it->value[0], it->value[1], it->se[0],  it->se[1],
                     it->z,        it->p,        it->p_holm, it->floor};
    for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
      mlprof__out_str(o, keys[k]);
      mlprof__out_f64(o, vals[k]);
    }
    mlprof__out_lit(o, ",\"change\":");
    mlprof__out_f64(o,
                    it->value[0] > 0 ? it->value[1] / it->value[0] - 1 : NAN);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]}");
}

/* The memory section of the text: a line on how the runs were recorded and
 * judged, a table, the counts. */
static int text_mem(mlprof__out *o, const mlprof__memdiff *m,
                    const mlprof__diff_options *opt) {
  if (!m->compared) return 0;
  char how[2][64];
  for (int k = 0; k < 2; k++) {
    char b[32];
    mlprof__fmt_bytes(b, sizeof b, m->mean[k]);
    if (m->exact[k])
      snprintf(how[k], sizeof how[k], "every allocation");
    else if (m->mean[k] > 0)
      snprintf(how[k], sizeof how[k], "sampled, one in %s", b);
    else
      snprintf(how[k], sizeof how[k], "sampled");
  }
  mlprof__out_printf(o,
                     "\nMemory (BASE %s, NEW %s; estimates +/- one standard "
                     "error of their sampling): z test on the difference, "
                     "Holm-corrected over %zu figures, alpha %g; a change "
                     "counts beyond %g%% and %g%% of the peak (of the bytes "
                     "a step for sites a step)\n",
                     how[0], how[1], m->nitems, opt->alpha,
                     opt->threshold * 100, MLPROF__MEMDIFF_MIN_SHARE * 100);
  static const char *const heads[] = {"memory", "verdict", "base", "new",
                                      "change", "p",       "what"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "llrrrrl")) return MLPROF_ENOMEM;
  size_t hidden = 0;
  for (size_t i = 0; i < m->nitems; i++) {
    const mlprof__memdiff_item *it = &m->items[i];
    if (!mem_shown(it)) {
      hidden++;
      continue;
    }
    char a[80], b[80], c[32], p[32];
    mlprof__table_cell(&t, "%s",
                       it->kind == MLPROF__MEMDIFF_SITE_STEP && !it->per_step
                           ? "site a run"
                           : mlprof__memdiff_kind_name(it->kind));
    mlprof__table_cell(&t, "%s", mlprof__memdiff_verdict_name(it->verdict));
    fmt_estimate(a, sizeof a, it->value[0], it->se[0]);
    fmt_estimate(b, sizeof b, it->value[1], it->se[1]);
    fmt_mem_change(c, sizeof c, it);
    fmt_mem_p(p, sizeof p, it->p_holm);
    mlprof__table_cell(&t, "%s", a);
    mlprof__table_cell(&t, "%s", b);
    mlprof__table_cell(&t, "%s", c);
    mlprof__table_cell(&t, "%s", p);
    mlprof__table_begin(&t);
    mem_where(&t.text, it, 100);
    mlprof__table_end(&t);
  }
  int rc = mlprof__table_print(&t, o);
  mlprof__out_printf(
      o, "%zu grew, %zu shrank, %zu unchanged", m->count[MLPROF__MEMDIFF_GREW],
      m->count[MLPROF__MEMDIFF_SHRANK], m->count[MLPROF__MEMDIFF_UNCHANGED]);
  if (hidden)
    mlprof__out_printf(o,
                       " (%zu unchanged sites not shown; --format json "
                       "lists them)",
                       hidden);
  mlprof__out_lit(o, "\n");
  return rc;
}

static void json_run(mlprof__out *o, const char *path,
                     const mlprof__report *r) {
  mlprof__out_lit(o, "{\"path\":");
  mlprof__out_json_str(o, path, strlen(path));
  mlprof__out_lit(o, ",\"wall_ns\":");
  mlprof__out_u64(o, r->wall_ns);
  mlprof__out_lit(o, ",\"spans\":");
  mlprof__out_u64(o, r->spans);
  mlprof__out_lit(o, ",\"zones\":");
  mlprof__out_u64(o, r->nzones);
  mlprof__out_lit(o, ",\"warnings\":[");
  for (size_t i = 0; i < r->nwarnings; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_json_str(o, r->warnings[i], strlen(r->warnings[i]));
  }
  mlprof__out_lit(o, "]}");
}

static void json_side(mlprof__out *o, const mlprof__zone_stats *z,
                      double median) {
  if (!z) {
    mlprof__out_lit(o, "null");
    return;
  }
  mlprof__out_lit(o, "{\"count\":");
  mlprof__out_u64(o, z->count);
  mlprof__out_lit(o, ",\"total_ns\":");
  mlprof__out_u64(o, z->total_ns);
  mlprof__out_lit(o, ",\"mean_ns\":");
  mlprof__out_u64(o, mlprof__round_ns(z->mean_ns));
  mlprof__out_lit(o, ",\"median_ns\":");
  mlprof__out_f64(o, median);
  mlprof__out_lit(o, ",\"p99_ns\":");
  mlprof__out_u64(o, z->p99_ns);
  mlprof__out_lit(o, "}");
}

static void json_test(mlprof__out *o, const mlprof__mwu *t,
                      const mlprof__diff_zone *z) {
  double pairs = (double)z->base->count * (double)z->next->count;
  mlprof__out_printf(
      o, "{\"method\":\"%s\",\"u\":", t->exact ? "exact" : "normal");
  mlprof__out_f64(o, t->u);
  mlprof__out_lit(o, ",\"z\":");
  mlprof__out_f64(o, t->z);
  mlprof__out_lit(o, ",\"p\":");
  mlprof__out_f64(o, t->p);
  mlprof__out_lit(o, ",\"p_longer\":");
  mlprof__out_f64(o, t->u / pairs);
  mlprof__out_lit(o, "}");
}

/* What a zone's and the step's entries share: verdict, too_few, likely,
 * both sides, ratio, change and test. */
static void json_verdict(mlprof__out *o, const mlprof__diff_zone *z,
                         const mlprof__diff_options *opt) {
  const char *likely = mlprof__diff_likely(z, opt);
  mlprof__out_printf(
      o,
      "\"verdict\":\"%s\",\"machine_explains\":%s,"
      "\"explained_by\":%s,\"too_few\":%s,\"runs_vary\":%s,"
      "\"likely\":",
      mlprof__verdict_name(z->verdict), z->machine_explains ? "true" : "false",
      z->explained_by == MLPROF__EXPLAINED_LOAD    ? "\"load\""
      : z->explained_by == MLPROF__EXPLAINED_SHIFT ? "\"uniform_shift\""
                                                   : "null",
      z->too_few ? "true" : "false", z->runs_vary ? "true" : "false");
  if (likely)
    mlprof__out_printf(o, "\"%s\"", likely);
  else
    mlprof__out_lit(o, "null");
  mlprof__out_lit(o, ",\"base\":");
  json_side(o, z->base, z->median_base);
  mlprof__out_lit(o, ",\"new\":");
  json_side(o, z->next, z->median_new);
  mlprof__out_lit(o, ",\"ratio\":");
  mlprof__out_f64(o, z->ratio);
  mlprof__out_lit(o, ",\"change\":");
  mlprof__out_f64(o, z->ratio - 1);
  mlprof__out_lit(o, ",\"test\":");
  if (z->tested)
    json_test(o, &z->test, z);
  else
    mlprof__out_lit(o, "null");
  mlprof__out_lit(o, ",\"between_runs\":");
  if (isnan(z->runs_p)) {
    mlprof__out_lit(o, "null");
  } else {
    mlprof__out_printf(o,
                       "{\"base_runs\":%zu,\"new_runs\":%zu,\"p\":", z->runs[0],
                       z->runs[1]);
    mlprof__out_f64(o, z->runs_p);
    mlprof__out_lit(o, ",\"spread\":");
    mlprof__out_f64(o, z->runs_spread);
    mlprof__out_lit(o, "}");
  }
}

/* The one-line note that note writes of d as a JSON string, or null
 * (note NULL: no note). */
static void json_note(mlprof__out *o, const mlprof__diff *d,
                      void (*note)(char *, size_t, const mlprof__diff *)) {
  char b[512];
  if (!note) {
    mlprof__out_lit(o, "null");
    return;
  }
  note(b, sizeof b, d);
  mlprof__out_json_str(o, b, strlen(b));
}

static void json_shift(mlprof__out *o, const mlprof__diff *d) {
  const mlprof__diff_shift *s = &d->shift;
  mlprof__out_printf(
      o, "{\"detected\":%s,\"zones\":%zu,\"agreeing\":%zu,\"explained\":%zu",
      s->detected ? "true" : "false", s->zones, s->agreeing, s->explained);
  mlprof__out_lit(o, ",\"ratio\":");
  mlprof__out_f64(o, s->ratio);
  mlprof__out_lit(o, ",\"change\":");
  mlprof__out_f64(o, s->ratio - 1);
  mlprof__out_lit(o, ",\"spread\":");
  mlprof__out_f64(o, s->spread);
  mlprof__out_lit(o, ",\"deviating\":[");
  for (size_t i = 0, k = 0; s->detected && i < d->nzones; i++) {
    const mlprof__diff_zone *z = &d->zones[i];
    if (!z->in_shift || z->shift_verdict == MLPROF__VERDICT_UNCHANGED) continue;
    if (k++) mlprof__out_lit(o, ",");
    mlprof__out_json_str(o, z->name, z->name_len);
  }
  mlprof__out_lit(o, "],\"note\":");
  json_note(o, d, s->detected ? mlprof__diff_shift_note : NULL);
  mlprof__out_lit(o, "}");
}

/* The functions' self times (mlprof__diff_func), a leading comma included;
 * none when a run has no stack samples. */
static void json_funcs(mlprof__out *o, const mlprof__diff *d) {
  if (!d->funcs) return;
  mlprof__out_printf(o, ",\n\"functions\":{\"per\":\"%s\",\"rows\":[",
                     d->funcs_per_step ? "step" : "run");
  for (size_t i = 0; i < d->nfuncs; i++) {
    const mlprof__diff_func *f = &d->funcs[i];
    mlprof__out_str(o, i ? ",\n{\"function\":" : "\n{\"function\":");
    mlprof__out_json_str(o, f->function, strlen(f->function));
    mlprof__out_lit(o, ",\"file\":");
    mlprof__out_json_str(o, f->file, strlen(f->file));
    mlprof__out_printf(o, ",\"line\":%u", (unsigned)f->line);
    mlprof__out_printf(o, ",\"verdict\":\"%s\",\"too_few\":%s",
                       mlprof__verdict_name(f->verdict),
                       f->too_few ? "true" : "false");
    mlprof__out_lit(o, ",\"base_self_ns\":");
    mlprof__out_f64(o, f->base_ns);
    mlprof__out_lit(o, ",\"new_self_ns\":");
    mlprof__out_f64(o, f->new_ns);
    mlprof__out_lit(o, ",\"ratio\":");
    mlprof__out_f64(o, f->ratio);
    mlprof__out_lit(o, ",\"p\":");
    mlprof__out_f64(o, f->p);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]}");
}

int mlprof__export_diff_json(const mlprof__diff *d,
                             const mlprof__diff_options *opt, const char *bpath,
                             const mlprof__report *base, const char *npath,
                             const mlprof__report *next, mlprof__out *o) {
  mlprof__out_printf(
      o, "{\"schema\":\"mlprof.diff/1\",\"generator\":\"mlprof %s\"",
      mlprof_version());
  mlprof__out_lit(o, ",\n\"base\":");
  json_run(o, bpath, base);
  mlprof__out_lit(o, ",\n\"new\":");
  json_run(o, npath, next);
  mlprof__out_lit(o, ",\n\"threshold\":");
  mlprof__out_f64(o, opt->threshold);
  mlprof__out_lit(o, ",\"alpha\":");
  mlprof__out_f64(o, opt->alpha);
  mlprof__out_lit(o, ",\"min_count\":");
  mlprof__out_u64(o, opt->min_count);
  mlprof__out_lit(o, ",\"zone_patterns\":[");
  for (size_t i = 0; i < opt->nzones; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_json_str(o, opt->zones[i], strlen(opt->zones[i]));
  }
  mlprof__out_printf(
      o, "],\"base_runs\":%zu,\"new_runs\":%zu,\"regression\":%s",
      d->side[0].runs, d->side[1].runs, d->regression ? "true" : "false");
  mlprof__out_lit(o, ",\n\"summary\":{");
  for (int v = 0; v < MLPROF__VERDICT_COUNT; v++)
    mlprof__out_printf(o, "\"%s\":%zu,",
                       mlprof__verdict_name((mlprof__verdict)v), d->count[v]);
  mlprof__out_printf(o, "\"filtered\":%zu},\n\"uniform_shift\":", d->filtered);
  json_shift(o, d);
  const mlprof__diff_machine *m = &d->machine;
  mlprof__out_lit(o, ",\n\"machine\":{\"base_wait_share\":");
  mlprof__out_f64(o, m->base);
  mlprof__out_lit(o, ",\"new_wait_share\":");
  mlprof__out_f64(o, m->next);
  mlprof__out_lit(o, ",\"base_steal_share\":");
  mlprof__out_f64(o, m->steal_base);
  mlprof__out_lit(o, ",\"new_steal_share\":");
  mlprof__out_f64(o, m->steal_next);
  mlprof__out_lit(o, ",\"factor\":");
  mlprof__out_f64(o, m->factor);
  mlprof__out_lit(o, ",\"cpu_wanted\":");
  mlprof__out_f64(o, isnan(m->expected) ? NAN : m->demand);
  mlprof__out_lit(o, ",\"expected\":");
  mlprof__out_f64(o, m->expected);
  mlprof__out_printf(o, ",\"slower\":%s,\"explained\":%zu,\"note\":",
                     m->slower ? "true" : "false", m->explained);
  json_note(o, d, m->slower ? mlprof__diff_machine_note : NULL);
  mlprof__out_lit(o, "}");
  mlprof__out_lit(o, ",\n\"step\":");
  if (d->has_step) {
    mlprof__out_lit(o, "{");
    json_verdict(o, &d->step, opt);
    mlprof__out_lit(o, "}");
  } else {
    mlprof__out_lit(o, "null");
  }
  mlprof__out_lit(o, ",\n\"per_unit\":");
  if (d->has_unit) {
    mlprof__out_lit(o, "{\"unit\":");
    mlprof__out_json_str(o, d->unit, strlen(d->unit));
    mlprof__out_lit(o, ",\"scale\":");
    mlprof__out_f64(o, d->unit_scale);
    mlprof__out_lit(o, ",\"base_work\":");
    mlprof__out_f64(o, d->work[0]);
    mlprof__out_lit(o, ",\"new_work\":");
    mlprof__out_f64(o, d->work[1]);
    mlprof__out_printf(o, ",\"work_differs\":%s,",
                       d->work_differs ? "true" : "false");
    json_verdict(o, &d->per_unit, opt);
    mlprof__out_lit(o, "}");
  } else {
    mlprof__out_lit(o, "null");
  }
  mlprof__out_lit(o, ",\n\"memory\":");
  json_mem(o, &d->mem);
  mlprof__out_lit(o, ",\n\"zones\":[");
  for (size_t i = 0; i < d->nzones; i++) {
    const mlprof__diff_zone *z = &d->zones[i];
    mlprof__out_str(o, i ? ",\n{\"name\":" : "\n{\"name\":");
    mlprof__out_json_str(o, z->name, z->name_len);
    mlprof__out_printf(o, ",\"category\":\"%s\",",
                       mlprof_category_name(z->category));
    json_verdict(o, z, opt);
    mlprof__out_lit(o, ",\"vs_shift\":");
    if (d->shift.detected && z->in_shift) {
      mlprof__out_lit(o, "{\"ratio\":");
      mlprof__out_f64(o, z->shift_ratio);
      mlprof__out_lit(o, ",\"change\":");
      mlprof__out_f64(o, z->shift_ratio - 1);
      mlprof__out_printf(o, ",\"verdict\":\"%s\",\"test\":",
                         mlprof__verdict_name(z->shift_verdict));
      json_test(o, &z->shift_test, z);
      mlprof__out_lit(o, "}");
    } else {
      mlprof__out_lit(o, "null");
    }
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
  json_funcs(o, d);
  mlprof__out_lit(o, "}\n");
  return 0;
}

/* ---- text ---------------------------------------------------------------- */

static void fmt_p(char *b, size_t len, const mlprof__diff_zone *z) {
  if (!z->tested)
    snprintf(b, len, "-");
  else if (z->test.p < 1e-300)
    snprintf(b, len, "<1e-300");
  else
    snprintf(b, len, "%.2g", z->test.p);
}

static void fmt_change(char *b, size_t len, double ratio) {
  if (isnan(ratio))
    snprintf(b, len, "-");
  else if (isinf(ratio))
    snprintf(b, len, "+inf");
  else
    snprintf(b, len, "%+.1f%%", (ratio - 1) * 100);
}

/* The verdict a person reads: "machine" for a move the machine explains. */
static const char *shown_verdict(const mlprof__diff_zone *z) {
  return z->machine_explains ? "machine" : mlprof__verdict_name(z->verdict);
}

static const char *note_of(const mlprof__diff_zone *z,
                           const mlprof__diff_options *opt) {
  if (z->machine_explains && z->explained_by == MLPROF__EXPLAINED_LOAD)
    return "no more than the machine explains";
  if (z->machine_explains) return "with the common shift";
  if (z->verdict == MLPROF__VERDICT_NEW) return "not in BASE";
  if (z->verdict == MLPROF__VERDICT_REMOVED) return "not in NEW";
  const char *likely = mlprof__diff_likely(z, opt);
  if (likely && z->runs_vary)
    return *likely == 's' ? "likely slower, the runs vary"
                          : "likely faster, the runs vary";
  if (z->runs_vary) return "the runs vary";
  if (likely && *likely == 's') return "likely slower, too few samples";
  if (likely) return "likely faster, too few samples";
  if (z->too_few) return "too few samples";
  if (!z->tested) return "no durations";
  return "";
}

/* The table's note: note_of, or beside a uniform shift, how the zone stands
 * against it. */
static void fmt_note(char *b, size_t len, const mlprof__diff *d,
                     const mlprof__diff_zone *z,
                     const mlprof__diff_options *opt) {
  if (!d->shift.detected || !z->in_shift || z->runs_vary) {
    snprintf(b, len, "%s", note_of(z, opt));
  } else if (z->shift_verdict == MLPROF__VERDICT_UNCHANGED) {
    snprintf(b, len, "with the common shift");
  } else {
    char c[32];
    fmt_change(c, sizeof c, z->shift_ratio);
    snprintf(b, len, "%s beyond the common shift", c);
  }
}

static void run_line(mlprof__out *o, const char *what, const char *path,
                     const mlprof__report *r, size_t runs) {
  char wall[32];
  mlprof__fmt_duration(wall, sizeof wall, (double)r->wall_ns);
  mlprof__out_str(o, what);
  mlprof__out_text_str(o, path, strlen(path));
  mlprof__out_printf(o, " (%zu zones, %llu spans, wall %s)", r->nzones,
                     (unsigned long long)r->spans, wall);
  if (runs > 1)
    mlprof__out_printf(o, " and %zu more run%s", runs - 1,
                       runs == 2 ? "" : "s");
  mlprof__out_lit(o, "\n");
}

/* The functions whose self time changed (mlprof__diff_func), most first:
 * every one that is not unchanged, then unchanged ones up to FUNCS_SHOWN. */
#define FUNCS_SHOWN 10

static int funcs_text(mlprof__out *o, const mlprof__diff *d) {
  if (!d->funcs) return 0;
  size_t changed = d->nfuncs - d->func_count[MLPROF__VERDICT_UNCHANGED];
  mlprof__out_printf(o,
                     "\nFunctions (self time %s, from the stack samples; "
                     "%zu changed of %zu compared)\n",
                     d->funcs_per_step
                         ? "a step: each step's, Mann-Whitney U"
                         : "in the run: the runs' sample counts, Poisson test",
                     changed, d->nfuncs);
  static const char *const heads[] = {"function", "where",  "verdict", "base",
                                      "new",      "change", "p"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "lllrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < d->nfuncs && (i < changed || i < FUNCS_SHOWN); i++) {
    const mlprof__diff_func *f = &d->funcs[i];
    char a[32], b[32], c[32], p[32];
    mlprof__table_name(&t, f->function, strlen(f->function), 40);
    char where[300];
    int n = f->line ? snprintf(where, sizeof where, "%s:%u", f->file,
                               (unsigned)f->line)
                    : snprintf(where, sizeof where, "%s", f->file);
    mlprof__table_name(&t, where,
                       n < 0                      ? 0
                       : (size_t)n < sizeof where ? (size_t)n
                                                  : sizeof where - 1,
                       40);
    mlprof__table_cell(&t, "%s%s", mlprof__verdict_name(f->verdict),
                       f->too_few ? " (too few)" : "");
    mlprof__fmt_duration(a, sizeof a, f->base_ns);
    mlprof__fmt_duration(b, sizeof b, f->new_ns);
    fmt_change(c, sizeof c, f->ratio);
    if (f->p < 1e-300)
      snprintf(p, sizeof p, "<1e-300");
    else
      snprintf(p, sizeof p, "%.2g", f->p);
    mlprof__table_cell(&t, "%s", a);
    mlprof__table_cell(&t, "%s", b);
    mlprof__table_cell(&t, "%s", c);
    mlprof__table_cell(&t, "%s", p);
  }
  return mlprof__table_print(&t, o);
}

int mlprof__export_diff_text(const mlprof__diff *d,
                             const mlprof__diff_options *opt, const char *bpath,
                             const mlprof__report *base, const char *npath,
                             const mlprof__report *next, mlprof__out *o) {
  run_line(o, "mlprof diff: base ", bpath, base, d->side[0].runs);
  run_line(o, "             new  ", npath, next, d->side[1].runs);
  mlprof__out_printf(o,
                     "Mann-Whitney U (two-sided), alpha %g; threshold %g%% on "
                     "the ratio of medians",
                     opt->alpha, opt->threshold * 100);
  if (d->side[0].runs + d->side[1].runs > 2)
    mlprof__out_printf(o,
                       "; between runs, Student's t on the runs' medians, "
                       "p <= %g",
                       MLPROF__RUNS_ALPHA);
  mlprof__out_lit(o, "\n\n");
  if (d->has_step) {
    const mlprof__diff_zone *z = &d->step;
    char a[32], b[32], c[32], p[32], note[64];
    mlprof__fmt_duration(a, sizeof a, z->median_base);
    mlprof__fmt_duration(b, sizeof b, z->median_new);
    fmt_change(c, sizeof c, z->ratio);
    fmt_p(p, sizeof p, z);
    fmt_note(note, sizeof note, d, z, opt);
    mlprof__out_printf(
        o,
        "step (interval between step marks): %s, p50 %s -> %s "
        "(%s, p %s; %llu and %llu steps)%s%s\n\n",
        shown_verdict(z), a, b, c, p, (unsigned long long)z->base->count,
        (unsigned long long)z->next->count, *note ? "; " : "", note);
  }
  if (d->has_unit) {
    const mlprof__diff_zone *z = &d->per_unit;
    char a[32], b[32], c[32], p[32], note[64];
    mlprof__fmt_duration(a, sizeof a, z->median_base / d->unit_scale);
    mlprof__fmt_duration(b, sizeof b, z->median_new / d->unit_scale);
    fmt_change(c, sizeof c, z->ratio);
    fmt_p(p, sizeof p, z);
    fmt_note(note, sizeof note, d, z, opt);
    mlprof__out_str(o, "step per unit of work (");
    mlprof__out_text_str(o, d->unit, strlen(d->unit));
    mlprof__out_printf(o,
                       " a step: %.4g -> %.4g): %s, p50 %s -> %s a unit (%s, "
                       "p %s)%s%s%s\n\n",
                       d->work[0], d->work[1], shown_verdict(z), a, b, c, p,
                       *note ? "; " : "", note,
                       d->work_differs ? "; the work a step differs: this "
                                         "verdict, not the step's, counts"
                                       : "");
  }
  static const char *const heads[] = {"zone",   "verdict",  "base n",
                                      "new n",  "base p50", "new p50",
                                      "change", "p",        "note"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "llrrrrrrl")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < d->nzones; i++) {
    const mlprof__diff_zone *z = &d->zones[i];
    char a[32], b[32], c[32], p[32];
    mlprof__table_name(&t, z->name, z->name_len, 48);
    mlprof__table_cell(&t, "%s", shown_verdict(z));
    if (z->base)
      mlprof__table_cell(&t, "%llu", (unsigned long long)z->base->count);
    else
      mlprof__table_cell(&t, "-");
    if (z->next)
      mlprof__table_cell(&t, "%llu", (unsigned long long)z->next->count);
    else
      mlprof__table_cell(&t, "-");
    mlprof__fmt_duration(a, sizeof a, z->median_base);
    mlprof__fmt_duration(b, sizeof b, z->median_new);
    fmt_change(c, sizeof c, z->ratio);
    fmt_p(p, sizeof p, z);
    mlprof__table_cell(&t, "%s", a);
    mlprof__table_cell(&t, "%s", b);
    mlprof__table_cell(&t, "%s", c);
    mlprof__table_cell(&t, "%s", p);
    char note[64];
    fmt_note(note, sizeof note, d, z, opt);
    mlprof__table_cell(&t, "%s", note);
  }
  int rc = mlprof__table_print(&t, o);
  if (!rc) rc = funcs_text(o, d);
  size_t moved[2] = {0, 0}; /* slower, faster the machine explains */
  for (size_t i = 0; i < d->nzones; i++)
    if (d->zones[i].machine_explains)
      moved[d->zones[i].verdict == MLPROF__VERDICT_FASTER]++;
  mlprof__out_printf(o,
                     "\n%zu slower, %zu faster, %zu unchanged, %zu new, %zu "
                     "removed",
                     d->count[MLPROF__VERDICT_SLOWER] - moved[0],
                     d->count[MLPROF__VERDICT_FASTER] - moved[1],
                     d->count[MLPROF__VERDICT_UNCHANGED],
                     d->count[MLPROF__VERDICT_NEW],
                     d->count[MLPROF__VERDICT_REMOVED]);
  if (moved[0] + moved[1])
    mlprof__out_printf(o, ", %zu moved with the machine", moved[0] + moved[1]);
  if (d->filtered)
    mlprof__out_printf(o, " (%zu zones left out by --zone)", d->filtered);
  if (d->shift.detected) {
    char note[512];
    mlprof__diff_shift_note(note, sizeof note, d);
    mlprof__out_printf(o, "\nnote: %s\n", note);
    if (!d->shift.deviating)
      mlprof__out_printf(o,
                         "  no zone departs from the common shift by more "
                         "than %g%%",
                         opt->threshold * 100);
    else
      mlprof__out_printf(o,
                         "  beyond the common shift by more than %g%% "
                         "(candidates for a real change):",
                         opt->threshold * 100);
    for (size_t i = 0, k = 0; i < d->nzones; i++) {
      const mlprof__diff_zone *z = &d->zones[i];
      if (!z->in_shift || z->shift_verdict == MLPROF__VERDICT_UNCHANGED)
        continue;
      char c[32], p[32];
      fmt_change(c, sizeof c, z->shift_ratio);
      if (z->shift_test.p < 1e-300)
        snprintf(p, sizeof p, "<1e-300");
      else
        snprintf(p, sizeof p, "%.2g", z->shift_test.p);
      mlprof__out_str(o, k++ ? ", " : " ");
      mlprof__out_text_str(o, z->name, z->name_len);
      mlprof__out_printf(o, " %s (p %s)", c, p);
    }
  }
  if (d->machine.slower) {
    char note[512];
    mlprof__diff_machine_note(note, sizeof note, d);
    mlprof__out_printf(o, "\nnote: %s", note);
  }
  if (d->mem.compared) {
    mlprof__out_lit(o, "\n");
    int mrc = text_mem(o, &d->mem, opt);
    if (!rc) rc = mrc;
  }
  size_t slower = d->count[MLPROF__VERDICT_SLOWER];
  slower -= moved[0];
  int step = mlprof__diff_step_slower(d);
  int unit = d->has_unit && d->per_unit.verdict == MLPROF__VERDICT_SLOWER &&
             !d->per_unit.machine_explains;
  if (d->time_regression && d->has_unit && d->work_differs)
    mlprof__out_printf(o,
                       "\nREGRESSION: the time per unit of work significantly "
                       "slower by more than %g%% (the runs' work a step "
                       "differs: zones and step not counted)\n",
                       opt->threshold * 100);
  else if (d->time_regression)
    mlprof__out_printf(o,
                       "\nREGRESSION: %s%s%zu zone%s significantly slower by "
                       "more than %g%%\n",
                       step ? "the step and " : "",
                       unit ? "the time per unit of work and " : "", slower,
                       slower == 1 ? "" : "s", opt->threshold * 100);
  if (d->mem.regression) {
    size_t n = d->mem.count[MLPROF__MEMDIFF_GREW];
    mlprof__out_printf(o,
                       "\nREGRESSION: %zu memory figure%s significantly "
                       "larger by more than %g%%\n",
                       n, n == 1 ? "" : "s", opt->threshold * 100);
  }
  if (d->regression) return rc;
  if ((d->machine.slower && d->machine.explained) ||
      (d->shift.explained && d->shift.ratio > 1))
    mlprof__out_lit(o,
                    "\nno regression: the machine was slower; rerun both on "
                    "an idle machine to judge the code\n");
  else if (d->shift.explained)
    mlprof__out_lit(o,
                    "\nno regression (the machine was faster; the faster "
                    "verdicts moved with it)\n");
  else
    mlprof__out_lit(o, "\nno regression\n");
  return rc;
}

/* ---- JUnit XML ----------------------------------------------------------- */

/* The note that note writes of d as the property name. */
static void xml_note(mlprof__out *o, const char *name, const mlprof__diff *d,
                     void (*note)(char *, size_t, const mlprof__diff *)) {
  char b[512];
  note(b, sizeof b, d);
  mlprof__out_printf(o, "<property name=\"%s\" value=\"", name);
  mlprof__out_xml_str(o, b, strlen(b));
  mlprof__out_lit(o, "\"/>\n");
}

/* The memory items shown (mem_shown) as testcases of the class
 * mlprof.diff.memory, named by their kind and what they are; a failure for
 * each that grew. Returns 0 or MLPROF_ENOMEM. */
static int junit_mem(const mlprof__diff *d, const mlprof__diff_options *opt,
                     mlprof__out *o) {
  mlprof__out name;
  if (mlprof__out_open(&name, -1)) return MLPROF_ENOMEM;
  for (size_t i = 0; i < d->mem.nitems; i++) {
    const mlprof__memdiff_item *it = &d->mem.items[i];
    if (!mem_shown(it)) continue;
    name.len = 0;
    mlprof__out_str(&name, mlprof__memdiff_kind_name(it->kind));
    mlprof__out_lit(&name, " ");
    mem_where(&name, it, 200);
    char a[80], b[80], c[32], p[32], msg[256];
    fmt_estimate(a, sizeof a, it->value[0], it->se[0]);
    fmt_estimate(b, sizeof b, it->value[1], it->se[1]);
    fmt_mem_change(c, sizeof c, it);
    fmt_mem_p(p, sizeof p, it->p_holm);
    snprintf(msg, sizeof msg, "%s: %s -> %s (%s), p (Holm) = %s",
             mlprof__memdiff_verdict_name(it->verdict), a, b, c, p);
    mlprof__out_lit(o, "<testcase classname=\"mlprof.diff.memory\" name=\"");
    mlprof__out_xml_str(o, name.buf, name.len);
    mlprof__out_lit(o, "\">");
    if (it->verdict == MLPROF__MEMDIFF_GREW) {
      mlprof__out_lit(o, "<failure type=\"regression\" message=\"");
      mlprof__out_xml_str(o, msg, strlen(msg));
      mlprof__out_printf(o,
                         "\">larger by more than %g%% with p &lt;= %g "
                         "(Holm)</failure>",
                         opt->threshold * 100, opt->alpha);
    } else {
      mlprof__out_lit(o, "<system-out>");
      mlprof__out_xml_str(o, msg, strlen(msg));
      mlprof__out_lit(o, "</system-out>");
    }
    mlprof__out_lit(o, "</testcase>\n");
  }
  int rc = name.err;
  mlprof__out_close(&name);
  return rc;
}

/* The i-th testcase of d: the step first when there is one, then the time
 * per unit of work, then the zones. */
static const mlprof__diff_zone *testcase(const mlprof__diff *d, size_t i) {
  if (d->has_step && i-- == 0) return &d->step;
  if (d->has_unit && i-- == 0) return &d->per_unit;
  return &d->zones[i];
}

/* Whether z's verdict is a regression (diff.h: not when the runs' work a
 * step differs; the time per unit of work then decides). */
static int fails(const mlprof__diff *d, const mlprof__diff_zone *z) {
  return z->verdict == MLPROF__VERDICT_SLOWER && !z->machine_explains &&
         (z == &d->per_unit || !(d->has_unit && d->work_differs));
}

int mlprof__export_diff_junit(const mlprof__diff *d,
                              const mlprof__diff_options *opt,
                              const char *bpath, const char *npath,
                              mlprof__out *o) {
  size_t tests = d->nzones + (size_t)d->has_step + (size_t)d->has_unit,
         failures = 0, mem = 0;
  for (size_t i = 0; i < tests; i++) failures += fails(d, testcase(d, i));
  for (size_t i = 0; i < d->mem.nitems; i++)
    if (mem_shown(&d->mem.items[i])) {
      mem++;
      failures += d->mem.items[i].verdict == MLPROF__MEMDIFF_GREW;
    }
  size_t time_tests = tests;
  tests += mem;
  size_t skipped =
      d->count[MLPROF__VERDICT_NEW] + d->count[MLPROF__VERDICT_REMOVED];
  mlprof__out_lit(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  mlprof__out_printf(o,
                     "<testsuites name=\"mlprof diff\" tests=\"%zu\" "
                     "failures=\"%zu\" errors=\"0\" skipped=\"%zu\">\n"
                     "<testsuite name=\"mlprof diff\" tests=\"%zu\" "
                     "failures=\"%zu\" errors=\"0\" skipped=\"%zu\">\n",
                     tests, failures, skipped, tests, failures, skipped);
  mlprof__out_lit(o, "<properties>\n<property name=\"base\" value=\"");
  mlprof__out_xml_str(o, bpath, strlen(bpath));
  mlprof__out_lit(o, "\"/>\n<property name=\"new\" value=\"");
  mlprof__out_xml_str(o, npath, strlen(npath));
  mlprof__out_printf(o,
                     "\"/>\n<property name=\"threshold\" value=\"%g\"/>\n"
                     "<property name=\"alpha\" value=\"%g\"/>\n",
                     opt->threshold, opt->alpha);
  if (d->shift.detected)
    xml_note(o, "uniform_shift", d, mlprof__diff_shift_note);
  if (d->machine.slower) xml_note(o, "machine", d, mlprof__diff_machine_note);
  mlprof__out_lit(o, "</properties>\n");
  for (size_t i = 0; i < time_tests; i++) {
    /* The step first, as a testcase named "step" of its own class. */
    const mlprof__diff_zone *z = testcase(d, i);
    char a[32], b[32], c[32], p[32], msg[256];
    double scale = z == &d->per_unit ? d->unit_scale : 1; /* diff.h */
    mlprof__fmt_duration(a, sizeof a, z->median_base / scale);
    mlprof__fmt_duration(b, sizeof b, z->median_new / scale);
    fmt_change(c, sizeof c, z->ratio);
    fmt_p(p, sizeof p, z);
    char note[64];
    fmt_note(note, sizeof note, d, z, opt);
    snprintf(msg, sizeof msg, "%s: median %s -> %s (%s), p = %s%s%s",
             shown_verdict(z), a, b, c, p, *note ? "; " : "", note);
    mlprof__out_printf(o, "<testcase classname=\"%s\" name=\"",
                       z == &d->step       ? "mlprof.diff.step"
                       : z == &d->per_unit ? "mlprof.diff.per_unit"
                                           : "mlprof.diff");
    mlprof__out_xml_str(o, z->name, z->name_len);
    mlprof__out_lit(o, "\">");
    if (fails(d, z)) {
      mlprof__out_lit(o, "<failure type=\"regression\" message=\"");
      mlprof__out_xml_str(o, msg, strlen(msg));
      mlprof__out_printf(
          o, "\">slower by more than %g%% with p &lt;= %g</failure>",
          opt->threshold * 100, opt->alpha);
    } else if (z->verdict == MLPROF__VERDICT_NEW ||
               z->verdict == MLPROF__VERDICT_REMOVED) {
      mlprof__out_lit(o, "<skipped message=\"");
      mlprof__out_xml_str(o, msg, strlen(msg));
      mlprof__out_lit(o, "\"/>");
    } else {
      mlprof__out_lit(o, "<system-out>");
      mlprof__out_xml_str(o, msg, strlen(msg));
      mlprof__out_lit(o, "</system-out>");
    }
    mlprof__out_lit(o, "</testcase>\n");
  }
  int rc = mem ? junit_mem(d, opt, o) : 0;
  mlprof__out_lit(o, "</testsuite>\n</testsuites>\n");
  return rc;
}
