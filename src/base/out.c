/* The output writer every exporter and front end writes through. */
#include "out.h"

#include <errno.h>
#include <math.h>
#include <mlprof.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OUT_FD_BUFFER (256u << 10)
#define OUT_MEM_INITIAL (2 * MLPROF__OUT_SLACK)

int mlprof__write_atomically(const char *path,
                             int (*fn)(void *ctx, mlprof__out *o, char *err,
                                       size_t errlen),
                             void *ctx, char *err, size_t errlen) {
  size_t n = strlen(path) + 16;
  char *tmp = malloc(n);
  if (!tmp) {
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  snprintf(tmp, n, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    free(tmp);
    return MLPROF_EIO;
  }
  /* mkstemp makes the file 0600: give it the mode a new file would get. */
  mode_t mask = umask(0);
  umask(mask);
  int rc = 0;
  mlprof__out o;
  err[0] = '\0';
  if (fchmod(fd, 0666 & ~mask) != 0) {
    snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
    rc = MLPROF_EIO;
  } else if (mlprof__out_open(&o, fd) != 0) {
    snprintf(err, errlen, "out of memory");
    rc = MLPROF_ENOMEM;
  } else {
    rc = fn(ctx, &o, err, errlen);
    int wrc = mlprof__out_flush(&o);
    if (!rc) rc = wrc;
    if (rc == MLPROF_EIO && o.err == MLPROF_EIO)
      snprintf(err, errlen, "cannot write %s: %s", path, strerror(o.sys_errno));
    else if (rc && !err[0])
      snprintf(err, errlen, "cannot write %s: %s", path, mlprof_strerror(rc));
    mlprof__out_close(&o);
  }
  if (close(fd) != 0 && !rc) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    rc = MLPROF_EIO;
  }
  if (!rc && rename(tmp, path) != 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    rc = MLPROF_EIO;
  }
  if (rc) unlink(tmp);
  free(tmp);
  return rc;
}

int mlprof__out_open(mlprof__out *o, int fd) {
  memset(o, 0, sizeof *o);
  o->fd = fd;
  o->cap = fd >= 0 ? OUT_FD_BUFFER : OUT_MEM_INITIAL;
  o->buf = malloc(o->cap);
  if (!o->buf) return MLPROF_ENOMEM;
  return 0;
}

void mlprof__out_close(mlprof__out *o) {
  free(o->buf);
  o->buf = NULL;
  o->len = o->cap = 0;
}

static void out_fail(mlprof__out *o, int err, int sys_errno) {
  if (!o->err) {
    o->err = err;
    o->sys_errno = sys_errno;
  }
}

int mlprof__out_flush(mlprof__out *o) {
  if (o->fd < 0) return o->err;
  o->flushed += o->len;
  size_t off = 0;
  while (off < o->len && !o->err) {
    ssize_t w = write(o->fd, o->buf + off, o->len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      out_fail(o, MLPROF_EIO, w < 0 ? errno : EIO);
      break;
    }
    off += (size_t)w;
  }
  o->len = 0;
  return o->err;
}

char *mlprof__out_grow(mlprof__out *o, size_t n) {
  if (o->fd >= 0) {
    mlprof__out_flush(o);
  } else if (!o->err) {
    size_t cap = o->cap;
    while (cap - o->len < n) cap *= 2;
    char *b = realloc(o->buf, cap);
    if (b) {
      o->buf = b;
      o->cap = cap;
    } else {
      out_fail(o, MLPROF_ENOMEM, ENOMEM);
    }
  }
  /* After an error the output is discarded: start again at the front, where
   * the buffer always has room for MLPROF__OUT_SLACK bytes. */
  if (o->cap - o->len < n) o->len = 0;
  return o->buf + o->len;
}

void mlprof__out_write(mlprof__out *o, const void *s, size_t n) {
  const char *c = s;
  while (n > 0) {
    size_t k = n < MLPROF__OUT_SLACK ? n : MLPROF__OUT_SLACK;
    char *p = mlprof__out_space(o, k);
    memcpy(p, c, k);
    mlprof__out_end(o, p + k);
    c += k;
    n -= k;
  }
}

void mlprof__out_str(mlprof__out *o, const char *s) {
  mlprof__out_write(o, s, strlen(s));
}

void mlprof__out_printf(mlprof__out *o, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    mlprof__out_write(o, small, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    out_fail(o, MLPROF_ENOMEM, ENOMEM);
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  mlprof__out_write(o, big, (size_t)n);
  free(big);
}

/* Two digits at a time from a table: the exporters format several numbers
 * per event, so this loop is on the hot path of the trace export. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536"
    "37383940414243444546474849505152535455565758596061626364656667686970717273"
    "7475767778798081828384858687888990919293949596979899";

char *mlprof__fmt_u64(char *p, uint64_t v) {
  char tmp[20];
  char *t = tmp + sizeof tmp;
  while (v >= 100) {
    unsigned r = (unsigned)(v % 100);
    v /= 100;
    t -= 2;
    memcpy(t, digit_pairs + 2 * r, 2);
  }
  if (v >= 10) {
    t -= 2;
    memcpy(t, digit_pairs + 2 * v, 2);
  } else {
    *--t = (char)('0' + v);
  }
  size_t len = (size_t)(tmp + sizeof tmp - t);
  memcpy(p, t, len);
  return p + len;
}

char *mlprof__fmt_i64(char *p, int64_t v) {
  if (v < 0) {
    *p++ = '-';
    return mlprof__fmt_u64(p, (uint64_t)0 - (uint64_t)v);
  }
  return mlprof__fmt_u64(p, (uint64_t)v);
}

char *mlprof__fmt_us(char *p, uint64_t ns) {
  unsigned frac = (unsigned)(ns % 1000);
  p = mlprof__fmt_u64(p, ns / 1000);
  *p++ = '.';
  *p++ = (char)('0' + frac / 100);
  memcpy(p, digit_pairs + 2 * (frac % 100), 2);
  return p + 2;
}

void mlprof__out_u64(mlprof__out *o, uint64_t v) {
  char *p = mlprof__out_space(o, 24);
  mlprof__out_end(o, mlprof__fmt_u64(p, v));
}

void mlprof__out_i64(mlprof__out *o, int64_t v) {
  char *p = mlprof__out_space(o, 24);
  mlprof__out_end(o, mlprof__fmt_i64(p, v));
}

void mlprof__out_f64(mlprof__out *o, double v) {
  static const double pow10[] = {1,   1e1, 1e2, 1e3, 1e4,
                                 1e5, 1e6, 1e7, 1e8, 1e9};
  if (!isfinite(v)) {
    mlprof__out_lit(o, "null");
    return;
  }
  /* Values with few decimals (0.25, 3.5, 1e-3) are printed from an integer:
   * m / 10^k == v proves the decimal reads back as v, since the division of
   * exact operands is correctly rounded, as strtod is. printf is the slow
   * path, for values that need all 17 digits. */
  for (int k = 0; k < 10; k++) {
    double m = v * pow10[k];
    if (fabs(m) >= 9007199254740992.0) break;
    if (m != floor(m) || m / pow10[k] != v) continue;
    char *p = mlprof__out_space(o, 32);
    if (m < 0) *p++ = '-';
    char digits[24];
    char *e = mlprof__fmt_u64(digits, (uint64_t)fabs(m));
    size_t n = (size_t)(e - digits), lead = n > (size_t)k ? n - (size_t)k : 0;
    memcpy(p, digits, lead);
    p += lead;
    if (k) {
      *p++ = lead ? '.' : '0';
      if (!lead) *p++ = '.';
      for (size_t z = n; z < (size_t)k; z++) *p++ = '0';
      memcpy(p, digits + lead, n - lead);
      p += n - lead;
    }
    mlprof__out_end(o, p);
    return;
  }
  char b[32];
  snprintf(b, sizeof b, "%.17g", v);
  mlprof__out_str(o, b);
}
