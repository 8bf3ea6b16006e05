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
 * zone (index in zones; 0 is "no zone"): how many, and the time they stand
 * for. A sample stands for the time since its thread's previous sample (the
 * rate's interval for a thread's first), so a sampler that fell behind on a
 * busy machine does not bend the shares. */
typedef struct {
  uint32_t node, zone;
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

/* A zone's samples and its functions by self time on a CPU, most first. */
typedef struct {
  char *name; /* "" for the samples taken in no zone */
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
/* Adds the profile's samples to the result. 0 or MLPROF_ENOMEM. */
int mlprof__hot_profile_end(mlprof__hot_builder *b);
/* Computes the functions' rows and frees b: 0, or MLPROF_ENOMEM with *out
 * freed. b may be NULL. */
int mlprof__hot_finish(mlprof__hot_builder *b);
void mlprof__hot_free(mlprof__hot *h);

/* Writes the frame's name as "function (file:line)" into buf. */
void mlprof__hot_frame_name(const mlprof__hot *h, uint32_t frame, char *buf,
                            size_t len);

#endif
