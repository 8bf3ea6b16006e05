/* What the torch hooks (_hooks.c) and the rest of the _mlprof extension
 * (_mlprof.c) share. Internal to the extension. */
#ifndef MLPROF_PY_HOOKS_H
#define MLPROF_PY_HOOKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <mlprof.h>

/* Defined in _mlprof.c. A zone begun and ended as `with zone:` does, on the
 * calling thread's stack of the package's zones (so both nest). */
void mlprof__py_zone_enter(const mlprof_site *site);
void mlprof__py_zone_exit(void);
/* n units for the calling thread's innermost open zone. */
void mlprof__py_units_add(const char *name, uint64_t n);
/* The site of a mlprof._mlprof.Zone; NULL with a TypeError for anything
 * else. */
const mlprof_site *mlprof__py_zone_site(PyObject *zone);

/* Defined in _hooks.c: the module's functions for mlprof.torch's hooks
 * (layer_hooks), ending with a NULL entry. */
extern PyMethodDef mlprof__hooks_methods[];

#endif
