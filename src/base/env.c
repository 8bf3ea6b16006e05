/* What the recording side reads of its environment and how it speaks up:
 * used by the recording library and its sampler. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base.h"

__thread int mlprof__quiet __attribute__((tls_model("initial-exec")));

const char *mlprof__env(const char *name) { return secure_getenv(name); }

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
