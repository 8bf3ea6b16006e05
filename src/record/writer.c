/* The writer thread: every flush interval (or sooner when buffers fill up) it
 * reads what each thread published, pairs zone begins with their ends,
 * encodes spans and other records (docs/format.md) and appends whole chunks
 * to the profile file. It owns the file and all encoding state; the threads
 * being profiled never wait for it. It creates, writes and closes the file
 * itself, in a descriptor table of its own (src/base/fd.c): the program can
 * neither see nor close the profile's descriptor, nor get its number. */
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../format/wire.h"
#include "../sample/sample.h"
#include "fold.h"
#include "internal.h"
#include "stack.h"

#define OUT_FLUSH_BYTES (1u << 20)
#define EVENTS_CHUNK_BYTES (1u << 20)
#define NAME_MAX_BYTES 1024

typedef struct {
  uint8_t *p;
  size_t len, cap;
} bytes;

typedef struct {
  const mlprof_site *site;
  uint32_t id;
} id_slot;

/* A sample row waiting for the writer, its strings interned. */
typedef struct {
  uint64_t raw;
  uint8_t subject;
  uint64_t id;
  const mlprof_site *label;
  int n;
  struct {
    const mlprof_site *name, *reason; /* reason: NULL when valid */
    double value;
  } m[MLPROF__ROW_MEASURES];
} pending_row;

/* Sampled allocation records held for folding in one flush at most (64
 * bytes each, and about as much again while folding); past it the
 * interval's records are written one by one. */
#define MAX_HELD_ALLOCS (1u << 18)

/* Rows beyond this many between two flushes are dropped (a stalled disk). */
#define MAX_PENDING_ROWS 65536

/* A span measured elsewhere (mlprof_track_spans), times CLOCK_MONOTONIC. */
typedef struct {
  const mlprof_site *site, *unit;
  uint64_t begin, end, units;
  uint32_t depth;
} ext_span;

#define MAX_TRACKS 256

/* An allocation queued on a track (mlprof_track_allocs), with its zone. */
typedef struct {
  mlprof__ext_alloc a;
  const mlprof_site *zone;
} ext_alloc;

/* A track: its name, the spans and allocations queued for the next flush
 * (pending_lock), and the writer's encoding state for its EVENTS and
 * ALLOCS chunks. */
typedef struct {
  char name[64];
  int announced; /* writer only: its THREAD chunk is written */
  ext_span *spans;
  size_t n, cap;
  ext_alloc *allocs;
  size_t nallocs, acap;
  mlprof__thread stream;
} track;

struct mlprof__writer {
  int fd; /* in the writer thread's table; -1 once the program took it over
             (a shared table only) and the path is not ours */
  int private_fds; /* the writer thread has a descriptor table of its own */
  char *path;      /* where the profile was created */
  char *want;      /* the path asked for (cap bytes), leaf: see writer_open */
  size_t cap, leaf;
  sem_t ready; /* the thread created the file, or failed to */
  int open_rc, open_errno;
  dev_t dev; /* the file's identity, to recognise w->fd and the path */
  ino_t ino;
  off_t size;    /* bytes written, all in whole chunks */
  int failed;    /* a write failed: keep draining buffers, write nothing more */
  uint64_t lost; /* events in chunks that could not be written */
  uint64_t out_events; /* events in the chunks of `out` */
  uint32_t events_n;   /* events in the EVENTS payload being built */
  uint32_t flush_ms;
  mlprof__timebase tb;

  pthread_t thread;
  int started;
  _Atomic int stop;
  /* The process is ending (exec, _exit, a fatal signal): finish the file at
   * the next flush, its END saying how (MLPROF__END_*) with end_status. */
  _Atomic int final_req;
  _Atomic int end_how, end_status;
  _Atomic int finished;       /* END written: nothing more goes to the file */
  uint64_t unmatched_gone;    /* unmatched ends of threads already freed */
  uint64_t wdropped_gone;     /* their events the writer dropped */
  _Atomic uint64_t req, done; /* flush requests and the last one served */
  pthread_mutex_t done_lock;
  pthread_cond_t done_cond;

  id_slot *ids; /* site pointer -> name id, open addressing */
  uint32_t ids_cap, ids_len;

  bytes names; /* NAMES entries not yet written */
  uint32_t nnames;
  bytes events; /* the EVENTS payload being built */
  mlprof__thread *events_thread;
  bytes allocs; /* the ALLOCS payload being built */
  mlprof__thread *allocs_thread;
  /* Sampled mode: this flush's allocation records, held until every thread
   * is drained, then folded (fold.h) and written. */
  int folding;        /* this flush holds them */
  int fold_off;       /* MLPROF_MEMORY_FOLD=0 */
  int bypass;         /* this flush wrote allocation records without fold */
  mlprof__fold *fold; /* made at the first flush, before any record */
  int fold_made;
  /* Raw times: the last drain of every thread began, and the one before
   * ended. Between the two the held records are all there are. */
  uint64_t drain_begin, drain_end;
  mlprof__fold_rec *held;
  size_t nheld, held_cap;
  mlprof__thread **gone; /* exited threads, freed once their records are */
  size_t ngone, gone_cap;
  bytes out;    /* whole chunks waiting for write() */
  bytes stacks; /* the STACKS payload being built */

  pthread_mutex_t pending_lock; /* the sampler's rows and source statuses */
  pending_row *rows;
  size_t nrows, rows_cap;
  bytes sources;
  uint32_t nsources;
  track *tracks[MAX_TRACKS];
  uint32_t ntracks;
  size_t queued;                  /* spans and allocations queued */
  _Atomic uint64_t track_dropped; /* those dropped at the memory cap */
};

/* ---- byte buffers ------------------------------------------------------- */

static int reserve(bytes *b, size_t n) {
  return mlprof__grow(&b->p, &b->cap, b->len + n, 1) ? -1 : 0;
}

/* Room for n more bytes at the end of b; NULL when memory is short, and the
 * caller then leaves the record out. */
static uint8_t *room(bytes *b, size_t n) {
  if (reserve(b, n) != 0) return NULL;
  return b->p + b->len;
}

static void put_str(bytes *b, const char *s) {
  size_t n = s ? strnlen(s, NAME_MAX_BYTES) : 0;
  uint8_t *p = room(b, n + 10);
  if (!p) return;
  p = mlprof__put_uv(p, n);
  memcpy(p, s ? s : "", n);
  b->len = (size_t)(p + n - b->p);
}

static void put_uv(bytes *b, uint64_t v) {
  uint8_t *p = room(b, 10);
  if (p) b->len = (size_t)(mlprof__put_uv(p, v) - b->p);
}

/* ---- file output -------------------------------------------------------- */

/* Wakes the writer thread. One semaphore for the process, never destroyed, so
 * a thread poking a writer that is shutting down touches nothing freed. */
static sem_t wake;
static pthread_once_t wake_once = PTHREAD_ONCE_INIT;
static void wake_init(void) { sem_init(&wake, 0, 0); }

/* Whether fd is the profile: its device and inode, and the size written so
 * far (an inode number is reused as soon as a removed file is closed). */
static int same_file(mlprof__writer *w, int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && st.st_dev == w->dev && st.st_ino == w->ino &&
         st.st_size == w->size;
}

/* Whether w->fd is still the profile. In a table of its own, always. Where
 * the kernel refused one, the writer shares the program's table, and a
 * program that closes every descriptor (a daemon, closefrom) may have got
 * its number back for a file of its own: then the profile is opened again by
 * its path, if that is still the same file, and otherwise stops. The old
 * number is the program's now: never written to nor closed again. Costs an
 * fstat per write of `out` (a window remains: docs/guide.md). */
static int fd_check(mlprof__writer *w) {
  if (w->private_fds && w->fd >= 0) return 0;
  if (w->fd >= 0 && same_file(w, w->fd)) return 0;
  int fd = open(w->path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 && same_file(w, fd)) {
    w->fd = fd;
    return 0;
  }
  if (fd >= 0) close(fd);
  if (w->fd >= 0) {
    static _Atomic int warned;
    mlprof__warn_once(&warned,
                      "the program closed the descriptor of %s and the file "
                      "there is not the profile any more; this profile stops "
                      "here, the program goes on",
                      w->path);
  }
  w->fd = -1;
  w->failed = 1;
  return -1;
}

/* Writes `out` whole or not at all: after a failure (a full disk) the file
 * is cut back to its last whole chunk, which also frees room for the END
 * chunk that counts what was lost. */
static void out_flush(mlprof__writer *w) {
  const uint8_t *p = w->out.p;
  size_t n = w->out.len;
  if (n && !w->failed && !w->finished && fd_check(w) == 0) {
    while (n) {
      ssize_t k = write(w->fd, p, n);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        static _Atomic int warned;
        mlprof__warn_once(&warned,
                          "cannot write %s: %s; this profile stops "
                          "here (what is lost is counted), the program goes on",
                          w->path, strerror(k < 0 ? errno : ENOSPC));
        int ignored = ftruncate(w->fd, w->size); /* else a damaged tail */
        (void)ignored;
        w->failed = 1;
        break;
      }
      p += k;
      n -= (size_t)k;
    }
    if (!w->failed) w->size += (off_t)w->out.len;
  }
  if (w->failed) w->lost += w->out_events;
  w->out_events = 0;
  w->out.len = 0;
}

/* Appends a chunk holding nevents events to `out`; events that cannot be
 * are counted as lost. */
static void put_chunk(mlprof__writer *w, uint16_t type, const uint8_t *payload,
                      size_t len, uint32_t nevents) {
  uint8_t *h = room(&w->out, MLPROF__CHUNK_HEADER_SIZE + len);
  if (!h) {
    w->lost += nevents;
    return;
  }
  w->out_events += nevents;
  memcpy(h, MLPROF__CHUNK_MAGIC, 4);
  mlprof__put_u16(h + 4, type);
  mlprof__put_u16(h + 6, 0);
  mlprof__put_u32(h + 8, (uint32_t)len);
  uint32_t crc = mlprof__crc32(0, h + 4, 8);
  mlprof__put_u32(h + 12, mlprof__crc32(crc, payload, len));
  memcpy(h + MLPROF__CHUNK_HEADER_SIZE, payload, len);
  w->out.len += MLPROF__CHUNK_HEADER_SIZE + len;
  if (w->out.len >= OUT_FLUSH_BYTES) out_flush(w);
}

/* ---- names -------------------------------------------------------------- */

static int ids_grow(mlprof__writer *w) {
  uint32_t ncap = w->ids_cap ? w->ids_cap * 2 : 256;
  id_slot *n = calloc(ncap, sizeof *n);
  if (!n) return -1;
  for (uint32_t i = 0; i < w->ids_cap; i++) {
    if (!w->ids[i].site) continue;
    uint32_t j = (uint32_t)((uintptr_t)w->ids[i].site >> 3) & (ncap - 1);
    while (n[j].site) j = (j + 1) & (ncap - 1);
    n[j] = w->ids[i];
  }
  free(w->ids);
  w->ids = n;
  w->ids_cap = ncap;
  return 0;
}

/* The name id of a site, announced in the next NAMES chunk on first use;
 * 0 when memory is short (the caller drops the record). */
static uint32_t name_id(mlprof__writer *w, const mlprof_site *site, int kind) {
  if (w->ids_cap) {
    uint32_t j = (uint32_t)((uintptr_t)site >> 3) & (w->ids_cap - 1);
    for (; w->ids[j].site; j = (j + 1) & (w->ids_cap - 1))
      if (w->ids[j].site == site) return w->ids[j].id;
  }
  if ((w->ids_len + 1) * 2 > w->ids_cap && ids_grow(w) != 0) return 0;
  uint32_t id = ++w->ids_len;
  uint32_t j = (uint32_t)((uintptr_t)site >> 3) & (w->ids_cap - 1);
  while (w->ids[j].site) j = (j + 1) & (w->ids_cap - 1);
  w->ids[j] = (id_slot){site, id};
  put_uv(&w->names, id);
  uint8_t *p = room(&w->names, 2);
  if (p) {
    p[0] = (uint8_t)kind;
    p[1] = (uint8_t)(site->category < MLPROF_CAT_COUNT ? site->category : 0);
    w->names.len += 2;
  }
  put_str(&w->names, site->name);
  put_str(&w->names, site->function);
  put_str(&w->names, site->file);
  put_uv(&w->names, site->line);
  w->nnames++;
  return id;
}

static void names_flush(mlprof__writer *w) {
  if (!w->nnames) return;
  bytes b = {0};
  put_uv(&b, w->nnames);
  if (b.len && reserve(&b, w->names.len) == 0) {
    memcpy(b.p + b.len, w->names.p, w->names.len);
    b.len += w->names.len;
    put_chunk(w, MLPROF__CHUNK_NAMES, b.p, b.len, 0);
  }
  free(b.p);
  w->names.len = 0;
  w->nnames = 0;
}

/* ---- events ------------------------------------------------------------- */

static void events_flush(mlprof__writer *w) {
  if (!w->events_thread) return;
  names_flush(w);
  put_chunk(w, MLPROF__CHUNK_EVENTS, w->events.p, w->events.len, w->events_n);
  w->events.len = 0;
  w->events_n = 0;
  w->events_thread = NULL;
}

static void allocs_flush(mlprof__writer *w) {
  if (!w->allocs_thread) return;
  names_flush(w);
  put_chunk(w, MLPROF__CHUNK_ALLOCS, w->allocs.p, w->allocs.len, 0);
  w->allocs.len = 0;
  w->allocs_thread = NULL;
}

/* Appends t's allocation record (tag, time as a delta) to the ALLOCS
 * payload, started for t when it is not the one being built; extra: bytes
 * the caller writes after it. NULL (the record counted as dropped) when
 * memory is short. */
static uint8_t *alloc_record(mlprof__writer *w, mlprof__thread *t, uint8_t tag,
                             uint64_t ns, size_t extra) {
  if (w->allocs_thread != t || w->allocs.len >= EVENTS_CHUNK_BYTES) {
    allocs_flush(w);
    uint8_t *p = room(&w->allocs, 20);
    if (!p) {
      t->wdropped++;
      return NULL;
    }
    p = mlprof__put_uv(p, t->tid);
    p = mlprof__put_uv(p, t->mem_ref_ns);
    w->allocs.len = (size_t)(p - w->allocs.p);
    w->allocs_thread = t;
  }
  uint8_t *p = room(&w->allocs, 1 + 10 + extra);
  if (!p) {
    t->wdropped++;
    return NULL;
  }
  *p++ = tag;
  p = mlprof__put_sv(p, (int64_t)(ns - t->mem_ref_ns));
  t->mem_ref_ns = ns;
  return p;
}

static void put_free(mlprof__writer *w, mlprof__thread *t, uint64_t ns,
                     uint64_t addr) {
  uint8_t *q = alloc_record(w, t, MLPROF__ALLOC_FREE, ns, 10);
  if (q) w->allocs.len = (size_t)(mlprof__put_uv(q, addr) - w->allocs.p);
}

static void put_alloc(mlprof__writer *w, mlprof__thread *t,
                      const mlprof__fold_rec *r) {
  uint8_t *q = alloc_record(w, t, MLPROF__ALLOC_ALLOC, r->ns, 50);
  if (q) {
    q = mlprof__put_uv(q, r->size);
    q = mlprof__put_uv(q, r->weight);
    q = mlprof__put_uv(q, r->addr);
    q = mlprof__put_uv(q, r->zone);
    q = mlprof__put_uv(q, r->stack);
    w->allocs.len = (size_t)(q - w->allocs.p);
  }
}

static void put_folded(mlprof__writer *w, mlprof__thread *t,
                       const mlprof__fold_sum *s) {
  uint8_t *q = alloc_record(w, t, MLPROF__ALLOC_FOLDED, s->ns, 70);
  if (q) {
    q = mlprof__put_uv(q, s->zone);
    q = mlprof__put_uv(q, s->stack);
    q = mlprof__put_uv(q, s->count);
    q = mlprof__put_uv(q, s->size);
    q = mlprof__put_uv(q, s->weight);
    q = mlprof__put_uv(q, s->var);
    w->allocs.len = (size_t)(q - w->allocs.p);
  }
}

/* Writes the held records: folded when fold (else f forgets what it
 * followed), each thread's sums after its records. */
static void held_flush(mlprof__writer *w, int fold) {
  const mlprof__fold_sum *sums = NULL;
  size_t nsums = 0, k = 0;
  if (fold)
    mlprof__fold_interval(
        w->fold, w->held, w->nheld, mlprof__timebase_ns(&w->tb, w->drain_end),
        mlprof__timebase_ns(&w->tb, w->drain_begin), &sums, &nsums);
  else
    mlprof__fold_forget(w->fold);
  for (size_t i = 0; i < w->nheld; i++) {
    const mlprof__fold_rec *r = &w->held[i];
    mlprof__thread *t = r->thread;
    if (!r->folded && r->size)
      put_alloc(w, t, r);
    else if (!r->folded)
      put_free(w, t, r->ns, r->addr);
    if (i + 1 == w->nheld || w->held[i + 1].thread != t)
      for (; k < nsums && sums[k].run <= i; k++) put_folded(w, t, &sums[k]);
  }
  allocs_flush(w);
  w->nheld = 0;
}

/* Holds an allocation record for folding; 0 when it cannot be (too many:
 * then those held are written as they are, and so is the rest of this
 * flush's). */
static int hold(mlprof__writer *w, const mlprof__fold_rec *r) {
  if (w->nheld >= MAX_HELD_ALLOCS ||
      mlprof__grow(&w->held, &w->held_cap, w->nheld + 1, sizeof *w->held)) {
    held_flush(w, 0);
    w->folding = 0;
    return 0;
  }
  w->held[w->nheld++] = *r;
  return 1;
}

/* An allocation or a free (MLPROF__EV_MEM), attributed to the innermost
 * zone open on t when it was made. */
static unsigned on_mem(mlprof__writer *w, mlprof__thread *t,
                       const mlprof__ev *e, uint64_t p, uint64_t ns) {
  mlprof__fold_rec r = {.thread = t, .ns = ns};
  if (!w->folding) w->bypass = 1;
  if (p & MLPROF__EV_MEM_FREE) {
    r.addr = p >> 4;
    if (!w->folding || !hold(w, &r)) put_free(w, t, ns, r.addr);
    return 1;
  }
  r.size = p >> 4;
  r.weight = mlprof__mem_weight(r.size);
  r.addr = e[1].ts;
  r.zone = t->depth && !t->lost_depth ? t->frames[t->depth - 1].site_id : 0;
  r.stack = atomic_load_explicit(&e[1].p, memory_order_relaxed);
  if (!w->folding || !hold(w, &r)) put_alloc(w, t, &r);
  return 2;
}

/* Events of t dropped in this session: by t at the memory cap, and by the
 * writer (zones nested too deep, metadata beyond what a zone holds, records
 * memory was short for). */
static uint64_t thread_dropped(const mlprof__thread *t) {
  return atomic_load_explicit(&t->dropped, memory_order_relaxed) -
         t->dropped_base + t->wdropped;
}

/* Starts t's EVENTS payload if it is not the one being built. */
static bytes *events_for(mlprof__writer *w, mlprof__thread *t) {
  if (w->events_thread != t || w->events.len >= EVENTS_CHUNK_BYTES) {
    events_flush(w);
    uint64_t dropped = thread_dropped(t);
    uint8_t *p = room(&w->events, 30);
    if (!p) return NULL;
    p = mlprof__put_uv(p, t->tid);
    p = mlprof__put_uv(p, dropped);
    p = mlprof__put_uv(p, t->ref_ns);
    t->dropped_reported = dropped;
    w->events.len = (size_t)(p - w->events.p);
    w->events_thread = t;
  }
  return &w->events;
}

/* Appends a record: tag, name id, time as a delta (when has_time). A record
 * memory is short for is counted as dropped (the caller's commit then does
 * nothing). */
static uint8_t *record(mlprof__writer *w, mlprof__thread *t, uint8_t tag,
                       uint32_t name, int has_time, uint64_t ns, size_t extra) {
  bytes *b = events_for(w, t);
  uint8_t *p = b ? room(b, 1 + 10 + 10 + extra) : NULL;
  if (!p) {
    t->wdropped++;
    return NULL;
  }
  /* An event is a span, counter, units, step or open zone; what a span
   * carries is part of it. */
  if (tag != MLPROF__REC_SPAN_META && tag != MLPROF__REC_SPAN_UNITS)
    w->events_n++;
  *p++ = tag;
  if (name) p = mlprof__put_uv(p, name);
  if (has_time) {
    p = mlprof__put_sv(p, (int64_t)(ns - t->ref_ns));
    t->ref_ns = ns;
  }
  return p;
}

static void commit(mlprof__writer *w, uint8_t *end) {
  if (end) w->events.len = (size_t)(end - w->events.p);
}

static void emit_span(mlprof__writer *w, mlprof__thread *t,
                      const mlprof__frame *f, uint32_t depth, uint64_t end_ns) {
  uint64_t dur = end_ns > f->begin ? end_ns - f->begin : 0;
  uint8_t *p = record(w, t, MLPROF__REC_SPAN, f->site_id, 0, 0, 30);
  if (!p) return;
  p = mlprof__put_uv(p, depth);
  p = mlprof__put_sv(p, (int64_t)(f->begin - t->ref_ns));
  t->ref_ns = f->begin;
  p = mlprof__put_uv(p, dur);
  commit(w, p);
  for (unsigned i = 0; i < f->nmeta; i++) {
    p = record(w, t, MLPROF__REC_SPAN_META, f->meta[i][0], 0, 0, 10);
    if (p) commit(w, mlprof__put_uv(p, f->meta[i][1]));
  }
  for (unsigned i = 0; i < f->nunits; i++) {
    p = record(w, t, MLPROF__REC_SPAN_UNITS, (uint32_t)f->units[i][0], 0, 0,
               10);
    if (p) commit(w, mlprof__put_uv(p, f->units[i][1]));
  }
}

static void on_units(mlprof__writer *w, mlprof__thread *t, uint32_t id,
                     uint64_t ns, uint64_t n) {
  if (t->depth && !t->lost_depth) {
    mlprof__frame *f = &t->frames[t->depth - 1];
    for (unsigned i = 0; i < f->nunits; i++)
      if (f->units[i][0] == id) {
        f->units[i][1] += n;
        return;
      }
    if (f->nunits < MLPROF__META_PER_ZONE) {
      f->units[f->nunits][0] = id;
      f->units[f->nunits++][1] = n;
      return;
    }
  }
  uint8_t *p = record(w, t, MLPROF__REC_UNITS, id, 1, ns, 10);
  if (p) commit(w, mlprof__put_uv(p, n));
}

/* Decodes one published event. Returns the slots it used. */
static unsigned on_event(mlprof__writer *w, mlprof__thread *t,
                         const mlprof__ev *e, uint64_t p) {
  unsigned kind = MLPROF__EV_KIND(p);
  const mlprof_site *site = MLPROF__EV_SITE(p);
  uint64_t ns = mlprof__timebase_ns(&w->tb, e->ts);
  switch (kind) {
    case MLPROF__EV_BEGIN:
      if (t->depth >= MLPROF__MAX_DEPTH || t->lost_depth) {
        t->lost_depth++;
        t->wdropped++;
      } else {
        mlprof__frame *f = &t->frames[t->depth++];
        f->begin = ns;
        f->site_id = name_id(w, site, MLPROF__NAME_ZONE);
        f->nmeta = f->nunits = 0;
      }
      return 1;
    case MLPROF__EV_END:
      if (t->lost_depth) {
        t->lost_depth--;
      } else if (!t->depth) {
        t->unmatched++;
      } else {
        mlprof__frame *f = &t->frames[--t->depth];
        if (f->site_id)
          emit_span(w, t, f, t->depth, ns);
        else
          t->wdropped++; /* no memory for its name */
      }
      return 1;
    case MLPROF__EV_GAUGE: {
      uint32_t id = name_id(w, site, MLPROF__NAME_GAUGE);
      uint8_t *q = id ? record(w, t, MLPROF__REC_GAUGE, id, 1, ns, 8) : NULL;
      if (!id) t->wdropped++;
      if (q) {
        memcpy(q, &e[1].ts, 8); /* the double's bits, little-endian */
        commit(w, q + 8);
      }
      return 2;
    }
    case MLPROF__EV_UNITS: {
      uint32_t id = name_id(w, site, MLPROF__NAME_UNITS);
      if (id)
        on_units(w, t, id, ns, e[1].ts);
      else
        t->wdropped++;
      return 2;
    }
    case MLPROF__EV_META: {
      uint32_t k = name_id(w, site, MLPROF__NAME_STRING);
      uint32_t v = name_id(w, (const mlprof_site *)(uintptr_t)e[1].ts,
                           MLPROF__NAME_STRING);
      if (t->depth && !t->lost_depth) { /* else its zone was dropped */
        mlprof__frame *f = &t->frames[t->depth - 1];
        if (k && v && f->nmeta < MLPROF__META_PER_ZONE) {
          f->meta[f->nmeta][0] = k;
          f->meta[f->nmeta++][1] = v;
        } else {
          t->wdropped++;
        }
      }
      return 2;
    }
    case MLPROF__EV_STEP:
      commit(w, record(w, t, MLPROF__REC_STEP, 0, 1, ns, 0));
      return 1;
    case MLPROF__EV_STEP_END:
      commit(w, record(w, t, MLPROF__REC_STEP_END, 0, 1, ns, 0));
      return 1;
    case MLPROF__EV_MEM:
      return on_mem(w, t, e, p, ns);
    default:
      return 1;
  }
}

/* Reads everything t has published since the last flush. Returns 1 when t
 * has exited and all it recorded was read. */
static int drain(mlprof__writer *w, mlprof__thread *t) {
  int exited = atomic_load_explicit(&t->exited, memory_order_acquire);
  mlprof__buf *b = atomic_load_explicit(&t->head, memory_order_acquire);
  while (b) {
    /* `next` first: once it is set, every slot of b is published. */
    mlprof__buf *nb = atomic_load_explicit(&b->next, memory_order_acquire);
    while (t->wpos < MLPROF__BUF_SLOTS) {
      const mlprof__ev *e = &b->ev[t->wpos];
      uint64_t p = atomic_load_explicit(&e->p, memory_order_acquire);
      if (!p) break;
      t->wpos += on_event(w, t, e, p);
    }
    if (!nb) break;
    atomic_store_explicit(&t->head, nb, memory_order_relaxed);
    mlprof__buf_recycle(b);
    b = nb;
    t->wpos = 0;
  }
  /* Drops since the header of t's latest chunk: a new chunk carries them
   * (the count is in the header, written when a chunk starts). */
  if (thread_dropped(t) != t->dropped_reported) {
    if (w->events_thread == t) events_flush(w);
    events_for(w, t);
  }
  return exited;
}

/* ---- samples ------------------------------------------------------------ */

static void writer_rows(void *ctx, uint64_t t_raw, const mlprof__row *rows,
                        int n) {
  mlprof__writer *w = ctx;
  pthread_mutex_lock(&w->pending_lock);
  for (int i = 0; i < n; i++) {
    if (w->nrows == MAX_PENDING_ROWS ||
        mlprof__grow(&w->rows, &w->rows_cap, w->nrows + 1, sizeof *w->rows))
      break;
    const mlprof__row *r = &rows[i];
    pending_row *p = &w->rows[w->nrows];
    p->raw = t_raw;
    p->subject = r->subject;
    p->id = r->id;
    p->label =
        r->label ? mlprof__intern(MLPROF__NAME_STRING, 0, r->label) : NULL;
    p->n = 0;
    for (int k = 0; k < r->n && k < MLPROF__ROW_MEASURES; k++) {
      const mlprof__measure *m = &r->m[k];
      const mlprof_site *name =
          mlprof__intern(MLPROF__NAME_MEASURE, 0, m->name);
      const mlprof_site *reason =
          m->absent ? mlprof__intern(MLPROF__NAME_STRING, 0, m->absent) : NULL;
      if (!name || (m->absent && !reason)) continue;
      p->m[p->n].name = name;
      p->m[p->n].reason = reason;
      p->m[p->n++].value = m->value;
    }
    w->nrows++;
  }
  pthread_mutex_unlock(&w->pending_lock);
}

static void writer_source(void *ctx, const char *name, int available,
                          const char *reason) {
  mlprof__writer *w = ctx;
  pthread_mutex_lock(&w->pending_lock);
  put_str(&w->sources, name);
  uint8_t *p = room(&w->sources, 1);
  if (p) {
    *p = available ? 1 : 0;
    w->sources.len++;
  }
  put_str(&w->sources, reason ? reason : "");
  w->nsources++;
  pthread_mutex_unlock(&w->pending_lock);
}

static uint64_t writer_now(void) { return mlprof__now(); }

void mlprof__writer_sink(mlprof__writer *w, mlprof__sample_sink *sink) {
  *sink = (mlprof__sample_sink){.ctx = w,
                                .now = writer_now,
                                .rows = writer_rows,
                                .source = writer_source};
}

/* Writes the queued source statuses and sample rows. */
static void samples_flush(mlprof__writer *w) {
  pthread_mutex_lock(&w->pending_lock);
  pending_row *rows = w->rows;
  size_t nrows = w->nrows;
  bytes src = w->sources;
  uint32_t nsrc = w->nsources;
  w->rows = NULL;
  w->nrows = w->rows_cap = 0;
  w->sources = (bytes){0};
  w->nsources = 0;
  pthread_mutex_unlock(&w->pending_lock);

  if (nsrc) {
    bytes b = {0};
    put_uv(&b, nsrc);
    if (b.p && reserve(&b, src.len) == 0) {
      memcpy(b.p + b.len, src.p, src.len);
      b.len += src.len;
      put_chunk(w, MLPROF__CHUNK_SOURCES, b.p, b.len, 0);
    }
    free(b.p);
  }
  free(src.p);

  bytes b = {0};
  uint64_t ref = 0;
  put_uv(&b, ref);
  for (size_t i = 0; i < nrows; i++) {
    const pending_row *r = &rows[i];
    uint64_t ns = mlprof__timebase_ns(&w->tb, r->raw);
    uint8_t *p = room(&b, 1 + 30 + (size_t)r->n * 20);
    if (!p) break;
    *p++ = r->subject;
    p = mlprof__put_uv(p, r->id);
    p = mlprof__put_uv(
        p, r->label ? name_id(w, r->label, MLPROF__NAME_STRING) : 0);
    p = mlprof__put_sv(p, (int64_t)(ns - ref));
    ref = ns;
    p = mlprof__put_uv(p, (uint64_t)r->n);
    for (int k = 0; k < r->n; k++) {
      p = mlprof__put_uv(p, name_id(w, r->m[k].name, MLPROF__NAME_MEASURE));
      if (r->m[k].reason) {
        *p++ = MLPROF__MEASURE_ABSENT;
        p = mlprof__put_uv(p, name_id(w, r->m[k].reason, MLPROF__NAME_STRING));
      } else {
        *p++ = MLPROF__MEASURE_VALID;
        memcpy(p, &r->m[k].value, 8);
        p += 8;
      }
    }
    b.len = (size_t)(p - b.p);
  }
  if (nrows && b.p) {
    names_flush(w);
    put_chunk(w, MLPROF__CHUNK_SAMPLES, b.p, b.len, 0);
  }
  free(b.p);
  free(rows);
}

static void put_thread(mlprof__writer *w, uint32_t tid, const char *name) {
  bytes b = {0};
  put_uv(&b, tid);
  put_str(&b, name);
  if (b.p) put_chunk(w, MLPROF__CHUNK_THREAD, b.p, b.len, 0);
  free(b.p);
}

static void emit_thread_names(mlprof__writer *w) {
  for (mlprof__thread *t = mlprof__threads_head(); t; t = t->next) {
    if (!atomic_exchange_explicit(&t->name_dirty, 0, memory_order_acquire))
      continue;
    char name[sizeof t->name];
    pthread_mutex_lock(&mlprof__meta_lock);
    memcpy(name, t->name, sizeof name);
    pthread_mutex_unlock(&mlprof__meta_lock);
    put_thread(w, t->tid, name);
  }
}

/* ---- tracks: spans measured elsewhere ----------------------------------- */

/* Before nest() sets depths, depth holds the span's place in the call. */
static int by_begin(const void *a, const void *b) {
  const ext_span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end > y->end ? -1 : 1; /* enclosing first */
  return x->depth < y->depth ? -1 : x->depth > y->depth; /* as given */
}

static int by_end(const void *a, const void *b) {
  const ext_span *x = a, *y = b;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  if (x->depth != y->depth)
    return x->depth > y->depth ? -1 : 1; /* children first */
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Works out each span's depth from the times (a span that does not fit in
 * the one open before it closes that one; of two with the same times, the
 * one given first encloses the other), then puts the spans in the order
 * the format wants: by end, children before their parent. */
static int nest(ext_span *s, size_t n) {
  uint64_t *ends = malloc((n ? n : 1) * sizeof *ends);
  if (!ends) return MLPROF_ENOMEM;
  for (size_t i = 0; i < n; i++) s[i].depth = (uint32_t)i;
  mlprof__sort(s, n, sizeof *s, by_begin);
  size_t top = 0;
  for (size_t i = 0; i < n; i++) {
    while (top && (ends[top - 1] <= s[i].begin || ends[top - 1] < s[i].end))
      top--;
    s[i].depth = (uint32_t)(top < MLPROF__MAX_DEPTH ? top : MLPROF__MAX_DEPTH);
    ends[top++] = s[i].end;
  }
  free(ends);
  mlprof__sort(s, n, sizeof *s, by_end);
  return 0;
}

/* The track named name, made when new; pending_lock held. */
static track *track_of(mlprof__writer *w, const char *name) {
  char key[sizeof((track *)0)->name];
  snprintf(key, sizeof key, "%s", name);
  for (uint32_t i = 0; i < w->ntracks; i++)
    if (strcmp(w->tracks[i]->name, key) == 0) return w->tracks[i];
  if (w->ntracks == MAX_TRACKS) return NULL;
  track *tr = calloc(1, sizeof *tr);
  if (!tr) return NULL;
  memcpy(tr->name, key, sizeof key);
  tr->stream.tid = MLPROF__TRACK_TID_BASE + w->ntracks + 1;
  return w->tracks[w->ntracks++] = tr;
}

/* With pending_lock held: how many of want more records fit in the queue
 * under max, at most want. When not all do, the writer first takes what is
 * queued (the lock let go meanwhile) rather than the cap be exceeded. */
static size_t queue_room(mlprof__writer *w, size_t max, size_t want) {
  for (int flushed = 0;; flushed = 1) {
    size_t room = w->queued < max ? max - w->queued : 0;
    if (room >= want || flushed) return room < want ? room : want;
    pthread_mutex_unlock(&w->pending_lock);
    mlprof__writer_flush(w);
    pthread_mutex_lock(&w->pending_lock);
  }
}

int mlprof__writer_spans(mlprof__writer *w, const char *name,
                         const mlprof_span *spans, size_t n) {
  ext_span *s = malloc((n ? n : 1) * sizeof *s);
  if (!s) return MLPROF_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    const mlprof_span *in = &spans[i];
    s[i] = (ext_span){in->site, NULL, in->begin_ns, in->end_ns, in->units, 0};
    if (in->unit && in->units)
      s[i].unit = mlprof__intern(MLPROF__NAME_UNITS, 0, in->unit);
  }
  if (nest(s, n) != 0) {
    free(s);
    return MLPROF_ENOMEM;
  }
  size_t max = mlprof__pool_cap_bytes() / sizeof *s, done = 0, k;
  pthread_mutex_lock(&w->pending_lock);
  track *tr = track_of(w, name);
  while (tr && done < n && (k = queue_room(w, max, n - done))) {
    if (mlprof__grow(&tr->spans, &tr->cap, tr->n + k, sizeof *tr->spans)) break;
    memcpy(tr->spans + tr->n, s + done, k * sizeof *s);
    tr->n += k;
    w->queued += k;
    done += k;
  }
  if (done < n) {
    if (tr) atomic_fetch_add(&tr->stream.dropped, n - done);
    atomic_fetch_add(&w->track_dropped, n - done);
  }
  pthread_mutex_unlock(&w->pending_lock);
  free(s);
  return done < n ? MLPROF_ENOMEM : 0;
}

int mlprof__writer_allocs(mlprof__writer *w, const char *name,
                          const mlprof_site *zone, const mlprof__ext_alloc *a,
                          size_t n) {
  size_t max = mlprof__pool_cap_bytes() / sizeof(ext_alloc), done = 0, k;
  pthread_mutex_lock(&w->pending_lock);
  track *tr = track_of(w, name);
  while (tr && done < n && (k = queue_room(w, max, n - done))) {
    if (mlprof__grow(&tr->allocs, &tr->acap, tr->nallocs + k,
                     sizeof *tr->allocs))
      break;
    for (size_t i = 0; i < k; i++)
      tr->allocs[tr->nallocs + i] = (ext_alloc){a[done + i], zone};
    tr->nallocs += k;
    w->queued += k;
    done += k;
  }
  if (done < n) {
    if (tr) atomic_fetch_add(&tr->stream.dropped, n - done);
    atomic_fetch_add(&w->track_dropped, n - done);
  }
  pthread_mutex_unlock(&w->pending_lock);
  return done < n ? MLPROF_ENOMEM : 0;
}

/* Writes a track's queued allocations as its ALLOCS records, in order. */
static void track_allocs_flush(mlprof__writer *w, track *tr, ext_alloc *a,
                               size_t n) {
  uint64_t a0 = w->tb.a0.mono;
  for (size_t k = 0; k < n; k++) {
    const mlprof__ext_alloc *e = &a[k].a;
    uint64_t ns = e->t > a0 ? e->t - a0 : 0;
    if (!e->size) {
      put_free(w, &tr->stream, ns, e->addr);
      continue;
    }
    /* Every one recorded: its weight is its size. */
    mlprof__fold_rec r = {.ns = ns,
                          .addr = e->addr,
                          .size = e->size,
                          .weight = e->size,
                          .stack = e->stack,
                          .zone = name_id(w, a[k].zone, MLPROF__NAME_ZONE)};
    put_alloc(w, &tr->stream, &r);
  }
  allocs_flush(w);
}

/* Writes the queued spans and allocations of every track (and a new
 * track's name). */
static void tracks_flush(mlprof__writer *w) {
  ext_span *spans[MAX_TRACKS];
  size_t counts[MAX_TRACKS], nallocs[MAX_TRACKS];
  ext_alloc *allocs[MAX_TRACKS];
  pthread_mutex_lock(&w->pending_lock);
  uint32_t ntracks = w->ntracks;
  for (uint32_t i = 0; i < ntracks; i++) {
    track *tr = w->tracks[i];
    spans[i] = tr->spans;
    counts[i] = tr->n;
    tr->spans = NULL;
    tr->n = tr->cap = 0;
    allocs[i] = tr->allocs;
    nallocs[i] = tr->nallocs;
    tr->allocs = NULL;
    tr->nallocs = tr->acap = 0;
  }
  w->queued = 0;
  pthread_mutex_unlock(&w->pending_lock);
  for (uint32_t i = 0; i < ntracks; i++) {
    track *tr = w->tracks[i];
    if (!tr->announced) {
      put_thread(w, tr->stream.tid, tr->name);
      tr->announced = 1;
    }
    for (size_t k = 0; k < counts[i]; k++) {
      const ext_span *e = &spans[i][k];
      uint64_t a0 = w->tb.a0.mono;
      mlprof__frame f = {.begin = e->begin > a0 ? e->begin - a0 : 0,
                         .site_id = name_id(w, e->site, MLPROF__NAME_ZONE)};
      uint32_t u = e->unit ? name_id(w, e->unit, MLPROF__NAME_UNITS) : 0;
      if (u) {
        f.units[0][0] = u;
        f.units[0][1] = e->units;
        f.nunits = 1;
      }
      if (f.site_id)
        emit_span(w, &tr->stream, &f, e->depth, e->end > a0 ? e->end - a0 : 0);
    }
    if (thread_dropped(&tr->stream) != tr->stream.dropped_reported)
      events_for(w, &tr->stream); /* a chunk header carries the drops */
    events_flush(w);
    free(spans[i]);
    track_allocs_flush(w, tr, allocs[i], nallocs[i]);
    free(allocs[i]);
  }
}

/* Records the zones t has open: at the end of the file, or when t exited
 * without ending them. */
static void emit_open(mlprof__writer *w, mlprof__thread *t) {
  for (uint32_t d = 0; d < t->depth; d++) {
    mlprof__frame *f = &t->frames[d];
    uint8_t *p = f->site_id
                     ? record(w, t, MLPROF__REC_OPEN, f->site_id, 0, 0, 20)
                     : NULL;
    if (!p) continue;
    p = mlprof__put_uv(p, d);
    p = mlprof__put_sv(p, (int64_t)(f->begin - t->ref_ns));
    t->ref_ns = f->begin;
    commit(w, p);
  }
  events_flush(w);
}

static void put_lines(void *w, const uint8_t *payload, size_t len) {
  put_chunk(w, MLPROF__CHUNK_LINES, payload, len, 0);
}

static uint64_t raw_to_ns(void *w, uint64_t raw) {
  return mlprof__timebase_ns(&((mlprof__writer *)w)->tb, raw);
}

/* The stack definitions and samples taken since the last flush, before the
 * events: a record that names a stack finds it defined (docs/format.md). */
static void stacks_flush(mlprof__writer *w) {
  for (int more = 1; more;) {
    size_t before = w->stacks.len;
    mlprof__stacks_take(&w->stacks.p, &w->stacks.len, &w->stacks.cap, raw_to_ns,
                        w);
    more = w->stacks.len > before && w->stacks.len >= (1u << 20);
    if (w->stacks.len)
      put_chunk(w, MLPROF__CHUNK_STACKS, w->stacks.p, w->stacks.len, 0);
    w->stacks.len = 0;
  }
}

/* An exited thread whose records are all written. */
static void thread_gone(mlprof__writer *w, mlprof__thread *t) {
  /* Zones it left open will never end: record them as open. */
  emit_open(w, t);
  w->unmatched_gone += t->unmatched;
  w->wdropped_gone += t->wdropped;
  mlprof__thread_free(t);
}

static void flush_all(mlprof__writer *w) {
  mlprof__timebase_calibrate(&w->tb, mlprof__clock_anchor());
  emit_thread_names(w);
  uint8_t *meta = NULL;
  size_t mlen = mlprof__meta_take(&meta);
  if (mlen) put_chunk(w, MLPROF__CHUNK_META, meta, mlen, 0);
  free(meta);
  mlprof__lines_take(put_lines, w);
  stacks_flush(w);
  samples_flush(w);
  tracks_flush(w);
  /* Sampled: the allocation records wait until every thread is drained, so
   * that a free finds its allocation whichever thread made it. */
  if (!w->fold_made) {
    w->fold_made = 1;
    if (!w->fold_off) w->fold = mlprof__fold_new();
  }
  w->folding = w->fold && atomic_load(&mlprof__mem_mode) == MLPROF__MEM_SAMPLED;
  w->ngone = 0;
  w->drain_begin = mlprof__now();
  mlprof__thread *t = mlprof__threads_head();
  while (t) {
    mlprof__thread *next = t->next;
    int gone = drain(w, t);
    events_flush(w);
    allocs_flush(w);
    /* A thread whose records are held is freed after them (else at the
     * next flush, which finds it exited again). */
    if (gone && !w->folding)
      thread_gone(w, t);
    else if (gone && !mlprof__grow(&w->gone, &w->gone_cap, w->ngone + 1,
                                   sizeof *w->gone))
      w->gone[w->ngone++] = t;
    t = next;
  }
  uint64_t drained = mlprof__now();
  if (w->folding) held_flush(w, 1);
  w->drain_end = drained;
  /* Every allocation recorded: what the folder followed no longer holds. */
  if (w->bypass && w->fold) mlprof__fold_forget(w->fold);
  w->bypass = 0;
  for (size_t i = 0; i < w->ngone; i++) thread_gone(w, w->gone[i]);
  names_flush(w);
  out_flush(w);
}

/* Ends the file: zones still open, then the END chunk, whose count of
 * dropped events includes those the writer dropped or could not write. */
static void finish(mlprof__writer *w) {
  uint64_t unmatched = w->unmatched_gone, wdropped = w->wdropped_gone;
  for (mlprof__thread *t = mlprof__threads_head(); t; t = t->next) {
    emit_open(w, t);
    unmatched += t->unmatched;
    wdropped += t->wdropped;
  }
  pthread_mutex_lock(&w->pending_lock);
  for (uint32_t i = 0; i < w->ntracks; i++)
    wdropped += w->tracks[i]->stream.wdropped;
  pthread_mutex_unlock(&w->pending_lock);
  out_flush(w);
  uint8_t end[32], *p = end;
  p = mlprof__put_uv(p, mlprof__timebase_ns(&w->tb, mlprof__now()));
  p = mlprof__put_uv(p, mlprof_dropped() + atomic_load(&w->track_dropped) +
                            wdropped + w->lost);
  p = mlprof__put_uv(p, unmatched);
  p = mlprof__put_uv(p, (uint64_t)atomic_load(&w->end_how));
  p = mlprof__put_uv(p, (uint64_t)atomic_load(&w->end_status));
  put_chunk(w, MLPROF__CHUNK_END, end, (size_t)(p - end), 0);
  /* After a failed write the END chunk still gets one try, as cutting the
   * file back to its last whole chunk may have made room for it. */
  int failed = w->failed;
  w->failed = w->fd < 0;
  out_flush(w);
  w->failed |= failed;
  w->finished = 1;
}

/* ---- thread ------------------------------------------------------------- */

static int writer_create(mlprof__writer *w);

static void *writer_main(void *arg) {
  mlprof__writer *w = arg;
  /* Named by itself: naming another thread opens a /proc file in the
   * caller's descriptor table. */
  pthread_setname_np(pthread_self(), "mlprof-writer");
  mlprof__quiet = 1;
  w->private_fds = mlprof__fd_private() == 0;
  w->open_rc = writer_create(w);
  w->open_errno = errno;
  sem_post(&w->ready);
  if (w->open_rc != 0) return NULL;
  while (!atomic_load(&w->stop)) {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += (long)(w->flush_ms % 1000) * 1000000L;
    deadline.tv_sec += w->flush_ms / 1000 + deadline.tv_nsec / 1000000000L;
    deadline.tv_nsec %= 1000000000L;
    while (sem_clockwait(&wake, CLOCK_MONOTONIC, &deadline) != 0 &&
           errno == EINTR) {
    }
    if (atomic_load(&w->stop)) break;
    uint64_t r = atomic_load(&w->req);
    flush_all(w);
    if (atomic_load(&w->final_req) && !w->finished) finish(w);
    pthread_mutex_lock(&w->done_lock);
    atomic_store(&w->done, r);
    pthread_cond_broadcast(&w->done_cond);
    pthread_mutex_unlock(&w->done_lock);
  }
  /* The end (writer_close): the last flush, the END chunk and the close,
   * here, where the descriptor is. */
  flush_all(w);
  if (!w->finished) finish(w);
  if (w->fd >= 0 && !w->private_fds && !same_file(w, w->fd))
    w->fd = -1; /* the program's now */
  if (w->fd >= 0 && close(w->fd) != 0) w->failed = 1;
  w->fd = -1;
  return NULL;
}

/* ---- header ------------------------------------------------------------- */

static int64_t env_int(const char *const *names) {
  for (; *names; names++) {
    const char *v = mlprof__env(*names);
    char *end;
    if (v && *v) {
      long long n = strtoll(v, &end, 10);
      if (!*end && n >= 0) return n;
    }
  }
  return -1;
}

static void put_header(mlprof__writer *w) {
  static const char *const rank_vars[] = {MLPROF__RANK_VARS, NULL};
  static const char *const world_vars[] = {MLPROF__WORLD_VARS, NULL};
  static const char *const local_vars[] = {MLPROF__LOCAL_RANK_VARS, NULL};
  static const char *const job_vars[] = {MLPROF__JOB_VARS, NULL};
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  uint64_t mono_now = mlprof__mono_ns();
  uint64_t wall = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec -
                  (mono_now - w->tb.a0.mono);
  char host[256] = "", exe[4096] = "";
  gethostname(host, sizeof host - 1);
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;

  bytes b = {0};
  put_uv(&b, (uint64_t)getpid());
  put_uv(&b, (uint64_t)getppid());
  put_uv(&b, wall);
  put_uv(&b, w->tb.a0.mono);
  uint8_t *p = room(&b, 20);
  if (p) {
    p = mlprof__put_sv(p, env_int(rank_vars));
    b.len = (size_t)(mlprof__put_sv(p, env_int(world_vars)) - b.p);
  }
  put_str(&b, host);
  put_str(&b, exe);
  /* argv from /proc/self/cmdline: NUL-separated */
  char args[8192];
  size_t alen = 0;
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t k = read(fd, args, sizeof args - 1);
    alen = k > 0 ? (size_t)k : 0;
    close(fd);
  }
  args[alen] = 0;
  uint32_t argc = 0;
  for (size_t i = 0; i < alen; i += strlen(args + i) + 1) argc++;
  put_uv(&b, argc);
  for (size_t i = 0; i < alen; i += strlen(args + i) + 1) put_str(&b, args + i);
  put_str(&b, mlprof__clock_name());
  put_uv(&b, w->flush_ms);
  put_uv(&b, mlprof__exec_seq);
  if ((p = room(&b, 10)))
    b.len = (size_t)(mlprof__put_sv(p, env_int(local_vars)) - b.p);
  const char *job = NULL;
  for (const char *const *v = job_vars; *v && !job; v++)
    if ((job = mlprof__env(*v)) && !*job) job = NULL;
  put_str(&b, job ? job : "");
  if (b.p) put_chunk(w, MLPROF__CHUNK_HEADER, b.p, b.len, 0);
  free(b.p);
}

/* ---- lifecycle ---------------------------------------------------------- */

/* Creates path + leaf below dirfd exclusively, never through a symbolic
 * link: a planted file or link at a predictable name must not make a
 * program run as root overwrite a file. When the name is taken, the first
 * free one of STEM.1.mlprof ... STEM.99.mlprof, written back into path. */
static int create_file(int dirfd, char *path, size_t cap, size_t leaf) {
  size_t len = strlen(path), stem = len;
  if (len > 7 && strcmp(path + len - 7, ".mlprof") == 0) stem -= 7;
  char given[4096];
  snprintf(given, sizeof given, "%s", path);
  for (int i = 0; i < 100; i++) {
    if (i && snprintf(path + stem, cap - stem, ".%d%s", i, given + stem) >=
                 (int)(cap - stem))
      break;
    int fd = openat(
        dirfd, path + leaf,
        O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 && i)
      mlprof__warn_once(NULL, "%s exists: writing %s", given, path);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

/* The directory part of want (leaf > 0), opened without following a
 * symbolic link; AT_FDCWD for a file path. */
static int open_dir(mlprof__writer *w) {
  if (!w->leaf) return AT_FDCWD;
  char dir[4096];
  size_t n = w->leaf > 1 ? w->leaf - 1 : 1; /* "a/b/" -> "a/b", "/" stays */
  if (n >= sizeof dir) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(dir, w->want, n);
  dir[n] = 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0 && lstat(dir, &st) == 0 && S_ISLNK(st.st_mode)) {
    mlprof__warn_once(NULL,
                      "%s is a symbolic link: profiles are never written "
                      "through one; give the directory's real path",
                      dir);
    errno = ELOOP;
  }
  return fd;
}

/* writer_create's way out once the file is open: closed, errno kept;
 * returns rc. */
static int create_failed(mlprof__writer *w, int rc) {
  int saved = errno;
  close(w->fd);
  w->fd = -1;
  errno = saved;
  return rc;
}

/* In the writer thread: creates the file and writes its header. 0, or an
 * MLPROF_ code with errno set. */
static int writer_create(mlprof__writer *w) {
  int dirfd = open_dir(w);
  if (dirfd == -1) return MLPROF_EIO;
  w->fd = create_file(dirfd, w->want, w->cap, w->leaf);
  int saved = errno;
  if (dirfd >= 0) close(dirfd);
  errno = saved;
  struct stat st;
  if (w->fd < 0) return MLPROF_EIO;
  if (fstat(w->fd, &st) != 0 || !(w->path = strdup(w->want)))
    return create_failed(w, w->path ? MLPROF_EIO : MLPROF_ENOMEM);
  w->dev = st.st_dev;
  w->ino = st.st_ino;
  /* Here, not in mlprof__writer_open: every block of the writer's is its
   * own thread's, never one of the opening thread's arena (the main one, in
   * glibc), so that a child made without fork handlers never finds that
   * arena's lock held by the writer (the program's own threads never take
   * it: tests/e2e/test_memory.py). */
  uint8_t *fh = room(&w->out, MLPROF__FILE_HEADER_SIZE);
  if (!fh) {
    errno = ENOMEM;
    return create_failed(w, MLPROF_ENOMEM);
  }
  memset(fh, 0, MLPROF__FILE_HEADER_SIZE);
  memcpy(fh, MLPROF__FILE_MAGIC, 8);
  mlprof__put_u16(fh + 8, MLPROF__FORMAT_MAJOR);
  mlprof__put_u16(fh + 10, MLPROF__FORMAT_MINOR);
  w->out.len = MLPROF__FILE_HEADER_SIZE;
  put_header(w);
  out_flush(w);
  return w->failed ? create_failed(w, MLPROF_EIO) : 0;
}

int mlprof__writer_open(mlprof__writer **out, char *path, size_t cap,
                        size_t leaf, uint32_t flush_ms) {
  mlprof__writer *w = calloc(1, sizeof *w);
  if (!w) return MLPROF_ENOMEM;
  w->fd = -1;
  w->flush_ms = flush_ms;
  w->want = path;
  w->cap = cap;
  w->leaf = leaf;
  const char *fold = mlprof__env(MLPROF__ENV_MEMORY_FOLD);
  w->fold_off = fold && !strcmp(fold, "0");
  pthread_once(&wake_once, wake_init);
  sem_init(&w->ready, 0, 0);
  pthread_mutex_init(&w->pending_lock, NULL);
  pthread_mutex_init(&w->done_lock, NULL);
  pthread_cond_init(&w->done_cond, NULL);
  mlprof__timebase_init(&w->tb, mlprof__clock_anchor());

  /* Threads that recorded under an earlier session start afresh here. */
  mlprof__dropped_reset();
  for (mlprof__thread *t = mlprof__threads_head(); t; t = t->next) {
    t->depth = t->lost_depth = 0;
    t->ref_ns = t->unmatched = t->dropped_reported = t->wdropped = 0;
    t->dropped_base = atomic_load_explicit(&t->dropped, memory_order_relaxed);
    atomic_store(&t->name_dirty, 1);
  }

  /* The writer never takes the program's signals. */
  int rc = mlprof__thread_start(&w->thread, writer_main, w);
  if (rc != 0) {
    mlprof__writer_abandon(w);
    return MLPROF_ETHREAD;
  }
  while (sem_wait(&w->ready) != 0 && errno == EINTR) {
  }
  if (w->open_rc != 0) {
    pthread_join(w->thread, NULL);
    rc = w->open_rc;
    int saved = w->open_errno; /* for the caller's message */
    mlprof__writer_abandon(w);
    errno = saved;
    return rc;
  }
  w->want = NULL;
  w->started = 1;
  *out = w;
  return 0;
}

void mlprof__writer_poke(void) {
  pthread_once(&wake_once, wake_init);
  sem_post(&wake);
}

int mlprof__writer_flush(mlprof__writer *w) {
  if (!w->started) return MLPROF_ENOTSTARTED;
  uint64_t my = atomic_fetch_add(&w->req, 1) + 1;
  sem_post(&wake);
  pthread_mutex_lock(&w->done_lock);
  while (atomic_load(&w->done) < my)
    pthread_cond_wait(&w->done_cond, &w->done_lock);
  pthread_mutex_unlock(&w->done_lock);
  return w->failed ? MLPROF_EIO : 0;
}

void mlprof__writer_flush_from_signal(mlprof__writer *w, int how, int status,
                                      int timeout_ms) {
  if (!w || !w->started) return;
  if (how >= 0) {
    atomic_store(&w->end_how, how);
    atomic_store(&w->end_status, status);
    atomic_store(&w->final_req, 1);
  }
  uint64_t my = atomic_fetch_add(&w->req, 1) + 1;
  sem_post(&wake);
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < timeout_ms && atomic_load(&w->done) < my; i++)
    nanosleep(&ms, NULL);
}

int mlprof__writer_resume(mlprof__writer *w) {
  if (!w->started) return MLPROF_ENOTSTARTED;
  /* Once the final flush was served; whatever the writer drains meanwhile
   * is not written (the file was finished), the rest goes on. */
  pthread_mutex_lock(&w->done_lock);
  while (atomic_load(&w->done) < atomic_load(&w->req))
    pthread_cond_wait(&w->done_cond, &w->done_lock);
  atomic_store(&w->final_req, 0);
  atomic_store(&w->end_how, MLPROF__END_SHUTDOWN);
  atomic_store(&w->end_status, 0);
  w->finished = 0;
  pthread_mutex_unlock(&w->done_lock);
  return 0;
}

int mlprof__writer_close(mlprof__writer *w, int how, int status) {
  atomic_store(&w->end_how, how);
  atomic_store(&w->end_status, status);
  if (w->started) {
    atomic_store(&w->stop, 1);
    sem_post(&wake);
    pthread_join(w->thread, NULL); /* it ends the file and closes it */
    w->started = 0;
  }
  int rc = w->failed ? MLPROF_EIO : 0;
  mlprof__writer_abandon(w);
  return rc;
}

void mlprof__writer_abandon(mlprof__writer *w) {
  /* A descriptor of a table of the writer's own is in no other table; in a
   * forked child of a writer that shared the program's table, w->fd is the
   * child's inherited copy, which nothing else uses. */
  if (w->fd >= 0 && !w->private_fds) close(w->fd);
  free(w->ids);
  free(w->names.p);
  free(w->events.p);
  free(w->allocs.p);
  mlprof__fold_free(w->fold);
  free(w->held);
  free(w->gone);
  free(w->stacks.p);
  free(w->out.p);
  free(w->rows);
  free(w->sources.p);
  for (uint32_t i = 0; i < w->ntracks; i++) {
    free(w->tracks[i]->spans);
    free(w->tracks[i]->allocs);
    free(w->tracks[i]);
  }
  free(w->path);
  free(w);
}
