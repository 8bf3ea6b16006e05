/* Folding a flush interval's sampled allocation records (fold.h). The
 * writer thread calls it; nothing here runs in the allocation hooks.
 *
 * The folder follows the blocks the file holds as live (address, weight,
 * zone), so that it knows the weight a free takes away even when the block
 * was allocated in an earlier interval: its replay sees the live bytes a
 * reader's replay of the file sees, and so the highest they reach. A pair
 * is kept whole only where the live bytes of the process, or of its zone,
 * rise above their highest so far: once a run is steady, seldom. When the
 * folder cannot know the file's live bytes (it forgot, or could not follow
 * a block), it keeps instead the pairs live at each interval's own highest
 * point, which are the only places a new highest can be. */
#include "fold.h"

#include <mlprof.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"

/* Blocks followed at most: the allocation hooks keep at most 65536 sampled
 * blocks live at once (malloc.c); the rest is frees lost at the memory cap. */
#define LIVE_MAX (1u << 18)

typedef struct {
  uint64_t addr, weight; /* addr 0: an empty slot */
  uint32_t zone;
  uint32_t pos; /* its allocation's place in this interval's order + 1; 0:
                   allocated in an earlier interval */
} block;

typedef struct {
  uint64_t ns;
  uint32_t i;
} by_ns;

/* Live bytes of the process or of a zone, as the file says them. */
typedef struct {
  int64_t live, high; /* now; the highest so far (see known) */
  uint32_t at;        /* place + 1 of this interval's record after which
                         live rose to high; 0: none */
} watch;

struct mlprof__fold {
  block *b; /* open addressing, linear probing, cap a power of two */
  size_t cap, n;
  by_ns *order;
  size_t order_cap;
  uint32_t *pos; /* per record: its place in time order */
  size_t pos_cap;
  watch *w; /* [0]: the process; then one per zone met (zix) */
  size_t nw, w_cap;
  mlprof__map zix;
  /* The blocks followed are all the file holds as live, so that the
   * watches' highs are the file's: since the file began, or since the last
   * forget with nothing live in it. */
  int unknown;
  mlprof__map six; /* a site's zone << 32 | stack -> its sum's index */
  mlprof__fold_sum *sums;
  size_t sums_cap;
};

mlprof__fold *mlprof__fold_new(void) {
  mlprof__fold *f = calloc(1, sizeof *f);
  if (f && mlprof__grow(&f->w, &f->w_cap, 1, sizeof *f->w)) {
    free(f);
    return NULL;
  }
  if (f) f->w[f->nw++] = (watch){0, 0, 0};
  return f;
}

void mlprof__fold_free(mlprof__fold *f) {
  if (!f) return;
  free(f->b);
  free(f->order);
  free(f->pos);
  free(f->w);
  mlprof__map_clear(&f->zix);
  mlprof__map_clear(&f->six);
  free(f->sums);
  free(f);
}

void mlprof__fold_forget(mlprof__fold *f) {
  if (f->n) memset(f->b, 0, f->cap * sizeof *f->b);
  f->n = 0;
  f->unknown = 1;
}

/* ---- the live blocks ---------------------------------------------------- */

static size_t home(uint64_t addr, size_t cap) {
  return mlprof__map_slot(addr, cap);
}

static block *find(mlprof__fold *f, uint64_t addr) {
  if (!f->n) return NULL;
  for (size_t i = home(addr, f->cap);; i = (i + 1) & (f->cap - 1)) {
    if (f->b[i].addr == addr) return &f->b[i];
    if (!f->b[i].addr) return NULL;
  }
}

/* Empties slot b, moving back the entries after it that its emptiness
 * would cut off from their home (deletion in linear probing). */
static void drop(mlprof__fold *f, block *b) {
  size_t mask = f->cap - 1, i = (size_t)(b - f->b), j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (!f->b[j].addr) break;
    size_t k = home(f->b[j].addr, f->cap);
    /* The entry at j stays when its home is cyclically in (i, j]. */
    int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      f->b[i] = f->b[j];
      i = j;
    }
  }
  f->b[i].addr = 0;
  f->n--;
}

static int grow(mlprof__fold *f) {
  size_t cap = f->cap ? f->cap * 2 : 1024;
  block *nb = calloc(cap, sizeof *nb);
  if (!nb) return MLPROF_ENOMEM;
  for (size_t i = 0; i < f->cap; i++) {
    if (!f->b[i].addr) continue;
    size_t j = home(f->b[i].addr, cap);
    while (nb[j].addr) j = (j + 1) & (cap - 1);
    nb[j] = f->b[i];
  }
  free(f->b);
  f->b = nb;
  f->cap = cap;
  return 0;
}

/* The block at addr, made when new: NULL when LIVE_MAX are followed (it is
 * then not followed: its free is not paired) or memory is short. */
static block *put(mlprof__fold *f, uint64_t addr) {
  block *b = find(f, addr);
  if (b) return b;
  if (f->n >= LIVE_MAX || ((f->n + 1) * 2 > f->cap && grow(f))) {
    f->unknown = 1; /* its free will weigh nothing here */
    return NULL;
  }
  size_t i = home(addr, f->cap);
  while (f->b[i].addr) i = (i + 1) & (f->cap - 1);
  f->n++;
  f->b[i].addr = addr;
  return &f->b[i];
}

/* ---- one interval ------------------------------------------------------- */

static int cmp_ns(const void *x, const void *y) {
  const by_ns *a = x, *b = y;
  if (a->ns != b->ns) return a->ns < b->ns ? -1 : 1;
  return a->i < b->i ? -1 : a->i > b->i;
}

/* The watch of zone z (made when new); NULL when memory is short. */
static watch *zone_watch(mlprof__fold *f, uint32_t z) {
  uint32_t k = mlprof__map_get(&f->zix, z);
  if (k != MLPROF__NONE) return &f->w[k];
  if (mlprof__grow(&f->w, &f->w_cap, f->nw + 1, sizeof *f->w) ||
      mlprof__map_put(&f->zix, z, (uint32_t)f->nw))
    return NULL;
  f->w[f->nw] = (watch){0, 0, 0};
  return &f->w[f->nw++];
}

/* Live bytes of the process (w[0]) and of zone z change by d after the
 * record at place p. 0 or MLPROF_ENOMEM. */
static int move(mlprof__fold *f, uint32_t z, int64_t d, uint32_t p) {
  watch *zw = zone_watch(f, z);
  if (!zw) return MLPROF_ENOMEM;
  watch *ws[2] = {&f->w[0], zw};
  for (int k = 0; k < 2; k++) {
    ws[k]->live += d;
    if (ws[k]->live > ws[k]->high) {
      ws[k]->high = ws[k]->live;
      ws[k]->at = p + 1;
    }
  }
  return 0;
}

/* Whether the allocation at place a, freed at place b, was live after the
 * record at place + 1 at (0: none). */
static int live_at(uint32_t at, uint32_t a, uint32_t b) {
  return at && a <= at - 1 && at - 1 < b;
}

static uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The replay: pairs, then the watches' highest points. */
static int replay(mlprof__fold *f, mlprof__fold_rec *r, size_t n) {
  for (size_t k = 0; k < f->nw; k++) {
    f->w[k].at = 0;
    /* Not knowing the file's highest, the interval's own is taken. */
    if (f->unknown) f->w[k].high = f->w[k].live;
  }
  for (uint32_t p = 0; p < n; p++) {
    mlprof__fold_rec *e = &r[f->order[p].i];
    f->pos[f->order[p].i] = p;
    if (e->size) {
      /* A block allocated again at a live address: the earlier one stays
       * live for readers too, unpaired; it is no longer followed here. */
      block *b = put(f, e->addr);
      if (b) *b = (block){e->addr, e->weight, e->zone, p + 1};
      if (move(f, e->zone, (int64_t)e->weight, p)) return MLPROF_ENOMEM;
    } else {
      block *b = find(f, e->addr);
      if (!b) continue; /* unknown: weighs nothing */
      if (b->pos) {
        uint32_t a = f->order[b->pos - 1].i;
        r[a].partner = f->order[p].i;
        e->partner = a;
      }
      uint32_t z = b->zone;
      int64_t d = -(int64_t)b->weight;
      drop(f, b);
      if (move(f, z, d, p)) return MLPROF_ENOMEM;
    }
  }
  return 0;
}

int mlprof__fold_interval(mlprof__fold *f, mlprof__fold_rec *r, size_t n,
                          uint64_t lo, uint64_t hi,
                          const mlprof__fold_sum **sums, size_t *nsums) {
  *sums = NULL;
  *nsums = 0;
  for (size_t i = 0; i < n; i++) {
    r[i].partner = MLPROF__FOLD_NONE;
    r[i].folded = 0;
  }
  if (!n) return 0;
  if (n >= UINT32_MAX ||
      mlprof__grow(&f->order, &f->order_cap, n, sizeof *f->order) ||
      mlprof__grow(&f->pos, &f->pos_cap, n, sizeof *f->pos))
    goto fail;
  int sorted = 1; /* one thread's records are: no need to sort */
  for (size_t i = 0; i < n; i++) {
    f->order[i] = (by_ns){r[i].ns, (uint32_t)i};
    sorted &= !i || r[i].ns >= r[i - 1].ns;
  }
  if (!sorted) mlprof__sort(f->order, n, sizeof *f->order, cmp_ns);
  if (replay(f, r, n)) goto fail;
  /* Blocks allocated here and still live are earlier intervals' now. */
  for (size_t i = 0; i < n; i++) {
    block *b = r[i].size ? find(f, r[i].addr) : NULL;
    if (b && b->pos == f->pos[i] + 1) b->pos = 0;
  }
  /* The pairs not live at a highest point fold, summed per run and site
   * (sums in run order, as the records). */
  size_t ns = 0;
  uint32_t run = 0;
  for (size_t i = 0; i < n; i++) {
    if (i && r[i].thread != r[i - 1].thread) run = (uint32_t)i;
    mlprof__fold_rec *e = &r[i];
    /* Stack ids are 32-bit: a larger one would not fit the site's key. */
    if (!e->size || e->partner == MLPROF__FOLD_NONE || e->stack > UINT32_MAX)
      continue;
    mlprof__fold_rec *fr = &r[e->partner];
    if (e->ns <= lo || fr->ns >= hi) continue;
    uint32_t a = f->pos[i], b = f->pos[e->partner];
    uint32_t zk = mlprof__map_get(&f->zix, e->zone);
    if (live_at(f->w[0].at, a, b) ||
        (zk != MLPROF__NONE && live_at(f->w[zk].at, a, b)))
      continue;
    uint64_t key = (uint64_t)e->zone << 32 | e->stack;
    uint32_t k = mlprof__map_get(&f->six, key);
    /* The map keeps every site met: an index of an earlier run or interval
     * is not this run's sum. */
    if (k == MLPROF__NONE || k >= ns || f->sums[k].run != run ||
        f->sums[k].zone != e->zone || f->sums[k].stack != e->stack) {
      if (mlprof__grow(&f->sums, &f->sums_cap, ns + 1, sizeof *f->sums) ||
          mlprof__map_put(&f->six, key, (uint32_t)ns))
        goto fail;
      k = (uint32_t)ns++;
      f->sums[k] =
          (mlprof__fold_sum){.run = run, .zone = e->zone, .stack = e->stack};
    }
    mlprof__fold_sum *s = &f->sums[k];
    double v = e->weight > e->size
                   ? (double)e->weight * (double)(e->weight - e->size)
                   : 0;
    s->count++;
    s->size = sat_add(s->size, e->size);
    s->weight = sat_add(s->weight, e->weight);
    s->var = sat_add(s->var, v >= 0x1p64 ? UINT64_MAX : (uint64_t)v);
    if (fr->ns > s->ns) s->ns = fr->ns;
    e->folded = fr->folded = 1;
  }
  *sums = f->sums;
  *nsums = ns;
  return 0;
fail:
  for (size_t i = 0; i < n; i++) r[i].folded = 0;
  mlprof__fold_forget(f);
  return MLPROF_ENOMEM;
}
