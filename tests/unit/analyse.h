/* The analysis driver for the tests: run the analyses named in want on a
 * job, as the front ends do. */
#ifndef MLPROF_TEST_ANALYSE_H
#define MLPROF_TEST_ANALYSE_H

#include "analyze/analysis.h"

static inline int analyse(const mlprof__job *job, unsigned want,
                          mlprof__analysis *a, char *err, size_t errlen) {
  mlprof__analysis_opts o;
  mlprof__analysis_opts_init(&o);
  o.want = want;
  return mlprof__analysis_run(job, &o, a, err, errlen);
}

#endif
