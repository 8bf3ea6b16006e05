/* The dashboard's data model: what mlprof html and mlprof serve draw (a
 * job's report, resources, findings with default options and call tree),
 * from one analysis run. */
#ifndef MLPROF_DASHBOARD_H
#define MLPROF_DASHBOARD_H

#include <stddef.h>

#include "analysis.h"

/* Zones in a dashboard at most (the largest by total time). */
#define MLPROF__DASH_TOP 2000

/* Sets *o to the dashboard's analyses: all of them, zones sorted by total,
 * the first top kept (0: all). Run them with mlprof__analysis_run. */
void mlprof__dash_opts(mlprof__analysis_opts *o, size_t top);

#endif
