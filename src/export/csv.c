/* The zone table as CSV: one header row, then one row per zone shown; and
 * the samples of a job, streamed. */
#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/wire.h"
#include "export.h"

static void put_u64(mlprof__out *o, uint64_t v) {
  mlprof__out_lit(o, ",");
  mlprof__out_u64(o, v);
}

int mlprof__export_csv(const mlprof__report *r, mlprof__out *o) {
  mlprof__out_lit(o,
                  "zone,category,count,total_ns,self_ns,mean_ns,std_ns,"
                  "min_ns,max_ns,p50_ns,p90_ns,p95_ns,p99_ns,share\r\n");
  for (size_t i = 0; i < r->norder; i++) {
    const mlprof__zone_stats *z = &r->zones[r->order[i]];
    mlprof__out_csv_field(o, z->name, z->name_len);
    mlprof__out_lit(o, ",");
    mlprof__out_str(o, mlprof_category_name(z->category));
    put_u64(o, z->count);
    put_u64(o, z->total_ns);
    put_u64(o, z->self_ns);
    put_u64(o, mlprof__round_ns(z->mean_ns));
    put_u64(o, mlprof__round_ns(z->std_ns));
    put_u64(o, z->min_ns);
    put_u64(o, z->max_ns);
    put_u64(o, z->p50_ns);
    put_u64(o, z->p90_ns);
    put_u64(o, z->p95_ns);
    put_u64(o, z->p99_ns);
    mlprof__out_lit(o, ",");
    mlprof__out_f64(o, z->share);
    mlprof__out_lit(o, "\r\n");
  }
  return o->err;
}

int mlprof__export_findings_csv(const mlprof__findings *f, mlprof__out *o) {
  mlprof__out_lit(o,
                  "rank,severity,type,zone,flagged,summary,evidence,"
                  "recommendation,note\r\n");
  mlprof__out arena;
  if (mlprof__out_open(&arena, -1)) return MLPROF_ENOMEM;
  for (size_t i = 0; i < f->nfindings; i++) {
    const mlprof__finding *x = &f->findings[i];
    mlprof__out_u64(o, i + 1);
    mlprof__out_lit(o, ",");
    mlprof__out_f64(o, x->severity);
    mlprof__out_lit(o, ",");
    mlprof__out_str(o, x->type);
    mlprof__out_lit(o, ",");
    if (x->zone) mlprof__out_csv_field(o, x->zone, x->zone_len);
    mlprof__out_lit(o, ",");
    if (x->flagged) mlprof__out_str(o, x->flagged);
    mlprof__out_lit(o, ",");
    mlprof__out_csv_field(o, x->summary, strlen(x->summary));
    mlprof__out_lit(o, ",");
    arena.len = 0;
    for (size_t k = 0; k < x->nev; k++) {
      mlprof__out_printf(&arena, "%s%s=", k ? ";" : "", x->ev[k].key);
      mlprof__out_f64(&arena, x->ev[k].value);
    }
    mlprof__out_csv_field(o, arena.buf, arena.len);
    mlprof__out_lit(o, ",");
    mlprof__out_csv_field(o, x->recommendation, strlen(x->recommendation));
    mlprof__out_lit(o, ",");
    if (x->note) mlprof__out_csv_field(o, x->note, strlen(x->note));
    mlprof__out_lit(o, "\r\n");
  }
  int rc = arena.err;
  mlprof__out_close(&arena);
  return rc ? rc : o->err;
}

/* ---- samples, streamed ----------------------------------------------------
 */

typedef struct {
  size_t off, len; /* the name as a CSV field, in arena */
} csv_name;

typedef struct {
  mlprof__out *o;
  mlprof__out arena; /* this profile's names as CSV fields, host first */
  csv_name *names;
  size_t nnames, ncap;
  mlprof__map ids; /* name id -> index in names */
  size_t host_len;
  uint64_t offset_ns;
} samples_csv;

static int s_name(void *ud, const mlprof__name *n) {
  samples_csv *c = ud;
  if (n->kind != MLPROF__NAME_MEASURE && n->kind != MLPROF__NAME_STRING)
    return 0;
  if (c->nnames >= MLPROF__NONE - 1 ||
      mlprof__grow(&c->names, &c->ncap, c->nnames + 1, sizeof *c->names) ||
      mlprof__map_put(&c->ids, n->id, (uint32_t)c->nnames))
    return MLPROF_ENOMEM;
  size_t off = c->arena.len;
  mlprof__out_csv_field(&c->arena, n->name, n->name_len);
  if (c->arena.err) return c->arena.err;
  c->names[c->nnames++] = (csv_name){off, c->arena.len - off};
  return 0;
}

/* The field of name id, nothing when unknown or 0. */
static void put_field(samples_csv *c, uint32_t id) {
  uint32_t at = id ? mlprof__map_get(&c->ids, id) : MLPROF__NONE;
  if (at != MLPROF__NONE)
    mlprof__out_write(c->o, c->arena.buf + c->names[at].off, c->names[at].len);
}

static int s_sample(void *ud, const mlprof__sample_row *row) {
  samples_csv *c = ud;
  static const char *const subjects[] = {",system,", ",process,", ",gpu,"};
  char prefix[96];
  char *p = mlprof__fmt_u64(prefix, row->t + c->offset_ns);
  const char *sub = row->subject < 3 ? subjects[row->subject] : ",unknown,";
  size_t sl = strlen(sub);
  memcpy(p, sub, sl);
  p = mlprof__fmt_u64(p + sl, row->id);
  *p++ = ',';
  size_t plen = (size_t)(p - prefix);
  for (uint32_t i = 0; i < row->n; i++) {
    const mlprof__sample_measure *m = &row->m[i];
    mlprof__out_write(c->o, prefix, plen);
    put_field(c, row->label);
    mlprof__out_lit(c->o, ",");
    put_field(c, m->name);
    mlprof__out_lit(c->o, ",");
    if (m->valid) {
      /* A valid NaN or infinity: empty, as "null" is no CSV number. */
      if (isfinite(m->value)) mlprof__out_f64(c->o, m->value);
      mlprof__out_lit(c->o, ",");
    } else {
      mlprof__out_lit(c->o, ",");
      put_field(c, m->reason);
    }
    mlprof__out_lit(c->o, ",");
    mlprof__out_write(c->o, c->arena.buf, c->host_len);
    mlprof__out_lit(c->o, "\r\n");
  }
  return c->o->err;
}

int mlprof__export_samples_csv(const mlprof__job *job, mlprof__out *o,
                               mlprof__read_report *reads, char *err,
                               size_t errlen) {
  samples_csv c = {.o = o};
  if (mlprof__out_open(&c.arena, -1)) {
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  mlprof__out_lit(o, "time_ns,subject,id,label,measure,value,absent,host\r\n");
  const mlprof__visitor v = {.ud = &c, .name = s_name, .sample = s_sample};
  int rc = 0;
  for (size_t i = 0; i < job->count && !rc; i++) {
    const mlprof__job_profile *p = &job->profiles[i];
    c.arena.len = 0;
    c.nnames = 0;
    mlprof__map_clear(&c.ids);
    const char *host = p->hostname ? p->hostname : "";
    mlprof__out_csv_field(&c.arena, host, strlen(host));
    c.host_len = c.arena.len;
    c.offset_ns = p->offset_ns;
    mlprof__read_report rep;
    memset(&rep, 0, sizeof rep);
    int rd = mlprof__read_file(p->path, &v, &rep, NULL, 0);
    if (reads) reads[i] = rep;
    if (o->err) {
      rc = o->err;
      snprintf(err, errlen, "cannot write the samples");
    } else if (rd == MLPROF_ENOMEM || c.arena.err) {
      rc = MLPROF_ENOMEM;
      snprintf(err, errlen, "out of memory");
    }
  }
  free(c.names);
  mlprof__map_clear(&c.ids);
  mlprof__out_close(&c.arena);
  return rc;
}
