/* A Parquet file writer of our own (docs/parquet.md): flat tables of
 * required or optional INT32, INT64, DOUBLE and UTF-8 string columns, row
 * group by row group, with the file's metadata (FileMetaData, PageHeader)
 * encoded by hand in Thrift's compact protocol, strings PLAIN or
 * RLE_DICTIONARY, definition levels (RLE) only in optional columns, and
 * pages compressed with zstd (libzstd, linked into the mlprof command only).
 *
 * Memory: one row group's values (at most row_group_rows rows or about
 * row_group_bytes of buffered values, whichever comes first; a dictionary
 * that outgrows its budget ends the row group early) plus one compressed
 * page. Nothing else grows with the rows but 48 bytes per column per row
 * group for the footer. Times may be DELTA_BINARY_PACKED. */
#ifndef MLPROF_PARQUET_H
#define MLPROF_PARQUET_H

#include <stddef.h>
#include <stdint.h>

#include "../analyze/filter.h"
#include "../analyze/findings.h"
#include "../analyze/stats.h"
#include "../base/out.h"
#include "../model/job.h"

/* ---- Thrift compact protocol (exposed for the unit tests) ---------------- */

/* Compact protocol type codes. */
enum {
  MLPROF__TC_TRUE = 1,
  MLPROF__TC_FALSE = 2,
  MLPROF__TC_BYTE = 3,
  MLPROF__TC_I16 = 4,
  MLPROF__TC_I32 = 5,
  MLPROF__TC_I64 = 6,
  MLPROF__TC_DOUBLE = 7,
  MLPROF__TC_BINARY = 8,
  MLPROF__TC_LIST = 9,
  MLPROF__TC_STRUCT = 12
};

#define MLPROF__TC_DEPTH 16

/* An encoder of one struct (and what it nests) into o; zero it, set o.
 * Fields of a struct must come in ascending id order only for the short
 * (delta) form; any order is encoded correctly. Errors are o's (sticky). */
typedef struct {
  mlprof__out *o;
  int16_t last[MLPROF__TC_DEPTH]; /* the last field id per nesting level */
  int depth;
} mlprof__tc;

void mlprof__tc_varint(mlprof__tc *t, uint64_t v);
/* A field header: the id as a delta from the last id when 1..15, else in
 * full (type byte, zigzag i16). */
void mlprof__tc_field(mlprof__tc *t, int16_t id, uint8_t type);
void mlprof__tc_i32(mlprof__tc *t, int16_t id, int32_t v);
void mlprof__tc_i64(mlprof__tc *t, int16_t id, int64_t v);
void mlprof__tc_bool(mlprof__tc *t, int16_t id, int v);
void mlprof__tc_binary(mlprof__tc *t, int16_t id, const void *s, size_t n);
/* A struct field (id > 0) or a list's struct element (id 0): its fields
 * follow, then mlprof__tc_end. The outermost struct needs no begin. */
void mlprof__tc_begin(mlprof__tc *t, int16_t id);
/* The STOP byte of the struct open at this level; leaves it. */
void mlprof__tc_end(mlprof__tc *t);
/* A list field header of n elements of type elem; the elements follow,
 * each with the element functions below (or mlprof__tc_begin(t, 0) for a
 * struct). */
void mlprof__tc_list(mlprof__tc *t, int16_t id, uint8_t elem, size_t n);
void mlprof__tc_elem_i32(mlprof__tc *t, int32_t v);
void mlprof__tc_elem_binary(mlprof__tc *t, const void *s, size_t n);

/* The RLE / bit-packing hybrid (Parquet's "RLE" encoding) of n values of
 * width bits (0..32) into o, without a length prefix: runs of 8 or more
 * equal values as RLE runs, the rest bit-packed in groups of 8. */
void mlprof__rle_hybrid(mlprof__out *o, const uint32_t *v, size_t n,
                        unsigned width);

/* Parquet's DELTA_BINARY_PACKED of n int64 values into o: blocks of 128
 * values in 4 miniblocks of 32, each miniblock's deltas (less the block's
 * least delta) bit-packed at its own width. */
void mlprof__delta_binary_packed(mlprof__out *o, const int64_t *v, size_t n);

/* ---- the file writer ------------------------------------------------------
 */

typedef enum {
  MLPROF__PQ_INT32,
  MLPROF__PQ_INT64,
  MLPROF__PQ_DOUBLE,
  MLPROF__PQ_STRING
} mlprof__pq_type;

/* A column's encoding: PLAIN; RLE_DICTIONARY (strings that repeat);
 * DELTA_BINARY_PACKED (INT64 that grow, such as times). */
typedef enum {
  MLPROF__PQ_PLAIN,
  MLPROF__PQ_DICT,
  MLPROF__PQ_DELTA
} mlprof__pq_enc;

typedef struct {
  const char *name;
  uint8_t type;     /* mlprof__pq_type */
  uint8_t optional; /* 1: may hold nulls (definition levels are written) */
  uint8_t enc;      /* mlprof__pq_enc */
} mlprof__pq_column;

/* A row group's rows and buffered bytes at most, by default: DuckDB's own
 * row groups are of 122,880 rows; 64 Ki rows of spans (about 130 bytes each
 * while buffered, 16 columns) keep the export under twice the report's
 * memory (bench/bench_parquet.c). */
#define MLPROF__PQ_ROWS ((size_t)1 << 16)
#define MLPROF__PQ_BYTES ((size_t)64 << 20)

typedef struct {
  size_t row_group_rows;  /* 0: MLPROF__PQ_ROWS */
  size_t row_group_bytes; /* 0: MLPROF__PQ_BYTES of buffered values */
  int zstd_level;         /* 0: 1 */
} mlprof__pq_opts;

typedef struct mlprof__pq mlprof__pq;

/* A writer of a file of the ncols columns cols (borrowed: they must outlive
 * it) to o (the caller's, positioned at the file's start; the writer never
 * flushes nor closes it). The kv pairs (nkv keys, then values, borrowed
 * until mlprof__pq_close) go into the footer's key_value_metadata. Returns
 * NULL when out of memory. */
mlprof__pq *mlprof__pq_open(mlprof__out *o, const mlprof__pq_column *cols,
                            size_t ncols, const mlprof__pq_opts *opts);

/* Adds a key/value pair to the footer's metadata (copied). */
void mlprof__pq_meta(mlprof__pq *w, const char *key, const char *value);

/* The values of the row being built, one call per column in any order; a
 * column not given a value is null (it must be optional). A value of the
 * wrong type for its column is a bug (it is stored as null). */
void mlprof__pq_i64(mlprof__pq *w, size_t col, int64_t v);
void mlprof__pq_i32(mlprof__pq *w, size_t col, int32_t v);
void mlprof__pq_f64(mlprof__pq *w, size_t col, double v);
void mlprof__pq_str(mlprof__pq *w, size_t col, const char *s, size_t n);

/* Ends the row; writes the row group when it is full. Returns 0 or the
 * first error (MLPROF_ENOMEM, the writer's MLPROF_EIO). A required column
 * left without a value is written as 0 or "". */
int mlprof__pq_row(mlprof__pq *w);

/* Rows ended so far. */
uint64_t mlprof__pq_rows(const mlprof__pq *w);

/* Writes the last row group and the footer, then frees w. Returns 0 or the
 * first error met since mlprof__pq_open, with a reason in err. */
int mlprof__pq_close(mlprof__pq *w, char *err, size_t errlen);

/* Frees w without finishing the file. */
void mlprof__pq_abort(mlprof__pq *w);

/* ---- mlprof's tables --------------------------------------------------------
 */

/* The schema's name and version, in every file's key_value_metadata under
 * "mlprof.schema" (docs/parquet.md); the table's name is under
 * "mlprof.table". */
#define MLPROF__PARQUET_SCHEMA "mlprof.parquet/1"

typedef struct {
  mlprof__pq_opts pq;
  /* What the streamed tables keep (borrowed), or NULL: everything. The
   * zones, steps, findings and memory sites are the analysis's, made with
   * the same filter. */
  const mlprof__filter *filter;
} mlprof__parquet_opts;

typedef struct {
  uint64_t spans, zones, steps, samples, collectives, findings; /* rows */
  uint64_t allocations, memory_sites, stack_samples, stacks;
  uint64_t span_files;
  uint64_t bytes; /* of every file written */
  /* NULL, or job->count entries each: what each profile's read found, and
   * why a read stopped early ("" when it did not). */
  mlprof__read_report *reads;
  char (*read_errors)[256];
} mlprof__parquet_result;

/* Writes the tables of job into the existing directory dir (docs/parquet.md):
 * zones.parquet (r's zones in r->order), steps.parquet (each process's
 * steps, from r's step marks), findings.parquet (f's, may be NULL),
 * memory_sites.parquet (r's allocation sites),
 * spans/part-NNNNN.parquet (one per profile, in job order),
 * samples.parquet, collectives.parquet, allocations.parquet,
 * stack_samples.parquet and stacks.parquet, the last six streamed from
 * one more read of each profile (stacks: one row per interned stack of each
 * profile, written when its read ends). Each file is written beside its name
 * and renamed there when whole; spans parts of an earlier export into dir past
 * this job's count are removed. Damage in a profile is not an error: what is
 * readable is written and res->reads says what was skipped. Returns 0,
 * MLPROF_ENOMEM, MLPROF_EIO or MLPROF_EINVAL (a path too long), with a
 * one-line reason in err; files already renamed into place stay. */
/* Removes the temporaries of the files being written; async-signal-safe,
 * for a SIGINT or SIGTERM handler (the export then must not go on). */
void mlprof__parquet_unlink_temps(void);

int mlprof__export_parquet(const mlprof__job *job, const mlprof__report *r,
                           const mlprof__findings *f, const char *dir,
                           const mlprof__parquet_opts *opts,
                           mlprof__parquet_result *res, char *err,
                           size_t errlen);

#endif
