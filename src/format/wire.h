/* Encodings shared by the profile writer and reader: see docs/format.md. */
#ifndef MLPROF_WIRE_H
#define MLPROF_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MLPROF__FILE_MAGIC "MLPROF\r\n"
#define MLPROF__FORMAT_MAJOR 1
#define MLPROF__FORMAT_MINOR 5
#define MLPROF__FILE_HEADER_SIZE 16
#define MLPROF__CHUNK_MAGIC "MPCK"
#define MLPROF__CHUNK_HEADER_SIZE 16
#define MLPROF__CHUNK_MAX (16u << 20)
/* Thread ids from here on are tracks: spans measured elsewhere
 * (mlprof_track_spans), not a kernel thread's. */
#define MLPROF__TRACK_TID_BASE 0x80000000u

enum {
  MLPROF__CHUNK_HEADER = 1,
  MLPROF__CHUNK_NAMES = 2,
  MLPROF__CHUNK_THREAD = 3,
  MLPROF__CHUNK_EVENTS = 4,
  MLPROF__CHUNK_META = 5,
  MLPROF__CHUNK_END = 6,
  MLPROF__CHUNK_SOURCES = 7,
  MLPROF__CHUNK_SAMPLES = 8,
  MLPROF__CHUNK_LINES = 9,   /* since 1.4 */
  MLPROF__CHUNK_STACKS = 10, /* since 1.5 */
  MLPROF__CHUNK_ALLOCS = 11, /* since 1.5 */
};

/* The records of an ALLOCS chunk (since 1.5). */
enum {
  MLPROF__ALLOC_ALLOC = 1,
  MLPROF__ALLOC_FREE = 2,
  /* Allocations of one site made and freed within one flush interval,
   * counted together (since 1.5, helper sites). */
  MLPROF__ALLOC_FOLDED = 3,
};

enum {
  MLPROF__REC_SPAN = 1,
  MLPROF__REC_GAUGE = 2,
  MLPROF__REC_UNITS = 3,
  MLPROF__REC_SPAN_META = 4,
  MLPROF__REC_SPAN_UNITS = 5,
  MLPROF__REC_STEP = 6,
  MLPROF__REC_OPEN = 7,
  MLPROF__REC_STEP_END = 8, /* since 1.3 */
};

/* The records of a STACKS chunk (since 1.5), each a kind byte first. */
enum {
  MLPROF__STK_FUNC = 1,   /* id, file, function, first line */
  MLPROF__STK_FRAME = 2,  /* id, function id (0: "<truncated>"), line */
  MLPROF__STK_NATIVE = 3, /* id, pc, module, symbol, offset */
  MLPROF__STK_NODE = 4,   /* id, parent stack id (0: none), frame id */
  MLPROF__STK_SAMPLE = 5, /* dt, tid, stack id, flags, cpu ns */
  MLPROF__STK_RATE = 6,   /* samples per second */
};

enum {
  MLPROF__NAME_ZONE = 0,
  MLPROF__NAME_GAUGE = 1,
  MLPROF__NAME_UNITS = 2,
  MLPROF__NAME_STRING = 3,
  MLPROF__NAME_MEASURE = 4,
};

/* How a process's profile ended (the END chunk's `how`, since 1.2). */
enum {
  MLPROF__END_SHUTDOWN = 0, /* mlprof_shutdown(), or a file older than 1.2 */
  MLPROF__END_EXIT = 1,     /* exit() or _exit(): status is the exit status */
  MLPROF__END_EXEC = 2,     /* exec: the process goes on as another program */
  MLPROF__END_SIGNAL = 3,   /* died of a signal: status is its number */
};

enum {
  MLPROF__MEASURE_VALID = 0,
  MLPROF__MEASURE_ABSENT = 1,
};

/* CRC-32 (IEEE, zlib's). Start with crc = 0; feed pieces in order. */
uint32_t mlprof__crc32(uint32_t crc, const void *buf, size_t len);

/* Encoders write at p (which must have 10 free bytes) and return the new end.
 */
static inline uint8_t *mlprof__put_uv(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

static inline uint8_t *mlprof__put_sv(uint8_t *p, int64_t v) {
  return mlprof__put_uv(p, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static inline void mlprof__put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static inline void mlprof__put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t mlprof__get_u16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t mlprof__get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
         ((uint32_t)p[3] << 24);
}

/* A bounded cursor over a payload. Any read past the end, or an overlong
 * varint, sets err and returns 0; callers check err once per record. */
typedef struct {
  const uint8_t *p, *end;
  int err;
} mlprof__cursor;

static inline uint64_t mlprof__get_uv(mlprof__cursor *c) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (c->p >= c->end) break;
    uint8_t b = *c->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  c->err = 1;
  return 0;
}

static inline int64_t mlprof__get_sv(mlprof__cursor *c) {
  uint64_t u = mlprof__get_uv(c);
  return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

static inline uint8_t mlprof__get_u8(mlprof__cursor *c) {
  if (c->p >= c->end) {
    c->err = 1;
    return 0;
  }
  return *c->p++;
}

static inline double mlprof__get_f64(mlprof__cursor *c) {
  double d = 0;
  if (c->end - c->p < 8) {
    c->err = 1;
    return 0;
  }
  memcpy(&d, c->p, 8);
  c->p += 8;
  return d;
}

/* A string field: sets *len and returns a pointer into the payload (not
 * NUL-terminated), or NULL with err set. */
static inline const char *mlprof__get_str(mlprof__cursor *c, size_t *len) {
  uint64_t n = mlprof__get_uv(c);
  if (c->err || n > (uint64_t)(c->end - c->p)) {
    c->err = 1;
    *len = 0;
    return NULL;
  }
  const char *s = (const char *)c->p;
  c->p += n;
  *len = (size_t)n;
  return s;
}

#endif
