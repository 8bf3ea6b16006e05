/* The Protocol Buffers wire format, written by hand for the Perfetto
 * exporter (no protobuf library): varints, tags, fixed-width numbers and
 * length-delimited fields, and nested messages built in a memory writer whose
 * lengths are filled in when each closes. Only encoding: mlprof reads no
 * protobuf. */
#ifndef MLPROF_PB_H
#define MLPROF_PB_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../base/out.h"

/* Wire types. */
#define MLPROF__PB_VARINT 0
#define MLPROF__PB_I64 1
#define MLPROF__PB_LEN 2

/* A field's tag, a varint and a 64-bit value take at most this many bytes. */
#define MLPROF__PB_MAX_FIELD 15

/* Bytes of v as a varint: 1 to 10. */
static inline size_t mlprof__pb_varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

/* Writes v as a varint (7 bits a byte, least significant first, the high
 * bit set on every byte but the last) and returns the end. */
static inline char *mlprof__pb_varint(char *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (char)(v | 0x80);
    v >>= 7;
  }
  *p++ = (char)v;
  return p;
}

static inline char *mlprof__pb_tag(char *p, uint32_t field, int wire) {
  return mlprof__pb_varint(p, (uint64_t)field << 3 | (uint64_t)wire);
}

/* A varint field (uint32/64, int64 as two's complement, bool, enum). */
static inline char *mlprof__pb_uint(char *p, uint32_t field, uint64_t v) {
  return mlprof__pb_varint(mlprof__pb_tag(p, field, MLPROF__PB_VARINT), v);
}

/* A fixed64 field, little-endian. */
static inline char *mlprof__pb_fixed64(char *p, uint32_t field, uint64_t v) {
  p = mlprof__pb_tag(p, field, MLPROF__PB_I64);
  for (int i = 0; i < 8; i++) *p++ = (char)(v >> (8 * i));
  return p;
}

/* A double field: its IEEE 754 bits as a fixed64. */
static inline char *mlprof__pb_double(char *p, uint32_t field, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  return mlprof__pb_fixed64(p, field, bits);
}

/* The same fields written at the end of a writer. */
static inline void mlprof__pb_out_uint(mlprof__out *m, uint32_t field,
                                       uint64_t v) {
  char *p = mlprof__out_space(m, MLPROF__PB_MAX_FIELD);
  mlprof__out_end(m, mlprof__pb_uint(p, field, v));
}

static inline void mlprof__pb_out_fixed64(mlprof__out *m, uint32_t field,
                                          uint64_t v) {
  char *p = mlprof__out_space(m, MLPROF__PB_MAX_FIELD);
  mlprof__out_end(m, mlprof__pb_fixed64(p, field, v));
}

static inline void mlprof__pb_out_double(mlprof__out *m, uint32_t field,
                                         double v) {
  char *p = mlprof__out_space(m, MLPROF__PB_MAX_FIELD);
  mlprof__out_end(m, mlprof__pb_double(p, field, v));
}

/* Opens a nested message (or any length-delimited field) as field of what
 * is being built in m, a memory writer (fd -1): writes its tag and reserves
 * one byte for its length. Returns the offset to pass to mlprof__pb_close. */
size_t mlprof__pb_open(mlprof__out *m, uint32_t field);

/* Closes the field opened at offset at: writes the length of what was
 * written since, moving it on when the length needs more than one byte. A
 * writer in error is left as it is. */
void mlprof__pb_close(mlprof__out *m, size_t at);

/* A string field: s as valid UTF-8 (mlprof__out_utf8: each invalid byte
 * becomes U+FFFD), so a name of any bytes gives a well-formed field. */
void mlprof__pb_string(mlprof__out *m, uint32_t field, const char *s, size_t n);

#endif
