/* What mlprof html and mlprof serve draw: a job's report, resources,
 * findings (default options) and call tree, built in one go. */
#ifndef MLPROF_CLI_DASH_H
#define MLPROF_CLI_DASH_H

#include "../analyze/findings.h"
#include "../analyze/resources.h"
#include "../analyze/stats.h"
#include "../analyze/tree.h"
#include "../model/job.h"

/* Zones in a dashboard at most (the largest by total time). */
#define MLPROF__DASH_TOP 2000

typedef struct {
  mlprof__report r;
  mlprof__resources res;
  mlprof__findings f;
  mlprof__tree tree;
} mlprof__dash;

/* Reads job for the dashboard (zones sorted by total, the first top kept;
 * 0: all). Returns 0, or an mlprof error with a one-line reason in err; *d
 * then needs no mlprof__dash_free. */
int mlprof__dash_build(const mlprof__job *job, size_t top, mlprof__dash *d,
                       char *err, size_t errlen);
void mlprof__dash_free(mlprof__dash *d);

#endif
