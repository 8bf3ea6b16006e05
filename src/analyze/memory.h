/* Where memory goes (docs/memory.md): the allocation records of each
 * profile (ALLOCS chunks) replayed in time order, per zone, per allocation
 * site, per step, with the process's peak and the leaks they show.
 *
 * The builder keeps, per profile, one small record per allocation and free
 * read (bounded by what the file holds: a sampled profile holds few) and
 * replays them when the profile ends; the result keeps only the zones, the
 * sites and the steps. */
#ifndef MLPROF_MEMORY_H
#define MLPROF_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "../format/reader.h"

/* Points of a process's live-bytes series at most. */
#define MLPROF__MEM_SERIES 1000
/* Groups of steps a process's per-step figures are kept for at most. */
#define MLPROF__MEM_STEP_GROUPS 50
/* Frames of a site's path at most. */
#define MLPROF__MEM_PATH_FRAMES 48

/* Bytes are estimates of the bytes allocated (each record's weight): exact
 * when every allocation was recorded. Each estimate has a sampling variance
 * (the *_var fields, bytes squared; 0 when exact): an allocation of s bytes
 * is sampled with probability p = 1 - exp(-s / mean) and weighs w = s / p,
 * so a sum of weights has the variance sum(s^2 (1 - p) / p), which the
 * records it holds estimate without bias by sum(w (w - s)) (docs/memory.md,
 * "Sampling error"). */
typedef struct {
  char *name; /* the innermost zone the memory was allocated in; "" none */
  size_t name_len;
  uint64_t alloc_bytes, alloc_count, freed_bytes, freed_count;
  uint64_t peak;    /* the most its allocations held live at once */
  uint64_t at_peak; /* what they held at their process's peak */
  double peak_var;  /* the sampling variance of peak (below) */
} mlprof__mem_zone;

/* An allocation site: a zone and a stack (its innermost zone alone while
 * no stack was recorded) in one process. */
typedef struct {
  size_t proc;    /* index in the job */
  size_t mproc;   /* index in mlprof__memory.procs: its address space */
  uint32_t zone;  /* index in mlprof__memory.zones */
  uint64_t stack; /* the profile's stack id, or 0 */
  /* The stack as a person reads it (NUL-terminated, "" when unknown): the
   * program's own Python frames, innermost first ("file:line function",
   * " < " between them; frames of the Python installation and of installed
   * packages left out, the innermost of them kept when no other is), and
   * the native frame that called the allocator ("symbol+0xOFF" or
   * "module+0xOFF"). */
  char *python, *native;
  /* The whole stack, outermost frame first, as indices into
   * mlprof__memory.frames: every Python frame, then the native frame; at
   * most MLPROF__MEM_PATH_FRAMES, the innermost kept (npath 0: unknown).
   * For flame graphs. */
  uint32_t *path;
  uint32_t npath;
  uint64_t alloc_bytes, alloc_count;
  uint64_t live_end;             /* still live when the profile ended */
  uint64_t at_peak;              /* live at its process's peak */
  double alloc_var, at_peak_var; /* sampling variances of the two */
  /* Live bytes over the process's steps: Theil-Sen slope (bytes per step),
   * over the whole run and over its second half. */
  double slope, slope_late, mk_z;
  uint64_t growth; /* live at the last step less live at the first */
  int leak;        /* grows step after step and keeps growing */
  size_t id;       /* its index before the sites were sorted (internal) */
} mlprof__mem_site;

/* Consecutive steps of a process (a step: from one step mark to the next,
 * the last to the last record), grouped so that a process has at most
 * MLPROF__MEM_STEP_GROUPS: steps [first, first + count) (0: the step that
 * the first mark begins), between profile times t0 (the first one's mark)
 * and t1 (the next group's mark; the last record's time for the last). */
typedef struct {
  uint32_t first, count;
  uint64_t t0, t1;
  uint64_t peak, peak_t; /* the most live within them (or when they
                          * began: what was live then), and when */
} mlprof__mem_group;

/* One site's figures within one group of steps: bytes and records it
 * allocated there and what it held at the group's peak (either may be 0). */
typedef struct {
  uint32_t group; /* index in its process's groups */
  size_t site;    /* index in mlprof__memory.sites */
  uint64_t alloc_bytes, alloc_count, at_peak;
} mlprof__mem_step_site;

/* One address space of a process: its own memory (device -1), or a CUDA
 * device's, whose allocations a track recorded in zone "cuda:N" (torch's
 * caching allocator's history, docs/memory.md): each is replayed apart,
 * with a peak of its own. A process's spaces follow one another, its own
 * first, then its devices in order. */
typedef struct {
  size_t proc;
  uint64_t pid;
  int device;             /* -1: the process's own memory; else CUDA's */
  uint64_t allocs, frees; /* records read */
  int exact;              /* every record's weight is its size */
  uint64_t alloc_bytes, freed_bytes, live_end;
  uint64_t peak, peak_t; /* the most live at once, and when (ns) */
  double peak_var;       /* the sampling variance of peak */
  uint64_t *step_peak;   /* per step (between two step marks) */
  uint64_t *step_t;      /* the step marks (profile time, sorted) */
  size_t nsteps;
  /* The sampling mean in bytes, read back from the records' weights (0
   * when exact, or when no record tells: all far larger than the mean). */
  double mean;
  /* The smallest leak the detector can tell over this run's steps, in bytes
   * a step (mlprof__memory_leak_floor); NAN with fewer than
   * MLPROF__MEM_LEAK_MIN_STEPS step marks, or sampled with mean unknown. */
  double leak_floor;
  /* Live bytes over time (profile time): the records' span cut into
   * MLPROF__MEM_SERIES equal buckets, each the highest live bytes in it and
   * when; the point of the peak is the peak itself. nlive at most
   * MLPROF__MEM_SERIES + 1 (a first point at 0 bytes). */
  uint64_t *live_t, *live_v;
  size_t nlive;
  /* Per group of steps (none without step marks): the groups, and the
   * sites' figures in them (a site with nothing in a group is absent). */
  mlprof__mem_group *groups;
  size_t ngroups;
  mlprof__mem_step_site *step_sites;
  size_t nstep_sites;
} mlprof__mem_proc;

typedef struct {
  mlprof__mem_proc *procs; /* processes with allocation records */
  size_t nprocs;
  mlprof__mem_zone *zones; /* one per zone name, over the job */
  size_t nzones;
  mlprof__mem_site *sites;
  size_t nsites;
  size_t nleaks; /* sites with leak set */
  /* The frames of the sites' paths over the job, each text once:
   * "file:line function" (Python), "[symbol+0xOFF]" or "[module+0xOFF]"
   * (native), "<truncated>" (the root of a deeper stack). */
  char **frames;
  size_t *frame_lens, nframes, frames_cap;
} mlprof__memory;

/* The leak detector's rule (a site is a leak when its live bytes at the
 * step marks have a Mann-Kendall z of at least MLPROF__MEM_LEAK_MIN_Z and
 * grew by MLPROF__MEM_LEAK_MIN_BYTES or more; docs/memory.md). */
#define MLPROF__MEM_LEAK_MIN_STEPS 8
#define MLPROF__MEM_LEAK_MIN_Z 3.0
#define MLPROF__MEM_LEAK_MIN_BYTES (1u << 20)
/* The chance the leak floor's leak is seen at all (below). */
#define MLPROF__MEM_LEAK_POWER 0.95

/* The smallest steady leak, in bytes a step, that the detector can tell
 * over nsteps step marks whose series has points values (the series keeps
 * at most 256): the growth must reach MLPROF__MEM_LEAK_MIN_BYTES, and when
 * sampled with mean bytes (0: every allocation recorded) the leaked bytes
 * must hold, with probability MLPROF__MEM_LEAK_POWER, enough samples k for
 * both that growth (k mean >= MLPROF__MEM_LEAK_MIN_BYTES) and the trend: k
 * sampled rises in a series of n points give a Mann-Kendall z of about
 * 1.5 sqrt(n k / (k + 2)), which must reach MLPROF__MEM_LEAK_MIN_Z. The
 * samples of a leak of r bytes a step are Poisson with mean r (nsteps - 1)
 * / mean. NAN with fewer than MLPROF__MEM_LEAK_MIN_STEPS marks. */
double mlprof__memory_leak_floor(size_t nsteps, size_t points, double mean);

typedef struct mlprof__memory_builder mlprof__memory_builder;

/* Starts filling *m (the caller's, any content). NULL when out of memory. */
mlprof__memory_builder *mlprof__memory_begin(mlprof__memory *m);
/* Sets *v to read profile index proc, whose pid is pid. */
void mlprof__memory_profile_begin(mlprof__memory_builder *b, size_t proc,
                                  uint64_t pid, mlprof__visitor *v);
/* Replays what the profile held. 0 or MLPROF_ENOMEM. */
int mlprof__memory_profile_end(mlprof__memory_builder *b);
/* Sorts sites (by bytes at the peak, then allocated) and frees b. 0 or
 * MLPROF_ENOMEM; *m is then empty. */
int mlprof__memory_finish(mlprof__memory_builder *b);
void mlprof__memory_abort(mlprof__memory_builder *b);
void mlprof__memory_free(mlprof__memory *m);

#endif
