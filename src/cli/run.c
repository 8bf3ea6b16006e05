/* mlprof run: starts a command with libmlprof preloaded, so every process of
 * its tree writes a profile into one run directory with no code change, while
 * this process samples the whole tree (CPU, memory, I/O, GPU...) into a
 * profile of its own; then prints the summary and exits with the command's
 * own status. */
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../format/wire.h"
#include "../record/record.h"
#include "cli.h"
#include "mlprof.h"

#ifndef MLPROF_INSTALL_LIBDIR
#define MLPROF_INSTALL_LIBDIR "lib"
#endif

/* Zones in the summary printed after the command. */
#define SUMMARY_TOP 25

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: mlprof run [options] [--] COMMAND [ARGS...]\n"
      "\n"
      "Runs COMMAND with profiling switched on in it and in every process it\n"
      "starts; each writes its own profile into the run directory. Prints the\n"
      "summary at the end and exits with COMMAND's status.\n"
      "\n"
      "options:\n"
      "  -o, --output DIR     run directory (default: mlprof-DATE-TIME)\n"
      "      --flush-ms N     write interval in ms: a killed process loses at\n"
      "                       most this much (default 200)\n"
      "      --memory-mb N    event buffer cap per process (default 64)\n"
      "      --memory=MODE    allocations recorded: sampled[:BYTES] (default;\n"
      "                       a sample every 512 KiB allocated on average),\n"
      "                       all (every one, for leak hunting) or off;\n"
      "                       MODE,python: Python's small objects too\n"
      "                       (PYTHONMALLOC=malloc: slower, docs/memory.md)\n"
      "      --sample-ms N    sample the process tree and the machine every N\n"
      "                       ms (default 100; 0: no sampling)\n"
      "      --stacks HZ|off  Python: sample every thread's stack HZ times a\n"
      "                       second (default 100; off: never); HZ,native or\n"
      "                       native: with native frames (C extensions)\n"
      "      --no-torch       Python: do not record PyTorch's steps (data,\n"
      "                       forward, backward, optimizer) in programs that\n"
      "                       import torch\n"
      "      --layers         Python: also a zone per module of each model\n"
      "                       (forward and backward), as mlprof.torch's\n"
      "                       profile_model; with --memory=all, the bytes\n"
      "                       each layer saves for backward too\n"
      "      --calls          Python: every Python function call a zone\n"
      "                       (backend=\"calls\")\n"
      "      --lines MODULE:FUNCTION\n"
      "                       Python: time the lines of that function (the\n"
      "                       script's own: its file name or __main__ as\n"
      "                       MODULE); repeat for more\n"

      "  -q, --quiet          do not print the summary\n"
      "  -h, --help           this help\n"
      "\n"
      "Programs that are statically linked cannot be profiled this way; link\n"
      "them with -lmlprof instead. Zones come from instrumented code (the C\n"
      "API, the Python package) and, in Python programs, from what mlprof\n"
      "loads into every Python process: PyTorch's training steps with no\n"
      "code change (docs/python.md).\n");
}

/* The library to preload: $MLPROF_LIB, else next to this executable (build
 * tree), else PREFIX/LIBDIR for an installed mlprof, else the Python
 * package's mlprof/_lib for the command it ships in mlprof/_bin. */
static int find_library(char *out, size_t len) {
  const char *env = getenv("MLPROF_LIB");
  if (env && *env) {
    if (access(env, R_OK) == 0 && snprintf(out, len, "%s", env) < (int)len)
      return 0;
    fprintf(stderr, "mlprof run: MLPROF_LIB=%s: %s\n", env, strerror(errno));
    return -1;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) n = 0;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  const char *const places[] = {
      "%s/libmlprof.so", "%s/../" MLPROF_INSTALL_LIBDIR "/libmlprof.so",
      "%s/../lib/libmlprof.so", "%s/../_lib/libmlprof.so"};
  for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
    char cand[PATH_MAX + 64];
    snprintf(cand, sizeof cand, places[i], exe);
    if (access(cand, R_OK) == 0 && realpath(cand, out) && strlen(out) < len)
      return 0;
  }
  fprintf(stderr,
          "mlprof run: cannot find libmlprof.so next to %s or in ../%s, "
          "../lib or ../_lib; set MLPROF_LIB to its path\n",
          exe, MLPROF_INSTALL_LIBDIR);
  return -1;
}

/* Every Python process of the tree loads mlprof's start-up module
 * (python/mlprof/_startup/sitecustomize.py) from the first directory of
 * PYTHONPATH, and reads the Python flags given (py_options, "no-torch,...")
 * from MLPROF_PY_OPTIONS. The module is taken from $MLPROF_PY_STARTUP (set by
 * python -m mlprof run), else from the package built next to this executable
 * (make python-test), the package this executable is shipped in, or
 * PREFIX/share/mlprof; without one, Python runs without it. -1 on error. */
static int python_env(const char *py_options) {
  char exe[PATH_MAX], dir[PATH_MAX + 64] = "", file[PATH_MAX + 96];
  const char *env = getenv("MLPROF_PY_STARTUP");
  if (env && *env) {
    snprintf(file, sizeof file, "%s/sitecustomize.py", env);
    if (access(file, R_OK) != 0) {
      fprintf(stderr, "mlprof run: MLPROF_PY_STARTUP=%s: %s: %s\n", env, file,
              strerror(errno));
      return -1;
    }
    snprintf(dir, sizeof dir, "%s", env);
  } else {
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    static const char *const places[] = {"%s/python/mlprof/_startup",
                                         "%s/../_startup",
                                         "%s/../share/mlprof/python-startup"};
    for (size_t i = 0; i < sizeof places / sizeof places[0] && !dir[0]; i++) {
      snprintf(file, sizeof file, places[i], exe);
      strcat(file, "/sitecustomize.py");
      if (access(file, R_OK) == 0) snprintf(dir, sizeof dir, places[i], exe);
    }
  }
  setenv(MLPROF__ENV_PY_OPTIONS, py_options, 1);
  /* Without a module, each Python process says why in its profile
   * (session.c, as the module does when it cannot load mlprof). */
  if (!dir[0]) {
    char why[PATH_MAX + 160];
    snprintf(why, sizeof why,
             "mlprof run found no Python start-up module next to %s (build "
             "the Python package: make python-install, or pip install "
             "./python)",
             exe);
    setenv(MLPROF__ENV_PY_MISSING, why, 1);
    return 0;
  }
  unsetenv(MLPROF__ENV_PY_MISSING);
  const char *old = getenv("PYTHONPATH");
  size_t len = strlen(dir) + (old ? strlen(old) : 0) + 2;
  char *path = malloc(len);
  if (!path) return -1;
  snprintf(path, len, "%s%s%s", dir, old && *old ? ":" : "",
           old && *old ? old : "");
  setenv("PYTHONPATH", path, 1);
  free(path);
  return 0;
}

/* Profiles in dir, leaving out the file named skip (this process's own). */
static int count_profiles(const char *dir, const char *skip) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  const char *slash = strrchr(skip, '/');
  const char *own_leaf = slash ? slash + 1 : skip;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l > 7 && strcmp(e->d_name + l - 7, ".mlprof") == 0 &&
        strcmp(e->d_name, own_leaf) != 0)
      n++;
  }
  closedir(d);
  return n;
}

/* This process's rank when a launcher started it as one of several ranks
 * (`mpirun -np 4 mlprof run -o DIR -- prog`), else -1. */
static long launched_rank(void) {
  static const char *const worlds[] = {MLPROF__WORLD_VARS},
                           *const ranks[] = {MLPROF__RANK_VARS};
  for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++) {
    const char *w = getenv(worlds[i]), *r = getenv(ranks[i]);
    if (w && r && atol(w) > 1) return atol(r);
  }
  return -1;
}

/* Creates the run directory; refuses one that already holds profiles, which
 * would otherwise be merged with this run's, unless this is one rank of a
 * launched job: the other ranks' profiles belong there. */
static int prepare_dir(char *dir, size_t len, const char *given, int *created) {
  if (given) {
    if (snprintf(dir, len, "%s", given) >= (int)len) return -1;
  } else {
    char stamp[32];
    time_t now = time(NULL);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
    snprintf(dir, len, "mlprof-%s", stamp);
    for (int i = 2; access(dir, F_OK) == 0 && i < 100; i++)
      snprintf(dir, len, "mlprof-%s-%d", stamp, i);
  }
  *created = 0;
  /* Its parents as mkdir -p makes them: each missing one, never over
   * something that exists (mkdir does not follow a link it would create). */
  for (char *slash = strchr(dir + 1, '/'); slash;
       slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    struct stat st;
    int bad = mkdir(dir, 0755) != 0 && errno != EEXIST;
    if (!bad && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) bad = 1;
    if (bad) {
      fprintf(
          stderr, "mlprof run: cannot create %s: %s\n", dir,
          errno == EEXIST || errno == 0 ? "not a directory" : strerror(errno));
      *slash = '/';
      return -1;
    }
    *slash = '/';
  }
  if (mkdir(dir, 0755) == 0) {
    *created = 1;
  } else if (errno != EEXIST) {
    fprintf(stderr, "mlprof run: cannot create %s: %s\n", dir, strerror(errno));
    return -1;
  }
  int n = count_profiles(dir, "");
  if (n < 0) {
    fprintf(stderr, "mlprof run: %s: %s\n", dir, strerror(errno));
    return -1;
  }
  if (n > 0 && launched_rank() < 0) {
    fprintf(stderr,
            "mlprof run: %s already holds %d profile(s); choose another -o or "
            "remove them\n",
            dir, n);
    return -1;
  }
  return 0;
}

/* The path execvp would run for name, in out; 0, or -1 when not found. */
static int find_program(const char *name, char *out, size_t len) {
  if (strchr(name, '/'))
    return snprintf(out, len, "%s", name) < (int)len ? 0 : -1;
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path;; p++) {
    const char *colon = strchr(p, ':');
    size_t n = colon ? (size_t)(colon - p) : strlen(p);
    if (snprintf(out, len, "%.*s%s%s", (int)n, p, n ? "/" : "", name) <
            (int)len &&
        access(out, X_OK) == 0)
      return 0;
    if (!colon) return -1;
    p = colon;
  }
}

/* Whether the ELF file at path has no program interpreter: a statically
 * linked program, which the loader never preloads into. */
static int is_static_elf(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  Elf64_Ehdr eh;
  int is_static = 0;
  if (pread(fd, &eh, sizeof eh, 0) == (ssize_t)sizeof eh &&
      memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
      eh.e_ident[EI_CLASS] == ELFCLASS64 &&
      eh.e_phentsize == sizeof(Elf64_Phdr)) {
    is_static = 1;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
      Elf64_Phdr ph;
      if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) !=
              (ssize_t)sizeof ph ||
          ph.p_type == PT_INTERP) {
        is_static = 0;
        break;
      }
    }
  }
  close(fd);
  return is_static;
}

/* Why no profile reached dir from a run of cmd, as far as can be told. */
static void no_profile_reason(const char *dir, const char *cmd, char *why,
                              size_t len) {
  char path[PATH_MAX];
  struct stat st;
  int found = find_program(cmd, path, sizeof path) == 0;
  if (access(dir, W_OK | X_OK) != 0)
    snprintf(why, len, "the run directory is not writable (%s)",
             strerror(errno));
  else if (found && stat(path, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID)))
    snprintf(why, len,
             "'%s' is set-user-ID or set-group-ID, and the loader does not "
             "preload libraries into such programs",
             path);
  else if (found && is_static_elf(path))
    snprintf(why, len,
             "'%s' is statically linked, so libmlprof cannot be preloaded "
             "into it (link it with -lmlprof instead)",
             path);
  else
    snprintf(why, len,
             "libmlprof was not loaded into '%s' (did it clear LD_PRELOAD?)",
             cmd);
}

static pid_t child;
static volatile sig_atomic_t signalled;

static void forward(int sig) {
  signalled = 1;
  if (child > 0) kill(child, sig);
}

/* How long mlprof run waits, once its command has exited, for the processes
 * the command left behind to exit too. */
#define DESCENDANTS_WAIT_MS 2000

/* The command's descendants still alive when it exited come to this process
 * (a subreaper, start_child) as they are orphaned: the multiprocessing
 * resource tracker, for one, exits only once its parent has. Reaps them as
 * they exit, for up to DESCENDANTS_WAIT_MS or until a signal comes, so that
 * the summary does not call a process running that was about to end. Those
 * still alive then are left running. */
static void wait_descendants(void) {
  struct timespec tick = {0, 10 * 1000000L};
  for (int i = 0; i < DESCENDANTS_WAIT_MS / 10 && !signalled; i++) {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
    }
    if (p < 0 && errno == ECHILD) return;
    nanosleep(&tick, NULL);
  }
}

/* Parses a positive integer option; -1 on error. */
static long positive(const char *opt, const char *v) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || *end || n <= 0 || n > 1000000) {
    fprintf(stderr, "mlprof run: %s expects a positive integer, not '%s'\n",
            opt, v);
    return -1;
  }
  return n;
}

void mlprof__run_cmd_init(mlprof__run_cmd *c) {
  memset(c, 0, sizeof *c);
  mlprof_config cfg;
  mlprof_config_init(&cfg);
  c->sample_ms = cfg.sample_interval_ms;
  c->stacks_hz = cfg.stacks_hz;
}

/* Reads the arguments into *c. Returns -1 to go on, else the exit status
 * (0 after --help). */
static int parse(int argc, char **argv, mlprof__run_cmd *c) {
  static const struct option opts[] = {
      {"output", required_argument, NULL, 'o'},
      {"flush-ms", required_argument, NULL, 'f'},
      {"memory-mb", required_argument, NULL, 'm'},
      {"sample-ms", required_argument, NULL, 's'},
      {"memory", required_argument, NULL, 'M'},
      {"stacks", required_argument, NULL, 'S'},
      {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},
      /* Flags for Python processes ('P'): passed on in MLPROF_PY_OPTIONS. */
      {"no-torch", no_argument, NULL, 'P'},
      {"layers", no_argument, NULL, 'P'},
      {"calls", no_argument, NULL, 'P'},
      {"lines", required_argument, NULL, 'P'},
      {NULL, 0, NULL, 0}};
  int ch, which;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  while ((ch = getopt_long(argc, argv, "+o:qh", opts, &which)) != -1) {
    switch (ch) {
      case 'P': {
        size_t used = strlen(c->py_options);
        snprintf(c->py_options + used, sizeof c->py_options - used, "%s%s%s%s",
                 used ? "," : "", opts[which].name, optarg ? "=" : "",
                 optarg ? optarg : "");
        break;
      }
      case 'o':
        c->out = optarg;
        break;
      case 'f':
        if ((c->flush_ms = positive("--flush-ms", optarg)) < 0) return 2;
        break;
      case 'm':
        if ((c->memory_mb = positive("--memory-mb", optarg)) < 0) return 2;
        break;
      case 's':
        if (strcmp(optarg, "0") != 0 &&
            (c->sample_ms = positive("--sample-ms", optarg)) < 0)
          return 2;
        if (strcmp(optarg, "0") == 0) c->sample_ms = 0;
        break;
      case 'M': {
        int mode;
        uint64_t mean;
        /* MODE,python: pymalloc's small objects are carved from arenas the
         * hooks see whole; PYTHONMALLOC=malloc sends each to malloc. */
        const char *comma = strchr(optarg, ',');
        size_t n = comma ? (size_t)(comma - optarg) : strlen(optarg);
        int python = comma && strcmp(comma, ",python") == 0;
        if (n >= sizeof c->memory_mode) n = 0; /* refused below */
        memcpy(c->memory_mode, optarg, n);
        c->memory_mode[n] = '\0';
        if ((comma && !python) ||
            mlprof__mem_parse(c->memory_mode, &mode, &mean) != 0) {
          fprintf(stderr,
                  "mlprof run: --memory=%s: not sampled, sampled:BYTES "
                  "(BYTES > 0), all or off, optionally followed by "
                  "\",python\"\n",
                  optarg);
          return 2;
        }
        if (python && mode == MLPROF__MEM_OFF) {
          fprintf(stderr,
                  "mlprof run: --memory=%s: \",python\" needs "
                  "allocations recorded (sampled or all)\n",
                  optarg);
          return 2;
        }
        c->memory = c->memory_mode;
        c->python_malloc = python;
        break;
      }
      case 'S': {
        /* HZ, off, native (100 a second) or HZ,native. */
        char hz[32];
        const char *comma = strchr(optarg, ',');
        c->stacks_native = 0;
        if (strcmp(optarg, "native") == 0) {
          c->stacks_hz = 100;
          c->stacks_native = 1;
          break;
        }
        if (comma && (strcmp(comma + 1, "native") != 0 ||
                      (size_t)(comma - optarg) >= sizeof hz)) {
          fprintf(stderr,
                  "mlprof run: --stacks %s: not HZ, HZ,native, "
                  "native or off\n",
                  optarg);
          return 2;
        }
        snprintf(hz, sizeof hz, "%.*s",
                 comma ? (int)(comma - optarg) : (int)sizeof hz - 1, optarg);
        c->stacks_native = comma != NULL;
        if (strcmp(hz, "off") == 0 || strcmp(hz, "0") == 0)
          c->stacks_hz = 0;
        else if ((c->stacks_hz = positive("--stacks", hz)) < 0)
          return 2;
        else if (c->stacks_hz > 10000) {
          fprintf(stderr, "mlprof run: --stacks takes at most 10000 (Hz)\n");
          return 2;
        }
        break;
      }
      case 'q':
        c->quiet = 1;
        break;
      case 'h':
        usage(stdout);
        return 0;
      default:
        fprintf(stderr, "mlprof run: see mlprof run --help\n");
        return 2;
    }
  }
  if (optind >= argc) {
    fprintf(stderr,
            "mlprof run: no command given (mlprof run [options] -- "
            "COMMAND [ARGS...])\n");
    return 2;
  }
  c->cmd = argv + optind;
  return -1;
}

int mlprof__cmd_run(int argc, char **argv) {
  mlprof__run_cmd c;
  mlprof__run_cmd_init(&c);
  int rc = parse(argc, argv, &c);
  return rc < 0 ? mlprof__run_cmd_run(&c) : rc;
}

/* The summary after the command: mlprof report of the run directory, on
 * stderr, out of the way of the command's output. */
static void summary(const char *dir) {
  fflush(stdout);
  const char *paths[] = {dir};
  mlprof__report_cmd report;
  mlprof__report_cmd_init(&report);
  report.paths = paths;
  report.npaths = 1;
  report.top = SUMMARY_TOP;
  report.fd = STDERR_FILENO;
  mlprof__report_cmd_run(&report);
  mlprof__report_cmd_free(&report);
  /* Every file of the directory, this process's sampling profile too. */
  int files = count_profiles(dir, "");
  fprintf(stderr,
          "\nmlprof: %d profile%s in %s\n"
          "  mlprof report %s           full report (--format json|csv)\n"
          "  mlprof trace %s -o trace.json   timeline for Perfetto\n",
          files, files == 1 ? "" : "s", dir, dir, dir);
}

/* The environment of the command: libmlprof preloaded (the NVTX tool too,
 * and with MLPROF_CUPTI=1 the CUDA injection), writing to absdir with c's
 * flush interval and memory cap, not sampling itself. Why CUPTI cannot
 * capture goes to cuda_why ("" when it can or was not asked for). -1 when
 * out of memory. */
static int profile_env(const mlprof__run_cmd *c, const char *lib,
                       const char *absdir, char *cuda_why, size_t why_len) {
  const char *pre = getenv("LD_PRELOAD");
  size_t plen = strlen(lib) + (pre ? strlen(pre) : 0) + 2;
  char *preload = malloc(plen);
  if (!preload) return -1;
  snprintf(preload, plen, "%s%s%s", pre && *pre ? pre : "",
           pre && *pre ? ":" : "", lib);
  setenv("LD_PRELOAD", preload, 1);
  setenv(MLPROF__ENV_OUTPUT, absdir, 1);
  /* The library preloaded is also the NVTX tool (src/intercept/nvtx.c):
   * a program's NVTX ranges become zones, unless the user chose a tool. */
  setenv("NVTX_INJECTION64_PATH", lib, 0);
  /* With MLPROF_CUPTI=1 it is also what the CUDA driver loads into each
   * process that initialises CUDA, to capture its activity through CUPTI
   * (src/intercept/cupti.c); the run's own profile says when no driver is
   * there to load it. */
  cuda_why[0] = '\0';
  const char *want_cupti = getenv("MLPROF_CUPTI");
  if (want_cupti && strcmp(want_cupti, "1") == 0) {
    setenv("CUDA_INJECTION64_PATH", lib, 0);
    const char *drv = getenv("MLPROF_CUDA_LIB");
    void *h =
        dlopen(drv && *drv ? drv : "libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (h) {
      dlclose(h);
    } else {
      const char *e = dlerror();
      snprintf(cuda_why, why_len, "no CUDA driver: %s",
               e ? e : "libcuda.so.1 not found");
    }
  }
  free(preload);
  char num[32];
  if (c->flush_ms) {
    snprintf(num, sizeof num, "%ld", c->flush_ms);
    setenv(MLPROF__ENV_FLUSH_MS, num, 1);
  }
  if (c->memory_mb) {
    snprintf(num, sizeof num, "%ld", c->memory_mb);
    setenv(MLPROF__ENV_MEMORY_MB, num, 1);
  }
  if (c->memory) setenv(MLPROF__ENV_MEMORY, c->memory, 1);
  if (c->python_malloc) {
    /* The user's own choice of allocator stands (debug, pymalloc...). */
    const char *had = getenv("PYTHONMALLOC");
    if (had && *had && strcmp(had, "malloc") != 0)
      fprintf(stderr,
              "mlprof run: PYTHONMALLOC=%s kept: --memory=...,python "
              "needs PYTHONMALLOC=malloc to see Python's small objects\n",
              had);
    else
      setenv("PYTHONMALLOC", "malloc", 1);
  }
  snprintf(num, sizeof num, "%ld%s", c->stacks_hz,
           c->stacks_native ? ",native" : "");
  setenv(MLPROF__ENV_STACKS, c->stacks_hz ? num : "off", 1);
  /* The processes do not sample themselves: this one samples them all. */
  setenv(MLPROF__ENV_SAMPLE_MS, "0", 1);
  return 0;
}

/* Forks the child that runs cmd once it reads a byte from go[0] (or its
 * end), and writes exec's errno to err[1] when exec fails. Returns 0 or -1
 * after a message. */
static int start_child(char *const *cmd, const int err[2], const int go[2]) {
  /* Orphaned descendants come here rather than to init (wait_descendants);
   * not inherited by the command. */
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  fflush(NULL);
  child = fork();
  if (child < 0) {
    perror("mlprof run: fork");
    return -1;
  }
  if (child == 0) {
    close(err[0]);
    close(go[1]);
    char byte;
    while (read(go[0], &byte, 1) < 0 && errno == EINTR) {
    }
    execvp(cmd[0], cmd);
    int e = errno;
    ssize_t ignored = write(err[1], &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  close(err[1]);
  close(go[0]);
  return 0;
}

/* Samples the child's process tree every sample_ms into absdir, noting
 * cuda_why (when not "") as CUPTI's status; the path of this process's own
 * profile goes to own ("" when none). */
static void sample_tree(long sample_ms, const char *absdir,
                        const char *cuda_why, char *own, size_t len) {
  mlprof_config cfg;
  mlprof_config_init(&cfg);
  cfg.output = absdir;
  cfg.sample_interval_ms = (int)sample_ms;
  mlprof__session_sample_tree(child);
  int src = mlprof_init(&cfg);
  if (src == 0) {
    snprintf(own, len, "%s", mlprof_output_path());
    if (cuda_why[0]) mlprof__session_source("cupti", 0, cuda_why);
  } else {
    fprintf(stderr, "mlprof run: cannot sample the process tree: %s\n",
            mlprof_strerror(src));
  }
}

/* Waits for the child, then for what it left behind (wait_descendants);
 * returns its wait status. The terminal sends ^C and
 * ^\ to the whole group: let the command decide, and stay alive to print
 * what it recorded. Forward the others. */
static int wait_child(void) {
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  signal(SIGTERM, forward);
  signal(SIGHUP, forward);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  child = 0; /* reaped: its pid may be reused, nothing is forwarded to it */
  wait_descendants();
  return status;
}

int mlprof__run_cmd_run(const mlprof__run_cmd *c) {
  char *const *cmd = c->cmd;
  char lib[PATH_MAX], dir[PATH_MAX], absdir[PATH_MAX + 2],
      own[PATH_MAX + 64] = "";
  int created;
  if (find_library(lib, sizeof lib) != 0 || python_env(c->py_options) != 0)
    return 2;
  if (prepare_dir(dir, sizeof dir, c->out, &created) != 0) return 2;
  if (!realpath(dir, absdir)) return 2;
  strcat(absdir, "/");
  char cuda_why[512];
  if (profile_env(c, lib, absdir, cuda_why, sizeof cuda_why)) return 2;

  /* The child waits on `go` until the sampling session has started (so the
   * tree's root starts before the command, and sampling covers all of it),
   * then reports a failed exec through a close-on-exec pipe. */
  int pfd[2], go[2];
  if (pipe2(pfd, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0) {
    perror("mlprof run: pipe");
    return 2;
  }
  if (start_child(cmd, pfd, go)) return 2;
  if (c->sample_ms > 0)
    sample_tree(c->sample_ms, absdir, cuda_why, own, sizeof own);
  close(go[1]); /* go */
  int exec_errno = 0;
  ssize_t got;
  do got = read(pfd[0], &exec_errno, sizeof exec_errno);
  while (got < 0 && errno == EINTR);
  close(pfd[0]);

  int status = wait_child();
  mlprof_shutdown();
  if (got == (ssize_t)sizeof exec_errno) {
    fprintf(stderr, "mlprof run: cannot run '%s': %s\n", cmd[0],
            strerror(exec_errno));
    if (own[0]) unlink(own);
    if (created) rmdir(dir);
    return exec_errno == ENOENT ? 127 : 126;
  }
  int rc = WIFEXITED(status)     ? WEXITSTATUS(status)
           : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                 : 1;

  int n = count_profiles(dir, own);
  if (n <= 0) {
    char why[PATH_MAX + 200];
    no_profile_reason(dir, cmd[0], why, sizeof why);
    fprintf(stderr, "mlprof run: no profile was written to %s: %s\n", dir, why);
    return rc;
  }
  /* In a launched job, rank 0's summary only. */
  if (!c->quiet && launched_rank() <= 0) summary(dir);
  return rc;
}
