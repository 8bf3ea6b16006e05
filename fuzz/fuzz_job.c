/* libFuzzer target for opening a job (src/model/job.c) and analysing it
 * (src/analyze/): what mlprof report and html do to a run directory.
 *
 * An input is one or more profiles, each from a file magic to the next
 * (make_corpus.c writes jobs of two ranks that way), with the CRC of every
 * framed chunk recomputed so that mutations reach the payloads: a header's
 * rank and world size, name ids, META clock offsets, collectives' groups
 * and sequence numbers. They are written as the files of one directory,
 * opened as a job and run through every analysis. Nothing a file claims
 * may size a structure, nor overflow an integer: run.sh gives this target
 * a malloc and RSS limit of a few hundred MB (an amplification is then a
 * crash), and UBSan aborts on an overflow. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyze/analysis.h"
#include "format/wire.h"
#include "mlprof.h"
#include "model/job.h"

#define MAX_FILES 8

static char dir[64];

/* Recomputes the CRC of every chunk framed from the file header on. */
static void fix_crcs(uint8_t *d, size_t n) {
  size_t i = MLPROF__FILE_HEADER_SIZE;
  while (i + MLPROF__CHUNK_HEADER_SIZE <= n) {
    uint32_t len = mlprof__get_u32(d + i + 8);
    if (memcmp(d + i, MLPROF__CHUNK_MAGIC, 4) != 0 ||
        len > n - i - MLPROF__CHUNK_HEADER_SIZE) {
      i++;
      continue;
    }
    uint32_t crc = mlprof__crc32(0, d + i + 4, 8);
    crc = mlprof__crc32(crc, d + i + MLPROF__CHUNK_HEADER_SIZE, len);
    mlprof__put_u32(d + i + 12, crc);
    i += MLPROF__CHUNK_HEADER_SIZE + len;
  }
}

/* Where the next profile after offset from starts, or n. */
static size_t next_profile(const uint8_t *d, size_t n, size_t from) {
  size_t k = sizeof MLPROF__FILE_MAGIC - 1;
  for (size_t i = from + 1; i + k <= n; i++)
    if (!memcmp(d + i, MLPROF__FILE_MAGIC, k)) return i;
  return n;
}

static void write_file(int i, const uint8_t *d, size_t n) {
  char path[128];
  snprintf(path, sizeof path, "%s/p%d.mlprof", dir, i);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  uint8_t *copy = malloc(n ? n : 1);
  if (!copy) abort();
  memcpy(copy, d, n);
  fix_crcs(copy, n);
  if (fwrite(copy, 1, n, f) != n || fclose(f) != 0) abort();
  free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/mlprof-fuzz-job-XXXXXX", base);
    if (!mkdtemp(dir)) abort();
  }
  int nfiles = 0;
  for (size_t at = 0; at < size && nfiles < MAX_FILES;) {
    size_t next = next_profile(data, size, at);
    write_file(nfiles++, data + at, next - at);
    at = next;
  }
  const char *paths[] = {dir};
  char err[512];
  mlprof__job job;
  if (mlprof__job_open(&job, paths, 1, err, sizeof err) == 0) {
    mlprof__analysis_opts o;
    mlprof__analysis_opts_init(&o);
    o.want = MLPROF__ANALYSIS_FINDINGS | MLPROF__ANALYSIS_TREE;
    mlprof__analysis a;
    if (mlprof__analysis_run(&job, &o, &a, err, sizeof err) == 0)
      mlprof__analysis_free(&a);
    else if (strcmp(err, "out of memory") != 0)
      abort(); /* the only error the analysis may give */
    mlprof__job_close(&job);
  }
  for (int i = 0; i < nfiles; i++) {
    char path[128];
    snprintf(path, sizeof path, "%s/p%d.mlprof", dir, i);
    unlink(path);
  }
  return 0;
}
