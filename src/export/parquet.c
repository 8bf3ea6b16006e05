/* The Parquet writer (parquet.h): Thrift compact encoding, the RLE hybrid,
 * dictionary and plain pages compressed with zstd, the footer. The field
 * ids and enum values are those of parquet-format's parquet.thrift. */
#include "parquet.h"

#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "../base/base.h"

/* ---- Thrift compact protocol ----------------------------------------------
 */

void mlprof__tc_varint(mlprof__tc *t, uint64_t v) {
  char *p = mlprof__out_space(t->o, 10);
  if (!p) return;
  while (v >= 0x80) {
    *p++ = (char)(v | 0x80);
    v >>= 7;
  }
  *p++ = (char)v;
  mlprof__out_end(t->o, p);
}

static uint64_t zigzag(int64_t v) {
  return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static void put_byte(mlprof__out *o, uint8_t b) {
  char *p = mlprof__out_space(o, 1);
  *p = (char)b;
  mlprof__out_end(o, p + 1);
}

/* n (at most 8) bytes of v, little-endian: the hot path of every value. */
static void put_le(mlprof__out *o, uint64_t v, int n) {
  char *p = mlprof__out_space(o, 8);
  for (int i = 0; i < n; i++) p[i] = (char)(v >> (8 * i));
  mlprof__out_end(o, p + n);
}

void mlprof__tc_field(mlprof__tc *t, int16_t id, uint8_t type) {
  int16_t last = t->last[t->depth];
  if (id > last && id - last <= 15) {
    put_byte(t->o, (uint8_t)(((id - last) << 4) | type));
  } else {
    put_byte(t->o, type);
    mlprof__tc_varint(t, zigzag(id));
  }
  t->last[t->depth] = id;
}

void mlprof__tc_i32(mlprof__tc *t, int16_t id, int32_t v) {
  mlprof__tc_field(t, id, MLPROF__TC_I32);
  mlprof__tc_varint(t, zigzag(v));
}

void mlprof__tc_i64(mlprof__tc *t, int16_t id, int64_t v) {
  mlprof__tc_field(t, id, MLPROF__TC_I64);
  mlprof__tc_varint(t, zigzag(v));
}

static void tc_i16(mlprof__tc *t, int16_t id, int16_t v) {
  mlprof__tc_field(t, id, MLPROF__TC_I16);
  mlprof__tc_varint(t, zigzag(v));
}

void mlprof__tc_bool(mlprof__tc *t, int16_t id, int v) {
  mlprof__tc_field(t, id, v ? MLPROF__TC_TRUE : MLPROF__TC_FALSE);
}

void mlprof__tc_binary(mlprof__tc *t, int16_t id, const void *s, size_t n) {
  mlprof__tc_field(t, id, MLPROF__TC_BINARY);
  mlprof__tc_elem_binary(t, s, n);
}

void mlprof__tc_begin(mlprof__tc *t, int16_t id) {
  if (id > 0) mlprof__tc_field(t, id, MLPROF__TC_STRUCT);
  if (t->depth + 1 >= MLPROF__TC_DEPTH) {
    t->o->err = MLPROF_ENOMEM; /* deeper than any struct written here */
    return;
  }
  t->last[++t->depth] = 0;
}

void mlprof__tc_end(mlprof__tc *t) {
  put_byte(t->o, 0);
  if (t->depth > 0) t->depth--;
}

void mlprof__tc_list(mlprof__tc *t, int16_t id, uint8_t elem, size_t n) {
  mlprof__tc_field(t, id, MLPROF__TC_LIST);
  if (n < 15) {
    put_byte(t->o, (uint8_t)((n << 4) | elem));
  } else {
    put_byte(t->o, (uint8_t)(0xf0 | elem));
    mlprof__tc_varint(t, n);
  }
}

void mlprof__tc_elem_i32(mlprof__tc *t, int32_t v) {
  mlprof__tc_varint(t, zigzag(v));
}

void mlprof__tc_elem_binary(mlprof__tc *t, const void *s, size_t n) {
  mlprof__tc_varint(t, n);
  mlprof__out_write(t->o, s, n);
}

/* ---- the RLE / bit-packing hybrid ---------------------------------------- */

static void out_varint(mlprof__out *o, uint64_t v) {
  mlprof__tc t = {.o = o};
  mlprof__tc_varint(&t, v);
}

/* The length of the run of values equal to v[i] from i. */
static size_t run_at(const uint32_t *v, size_t n, size_t i) {
  size_t j = i + 1;
  while (j < n && v[j] == v[i]) j++;
  return j - i;
}

/* Groups of 8 values from v[i..], the last padded with zeros past n. */
static void bit_pack(mlprof__out *o, const uint32_t *v, size_t n, size_t i,
                     size_t groups, unsigned width) {
  uint64_t acc = 0;
  unsigned bits = 0;
  for (size_t k = 0; k < groups * 8; k++) {
    uint64_t x = i + k < n ? v[i + k] : 0;
    acc |= x << bits;
    bits += width;
    while (bits >= 8) {
      put_byte(o, (uint8_t)acc);
      acc >>= 8;
      bits -= 8;
    }
  }
  /* 8 values of any width fill whole bytes: nothing is left over. */
}

void mlprof__rle_hybrid(mlprof__out *o, const uint32_t *v, size_t n,
                        unsigned width) {
  size_t vbytes = (width + 7) / 8;
  size_t i = 0;
  while (i < n) {
    size_t run = run_at(v, n, i);
    if (run >= 8) {
      out_varint(o, (uint64_t)run << 1);
      uint32_t x = v[i];
      for (size_t b = 0; b < vbytes; b++) put_byte(o, (uint8_t)(x >> (8 * b)));
      i += run;
      continue;
    }
    /* Bit-packed groups until a run of 8 starts a group, or the end. Only
     * the last run of the data may be padded, so a group boundary must
     * fall where an RLE run starts. */
    size_t j = i;
    do {
      j += 8;
    } while (j < n && run_at(v, n, j) < 8);
    size_t groups = ((j < n ? j : n) - i + 7) / 8;
    out_varint(o, ((uint64_t)groups << 1) | 1);
    bit_pack(o, v, n, i, groups, width);
    i = j;
  }
}

/* ---- DELTA_BINARY_PACKED ---------------------------------------------------
 */

#define DELTA_BLOCK 128
#define DELTA_MINIS 4
#define DELTA_MINI (DELTA_BLOCK / DELTA_MINIS)

void mlprof__delta_binary_packed(mlprof__out *o, const int64_t *v, size_t n) {
  out_varint(o, DELTA_BLOCK);
  out_varint(o, DELTA_MINIS);
  out_varint(o, n);
  out_varint(o, n ? zigzag(v[0]) : 0);
  for (size_t at = 1; at < n; at += DELTA_BLOCK) {
    size_t m = n - at < DELTA_BLOCK ? n - at : DELTA_BLOCK;
    uint64_t d[DELTA_BLOCK];
    int64_t least = INT64_MAX;
    for (size_t i = 0; i < m; i++) {
      d[i] = (uint64_t)v[at + i] - (uint64_t)v[at + i - 1]; /* wraps */
      if ((int64_t)d[i] < least) least = (int64_t)d[i];
    }
    out_varint(o, zigzag(least));
    unsigned width[DELTA_MINIS] = {0};
    for (size_t i = 0; i < m; i++) {
      d[i] -= (uint64_t)least;
      unsigned w = 0;
      while (w < 64 && (d[i] >> w)) w++;
      if (w > width[i / DELTA_MINI]) width[i / DELTA_MINI] = w;
    }
    for (int k = 0; k < DELTA_MINIS; k++) put_byte(o, (uint8_t)width[k]);
    /* The miniblocks that hold deltas, each whole (the last padded with
     * zeros); none for those past the end. */
    for (size_t k = 0; k * DELTA_MINI < m; k++) {
      unsigned __int128 acc = 0;
      unsigned bits = 0;
      for (size_t i = k * DELTA_MINI; i < (k + 1) * DELTA_MINI; i++) {
        acc |= (unsigned __int128)(i < m ? d[i] : 0) << bits;
        bits += width[k];
        while (bits >= 8) {
          put_byte(o, (uint8_t)acc);
          acc >>= 8;
          bits -= 8;
        }
      }
    }
  }
}

/* ---- the writer -----------------------------------------------------------
 */

enum { PT_INT32 = 1, PT_INT64 = 2, PT_DOUBLE = 5, PT_BYTE_ARRAY = 6 };
enum {
  ENC_PLAIN = 0,
  ENC_RLE = 3,
  ENC_DELTA_BINARY_PACKED = 5,
  ENC_RLE_DICTIONARY = 8
};
enum { PAGE_DATA = 0, PAGE_DICTIONARY = 2 };
enum { CODEC_ZSTD = 6 };

/* Distinct strings a row group's dictionary holds at most, and its bytes:
 * past either the row group ends early. */
#define DICT_MAX_ENTRIES 65536
#define DICT_MAX_BYTES (4u << 20)

typedef struct {
  uint64_t data_off, dict_off, usize, csize;
  int has_dict;
  int encoding; /* its data page's */
} pq_chunk;

typedef struct {
  uint64_t rows, offset, usize, csize;
  pq_chunk *chunks;
} pq_rowgroup;

typedef struct {
  mlprof__out vals; /* PLAIN values, or uint32 dictionary indices */
  mlprof__out defs; /* definition levels (a byte each), optional columns */
  size_t nvals;
  int set;          /* a value was given in the row being built */
  mlprof__out dict; /* the dictionary's values, PLAIN */
  uint32_t *doff;   /* per entry: its offset in dict */
  size_t ndict, doff_cap;
  uint32_t *slots; /* hash slots: entry + 1, 0 empty */
  size_t nslots;
  uint32_t last; /* the entry given last, + 1; 0 none */
} pq_col;

struct mlprof__pq {
  mlprof__out *o;
  const mlprof__pq_column *cols;
  size_t ncols;
  pq_col *c;
  size_t rg_rows_max, rg_bytes_max;
  int level;
  size_t rows;    /* in the row group being built */
  size_t bytes;   /* its buffered values */
  int full;       /* a dictionary is past its budget: end the group */
  uint64_t total; /* rows ended */
  pq_rowgroup *rgs;
  size_t nrgs, rgcap;
  char **kv; /* key, value, key, value... */
  size_t nkv, kvcap;
  mlprof__out page, hdr; /* a page being built, a page header */
  void *zbuf;
  size_t zcap;
  uint32_t *levels; /* a column's definition levels, widened */
  size_t lcap;
  ZSTD_CCtx *zc;
  int err;
  char why[160];
};

static void fail(mlprof__pq *w, int err, const char *why) {
  if (w->err) return;
  w->err = err;
  snprintf(w->why, sizeof w->why, "%s", why);
}

mlprof__pq *mlprof__pq_open(mlprof__out *o, const mlprof__pq_column *cols,
                            size_t ncols, const mlprof__pq_opts *opts) {
  mlprof__pq *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->o = o;
  w->cols = cols;
  w->ncols = ncols;
  w->rg_rows_max =
      opts && opts->row_group_rows ? opts->row_group_rows : MLPROF__PQ_ROWS;
  w->rg_bytes_max =
      opts && opts->row_group_bytes ? opts->row_group_bytes : MLPROF__PQ_BYTES;
  w->level = opts && opts->zstd_level ? opts->zstd_level : 1;
  w->c = calloc(ncols ? ncols : 1, sizeof *w->c);
  w->zc = ZSTD_createCCtx();
  int bad = !w->c || !w->zc || mlprof__out_open(&w->page, -1) ||
            mlprof__out_open(&w->hdr, -1);
  for (size_t i = 0; !bad && i < ncols; i++)
    bad = mlprof__out_open(&w->c[i].vals, -1) ||
          mlprof__out_open(&w->c[i].defs, -1) ||
          mlprof__out_open(&w->c[i].dict, -1);
  if (bad) {
    mlprof__pq_abort(w);
    return NULL;
  }
  mlprof__out_lit(o, "PAR1");
  return w;
}

void mlprof__pq_meta(mlprof__pq *w, const char *key, const char *value) {
  if (mlprof__grow(&w->kv, &w->kvcap, w->nkv * 2 + 2, sizeof *w->kv)) {
    fail(w, MLPROF_ENOMEM, "out of memory");
    return;
  }
  char *k = mlprof__dup(key, strlen(key)),
       *v = mlprof__dup(value, strlen(value));
  if (!k || !v) {
    free(k);
    free(v);
    fail(w, MLPROF_ENOMEM, "out of memory");
    return;
  }
  w->kv[w->nkv * 2] = k;
  w->kv[w->nkv * 2 + 1] = v;
  w->nkv++;
}

/* The column's slot for a value, or NULL when it has one in this row or
 * is of another type. */
static pq_col *slot(mlprof__pq *w, size_t col, uint8_t type) {
  if (col >= w->ncols || w->cols[col].type != type || w->c[col].set)
    return NULL;
  w->c[col].set = 1;
  w->c[col].nvals++;
  return &w->c[col];
}

void mlprof__pq_i64(mlprof__pq *w, size_t col, int64_t v) {
  pq_col *c = slot(w, col, MLPROF__PQ_INT64);
  if (!c) return;
  put_le(&c->vals, (uint64_t)v, 8);
  w->bytes += 8;
}

void mlprof__pq_i32(mlprof__pq *w, size_t col, int32_t v) {
  pq_col *c = slot(w, col, MLPROF__PQ_INT32);
  if (!c) return;
  put_le(&c->vals, (uint32_t)v, 4);
  w->bytes += 4;
}

void mlprof__pq_f64(mlprof__pq *w, size_t col, double v) {
  pq_col *c = slot(w, col, MLPROF__PQ_DOUBLE);
  if (!c) return;
  uint64_t u;
  memcpy(&u, &v, 8);
  put_le(&c->vals, u, 8);
  w->bytes += 8;
}

static void put_plain_str(mlprof__out *o, const char *s, size_t n) {
  put_le(o, (uint32_t)n, 4);
  mlprof__out_write(o, s, n);
}

/* The length of dictionary entry e's string. */
static size_t entry_len(const pq_col *c, size_t e) {
  size_t end = e + 1 < c->ndict ? c->doff[e + 1] : c->dict.len;
  return end - c->doff[e] - 4;
}

/* The dictionary entry of s, added when new; MLPROF__NONE out of memory.
 * The entry given last is tried first: a process's or a host's name
 * repeats row after row. */
static uint32_t dict_entry(pq_col *c, const char *s, size_t n) {
  if (c->last) {
    uint32_t e = c->last - 1;
    if (entry_len(c, e) == n && !memcmp(c->dict.buf + c->doff[e] + 4, s, n))
      return e;
  }
  if (c->ndict * 2 >= c->nslots) {
    size_t ns = c->nslots ? c->nslots * 2 : 1024;
    uint32_t *sl = calloc(ns, sizeof *sl);
    if (!sl) return MLPROF__NONE;
    for (size_t e = 0; e < c->ndict; e++) {
      size_t h = mlprof__hash(c->dict.buf + c->doff[e] + 4, entry_len(c, e),
                              MLPROF__HASH_START) &
                 (ns - 1);
      while (sl[h]) h = (h + 1) & (ns - 1);
      sl[h] = (uint32_t)e + 1;
    }
    free(c->slots);
    c->slots = sl;
    c->nslots = ns;
  }
  size_t h = mlprof__hash(s, n, MLPROF__HASH_START) & (c->nslots - 1);
  for (; c->slots[h]; h = (h + 1) & (c->nslots - 1)) {
    uint32_t e = c->slots[h] - 1;
    if (entry_len(c, e) == n && !memcmp(c->dict.buf + c->doff[e] + 4, s, n))
      return e;
  }
  if (mlprof__grow(&c->doff, &c->doff_cap, c->ndict + 1, sizeof *c->doff))
    return MLPROF__NONE;
  c->doff[c->ndict] = (uint32_t)c->dict.len;
  put_plain_str(&c->dict, s, n);
  c->slots[h] = (uint32_t)c->ndict + 1;
  return (uint32_t)c->ndict++;
}

void mlprof__pq_str(mlprof__pq *w, size_t col, const char *s, size_t n) {
  pq_col *c = slot(w, col, MLPROF__PQ_STRING);
  if (!c) return;
  if (n > UINT32_MAX / 2) n = UINT32_MAX / 2;
  if (w->cols[col].enc != MLPROF__PQ_DICT) {
    put_plain_str(&c->vals, s, n);
    w->bytes += 4 + n;
    return;
  }
  size_t before = c->dict.len;
  uint32_t e = dict_entry(c, s, n);
  if (e == MLPROF__NONE) {
    fail(w, MLPROF_ENOMEM, "out of memory");
    return;
  }
  char *p = mlprof__out_space(&c->vals, sizeof e);
  memcpy(p, &e, sizeof e); /* read back as a uint32_t array */
  mlprof__out_end(&c->vals, p + sizeof e);
  c->last = e + 1;
  w->bytes += 4 + (c->dict.len - before);
  if (c->ndict >= DICT_MAX_ENTRIES || c->dict.len >= DICT_MAX_BYTES)
    w->full = 1;
}

/* Compresses what w->page holds and writes it with its header. */
static void write_page(mlprof__pq *w, int type, size_t nvals, int encoding,
                       uint64_t *usize, uint64_t *csize) {
  size_t bound = ZSTD_compressBound(w->page.len);
  if (bound > w->zcap) {
    void *z = realloc(w->zbuf, bound);
    if (!z) {
      fail(w, MLPROF_ENOMEM, "out of memory");
      return;
    }
    w->zbuf = z;
    w->zcap = bound;
  }
  size_t zn = ZSTD_compressCCtx(w->zc, w->zbuf, w->zcap, w->page.buf,
                                w->page.len, w->level);
  if (ZSTD_isError(zn)) {
    fail(w, MLPROF_ENOMEM, ZSTD_getErrorName(zn));
    return;
  }
  if (w->page.len > INT32_MAX || zn > INT32_MAX) {
    fail(w, MLPROF_ENOMEM, "a page is over 2 GB");
    return;
  }
  w->hdr.len = 0;
  mlprof__tc t = {.o = &w->hdr};
  mlprof__tc_i32(&t, 1, type);
  mlprof__tc_i32(&t, 2, (int32_t)w->page.len);
  mlprof__tc_i32(&t, 3, (int32_t)zn);
  if (type == PAGE_DATA) {
    mlprof__tc_begin(&t, 5); /* DataPageHeader */
    mlprof__tc_i32(&t, 1, (int32_t)nvals);
    mlprof__tc_i32(&t, 2, encoding);
    mlprof__tc_i32(&t, 3, ENC_RLE);
    mlprof__tc_i32(&t, 4, ENC_RLE);
    mlprof__tc_end(&t);
  } else {
    mlprof__tc_begin(&t, 7); /* DictionaryPageHeader */
    mlprof__tc_i32(&t, 1, (int32_t)nvals);
    mlprof__tc_i32(&t, 2, ENC_PLAIN);
    mlprof__tc_end(&t);
  }
  mlprof__tc_end(&t);
  if (w->hdr.err) fail(w, w->hdr.err, "out of memory");
  mlprof__out_write(w->o, w->hdr.buf, w->hdr.len);
  mlprof__out_write(w->o, w->zbuf, zn);
  *usize += w->hdr.len + w->page.len;
  *csize += w->hdr.len + zn;
}

static unsigned bit_width(size_t n) {
  unsigned b = 0;
  while (b < 32 && ((size_t)1 << b) < n) b++;
  return b ? b : 1;
}

/* Writes the row group built so far. */
static void flush_group(mlprof__pq *w) {
  if (!w->rows || w->err) return;
  if (mlprof__grow(&w->rgs, &w->rgcap, w->nrgs + 1, sizeof *w->rgs)) {
    fail(w, MLPROF_ENOMEM, "out of memory");
    return;
  }
  pq_rowgroup *g = &w->rgs[w->nrgs];
  memset(g, 0, sizeof *g);
  g->chunks = calloc(w->ncols ? w->ncols : 1, sizeof *g->chunks);
  if (!g->chunks) {
    fail(w, MLPROF_ENOMEM, "out of memory");
    return;
  }
  w->nrgs++;
  g->rows = w->rows;
  g->offset = mlprof__out_pos(w->o);
  for (size_t i = 0; i < w->ncols && !w->err; i++) {
    const mlprof__pq_column *cd = &w->cols[i];
    pq_col *c = &w->c[i];
    pq_chunk *k = &g->chunks[i];
    int dict = cd->type == MLPROF__PQ_STRING && cd->enc == MLPROF__PQ_DICT;
    k->encoding = dict ? ENC_RLE_DICTIONARY
                  : cd->type == MLPROF__PQ_INT64 && cd->enc == MLPROF__PQ_DELTA
                      ? ENC_DELTA_BINARY_PACKED
                      : ENC_PLAIN;
    if (dict) {
      k->has_dict = 1;
      k->dict_off = mlprof__out_pos(w->o);
      w->page.len = 0;
      mlprof__out_write(&w->page, c->dict.buf, c->dict.len);
      write_page(w, PAGE_DICTIONARY, c->ndict, ENC_PLAIN, &k->usize, &k->csize);
    }
    k->data_off = mlprof__out_pos(w->o);
    w->page.len = 0;
    if (cd->optional) {
      if (mlprof__grow(&w->levels, &w->lcap, w->rows, sizeof *w->levels)) {
        fail(w, MLPROF_ENOMEM, "out of memory");
        break;
      }
      for (size_t r = 0; r < w->rows; r++)
        w->levels[r] = (uint8_t)c->defs.buf[r];
      size_t at = w->page.len;
      mlprof__out_write(&w->page, "\0\0\0\0", 4);
      mlprof__rle_hybrid(&w->page, w->levels, w->rows, 1);
      uint32_t n = (uint32_t)(w->page.len - at - 4);
      if (!w->page.err)
        for (int b = 0; b < 4; b++)
          w->page.buf[at + (size_t)b] = (char)(n >> (8 * b));
    }
    if (dict) {
      unsigned bw = bit_width(c->ndict);
      put_byte(&w->page, (uint8_t)bw);
      mlprof__rle_hybrid(&w->page, (const uint32_t *)(void *)c->vals.buf,
                         c->nvals, bw);
    } else if (k->encoding == ENC_DELTA_BINARY_PACKED) {
      /* The values as stored (little-endian int64) are read back whole:
       * the buffer is malloc'd, so aligned. */
      mlprof__delta_binary_packed(
          &w->page, (const int64_t *)(void *)c->vals.buf, c->nvals);
    } else {
      mlprof__out_write(&w->page, c->vals.buf, c->vals.len);
    }
    if (w->page.err || c->vals.err || c->defs.err || c->dict.err)
      fail(w, MLPROF_ENOMEM, "out of memory");
    write_page(w, PAGE_DATA, w->rows, k->encoding, &k->usize, &k->csize);
    g->usize += k->usize;
    g->csize += k->csize;
    c->vals.len = c->defs.len = c->dict.len = 0;
    c->nvals = c->ndict = 0;
    c->last = 0;
    if (c->slots) memset(c->slots, 0, c->nslots * sizeof *c->slots);
  }
  if (w->o->err) fail(w, w->o->err, "cannot write the file");
  w->rows = w->bytes = 0;
  w->full = 0;
}

int mlprof__pq_row(mlprof__pq *w) {
  static const uint8_t zero[8] = {0};
  for (size_t i = 0; i < w->ncols; i++) {
    pq_col *c = &w->c[i];
    if (w->cols[i].optional) {
      put_byte(&c->defs, (uint8_t)c->set);
      w->bytes++;
    } else if (!c->set) {
      switch (w->cols[i].type) {
        case MLPROF__PQ_INT32:
          mlprof__pq_i32(w, i, 0);
          break;
        case MLPROF__PQ_INT64:
          mlprof__pq_i64(w, i, 0);
          break;
        case MLPROF__PQ_DOUBLE:
          mlprof__pq_f64(w, i, 0);
          break;
        default:
          mlprof__pq_str(w, i, (const char *)zero, 0);
      }
    }
    c->set = 0;
    if (c->vals.err || c->defs.err || c->dict.err)
      fail(w, MLPROF_ENOMEM, "out of memory");
  }
  w->rows++;
  w->total++;
  if (w->rows >= w->rg_rows_max || w->bytes >= w->rg_bytes_max || w->full)
    flush_group(w);
  if (!w->err && w->o->err) fail(w, w->o->err, "cannot write the file");
  return w->err;
}

uint64_t mlprof__pq_rows(const mlprof__pq *w) { return w->total; }

static void write_footer(mlprof__pq *w) {
  char created[96];
  snprintf(created, sizeof created, "mlprof version %d.%d.%d",
           MLPROF_VERSION_MAJOR, MLPROF_VERSION_MINOR, MLPROF_VERSION_PATCH);
  uint64_t start = mlprof__out_pos(w->o);
  mlprof__tc t = {.o = w->o};
  mlprof__tc_i32(&t, 1, 1); /* version */
  mlprof__tc_list(&t, 2, MLPROF__TC_STRUCT, w->ncols + 1);
  mlprof__tc_begin(&t, 0); /* the root */
  mlprof__tc_binary(&t, 4, "schema", 6);
  mlprof__tc_i32(&t, 5, (int32_t)w->ncols);
  mlprof__tc_end(&t);
  for (size_t i = 0; i < w->ncols; i++) {
    const mlprof__pq_column *cd = &w->cols[i];
    static const int32_t phys[] = {PT_INT32, PT_INT64, PT_DOUBLE,
                                   PT_BYTE_ARRAY};
    mlprof__tc_begin(&t, 0);
    mlprof__tc_i32(&t, 1, phys[cd->type]);
    mlprof__tc_i32(&t, 3, cd->optional ? 1 : 0);
    mlprof__tc_binary(&t, 4, cd->name, strlen(cd->name));
    if (cd->type == MLPROF__PQ_STRING) {
      mlprof__tc_i32(&t, 6, 0); /* ConvertedType UTF8 */
      mlprof__tc_begin(&t, 10); /* LogicalType */
      mlprof__tc_begin(&t, 1);  /* STRING */
      mlprof__tc_end(&t);
      mlprof__tc_end(&t);
    }
    mlprof__tc_end(&t);
  }
  mlprof__tc_i64(&t, 3, (int64_t)w->total);
  mlprof__tc_list(&t, 4, MLPROF__TC_STRUCT, w->nrgs);
  for (size_t r = 0; r < w->nrgs; r++) {
    const pq_rowgroup *g = &w->rgs[r];
    mlprof__tc_begin(&t, 0);
    mlprof__tc_list(&t, 1, MLPROF__TC_STRUCT, w->ncols);
    for (size_t i = 0; i < w->ncols; i++) {
      const mlprof__pq_column *cd = &w->cols[i];
      const pq_chunk *k = &g->chunks[i];
      static const int32_t phys[] = {PT_INT32, PT_INT64, PT_DOUBLE,
                                     PT_BYTE_ARRAY};
      mlprof__tc_begin(&t, 0); /* ColumnChunk */
      mlprof__tc_i64(&t, 2, 0);
      mlprof__tc_begin(&t, 3); /* ColumnMetaData */
      mlprof__tc_i32(&t, 1, phys[cd->type]);
      mlprof__tc_list(&t, 2, MLPROF__TC_I32, k->encoding == ENC_PLAIN ? 2 : 3);
      mlprof__tc_elem_i32(&t, ENC_PLAIN);
      mlprof__tc_elem_i32(&t, ENC_RLE);
      if (k->encoding != ENC_PLAIN) mlprof__tc_elem_i32(&t, k->encoding);
      mlprof__tc_list(&t, 3, MLPROF__TC_BINARY, 1);
      mlprof__tc_elem_binary(&t, cd->name, strlen(cd->name));
      mlprof__tc_i32(&t, 4, CODEC_ZSTD);
      mlprof__tc_i64(&t, 5, (int64_t)g->rows);
      mlprof__tc_i64(&t, 6, (int64_t)k->usize);
      mlprof__tc_i64(&t, 7, (int64_t)k->csize);
      mlprof__tc_i64(&t, 9, (int64_t)k->data_off);
      if (k->has_dict) mlprof__tc_i64(&t, 11, (int64_t)k->dict_off);
      mlprof__tc_end(&t);
      mlprof__tc_end(&t);
    }
    mlprof__tc_i64(&t, 2, (int64_t)g->usize);
    mlprof__tc_i64(&t, 3, (int64_t)g->rows);
    mlprof__tc_i64(&t, 5, (int64_t)g->offset);
    mlprof__tc_i64(&t, 6, (int64_t)g->csize);
    tc_i16(&t, 7, (int16_t)(r < 32767 ? r : 32767));
    mlprof__tc_end(&t);
  }
  if (w->nkv) {
    mlprof__tc_list(&t, 5, MLPROF__TC_STRUCT, w->nkv);
    for (size_t i = 0; i < w->nkv; i++) {
      mlprof__tc_begin(&t, 0);
      mlprof__tc_binary(&t, 1, w->kv[2 * i], strlen(w->kv[2 * i]));
      mlprof__tc_binary(&t, 2, w->kv[2 * i + 1], strlen(w->kv[2 * i + 1]));
      mlprof__tc_end(&t);
    }
  }
  mlprof__tc_binary(&t, 6, created, strlen(created));
  mlprof__tc_end(&t);
  uint64_t len = mlprof__out_pos(w->o) - start;
  uint8_t b[4];
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(len >> (8 * i));
  mlprof__out_write(w->o, b, 4);
  mlprof__out_lit(w->o, "PAR1");
}

static void pq_free(mlprof__pq *w) {
  for (size_t i = 0; w->c && i < w->ncols; i++) {
    mlprof__out_close(&w->c[i].vals);
    mlprof__out_close(&w->c[i].defs);
    mlprof__out_close(&w->c[i].dict);
    free(w->c[i].doff);
    free(w->c[i].slots);
  }
  free(w->c);
  for (size_t r = 0; r < w->nrgs; r++) free(w->rgs[r].chunks);
  free(w->rgs);
  for (size_t i = 0; i < w->nkv * 2; i++) free(w->kv[i]);
  free(w->kv);
  mlprof__out_close(&w->page);
  mlprof__out_close(&w->hdr);
  free(w->zbuf);
  free(w->levels);
  ZSTD_freeCCtx(w->zc);
  free(w);
}

int mlprof__pq_close(mlprof__pq *w, char *err, size_t errlen) {
  flush_group(w);
  if (!w->err) write_footer(w);
  if (!w->err && w->o->err) fail(w, w->o->err, "cannot write the file");
  int rc = w->err;
  if (rc && err) snprintf(err, errlen, "%s", w->why);
  pq_free(w);
  return rc;
}

void mlprof__pq_abort(mlprof__pq *w) {
  if (w) pq_free(w);
}
