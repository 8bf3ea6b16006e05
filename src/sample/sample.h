/* Sampling: what the machine and the processes were doing while zones ran.
 *
 * A source is a small table of functions (as nvtop's GPU vendors are); the
 * sampler thread asks each one for rows at every tick. A row is what one
 * subject (the system, a process, a GPU) measured at that time. A measure
 * that cannot be read is absent with its reason, never a silent zero. */
#ifndef MLPROF_SAMPLE_H
#define MLPROF_SAMPLE_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../base/base.h"
#include "../format/subject.h"

#define MLPROF__ROW_MEASURES 32

/* One measure. Names carry their unit as a suffix ("rss_bytes", "cpu_pct",
 * "power_w", "temp_c", "energy_j"); see docs/sampling.md for the list.
 * absent == NULL: value is valid. Otherwise the reason it is missing
 * ("not supported by this GPU"); the string must live until the next call
 * of the same source. */
typedef struct {
  const char *name;
  double value;
  const char *absent;
} mlprof__measure;

typedef struct {
  uint8_t subject; /* mlprof__subject */
  uint64_t id;
  const char *label; /* e.g. the GPU's name, the process's command; NULL */
  int n;
  mlprof__measure m[MLPROF__ROW_MEASURES];
} mlprof__row;

/* The threads of the processes a tree walk found, as it listed them: those
 * of pids[i], for i < npids, are tid[first[i]] .. tid[first[i + 1] - 1]. The
 * arrays are the caller's, of cap and max + 1 entries. */
typedef struct {
  pid_t *tid;
  size_t *first;
  size_t cap, ntid;
  size_t npids; /* 0: none listed (no children files, or over cap) */
} mlprof__tree_threads;

/* What a tick asks for. */
typedef struct {
  const char *root;  /* "" normally; a fixture tree's path in tests: every
                        /proc and /sys path is read below it */
  const pid_t *pids; /* the processes to sample: this process in-process,
                        the whole tree from `mlprof run` */
  size_t npids;
  uint64_t now_ns; /* CLOCK_MONOTONIC of this tick */
  uint64_t tick;   /* 0, 1, 2...: lets slow measures run every Nth tick */
  /* The threads the tree walk listed (so that a source need not list them
   * again), or NULL. */
  const mlprof__tree_threads *threads;
} mlprof__sample_ctx;

/* Appends a measure to r: valid with value v when absent is NULL, else
 * absent with that reason. A full row ignores it. */
static inline void mlprof__row_put(mlprof__row *r, const char *name, double v,
                                   const char *absent) {
  if (r->n >= MLPROF__ROW_MEASURES) return;
  r->m[r->n].name = name;
  r->m[r->n].value = absent ? 0 : v;
  r->m[r->n].absent = absent;
  r->n++;
}

typedef struct mlprof__source {
  const char *name; /* "proc", "system", "thermal", "energy", "nvml" */
  /* Prepares the source for root. Returns 0, or -1 with a one-line reason in
   * why when the source is unavailable here ("no NVML: libnvidia-ml.so.1 not
   * found"); the sampler then records the reason and never calls it again. */
  int (*open)(void **state, const char *root, char *why, size_t len);
  /* Optional, after open: what must happen in the program's descriptor table
   * (program_fds). Returns 0, or -1 with why set, having released state. */
  int (*start)(void *state, char *why, size_t len);
  /* Appends at most max rows to out; returns how many. Returns -1 with why
   * set when the source has failed for good (a GPU lost mid-run): the
   * sampler reports it once, closes the source and goes on without it. */
  int (*sample)(void *state, const mlprof__sample_ctx *ctx, mlprof__row *out,
                int max, char *why, size_t len);
  void (*close)(void *state);
  /* The source's library keeps descriptors of its own for the whole process
   * (NVML): start, sample and close are called in a thread that shares the
   * program's descriptor table, not in the sampler's own table (open, which
   * loads the library, is; src/base/fd.c). */
  int program_fds;
} mlprof__source;

/* Every source, in the order the sampler asks them (one explicit list). */
extern const mlprof__source *const mlprof__sources[];
extern const size_t mlprof__nsources;

/* The sources themselves (src/sample/<name>.c), for the list and the tests. */
extern const mlprof__source mlprof__source_proc;
extern const mlprof__source mlprof__source_system;
extern const mlprof__source mlprof__source_thermal;
extern const mlprof__source mlprof__source_energy;
extern const mlprof__source mlprof__source_nvml;

/* Where the sampler's rows go: the recording library gives one that queues
 * them for its profile's writer, tests give their own. The sampler knows
 * nothing else of the recorder. Every function is called from the sampler's
 * thread. */
typedef struct mlprof__sample_sink {
  void *ctx;
  /* The recorder's clock (its raw timestamps), read once per tick before the
   * sources: the time the tick's rows carry. */
  uint64_t (*now)(void);
  /* Takes n rows measured at t (a value of now); names, labels and reasons
   * live only until the call returns. */
  void (*rows)(void *ctx, uint64_t t, const mlprof__row *rows, int n);
  /* Takes a source's status: available, or not with a one-line reason. */
  void (*source)(void *ctx, const char *name, int available,
                 const char *reason);
} mlprof__sample_sink;

typedef struct mlprof__sampler mlprof__sampler;

/* Starts the sampler thread: every interval_ms, rows of every source go to
 * the sink (copied: sink need not outlive the call). tree != 0 samples the
 * process tree rooted at that pid, else the calling process; root prefixes
 * every /proc and /sys path ("" or NULL normally); no_gpu leaves the nvml
 * source out, with that reason. Returns 0, MLPROF_ENOMEM or MLPROF_ETHREAD. */
int mlprof__sampler_start(mlprof__sampler **s, const mlprof__sample_sink *sink,
                          uint32_t interval_ms, pid_t tree, const char *root,
                          int no_gpu);
/* Stops the thread (a last tick is not taken) and frees s. */
void mlprof__sampler_stop(mlprof__sampler *s);

/* Reads root + path (path absolute, e.g. "/proc/self/stat") into buf,
 * NUL-terminated. Returns the length, or -1 with errno set. The one helper
 * every /proc and /sys read goes through. In the sampler's thread its
 * descriptor is in the thread's own table (src/base/fd.c), never one the
 * program can close or be handed. */
ssize_t mlprof__read_at(const char *root, const char *path, char *buf,
                        size_t len);

/* Files kept open from one tick to the next, read again from their start
 * (pread): one syscall per read instead of three, and no path walk. Only
 * for a sampler whose process runs no program code (`mlprof run` samples
 * its command from outside): in a profiled program, the program may close
 * any descriptor, so there every read opens and closes its file. */
#define MLPROF__HELD_MAX 256
typedef struct {
  char *path; /* root + path; NULL: a free slot */
  uint64_t hash;
  uint64_t tick; /* the last tick that read it */
  int fd;
} mlprof__held_file;

typedef struct {
  uint64_t tick;
  mlprof__held_file f[MLPROF__HELD_MAX];
} mlprof__held_files;

/* From now on, in the calling thread, mlprof__read_at reads through h: each
 * file it opens is kept (up to MLPROF__HELD_MAX; past them, opened and
 * closed as usual) and read again at its next call. h starts zeroed. */
void mlprof__read_hold_begin(mlprof__held_files *h);
/* Ends it for the calling thread, and closes the files of h not read since
 * mlprof__read_hold_begin (a process that exited, a thread gone). */
void mlprof__read_hold_end(mlprof__held_files *h);
/* Closes every file of h. */
void mlprof__read_hold_close(mlprof__held_files *h);

/* Opens the directory root + path for listing (the companion of
 * mlprof__read_at for /proc and /sys directories). Returns NULL with errno
 * set; the caller closes it with closedir. */
DIR *mlprof__opendir_at(const char *root, const char *path);

/* The processes of the tree rooted at pid (pid first, breadth first), found
 * through root/proc/PID/task/TID/children, or through the parent links of
 * every root/proc/PID/stat where the kernel has no children files. Returns
 * the count (at most max); 0 when pid does not exist. With th (NULL: none),
 * the threads listed on the way go there. */
size_t mlprof__proc_tree(const char *root, pid_t pid, pid_t *out, size_t max,
                         mlprof__tree_threads *th);

#endif
