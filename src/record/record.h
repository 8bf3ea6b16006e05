/* What the recording library offers the rest of mlprof beyond the public
 * API (include/mlprof.h). Its internals (src/record/internal.h) stay its
 * own. */
#ifndef MLPROF_RECORD_H
#define MLPROF_RECORD_H

#include <stdint.h>
#include <sys/types.h>

/* For `mlprof run`: the next session samples the process tree rooted at pid
 * instead of its own process. */
void mlprof__session_sample_tree(pid_t pid);

/* What the allocation hooks record (MLPROF_MEMORY, mlprof run --memory;
 * docs/memory.md). */
enum {
  MLPROF__MEM_OFF = 0,
  MLPROF__MEM_SAMPLED = 1, /* Poisson sampling of bytes */
  MLPROF__MEM_ALL = 2,     /* every allocation */
};

/* Parses MLPROF_MEMORY's value ("off", "all", "sampled", "sampled:BYTES"):
 * sets *mode and *mean (left as they are for "off" and "all"). Returns 0 or
 * MLPROF_EINVAL. */
int mlprof__mem_parse(const char *s, int *mode, uint64_t *mean);

#endif
