/* mlprof — a low-overhead profiler for machine-learning pipelines.
 *
 * The one public header. Everything here is stable within a major version.
 *
 * Quick start:
 *
 *   #include <mlprof.h>
 *   void decode(void) {
 *     MLPROF_ZONE("decode");          // ends when the enclosing scope ends
 *     ...
 *     mlprof_units_add("tokens", 1);
 *   }
 *
 * The session starts by itself when MLPROF_OUTPUT is set in the environment
 * (that is how `mlprof run` works), or explicitly with mlprof_init().
 * Define MLPROF_DISABLE before including this header to compile every
 * instrumentation macro out.
 */
#ifndef MLPROF_H
#define MLPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MLPROF_VERSION_MAJOR 0
#define MLPROF_VERSION_MINOR 1
#define MLPROF_VERSION_PATCH 0

#if defined(MLPROF_BUILDING)
#define MLPROF_EXPORT __attribute__((visibility("default")))
#else
#define MLPROF_EXPORT
#endif

/* Error codes: every function returning int returns 0 or one of these. */
#define MLPROF_ERRNO_MAP(X)                                      \
  X(EINVAL, -1, "invalid argument")                              \
  X(ENOMEM, -2, "out of memory")                                 \
  X(EIO, -3, "cannot write the profile file")                    \
  X(EALREADY, -4, "a session is already running")                \
  X(ENOTSTARTED, -5, "no session is running")                    \
  X(EFORMAT, -6, "not an mlprof profile or unsupported version") \
  X(ECORRUPT, -7, "the profile is damaged")                      \
  X(ETHREAD, -8, "cannot start the writer thread")

/* The enumerators come from the macro, which clang-format cannot see. */
/* clang-format off */
typedef enum {
#define MLPROF__ERR_ENUM(name, code, text) MLPROF_##name = code,
  MLPROF_ERRNO_MAP(MLPROF__ERR_ENUM)
#undef MLPROF__ERR_ENUM
  MLPROF__ERR_LAST = -9
} mlprof_errno;
/* clang-format on */

/* Zone categories: used by the analysis to split a step into its parts.
 * X(enumerator suffix, value, name in reports and in the Python API). */
#define MLPROF_CATEGORY_MAP(X) \
  X(NONE, 0, "none")           \
  X(DATA, 1, "data")           \
  X(FORWARD, 2, "forward")     \
  X(BACKWARD, 3, "backward")   \
  X(OPTIMIZER, 4, "optimizer") \
  X(COMM, 5, "communication")  \
  X(IO, 6, "io")               \
  X(USER, 7, "user")

/* clang-format off */
typedef enum {
#define MLPROF__CAT_ENUM(name, code, text) MLPROF_CAT_##name = code,
  MLPROF_CATEGORY_MAP(MLPROF__CAT_ENUM)
#undef MLPROF__CAT_ENUM
  MLPROF_CAT_COUNT
} mlprof_category;
/* clang-format on */

/* A call site. Instrumentation macros keep one in static storage and pass its
 * address, so a literal name costs nothing at run time. The library reads the
 * strings when it writes the profile; they must live until mlprof_shutdown().
 */
typedef struct mlprof_site {
  const char *name;
  const char *function; /* may be NULL */
  const char *file;     /* may be NULL */
  uint32_t line;
  uint32_t category; /* mlprof_category */
} mlprof_site;

/* Caller-allocated: fill it with mlprof_config_init(), which also sets size,
 * then change what you need. size lets the struct grow: a library newer than
 * the caller reads only the fields the caller's struct has and takes the
 * defaults for the rest; reserved must stay zero. */
typedef struct mlprof_config {
  size_t size; /* sizeof(mlprof_config) where the caller was compiled */
  /* Where to write. A directory (existing, or ending in '/') gets one file per
   * process named PROGRAM-PID.mlprof; anything else is the file's path. A
   * child created by fork() writes next to it with its own pid. NULL: use
   * MLPROF_OUTPUT (ignored in a setuid or setgid process), else
   * "mlprof-PID.mlprof" in the working directory. The file is always created
   * anew, never through a symbolic link: when the name is taken, the next
   * free one (STEM.1.mlprof, ...) is used. A directory that is a symbolic
   * link is refused (MLPROF_EIO). */
  const char *output;
  /* How often the writer thread appends what was recorded (ms); 0: 200.
   * A process killed with SIGKILL loses at most this much. */
  uint32_t flush_interval_ms;
  /* Hard cap on event buffers (bytes); 0: 64 MiB. Past it events are dropped
   * and counted, never blocking the program. */
  size_t memory_cap;
  /* 0: start with recording switched off (see mlprof_set_enabled). */
  int enabled;
  /* How often the sampler thread reads CPU, memory, I/O, temperature, energy
   * and GPU measures (docs/sampling.md); 0: 100 ms; negative: no sampling. */
  int sample_interval_ms;
  /* Non-zero: never load NVML, so no GPU is sampled (MLPROF_GPU=0). */
  int no_gpu;
  /* Samples per second of every Python thread's stack (docs/stacks.md);
   * 0 or negative: none. mlprof_config_init sets 100 (MLPROF_STACKS). In a
   * process with no Python interpreter nothing is sampled. Since 0.1 of
   * format 1.5; it fills what was padding, so sizeof is unchanged. */
  int stacks_hz;
  /* MLPROF_STACKS_* bits; 0: Python frames only. MLPROF_STACKS_NATIVE adds
   * each thread's native frames (C extensions, libraries), merged with its
   * Python frames (docs/stacks.md; needs a library built with libunwind).
   * Any other bit: MLPROF_EINVAL. It was reserved[0] before, so sizeof is
   * unchanged. */
  uint64_t stacks_flags;
  uint64_t reserved[5];
} mlprof_config;

/* mlprof_config.stacks_flags. */
#define MLPROF_STACKS_NATIVE 1u

/* Fills *cfg with the defaults (enabled, defaults described above) and sets
 * cfg->size. */
MLPROF_EXPORT void mlprof_config_init(mlprof_config *cfg);

/* Starts the process's session: opens the profile file, writes its header and
 * starts the writer thread. cfg may be NULL for the defaults. Returns
 * MLPROF_EALREADY when a session is already running (for instance one started
 * from MLPROF_OUTPUT by `mlprof run`); recording then goes to that session.
 * MLPROF_EINVAL when cfg was not filled by mlprof_config_init (size not set)
 * or a reserved field is not zero. On failure nothing is left running. */
MLPROF_EXPORT int mlprof_init(const mlprof_config *cfg);

/* Flushes everything recorded, writes the closing chunk and closes the file.
 * Safe to call when no session runs (returns MLPROF_ENOTSTARTED). A later
 * mlprof_init() starts a new file. Also runs by itself at exit. */
MLPROF_EXPORT int mlprof_shutdown(void);

/* Appends what was recorded so far to the file and waits until it is written.
 */
MLPROF_EXPORT int mlprof_flush(void);

/* Path of the current profile file (the free name it was created at), or
 * NULL when no session runs. The string stays valid until the session ends. */
MLPROF_EXPORT const char *mlprof_output_path(void);

/* Run-time switch. While disabled, every recording call costs one flag check.
 * Switching off does not close zones already open; their ends are recorded. */
MLPROF_EXPORT void mlprof_set_enabled(int on);
MLPROF_EXPORT int mlprof_is_enabled(void);

/* Which allocations are recorded from now on (docs/memory.md): "sampled"
 * (the default: a sample every 512 KiB allocated on average),
 * "sampled:BYTES" (that mean), "all" or "off". Returns 0, or MLPROF_EINVAL
 * for any other mode (nothing changed). Allocations are captured only where
 * the library is preloaded (mlprof run, LD_PRELOAD): see
 * mlprof_memory_active. */
MLPROF_EXPORT int mlprof_memory_set(const char *mode);
/* 1 when this process's allocations are being captured (the library's
 * allocation hooks are the process's and the mode is not "off"), else 0. */
MLPROF_EXPORT int mlprof_memory_active(void);

/* Zones. Every begin is paired with one end on the same thread, in stack
 * order, whatever happens meanwhile (recording switched off or on, the
 * memory cap reached): an end always closes the zone of its own begin.
 * mlprof_zone_begin_site returns 0 when the end may be skipped (nothing is
 * open on this thread and recording is off); the scoped macros use that to
 * save the call. Calling mlprof_zone_end regardless is always correct. */
MLPROF_EXPORT int mlprof_zone_begin_site(const mlprof_site *site);
/* For bindings: name (and category) interned once per distinct string. */
MLPROF_EXPORT void mlprof_zone_begin(const char *name);
MLPROF_EXPORT void mlprof_zone_begin_cat(const char *name, mlprof_category cat);
MLPROF_EXPORT void mlprof_zone_end(void);
/* For bindings that keep a handle per name: the site for (name, cat), made on
 * first use and valid until exit; NULL when name is NULL or memory is short. */
MLPROF_EXPORT const mlprof_site *mlprof_site_intern(const char *name,
                                                    mlprof_category cat);

/* Attaches key=value to the innermost open zone of this thread (at most 6 per
 * zone; more are dropped and counted). Both strings are copied. */
MLPROF_EXPORT void mlprof_zone_meta(const char *key, const char *value);

/* Sets the gauge `name` to value at this time: loss, learning rate, queue
 * length... (a time series of values). */
MLPROF_EXPORT void mlprof_gauge_set(const char *name, double value);
/* Adds n units of work named `name` (samples, tokens, bytes) for throughput;
 * attributed to the innermost open zone of this thread. */
MLPROF_EXPORT void mlprof_units_add(const char *name, uint64_t n);
/* Marks the boundary between two steps (iterations) of the workload. */
MLPROF_EXPORT void mlprof_step(void);
/* Ends the thread's current step without starting another: the time until
 * its next mlprof_step() is in no step (a pause in recording, the end of a
 * scheduled window). */
MLPROF_EXPORT void mlprof_step_end(void);

/* Session metadata (model name, batch size, git commit...). Copied. */
MLPROF_EXPORT void mlprof_meta(const char *key, const char *value);
/* Names the calling thread in the profile. Copied. */
MLPROF_EXPORT void mlprof_thread_name(const char *name);

/* Spans measured elsewhere, recorded after the fact: another profiler's
 * operators (torch.profiler), GPU kernels from a device trace, timings from
 * a log. They go on a track, a timeline of its own in the profile that is
 * shown and analysed like a thread and named by the caller. */
typedef struct mlprof_span {
  const mlprof_site *site;   /* name and category (mlprof_site_intern) */
  uint64_t begin_ns, end_ns; /* CLOCK_MONOTONIC nanoseconds, begin <= end */
  const char *unit;          /* NULL, or a unit of work done ("flops") */
  uint64_t units;            /* how many units */
  uint64_t reserved[2];      /* zero: later versions may give them meaning */
} mlprof_span;

/* Records n spans on the track named `track` (made on first use, at most
 * 256 per session). Nesting follows from the times: a span within another's
 * interval is inside it (of two with the same times, the one given first
 * encloses the other), so give whole trees (an operator with everything it
 * called) in one call. Times before the session's start count as its start.
 * Not for hot paths: it takes a lock, and rather than go past the memory cap
 * it waits for the writer to write what is queued. Returns 0, or
 * MLPROF_ENOTSTARTED, MLPROF_EINVAL (no track name, a span without a site,
 * ending before it begins or with a reserved field set; nothing recorded) or
 * MLPROF_ENOMEM (spans past the cap were dropped and counted). */
MLPROF_EXPORT int mlprof_track_spans(const char *track,
                                     const mlprof_span *spans, size_t n);

/* Allocations measured elsewhere, recorded after the fact: another
 * allocator's history (torch's CUDA caching allocator). Each is a block of
 * `size` bytes at `address` made at time_ns, or with size 0 the free of the
 * latest block at that address, with the allocation's stack (Python-style
 * frames, innermost first; NULL and 0 when unknown). */
typedef struct mlprof_frame {
  const char *file;     /* file name, or NULL */
  const char *function; /* function name, or NULL */
  uint32_t line;
  uint32_t reserved; /* zero */
} mlprof_frame;

typedef struct mlprof_alloc {
  uint64_t time_ns; /* CLOCK_MONOTONIC nanoseconds */
  uint64_t address;
  uint64_t size;              /* 0: a free */
  const mlprof_frame *frames; /* innermost first; shared arrays are cheaper */
  size_t nframes;             /* at most 1024 kept (the innermost) */
  uint64_t reserved[2];       /* zero: later versions may give them meaning */
} mlprof_alloc;

/* Records n allocations and frees, in the order given, on the track named
 * `track` (as mlprof_track_spans), each attributed to the zone named `zone`
 * and weighing its size (every one recorded: no sampling). They go into the
 * profile's allocation records (docs/format.md, chunk ALLOCS) and so into
 * its Memory section; an address space of their own is the caller's to mark
 * by the zone's name (docs/memory.md: zone "cuda:N" for device N). Times
 * before the session's start count as its start. Not for hot paths: it
 * takes a lock and interns each distinct frames array once. Returns 0, or
 * MLPROF_ENOTSTARTED, MLPROF_EINVAL (no track or zone name, n records but
 * no array, a record with nframes but no frames or a reserved field set;
 * nothing recorded) or MLPROF_ENOMEM (records past the memory cap were
 * dropped and counted). */
MLPROF_EXPORT int mlprof_track_allocs(const char *track, const char *zone,
                                      const mlprof_alloc *allocs, size_t n);

/* Line timings of one function (a line profiler's table), recorded after the
 * fact: per line, how often it ran, the time from it to the next line
 * (total) and that less the calls made from it (exclusive), and its source
 * text. The Python package records the functions it times this way. */
typedef struct mlprof_line {
  uint32_t line;                         /* line number in file */
  uint64_t hits, total_ns, exclusive_ns; /* so far, cumulative */
  const char *source;                    /* the line's text, or NULL */
  uint64_t reserved[2]; /* zero: later versions may give them meaning */
} mlprof_line;

/* Sets the line table of function `function` of `file` starting at line
 * first_line: the latest set for one (function, file, first_line) replaces
 * the earlier ones and goes into the profile at the next flush (and at the
 * end of the session); in a forked child, it starts the child's profile
 * (whose line tables start empty). Everything is copied. Returns 0,
 * MLPROF_EINVAL (no function or file, n lines but no table, a reserved field
 * set, a table past 16 MiB encoded; nothing recorded) or MLPROF_ENOMEM. */
MLPROF_EXPORT int mlprof_lines_set(const char *function, const char *file,
                                   uint32_t first_line,
                                   const mlprof_line *lines, size_t n);

/* Deprecated names (docs/guide.md, "Deprecated names"), kept so that
 * programs built with them build and run: mlprof_counter is
 * mlprof_gauge_set, mlprof_count is mlprof_units_add. */
MLPROF_EXPORT void mlprof_counter(const char *name, double value);
MLPROF_EXPORT void mlprof_count(const char *name, uint64_t n);

/* Events this process could not record because the memory cap was reached. */
MLPROF_EXPORT uint64_t mlprof_dropped(void);

/* Text for an error code; never NULL. */
MLPROF_EXPORT const char *mlprof_strerror(int err);
/* The code's name ("MLPROF_EINVAL", "0" for success); never NULL. */
MLPROF_EXPORT const char *mlprof_err_name(int err);
/* The category's name as reports write it ("forward"); "unknown" past
 * MLPROF_CAT_COUNT. */
MLPROF_EXPORT const char *mlprof_category_name(mlprof_category cat);
/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
MLPROF_EXPORT const char *mlprof_version(void);

/* ---- instrumentation macros --------------------------------------------- */

#define MLPROF__CAT2(a, b) a##b
#define MLPROF__CAT(a, b) MLPROF__CAT2(a, b)
#define MLPROF__SITE(var, name, cat) \
  static const mlprof_site var = {(name), __func__, __FILE__, __LINE__, (cat)}

#if defined(MLPROF_DISABLE)

#define MLPROF_ZONE(name) ((void)0)
#define MLPROF_ZONE_CAT(name, cat) ((void)0)
#define MLPROF_ZONE_BEGIN(name) ((void)0)
#define MLPROF_ZONE_END() ((void)0)
#define MLPROF_GAUGE(name, value) ((void)0)
#define MLPROF_UNITS(name, n) ((void)0)
#define MLPROF_COUNTER(name, value) ((void)0)
#define MLPROF_COUNT(name, n) ((void)0)
#define MLPROF_STEP() ((void)0)
#define MLPROF_STEP_END() ((void)0)

#else

#ifdef __cplusplus
} /* extern "C" */
struct mlprof__scope {
  explicit mlprof__scope(const mlprof_site *s)
      : owed(mlprof_zone_begin_site(s)) {}
  ~mlprof__scope() {
    if (owed) mlprof_zone_end();
  }
  int owed;
  mlprof__scope(const mlprof__scope &) = delete;
  mlprof__scope &operator=(const mlprof__scope &) = delete;
};
#define MLPROF__SCOPED(name, cat, id)                      \
  MLPROF__SITE(MLPROF__CAT(mlprof__site_, id), name, cat); \
  mlprof__scope MLPROF__CAT(mlprof__scope_, id)(&MLPROF__CAT(mlprof__site_, id))
extern "C" {
#else
static inline void mlprof__scope_end(const int *owed) {
  if (*owed) mlprof_zone_end();
}
#define MLPROF__SCOPED(name, cat, id)                       \
  MLPROF__SITE(MLPROF__CAT(mlprof__site_, id), name, cat);  \
  const int MLPROF__CAT(mlprof__scope_, id)                 \
      __attribute__((cleanup(mlprof__scope_end), unused)) = \
          mlprof_zone_begin_site(&MLPROF__CAT(mlprof__site_, id))
#endif

/* A zone from here to the end of the enclosing scope. */
#define MLPROF_ZONE(name) MLPROF__SCOPED(name, MLPROF_CAT_NONE, __LINE__)
#define MLPROF_ZONE_CAT(name, cat) MLPROF__SCOPED(name, cat, __LINE__)
/* An explicit pair, for zones that do not follow a scope. */
#define MLPROF_ZONE_BEGIN(name)                         \
  do {                                                  \
    MLPROF__SITE(mlprof__site_, name, MLPROF_CAT_NONE); \
    (void)mlprof_zone_begin_site(&mlprof__site_);       \
  } while (0)
#define MLPROF_ZONE_END() mlprof_zone_end()
#define MLPROF_GAUGE(name, value) mlprof_gauge_set((name), (value))
#define MLPROF_UNITS(name, n) mlprof_units_add((name), (n))
/* Deprecated: MLPROF_GAUGE and MLPROF_UNITS under their former names. */
#define MLPROF_COUNTER(name, value) MLPROF_GAUGE(name, value)
#define MLPROF_COUNT(name, n) MLPROF_UNITS(name, n)
#define MLPROF_STEP() mlprof_step()
#define MLPROF_STEP_END() mlprof_step_end()

#endif /* MLPROF_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* MLPROF_H */
