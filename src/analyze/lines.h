/* Line timings (LINES chunks, docs/format.md): per function, the latest
 * table of each process, the processes' tables added line by line. */
#ifndef MLPROF_LINES_H
#define MLPROF_LINES_H

#include <stddef.h>
#include <stdint.h>

#include "../format/reader.h"

typedef struct {
  uint32_t line;
  uint64_t hits, total_ns, exclusive_ns;
  char *source;
} mlprof__line_stat;

typedef struct {
  char *function, *file;
  uint32_t first_line;
  uint64_t total_ns;       /* the sum of its lines' total_ns */
  mlprof__line_stat *rows; /* by line */
  size_t n;
} mlprof__line_func;

/* The functions in the order they first appear. */
typedef struct {
  mlprof__line_func *funcs;
  size_t n;
} mlprof__lines;

typedef struct mlprof__lines_builder mlprof__lines_builder;

/* A builder filling *out; NULL when memory is short. */
mlprof__lines_builder *mlprof__lines_begin(mlprof__lines *out);
/* The visitor that reads one profile's LINES chunks into b. */
void mlprof__lines_profile_begin(mlprof__lines_builder *b, mlprof__visitor *v);
/* Adds the profile's tables to the result. 0 or MLPROF_ENOMEM. */
int mlprof__lines_profile_end(mlprof__lines_builder *b);
/* Frees b (the result stays in *out, complete or, on error, freed). */
void mlprof__lines_finish(mlprof__lines_builder *b);
void mlprof__lines_free(mlprof__lines *l);

#endif
