/* Synthetic profiles for the tests (and the generated jobs of
 * bench/bench_dist.c): chunks written by hand, byte by byte as
 * docs/format.md describes them, independent of the recording library. */
#ifndef MLPROF_SYNTH_H
#define MLPROF_SYNTH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/wire.h"
#include "sample/sample.h"

/* A payload's room; a file defining it larger before including this one
 * writes larger chunks (at most MLPROF__CHUNK_MAX). */
#ifndef SYNTH_PAYLOAD_BYTES
#define SYNTH_PAYLOAD_BYTES 8192
#endif

typedef struct {
  uint8_t b[SYNTH_PAYLOAD_BYTES];
  size_t n;
} payload;

static inline void p_uv(payload *p, uint64_t v) {
  p->n = (size_t)(mlprof__put_uv(p->b + p->n, v) - p->b);
}
static inline void p_sv(payload *p, int64_t v) {
  p->n = (size_t)(mlprof__put_sv(p->b + p->n, v) - p->b);
}
static inline void p_u8(payload *p, uint8_t v) { p->b[p->n++] = v; }
static inline void p_str(payload *p, const char *s, size_t n) {
  p_uv(p, n);
  memcpy(p->b + p->n, s, n);
  p->n += n;
}
static inline void p_cstr(payload *p, const char *s) { p_str(p, s, strlen(s)); }
static inline void p_f64(payload *p, double v) {
  memcpy(p->b + p->n, &v, 8);
  p->n += 8;
}

/* Writes p as a chunk of type and empties it. */
static inline void chunk(FILE *f, uint16_t type, payload *p) {
  uint8_t h[16];
  memcpy(h, MLPROF__CHUNK_MAGIC, 4);
  mlprof__put_u16(h + 4, type);
  mlprof__put_u16(h + 6, 0);
  mlprof__put_u32(h + 8, (uint32_t)p->n);
  uint32_t crc = mlprof__crc32(0, h + 4, 8);
  mlprof__put_u32(h + 12, mlprof__crc32(crc, p->b, p->n));
  fwrite(h, 1, sizeof h, f);
  fwrite(p->b, 1, p->n, f);
  p->n = 0;
}

static inline void p_name(payload *p, uint32_t id, uint8_t kind, uint8_t cat,
                          const char *s) {
  p_uv(p, id);
  p_u8(p, kind);
  p_u8(p, cat);
  p_cstr(p, s);
  p_cstr(p, "");
  p_cstr(p, "");
  p_uv(p, 0);
}

/* A new file with its file header (format 1.minor). */
static inline FILE *synth_open(const char *path, uint16_t minor) {
  FILE *f = fopen(path, "wb");
  if (!f) return NULL;
  uint8_t fh[16] = "MLPROF\r\n";
  mlprof__put_u16(fh + 8, 1);
  mlprof__put_u16(fh + 10, minor);
  fwrite(fh, 1, 16, f);
  return f;
}

/* A HEADER chunk of rank `rank` of `world` (-1: unknown), one argv entry
 * (exe). */
static inline void synth_rank_header(FILE *f, uint64_t pid, uint64_t ppid,
                                     uint64_t start_wall, uint64_t start_mono,
                                     int64_t rank, int64_t world,
                                     const char *host, const char *exe) {
  payload p = {.n = 0};
  p_uv(&p, pid);
  p_uv(&p, ppid);
  p_uv(&p, start_wall);
  p_uv(&p, start_mono);
  p_sv(&p, rank);
  p_sv(&p, world);
  p_cstr(&p, host);
  p_cstr(&p, exe);
  p_uv(&p, 1);
  p_cstr(&p, exe);
  p_cstr(&p, "monotonic");
  p_uv(&p, 200);
  chunk(f, MLPROF__CHUNK_HEADER, &p);
}

/* A HEADER chunk: no rank, one argv entry (exe). */
static inline void synth_header(FILE *f, uint64_t pid, uint64_t ppid,
                                uint64_t start_mono, const char *host,
                                const char *exe) {
  synth_rank_header(f, pid, ppid, 1700000000000000000ull + start_mono,
                    start_mono, -1, -1, host, exe);
}

/* A META chunk of one entry. */
static inline void synth_meta(FILE *f, const char *key, const char *value) {
  payload p = {.n = 0};
  p_uv(&p, 1);
  p_cstr(&p, key);
  p_cstr(&p, value);
  chunk(f, MLPROF__CHUNK_META, &p);
}

/* The EVENTS chunks of one thread of file f, filled record by record:
 * times are ns since the profile's start, each record's relative to the
 * one before it as the format has it. */
typedef struct {
  FILE *f;
  uint32_t tid;
  uint64_t t;
  payload p;
} synth_events;

/* Writes the chunk being filled, if any. */
static inline void synth_ev_flush(synth_events *e) {
  if (e->p.n) chunk(e->f, MLPROF__CHUNK_EVENTS, &e->p);
}

/* Room for one more record (at most 64 bytes). */
static inline void synth_ev_room(synth_events *e) {
  if (e->p.n + 64 > sizeof e->p.b) synth_ev_flush(e);
  if (!e->p.n) {
    p_uv(&e->p, e->tid);
    p_uv(&e->p, 0); /* dropped */
    p_uv(&e->p, 0); /* base */
    e->t = 0;
  }
}

static inline void synth_ev_span(synth_events *e, uint32_t name, uint32_t depth,
                                 uint64_t b, uint64_t end) {
  synth_ev_room(e);
  p_u8(&e->p, MLPROF__REC_SPAN);
  p_uv(&e->p, name);
  p_uv(&e->p, depth);
  p_sv(&e->p, (int64_t)b - (int64_t)e->t);
  p_uv(&e->p, end - b);
  e->t = b;
}

/* Metadata and units of the span just added. */
static inline void synth_ev_span_meta(synth_events *e, uint32_t key,
                                      uint32_t value) {
  synth_ev_room(e);
  p_u8(&e->p, MLPROF__REC_SPAN_META);
  p_uv(&e->p, key);
  p_uv(&e->p, value);
}
static inline void synth_ev_span_units(synth_events *e, uint32_t name,
                                       uint64_t n) {
  synth_ev_room(e);
  p_u8(&e->p, MLPROF__REC_SPAN_UNITS);
  p_uv(&e->p, name);
  p_uv(&e->p, n);
}

static inline void synth_ev_step(synth_events *e, uint64_t t) {
  synth_ev_room(e);
  p_u8(&e->p, MLPROF__REC_STEP);
  p_sv(&e->p, (int64_t)t - (int64_t)e->t);
  e->t = t;
}

static inline void synth_end(FILE *f, uint64_t end_ns) {
  payload p = {.n = 0};
  p_uv(&p, end_ns);
  p_uv(&p, 0);
  p_uv(&p, 0);
  chunk(f, MLPROF__CHUNK_END, &p);
}

/* SAMPLES rows: a row header (time as a delta from the previous row, or from
 * base_ns for the first), then exactly n measures. */
static inline void row_begin(payload *p, uint8_t subject, uint64_t id,
                             uint32_t label, int64_t delta, uint32_t n) {
  p_u8(p, subject);
  p_uv(p, id);
  p_uv(p, label);
  p_sv(p, delta);
  p_uv(p, n);
}
static inline void m_valid(payload *p, uint32_t name, double v) {
  p_uv(p, name);
  p_u8(p, MLPROF__MEASURE_VALID);
  p_f64(p, v);
}
static inline void m_absent(payload *p, uint32_t name, uint32_t reason) {
  p_uv(p, name);
  p_u8(p, MLPROF__MEASURE_ABSENT);
  p_uv(p, reason);
}

/* Hostile strings for labels and reasons. */
#define SYNTH_GPU_LABEL "A100 \"x\"\x01<b>\xff&"
#define SYNTH_REASON "no \"sensor\"\x1b[31m,\n=x"

/* A job of two profiles in dir (a mkdtemp template), as `mlprof run`
 * writes it on host "h":
 *
 * root.mlprof: pid 100 (mlprof), start_mono 1000, samples the tree and the
 * machine; sources proc and energy ran, nvml did not. Ticks at its times
 * 1000, 2000, 3000:
 *   tick 1000: process 200 "python3": cpu_pct absent "first sample",
 *              rss_bytes 100; system: cpu_energy_j 0, cpu_temp_c absent
 *              SYNTH_REASON
 *   tick 2000: process 200: cpu_pct 50, rss_bytes 300; process 201 "worker"
 *              (a child started mid-run): cpu_pct 10, rss_bytes 50; system:
 *              cpu_energy_j 1800, cpu_temp_c absent; GPU 0 SYNTH_GPU_LABEL:
 *              gpu_util_pct 20, gpu_energy_j 0
 *   tick 3000: process 200: cpu_pct 70, rss_bytes 200; process 201: cpu_pct
 *              30, rss_bytes 150; system: cpu_energy_j 3600, cpu_temp_c
 *              absent; GPU 0: gpu_util_pct 40, gpu_energy_j 3600
 * child.mlprof: pid 200 (python3), start_mono 1500 (job offset 500), zones
 *   "fwd" 1000..2000 and "tiny" 1600..1700 of its own time (job 1500..2500
 *   and 2100..2200).
 * Writes the two paths into root and child. */
static inline int synth_sampled_job(char *dir, char *root, char *child,
                                    size_t len) {
  if (!mkdtemp(dir)) return -1;
  snprintf(root, len, "%s/root.mlprof", dir);
  snprintf(child, len, "%s/child.mlprof", dir);
  FILE *f = synth_open(root, 1);
  if (!f) return -1;
  synth_header(f, 100, 1, 1000, "h", "/usr/bin/mlprof");
  payload p = {.n = 0};
  enum {
    CPU = 1,
    RSS,
    ENERGY,
    TEMP,
    UTIL,
    GENERGY,
    FIRST,
    WHY,
    PY,
    WORKER,
    GPU
  };
  p_uv(&p, 11);
  p_name(&p, CPU, MLPROF__NAME_MEASURE, 0, "cpu_pct");
  p_name(&p, RSS, MLPROF__NAME_MEASURE, 0, "rss_bytes");
  p_name(&p, ENERGY, MLPROF__NAME_MEASURE, 0, "cpu_energy_j");
  p_name(&p, TEMP, MLPROF__NAME_MEASURE, 0, "cpu_temp_c");
  p_name(&p, UTIL, MLPROF__NAME_MEASURE, 0, "gpu_util_pct");
  p_name(&p, GENERGY, MLPROF__NAME_MEASURE, 0, "gpu_energy_j");
  p_name(&p, FIRST, MLPROF__NAME_STRING, 0, "first sample");
  p_name(&p, WHY, MLPROF__NAME_STRING, 0, SYNTH_REASON);
  p_name(&p, PY, MLPROF__NAME_STRING, 0, "python3");
  p_name(&p, WORKER, MLPROF__NAME_STRING, 0, "worker");
  p_name(&p, GPU, MLPROF__NAME_STRING, 0, SYNTH_GPU_LABEL);
  chunk(f, MLPROF__CHUNK_NAMES, &p);
  p_uv(&p, 3);
  p_cstr(&p, "proc");
  p_u8(&p, 1);
  p_cstr(&p, "");
  p_cstr(&p, "energy");
  p_u8(&p, 1);
  p_cstr(&p, "");
  p_cstr(&p, "nvml");
  p_u8(&p, 0);
  p_cstr(&p, "no NVML: libnvidia-ml.so.1 not found");
  chunk(f, MLPROF__CHUNK_SOURCES, &p);
  /* tick 1000, one chunk */
  p_uv(&p, 1000);
  row_begin(&p, MLPROF__SUBJECT_PROCESS, 200, PY, 0, 2);
  m_absent(&p, CPU, FIRST);
  m_valid(&p, RSS, 100);
  row_begin(&p, MLPROF__SUBJECT_SYSTEM, 0, 0, 0, 2);
  m_valid(&p, ENERGY, 0);
  m_absent(&p, TEMP, WHY);
  chunk(f, MLPROF__CHUNK_SAMPLES, &p);
  /* ticks 2000 and 3000, one chunk */
  p_uv(&p, 2000);
  static const double cpu200[] = {50, 70}, rss200[] = {300, 200},
                      cpu201[] = {10, 30}, rss201[] = {50, 150},
                      energy[] = {1800, 3600}, util[] = {20, 40},
                      genergy[] = {0, 3600};
  for (int k = 0; k < 2; k++) {
    row_begin(&p, MLPROF__SUBJECT_PROCESS, 200, PY, k ? 1000 : 0, 2);
    m_valid(&p, CPU, cpu200[k]);
    m_valid(&p, RSS, rss200[k]);
    row_begin(&p, MLPROF__SUBJECT_PROCESS, 201, WORKER, 0, 2);
    m_valid(&p, CPU, cpu201[k]);
    m_valid(&p, RSS, rss201[k]);
    row_begin(&p, MLPROF__SUBJECT_SYSTEM, 0, 0, 0, 2);
    m_valid(&p, ENERGY, energy[k]);
    m_absent(&p, TEMP, WHY);
    row_begin(&p, MLPROF__SUBJECT_GPU, 0, GPU, 0, 2);
    m_valid(&p, UTIL, util[k]);
    m_valid(&p, GENERGY, genergy[k]);
  }
  chunk(f, MLPROF__CHUNK_SAMPLES, &p);
  synth_end(f, 3500);
  fclose(f);

  f = synth_open(child, 1);
  if (!f) return -1;
  synth_header(f, 200, 100, 1500, "h", "/usr/bin/python3");
  p_uv(&p, 2);
  p_name(&p, 1, MLPROF__NAME_ZONE, 0, "fwd");
  p_name(&p, 2, MLPROF__NAME_ZONE, 0, "tiny");
  chunk(f, MLPROF__CHUNK_NAMES, &p);
  p_uv(&p, 7); /* tid */
  p_uv(&p, 0);
  p_uv(&p, 0);
  p_u8(&p, MLPROF__REC_SPAN); /* tiny 1600..1700, depth 1 */
  p_uv(&p, 2);
  p_uv(&p, 1);
  p_sv(&p, 1600);
  p_uv(&p, 100);
  p_u8(&p, MLPROF__REC_SPAN); /* fwd 1000..2000 */
  p_uv(&p, 1);
  p_uv(&p, 0);
  p_sv(&p, -600);
  p_uv(&p, 1000);
  chunk(f, MLPROF__CHUNK_EVENTS, &p);
  synth_end(f, 2500);
  fclose(f);
  return 0;
}

static inline void synth_remove(const char *dir, const char *root,
                                const char *child) {
  unlink(root);
  unlink(child);
  rmdir(dir);
}

#endif
