/* Compact step marks (marks.h). An entry is the varint of the time since
 * the previous entry (since 0 for the first), shifted left by one with the
 * low bit set for a step end. A block's first two bytes hold how many of
 * its bytes are used; an entry never straddles two blocks. */
#include "marks.h"

#include <mlprof.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "../format/wire.h"

#define BLOCK 4096
#define HEAD 2

int mlprof__marks_add(mlprof__marks *m, uint64_t t, int end) {
  if (end && !m->in_step) return 0;
  int first = !m->nblocks;
  uint64_t delta = first ? t : t > m->last ? t - m->last : 0;
  uint8_t *b = first ? NULL : m->blocks[m->nblocks - 1];
  size_t used = b ? mlprof__get_u16(b) : BLOCK;
  if (used + 10 > BLOCK) {
    if (mlprof__grow(&m->blocks, &m->bcap, m->nblocks + 1, sizeof *m->blocks) ||
        !(b = malloc(BLOCK)))
      return MLPROF_ENOMEM;
    m->blocks[m->nblocks++] = b;
    used = HEAD;
  }
  /* Times are below 2^63 ns (the reader's range): the shift keeps them. */
  used = (size_t)(mlprof__put_uv(b + used, delta << 1 | (end ? 1u : 0u)) - b);
  mlprof__put_u16(b, (uint16_t)used);
  if (m->in_step) {
    m->steps++;
    m->total_ns += delta;
    if (delta > m->max_ns) m->max_ns = delta;
  }
  m->last = first ? t : m->last + delta;
  m->in_step = !end;
  if (end)
    m->ends++;
  else
    m->marks++;
  return 0;
}

void mlprof__marks_free(mlprof__marks *m) {
  for (size_t i = 0; i < m->nblocks; i++) free(m->blocks[i]);
  free(m->blocks);
  memset(m, 0, sizeof *m);
}

void mlprof__marks_cursor_init(mlprof__marks_cursor *c,
                               const mlprof__marks *m) {
  *c = (mlprof__marks_cursor){.m = m, .block = 0, .pos = HEAD, .t = 0};
}

int mlprof__marks_next(mlprof__marks_cursor *c, uint64_t *t, int *end) {
  const mlprof__marks *m = c->m;
  while (c->block < m->nblocks &&
         c->pos >= mlprof__get_u16(m->blocks[c->block])) {
    c->block++;
    c->pos = HEAD;
  }
  if (c->block >= m->nblocks) return 0;
  const uint8_t *b = m->blocks[c->block];
  mlprof__cursor in = {b + c->pos, b + mlprof__get_u16(b), 0};
  uint64_t v = mlprof__get_uv(&in);
  c->pos = (size_t)(in.p - b);
  c->t += v >> 1;
  *t = c->t;
  *end = (int)(v & 1);
  return 1;
}

/* Counts, by the byte at shift, the steps of m[] whose bits above shift
 * are prefix. */
static void count_byte(const mlprof__marks *const *m, size_t n, unsigned shift,
                       uint64_t prefix, uint64_t hist[256]) {
  memset(hist, 0, 256 * sizeof *hist);
  for (size_t i = 0; i < n; i++) {
    mlprof__marks_cursor c;
    mlprof__marks_cursor_init(&c, m[i]);
    uint64_t t, prev = 0;
    int end, in_step = 0;
    while (mlprof__marks_next(&c, &t, &end)) {
      uint64_t d = t - prev;
      if (in_step && (shift >= 56 || (d >> (shift + 8)) == prefix))
        hist[(d >> shift) & 255]++;
      prev = t;
      in_step = !end;
    }
  }
}

uint64_t mlprof__pct_rank(uint64_t n, unsigned pct) {
  uint64_t rank = (n * pct + 99) / 100;
  return rank ? rank : 1;
}

uint64_t mlprof__marks_percentile(const mlprof__marks *const *m, size_t n,
                                  unsigned pct) {
  uint64_t steps = 0, max = 0;
  for (size_t i = 0; i < n; i++) {
    steps += m[i]->steps;
    if (m[i]->max_ns > max) max = m[i]->max_ns;
  }
  if (!steps) return 0;
  uint64_t rank = mlprof__pct_rank(steps, pct);
  unsigned shift = 0;
  while (shift < 56 && max >> (shift + 8)) shift += 8;
  uint64_t prefix = 0, hist[256];
  for (;; shift -= 8) {
    count_byte(m, n, shift, prefix, hist);
    unsigned b = 0;
    while (b < 255 && hist[b] < rank) rank -= hist[b++];
    prefix = prefix << 8 | b;
    if (!shift) return prefix;
  }
}
