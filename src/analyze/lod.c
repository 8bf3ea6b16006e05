/* The timeline's level-of-detail pyramid (lod.h). */
#include "lod.h"

#include <fcntl.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/base.h"
#include "../format/wire.h"

#define NONE MLPROF__NONE

/* A track's bucket being filled at one level. */
typedef struct {
  uint64_t bucket, longest;
  int open;
} open_bucket;

/* A thread of the profile being read: its tracks by depth. */
typedef struct {
  uint64_t tid;
  uint32_t name;   /* NONE until its name is met */
  uint32_t *track; /* per depth: index into tracks, NONE */
  size_t ndepth;
  /* its latest span, which metadata and units records follow: the track
   * (NONE: a span left out) and the span's time */
  uint32_t last;
  uint64_t last_begin, last_end;
} thread_slot;

struct mlprof__lod_builder {
  mlprof__lod *l;
  mlprof__strindex names; /* the lookup of l->names */
  mlprof__strindex strs;  /* the lookup of l->strs */
  open_bucket *open;      /* MLPROF__LOD_LEVELS per track */
  /* a window's build (mlprof__lod_window): the pyramid it is of, whose
   * tracks it fills (those of the profile being read by tid << 8 | depth),
   * levels first to stop only */
  const mlprof__lod *base;
  mlprof__map base_tracks;
  size_t stop;
  /* per profile */
  const mlprof__job_profile *p;
  size_t index;
  uint32_t process;
  const mlprof__lod_file *file; /* its name ids and time offset */
  mlprof__lod_file *index_to;   /* a pyramid's: where its chunks go */
  uint32_t cur;     /* the EVENTS chunk being read: index into its chunks */
  mlprof__map tids; /* tid -> slot */
  thread_slot *th;
  size_t nth, th_cap;
};

typedef struct mlprof__lod_builder builder;

uint64_t mlprof__lod_res(size_t k) { return MLPROF__LOD_RES0_NS << (2 * k); }

size_t mlprof__lod_level(uint64_t res) {
  size_t k = 0;
  while (k + 1 < MLPROF__LOD_LEVELS && mlprof__lod_res(k + 1) <= res) k++;
  return k;
}

/* The index of the string s (n bytes) in l->names, added when new; NONE when
 * out of memory. */
static uint32_t intern(builder *b, const char *s, size_t n) {
  mlprof__lod *l = b->l;
  return mlprof__strindex_intern(&b->names, &l->names, &l->name_lens,
                                 &l->nnames, &l->names_cap, s, n);
}

static thread_slot *slot_of(builder *b, uint64_t tid) {
  uint32_t i = mlprof__map_get(&b->tids, tid);
  if (i != NONE) return &b->th[i];
  if (mlprof__grow(&b->th, &b->th_cap, b->nth + 1, sizeof *b->th) ||
      mlprof__map_put(&b->tids, tid, (uint32_t)b->nth))
    return NULL;
  thread_slot *s = &b->th[b->nth++];
  memset(s, 0, sizeof *s);
  s->tid = tid;
  s->name = NONE;
  s->last = NONE;
  return s;
}

/* The track of (thread s, depth), made when new; NULL when out of memory. */
static mlprof__lod_track *track_of(builder *b, thread_slot *s, uint32_t depth) {
  mlprof__lod *l = b->l;
  if (depth >= s->ndepth) {
    size_t n = (size_t)depth + 1;
    uint32_t *t = realloc(s->track, n * sizeof *t);
    if (!t) return NULL;
    for (size_t i = s->ndepth; i < n; i++) t[i] = NONE;
    s->track = t;
    s->ndepth = n;
  }
  if (s->track[depth] != NONE) return &l->tracks[s->track[depth]];
  size_t cap = l->tracks_cap;
  if (mlprof__grow(&l->tracks, &l->tracks_cap, l->ntracks + 1,
                   sizeof *l->tracks))
    return NULL;
  if (l->tracks_cap != cap) {
    open_bucket *o =
        realloc(b->open, l->tracks_cap * MLPROF__LOD_LEVELS * sizeof *o);
    if (!o) return NULL;
    b->open = o;
  }
  memset(&b->open[l->ntracks * MLPROF__LOD_LEVELS], 0,
         MLPROF__LOD_LEVELS * sizeof *b->open);
  mlprof__lod_track *t = &l->tracks[l->ntracks];
  memset(t, 0, sizeof *t);
  t->profile = b->index;
  t->pid = b->p->pid;
  t->rank = b->p->rank;
  t->tid = s->tid;
  t->process = b->process;
  t->thread = NONE;
  t->depth = depth;
  s->track[depth] = (uint32_t)l->ntracks++;
  return t;
}

/* Past the cap, drops the finest level left but the coarsest. */
static void keep_cap(mlprof__lod *l) {
  while (l->cap_items && l->items > l->cap_items &&
         l->first + 1 < MLPROF__LOD_LEVELS) {
    for (size_t i = 0; i < l->ntracks; i++) {
      mlprof__lod_run *r = &l->tracks[i].lv[l->first];
      l->items -= r->n;
      free(r->items);
      memset(r, 0, sizeof *r);
    }
    l->first++;
  }
}

/* Adds the span [begin, end) of zone name to level k of track t. */
static int level_add(builder *b, size_t t, size_t k, uint32_t name,
                     uint64_t begin, uint64_t end) {
  mlprof__lod *l = b->l;
  mlprof__lod_run *r = &l->tracks[t].lv[k];
  open_bucket *o = &b->open[t * MLPROF__LOD_LEVELS + k];
  uint64_t res = mlprof__lod_res(k), dur = end - begin;
  int small = dur < res;
  if (small && o->open && o->bucket == begin / res &&
      r->items[r->n - 1].count < UINT32_MAX) {
    mlprof__lod_item *it = &r->items[r->n - 1];
    if (begin < it->begin) it->begin = begin;
    if (end > it->end) it->end = end;
    it->busy_ns += dur;
    it->count++;
    if (dur > o->longest) {
      o->longest = dur;
      it->name = name;
    }
    return 0;
  }
  if (mlprof__grow(&r->items, &r->cap, r->n + 1, sizeof *r->items))
    return MLPROF_ENOMEM;
  r->items[r->n++] = (mlprof__lod_item){
      .begin = begin, .end = end, .busy_ns = dur, .name = name, .count = 1};
  l->items++;
  *o = (open_bucket){.bucket = begin / res, .longest = dur, .open = small};
  return 0;
}

static int on_header(void *ud, const mlprof__header *h) {
  (void)h;
  builder *b = ud;
  const char *s = b->p->name ? b->p->name : "";
  return (b->process = intern(b, s, strlen(s))) == NONE ? MLPROF_ENOMEM : 0;
}

/* Zone names go to l->names; metadata strings and unit names (the reader
 * checks each id's kind) to l->strs. */
static int on_name(void *ud, const mlprof__name *n) {
  builder *b = ud;
  mlprof__lod *l = b->l;
  uint32_t id;
  if (n->kind == MLPROF__NAME_ZONE)
    id = intern(b, n->name, n->name_len);
  else if (n->kind == MLPROF__NAME_STRING || n->kind == MLPROF__NAME_UNITS)
    id = mlprof__strindex_intern(&b->strs, &l->strs, &l->str_lens, &l->nstrs,
                                 &l->strs_cap, n->name, n->name_len);
  else
    return 0;
  if (id == NONE || mlprof__map_put(&b->index_to->ids, n->id, id))
    return MLPROF_ENOMEM;
  return 0;
}

static int on_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  builder *b = ud;
  thread_slot *s = slot_of(b, tid);
  if (!s || (s->name = intern(b, name, len)) == NONE) return MLPROF_ENOMEM;
  return 0;
}

/* A pyramid's: the chunk about to be read, in the index when it may be
 * read again. */
static int on_chunk(void *ud, uint16_t type, uint64_t off, uint32_t len) {
  builder *b = ud;
  mlprof__lod_file *f = b->index_to;
  if (off + len > f->size) f->size = off + len;
  b->cur = NONE;
  if (type != MLPROF__CHUNK_EVENTS && type != MLPROF__CHUNK_NAMES) return 0;
  if (mlprof__grow(&f->chunks, &f->chunks_cap, f->nchunks + 1,
                   sizeof *f->chunks))
    return MLPROF_ENOMEM;
  if (type == MLPROF__CHUNK_EVENTS) b->cur = (uint32_t)f->nchunks;
  f->chunks[f->nchunks++] =
      (mlprof__lod_chunk){.off = off,
                          .begin = UINT64_MAX,
                          .len = len,
                          .names = type == MLPROF__CHUNK_NAMES};
  return 0;
}

/* A window's: a chunk's metadata follow its own spans only. */
static int on_window_events(void *ud, uint32_t tid, uint64_t dropped) {
  (void)dropped;
  thread_slot *s = slot_of(ud, tid);
  if (!s) return MLPROF_ENOMEM;
  s->last = NONE;
  return 0;
}

static int on_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  builder *b = ud;
  mlprof__lod *l = b->l;
  thread_slot *s = slot_of(b, tid);
  if (!s) return MLPROF_ENOMEM;
  s->last = NONE;
  if (depth >= MLPROF__LOD_MAX_DEPTH) return 0;
  uint32_t gid = mlprof__map_get(&b->file->ids, name);
  if (gid == NONE) return 0;
  size_t ti, stop = MLPROF__LOD_LEVELS;
  if (b->base) {
    uint32_t i = mlprof__map_get(&b->base_tracks, (uint64_t)tid << 8 | depth);
    if (i == NONE) return 0;
    ti = i;
    stop = b->stop;
  } else {
    mlprof__lod_track *t = track_of(b, s, depth);
    if (!t) return MLPROF_ENOMEM;
    ti = (size_t)(t - l->tracks);
  }
  uint64_t dur = end > begin ? end - begin : 0;
  begin += b->file->offset_ns;
  end = begin + dur;
  s->last = (uint32_t)ti;
  s->last_begin = begin;
  s->last_end = end;
  l->spans++;
  if (b->index_to && b->cur == NONE) {
    l->indexed = 0; /* a visitor between the reader and it kept the chunks */
  } else if (b->index_to) {
    mlprof__lod_chunk *c = &b->index_to->chunks[b->cur];
    c->tid = tid;
    if (begin < c->begin) c->begin = begin;
    if (end > c->end) c->end = end;
  }
  for (size_t k = l->first; k < stop; k++)
    if (level_add(b, ti, k, gid, begin, end)) return MLPROF_ENOMEM;
  keep_cap(l);
  return 0;
}

/* Adds an entry to the thread's latest span kept. */
static int arg_add(builder *b, uint32_t tid, uint32_t key, uint32_t value,
                   uint64_t n) {
  mlprof__lod *l = b->l;
  thread_slot *s = slot_of(b, tid);
  if (!s) return MLPROF_ENOMEM;
  uint32_t k = mlprof__map_get(&b->file->ids, key);
  uint32_t v = value == NONE ? NONE : mlprof__map_get(&b->file->ids, value);
  if (s->last == NONE || k == NONE || (value != NONE && v == NONE)) return 0;
  if (l->cap_items && l->args >= l->cap_items) {
    l->args_missed++;
    return 0;
  }
  mlprof__lod_track *t = &l->tracks[s->last];
  if (mlprof__grow(&t->args, &t->args_cap, t->nargs + 1, sizeof *t->args))
    return MLPROF_ENOMEM;
  t->args[t->nargs++] = (mlprof__lod_arg){
      .begin = s->last_begin, .end = s->last_end, .key = k, .value = v, .n = n};
  l->args++;
  return 0;
}

static int on_span_meta(void *ud, uint32_t tid, uint32_t key, uint32_t value) {
  return arg_add(ud, tid, key, value, 0);
}

static int on_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  return arg_add(ud, tid, name, NONE, n);
}

mlprof__lod_builder *mlprof__lod_begin(mlprof__lod *l, size_t max_items) {
  memset(l, 0, sizeof *l);
  l->cap_items = max_items;
  l->indexed = 1;
  builder *b = calloc(1, sizeof *b);
  if (b) b->l = l;
  return b;
}

int mlprof__lod_profile_begin(builder *b, const mlprof__job_profile *p,
                              size_t index, mlprof__visitor *v) {
  mlprof__lod *l = b->l;
  b->p = p;
  b->index = index;
  if (mlprof__grow(&l->files, &l->files_cap, index + 1, sizeof *l->files))
    return MLPROF_ENOMEM;
  for (; l->nfiles <= index; l->nfiles++)
    memset(&l->files[l->nfiles], 0, sizeof *l->files);
  mlprof__lod_file *f = &l->files[index];
  if (!p->path) l->indexed = 0; /* not from a file */
  if (p->path && !(f->path = strdup(p->path))) return MLPROF_ENOMEM;
  f->offset_ns = p->offset_ns;
  struct stat st;
  if (p->path && stat(p->path, &st) == 0) {
    f->dev = (uint64_t)st.st_dev;
    f->ino = (uint64_t)st.st_ino;
  }
  b->file = b->index_to = f;
  b->cur = NONE;
  *v = (mlprof__visitor){.ud = b,
                         .header = on_header,
                         .name = on_name,
                         .thread = on_thread,
                         .chunk = on_chunk,
                         .span = on_span,
                         .span_meta = on_span_meta,
                         .span_units = on_span_units};
  /* A profile whose header is damaged calls no header callback. */
  return on_header(b, NULL);
}

/* Forgets the threads of the profile read. */
static void threads_clear(builder *b) {
  for (size_t i = 0; i < b->nth; i++) free(b->th[i].track);
  b->nth = 0;
  mlprof__map_clear(&b->tids);
}

/* Names the profile's tracks after their threads. */
int mlprof__lod_profile_end(builder *b) {
  mlprof__lod *l = b->l;
  uint32_t empty = intern(b, "", 0);
  if (empty == NONE) return MLPROF_ENOMEM;
  for (size_t i = 0; i < b->nth; i++) {
    thread_slot *s = &b->th[i];
    for (size_t d = 0; d < s->ndepth; d++)
      if (s->track[d] != NONE)
        l->tracks[s->track[d]].thread = s->name == NONE ? empty : s->name;
  }
  threads_clear(b);
  return 0;
}

static int cmp_item(const void *x, const void *y) {
  const mlprof__lod_item *a = x, *b = y;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  return (a->end > b->end) - (a->end < b->end);
}

static int cmp_arg(const void *x, const void *y) {
  const mlprof__lod_arg *a = x, *b = y;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  return (a->end > b->end) - (a->end < b->end);
}

static void builder_free(builder *b) {
  threads_clear(b);
  free(b->th);
  free(b->open);
  mlprof__strindex_free(&b->names);
  mlprof__strindex_free(&b->strs);
  mlprof__map_clear(&b->base_tracks);
  free(b);
}

/* Spans of one depth of a thread do not overlap, so they arrive in order;
 * a clock that stepped back may still break it: sort those runs of levels
 * first to stop (a span's metadata then may change order). */
static void sort_runs(mlprof__lod *l, size_t stop) {
  for (size_t i = 0; i < l->ntracks; i++) {
    mlprof__lod_track *t = &l->tracks[i];
    for (size_t k = l->first; k < stop; k++) {
      mlprof__lod_run *r = &t->lv[k];
      for (size_t j = 1; j < r->n; j++)
        if (cmp_item(&r->items[j - 1], &r->items[j]) > 0) {
          mlprof__sort(r->items, r->n, sizeof *r->items, cmp_item);
          break;
        }
    }
    for (size_t j = 1; j < t->nargs; j++)
      if (cmp_arg(&t->args[j - 1], &t->args[j]) > 0) {
        mlprof__sort(t->args, t->nargs, sizeof *t->args, cmp_arg);
        break;
      }
  }
}

int mlprof__lod_finish(builder *b) {
  sort_runs(b->l, MLPROF__LOD_LEVELS);
  builder_free(b);
  return 0;
}

void mlprof__lod_abort(builder *b) {
  if (!b) return;
  mlprof__lod_free(b->l);
  builder_free(b);
}

void mlprof__lod_free(mlprof__lod *l) {
  for (size_t i = 0; i < l->nnames; i++) free(l->names[i]);
  free(l->names);
  free(l->name_lens);
  for (size_t i = 0; i < l->nstrs; i++) free(l->strs[i]);
  free(l->strs);
  free(l->str_lens);
  for (size_t i = 0; i < l->ntracks; i++) {
    for (size_t k = 0; k < MLPROF__LOD_LEVELS; k++)
      free(l->tracks[i].lv[k].items);
    free(l->tracks[i].args);
  }
  free(l->tracks);
  for (size_t i = 0; i < l->nfiles; i++) {
    free(l->files[i].path);
    mlprof__map_clear(&l->files[i].ids);
    free(l->files[i].chunks);
  }
  free(l->files);
  mlprof__filtered_free(l->filtered);
  memset(l, 0, sizeof *l);
}

typedef struct {
  const mlprof__lod_run *r;
  uint64_t t;
} run_key;

/* The items that end by t come first. */
static int ends_by(const void *ctx, size_t i) {
  const run_key *k = ctx;
  return k->r->items[i].end <= k->t;
}

size_t mlprof__lod_find(const mlprof__lod_run *r, uint64_t t) {
  run_key key = {r, t};
  return mlprof__lower_bound(0, r->n, &key, ends_by);
}

typedef struct {
  const mlprof__lod_arg *args;
  uint64_t begin, end;
} arg_key;

/* The arguments of spans before (begin, end) come first. */
static int arg_below(const void *ctx, size_t i) {
  const arg_key *k = ctx;
  const mlprof__lod_arg *a = &k->args[i];
  return a->begin < k->begin || (a->begin == k->begin && a->end < k->end);
}

const mlprof__lod_arg *mlprof__lod_args(const mlprof__lod_track *t,
                                        uint64_t begin, uint64_t end,
                                        size_t *n) {
  arg_key key = {t->args, begin, end};
  size_t lo = mlprof__lower_bound(0, t->nargs, &key, arg_below), j = lo;
  while (j < t->nargs && t->args[j].begin == begin && t->args[j].end == end)
    j++;
  *n = j - lo;
  return t->args + lo;
}

/* Whether chunk c of profile i may hold a span of an item of [lo, hi] on
 * the thread of track only (NULL: any). */
static int chunk_wanted(const mlprof__lod_chunk *c, size_t i,
                        const mlprof__lod_track *only, uint64_t lo,
                        uint64_t hi) {
  return !c->names && c->begin <= hi && c->end >= lo &&
         (!only || (only->profile == i && only->tid == c->tid));
}

/* Reads the wanted chunks of file i (and the NAMES chunks before them) into
 * the window's builder. */
static int window_read(builder *b, size_t i, const mlprof__lod_track *only,
                       uint64_t lo, uint64_t hi, char *err, size_t errlen) {
  const mlprof__lod *l = b->base;
  const mlprof__lod_file *f = &l->files[i];
  size_t n = 0, last = 0;
  for (size_t j = 0; j < f->nchunks; j++)
    if (chunk_wanted(&f->chunks[j], i, only, lo, hi)) {
      n++;
      last = j;
    }
  if (!n) return 0;
  uint64_t *offs = malloc((last + 1) * sizeof *offs);
  if (!offs) return MLPROF_ENOMEM;
  n = 0;
  for (size_t j = 0; j <= last; j++)
    if (f->chunks[j].names || chunk_wanted(&f->chunks[j], i, only, lo, hi))
      offs[n++] = f->chunks[j].off;
  int rc = 0;
  for (size_t t = 0; t < l->ntracks && !rc; t++)
    if (l->tracks[t].profile == i)
      rc = mlprof__map_put(&b->base_tracks,
                           (uint64_t)l->tracks[t].tid << 8 | l->tracks[t].depth,
                           (uint32_t)t);
  struct stat st;
  int fd = rc ? -1 : open(f->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (!rc && fd < 0) {
    snprintf(err, errlen, "%s: gone since it was read", f->path);
    rc = MLPROF_EIO;
  } else if (!rc &&
             (fstat(fd, &st) || !S_ISREG(st.st_mode) ||
              (uint64_t)st.st_dev != f->dev || (uint64_t)st.st_ino != f->ino ||
              (uint64_t)st.st_size < f->size)) {
    snprintf(err, errlen, "%s: replaced since it was read", f->path);
    rc = MLPROF_EFORMAT;
  } else if (!rc) {
    char why[256];
    b->file = f;
    mlprof__visitor v = {.ud = b,
                         .events = on_window_events,
                         .span = on_span,
                         .span_meta = on_span_meta,
                         .span_units = on_span_units};
    /* What the pyramid's read let through, no more. */
    mlprof__filter_read fr = {0};
    if (l->filtered) mlprof__filter_visitor(l->filtered, i, &fr, &v, &v);
    rc = mlprof__read_fd_chunks(fd, offs, n, &v, NULL, why, sizeof why);
    mlprof__filter_read_free(&fr);
    if (rc && rc != MLPROF_ENOMEM)
      snprintf(err, errlen, "%s: %s", f->path, why);
  }
  if (fd >= 0) close(fd);
  free(offs);
  threads_clear(b);
  mlprof__map_clear(&b->base_tracks);
  return rc;
}

int mlprof__lod_window(const mlprof__lod *l, uint64_t t0, uint64_t t1, size_t k,
                       size_t track, size_t max_bytes, mlprof__lod *w,
                       char *err, size_t errlen) {
  memset(w, 0, sizeof *w);
  if (errlen) err[0] = '\0';
  if (k >= l->first || !l->indexed ||
      (track != SIZE_MAX && track >= l->ntracks))
    return 1;
  const mlprof__lod_track *only = track == SIZE_MAX ? NULL : &l->tracks[track];
  /* An item of level j holds spans that begin in one bucket and last less
   * than its resolution: one that reaches into [t0, t1) is made of spans
   * within 2 resolutions of it, and so are the spans before it that decide
   * where it starts. */
  uint64_t m = 2 * mlprof__lod_res(l->first - 1);
  uint64_t lo = t0 > m ? t0 - m : 0,
           hi = t1 > UINT64_MAX - m ? UINT64_MAX : t1 + m;
  size_t bytes = 0;
  for (size_t i = 0; i < l->nfiles; i++)
    for (size_t j = 0; j < l->files[i].nchunks; j++)
      if (chunk_wanted(&l->files[i].chunks[j], i, only, lo, hi))
        bytes += l->files[i].chunks[j].len;
  if (bytes > max_bytes) return 1;
  builder *b = calloc(1, sizeof *b);
  mlprof__lod_track *tracks =
      malloc((l->ntracks ? l->ntracks : 1) * sizeof *tracks);
  if (b)
    b->open = calloc((l->ntracks ? l->ntracks : 1) * MLPROF__LOD_LEVELS,
                     sizeof *b->open);
  if (!b || !tracks || !b->open) {
    free(tracks);
    if (b) builder_free(b);
    return MLPROF_ENOMEM;
  }
  *w = *l;
  memcpy(tracks, l->tracks, l->ntracks * sizeof *tracks);
  for (size_t i = 0; i < l->ntracks; i++) {
    tracks[i].args = NULL;
    tracks[i].nargs = tracks[i].args_cap = 0;
  }
  w->tracks = tracks;
  w->files = NULL;
  w->nfiles = w->files_cap = 0;
  w->indexed = 0;
  w->filtered = NULL;
  w->first = k;
  w->own = l->first;
  w->items = w->args = w->cap_items = 0;
  w->spans = w->args_missed = 0;
  b->l = w;
  b->base = l;
  b->stop = l->first;
  int rc = 0;
  for (size_t i = 0; i < l->nfiles && !rc; i++)
    rc = window_read(b, i, only, lo, hi, err, errlen);
  if (!rc) sort_runs(w, w->own);
  builder_free(b);
  if (rc) mlprof__lod_window_free(w);
  return rc;
}

void mlprof__lod_window_free(mlprof__lod *w) {
  for (size_t i = 0; i < w->ntracks && w->tracks; i++) {
    for (size_t k = w->first; k < w->own; k++) free(w->tracks[i].lv[k].items);
    free(w->tracks[i].args);
  }
  free(w->tracks);
  memset(w, 0, sizeof *w);
}
