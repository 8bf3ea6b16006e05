/* Aligned text tables: see table.h. */
#include "table.h"

#include <mlprof.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../analyze/stats.h"

int mlprof__table_open(mlprof__table *t, const char *const *heads,
                       const char *align) {
  memset(t, 0, sizeof *t);
  t->heads = heads;
  t->align = align;
  t->ncols = strlen(align);
  return mlprof__out_open(&t->text, -1);
}

void mlprof__table_begin(mlprof__table *t) {
  if (mlprof__grow(&t->cells, &t->cap, t->ncells + 1, sizeof *t->cells))
    t->err = MLPROF_ENOMEM;
  else
    t->cells[t->ncells++] = t->text.len;
}

void mlprof__table_cell(mlprof__table *t, const char *fmt, ...) {
  char b[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  mlprof__table_begin(t);
  mlprof__out_str(&t->text, b);
  mlprof__table_end(t);
}

void mlprof__table_end(mlprof__table *t) { mlprof__out_write(&t->text, "", 1); }

/* Display width of valid UTF-8: one column per code point. */
static size_t width_of(const char *s) {
  size_t w = 0;
  for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
  return w;
}

void mlprof__table_name(mlprof__table *t, const char *s, size_t n,
                        size_t max) {
  mlprof__table_begin(t);
  size_t start = t->text.len;
  mlprof__out_text_str(&t->text, s, n);
  mlprof__out_write(&t->text, "", 1);
  if (t->text.err) return;
  t->text.len--;
  if (width_of(t->text.buf + start) > max) {
    size_t w = 0, i = start;
    for (; i < t->text.len; i++)
      if (((unsigned char)t->text.buf[i] & 0xc0) != 0x80 && ++w == max) break;
    t->text.len = i;
    mlprof__out_str(&t->text, "\xe2\x80\xa6"); /* ellipsis */
  }
  mlprof__table_end(t);
}

static void pad(mlprof__out *o, size_t n) {
  static const char spaces[] = "                                ";
  while (n > 0) {
    size_t k = n < sizeof spaces - 1 ? n : sizeof spaces - 1;
    mlprof__out_write(o, spaces, k);
    n -= k;
  }
}

int mlprof__table_print(mlprof__table *t, mlprof__out *o) {
  int rc = t->err ? t->err : t->text.err;
  size_t *w = rc ? NULL : calloc(t->ncols, sizeof *w);
  if (!rc && !w) rc = MLPROF_ENOMEM;
  if (!rc) {
    for (size_t c = 0; c < t->ncols; c++) w[c] = width_of(t->heads[c]);
    for (size_t i = 0; i < t->ncells; i++) {
      size_t cw = width_of(t->text.buf + t->cells[i]);
      if (cw > w[i % t->ncols]) w[i % t->ncols] = cw;
    }
    size_t rows = t->ncells / t->ncols;
    for (size_t r = 0; r <= rows; r++) {
      mlprof__out_lit(o, "  ");
      for (size_t c = 0; c < t->ncols; c++) {
        const char *s = r == 0 ? t->heads[c]
                               : t->text.buf + t->cells[(r - 1) * t->ncols + c];
        size_t gap = w[c] - width_of(s);
        int last = c + 1 == t->ncols;
        if (t->align[c] == 'r') pad(o, gap);
        mlprof__out_str(o, s);
        if (t->align[c] == 'l' && !last) pad(o, gap);
        if (!last) mlprof__out_lit(o, "  ");
      }
      mlprof__out_lit(o, "\n");
    }
  }
  free(w);
  mlprof__out_close(&t->text);
  free(t->cells);
  return rc;
}

void mlprof__fmt_duration(char *b, size_t len, double ns) {
  static const struct {
    double div;
    const char *unit;
  } units[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "\xc2\xb5s"}, {1, "ns"}};
  if (!(ns >= 0) || ns > 1e30) {
    snprintf(b, len, "-");
    return;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (ns < units[i].div && i + 1 < sizeof units / sizeof units[0]) continue;
    double v = ns / units[i].div;
    if (i + 1 == sizeof units / sizeof units[0])
      snprintf(b, len, "%.0f ns", v);
    else
      snprintf(b, len, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v,
               units[i].unit);
    return;
  }
}
