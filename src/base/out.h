/* The output writer: buffered output to a descriptor or to memory, with
 * hand-written number formatting; every exporter and front end writes
 * through it. Part of the base layer (src/base/), which every layer uses. */
#ifndef MLPROF_OUT_H
#define MLPROF_OUT_H

#include <stddef.h>
#include <stdint.h>

/* mlprof__out_space() always succeeds for up to this many bytes. */
#define MLPROF__OUT_SLACK 4096

/* Errors are sticky: after the first failure the writer keeps accepting (and
 * discarding) output so exporters need not check every call; they look at
 * err, or the value of mlprof__out_flush(), once at the end. */
typedef struct {
  int fd; /* -1: the output stays in memory and grows */
  char *buf;
  size_t len, cap;
  int err;          /* 0, MLPROF_EIO or MLPROF_ENOMEM */
  int sys_errno;    /* errno of the write that failed */
  uint64_t flushed; /* bytes handed to fd so far */
} mlprof__out;

/* Bytes written so far, buffered or not. */
static inline uint64_t mlprof__out_pos(const mlprof__out *o) {
  return o->flushed + o->len;
}

/* Prepares a writer to fd (a 1 MiB buffer), or in memory when fd is -1.
 * Returns 0 or MLPROF_ENOMEM (then *o needs no mlprof__out_close). */
int mlprof__out_open(mlprof__out *o, int fd);

/* Frees the buffer without writing what is still in it. */
void mlprof__out_close(mlprof__out *o);

/* Writes the buffered bytes to the fd (nothing for a memory writer) and
 * returns o->err. */
int mlprof__out_flush(mlprof__out *o);

/* Slow path of mlprof__out_space: flushes or grows. */
char *mlprof__out_grow(mlprof__out *o, size_t n);

/* A pointer to n writable bytes at the end of the output (n at most
 * MLPROF__OUT_SLACK); after writing, pass the end to mlprof__out_end. */
static inline char *mlprof__out_space(mlprof__out *o, size_t n) {
  if (o->cap - o->len >= n) return o->buf + o->len;
  return mlprof__out_grow(o, n);
}

static inline void mlprof__out_end(mlprof__out *o, char *end) {
  o->len = (size_t)(end - o->buf);
}

/* Writes a file through a temporary one beside path (given the usual mode),
 * renamed over path only when everything was written: a failure never
 * leaves a partial file under that name. fn writes the content through o
 * and may put a reason in err. Returns 0, or fn's error, MLPROF_EIO or
 * MLPROF_ENOMEM, with a one-line reason in err. */
int mlprof__write_atomically(const char *path,
                             int (*fn)(void *ctx, mlprof__out *o, char *err,
                                       size_t errlen),
                             void *ctx, char *err, size_t errlen);

/* Raw bytes of any length. */
void mlprof__out_write(mlprof__out *o, const void *s, size_t n);
/* A string literal only: the "" around s make anything else a compile error
 * (sizeof of a pointer would silently write 8 bytes). */
#define mlprof__out_lit(o, s) mlprof__out_write((o), "" s "", sizeof(s) - 1)
void mlprof__out_str(mlprof__out *o, const char *s);
void mlprof__out_printf(mlprof__out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Number formatting into a buffer with room for 24 bytes: each returns the
 * end of what it wrote. No locale, no printf: these run once per event. */
char *mlprof__fmt_u64(char *p, uint64_t v);
char *mlprof__fmt_i64(char *p, int64_t v);
/* ns as microseconds with three decimals, "1234.567": exact, as the Chrome
 * trace format wants microseconds. */
char *mlprof__fmt_us(char *p, uint64_t ns);

void mlprof__out_u64(mlprof__out *o, uint64_t v);
void mlprof__out_i64(mlprof__out *o, int64_t v);
/* A JSON number that reads back to exactly v: integers and values with up
 * to 9 decimals as such ("3", "0.25"), others with 17 significant digits;
 * null for NaN and infinities. */
void mlprof__out_f64(mlprof__out *o, double v);

#endif
