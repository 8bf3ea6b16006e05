/* Hot functions: the stack samples of a job (STACKS chunks, docs/format.md)
 * merged into one tree of stacks, each sample counted under the innermost
 * zone open on its thread when it was taken, and per function the samples
 * that were in it (total) and in it innermost (self). */
#ifndef MLPROF_HOT_H
#define MLPROF_HOT_H

#include <stddef.h>
#include <stdint.h>

#include "../format/reader.h"
#include "../model/job.h"

/* The step parts (MLPROF__NPARTS of findings.h, which includes this). */
#define MLPROF__HOT_PARTS 6

/* A function (or a native symbol: file is the module, first_line 0). */
typedef struct {
  char *file, *function;
  uint32_t first_line;
} mlprof__hot_func;

typedef struct {
  uint32_t func; /* index in funcs; MLPROF__NONE: "<truncated>" */
  uint32_t line;
} mlprof__hot_frame;

/* A stack: frame on top of parent (an index in nodes; MLPROF__NONE: none,
 * the frame is the outermost). */
typedef struct {
  uint32_t parent, frame;
} mlprof__hot_node;

/* The samples of one stack (node MLPROF__NONE: no Python frame) under one
 * label: the innermost zone open on the thread (index in zone_names; 0 is
 * "no zone"), the outermost one (top, the same; the step zone's spans are
 * steps), the step part of the innermost zone that has one (MLPROF__PART_*,
 * findings.h; "other" when none) and whether a step mark of the thread had
 * begun a step (marked). How many, and the time they stand
 * for. A sample stands for the time since its thread's previous sample (the
 * rate's interval for a thread's first), so a sampler that fell behind on a
 * busy machine does not bend the shares. */
typedef struct {
  uint32_t node, zone, top;
  uint8_t part, marked;
  uint64_t samples, on_cpu;
  uint64_t wall_ns, cpu_ns; /* all of them; those on a CPU */
} mlprof__hot_stack;

/* One function's time (ns of samples): self (innermost) and total
 * (anywhere in the stack, once per sample whatever the recursion), all
 * samples (wall) and those taken on a CPU; line is the line most of its
 * self samples were at. */
typedef struct {
  uint32_t func, line; /* line: MLPROF__NONE when never innermost */
  uint64_t self, total, self_cpu, total_cpu;
  uint64_t line_weight; /* how line was chosen */
} mlprof__hot_row;

typedef struct {
  uint32_t step, func;
  uint64_t self_ns;
} mlprof__hot_step_self;

/* A zone's (or a step part's) samples and its functions by self time on a
 * CPU, most first. */
typedef struct {
  char *name; /* "" for the samples taken in no zone; NULL for a part */
  uint64_t samples, on_cpu;
  uint64_t wall_ns, on_cpu_ns;
  mlprof__hot_row *rows;
  size_t nrows;
} mlprof__hot_zone;

/* A thread's GIL, from the samples that say (flag GIL_KNOWN): the time
 * they stand for, and of it the time it held the GIL and waited for it. */
typedef struct {
  uint32_t tid;
  char *name; /* "" when unnamed */
  uint64_t wall_ns, held_ns, wait_ns;
} mlprof__hot_gil_thread;

/* The GIL of one process (a profile): its threads by wait, most first, and
 * the functions that held it (innermost frame of the holder's samples, time
 * held), most first, at most MLPROF__HOT_GIL_TOP. */
#define MLPROF__HOT_GIL_TOP 3
typedef struct {
  uint64_t pid;
  mlprof__hot_gil_thread *threads;
  size_t nthreads;
  struct {
    uint32_t func, line; /* func: an index in funcs */
    uint64_t ns;
  } top[MLPROF__HOT_GIL_TOP];
  size_t ntop;
  uint64_t held_ns; /* by all of its threads */
} mlprof__hot_gil;

typedef struct {
  double interval_ns;          /* the sampling interval (1 / its rate), or 0 */
  uint64_t samples, on_cpu;    /* how many; how many on a CPU */
  uint64_t wall_ns, on_cpu_ns; /* the time they stand for */
  uint64_t cpu_ns;             /* the CPU time the sampled threads used */
  uint64_t unresolved;         /* samples whose stack was never defined */
  mlprof__hot_func *funcs;
  size_t nfuncs;
  mlprof__hot_frame *frames;
  size_t nframes;
  mlprof__hot_node *nodes;
  size_t nnodes;
  mlprof__hot_stack *stacks;
  size_t nstacks;
  /* Every function, by self time on a CPU, most first. */
  mlprof__hot_row *rows;
  size_t nrows;
  /* Every zone's name by the index a stack's zone is (0: "", no zone). */
  char **zone_names;
  size_t nzone_names;
  /* Zones by time, most first; the "no zone" one included when it has
   * samples. */
  mlprof__hot_zone *zones;
  size_t nzones;
  /* Set by mlprof__hot_steps when the job has steps: the samples inside
   * them by step part (index MLPROF__PART_*), and those outside every step
   * (start-up, between steps, shutdown). */
  int steps;
  mlprof__hot_zone parts[MLPROF__HOT_PARTS];
  uint64_t outside_samples, outside_wall_ns, outside_on_cpu_ns;
  /* The steps of the threads' step marks (a mark to the next mark or step
   * end), numbered 0 to marked_steps - 1 over the job, and each function's
   * self time (wall) in each of them where it had some (mlprof diff). */
  uint64_t marked_steps;
  mlprof__hot_step_self *step_self;
  size_t nstep_self;
  /* The processes whose samples said something of the GIL, in profile
   * order. */
  mlprof__hot_gil *gil;
  size_t ngil;
} mlprof__hot;

typedef struct mlprof__hot_builder mlprof__hot_builder;

/* A builder filling *out (zeroed here); NULL when memory is short. */
mlprof__hot_builder *mlprof__hot_begin(mlprof__hot *out);
/* The visitor that reads one profile's stacks, samples and spans into b. */
void mlprof__hot_profile_begin(mlprof__hot_builder *b, mlprof__visitor *v);
/* The profile's samples held so far. The spans (span and open) only label
 * samples, which come before the spans that cover them, in an earlier
 * chunk: a reader may leave the spans out while this is 0 at the start of
 * a chunk (most profiles have no samples). */
const size_t *mlprof__hot_samples(const mlprof__hot_builder *b);
/* What a sample became once resolved, for an analysis that keeps more of it
 * than the hot functions do (flame.h): its thread and time (the profile's
 * ns), the job's node (MLPROF__NONE: no Python frame) and zone (an index in
 * zone_names, 0: none), its MLPROF__SAMPLE_* flags and the ns it stands
 * for. Returns 0 or MLPROF_ENOMEM, which fails the profile's end. */
typedef int (*mlprof__hot_sink)(void *ctx, uint32_t tid, uint64_t t,
                                uint32_t node, uint32_t zone, uint32_t flags,
                                uint64_t ns);
/* Calls sink with every sample counted from now on (NULL: none). */
void mlprof__hot_set_sink(mlprof__hot_builder *b, mlprof__hot_sink sink,
                          void *ctx);
/* Adds the profile's samples to the result. 0 or MLPROF_ENOMEM. */
int mlprof__hot_profile_end(mlprof__hot_builder *b);
/* Computes the functions' rows and frees b: 0, or MLPROF_ENOMEM with *out
 * freed. b may be NULL. */
int mlprof__hot_finish(mlprof__hot_builder *b);
void mlprof__hot_free(mlprof__hot *h);

/* Splits the samples taken inside the job's steps by step part (h->parts)
 * and counts those outside (h->outside_*), as the step breakdown splits
 * the steps' time (findings.h): steps are the intervals of the threads'
 * step marks when marks is non-zero, else the spans of the outermost zone
 * named zone (len bytes). Returns 0 or MLPROF_ENOMEM (h then has no
 * parts). */
int mlprof__hot_steps(mlprof__hot *h, int marks, const char *zone, size_t len);

/* A share of a zone's sampled time at least this large is "under one
 * callee" when below its enclosing frames (mlprof__hot_callee). */
#define MLPROF__HOT_CALLEE_SHARE 0.6
#define MLPROF__HOT_CALLEE_MIN_SAMPLES 20

/* The one function most of the time sampled in the zone named name (len
 * bytes) was spent under, when there is one: the shallowest function of
 * the zone's stacks under MLPROF__HOT_CALLEE_SHARE of its sampled (wall)
 * time or more that is below every enclosing frame (one under 98% or more
 * of it, or one that also ran outside the zone: the frames that opened the
 * zone and their callers). Functions are told apart by their path from the
 * root, whatever line each frame was at. mlprof's own frames (the wrappers
 * that open zones around the user's calls) are never the callee and are
 * passed over when looking for the enclosing frame. Returns the function
 * (index in h->funcs) with its share in *share, or MLPROF__NONE: none,
 * fewer than MLPROF__HOT_CALLEE_MIN_SAMPLES samples, or memory short. */
uint32_t mlprof__hot_callee(const mlprof__hot *h, const char *name, size_t len,
                            double *share);

/* Whether a Python source file is mlprof's own package's (a path with a
 * "/mlprof/" directory): its wrappers open zones around the user's calls,
 * so its frames say nothing of the user's code. */
int mlprof__hot_own_file(const char *file);

/* Writes the frame's name as "function (file:line)" into buf. */
void mlprof__hot_frame_name(const mlprof__hot *h, uint32_t frame, char *buf,
                            size_t len);

#endif
