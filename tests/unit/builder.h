/* Reports built in memory from spans given one by one, through the same
 * statistics builder the reader feeds: for the tests of the analyses. */
#ifndef MLPROF_TEST_BUILDER_H
#define MLPROF_TEST_BUILDER_H

#include <string.h>

#include "analyze/stats.h"
#include "format/wire.h"

typedef struct {
  mlprof__stats *s;
  mlprof__visitor v;
  uint32_t next_id;
  uint64_t t;
} builder;

/* Starts the profile of one process in s (host "h", parent pid 1) and
 * fills *v with the visitor to feed it, as the reader would. */
static inline void profile_begin(mlprof__stats *s, mlprof__visitor *v,
                                 uint64_t pid, char *exe, char *cmdline) {
  mlprof__job_profile p = {.path = "p.mlprof",
                           .pid = pid,
                           .ppid = 1,
                           .rank = -1,
                           .world_size = -1,
                           .hostname = "h",
                           .exe = exe,
                           .cmdline = cmdline,
                           .parent = -1};
  mlprof__stats_profile_begin(s, &p, v);
}

/* Starts a one-profile job; keep: whether zones keep their durations. */
static inline void build_begin(builder *b, int keep) {
  memset(b, 0, sizeof *b);
  b->s = mlprof__stats_new();
  mlprof__stats_keep_durations(b->s, keep);
  profile_begin(b->s, &b->v, 1, "w", "w");
}

/* n spans of zone name on thread 1, one after the other, durations from
 * dur(i, ud). */
static inline void spans(builder *b, const char *name, size_t n,
                         uint64_t (*dur)(size_t i, void *ud), void *ud) {
  mlprof__name nm = {.id = ++b->next_id,
                     .kind = MLPROF__NAME_ZONE,
                     .name = name,
                     .name_len = strlen(name),
                     .function = "",
                     .file = ""};
  b->v.name(b->v.ud, &nm);
  for (size_t i = 0; i < n; i++) {
    uint64_t d = dur(i, ud);
    b->v.span(b->v.ud, 1, nm.id, 0, b->t, b->t + d);
    b->t += d;
  }
}

/* Ends the profile and fills *r with the job's report. */
static inline void build_end(builder *b, mlprof__report *r) {
  b->v.end(b->v.ud, b->t, 0, 0);
  mlprof__stats_profile_end(b->s, NULL, NULL);
  memset(r, 0, sizeof *r);
  mlprof__stats_finish(b->s, r);
}

#endif
