/* The dashboard's data model: what mlprof html and mlprof serve draw (a
 * job's report, resources, findings with default options and call tree),
 * from one analysis run. */
#ifndef MLPROF_DASHBOARD_H
#define MLPROF_DASHBOARD_H

#include <stddef.h>

#include "analysis.h"

/* Zones in a dashboard at most (the largest by total time). */
#define MLPROF__DASH_TOP 2000
/* Items of the span timeline's pyramid (lod.h) in a page at most, about
 * 25 bytes each: the page stays under 5 MB at any profile size. */
#define MLPROF__DASH_LOD_ITEMS 120000
/* Items the live server keeps (32 bytes each: 128 MB), whatever the run's
 * size: the finer levels of a window come from the profiles' chunks
 * (mlprof__lod_window). A run of up to about 2 million spans keeps them
 * all. */
#define MLPROF__DASH_LOD_LIVE_ITEMS 4000000
/* Items in the answer for one window at most. */
#define MLPROF__DASH_LOD_WINDOW_ITEMS 200000
/* Bytes of span metadata and units in a static page at most; past it the
 * page has none (mlprof serve answers them per span). */
#define MLPROF__DASH_LOD_ARGS_BYTES (1u << 20)

/* Sets *o to the dashboard's analyses: all of them, zones sorted by total,
 * the first top kept (0: all), the pyramid capped at MLPROF__DASH_LOD_ITEMS.
 * Run them with mlprof__analysis_run. */
void mlprof__dash_opts(mlprof__analysis_opts *o, size_t top);

#endif
