/* The session: one per process. Starts from mlprof_init() or, when the
 * library is preloaded or linked and MLPROF_OUTPUT is set, by itself; ends at
 * mlprof_shutdown(), at exit, or on a fatal signal, always flushing first.
 * A child made by fork() gets a profile of its own on its first event. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../format/wire.h"
#include "../sample/sample.h"
#include "internal.h"
#include "stack.h"

MLPROF__HIDDEN pthread_mutex_t mlprof__meta_lock = PTHREAD_MUTEX_INITIALIZER;
MLPROF__HIDDEN _Atomic int mlprof__child_pending;

static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;
static mlprof__writer *_Atomic writer;
static mlprof__sampler *sampler;
static pid_t sample_tree;
static int want_enabled = 1;
static mlprof_config config;   /* of the running session, for forked children */
static char base_output[4096]; /* the output, absolute: directory or file */
static char path[4096];        /* this process's profile file */

/* ---- metadata ----------------------------------------------------------- */

static struct { char *key, *value; } * meta;
static size_t nmeta, meta_cap;
static int meta_dirty;

void mlprof_meta(const char *key, const char *value) {
  if (!key || !value) return;
  pthread_mutex_lock(&mlprof__meta_lock);
  size_t i = 0;
  while (i < nmeta && strcmp(meta[i].key, key) != 0) i++;
  if (i == nmeta) {
    char *k = strdup(key);
    if (!k || mlprof__grow(&meta, &meta_cap, nmeta + 1, sizeof *meta)) {
      free(k);
      goto out;
    }
    meta[nmeta].key = k;
    meta[nmeta++].value = NULL;
  }
  char *v = strdup(value);
  if (v) {
    free(meta[i].value);
    meta[i].value = v;
    meta_dirty = 1;
  }
out:
  pthread_mutex_unlock(&mlprof__meta_lock);
}

size_t mlprof__meta_take(uint8_t **out) {
  size_t len = 0;
  pthread_mutex_lock(&mlprof__meta_lock);
  if (meta_dirty) {
    size_t cap = 10;
    for (size_t i = 0; i < nmeta; i++)
      cap += 20 + strlen(meta[i].key) + strlen(meta[i].value);
    uint8_t *b = malloc(cap), *p = b;
    if (b) {
      p = mlprof__put_uv(p, nmeta);
      for (size_t i = 0; i < nmeta; i++)
        for (int j = 0; j < 2; j++) {
          const char *s = j ? meta[i].value : meta[i].key;
          size_t n = strlen(s);
          p = mlprof__put_uv(p, n);
          memcpy(p, s, n);
          p += n;
        }
      len = (size_t)(p - b);
      *out = b;
      meta_dirty = 0;
    }
  }
  pthread_mutex_unlock(&mlprof__meta_lock);
  return len;
}

/* ---- configuration ------------------------------------------------------ */

/* The defaults, the one copy (include/mlprof.h says them too). */
void mlprof_config_init(mlprof_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  cfg->flush_interval_ms = 200;
  cfg->memory_cap = 64u << 20;
  cfg->enabled = 1;
  cfg->sample_interval_ms = 100;
  cfg->stacks_hz = 100;
}

void mlprof__session_sample_tree(pid_t pid) { sample_tree = pid; }

static unsigned long env_ulong(const char *name, unsigned long dflt) {
  const char *v = mlprof__env(name);
  char *end;
  if (!v || !*v) return dflt;
  errno = 0;
  unsigned long n = strtoul(v, &end, 10);
  if (errno || *end) {
    mlprof__warn_once(NULL, "ignoring %s=%s: not a number", name, v);
    return dflt;
  }
  return n;
}

/* MLPROF_STACKS: samples of every thread's stack per second, or off (0);
 * 100 when unset. "HZ,native" or "native" (100 a second) add native
 * frames (*flags gets MLPROF_STACKS_NATIVE). */
static int stacks_from_env(uint64_t *flags) {
  const char *v = mlprof__env(MLPROF__ENV_STACKS);
  *flags = 0;
  if (v && (strcmp(v, "off") == 0 || strcmp(v, "0") == 0)) return -1;
  if (v && strcmp(v, "native") == 0) {
    *flags = MLPROF_STACKS_NATIVE;
    return 100;
  }
  const char *comma = v ? strchr(v, ',') : NULL;
  if (comma) {
    char *end;
    errno = 0;
    unsigned long hz = strtoul(v, &end, 10);
    if (errno || end != comma || end == v || strcmp(comma + 1, "native")) {
      mlprof__warn_once(NULL, "ignoring %s=%s: not HZ, HZ,native or off",
                        MLPROF__ENV_STACKS, v);
      return 100;
    }
    if (hz == 0) return -1;
    *flags = MLPROF_STACKS_NATIVE;
    return hz > 10000 ? 10000 : (int)hz;
  }
  unsigned long hz = env_ulong(MLPROF__ENV_STACKS, 100);
  return hz == 0 ? -1 : hz > 10000 ? 10000 : (int)hz;
}

/* The config the environment asks for (mlprof run and friends). */
static void config_from_env(mlprof_config *cfg) {
  mlprof_config_init(cfg);
  cfg->output = mlprof__env(MLPROF__ENV_OUTPUT);
  cfg->flush_interval_ms =
      (uint32_t)env_ulong(MLPROF__ENV_FLUSH_MS, cfg->flush_interval_ms);
  cfg->memory_cap =
      (size_t)env_ulong(MLPROF__ENV_MEMORY_MB, cfg->memory_cap >> 20) << 20;
  cfg->enabled = env_ulong("MLPROF_ENABLED", 1) != 0;
  unsigned long ms =
      env_ulong(MLPROF__ENV_SAMPLE_MS, (unsigned long)cfg->sample_interval_ms);
  cfg->sample_interval_ms = ms == 0 ? -1 : ms > 3600000 ? 3600000 : (int)ms;
  cfg->no_gpu = env_ulong("MLPROF_GPU", 1) == 0;
  cfg->stacks_hz = stacks_from_env(&cfg->stacks_flags);
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Whether p names a file that cannot hold profiles: a device, FIFO or
 * socket (MLPROF_OUTPUT=/dev/null). Such an output records nothing: writing
 * there, or beside it, is never what was meant. */
static int is_special(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

/* The output as given, when it was relative, for src/intercept/exec.c. */
static char given_output[sizeof base_output];

/* output made absolute, from the working directory now: a process that
 * changes directory later, and its children, still write where it was
 * meant. Left relative when the working directory cannot be named. */
static int absolute(char *out, size_t cap, const char *output) {
  char cwd[PATH_MAX];
  int n;
  if (output[0] != '/' && getcwd(cwd, sizeof cwd))
    n = snprintf(out, cap, "%s/%s", cwd[1] ? cwd : "", output);
  else
    n = snprintf(out, cap, "%s", output);
  return n >= 0 && (size_t)n < cap ? 0 : -1;
}

const char *mlprof__session_output_for(const char *value) {
  return given_output[0] && strcmp(value, given_output) == 0 ? base_output
                                                             : NULL;
}

/* This process's file for an output that is a directory or a file path. A
 * forked child (child = 1) of a file-path session writes FILE-PID.mlprof, as
 * does a program that a profiled process started with exec; the n-th image
 * of a chain of execs adds -execN. */
MLPROF__HIDDEN unsigned mlprof__exec_seq;

/* Whether this process image was started by an exec of a process that was
 * being profiled (MLPROF_EXEC=PID.SEQ, set by src/intercept/exec.c, names
 * this pid: another pid's value was inherited from an ancestor). Sets
 * mlprof__exec_seq. */
static int exec_started(void) {
  const char *v = mlprof__env(MLPROF__ENV_EXEC);
  char *end;
  if (!v) return 0;
  long pid = strtol(v, &end, 10);
  if (pid != (long)getpid() || *end != '.') return 0;
  unsigned long seq = strtoul(end + 1, &end, 10);
  if (*end || seq > 1000000) return 0;
  mlprof__exec_seq = (unsigned)seq;
  return 1;
}

/* Where this process's profile goes, for an output that is a directory or a
 * file path: path gets the file's path and *leaf the offset in path of the
 * name to create in its directory (a file path: 0). A directory is created
 * when missing; the writer thread opens it, never through a symbolic link (a
 * link planted where a program run as root writes its profiles would send
 * them anywhere). No descriptor is opened here, in the program's thread. */
static int resolve_path(const char *output, int child, size_t *leaf) {
  size_t len = strlen(output);
  *leaf = 0;
  if (len == 0) return MLPROF_EINVAL;
  /* Each image of a chain of execs has a file of its own. */
  char seq[24] = "";
  if (mlprof__exec_seq) snprintf(seq, sizeof seq, "-exec%u", mlprof__exec_seq);
  if (output[len - 1] == '/' || is_dir(output)) {
    char dir[sizeof path];
    size_t dlen = len;
    while (dlen > 1 && output[dlen - 1] == '/') dlen--; /* a / follows links */
    if (dlen >= sizeof dir) return MLPROF_EINVAL;
    memcpy(dir, output, dlen);
    dir[dlen] = 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return MLPROF_EIO;
    char prog[64];
    snprintf(prog, sizeof prog, "%s", program_invocation_short_name);
    for (char *c = prog; *c; c++)
      if (!(*c == '.' || *c == '-' || *c == '_' || (*c >= '0' && *c <= '9') ||
            ((*c | 32) >= 'a' && (*c | 32) <= 'z')))
        *c = '_';
    int n = snprintf(path, sizeof path, "%s/", dir[1] ? dir : "");
    *leaf = (size_t)n;
    n = snprintf(path + n, sizeof path - (size_t)n, "%s-%d%s.mlprof",
                 prog[0] ? prog : "prog", (int)getpid(), seq);
    return n < (int)(sizeof path - *leaf) ? 0 : MLPROF_EINVAL;
  }
  if (!child) {
    int n = snprintf(path, sizeof path, "%s", output);
    return n < (int)sizeof path ? 0 : MLPROF_EINVAL;
  }
  int stem = (int)len;
  if (len > 7 && strcmp(output + len - 7, ".mlprof") == 0) stem -= 7;
  int n = snprintf(path, sizeof path, "%.*s-%d%s.mlprof", stem, output,
                   (int)getpid(), seq);
  return n < (int)sizeof path ? 0 : MLPROF_EINVAL;
}

/* ---- signals, exit, fork ------------------------------------------------ */

static pid_t owner; /* the process whose profile the session writes */
#define FINAL_WAIT_MS 2000

/* Stands in for the program's SIG_DFL of the signals that end a process
 * (src/intercept/signal.c): finish the file, so open zones are recorded too,
 * then die of the same signal with the default action, whoever sent it. A
 * vfork child, or a child made without fork handlers, shares or copies the
 * session's memory, not its file: it flushes nothing. */
static void on_signal(int sig, siginfo_t *info, void *ctx) {
  (void)info;
  (void)ctx;
  int saved_errno = errno;
  if (owner == getpid())
    mlprof__writer_flush_from_signal(atomic_load(&writer), MLPROF__END_SIGNAL,
                                     sig, FINAL_WAIT_MS);
  errno = saved_errno;
  mlprof__signals_die(sig);
}

/* 64 KiB, or more where the machine's signal frames need it (AVX-512). */
static size_t altstack_size(void) {
  long min = sysconf(_SC_MINSIGSTKSZ);
  size_t size = 64u << 10;
  return min > 0 && (size_t)min * 4 > size ? (size_t)min * 4 : size;
}

void *mlprof__altstack_setup(void) {
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0 || !(cur.ss_flags & SS_DISABLE))
    return NULL; /* the program has one: leave it */
  size_t size = altstack_size();
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) return NULL;
  stack_t st = {.ss_sp = p, .ss_size = size, .ss_flags = 0};
  if (sigaltstack(&st, NULL) != 0) {
    munmap(p, size);
    return NULL;
  }
  return p;
}

void mlprof__altstack_free(void *stack) {
  if (!stack) return;
  stack_t cur, off = {.ss_flags = SS_DISABLE};
  if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == stack)
    sigaltstack(&off, NULL); /* else the program replaced it: keep theirs */
  munmap(stack, altstack_size());
}

/* ---- exec and _exit (src/intercept/exec.c) ------------------------------ */

int mlprof__session_here(void) { return owner == getpid(); }

int mlprof__session_before_exec(void) {
  mlprof__writer *w = atomic_load(&writer);
  if (owner != getpid()) return -1; /* a vfork child */
  if (!w) return atomic_load(&mlprof__child_pending) ? 0 : -1;
  mlprof__writer_flush_from_signal(w, MLPROF__END_EXEC, 0, FINAL_WAIT_MS);
  return (int)mlprof__exec_seq + 1;
}

void mlprof__session_exec_failed(void) {
  mlprof__writer *w = atomic_load(&writer);
  if (w && owner == getpid()) mlprof__writer_resume(w);
}

void mlprof__session_before_exit(int status) {
  if (owner == getpid())
    mlprof__writer_flush_from_signal(atomic_load(&writer), MLPROF__END_EXIT,
                                     status & 0xff, FINAL_WAIT_MS);
}

static int session_end(int how, int status);

/* Set where a process that is not the session's ran the exit handlers: a
 * vfork child that called exit() spent them in the memory it shares with
 * the session's process, which will run none at its own exit. */
static _Atomic int handlers_spent;

static void at_exit(int status, void *arg) {
  (void)arg;
  if (owner != getpid())
    atomic_store(&handlers_spent, 1);
  else
    session_end(MLPROF__END_EXIT, status & 0xff);
}

void mlprof__session_exit_spent(int status) {
  if (atomic_load(&handlers_spent))
    session_end(MLPROF__END_EXIT, status & 0xff);
}

static void fork_prepare(void) {
  pthread_mutex_lock(&session_lock);
  pthread_mutex_lock(&mlprof__meta_lock);
  pthread_mutex_lock(&mlprof__intern_lock);
  pthread_mutex_lock(&mlprof__pool_lock);
  mlprof__signals_fork_prepare();
}

static void fork_parent(void) {
  mlprof__signals_fork_parent();
  pthread_mutex_unlock(&mlprof__pool_lock);
  pthread_mutex_unlock(&mlprof__intern_lock);
  pthread_mutex_unlock(&mlprof__meta_lock);
  pthread_mutex_unlock(&session_lock);
}

static void fork_child(void) {
  /* What the handler frees is the parent's: not recorded, and no event may
   * register this thread before the child's profile is pending (its first
   * event starts it). */
  int quiet = mlprof__quiet;
  mlprof__quiet = 1;
  owner = getpid();
  mlprof__env_copy(); /* the child's: what its parent set before fork */
  mlprof__signals_fork_child();
  pthread_mutex_unlock(&mlprof__intern_lock);
  pthread_mutex_unlock(&mlprof__meta_lock);
  pthread_mutex_unlock(&session_lock);
  mlprof__buffers_after_fork(); /* re-initialises the pool lock */
  mlprof__stacks_after_fork();
  mlprof__lines_after_fork();
  mlprof__writer *w = atomic_exchange(&writer, NULL);
  if (!w) {
    mlprof__quiet = quiet;
    return;
  }
  /* The parent's writer and sampler threads do not exist here (their memory
   * is left: the sampler's mutex may be held by a thread that is gone); the
   * file is the parent's. The child's own profile starts on its first event,
   * so a child that only execs leaves no empty file behind. */
  sampler = NULL;
  mlprof__writer_abandon(w);
  meta_dirty = 1;
  atomic_store(&mlprof__child_pending, 1);
  mlprof__quiet = quiet;
}

static void process_hooks(void) {
  mlprof__signals_take(on_signal);
  on_exit(at_exit, NULL);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- sessions ----------------------------------------------------------- */

/* Resolves output, creates the file and starts the writer for config;
 * session_lock held. */
static int session_start(const char *output, int child) {
  mlprof__writer *w;
  size_t leaf;
  mlprof__stacks_rewind(); /* a new file: every stack defined again */
  int rc = resolve_path(output, child, &leaf);
  if (rc == 0)
    rc = mlprof__writer_open(&w, path, sizeof path, leaf,
                             config.flush_interval_ms);
  if (rc != 0) return rc;
  if (config.sample_interval_ms > 0) {
    const char *root = mlprof__env("MLPROF_SYSFS_ROOT");
    mlprof__sample_sink sink;
    mlprof__writer_sink(w, &sink);
    rc = mlprof__sampler_start(&sampler, &sink,
                               (uint32_t)config.sample_interval_ms, sample_tree,
                               root, config.no_gpu);
    if (rc != 0) {
      sampler = NULL;
      mlprof__warn_once(NULL, "cannot start the sampler: %s; recording goes on",
                        mlprof_strerror(rc));
    }
  }
  owner = getpid();
  atomic_store(&writer, w);
  atomic_store(&mlprof__on, want_enabled);
  if (config.stacks_hz > 0 &&
      (rc = mlprof__stacks_start(
           config.stacks_hz,
           (config.stacks_flags & MLPROF_STACKS_NATIVE) != 0)))
    mlprof__warn_once(NULL,
                      "cannot start the stack sampler: %s; recording goes on",
                      mlprof_strerror(rc));
  return 0;
}

int mlprof_init(const mlprof_config *cfg) {
  static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;
  mlprof_config c;
  mlprof__env_copy(); /* what the program set since the library loaded */
  if (cfg) {
    /* A caller built against an older, smaller struct: its fields over the
     * defaults. Anything else but this struct's own size is not a config. */
    if (cfg->size < offsetof(mlprof_config, reserved) || cfg->size > sizeof c)
      return MLPROF_EINVAL;
    mlprof_config_init(&c);
    memcpy(&c, cfg, cfg->size);
    for (size_t i = 0; i < sizeof c.reserved / sizeof c.reserved[0]; i++)
      if (c.reserved[i]) return MLPROF_EINVAL;
    if (c.stacks_flags & ~(uint64_t)MLPROF_STACKS_NATIVE) return MLPROF_EINVAL;
  } else {
    config_from_env(&c);
  }
  /* Fields left 0 take the defaults. */
  mlprof_config dflt_cfg;
  mlprof_config_init(&dflt_cfg);
  if (!c.flush_interval_ms) c.flush_interval_ms = dflt_cfg.flush_interval_ms;
  if (!c.memory_cap) c.memory_cap = dflt_cfg.memory_cap;
  if (!c.sample_interval_ms) c.sample_interval_ms = dflt_cfg.sample_interval_ms;
  pthread_mutex_lock(&session_lock);
  int rc = MLPROF_EALREADY;
  if (atomic_load(&writer) || atomic_load(&mlprof__child_pending)) goto out;
  char dflt[64];
  snprintf(dflt, sizeof dflt, "mlprof-%d.mlprof", (int)getpid());
  const char *output = c.output ? c.output : mlprof__env(MLPROF__ENV_OUTPUT);
  if (!output || !*output) output = dflt;
  rc = MLPROF_EINVAL;
  if (is_special(output)) {
    errno = EINVAL;
    goto out;
  }
  if (absolute(base_output, sizeof base_output, output) != 0) goto out;
  snprintf(given_output, sizeof given_output, "%s",
           output[0] == '/' ? "" : output);
  config = c;
  config.output = base_output;
  const char *mem = mlprof__env(MLPROF__ENV_MEMORY);
  if (mem && *mem) {
    int mode = MLPROF__MEM_SAMPLED;
    uint64_t mean = atomic_load(&mlprof__mem_mean);
    if (mlprof__mem_parse(mem, &mode, &mean) == 0) {
      atomic_store(&mlprof__mem_mean, mean);
      atomic_store(&mlprof__mem_mode, mode);
    } else {
      mlprof__warn_once(NULL,
                        "ignoring MLPROF_MEMORY=%s (off, all, sampled or "
                        "sampled:BYTES)",
                        mem);
    }
  }
  want_enabled = c.enabled;
  mlprof__clock_setup();
  mlprof__pool_configure(c.memory_cap);
  rc = session_start(base_output, exec_started());
  if (rc == 0) pthread_once(&hooks_once, process_hooks);
out:
  pthread_mutex_unlock(&session_lock);
  return rc;
}

void mlprof__session_child_start(void) {
  pthread_mutex_lock(&session_lock);
  if (atomic_exchange(&mlprof__child_pending, 0)) {
    int rc = session_start(base_output, 1);
    if (rc != 0) {
      atomic_store(&mlprof__on, 0);
      mlprof__warn_once(NULL, "cannot start the profile of this child: %s",
                        mlprof_strerror(rc));
    }
  }
  pthread_mutex_unlock(&session_lock);
}

int mlprof_shutdown(void) { return session_end(MLPROF__END_SHUTDOWN, 0); }

static void (*_Atomic before_end)(void);

uint32_t mlprof__session_flush_ms(void) {
  return config.flush_interval_ms ? config.flush_interval_ms : 200;
}

void mlprof__session_before_end(void (*fn)(void)) {
  atomic_store(&before_end, fn);
}

void mlprof__session_source(const char *name, int available,
                            const char *reason) {
  pthread_mutex_lock(&session_lock);
  mlprof__writer *w = atomic_load(&writer);
  if (w) {
    mlprof__sample_sink sink;
    mlprof__writer_sink(w, &sink);
    sink.source(sink.ctx, name, available, reason);
  }
  pthread_mutex_unlock(&session_lock);
}

/* Stops the session, its file's END saying how the process ends. Only in
 * the process whose session it is: a vfork child, or a child made without
 * fork handlers (_Fork, clone, syscall(SYS_fork)), that calls exit() leaves
 * its parent's profile alone and waits for no thread of the parent's (none
 * runs in such a child). */
static int session_end(int how, int status) {
  if (owner != getpid()) return MLPROF_ENOTSTARTED;
  void (*fn)(void) = atomic_exchange(&before_end, NULL);
  if (fn) fn();
  pthread_mutex_lock(&session_lock);
  atomic_store(&mlprof__child_pending, 0);
  if (sampler) {
    mlprof__sampler_stop(sampler);
    sampler = NULL;
  }
  mlprof__stacks_stop();
  mlprof__writer *w = atomic_exchange(&writer, NULL);
  int rc = MLPROF_ENOTSTARTED;
  if (w) {
    atomic_store(&mlprof__on, 0);
    rc = mlprof__writer_close(w, how, status);
  }
  pthread_mutex_unlock(&session_lock);
  mlprof__fd_stderr("", 0); /* what the library's threads could not say */
  return rc;
}

int mlprof_flush(void) {
  if (owner != getpid()) return MLPROF_ENOTSTARTED; /* see session_end */
  pthread_mutex_lock(&session_lock);
  mlprof__writer *w = atomic_load(&writer);
  int rc = w ? mlprof__writer_flush(w) : MLPROF_ENOTSTARTED;
  pthread_mutex_unlock(&session_lock);
  return rc;
}

int mlprof_track_spans(const char *track, const mlprof_span *spans, size_t n) {
  if (!track || !*track || (n && !spans)) return MLPROF_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (!spans[i].site || !spans[i].site->name ||
        spans[i].end_ns < spans[i].begin_ns || spans[i].reserved[0] ||
        spans[i].reserved[1])
      return MLPROF_EINVAL;
  /* A forked child's profile starts on its first event: this is one. */
  if (atomic_load(&mlprof__child_pending)) mlprof__session_child_start();
  if (owner != getpid()) return MLPROF_ENOTSTARTED; /* see session_end */
  pthread_mutex_lock(&session_lock);
  mlprof__writer *w = atomic_load(&writer);
  int rc = w ? mlprof__writer_spans(w, track, spans, n) : MLPROF_ENOTSTARTED;
  pthread_mutex_unlock(&session_lock);
  return rc;
}

/* A function key of the stack tables for a frame given by name (file,
 * function): FNV-1a of both, its top bit set (a walker's keys mix a code
 * object's address; the bit keeps them apart in practice), never 0. */
static uint64_t frame_key(const char *file, const char *function) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = file; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  h = (h ^ 0xff) * 1099511628211ull;
  for (const char *p = function; *p; p++)
    h = (h ^ (uint8_t)*p) * 1099511628211ull;
  return h | 1ull << 63;
}

/* The stack id of frames[0..n) (innermost first), interned; 0 when none or
 * a table is full. */
static uint32_t frames_stack(const mlprof_frame *fr, size_t n) {
  static uint32_t ids[MLPROF__STACK_MAX_DEPTH]; /* under session_lock */
  if (n > MLPROF__STACK_MAX_DEPTH) n = MLPROF__STACK_MAX_DEPTH;
  for (size_t i = 0; i < n; i++) {
    const char *file = fr[i].file ? fr[i].file : "";
    const char *fn = fr[i].function ? fr[i].function : "";
    uint64_t key = frame_key(file, fn);
    uint32_t f = mlprof__stack_func_find(key);
    if (!f) f = mlprof__stack_func_add(key, file, fn, 0);
    ids[i] = mlprof__stack_frame_py(f, fr[i].line);
  }
  return mlprof__stack_intern(ids, n);
}

int mlprof_track_allocs(const char *track, const char *zone,
                        const mlprof_alloc *allocs, size_t n) {
  if (!track || !*track || !zone || !*zone || (n && !allocs))
    return MLPROF_EINVAL;
  for (size_t i = 0; i < n; i++) {
    const mlprof_alloc *a = &allocs[i];
    if ((a->nframes && !a->frames) || a->reserved[0] || a->reserved[1])
      return MLPROF_EINVAL;
    for (size_t k = 0; k < a->nframes && k < MLPROF__STACK_MAX_DEPTH; k++)
      if (a->frames[k].reserved) return MLPROF_EINVAL;
  }
  if (atomic_load(&mlprof__child_pending)) mlprof__session_child_start();
  if (owner != getpid()) return MLPROF_ENOTSTARTED; /* see session_end */
  const mlprof_site *site = mlprof_site_intern(zone, MLPROF_CAT_NONE);
  mlprof__ext_alloc *e = malloc((n ? n : 1) * sizeof *e);
  /* Each distinct frames array interned once: an open-addressed table from
   * its address to its stack id. */
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  struct {
    const mlprof_frame *fr;
    size_t n;
    uint32_t id;
  } *seen = calloc(cap, sizeof *seen);
  if (!site || !e || !seen) {
    free(e);
    free(seen);
    return MLPROF_ENOMEM;
  }
  pthread_mutex_lock(&session_lock);
  mlprof__writer *w = atomic_load(&writer);
  int rc = MLPROF_ENOTSTARTED;
  if (w) {
    for (size_t i = 0; i < n; i++) {
      const mlprof_alloc *a = &allocs[i];
      uint32_t stack = 0;
      if (a->size && a->nframes) {
        size_t h =
            (size_t)(((uintptr_t)a->frames >> 4) * 0x9e3779b97f4a7c15ull);
        for (h &= cap - 1;; h = (h + 1) & (cap - 1)) {
          if (!seen[h].fr) {
            seen[h].fr = a->frames;
            seen[h].n = a->nframes;
            seen[h].id = frames_stack(a->frames, a->nframes);
          }
          if (seen[h].fr == a->frames && seen[h].n == a->nframes) break;
        }
        stack = seen[h].id;
      }
      e[i] = (mlprof__ext_alloc){a->time_ns, a->address, a->size, stack};
    }
    rc = mlprof__writer_allocs(w, track, site, e, n);
  }
  pthread_mutex_unlock(&session_lock);
  free(e);
  free(seen);
  return rc;
}

const char *mlprof_output_path(void) {
  return atomic_load(&writer) ? path : NULL;
}

void mlprof_set_enabled(int on) {
  pthread_mutex_lock(&session_lock);
  want_enabled = on != 0;
  atomic_store(&mlprof__on,
               want_enabled && (atomic_load(&writer) ||
                                atomic_load(&mlprof__child_pending)));
  pthread_mutex_unlock(&session_lock);
}

int mlprof_is_enabled(void) { return atomic_load(&mlprof__on); }

#ifdef MLPROF_AUTOSTART
/* Preloaded by `mlprof run`, or linked into a program started with
 * MLPROF_OUTPUT set: record without a code change. libmlprof (shared and
 * static) is built with MLPROF_AUTOSTART; the mlprof command, which starts a
 * sampling session of its own, links the recording layer built without it.
 * It lives here, not in a file of its own, so that a static link pulls it in
 * with the session. */
__attribute__((constructor)) static void autostart(void) {
  const char *out = mlprof__env(MLPROF__ENV_OUTPUT);
  /* MLPROF_OUTPUT=/dev/null: recording off, without a word. */
  if (!out || !*out || is_special(out)) return;
  int rc = mlprof_init(NULL);
  if (rc != 0 && rc != MLPROF_EALREADY)
    mlprof__warn_once(NULL, "cannot start profiling to %s: %s (%s)", out,
                      mlprof_strerror(rc), strerror(errno));
  /* mlprof run found no Python start-up module: a Python interpreter says
   * so in its profile, as the module says when it cannot load mlprof. */
  const char *missing = mlprof__env(MLPROF__ENV_PY_MISSING);
  char exe[PATH_MAX], why[1024];
  ssize_t n;
  if (rc == 0 && missing && *missing &&
      (n = readlink("/proc/self/exe", exe, sizeof exe - 1)) > 0) {
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    if (!strncmp(base ? base + 1 : exe, "python", 6)) {
      snprintf(why, sizeof why, "not loaded: %s", missing);
      mlprof_meta("mlprof.python", why);
    }
  }
}
#endif
