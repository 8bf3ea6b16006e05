/* mlprof diff's JSON (schema mlprof.diff/1, docs/json-schema.md). */
#include "diff.h"

#include <math.h>
#include <mlprof.h>
#include <string.h>

#include "escape.h"

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
  mlprof__out_printf(o,
                     "\"verdict\":\"%s\",\"machine_explains\":%s,"
                     "\"too_few\":%s,\"likely\":",
                     mlprof__verdict_name(z->verdict),
                     z->machine_explains ? "true" : "false",
                     z->too_few ? "true" : "false");
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
  mlprof__out_printf(o, "{\"detected\":%s,\"zones\":%zu,\"agreeing\":%zu",
                     s->detected ? "true" : "false", s->zones, s->agreeing);
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
  mlprof__out_printf(o, "],\"regression\":%s",
                     d->regression ? "true" : "false");
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
  mlprof__out_lit(o, ",\"factor\":");
  mlprof__out_f64(o, m->factor);
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
  mlprof__out_lit(o, "]}\n");
  return 0;
}
