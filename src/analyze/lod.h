/* The span timeline's level-of-detail pyramid, built in one streaming pass
 * over every profile of a job, so that a timeline of any size draws from a
 * bounded number of items at any zoom.
 *
 * A track is one nesting depth of one thread of one process. Level k has
 * the resolution MLPROF__LOD_RES0_NS * 4^k: a span at least that long is
 * kept as it is (an item of count 1); shorter spans of one track starting
 * in the same bucket of that width, with no longer span between them, merge
 * into one summary item (their first begin, last end, summed duration, the
 * zone of the longest). Every span is counted once at every level and each
 * level keeps the summed durations, and a track of duration T holds at most
 * about 3 T / resolution items at a level.
 *
 * Memory is bounded by a cap on the items of all levels: past it, the
 * finest level left is dropped (the coarsest is always kept). Spans nested
 * deeper than MLPROF__LOD_MAX_DEPTH are left out.
 *
 * A span's metadata and units (mlprof_zone_meta, mlprof_units_add) are kept
 * beside the levels, per track, for the span's details; past the same cap,
 * those of later spans are not kept and counted.
 *
 * The levels past the cap are not lost: the builder keeps an index of the
 * chunks of each profile file (the EVENTS chunks with their thread and the
 * time their spans cover, and the NAMES chunks), and mlprof__lod_window
 * builds the finer levels of one time window from those chunks alone, with
 * the same merging, so that a window shows every span there at any profile
 * size. A pyramid read through a filter (filter.h) keeps it, prepared, and
 * a window reads the chunks through it, so that the window holds only what
 * the filter let into the pyramid. */
#ifndef MLPROF_LOD_H
#define MLPROF_LOD_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../model/job.h"
#include "filter.h"

#define MLPROF__LOD_LEVELS 16
#define MLPROF__LOD_RES0_NS 1000ull
#define MLPROF__LOD_MAX_DEPTH 256

typedef struct {
  uint64_t begin, end; /* job ns: first begin and last end of its spans */
  uint64_t busy_ns;    /* their summed durations */
  uint32_t name;       /* index into mlprof__lod.names: the longest's zone */
  uint32_t count;      /* spans; 1: one span as recorded */
} mlprof__lod_item;

typedef struct {
  mlprof__lod_item *items; /* by begin (and end) after finish */
  size_t n, cap;
} mlprof__lod_run;

/* One metadata entry (key = value) or units count of the span [begin, end)
 * of a track. */
typedef struct {
  uint64_t begin, end; /* job ns */
  uint32_t key;        /* index into mlprof__lod.strs: metadata key or unit */
  uint32_t value;      /* index into strs: the value; MLPROF__NONE: units */
  uint64_t n;          /* units: how many */
} mlprof__lod_arg;

typedef struct {
  size_t profile; /* index into the job's profiles */
  uint64_t pid, tid;
  int64_t rank;             /* -1: unknown */
  uint32_t process, thread; /* index into names: process name, thread name */
  uint32_t depth;
  mlprof__lod_run lv[MLPROF__LOD_LEVELS]; /* empty below first */
  mlprof__lod_arg *args; /* by begin after finish, a span's in record order */
  size_t nargs, args_cap;
} mlprof__lod_track;

/* A chunk of a profile file that a window may read again. */
typedef struct {
  uint64_t off;        /* its file offset */
  uint64_t begin, end; /* EVENTS: job ns, the earliest begin and the latest
                          end of its spans kept (begin > end: none) */
  uint32_t len;        /* bytes, its frame included */
  uint32_t tid;        /* EVENTS: its thread */
  int names;           /* 1: a NAMES chunk, 0: EVENTS */
} mlprof__lod_chunk;

/* A profile file as the pyramid read it. */
typedef struct {
  char *path;
  uint64_t dev, ino; /* the file read */
  uint64_t size;     /* up to the end of its last chunk read */
  uint64_t offset_ns;
  mlprof__map ids;           /* file name id -> index into names or strs */
  mlprof__lod_chunk *chunks; /* in file order */
  size_t nchunks, chunks_cap;
} mlprof__lod_file;

typedef struct {
  char **names; /* zone, process and thread names */
  size_t *name_lens;
  size_t nnames;
  mlprof__lod_track *tracks; /* in the order first met */
  size_t ntracks;
  char **strs; /* metadata keys and values, unit names */
  size_t *str_lens;
  size_t nstrs;
  size_t first; /* the finest level kept */
  size_t items; /* items of the levels kept */
  uint64_t spans;
  size_t args;             /* metadata entries and units kept */
  uint64_t args_missed;    /* not kept: past the cap */
  mlprof__lod_file *files; /* per profile of the job, the index */
  size_t nfiles;
  int indexed; /* 1: every profile's chunks are in files */
  /* the filter the profiles were read through (owned), or NULL: none */
  mlprof__filtered *filtered;
  /* A window (mlprof__lod_window): its levels [first, own) are its own,
   * the coarser ones and the names its pyramid's; 0 for a pyramid. */
  size_t own;
  /* internal */
  size_t names_cap, tracks_cap, strs_cap, cap_items, files_cap;
} mlprof__lod;

/* The resolution of level k in ns. */
uint64_t mlprof__lod_res(size_t k);

/* The builder, fed one profile at a time by the analysis driver
 * (analysis.h) as the tree's is: begin (at most max_items items kept; 0:
 * no cap), then per profile profile_begin (fills *v), the read,
 * profile_end; then finish. begin returns NULL when out of memory;
 * profile_end and finish return 0 or MLPROF_ENOMEM. finish and abort free
 * the builder; after a failure or abort *l is empty. Release *l with
 * mlprof__lod_free. */
typedef struct mlprof__lod_builder mlprof__lod_builder;
mlprof__lod_builder *mlprof__lod_begin(mlprof__lod *l, size_t max_items);
int mlprof__lod_profile_begin(mlprof__lod_builder *b,
                              const mlprof__job_profile *p, size_t index,
                              mlprof__visitor *v);
int mlprof__lod_profile_end(mlprof__lod_builder *b);
int mlprof__lod_finish(mlprof__lod_builder *b);
void mlprof__lod_abort(mlprof__lod_builder *b);

void mlprof__lod_free(mlprof__lod *l);

/* Builds into *w the window [t0, t1) (job ns) of the pyramid l at the
 * finer levels l dropped, down to level k: from the chunks of l's files
 * whose spans may make an item there (of track's thread only, when track
 * is not SIZE_MAX), read again and merged as the pyramid merges, so that
 * w's items in [t0, t1) at a level are those a pyramid without a cap holds
 * there, and w's tracks have those spans' metadata and units (those of a
 * span whose records went to a chunk not read are missing). w shares l's
 * names and coarser levels: free it (mlprof__lod_window_free) before l.
 * Only the files l read are opened, by their paths, and only when they are
 * the same files (device, inode, not shorter). Returns 0; 1 when there is
 * nothing to build (k >= l->first, l not indexed) or the chunks to read
 * hold more than max_bytes, and *w is empty; MLPROF_EFORMAT or MLPROF_EIO
 * with a one-line reason in err when a file changed or vanished since l
 * read it; MLPROF_ENOMEM. */
int mlprof__lod_window(const mlprof__lod *l, uint64_t t0, uint64_t t1, size_t k,
                       size_t track, size_t max_bytes, mlprof__lod *w,
                       char *err, size_t errlen);
void mlprof__lod_window_free(mlprof__lod *w);

/* The finest level a window of resolution res ns draws: the finest whose
 * resolution is at most res, 0 when none is. */
size_t mlprof__lod_level(uint64_t res);

/* The index of the first item of r that ends after t (r->n when none). */
size_t mlprof__lod_find(const mlprof__lod_run *r, uint64_t t);

/* The metadata and units of track t's span [begin, end): *n entries from
 * the one returned (*n = 0 when it has none). */
const mlprof__lod_arg *mlprof__lod_args(const mlprof__lod_track *t,
                                        uint64_t begin, uint64_t end,
                                        size_t *n);

#endif
