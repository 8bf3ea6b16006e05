/* Nested protobuf messages in a memory writer (pb.h). */
#include "pb.h"

#include "escape.h"

size_t mlprof__pb_open(mlprof__out *m, uint32_t field) {
  char *p = mlprof__out_space(m, MLPROF__PB_MAX_FIELD);
  p = mlprof__pb_tag(p, field, MLPROF__PB_LEN);
  *p++ = 0;
  mlprof__out_end(m, p);
  return m->len - 1;
}

void mlprof__pb_close(mlprof__out *m, size_t at) {
  if (m->err || at >= m->len) return;
  size_t len = m->len - at - 1, n = mlprof__pb_varint_len(len);
  if (n > 1) {
    /* Room for the longer length, then the content moved past it. */
    char *p = mlprof__out_space(m, n - 1);
    if (m->err) return;
    mlprof__out_end(m, p + n - 1);
    memmove(m->buf + at + n, m->buf + at + 1, len);
  }
  mlprof__pb_varint(m->buf + at, len);
}

void mlprof__pb_string(mlprof__out *m, uint32_t field, const char *s,
                       size_t n) {
  size_t at = mlprof__pb_open(m, field);
  mlprof__out_utf8(m, s, n);
  mlprof__pb_close(m, at);
}
