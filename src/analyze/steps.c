/* Step breakdown: where each step's time goes (docs/findings.md).
 *
 * Steps are the intervals from each step mark of a thread to its next mark
 * or step end (every thread with a step counts), or, when there are none,
 * the spans of the outermost repeated zone: the depth-0 zone with two spans
 * or more, most of them holding other zones, and the largest total. A step's
 * time is split into parts by the zones inside it: a zone with a part takes its
 * duration less the parts of the zones nested in it (the innermost part wins,
 * so an allreduce inside backward counts as communication), and what no part
 * covers is "other". */
#include <ctype.h>
#include <math.h>
#include <mlprof.h>
#include <stdlib.h>
#include <string.h>

#include "findings.h"

const char *mlprof__part_name(int part) {
  static const char *const names[MLPROF__NPARTS] = {
      "data", "forward", "backward", "optimizer", "communication", "other"};
  return part >= 0 && part < MLPROF__NPARTS ? names[part] : "other";
}

/* Words that name a part, matched against each word of a zone name and
 * against two or three consecutive words run together ("all_reduce" ->
 * "allreduce"); checked in this order, first match wins. */
static const struct {
  int part;
  const char *const words[16];
} word_table[] = {
    {MLPROF__PART_COMM,
     {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast",
      "nccl", "gloo", "mpi", "barrier", "comm", "communication", "collective",
      "allgatherv", NULL}},
    {MLPROF__PART_OPTIMIZER,
     {"optimizer", "optim", "opt", "zerograd", "optimizerstep", "optstep",
      "clipgrad", "lrscheduler", NULL}},
    {MLPROF__PART_BACKWARD, {"backward", "bwd", "backprop", NULL}},
    {MLPROF__PART_FORWARD, {"forward", "fwd", NULL}},
    {MLPROF__PART_DATA,
     {"data", "dataloader", "loader", "dataset", "collate", "prefetch",
      "nextbatch", "getbatch", "loadbatch", "fetchbatch", "batchload",
      "dataloading", NULL}},
};

static int word_part(const char *w) {
  for (size_t i = 0; i < sizeof word_table / sizeof word_table[0]; i++)
    for (size_t k = 0; word_table[i].words[k]; k++)
      if (strcmp(w, word_table[i].words[k]) == 0) return word_table[i].part;
  return MLPROF__PART_OTHER;
}

int mlprof__zone_part(uint8_t category, const char *name, size_t len,
                      int nested) {
  switch (category) {
    case MLPROF_CAT_DATA:
      return MLPROF__PART_DATA;
    case MLPROF_CAT_FORWARD:
      return MLPROF__PART_FORWARD;
    case MLPROF_CAT_BACKWARD:
      return MLPROF__PART_BACKWARD;
    case MLPROF_CAT_OPTIMIZER:
      return MLPROF__PART_OPTIMIZER;
    case MLPROF_CAT_COMM:
      return MLPROF__PART_COMM;
    default:
      break;
  }
  /* Lower-case words: runs of letters and digits; camelCase splits too. */
  enum { MAXW = 16, WLEN = 32 };
  char words[MAXW][WLEN];
  size_t nw = 0;
  for (size_t i = 0; i < len && nw < MAXW;) {
    unsigned char c = (unsigned char)name[i];
    if (!isalnum(c)) {
      i++;
      continue;
    }
    size_t n = 0;
    do {
      if (n < WLEN - 1) words[nw][n++] = (char)tolower(name[i]);
      i++;
    } while (i < len && isalnum((unsigned char)name[i]) &&
             !(isupper((unsigned char)name[i]) &&
               islower((unsigned char)name[i - 1])));
    words[nw++][n] = '\0';
  }
  if (nw == 1 && strcmp(words[0], "step") == 0)
    return nested ? MLPROF__PART_OPTIMIZER : MLPROF__PART_OTHER;
  int best = MLPROF__PART_OTHER;
  size_t rank = sizeof word_table / sizeof word_table[0];
  char joined[3 * WLEN];
  for (size_t i = 0; i < nw; i++)
    for (size_t k = 1; k <= 3 && i + k <= nw; k++) {
      joined[0] = '\0';
      for (size_t j = i; j < i + k; j++) strcat(joined, words[j]);
      int part = word_part(joined);
      if (part == MLPROF__PART_OTHER) continue;
      /* The earliest row of the table wins, wherever the word is. */
      for (size_t t = 0; t < rank; t++)
        if (word_table[t].part == part) {
          rank = t;
          best = part;
          break;
        }
    }
  return best;
}

static void fill_shares(mlprof__steps *s) {
  uint64_t parts = 0;
  for (int k = 0; k < MLPROF__PART_OTHER; k++) parts += s->part_ns[k];
  s->part_ns[MLPROF__PART_OTHER] =
      s->total_ns > parts ? s->total_ns - parts : 0;
  for (int k = 0; k < MLPROF__NPARTS; k++)
    s->share[k] = s->total_ns ? (double)s->part_ns[k] / (double)s->total_ns : 0;
  s->mean_ns = s->count ? (double)s->total_ns / (double)s->count : 0;
}

int mlprof__steps_finish(mlprof__fpass *p, mlprof__steps *s) {
  memset(s, 0, sizeof *s);
  const mlprof__report *r = p->r;
  for (size_t i = 0; i < r->nthreads; i++) {
    const mlprof__marks *m = &r->threads[i].marks;
    s->count += m->steps;
    s->total_ns += m->total_ns;
    s->threads += m->steps > 0;
  }
  if (s->count) {
    const mlprof__marks **all = malloc(r->nthreads * sizeof *all);
    if (!all) return MLPROF_ENOMEM;
    for (size_t i = 0; i < r->nthreads; i++) all[i] = &r->threads[i].marks;
    s->source = MLPROF__STEPS_MARKS;
    s->p50_ns = mlprof__marks_percentile(all, r->nthreads, 50);
    s->p90_ns = mlprof__marks_percentile(all, r->nthreads, 90);
    free(all);
    memcpy(s->part_ns, p->step_part, sizeof s->part_ns);
    s->first_ns = p->step_first;
    s->last_ns = p->step_last;
    fill_shares(s);
    return 0;
  }
  const mlprof__fzone *best = NULL;
  for (size_t i = 0; i < p->nzones; i++) {
    const mlprof__fzone *z = &p->zones[i];
    /* A step holds its parts: most of its spans have zones inside. */
    if (z->top_count < 2 || z->top_parents * 2 < z->top_count) continue;
    if (!best || z->top_ns > best->top_ns ||
        (z->top_ns == best->top_ns &&
         (z->len < best->len ||
          (z->len == best->len && memcmp(z->name, best->name, z->len) < 0))))
      best = z;
  }
  if (!best) return 0;
  s->source = MLPROF__STEPS_ZONE;
  if (!(s->zone = mlprof__dup(best->name, best->len))) return MLPROF_ENOMEM;
  s->zone_len = best->len;
  s->count = best->top_count;
  s->total_ns = best->top_ns;
  for (size_t i = 0; i < p->r->nzones; i++) {
    const mlprof__zone_stats *z = &p->r->zones[i];
    if (z->name_len == best->len &&
        memcmp(z->name, best->name, best->len) == 0) {
      /* The zone's own percentiles (every span of it, at any depth). */
      s->p50_ns = z->p50_ns;
      s->p90_ns = z->p90_ns;
      break;
    }
  }
  memcpy(s->part_ns, best->top_part, sizeof s->part_ns);
  fill_shares(s);
  return 0;
}
