/* mlprof diff's JSON: a comparison of two runs (src/analyze/diff.h). */
#ifndef MLPROF_EXPORT_DIFF_H
#define MLPROF_EXPORT_DIFF_H

#include "../analyze/compare.h"
#include "../analyze/diff.h"
#include "../base/out.h"

/* Writes d, found with opt between the runs base (read from bpath) and next
 * (npath), to o as one JSON document (schema mlprof.diff/1). Returns 0;
 * output errors stay in o (mlprof__out_flush). */
int mlprof__export_diff_json(const mlprof__diff *d,
                             const mlprof__diff_options *opt, const char *bpath,
                             const mlprof__report *base, const char *npath,
                             const mlprof__report *next, mlprof__out *o);

#endif
