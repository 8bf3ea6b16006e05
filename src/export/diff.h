/* mlprof diff's outputs: a comparison of two runs (src/analyze/diff.h) as
 * text, JSON or JUnit XML. Each writes through an mlprof__out the caller
 * opened and flushes. */
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

/* The same as aligned text for a terminal: the runs, the step, a table of
 * the zones (verdict, counts, medians, change, p, note), the verdicts'
 * counts, the uniform shift's and the slower machine's notes and the
 * conclusion (REGRESSION or not). Returns 0, MLPROF_ENOMEM, or the
 * writer's error. */
int mlprof__export_diff_text(const mlprof__diff *d,
                             const mlprof__diff_options *opt, const char *bpath,
                             const mlprof__report *base, const char *npath,
                             const mlprof__report *next, mlprof__out *o);

/* The same as JUnit XML: one testsuite, the step and then each zone a
 * testcase, a failure for each slower one the machine does not explain, a
 * skipped one for each new or removed zone; paths, options and notes as
 * properties. Returns 0; output errors stay in o. */
int mlprof__export_diff_junit(const mlprof__diff *d,
                              const mlprof__diff_options *opt,
                              const char *bpath, const char *npath,
                              mlprof__out *o);

#endif
