/* What the recording side reads of its environment and how it speaks up:
 * used by the recording library and its sampler.
 *
 * The environment is read from a copy of the variables the library reads
 * (MLPROF_* and the launchers' rank variables, base.h), taken where
 * reading the program's environment is as safe as the program's own getenv:
 * when the library is loaded, when a session starts (mlprof_init, on the
 * program's thread) and in a forked child (its fork handler, on the child's
 * only thread). Read anywhere else, the array could be in the middle of a
 * change: the writer and sampler threads run beside the program's setenv,
 * and a forked child's profile starts on its first recorded allocation,
 * which may be setenv's own realloc of the array it has just freed (MPICH's
 * launcher putenv()s between fork and exec: a crash, before this copy).
 * Two copies take turns, so that one being read is never the one rewritten
 * by the next mlprof_init. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "base.h"

__thread int mlprof__quiet __attribute__((tls_model("initial-exec")));

extern char **environ;

#define ENV_BYTES 65536

/* Each copy: "NAME=VALUE\0" after another, in the environment's order; an
 * empty one ends them. */
static char copies[2][ENV_BYTES];
static char *_Atomic current;
static atomic_flag copying = ATOMIC_FLAG_INIT;

/* The value in var ("NAME=VALUE") when its NAME is name, else NULL. */
static const char *value_of(const char *var, const char *name) {
  size_t len = strlen(name);
  return strncmp(var, name, len) == 0 && var[len] == '=' ? var + len + 1 : NULL;
}

static int wanted(const char *var) {
  static const char *const launchers[] = {MLPROF__RANK_VARS, MLPROF__WORLD_VARS,
                                          MLPROF__LOCAL_RANK_VARS,
                                          MLPROF__JOB_VARS};
  if (mlprof__has_prefix(var, "MLPROF_")) return 1;
  for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++)
    if (value_of(var, launchers[i])) return 1;
  return 0;
}

void mlprof__env_copy(void) {
  /* Another thread copies it now (or did, when a fork took this child from
   * it midway: the child keeps the last whole copy). */
  if (atomic_flag_test_and_set(&copying)) return;
  char *c = copies[atomic_load(&current) == copies[0]];
  size_t used = 0;
  /* A caller with privileges it did not have must not choose where the
   * profile goes or which library is loaded (secure_getenv's rule). */
  for (char **e = getauxval(AT_SECURE) ? NULL : environ; e && *e; e++) {
    if (!wanted(*e)) continue;
    size_t len = strlen(*e) + 1;
    if (len >= ENV_BYTES - used) {
      static _Atomic int warned;
      mlprof__warn_once(&warned,
                        "ignoring %.*s: the MLPROF_ variables are more than "
                        "mlprof keeps (%d KiB in all)",
                        (int)strcspn(*e, "="), *e, ENV_BYTES >> 10);
      continue;
    }
    memcpy(c + used, *e, len);
    used += len;
  }
  c[used] = 0;
  atomic_store(&current, c);
  atomic_flag_clear(&copying);
}

/* Before the library's other constructors read anything. */
__attribute__((constructor(101))) static void env_setup(void) {
  mlprof__env_copy();
}

const char *mlprof__env(const char *name) {
  const char *c = atomic_load(&current);
  if (!c) {
    mlprof__env_copy(); /* a caller before the constructor */
    if (!(c = atomic_load(&current))) return NULL;
  }
  const char *value = NULL;
  for (const char *v = c; *v && !value; v += strlen(v) + 1)
    value = value_of(v, name);
  return value;
}

void mlprof__warn_once(_Atomic int *flag, const char *fmt, ...) {
  if (flag && (atomic_load_explicit(flag, memory_order_relaxed) ||
               atomic_exchange(flag, 1)))
    return;
  char line[512];
  int n = snprintf(line, sizeof line, "mlprof[%d]: ", (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  mlprof__fd_stderr(line, len);
}
