/* mlprof's tables as Parquet files (docs/parquet.md): zones, steps and
 * findings from the analysis; spans (one file per profile), samples and
 * collectives streamed from the profiles in one more read of each. */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <mlprof.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../analyze/dist.h"
#include "../format/wire.h"
#include "escape.h"
#include "parquet.h"

/* ---- one output file ------------------------------------------------------
 */

/* The temporaries being written (six at most: a spans part, samples,
 * collectives, allocations, stack samples, stacks), so that a signal handler
 * can remove them. */
#define TEMPS 8
static char temps[TEMPS][4096 + 32];
static volatile sig_atomic_t temp_live[TEMPS];

void mlprof__parquet_unlink_temps(void) {
  for (int i = 0; i < TEMPS; i++)
    if (temp_live[i]) unlink(temps[i]);
}

static void temp_track(const char *path, int live) {
  for (int i = 0; i < TEMPS; i++)
    if (live && !temp_live[i]) {
      memcpy(temps[i], path, strlen(path) + 1);
      temp_live[i] = 1;
      return;
    } else if (!live && temp_live[i] && !strcmp(temps[i], path)) {
      temp_live[i] = 0;
      return;
    }
}

/* A file written as NAME.tmp-PID beside its final path and renamed there by
 * file_commit, so that no reader ever sees a partial table under its name. */
typedef struct {
  char path[4096], tmp[4096 + 32];
  int fd;
  mlprof__out o;
  mlprof__pq *w;
} pq_file;

static int file_open(pq_file *f, const char *dir, const char *name,
                     const mlprof__pq_column *cols, size_t ncols,
                     const char *table, const mlprof__parquet_opts *opts,
                     char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  if ((size_t)snprintf(f->path, sizeof f->path, "%s/%s", dir, name) >=
      sizeof f->path) {
    snprintf(err, errlen, "%s/%s: path too long", dir, name);
    return MLPROF_EINVAL;
  }
  snprintf(f->tmp, sizeof f->tmp, "%s.tmp-%ld", f->path, (long)getpid());
  /* Tracked before it exists: a signal between its creation and its
   * tracking would leave it behind. */
  temp_track(f->tmp, 1);
  f->fd =
      open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (f->fd < 0) {
    int e = errno;
    temp_track(f->tmp, 0);
    snprintf(err, errlen, "cannot create %s: %s", f->tmp, strerror(e));
    return MLPROF_EIO;
  }
  if (mlprof__out_open(&f->o, f->fd) ||
      !(f->w = mlprof__pq_open(&f->o, cols, ncols, &opts->pq))) {
    close(f->fd);
    temp_track(f->tmp, 0);
    unlink(f->tmp);
    f->fd = -1;
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  mlprof__pq_meta(f->w, "mlprof.schema", MLPROF__PARQUET_SCHEMA);
  mlprof__pq_meta(f->w, "mlprof.table", table);
  return 0;
}

/* Finishes the file and renames it into place; on error removes it. */
static int file_commit(pq_file *f, uint64_t *bytes, char *err, size_t errlen) {
  char why[160] = "";
  int rc = mlprof__pq_close(f->w, why, sizeof why);
  f->w = NULL;
  if (!rc) rc = mlprof__out_flush(&f->o);
  uint64_t size = mlprof__out_pos(&f->o);
  int sys = f->o.sys_errno;
  mlprof__out_close(&f->o);
  if (close(f->fd) && !rc) {
    rc = MLPROF_EIO;
    sys = errno;
  }
  f->fd = -1;
  if (!rc && rename(f->tmp, f->path)) {
    rc = MLPROF_EIO;
    sys = errno;
  }
  temp_track(f->tmp, 0);
  if (rc) {
    unlink(f->tmp);
    snprintf(err, errlen, "cannot write %s: %s", f->path,
             rc == MLPROF_EIO ? strerror(sys)
             : why[0]         ? why
                              : "out of memory");
    return rc;
  }
  if (bytes) *bytes += size;
  return 0;
}

static void file_abort(pq_file *f) {
  if (f->w) mlprof__pq_abort(f->w);
  f->w = NULL;
  if (f->fd >= 0) {
    mlprof__out_close(&f->o);
    close(f->fd);
    temp_track(f->tmp, 0);
    unlink(f->tmp);
  }
  f->fd = -1;
}

/* ---- strings ---------------------------------------------------------------
 */

/* s as valid UTF-8, through scratch. */
static void put_str(mlprof__pq *w, size_t col, mlprof__out *scratch,
                    const char *s, size_t n) {
  scratch->len = 0;
  mlprof__out_utf8(scratch, s, n);
  mlprof__pq_str(w, col, scratch->buf, scratch->len);
}

static void put_cstr(mlprof__pq *w, size_t col, mlprof__out *scratch,
                     const char *s) {
  if (s) put_str(w, col, scratch, s, strlen(s));
}

/* The columns every table of a process's rows starts with. */
enum { C_PROCESS, C_PID, C_RANK, C_HOST, C_FIRST };
#define PROCESS_COLUMNS                                                  \
  {"process", MLPROF__PQ_STRING, 0, 1}, {"pid", MLPROF__PQ_INT64, 0, 0}, \
      {"rank", MLPROF__PQ_INT64, 1, 0}, {                                \
    "host", MLPROF__PQ_STRING, 0, 1                                      \
  }

static void put_process(mlprof__pq *w, mlprof__out *scratch,
                        const mlprof__job_profile *p) {
  put_cstr(w, C_PROCESS, scratch, p->name ? p->name : "");
  mlprof__pq_i64(w, C_PID, (int64_t)p->pid);
  if (p->rank >= 0) mlprof__pq_i64(w, C_RANK, p->rank);
  put_cstr(w, C_HOST, scratch, p->hostname ? p->hostname : "");
}

/* ---- zones, steps, findings (from the analysis) ----------------------------
 */

static const mlprof__pq_column zone_cols[] = {
    {"zone", MLPROF__PQ_STRING, 0, 1},   {"category", MLPROF__PQ_STRING, 0, 1},
    {"count", MLPROF__PQ_INT64, 0, 0},   {"total_ns", MLPROF__PQ_INT64, 0, 0},
    {"self_ns", MLPROF__PQ_INT64, 0, 0}, {"mean_ns", MLPROF__PQ_INT64, 0, 0},
    {"std_ns", MLPROF__PQ_INT64, 0, 0},  {"min_ns", MLPROF__PQ_INT64, 0, 0},
    {"max_ns", MLPROF__PQ_INT64, 0, 0},  {"p50_ns", MLPROF__PQ_INT64, 0, 0},
    {"p90_ns", MLPROF__PQ_INT64, 0, 0},  {"p95_ns", MLPROF__PQ_INT64, 0, 0},
    {"p99_ns", MLPROF__PQ_INT64, 0, 0},  {"share", MLPROF__PQ_DOUBLE, 0, 0},
    {"outer_ns", MLPROF__PQ_INT64, 0, 0}};

static int write_zones(const mlprof__report *r, const char *dir,
                       const mlprof__parquet_opts *opts,
                       mlprof__parquet_result *res, mlprof__out *scratch,
                       char *err, size_t errlen) {
  pq_file f;
  int rc = file_open(&f, dir, "zones.parquet", zone_cols,
                     sizeof zone_cols / sizeof zone_cols[0], "zones", opts, err,
                     errlen);
  if (rc) return rc;
  for (size_t i = 0; i < r->norder && !rc; i++) {
    const mlprof__zone_stats *z = &r->zones[r->order[i]];
    put_str(f.w, 0, scratch, z->name, z->name_len);
    put_cstr(f.w, 1, scratch, mlprof_category_name(z->category));
    const uint64_t v[] = {z->count,
                          z->total_ns,
                          z->self_ns,
                          mlprof__round_ns(z->mean_ns),
                          mlprof__round_ns(z->std_ns),
                          z->min_ns,
                          z->max_ns,
                          z->p50_ns,
                          z->p90_ns,
                          z->p95_ns,
                          z->p99_ns};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
      mlprof__pq_i64(f.w, 2 + k, (int64_t)v[k]);
    mlprof__pq_f64(f.w, 13, z->share);
    mlprof__pq_i64(f.w, 14, (int64_t)z->outer_ns);
    rc = mlprof__pq_row(f.w);
  }
  res->zones = mlprof__pq_rows(f.w);
  if (rc) {
    file_abort(&f);
    snprintf(err, errlen, "out of memory");
    return rc;
  }
  return file_commit(&f, &res->bytes, err, errlen);
}

static const mlprof__pq_column step_cols[] = {
    PROCESS_COLUMNS,
    {"thread", MLPROF__PQ_INT64, 0, 0},
    {"step", MLPROF__PQ_INT64, 0, 0},
    {"start_ns", MLPROF__PQ_INT64, 0, MLPROF__PQ_DELTA},
    {"end_ns", MLPROF__PQ_INT64, 0, MLPROF__PQ_DELTA},
    {"dur_ns", MLPROF__PQ_INT64, 0, 0}};

static int write_steps(const mlprof__job *job, const mlprof__report *r,
                       const char *dir, const mlprof__parquet_opts *opts,
                       mlprof__parquet_result *res, mlprof__out *scratch,
                       char *err, size_t errlen) {
  pq_file f;
  int rc = file_open(&f, dir, "steps.parquet", step_cols,
                     sizeof step_cols / sizeof step_cols[0], "steps", opts, err,
                     errlen);
  if (rc) return rc;
  for (size_t p = 0; p < r->nprocs && p < job->count && !rc; p++) {
    const mlprof__marks *m = mlprof__report_marks(r, p);
    if (!m) continue;
    uint64_t tid = 0;
    for (size_t t = 0; t < r->nthreads; t++)
      if (&r->threads[t].marks == m) tid = r->threads[t].tid;
    mlprof__marks_cursor c;
    mlprof__marks_cursor_init(&c, m);
    uint64_t t, start = 0, step = 0;
    int end, in_step = 0;
    while (!rc && mlprof__marks_next(&c, &t, &end)) {
      if (in_step) {
        put_process(f.w, scratch, &job->profiles[p]);
        mlprof__pq_i64(f.w, C_FIRST, (int64_t)tid);
        mlprof__pq_i64(f.w, C_FIRST + 1, (int64_t)step++);
        mlprof__pq_i64(f.w, C_FIRST + 2, (int64_t)start);
        mlprof__pq_i64(f.w, C_FIRST + 3, (int64_t)t);
        mlprof__pq_i64(f.w, C_FIRST + 4, (int64_t)(t - start));
        rc = mlprof__pq_row(f.w);
      }
      in_step = !end;
      start = t;
    }
  }
  res->steps = mlprof__pq_rows(f.w);
  if (rc) {
    file_abort(&f);
    snprintf(err, errlen, "out of memory");
    return rc;
  }
  return file_commit(&f, &res->bytes, err, errlen);
}

static const mlprof__pq_column finding_cols[] = {
    {"rank", MLPROF__PQ_INT32, 0, 0},
    {"severity", MLPROF__PQ_DOUBLE, 0, 0},
    {"type", MLPROF__PQ_STRING, 0, 1},
    {"zone", MLPROF__PQ_STRING, 1, 1},
    {"flagged", MLPROF__PQ_STRING, 1, 1},
    {"summary", MLPROF__PQ_STRING, 0, 0},
    {"evidence", MLPROF__PQ_STRING, 0, 0},
    {"recommendation", MLPROF__PQ_STRING, 1, 1},
    {"note", MLPROF__PQ_STRING, 1, 1}};

static int write_findings(const mlprof__findings *fs, const char *dir,
                          const mlprof__parquet_opts *opts,
                          mlprof__parquet_result *res, mlprof__out *scratch,
                          char *err, size_t errlen) {
  pq_file f;
  int rc = file_open(&f, dir, "findings.parquet", finding_cols,
                     sizeof finding_cols / sizeof finding_cols[0], "findings",
                     opts, err, errlen);
  if (rc) return rc;
  mlprof__out ev;
  if (mlprof__out_open(&ev, -1)) {
    file_abort(&f);
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  for (size_t i = 0; fs && i < fs->nfindings && !rc; i++) {
    const mlprof__finding *x = &fs->findings[i];
    mlprof__pq_i32(f.w, 0, (int32_t)(i + 1));
    mlprof__pq_f64(f.w, 1, x->severity);
    put_cstr(f.w, 2, scratch, x->type);
    if (x->zone) put_str(f.w, 3, scratch, x->zone, x->zone_len);
    put_cstr(f.w, 4, scratch, x->flagged);
    put_cstr(f.w, 5, scratch, x->summary ? x->summary : "");
    /* The evidence as one JSON object, for json_extract and the like. */
    ev.len = 0;
    mlprof__out_lit(&ev, "{");
    for (size_t k = 0; k < x->nev; k++) {
      if (k) mlprof__out_lit(&ev, ",");
      mlprof__out_json_str(&ev, x->ev[k].key, strlen(x->ev[k].key));
      mlprof__out_lit(&ev, ":");
      mlprof__out_f64(&ev, x->ev[k].value);
    }
    mlprof__out_lit(&ev, "}");
    mlprof__pq_str(f.w, 6, ev.buf, ev.len);
    put_cstr(f.w, 7, scratch, x->recommendation);
    put_cstr(f.w, 8, scratch, x->note);
    rc = mlprof__pq_row(f.w);
  }
  if (ev.err && !rc) rc = MLPROF_ENOMEM;
  mlprof__out_close(&ev);
  res->findings = mlprof__pq_rows(f.w);
  if (rc) {
    file_abort(&f);
    snprintf(err, errlen, "out of memory");
    return rc;
  }
  return file_commit(&f, &res->bytes, err, errlen);
}

static const mlprof__pq_column site_cols[] = {
    {"pid", MLPROF__PQ_INT64, 0, 0},
    {"zone", MLPROF__PQ_STRING, 0, 1},
    {"stack", MLPROF__PQ_INT64, 1, 0},
    {"python", MLPROF__PQ_STRING, 0, 0},
    {"native", MLPROF__PQ_STRING, 0, 0},
    {"allocated_bytes", MLPROF__PQ_INT64, 0, 0},
    {"count", MLPROF__PQ_INT64, 0, 0},
    {"at_peak_bytes", MLPROF__PQ_INT64, 0, 0},
    {"live_end_bytes", MLPROF__PQ_INT64, 0, 0},
    {"leak", MLPROF__PQ_INT32, 0, 0},
    {"bytes_per_step", MLPROF__PQ_DOUBLE, 0, 0}};

static int write_sites(const mlprof__job *job, const mlprof__report *r,
                       const char *dir, const mlprof__parquet_opts *opts,
                       mlprof__parquet_result *res, mlprof__out *scratch,
                       char *err, size_t errlen) {
  pq_file f;
  int rc = file_open(&f, dir, "memory_sites.parquet", site_cols,
                     sizeof site_cols / sizeof site_cols[0], "memory_sites",
                     opts, err, errlen);
  if (rc) return rc;
  const mlprof__memory *m = &r->mem;
  for (size_t i = 0; i < m->nsites && !rc; i++) {
    const mlprof__mem_site *x = &m->sites[i];
    const mlprof__mem_zone *z = &m->zones[x->zone];
    mlprof__pq_i64(
        f.w, 0, x->proc < job->count ? (int64_t)job->profiles[x->proc].pid : 0);
    put_str(f.w, 1, scratch, z->name, z->name_len);
    if (x->stack) mlprof__pq_i64(f.w, 2, (int64_t)x->stack);
    put_cstr(f.w, 3, scratch, x->python ? x->python : "");
    put_cstr(f.w, 4, scratch, x->native ? x->native : "");
    mlprof__pq_i64(f.w, 5, (int64_t)x->alloc_bytes);
    mlprof__pq_i64(f.w, 6, (int64_t)x->alloc_count);
    mlprof__pq_i64(f.w, 7, (int64_t)x->at_peak);
    mlprof__pq_i64(f.w, 8, (int64_t)x->live_end);
    mlprof__pq_i32(f.w, 9, x->leak != 0);
    mlprof__pq_f64(f.w, 10, x->slope);
    rc = mlprof__pq_row(f.w);
  }
  res->memory_sites = mlprof__pq_rows(f.w);
  if (rc) {
    file_abort(&f);
    snprintf(err, errlen, "out of memory");
    return rc;
  }
  return file_commit(&f, &res->bytes, err, errlen);
}

/* ---- spans, samples, collectives (streamed) --------------------------------
 */

static const mlprof__pq_column span_cols[] = {
    PROCESS_COLUMNS,
    {"thread", MLPROF__PQ_INT64, 0, 0},
    {"thread_name", MLPROF__PQ_STRING, 1, 1},
    {"zone", MLPROF__PQ_STRING, 0, 1},
    {"category", MLPROF__PQ_STRING, 0, 1},
    {"start_ns", MLPROF__PQ_INT64, 0, MLPROF__PQ_DELTA},
    {"dur_ns", MLPROF__PQ_INT64, 0, 0},
    {"self_ns", MLPROF__PQ_INT64, 0, 0},
    {"step", MLPROF__PQ_INT64, 1, 0},
    {"depth", MLPROF__PQ_INT32, 0, 0},
    {"meta", MLPROF__PQ_STRING, 1, 0}};
enum {
  S_THREAD = C_FIRST,
  S_THREAD_NAME,
  S_ZONE,
  S_CATEGORY,
  S_START,
  S_DUR,
  S_SELF,
  S_STEP,
  S_DEPTH,
  S_META
};

static const mlprof__pq_column sample_cols[] = {
    PROCESS_COLUMNS,
    {"time_ns", MLPROF__PQ_INT64, 0, MLPROF__PQ_DELTA},
    {"subject", MLPROF__PQ_STRING, 0, 1},
    {"id", MLPROF__PQ_INT64, 0, 0},
    {"label", MLPROF__PQ_STRING, 1, 1},
    {"measure", MLPROF__PQ_STRING, 0, 1},
    {"value", MLPROF__PQ_DOUBLE, 1, 0},
    {"absent", MLPROF__PQ_STRING, 1, 1}};

static const mlprof__pq_column coll_cols[] = {
    PROCESS_COLUMNS,
    {"thread", MLPROF__PQ_INT64, 0, 0},
    {"zone", MLPROF__PQ_STRING, 0, 1},
    {"op", MLPROF__PQ_STRING, 0, 1},
    {"grp", MLPROF__PQ_STRING, 1, 1},
    {"seq", MLPROF__PQ_INT64, 1, 0},
    {"bytes", MLPROF__PQ_INT64, 1, 0},
    {"peer", MLPROF__PQ_INT64, 1, 0},
    {"root", MLPROF__PQ_INT64, 1, 0},
    {"start_ns", MLPROF__PQ_INT64, 0, MLPROF__PQ_DELTA},
    {"end_ns", MLPROF__PQ_INT64, 0, MLPROF__PQ_DELTA},
    {"dur_ns", MLPROF__PQ_INT64, 0, 0},
    {"step", MLPROF__PQ_INT64, 1, 0}};
enum {
  K_THREAD = C_FIRST,
  K_ZONE,
  K_OP,
  K_GROUP,
  K_SEQ,
  K_BYTES,
  K_PEER,
  K_ROOT,
  K_START,
  K_END,
  K_DUR,
  K_STEP
};

static const mlprof__pq_column alloc_cols[] = {
    PROCESS_COLUMNS,
    {"thread", MLPROF__PQ_INT64, 0, 0},
    {"time_ns", MLPROF__PQ_INT64, 0, MLPROF__PQ_DELTA},
    {"size", MLPROF__PQ_INT64, 0, 0},
    {"weight", MLPROF__PQ_INT64, 0, 0},
    {"address", MLPROF__PQ_INT64, 0, 0},
    {"zone", MLPROF__PQ_STRING, 1, 1},
    {"stack", MLPROF__PQ_INT64, 1, 0},
    {"step", MLPROF__PQ_INT64, 1, 0},
    {"count", MLPROF__PQ_INT64, 0, 0}};

static const mlprof__pq_column ssample_cols[] = {
    PROCESS_COLUMNS,
    {"thread", MLPROF__PQ_INT64, 0, 0},
    {"time_ns", MLPROF__PQ_INT64, 0, MLPROF__PQ_DELTA},
    {"weight_ns", MLPROF__PQ_INT64, 0, 0},
    {"on_cpu", MLPROF__PQ_INT32, 0, 0},
    {"cpu_ns", MLPROF__PQ_INT64, 1, 0},
    {"stack", MLPROF__PQ_INT64, 1, 0},
    {"step", MLPROF__PQ_INT64, 1, 0}};

static const mlprof__pq_column stack_cols[] = {
    PROCESS_COLUMNS,
    {"stack", MLPROF__PQ_INT64, 0, 0},
    {"parent", MLPROF__PQ_INT64, 1, 0},
    {"depth", MLPROF__PQ_INT32, 0, 0},
    {"function", MLPROF__PQ_STRING, 0, 1},
    {"file", MLPROF__PQ_STRING, 0, 1},
    {"line", MLPROF__PQ_INT64, 1, 0},
    {"native", MLPROF__PQ_INT32, 0, 0},
    {"folded", MLPROF__PQ_STRING, 0, 0}};

/* A stack definition of the profile being read (a function, a frame or a
 * node, by its kind): a, b, c as the visitor gave them, strings in the
 * arena. */
typedef struct {
  uint8_t kind; /* 0 function, 1 frame, 2 node */
  uint32_t id, a, b;
  int native;
  size_t s1, l1, s2, l2; /* function: file, name; frame: module, symbol */
} pq_def;

typedef struct {
  size_t off, len; /* in the arena */
  uint8_t kind, category;
} pq_name;

typedef struct {
  uint64_t tid;
  uint64_t *child; /* summed durations of ended spans per depth */
  size_t child_cap, child_top;
  const char *name; /* the report's, or NULL */
  size_t name_len;
  /* Its last span, whose metadata and units may follow (even in its next
   * chunk): written when its next span comes, or at the profile's end. */
  int pending;
  uint32_t pname, pdepth;
  uint64_t pbegin, pend, pself;
  mlprof__out meta; /* the JSON object being built, open */
  size_t nmeta;
  uint32_t group;                 /* the group's name id, or MLPROF__NONE */
  int64_t seq, bytes, peer, root; /* -1: none */
  int sampled;                    /* a stack sample was seen: last_sample */
  uint64_t last_sample;           /* its last stack sample's time */
} pq_thread;

/* Deeper spans than this get their whole duration as self time (as the
 * statistics do: a damaged depth must not size an array). */
#define MAX_DEPTH 4096

typedef struct {
  const mlprof__job_profile *p;
  const mlprof__report *r;
  size_t proc;
  mlprof__out *scratch;
  pq_file spans, samples, colls, allocs, ssamples, stacks;
  /* names of the profile being read, as valid UTF-8; its process's name
   * and host first, at these offsets */
  mlprof__out arena;
  size_t proc_off, proc_len, host_off, host_len;
  pq_name *names;
  size_t nnames, ncap;
  mlprof__map ids;
  /* its threads */
  pq_thread *th;
  size_t nth, thcap;
  mlprof__map tids;
  /* its process's step marks (job time), decoded */
  uint64_t *mt;
  uint8_t *mend;
  size_t nm, mcap;
  /* its interned stacks: functions, frames, nodes by id */
  pq_def *defs;
  size_t ndefs, dcap;
  mlprof__map funcs, frames, nodes;
  double interval; /* the stack sampler's, ns */
  int err;
} pq_pass;

static const pq_name *name_of(const pq_pass *s, uint32_t id) {
  uint32_t at = mlprof__map_get(&s->ids, id);
  return at == MLPROF__NONE ? NULL : &s->names[at];
}

static int v_name(void *ud, const mlprof__name *n) {
  pq_pass *s = ud;
  if (s->nnames >= MLPROF__NONE - 1 ||
      mlprof__grow(&s->names, &s->ncap, s->nnames + 1, sizeof *s->names) ||
      mlprof__map_put(&s->ids, n->id, (uint32_t)s->nnames))
    return MLPROF_ENOMEM;
  size_t off = s->arena.len;
  mlprof__out_utf8(&s->arena, n->name, n->name_len);
  if (s->arena.err) return MLPROF_ENOMEM;
  s->names[s->nnames++] =
      (pq_name){off, s->arena.len - off, n->kind, n->category};
  return 0;
}

static pq_thread *thread_of(pq_pass *s, uint32_t tid) {
  uint32_t at = mlprof__map_get(&s->tids, tid);
  if (at != MLPROF__NONE) return &s->th[at];
  if (mlprof__grow(&s->th, &s->thcap, s->nth + 1, sizeof *s->th) ||
      mlprof__map_put(&s->tids, tid, (uint32_t)s->nth))
    return NULL;
  pq_thread *t = &s->th[s->nth];
  memset(t, 0, sizeof *t);
  if (mlprof__out_open(&t->meta, -1)) return NULL;
  s->nth++;
  t->tid = tid;
  for (size_t i = 0; s->r && i < s->r->nthreads; i++)
    if (s->r->threads[i].proc == s->proc && s->r->threads[i].tid == tid &&
        s->r->threads[i].name_len) {
      t->name = s->r->threads[i].name;
      t->name_len = s->r->threads[i].name_len;
    }
  return t;
}

/* The step (index of the process's step marks) that job time t falls in,
 * or -1 when it falls in none. */
typedef struct {
  const uint64_t *t;
  uint64_t at;
} time_key;

static int time_at_or_before(const void *ctx, size_t i) {
  const time_key *k = ctx;
  return k->t[i] <= k->at;
}

static int64_t step_at(const pq_pass *s, uint64_t t) {
  /* the first entry after t */
  size_t lo =
      mlprof__lower_bound(0, s->nm, &(time_key){s->mt, t}, time_at_or_before);
  if (!lo || s->mend[lo - 1]) return -1;
  return (int64_t)s->mt[s->nm + lo - 1];
}

/* The columns process, pid, rank, host of the profile being read. */
static void put_proc(pq_pass *s, mlprof__pq *w) {
  mlprof__pq_str(w, C_PROCESS, s->arena.buf + s->proc_off, s->proc_len);
  mlprof__pq_i64(w, C_PID, (int64_t)s->p->pid);
  if (s->p->rank >= 0) mlprof__pq_i64(w, C_RANK, s->p->rank);
  mlprof__pq_str(w, C_HOST, s->arena.buf + s->host_off, s->host_len);
}

/* Writes thread t's pending span (and its collective row). */
static void flush_span(pq_pass *s, pq_thread *t) {
  if (!t->pending) return;
  t->pending = 0;
  const pq_name *nm = name_of(s, t->pname);
  const char *zone = nm ? s->arena.buf + nm->off : "";
  size_t zlen = nm ? nm->len : 0;
  uint8_t cat = nm ? nm->category : 0;
  uint64_t b = mlprof__job_time(s->p, t->pbegin);
  uint64_t e = mlprof__job_time(s->p, t->pend);
  uint64_t dur = t->pend > t->pbegin ? t->pend - t->pbegin : 0;
  int64_t step = step_at(s, b);
  mlprof__pq *w = s->spans.w;
  put_proc(s, w);
  mlprof__pq_i64(w, S_THREAD, (int64_t)t->tid);
  if (t->name) put_str(w, S_THREAD_NAME, s->scratch, t->name, t->name_len);
  mlprof__pq_str(w, S_ZONE, zone, zlen);
  put_cstr(w, S_CATEGORY, s->scratch, mlprof_category_name(cat));
  mlprof__pq_i64(w, S_START, (int64_t)b);
  mlprof__pq_i64(w, S_DUR, (int64_t)dur);
  mlprof__pq_i64(w, S_SELF, (int64_t)t->pself);
  if (step >= 0) mlprof__pq_i64(w, S_STEP, step);
  mlprof__pq_i32(w, S_DEPTH,
                 (int32_t)(t->pdepth > INT32_MAX ? INT32_MAX : t->pdepth));
  if (t->nmeta) {
    mlprof__out_lit(&t->meta, "}");
    if (t->meta.err) s->err = MLPROF_ENOMEM;
    mlprof__pq_str(w, S_META, t->meta.buf, t->meta.len);
  }
  int rc = mlprof__pq_row(w);
  const pq_name *g = t->group != MLPROF__NONE ? name_of(s, t->group) : NULL;
  int coll = cat == MLPROF_CAT_COMM || t->seq >= 0 || g;
  if (!rc && coll && s->colls.w) {
    mlprof__pq *c = s->colls.w;
    put_proc(s, c);
    mlprof__pq_i64(c, K_THREAD, (int64_t)t->tid);
    mlprof__pq_str(c, K_ZONE, zone, zlen);
    put_cstr(c, K_OP, s->scratch, mlprof__op_name(mlprof__op_of(zone, zlen)));
    if (g) mlprof__pq_str(c, K_GROUP, s->arena.buf + g->off, g->len);
    if (t->seq >= 0) mlprof__pq_i64(c, K_SEQ, t->seq);
    if (t->bytes >= 0) mlprof__pq_i64(c, K_BYTES, t->bytes);
    if (t->peer >= 0) mlprof__pq_i64(c, K_PEER, t->peer);
    if (t->root >= 0) mlprof__pq_i64(c, K_ROOT, t->root);
    mlprof__pq_i64(c, K_START, (int64_t)b);
    mlprof__pq_i64(c, K_END, (int64_t)e);
    mlprof__pq_i64(c, K_DUR, (int64_t)dur);
    if (step >= 0) mlprof__pq_i64(c, K_STEP, step);
    rc = mlprof__pq_row(c);
  }
  if (rc && !s->err) s->err = rc;
}

static void flush_all(pq_pass *s) {
  for (size_t i = 0; i < s->nth; i++) flush_span(s, &s->th[i]);
}

static int v_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                  uint64_t begin, uint64_t end) {
  pq_pass *s = ud;
  pq_thread *t = thread_of(s, tid);
  if (!t) return MLPROF_ENOMEM;
  flush_span(s, t);
  if (s->err) return s->err;
  uint64_t dur = end > begin ? end - begin : 0, self = dur;
  /* Self time as the statistics count it (stats.c): the children ended
   * just before, their durations summed at child[depth + 1]. */
  if (depth < MAX_DEPTH) {
    if (mlprof__grow(&t->child, &t->child_cap, (size_t)depth + 2,
                     sizeof *t->child))
      return MLPROF_ENOMEM;
    for (size_t k = t->child_top; k < (size_t)depth + 2; k++) t->child[k] = 0;
    uint64_t children = t->child[depth + 1];
    self = dur > children ? dur - children : 0;
    t->child[depth] += dur;
    t->child_top = (size_t)depth + 1;
  }
  t->pending = 1;
  t->pname = name;
  t->pdepth = depth;
  t->pbegin = begin;
  t->pend = end;
  t->pself = self;
  t->meta.len = 0;
  t->nmeta = 0;
  t->group = MLPROF__NONE;
  t->seq = t->bytes = t->peer = t->root = -1;
  return 0;
}

static int64_t parse_i64(const char *v, size_t n) {
  char b[32];
  if (!n || n >= sizeof b) return -1;
  memcpy(b, v, n);
  b[n] = 0;
  char *end;
  long long x = strtoll(b, &end, 10);
  return *end || x < 0 ? -1 : (int64_t)x;
}

/* Adds "key": to the pending span's metadata object. */
static void meta_key(pq_thread *t, const char *k, size_t klen) {
  mlprof__out_str(&t->meta, t->nmeta++ ? "," : "{");
  mlprof__out_json_str(&t->meta, k, klen);
  mlprof__out_lit(&t->meta, ":");
}

/* The thread of tid with a span pending, or NULL. */
static pq_thread *pending_of(pq_pass *s, uint32_t tid) {
  uint32_t at = mlprof__map_get(&s->tids, tid);
  return at != MLPROF__NONE && s->th[at].pending ? &s->th[at] : NULL;
}

static int v_span_meta(void *ud, uint32_t tid, uint32_t key, uint32_t value) {
  pq_pass *s = ud;
  pq_thread *t = pending_of(s, tid);
  const pq_name *k = name_of(s, key), *v = name_of(s, value);
  if (!t || !k || !v) return 0;
  const char *ks = s->arena.buf + k->off, *vs = s->arena.buf + v->off;
  meta_key(t, ks, k->len);
  mlprof__out_json_str(&t->meta, vs, v->len);
  if ((k->len == 5 && !memcmp(ks, "group", 5)) ||
      (k->len == 4 && !memcmp(ks, "comm", 4)))
    t->group = value;
  else if (k->len == 4 && !memcmp(ks, "peer", 4))
    t->peer = parse_i64(vs, v->len);
  else if (k->len == 4 && !memcmp(ks, "root", 4))
    t->root = parse_i64(vs, v->len);
  return t->meta.err;
}

static int v_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  pq_pass *s = ud;
  pq_thread *t = pending_of(s, tid);
  const pq_name *u = name_of(s, name);
  if (!t || !u) return 0;
  const char *us = s->arena.buf + u->off;
  meta_key(t, us, u->len);
  mlprof__out_u64(&t->meta, n);
  int64_t v = n > INT64_MAX ? INT64_MAX : (int64_t)n;
  if (u->len == 5 && !memcmp(us, "bytes", 5)) t->bytes = v;
  if (u->len == 3 && !memcmp(us, "seq", 3)) t->seq = v;
  return t->meta.err;
}

/* A zone still open at the end follows every span of its thread. */
static int v_open(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                  uint64_t begin) {
  pq_pass *s = ud;
  pq_thread *t = pending_of(s, tid);
  if (t) flush_span(s, t);
  return s->err;
}

static int v_sample(void *ud, const mlprof__sample_row *row) {
  pq_pass *s = ud;
  static const char *const subjects[] = {"system", "process", "gpu"};
  mlprof__pq *w = s->samples.w;
  const pq_name *label = row->label ? name_of(s, row->label) : NULL;
  for (uint32_t i = 0; i < row->n && !s->err; i++) {
    const mlprof__sample_measure *m = &row->m[i];
    const pq_name *mn = name_of(s, m->name);
    put_proc(s, w);
    mlprof__pq_i64(w, C_FIRST, (int64_t)mlprof__job_time(s->p, row->t));
    put_cstr(w, C_FIRST + 1, s->scratch,
             row->subject < 3 ? subjects[row->subject] : "unknown");
    mlprof__pq_i64(w, C_FIRST + 2, (int64_t)row->id);
    if (label)
      mlprof__pq_str(w, C_FIRST + 3, s->arena.buf + label->off, label->len);
    if (mn)
      mlprof__pq_str(w, C_FIRST + 4, s->arena.buf + mn->off, mn->len);
    else
      put_cstr(w, C_FIRST + 4, s->scratch, "");
    if (m->valid) {
      mlprof__pq_f64(w, C_FIRST + 5, m->value);
    } else {
      const pq_name *why = name_of(s, m->reason);
      if (why)
        mlprof__pq_str(w, C_FIRST + 6, s->arena.buf + why->off, why->len);
      else
        put_cstr(w, C_FIRST + 6, s->scratch, "unknown");
    }
    int rc = mlprof__pq_row(w);
    if (rc) s->err = rc;
  }
  return s->err;
}

/* ---- allocations and stack samples (streamed) -------------------------------
 */

/* One row: an allocation (count 1), or a site's allocations made and freed
 * within one flush (address 0). */
static int alloc_row(pq_pass *s, const mlprof__alloc *a, uint64_t count) {
  mlprof__pq *w = s->allocs.w;
  uint64_t t = mlprof__job_time(s->p, a->t);
  put_proc(s, w);
  mlprof__pq_i64(w, C_FIRST, (int64_t)a->tid);
  mlprof__pq_i64(w, C_FIRST + 1, (int64_t)t);
  mlprof__pq_i64(w, C_FIRST + 2, (int64_t)a->size);
  mlprof__pq_i64(w, C_FIRST + 3, (int64_t)a->weight);
  mlprof__pq_i64(w, C_FIRST + 4, (int64_t)a->addr);
  const pq_name *z = a->zone ? name_of(s, a->zone) : NULL;
  if (z) mlprof__pq_str(w, C_FIRST + 5, s->arena.buf + z->off, z->len);
  if (a->stack) mlprof__pq_i64(w, C_FIRST + 6, (int64_t)a->stack);
  int64_t step = step_at(s, t);
  if (step >= 0) mlprof__pq_i64(w, C_FIRST + 7, step);
  mlprof__pq_i64(w, C_FIRST + 8, (int64_t)count);
  int rc = mlprof__pq_row(w);
  if (rc && !s->err) s->err = rc;
  return s->err;
}

static int v_alloc(void *ud, const mlprof__alloc *a) {
  return alloc_row(ud, a, 1);
}

static int v_alloc_sum(void *ud, const mlprof__alloc_sum *u) {
  mlprof__alloc a = {u->tid, u->t, u->size, u->weight, 0, u->zone, u->stack};
  return alloc_row(ud, &a, u->count);
}

static int v_stack_rate(void *ud, uint32_t hz) {
  pq_pass *s = ud;
  if (hz) s->interval = 1e9 / hz;
  return 0;
}

/* Longest time a stack sample stands for (as the hot functions count it,
 * src/analyze/hot.c): a longer gap stands for one interval. */
#define MAX_WEIGHT_NS 1000000000u

static int v_stack_sample(void *ud, const mlprof__stack_sample *x) {
  pq_pass *s = ud;
  pq_thread *t = thread_of(s, x->tid);
  if (!t) return MLPROF_ENOMEM;
  uint64_t ns = (uint64_t)s->interval;
  if (t->sampled && x->t > t->last_sample) ns = x->t - t->last_sample;
  if (ns > MAX_WEIGHT_NS) ns = (uint64_t)s->interval;
  t->sampled = 1;
  t->last_sample = x->t;
  mlprof__pq *w = s->ssamples.w;
  uint64_t jt = mlprof__job_time(s->p, x->t);
  put_proc(s, w);
  mlprof__pq_i64(w, C_FIRST, (int64_t)x->tid);
  mlprof__pq_i64(w, C_FIRST + 1, (int64_t)jt);
  mlprof__pq_i64(w, C_FIRST + 2, (int64_t)ns);
  mlprof__pq_i32(w, C_FIRST + 3, (x->flags & MLPROF__SAMPLE_ON_CPU) != 0);
  if (x->flags & MLPROF__SAMPLE_CPU_KNOWN)
    mlprof__pq_i64(w, C_FIRST + 4, (int64_t)x->cpu_ns);
  if (x->stack) mlprof__pq_i64(w, C_FIRST + 5, x->stack);
  int64_t step = step_at(s, jt);
  if (step >= 0) mlprof__pq_i64(w, C_FIRST + 6, step);
  int rc = mlprof__pq_row(w);
  if (rc && !s->err) s->err = rc;
  return s->err;
}

/* Keeps a stack definition (the first of an id wins, as in hot.c). */
static int put_def(pq_pass *s, mlprof__map *ix, pq_def d) {
  if (mlprof__map_get(ix, d.id) != MLPROF__NONE) return 0;
  if (s->ndefs >= MLPROF__NONE - 1 ||
      mlprof__grow(&s->defs, &s->dcap, s->ndefs + 1, sizeof *s->defs) ||
      mlprof__map_put(ix, d.id, (uint32_t)s->ndefs))
    return MLPROF_ENOMEM;
  s->defs[s->ndefs++] = d;
  return 0;
}

/* Appends the C string to the arena as UTF-8: its offset and length. */
static void arena_str(pq_pass *s, const char *str, size_t *off, size_t *len) {
  *off = s->arena.len;
  mlprof__out_utf8(&s->arena, str, strlen(str));
  *len = s->arena.len - *off;
}

static int v_stack_func(void *ud, const mlprof__stack_func *f) {
  pq_pass *s = ud;
  pq_def d = {.kind = 0, .id = f->id, .a = f->first_line};
  arena_str(s, f->file, &d.s1, &d.l1);
  arena_str(s, f->function, &d.s2, &d.l2);
  return s->arena.err ? MLPROF_ENOMEM : put_def(s, &s->funcs, d);
}

static int v_stack_frame(void *ud, const mlprof__stack_frame *f) {
  pq_pass *s = ud;
  pq_def d = {
      .kind = 1, .id = f->id, .a = f->func, .b = f->line, .native = f->native};
  if (f->native) {
    const char *slash = strrchr(f->module, '/');
    arena_str(s, slash ? slash + 1 : f->module, &d.s1, &d.l1);
    char name[512];
    arena_str(s, mlprof__native_name(f, name, sizeof name), &d.s2, &d.l2);
  }
  return s->arena.err ? MLPROF_ENOMEM : put_def(s, &s->frames, d);
}

static int v_stack_node(void *ud, uint32_t id, uint32_t parent,
                        uint32_t frame) {
  pq_pass *s = ud;
  return put_def(s, &s->nodes,
                 (pq_def){.kind = 2, .id = id, .a = parent, .b = frame});
}

static const pq_def *def_of(const pq_pass *s, const mlprof__map *ix,
                            uint32_t id) {
  uint32_t at = mlprof__map_get(ix, id);
  return at == MLPROF__NONE ? NULL : &s->defs[at];
}

/* A frame's function, file and line (-1: none) as the stacks table shows
 * them; native 1 for a native frame. */
static void frame_parts(const pq_pass *s, uint32_t frame, const char **fn,
                        size_t *fnl, const char **file, size_t *filel,
                        int64_t *line, int *native) {
  const pq_def *f = def_of(s, &s->frames, frame);
  *fn = "<unknown>", *file = "?", *line = -1, *native = 0;
  *fnl = strlen(*fn), *filel = 1;
  if (!f) return;
  if (f->native) {
    *native = 1;
    *fn = s->arena.buf + f->s2, *fnl = f->l2;
    *file = s->arena.buf + f->s1, *filel = f->l1;
    return;
  }
  if (!f->a) {
    *fn = "<truncated>", *fnl = strlen(*fn), *file = "", *filel = 0;
    return;
  }
  *line = f->b;
  const pq_def *fu = def_of(s, &s->funcs, f->a);
  if (!fu) return;
  *fn = s->arena.buf + fu->s2, *fnl = fu->l2;
  *file = s->arena.buf + fu->s1, *filel = fu->l1;
}

/* The stacks table's rows of the profile just read: one per node, its leaf
 * frame and the whole stack folded, outermost first, ';' between frames. */
static int write_stacks(pq_pass *s) {
  mlprof__out folded;
  if (mlprof__out_open(&folded, -1)) return MLPROF_ENOMEM;
  enum { MAX_STACK = 1100 };
  uint32_t chain[MAX_STACK];
  int rc = 0;
  for (size_t i = 0; i < s->ndefs && !rc; i++) {
    const pq_def *d = &s->defs[i];
    if (d->kind != 2) continue;
    size_t n = 0;
    for (const pq_def *x = d; x && n < MAX_STACK;
         x = x->a && x->a < x->id ? def_of(s, &s->nodes, x->a) : NULL)
      chain[n++] = x->b;
    folded.len = 0;
    for (size_t k = n; k-- > 0;) {
      const char *fn, *file;
      size_t fnl, filel;
      int64_t line;
      int native;
      frame_parts(s, chain[k], &fn, &fnl, &file, &filel, &line, &native);
      if (k + 1 < n) mlprof__out_lit(&folded, ";");
      mlprof__out_write(&folded, fn, fnl);
      if (filel) {
        mlprof__out_lit(&folded, " (");
        mlprof__out_write(&folded, file, filel);
        if (line >= 0) mlprof__out_printf(&folded, ":%lld", (long long)line);
        mlprof__out_lit(&folded, ")");
      }
    }
    const char *fn, *file;
    size_t fnl, filel;
    int64_t line;
    int native;
    frame_parts(s, d->b, &fn, &fnl, &file, &filel, &line, &native);
    mlprof__pq *w = s->stacks.w;
    put_proc(s, w);
    mlprof__pq_i64(w, C_FIRST, d->id);
    if (d->a) mlprof__pq_i64(w, C_FIRST + 1, d->a);
    mlprof__pq_i32(w, C_FIRST + 2, (int32_t)n);
    mlprof__pq_str(w, C_FIRST + 3, fn, fnl);
    mlprof__pq_str(w, C_FIRST + 4, file, filel);
    if (line >= 0) mlprof__pq_i64(w, C_FIRST + 5, line);
    mlprof__pq_i32(w, C_FIRST + 6, native);
    mlprof__pq_str(w, C_FIRST + 7, folded.buf, folded.len);
    rc = folded.err ? MLPROF_ENOMEM : mlprof__pq_row(w);
  }
  mlprof__out_close(&folded);
  return rc;
}

/* Decodes the step marks of the process being read: entry times in mt[0..nm)
 * and, after them in mt[nm..2nm), each entry's step index (for a mark). */
static int load_marks(pq_pass *s) {
  s->nm = 0;
  const mlprof__marks *m = s->r && s->proc < s->r->nprocs
                               ? mlprof__report_marks(s->r, s->proc)
                               : NULL;
  if (!m) return 0;
  size_t n = (size_t)(m->marks + m->ends);
  if (mlprof__grow(&s->mt, &s->mcap, n * 2 + 1, sizeof *s->mt)) return -1;
  free(s->mend);
  s->mend = malloc(n + 1);
  if (!s->mend) return -1;
  mlprof__marks_cursor c;
  mlprof__marks_cursor_init(&c, m);
  uint64_t t;
  int end;
  size_t k = 0;
  while (k < n && mlprof__marks_next(&c, &t, &end)) {
    s->mt[k] = t;
    s->mend[k] = (uint8_t)end;
    k++;
  }
  s->nm = k;
  int64_t step = 0;
  for (size_t i = 0; i < k; i++)
    s->mt[k + i] = s->mend[i] ? (uint64_t)-1 : (uint64_t)step++;
  return 0;
}

static void pass_reset(pq_pass *s) {
  for (size_t i = 0; i < s->nth; i++) {
    free(s->th[i].child);
    mlprof__out_close(&s->th[i].meta);
  }
  s->nth = 0;
  mlprof__map_clear(&s->tids);
  mlprof__map_clear(&s->ids);
  s->nnames = 0;
  s->arena.len = 0;
  mlprof__map_clear(&s->funcs);
  mlprof__map_clear(&s->frames);
  mlprof__map_clear(&s->nodes);
  s->ndefs = 0;
  s->interval = 1e7;
}

static void pass_free(pq_pass *s) {
  pass_reset(s);
  free(s->th);
  free(s->names);
  free(s->mt);
  free(s->mend);
  free(s->defs);
  mlprof__out_close(&s->arena);
}

/* Removes spans/part-NNNNN.parquet files of an earlier export into the same
 * directory whose NNNNN is count or more: readers take every part. */
static void remove_stale_parts(const char *sub, size_t count) {
  DIR *d = opendir(sub);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t n = strlen(e->d_name), idx = 0;
    if (n != strlen("part-00000.parquet") || strncmp(e->d_name, "part-", 5) ||
        strcmp(e->d_name + 10, ".parquet"))
      continue;
    int digits = 1;
    for (int i = 5; i < 10; i++) {
      digits &= e->d_name[i] >= '0' && e->d_name[i] <= '9';
      idx = idx * 10 + (size_t)(e->d_name[i] - '0');
    }
    if (!digits || idx < count) continue;
    char path[4096 + 64];
    snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
}

static int write_streamed(const mlprof__job *job, const mlprof__report *r,
                          const char *dir, const mlprof__parquet_opts *opts,
                          mlprof__parquet_result *res, mlprof__out *scratch,
                          char *err, size_t errlen) {
  char sub[4096];
  if ((size_t)snprintf(sub, sizeof sub, "%s/spans", dir) >= sizeof sub) {
    snprintf(err, errlen, "%s: path too long", dir);
    return MLPROF_EINVAL;
  }
  if (mkdir(sub, 0755) && errno != EEXIST) {
    snprintf(err, errlen, "cannot create %s: %s", sub, strerror(errno));
    return MLPROF_EIO;
  }
  mlprof__filtered *fd = NULL;
  char warn[256];
  if (opts->filter &&
      mlprof__filter_prepare(opts->filter, job, 1, &fd, warn, sizeof warn)) {
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  mlprof__filter_read fr = {0};
  pq_pass s = {.r = r, .scratch = scratch};
  s.spans.fd = s.samples.fd = s.colls.fd = -1;
  s.allocs.fd = s.ssamples.fd = s.stacks.fd = -1;
  if (mlprof__out_open(&s.arena, -1)) {
    pass_free(&s);
    mlprof__filtered_free(fd);
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  int rc = file_open(&s.samples, dir, "samples.parquet", sample_cols,
                     sizeof sample_cols / sizeof sample_cols[0], "samples",
                     opts, err, errlen);
  if (!rc)
    rc = file_open(&s.colls, dir, "collectives.parquet", coll_cols,
                   sizeof coll_cols / sizeof coll_cols[0], "collectives", opts,
                   err, errlen);
  if (!rc)
    rc = file_open(&s.allocs, dir, "allocations.parquet", alloc_cols,
                   sizeof alloc_cols / sizeof alloc_cols[0], "allocations",
                   opts, err, errlen);
  if (!rc)
    rc = file_open(&s.ssamples, dir, "stack_samples.parquet", ssample_cols,
                   sizeof ssample_cols / sizeof ssample_cols[0],
                   "stack_samples", opts, err, errlen);
  if (!rc)
    rc = file_open(&s.stacks, dir, "stacks.parquet", stack_cols,
                   sizeof stack_cols / sizeof stack_cols[0], "stacks", opts,
                   err, errlen);
  const mlprof__visitor v = {.ud = &s,
                             .name = v_name,
                             .span = v_span,
                             .span_meta = v_span_meta,
                             .span_units = v_span_units,
                             .open = v_open,
                             .sample = v_sample,
                             .alloc = v_alloc,
                             .alloc_sum = v_alloc_sum,
                             .stack_rate = v_stack_rate,
                             .stack_func = v_stack_func,
                             .stack_frame = v_stack_frame,
                             .stack_node = v_stack_node,
                             .stack_sample = v_stack_sample};
  for (size_t i = 0; i < job->count && !rc; i++) {
    const mlprof__job_profile *p = &job->profiles[i];
    char name[64];
    snprintf(name, sizeof name, "spans/part-%05zu.parquet", i);
    rc = file_open(&s.spans, dir, name, span_cols,
                   sizeof span_cols / sizeof span_cols[0], "spans", opts, err,
                   errlen);
    if (rc) break;
    char pid[32];
    snprintf(pid, sizeof pid, "%llu", (unsigned long long)p->pid);
    mlprof__pq_meta(s.spans.w, "mlprof.pid", pid);
    mlprof__pq_meta(s.spans.w, "mlprof.profile", p->path);
    pass_reset(&s);
    s.p = p;
    s.proc = i;
    const char *pn = p->name ? p->name : "",
               *hn = p->hostname ? p->hostname : "";
    mlprof__out_utf8(&s.arena, pn, strlen(pn));
    s.proc_len = s.arena.len;
    s.host_off = s.arena.len;
    mlprof__out_utf8(&s.arena, hn, strlen(hn));
    s.host_len = s.arena.len - s.host_off;
    if (load_marks(&s)) {
      rc = MLPROF_ENOMEM;
      snprintf(err, errlen, "out of memory");
      break;
    }
    mlprof__read_report rep;
    memset(&rep, 0, sizeof rep);
    char why[256] = "";
    mlprof__visitor fv = v;
    if (fd) mlprof__filter_visitor(fd, i, &fr, &v, &fv);
    int rd = mlprof__read_file(p->path, &fv, &rep, why, sizeof why);
    flush_all(&s);
    if (!s.err) s.err = write_stacks(&s);
    if (res->reads) res->reads[i] = rep;
    if (rd && !s.err && rd != MLPROF_ENOMEM && res->read_errors)
      snprintf(res->read_errors[i], sizeof res->read_errors[i], "%s", why);
    if (s.err || rd == MLPROF_ENOMEM) {
      rc = s.err ? s.err : MLPROF_ENOMEM;
      snprintf(err, errlen, "%s",
               rc == MLPROF_EIO ? "cannot write the spans" : "out of memory");
      break;
    }
    res->spans += mlprof__pq_rows(s.spans.w);
    rc = file_commit(&s.spans, &res->bytes, err, errlen);
    res->span_files += !rc;
  }
  if (!rc) remove_stale_parts(sub, job->count);
  if (!rc) {
    res->samples = mlprof__pq_rows(s.samples.w);
    res->collectives = mlprof__pq_rows(s.colls.w);
    res->allocations = mlprof__pq_rows(s.allocs.w);
    res->stack_samples = mlprof__pq_rows(s.ssamples.w);
    res->stacks = mlprof__pq_rows(s.stacks.w);
    rc = file_commit(&s.samples, &res->bytes, err, errlen);
    if (!rc) rc = file_commit(&s.colls, &res->bytes, err, errlen);
    if (!rc) rc = file_commit(&s.allocs, &res->bytes, err, errlen);
    if (!rc) rc = file_commit(&s.ssamples, &res->bytes, err, errlen);
    if (!rc) rc = file_commit(&s.stacks, &res->bytes, err, errlen);
  }
  file_abort(&s.spans);
  file_abort(&s.allocs);
  file_abort(&s.ssamples);
  file_abort(&s.stacks);
  file_abort(&s.samples);
  file_abort(&s.colls);
  pass_free(&s);
  mlprof__filter_read_free(&fr);
  mlprof__filtered_free(fd);
  return rc;
}

int mlprof__export_parquet(const mlprof__job *job, const mlprof__report *r,
                           const mlprof__findings *f, const char *dir,
                           const mlprof__parquet_opts *opts,
                           mlprof__parquet_result *res, char *err,
                           size_t errlen) {
  mlprof__parquet_opts dflt = {0};
  if (!opts) opts = &dflt;
  mlprof__out scratch;
  if (mlprof__out_open(&scratch, -1)) {
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  int rc = write_zones(r, dir, opts, res, &scratch, err, errlen);
  if (!rc) rc = write_steps(job, r, dir, opts, res, &scratch, err, errlen);
  if (!rc) rc = write_findings(f, dir, opts, res, &scratch, err, errlen);
  if (!rc) rc = write_sites(job, r, dir, opts, res, &scratch, err, errlen);
  if (!rc) rc = write_streamed(job, r, dir, opts, res, &scratch, err, errlen);
  mlprof__out_close(&scratch);
  return rc;
}
