/* The stack samples as a pprof profile (export.h, mlprof__export_pprof):
 * a perftools.profiles.Profile message (google/pprof, proto/profile.proto),
 * written uncompressed (pprof and go tool pprof read it as well as gzip).
 *
 * Each row of the flame (a stack's samples in one zone, thread and step) is
 * one Sample, innermost location first, with three values (samples/count,
 * wall/nanoseconds: the time the samples stand for, cpu/nanoseconds: that
 * of the samples taken on a CPU) and its labels. Each frame of the hot
 * functions is one Location with one Line, each function one Function. */
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "pb.h"

/* Locations a sample names at most (the hot functions' stacks are cut
 * deeper than this). */
#define DEPTH_MAX 4096

/* perftools.profiles field numbers (the public profile.proto). */
enum {
  PROFILE_SAMPLE_TYPE = 1,
  PROFILE_SAMPLE = 2,
  PROFILE_LOCATION = 4,
  PROFILE_FUNCTION = 5,
  PROFILE_STRING_TABLE = 6,
  PROFILE_PERIOD_TYPE = 11,
  PROFILE_PERIOD = 12,
  PROFILE_COMMENT = 13,
  PROFILE_DEFAULT_SAMPLE_TYPE = 14,
  VALUE_TYPE_TYPE = 1,
  VALUE_TYPE_UNIT = 2,
  SAMPLE_LOCATION_ID = 1,
  SAMPLE_VALUE = 2,
  SAMPLE_LABEL = 3,
  LABEL_KEY = 1,
  LABEL_STR = 2,
  LABEL_NUM = 3,
  LOCATION_ID = 1,
  LOCATION_LINE = 4,
  LINE_FUNCTION_ID = 1,
  LINE_LINE = 2,
  FUNCTION_ID = 1,
  FUNCTION_NAME = 2,
  FUNCTION_SYSTEM_NAME = 3,
  FUNCTION_FILENAME = 4,
  FUNCTION_START_LINE = 5
};

typedef struct {
  mlprof__out *o;
  mlprof__out m; /* the message being built (memory) */
  mlprof__strindex ix;
  char **strs;
  size_t *lens, nstrs, cap;
  int err;
} pprof;

/* The string table index of s (the table's 0 is ""). */
static uint64_t str_id(pprof *c, const char *s) {
  uint32_t k = mlprof__strindex_intern(&c->ix, &c->strs, &c->lens, &c->nstrs,
                                       &c->cap, s, strlen(s));
  if (k == MLPROF__NONE) c->err = MLPROF_ENOMEM;
  return k == MLPROF__NONE ? 0 : k;
}

/* Writes the message built in c->m as field of the Profile, and empties
 * c->m. */
static void emit(pprof *c, uint32_t field) {
  if (c->m.err && !c->err) c->err = c->m.err;
  if (c->err) return;
  char *p = mlprof__out_space(c->o, MLPROF__PB_MAX_FIELD);
  p = mlprof__pb_tag(p, field, MLPROF__PB_LEN);
  mlprof__out_end(c->o, mlprof__pb_varint(p, c->m.len));
  mlprof__out_write(c->o, c->m.buf, c->m.len);
  c->m.len = 0;
}

static void value_type(pprof *c, uint32_t field, const char *type,
                       const char *unit) {
  mlprof__pb_out_uint(&c->m, VALUE_TYPE_TYPE, str_id(c, type));
  mlprof__pb_out_uint(&c->m, VALUE_TYPE_UNIT, str_id(c, unit));
  emit(c, field);
}

static void label_str(pprof *c, const char *key, const char *s) {
  size_t at = mlprof__pb_open(&c->m, SAMPLE_LABEL);
  mlprof__pb_out_uint(&c->m, LABEL_KEY, str_id(c, key));
  mlprof__pb_out_uint(&c->m, LABEL_STR, str_id(c, s));
  mlprof__pb_close(&c->m, at);
}

static void label_num(pprof *c, const char *key, int64_t v) {
  size_t at = mlprof__pb_open(&c->m, SAMPLE_LABEL);
  mlprof__pb_out_uint(&c->m, LABEL_KEY, str_id(c, key));
  mlprof__pb_out_uint(&c->m, LABEL_NUM, (uint64_t)v);
  mlprof__pb_close(&c->m, at);
}

static void function(pprof *c, uint64_t id, const char *name, const char *file,
                     uint32_t first_line) {
  mlprof__pb_out_uint(&c->m, FUNCTION_ID, id);
  mlprof__pb_out_uint(&c->m, FUNCTION_NAME, str_id(c, name));
  mlprof__pb_out_uint(&c->m, FUNCTION_SYSTEM_NAME, str_id(c, name));
  mlprof__pb_out_uint(&c->m, FUNCTION_FILENAME, str_id(c, file));
  if (first_line) mlprof__pb_out_uint(&c->m, FUNCTION_START_LINE, first_line);
  emit(c, PROFILE_FUNCTION);
}

static void location(pprof *c, uint64_t id, uint64_t func, uint32_t line) {
  mlprof__pb_out_uint(&c->m, LOCATION_ID, id);
  size_t at = mlprof__pb_open(&c->m, LOCATION_LINE);
  mlprof__pb_out_uint(&c->m, LINE_FUNCTION_ID, func);
  if (line) mlprof__pb_out_uint(&c->m, LINE_LINE, line);
  mlprof__pb_close(&c->m, at);
  emit(c, PROFILE_LOCATION);
}

/* Packed repeated varints: the values in n, as one length-delimited
 * field. */
static void packed(pprof *c, uint32_t field, const uint64_t *v, size_t n) {
  if (!n) return;
  size_t at = mlprof__pb_open(&c->m, field);
  for (size_t i = 0; i < n; i++) {
    char *p = mlprof__out_space(&c->m, 10);
    mlprof__out_end(&c->m, mlprof__pb_varint(p, v[i]));
  }
  mlprof__pb_close(&c->m, at);
}

int mlprof__export_pprof(const mlprof__report *r, const mlprof__flame *f,
                         mlprof__out *o) {
  const mlprof__hot *h = &r->hot;
  pprof c = {.o = o};
  uint64_t *locs = malloc(DEPTH_MAX * sizeof *locs);
  if (!locs || mlprof__out_open(&c.m, -1)) {
    free(locs);
    return MLPROF_ENOMEM;
  }
  str_id(&c, ""); /* the table's first string */
  value_type(&c, PROFILE_SAMPLE_TYPE, "samples", "count");
  value_type(&c, PROFILE_SAMPLE_TYPE, "wall", "nanoseconds");
  value_type(&c, PROFILE_SAMPLE_TYPE, "cpu", "nanoseconds");
  value_type(&c, PROFILE_PERIOD_TYPE, "wall", "nanoseconds");
  mlprof__pb_out_uint(o, PROFILE_PERIOD, (uint64_t)h->interval_ns);
  mlprof__pb_out_uint(o, PROFILE_DEFAULT_SAMPLE_TYPE, str_id(&c, "cpu"));
  /* Functions 1..nfuncs; then, when some stack needs them, one for the
   * frames cut from stacks too deep and one for samples with no Python
   * frame. */
  uint64_t truncated = h->nfuncs + 1, none = h->nfuncs + 2;
  uint64_t loc_none = h->nframes + 1;
  int need_truncated = 0, need_none = 0;
  for (size_t i = 0; i < h->nfuncs && !c.err; i++)
    function(&c, i + 1, h->funcs[i].function, h->funcs[i].file,
             h->funcs[i].first_line);
  for (size_t i = 0; i < h->nframes && !c.err; i++) {
    const mlprof__hot_frame *fr = &h->frames[i];
    if (fr->func >= h->nfuncs) need_truncated = 1;
    location(&c, i + 1, fr->func < h->nfuncs ? fr->func + 1 : truncated,
             fr->line);
  }
  for (size_t i = 0; i < f->nrows && !c.err; i++)
    if (f->rows[i].node >= h->nnodes) need_none = 1;
  if (need_truncated) function(&c, truncated, "<truncated>", "", 0);
  if (need_none) {
    function(&c, none, "<no Python frame>", "", 0);
    location(&c, loc_none, none, 0);
  }
  for (size_t i = 0; i < f->nrows && !c.err; i++) {
    const mlprof__flame_row *x = &f->rows[i];
    size_t n = 0;
    for (uint32_t k = x->node; k < h->nnodes && n < DEPTH_MAX;
         k = h->nodes[k].parent)
      locs[n++] = (uint64_t)h->nodes[k].frame + 1;
    if (!n) locs[n++] = loc_none;
    packed(&c, SAMPLE_LOCATION_ID, locs, n);
    uint64_t v[3] = {x->n, x->wall_ns, x->cpu_ns};
    packed(&c, SAMPLE_VALUE, v, 3);
    if (x->zone && x->zone < h->nzone_names)
      label_str(&c, "zone", h->zone_names[x->zone]);
    if (x->step != MLPROF__NONE)
      label_num(&c, "step", (int64_t)((uint64_t)x->step * f->step_width));
    if (x->thread < f->nthreads) {
      const mlprof__flame_thread *t = &f->threads[x->thread];
      label_num(&c, "thread", t->tid);
      if (t->name && t->name[0]) label_str(&c, "thread_name", t->name);
      if (t->proc < f->nprocs) {
        const mlprof__flame_proc *p = &f->procs[t->proc];
        label_num(&c, "pid", (int64_t)p->pid);
        if (p->rank >= 0) label_num(&c, "rank", p->rank);
        if (p->name && p->name[0]) label_str(&c, "process", p->name);
      }
    }
    emit(&c, PROFILE_SAMPLE);
  }
  /* What a reader should know of the figures. */
  char note[160];
  snprintf(note, sizeof note,
           "mlprof %s: stack samples; cpu = the time of the samples taken "
           "on a CPU",
           mlprof_version());
  mlprof__pb_out_uint(o, PROFILE_COMMENT, str_id(&c, note));
  for (size_t i = 0; i < c.nstrs && !c.err; i++) {
    mlprof__out_utf8(&c.m, c.strs[i], c.lens[i]);
    emit(&c, PROFILE_STRING_TABLE);
  }
  for (size_t i = 0; i < c.nstrs; i++) free(c.strs[i]);
  free(c.strs);
  free(c.lens);
  mlprof__strindex_free(&c.ix);
  mlprof__out_close(&c.m);
  free(locs);
  return c.err ? c.err : o->err;
}
