/* Line timings from the profiles' LINES chunks (lines.h). */
#include "lines.h"

#include <mlprof.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"

struct mlprof__lines_builder {
  mlprof__lines *out;
  mlprof__lines cur; /* this profile's latest table of each function */
  size_t cap_out, cap_cur;
  /* The functions of out and cur by key (func_key, then the next free key
   * where two collide), so that a file of many functions is read in linear
   * time. */
  mlprof__map out_ix, cur_ix;
  int err;
};

static void func_free(mlprof__line_func *f) {
  for (size_t i = 0; i < f->n; i++) free(f->rows[i].source);
  free(f->rows);
  free(f->function);
  free(f->file);
}

void mlprof__lines_free(mlprof__lines *l) {
  for (size_t i = 0; i < l->n; i++) func_free(&l->funcs[i]);
  free(l->funcs);
  memset(l, 0, sizeof *l);
}

static uint64_t func_key(const char *function, const char *file,
                         uint32_t first) {
  uint64_t h = mlprof__hash(function, strlen(function) + 1, MLPROF__HASH_START);
  h = mlprof__hash(file, strlen(file) + 1, h);
  return mlprof__hash(&first, sizeof first, h);
}

/* The function of l (indexed by ix) with that name, file and first line,
 * or NULL with *key (may be NULL) set to the key to index it by. */
static mlprof__line_func *find(mlprof__lines *l, const mlprof__map *ix,
                               const char *function, const char *file,
                               uint32_t first, uint64_t *key) {
  for (uint64_t k = func_key(function, file, first);; k++) {
    uint32_t i = mlprof__map_get(ix, k);
    if (i == MLPROF__NONE) {
      if (key) *key = k;
      return NULL;
    }
    mlprof__line_func *f = &l->funcs[i];
    if (f->first_line == first && strcmp(f->function, function) == 0 &&
        strcmp(f->file, file) == 0)
      return f;
  }
}

static int by_line(const void *a, const void *b) {
  const mlprof__line_stat *x = a, *y = b;
  return x->line < y->line ? -1 : x->line > y->line;
}

/* A sum of counts from files, held at UINT64_MAX rather than wrapped. */
static uint64_t sat_add(uint64_t a, uint64_t b) {
  return a + b < a ? UINT64_MAX : a + b;
}

/* A copy of t as a function's table; 0 or MLPROF_ENOMEM (f then freed). A
 * line's exclusive time is part of its total: one above it (a writer's
 * timer that went backwards, an unsigned underflow) is taken as the total,
 * the most it can be. */
static int copy_table(mlprof__line_func *f, const mlprof__line_table *t) {
  memset(f, 0, sizeof *f);
  f->function = mlprof__dup(t->function, strlen(t->function));
  f->file = mlprof__dup(t->file, strlen(t->file));
  f->first_line = t->first_line;
  f->rows = calloc(t->n ? t->n : 1, sizeof *f->rows);
  int bad = !f->function || !f->file || !f->rows;
  for (uint32_t i = 0; i < t->n && !bad; i++) {
    const mlprof__line_row *r = &t->rows[i];
    uint64_t excl =
        r->exclusive_ns < r->total_ns ? r->exclusive_ns : r->total_ns;
    f->rows[i] = (mlprof__line_stat){r->line, r->hits, r->total_ns, excl, NULL};
    bad = !(f->rows[i].source = mlprof__dup(r->source, strlen(r->source)));
    f->n = i + 1;
  }
  if (bad) {
    func_free(f);
    return MLPROF_ENOMEM;
  }
  mlprof__sort(f->rows, f->n, sizeof *f->rows, by_line);
  return 0;
}

static int on_lines(void *ud, const mlprof__line_table *t) {
  mlprof__lines_builder *b = ud;
  mlprof__line_func f;
  if (copy_table(&f, t)) return MLPROF_ENOMEM;
  uint64_t key;
  mlprof__line_func *old =
      find(&b->cur, &b->cur_ix, t->function, t->file, t->first_line, &key);
  if (old) {
    func_free(old);
    *old = f;
    return 0;
  }
  if (b->cur.n >= MLPROF__NONE - 1 ||
      mlprof__grow(&b->cur.funcs, &b->cap_cur, b->cur.n + 1,
                   sizeof *b->cur.funcs) ||
      mlprof__map_put(&b->cur_ix, key, (uint32_t)b->cur.n)) {
    func_free(&f);
    return MLPROF_ENOMEM;
  }
  b->cur.funcs[b->cur.n++] = f;
  return 0;
}

mlprof__lines_builder *mlprof__lines_begin(mlprof__lines *out) {
  mlprof__lines_builder *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  memset(out, 0, sizeof *out);
  b->out = out;
  return b;
}

void mlprof__lines_profile_begin(mlprof__lines_builder *b, mlprof__visitor *v) {
  *v = (mlprof__visitor){.ud = b, .lines = on_lines};
}

/* Adds g's lines to f's (both by line; a line f has found by bisection).
 * 0 or MLPROF_ENOMEM. */
typedef struct {
  const mlprof__line_stat *rows;
  uint32_t line;
} line_key;

/* The rows of lines before line come first. */
static int line_below(const void *ctx, size_t i) {
  const line_key *k = ctx;
  return k->rows[i].line < k->line;
}

static int add_rows(mlprof__line_func *f, mlprof__line_func *g) {
  size_t n = f->n;
  mlprof__line_stat *rows = realloc(f->rows, (n + g->n) * sizeof *rows + 1);
  if (!rows) return MLPROF_ENOMEM;
  f->rows = rows;
  for (size_t i = 0; i < g->n; i++) {
    line_key key = {rows, g->rows[i].line};
    size_t lo = mlprof__lower_bound(0, n, &key, line_below);
    size_t j = lo < n && rows[lo].line == g->rows[i].line ? lo : n;
    if (j == n) {
      rows[f->n++] = g->rows[i];
      g->rows[i].source = NULL; /* moved */
      continue;
    }
    rows[j].hits = sat_add(rows[j].hits, g->rows[i].hits);
    rows[j].total_ns = sat_add(rows[j].total_ns, g->rows[i].total_ns);
    rows[j].exclusive_ns =
        sat_add(rows[j].exclusive_ns, g->rows[i].exclusive_ns);
  }
  mlprof__sort(f->rows, f->n, sizeof *f->rows, by_line);
  return 0;
}

int mlprof__lines_profile_end(mlprof__lines_builder *b) {
  int rc = 0;
  for (size_t i = 0; i < b->cur.n && !rc; i++) {
    mlprof__line_func *g = &b->cur.funcs[i];
    uint64_t key;
    mlprof__line_func *f =
        find(b->out, &b->out_ix, g->function, g->file, g->first_line, &key);
    if (f) {
      rc = add_rows(f, g);
    } else if (b->out->n >= MLPROF__NONE - 1 ||
               mlprof__grow(&b->out->funcs, &b->cap_out, b->out->n + 1,
                            sizeof *b->out->funcs) ||
               mlprof__map_put(&b->out_ix, key, (uint32_t)b->out->n)) {
      rc = MLPROF_ENOMEM;
    } else {
      b->out->funcs[b->out->n++] = *g;
      memset(g, 0, sizeof *g); /* moved */
    }
  }
  mlprof__lines_free(&b->cur);
  mlprof__map_clear(&b->cur_ix);
  b->cap_cur = 0;
  if (rc) b->err = rc;
  return rc;
}

void mlprof__lines_finish(mlprof__lines_builder *b) {
  if (!b) return;
  mlprof__lines_free(&b->cur);
  if (b->err) mlprof__lines_free(b->out);
  for (size_t i = 0; i < b->out->n; i++) {
    mlprof__line_func *f = &b->out->funcs[i];
    f->total_ns = 0;
    for (size_t j = 0; j < f->n; j++)
      f->total_ns = sat_add(f->total_ns, f->rows[j].total_ns);
  }
  mlprof__map_clear(&b->out_ix);
  mlprof__map_clear(&b->cur_ix);
  free(b);
}
