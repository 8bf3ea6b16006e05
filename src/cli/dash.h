/* What mlprof html and mlprof serve draw: a job's report, resources,
 * findings (default options) and call tree, from one analysis run. */
#ifndef MLPROF_CLI_DASH_H
#define MLPROF_CLI_DASH_H

#include <stddef.h>

#include "../analyze/analysis.h"

/* Zones in a dashboard at most (the largest by total time). */
#define MLPROF__DASH_TOP 2000

/* Sets *o to the dashboard's analyses: all of them, zones sorted by total,
 * the first top kept (0: all). Run them with mlprof__analysis_run. */
void mlprof__dash_opts(mlprof__analysis_opts *o, size_t top);

#endif
