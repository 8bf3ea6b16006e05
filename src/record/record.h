/* What the recording library offers the rest of mlprof beyond the public
 * API (include/mlprof.h). Its internals (src/record/internal.h) stay its
 * own. */
#ifndef MLPROF_RECORD_H
#define MLPROF_RECORD_H

#include <sys/types.h>

/* For `mlprof run`: the next session samples the process tree rooted at pid
 * instead of its own process. */
void mlprof__session_sample_tree(pid_t pid);

/* A capture's status in the profile's source table, as the sampler's
 * sources give theirs: available, or not with a one-line reason ("cupti":
 * no CUDA driver). Nothing without a session. */
void mlprof__session_source(const char *name, int available,
                            const char *reason);

#endif
