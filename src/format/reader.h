/* Streaming, validating reader of profile files (docs/format.md).
 *
 * The reader never builds the whole profile in memory: it walks the file chunk
 * by chunk and calls the visitor for each item, so a report or an export of a
 * profile of any size needs only what its visitor keeps. */
#ifndef MLPROF_READER_H
#define MLPROF_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint16_t version_major, version_minor;
  uint64_t pid, ppid;
  uint64_t start_wall_ns;   /* CLOCK_REALTIME at the profile's time 0 */
  uint64_t start_mono_ns;   /* CLOCK_MONOTONIC at the profile's time 0 */
  int64_t rank, world_size; /* -1: unknown */
  const char *hostname, *exe, *clock; /* NUL-terminated */
  uint32_t argc;
  const char *const *argv; /* argc NUL-terminated strings */
  uint32_t flush_interval_ms;
  /* 1: the HEADER chunk was damaged; every field above is unknown (0, -1,
   * "", no arguments) and the rest of the file is read as usual. */
  int damaged;
  uint32_t exec_seq;  /* n: the program the n-th exec of process pid started */
  int64_t local_rank; /* rank on its host; -1: unknown (1.3) */
  const char *job_id; /* the launcher's job id, NUL-terminated; "" unknown */
} mlprof__header;

typedef struct {
  uint32_t id;
  uint8_t kind;     /* MLPROF__NAME_* (wire.h) */
  uint8_t category; /* mlprof_category */
  const char *name; /* NUL-terminated copy; name_len excludes the NUL and may
                       be shorter than strlen when the name held a NUL byte */
  size_t name_len;
  const char *function, *file; /* NUL-terminated, "" when absent */
  uint32_t line;
} mlprof__name;

/* One measure of a sample row. */
typedef struct {
  uint32_t name; /* a measure name id (kind MLPROF__NAME_MEASURE) */
  int valid;     /* 1: value holds it; 0: absent, reason says why */
  double value;
  uint32_t reason; /* a string id when absent */
} mlprof__sample_measure;

/* What one subject (the system, a process, a GPU) measured at time t. */
typedef struct {
  uint8_t subject; /* mlprof__subject (src/sample/sample.h) */
  uint64_t id;     /* pid for a process, index for a GPU, 0 for the system */
  uint32_t label;  /* a string id naming the subject, or 0 */
  uint64_t t;      /* ns since the profile's start */
  uint32_t n;
  const mlprof__sample_measure *m;
} mlprof__sample_row;

/* One line of a function's line timings (a LINES chunk, since 1.4). */
typedef struct {
  uint32_t line;
  uint64_t hits, total_ns, exclusive_ns;
  const char *source; /* NUL-terminated, "" when absent */
} mlprof__line_row;

/* A function's line timings; a later one for the same (function, file,
 * first_line) supersedes it (the counts are cumulative). */
typedef struct {
  const char *function, *file; /* NUL-terminated */
  uint32_t first_line;
  uint32_t n;
  const mlprof__line_row *rows;
} mlprof__line_table;

/* A function of interned stacks (a STACKS chunk, since 1.5). */
typedef struct {
  uint32_t id;
  const char *file, *function; /* NUL-terminated, "" when unknown */
  uint32_t first_line;
} mlprof__stack_func;

/* A frame: a line of a function (func != 0), a native return address
 * (native: pc, module, symbol and the offset from the symbol, else from the
 * module's base), or the frame "<truncated>" at the root of a stack deeper
 * than the recorder keeps (func 0, not native). */
typedef struct {
  uint32_t id;
  uint32_t func; /* a stack_func id, or 0 */
  uint32_t line;
  int native;
  uint64_t pc, offset;
  const char *module, *symbol; /* NUL-terminated; "" when not native */
} mlprof__stack_frame;

/* The function name of native frame f, into buf (cap bytes): its symbol,
 * else its offset in its module, else "[unknown]" (code in no loaded
 * object: a JIT's). */
const char *mlprof__native_name(const mlprof__stack_frame *f, char *buf,
                                size_t cap);

/* What a stack sample's flags say (MLPROF__STACK_* in src/record/stack.h
 * give the same bits). */
enum {
  MLPROF__SAMPLE_ON_CPU = 1,
  MLPROF__SAMPLE_HAS_GIL = 2,
  MLPROF__SAMPLE_GIL_KNOWN = 4,
  MLPROF__SAMPLE_CPU_KNOWN = 8, /* cpu_ns was measured */
  MLPROF__SAMPLE_GIL_WAIT = 16  /* waiting to take the GIL (with GIL_KNOWN) */
};

/* One thread's stack at time t. */
typedef struct {
  uint64_t t; /* ns since the profile's start */
  uint32_t tid;
  uint32_t stack;  /* a stack_node id, 0: no Python frame */
  uint32_t flags;  /* MLPROF__SAMPLE_* */
  uint64_t cpu_ns; /* CPU time since the thread's previous sample */
} mlprof__stack_sample;

/* A recorded allocation (an ALLOCS chunk, since 1.5). */
typedef struct {
  uint32_t tid;
  uint64_t t;      /* ns since the profile's start */
  uint64_t size;   /* bytes asked for */
  uint64_t weight; /* bytes it stands for: size, or more when sampled */
  uint64_t addr;   /* its address, for the free that ends it */
  uint32_t zone;   /* the innermost zone open on tid (a zone name id), or 0 */
  uint64_t stack;  /* a stack id, or 0 */
} mlprof__alloc;

/* Allocations of one site, made on tid and freed within one flush interval,
 * counted together (tag 3 of an ALLOCS chunk, since 1.5): count of them
 * (at least 1), the sums of their sizes and weights (each as
 * mlprof__alloc's), and var, the sum of weight * (weight - size): the
 * sampling variance they stand for (docs/memory.md). Sums as the file says
 * them: a consumer adding them up saturates. */
typedef struct {
  uint32_t tid;
  uint64_t t;     /* the latest free among them */
  uint32_t zone;  /* as mlprof__alloc's */
  uint64_t stack; /* as mlprof__alloc's */
  uint64_t count, size, weight, var;
} mlprof__alloc_sum;

/* The callbacks, listed once: X(name, (parameters), arguments after ud).
 * The visitor's members, the analysis driver's tee and the filter's
 * forwarder are all made from this list. */
#define MLPROF__VISITOR_CALLBACKS(X)                                           \
  X(header, (void *ud, const mlprof__header *h), h)                            \
  X(name, (void *ud, const mlprof__name *n), n)                                \
  X(thread, (void *ud, uint32_t tid, const char *name, size_t len), tid, name, \
    len)                                                                       \
  /* Once per whole chunk, before its records: its MLPROF__CHUNK_* type,       \
   * its file offset and its length (the frame's header included), so that     \
   * a later mlprof__read_fd_chunks can read it again alone. */                \
  X(chunk, (void *ud, uint16_t type, uint64_t off, uint32_t len), type, off,   \
    len)                                                                       \
  /* Once per EVENTS chunk, before its records; dropped is cumulative. */      \
  X(events, (void *ud, uint32_t tid, uint64_t dropped), tid, dropped)          \
  X(span,                                                                      \
    (void *ud, uint32_t tid, uint32_t name, uint32_t depth, uint64_t begin,    \
     uint64_t end),                                                            \
    tid, name, depth, begin, end)                                              \
  X(span_meta, (void *ud, uint32_t tid, uint32_t key, uint32_t value), tid,    \
    key, value)                                                                \
  X(span_units, (void *ud, uint32_t tid, uint32_t name, uint64_t n), tid,      \
    name, n)                                                                   \
  X(counter, (void *ud, uint32_t tid, uint32_t name, uint64_t t, double v),    \
    tid, name, t, v)                                                           \
  X(units, (void *ud, uint32_t tid, uint32_t name, uint64_t t, uint64_t n),    \
    tid, name, t, n)                                                           \
  X(step, (void *ud, uint32_t tid, uint64_t t), tid, t)                        \
  /* The thread's step ends at t and none follows until its next step mark     \
   * (since 1.3). */                                                           \
  X(step_end, (void *ud, uint32_t tid, uint64_t t), tid, t)                    \
  X(open,                                                                      \
    (void *ud, uint32_t tid, uint32_t name, uint32_t depth, uint64_t begin),   \
    tid, name, depth, begin)                                                   \
  X(meta,                                                                      \
    (void *ud, const char *key, size_t klen, const char *value, size_t vlen),  \
    key, klen, value, vlen)                                                    \
  X(end, (void *ud, uint64_t end_ns, uint64_t dropped, uint64_t unmatched),    \
    end_ns, dropped, unmatched)                                                \
  /* A sampling source and whether it ran here (reason: why not). */           \
  X(source,                                                                    \
    (void *ud, const char *name, size_t nlen, int available,                   \
     const char *reason, size_t rlen),                                         \
    name, nlen, available, reason, rlen)                                       \
  X(sample, (void *ud, const mlprof__sample_row *row), row)                    \
  X(lines, (void *ud, const mlprof__line_table *t), t)                         \
  /* Interned stacks (since 1.5): an id may be used before the record that     \
   * defines it (an allocation's stack, a sample taken as the flush ran), at   \
   * most in the next STACKS chunk; consumers resolve ids after the read.      \
   * A node's parent id is always smaller than its own (0: no parent). */      \
  X(stack_func, (void *ud, const mlprof__stack_func *f), f)                    \
  X(stack_frame, (void *ud, const mlprof__stack_frame *f), f)                  \
  X(stack_node, (void *ud, uint32_t id, uint32_t parent, uint32_t frame), id,  \
    parent, frame)                                                             \
  X(stack_sample, (void *ud, const mlprof__stack_sample *s), s)                \
  /* The sampler's rate (samples per second), before the samples. */           \
  X(stack_rate, (void *ud, uint32_t hz), hz)                                   \
  /* An allocation, and the free of a recorded allocation's address (in a      \
   * file recorded with every allocation, of any address) (since 1.5). */      \
  X(alloc, (void *ud, const mlprof__alloc *a), a)                              \
  X(alloc_free, (void *ud, uint32_t tid, uint64_t t, uint64_t addr), tid, t,   \
    addr)                                                                      \
  /* Allocations made and freed within one flush, per site (since 1.5). */     \
  X(alloc_sum, (void *ud, const mlprof__alloc_sum *s), s)

/* Every callback may be NULL. Pointers passed in are valid only during the
 * call. A callback returning non-zero stops the read; mlprof__read_* then
 * returns that value. Every name id passed to a callback was announced by a
 * `name` callback earlier in the same file: an id whose entry was lost (a
 * damaged NAMES chunk) is announced when first used, named "name #ID", with
 * the kind its record needs; an id of the wrong kind is damage. Times are ns
 * since the profile's start. */
typedef struct {
  void *ud;
#define MLPROF__VISITOR_MEMBER(cb, params, ...) int(*cb) params;
  MLPROF__VISITOR_CALLBACKS(MLPROF__VISITOR_MEMBER)
#undef MLPROF__VISITOR_MEMBER
} mlprof__visitor;

/* A file as a read of it found it (its device, inode, size and time of
 * change; valid: they could be had), and how far from its start every chunk
 * was whole with its CRC right (checked_to, a file offset). */
typedef struct {
  int valid;
  uint64_t dev, ino, size;
  int64_t mtime_s, mtime_ns;
  uint64_t checked_to;
} mlprof__read_mark;

/* What a read found besides the data. */
typedef struct {
  uint64_t chunks;          /* whole, valid chunks read */
  uint64_t damaged_chunks;  /* chunks skipped (bad CRC or length, bad record) */
  uint64_t skipped_bytes;   /* bytes passed over to find the next chunk */
  uint64_t truncated_bytes; /* bytes of an incomplete chunk at the end */
  uint64_t lost_names;      /* ids used but never announced ("name #N") */
  uint64_t last_ns;         /* the latest time any record carries */
  int clean_end;            /* the last chunk read was an END chunk */
  int end_how, end_status;  /* from it: MLPROF__END_* (wire.h), status */
  char problem[256];        /* the first problem met, one line; "" if none */
  mlprof__read_mark mark;   /* a file's (mlprof__read_file_again) */
} mlprof__read_report;

/* Reads a whole file. Returns 0 (damage is not an error: it is described in
 * *rep), MLPROF_EIO when the file cannot be opened or read, MLPROF_EFORMAT
 * when it is not an mlprof profile or its major version is unsupported, or a
 * callback's non-zero value. err (may be NULL) gets a one-line reason. */
int mlprof__read_file(const char *path, const mlprof__visitor *v,
                      mlprof__read_report *rep, char *err, size_t errlen);

/* Reads a whole file again, as mlprof__read_file, after a read that left
 * mark m in its report: while the file is unchanged since (same device,
 * inode, size and time of change), the chunks m found whole and right are
 * not checked against their CRCs a second time (their records are checked
 * as ever: damage still shows). A changed file is checked throughout. */
int mlprof__read_file_again(const char *path, const mlprof__read_mark *m,
                            const mlprof__visitor *v, mlprof__read_report *rep,
                            char *err, size_t errlen);

/* Reads what opening a job needs of a file: its HEADER, META and END
 * chunks. Every other chunk is passed over by its length, neither read nor
 * checked, so the time and I/O do not grow with the events; *rep counts only
 * the chunks read (damage and a truncated tail in the chunks passed over go
 * unseen). Returns as mlprof__read_file. */
int mlprof__read_file_meta(const char *path, const mlprof__visitor *v,
                           mlprof__read_report *rep, char *err, size_t errlen);

/* Reads only the chunks at the n offsets offs (ascending; offsets met
 * through the chunk callback) of the profile open on fd, after checking its
 * file header: the chunks that announce the names the others use must be
 * among them. Every one must verify (frame and CRC): one that does not (the
 * file changed since) ends the read with MLPROF_EFORMAT and a reason in err.
 * No chunk is looked for elsewhere. Returns as mlprof__read_file. */
int mlprof__read_fd_chunks(int fd, const uint64_t *offs, size_t n,
                           const mlprof__visitor *v, mlprof__read_report *rep,
                           char *err, size_t errlen);

/* The same over bytes in memory (tests and the fuzzer). */
int mlprof__read_mem(const uint8_t *data, size_t len, const mlprof__visitor *v,
                     mlprof__read_report *rep, char *err, size_t errlen);

#endif
