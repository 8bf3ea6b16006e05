/* What the recording library offers the rest of mlprof beyond the public
 * API (include/mlprof.h). Its internals (src/record/internal.h) stay its
 * own. */
#ifndef MLPROF_RECORD_H
#define MLPROF_RECORD_H

#include <stdint.h>
#include <sys/types.h>

/* The environment through which mlprof run (src/cli/run.c) configures the
 * library in every process it starts, and which the library reads
 * (session.c, intercept/exec.c; docs/guide.md): one copy of each name. */
#define MLPROF__ENV_OUTPUT "MLPROF_OUTPUT"       /* run directory or file */
#define MLPROF__ENV_FLUSH_MS "MLPROF_FLUSH_MS"   /* mlprof_config's */
#define MLPROF__ENV_MEMORY_MB "MLPROF_MEMORY_MB" /* memory cap, MB */
#define MLPROF__ENV_SAMPLE_MS "MLPROF_SAMPLE_MS" /* 0: no sampling */
#define MLPROF__ENV_STACKS "MLPROF_STACKS"       /* stack samples/s; off */
#define MLPROF__ENV_MEMORY "MLPROF_MEMORY"       /* allocations recorded */
/* 0: sampled allocations freed within a flush are written one by one too
 * (docs/memory.md, "File growth") */
#define MLPROF__ENV_MEMORY_FOLD "MLPROF_MEMORY_FOLD"
/* Why mlprof run found no Python start-up module (said in the profile). */
#define MLPROF__ENV_PY_MISSING "MLPROF_PY_MISSING"
/* The Python flags mlprof run passes on (python/mlprof/_startup). */
#define MLPROF__ENV_PY_OPTIONS "MLPROF_PY_OPTIONS"
/* PID.SEQ: this process goes on after an exec (intercept/exec.c). */
#define MLPROF__ENV_EXEC "MLPROF_EXEC"

/* For `mlprof run`: the next session samples the process tree rooted at pid
 * instead of its own process. */
void mlprof__session_sample_tree(pid_t pid);

/* A capture's status in the profile's source table, as the sampler's
 * sources give theirs: available, or not with a one-line reason ("cupti":
 * no CUDA driver). Nothing without a session. */
void mlprof__session_source(const char *name, int available,
                            const char *reason);

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
