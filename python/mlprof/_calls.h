/* What the call tracer (_calls.c) and the rest of the _mlprof extension
 * (_mlprof.c) share. Internal to the extension. */
#ifndef MLPROF_PY_CALLS_H
#define MLPROF_PY_CALLS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <mlprof.h>

/* The recording functions in use (this module's copy of the library or the
 * preloaded one), fixed at import; defined in _mlprof.c. */
typedef struct {
  int (*zone_begin_site)(const mlprof_site *);
  void (*zone_end)(void);
  int (*track_spans)(const char *, const mlprof_span *, size_t);
} mlprof__py_recorder;
extern mlprof__py_recorder mlprof__py_rec;

/* The tracer's methods (calls_start, calls_stop, lines_*), for the module's
 * method table; ends with a NULL entry. */
extern PyMethodDef mlprof__calls_methods[];

#endif
