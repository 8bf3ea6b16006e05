/* What the library interposes, preloaded or linked, so that a process ending
 * by exec or _exit keeps what it recorded: every exec variant, _exit and
 * _Exit flush and finish the profile (src/record/session.c) before calling
 * the C library's own function, and a failed exec records on. The program an
 * exec starts learns from MLPROF_EXEC=PID.SEQ that it goes on with a process
 * being profiled (its file is then the chain's next, see session.c).
 * exit() needs nothing here (on_exit), nor does posix_spawn: its child is a
 * new process that records nothing before its exec. */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../record/internal.h"

#define EXPORT __attribute__((visibility("default")))
#define EXEC_VAR MLPROF__ENV_EXEC "="
#define OUTPUT_VAR MLPROF__ENV_OUTPUT "="

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef void (*exit_fn)(int);

/* The C library's functions, looked up before main() (dlsym is not
 * async-signal-safe, and _exit and exec are called from signal handlers). */
static execve_fn real_execve, real_execvpe;
static fexecve_fn real_fexecve;
static exit_fn real_exit, real_Exit;

__attribute__((constructor)) static void resolve(void) {
  real_execve = (execve_fn)dlsym(RTLD_NEXT, "execve");
  real_execvpe = (execve_fn)dlsym(RTLD_NEXT, "execvpe");
  real_fexecve = (fexecve_fn)dlsym(RTLD_NEXT, "fexecve");
  real_exit = (exit_fn)dlsym(RTLD_NEXT, "_exit");
  real_Exit = (exit_fn)dlsym(RTLD_NEXT, "_Exit");
}

/* One exec: a path (execve), a name searched in PATH (execvpe) or a
 * descriptor (fexecve). */
typedef struct {
  const char *file;
  int fd, search;
  char *const *argv;
} target;

static int run(const target *t, char *const *env) {
  if (!real_execve) resolve();
  execve_fn fn = t->search ? real_execvpe : real_execve;
  if (t->fd >= 0 ? !real_fexecve : !fn) {
    errno = ENOSYS;
    return -1;
  }
  return t->fd >= 0 ? real_fexecve(t->fd, t->argv, env)
                    : fn(t->file, t->argv, env);
}

/* var, or the session's output made absolute in buf when var passes on the
 * relative output the session was given: the new program writes where this
 * one does, whatever directory it is in now. */
static char *output_var(char *var, char *buf, size_t cap) {
  const char *abs;
  if (!mlprof__has_prefix(var, OUTPUT_VAR) ||
      !(abs = mlprof__session_output_for(var + strlen(OUTPUT_VAR))) ||
      snprintf(buf, cap, OUTPUT_VAR "%s", abs) >= (int)cap)
    return var;
  return buf;
}

/* Flushes and finishes the profile, runs the exec with MLPROF_EXEC set when
 * the new program will record too, and records on when it fails. A process
 * that records nothing (a vfork child) only passes the output on. */
static int exec_with(const target *t, char *const *envp) {
  int seq = mlprof__session_before_exec();
  size_t n = 0;
  int profiled = 0;
  for (; envp && envp[n]; n++)
    profiled |= mlprof__has_prefix(envp[n], OUTPUT_VAR);
  if (seq < 0 && !profiled) return run(t, envp);
  char mark[64], output[sizeof OUTPUT_VAR + 4096];
  char *env[n + 2];
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (seq < 0 || !mlprof__has_prefix(envp[i], EXEC_VAR))
      env[k++] = output_var(envp[i], output, sizeof output);
  if (profiled && seq >= 0) {
    snprintf(mark, sizeof mark, EXEC_VAR "%d.%d", (int)getpid(), seq);
    env[k++] = mark;
  }
  env[k] = NULL;
  int rc = run(t, env);
  if (seq >= 0) {
    int saved = errno;
    mlprof__session_exec_failed();
    errno = saved;
  }
  return rc;
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
  target t = {path, -1, 0, argv};
  return exec_with(&t, envp);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
  target t = {file, -1, 1, argv};
  return exec_with(&t, envp);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
  target t = {NULL, fd, 0, argv};
  return exec_with(&t, envp);
}

EXPORT int execv(const char *path, char *const argv[]) {
  return execve(path, argv, environ);
}

EXPORT int execvp(const char *file, char *const argv[]) {
  return execvpe(file, argv, environ);
}

/* execl, execlp, execle: the arguments up to the NULL into argv, leaving ap
 * at what follows (execle's environment); the caller ends ap. */
#define LIST_ARGS(arg, ap, argv)        \
  size_t n = 1;                         \
  va_start(ap, arg);                    \
  while (va_arg(ap, const char *)) n++; \
  va_end(ap);                           \
  char *argv[n + 1];                    \
  argv[0] = (char *)arg;                \
  va_start(ap, arg);                    \
  for (size_t i = 1; i <= n; i++) argv[i] = va_arg(ap, char *)

EXPORT int execl(const char *path, const char *arg, ...) {
  va_list ap;
  LIST_ARGS(arg, ap, argv);
  va_end(ap);
  return execve(path, argv, environ);
}

EXPORT int execlp(const char *file, const char *arg, ...) {
  va_list ap;
  LIST_ARGS(arg, ap, argv);
  va_end(ap);
  return execvpe(file, argv, environ);
}

EXPORT int execle(const char *path, const char *arg, ...) {
  va_list ap;
  LIST_ARGS(arg, ap, argv);
  char *const *envp = va_arg(ap, char *const *);
  va_end(ap);
  return execve(path, argv, envp);
}

static void __attribute__((noreturn)) end(exit_fn fn, int status) {
  mlprof__session_before_exit(status);
  if (fn) fn(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

EXPORT void _exit(int status) { end(real_exit, status); }

EXPORT void _Exit(int status) { end(real_Exit, status); }
