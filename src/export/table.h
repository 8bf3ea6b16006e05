/* Aligned text tables for a terminal (the text report, compare, diff):
 * cells are collected, then printed with each column as wide as its widest
 * cell. */
#ifndef MLPROF_TABLE_H
#define MLPROF_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "escape.h"

typedef struct {
  size_t ncols;
  const char *const *heads;
  const char *align; /* one 'l' or 'r' per column */
  mlprof__out text;  /* the cells, each NUL-terminated */
  size_t *cells;     /* offset of each cell in text, row after row */
  size_t ncells, cap;
  int err;
} mlprof__table;

/* Starts a table with strlen(align) columns. Returns 0 or MLPROF_ENOMEM. */
int mlprof__table_open(mlprof__table *t, const char *const *heads,
                       const char *align);

/* A cell from trusted text (numbers, fixed words). */
void mlprof__table_cell(mlprof__table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A cell whose text the caller writes into t->text between begin and end. */
void mlprof__table_begin(mlprof__table *t);
void mlprof__table_end(mlprof__table *t);

/* Writes an untrusted string (a zone name, a label) to o made safe for a
 * terminal and, when wider than max columns, cut in the middle with an
 * ellipsis, so that two long names differing at either end stay apart
 * ("encoder.layers.1.se…ttention):forward"). */
void mlprof__out_name(mlprof__out *o, const char *s, size_t n, size_t max);

/* A cell from an untrusted string, as mlprof__out_name writes it. */
void mlprof__table_name(mlprof__table *t, const char *s, size_t n, size_t max);

/* Prints the table (heads, then rows, two spaces of indent) and frees it.
 * Returns 0 or the first error. */
int mlprof__table_print(mlprof__table *t, mlprof__out *o);

#endif
