/* exit() and the return from main(), interposed for one case: a vfork child
 * that calls exit() runs the C library's exit handlers in the memory it
 * shares with its parent, so they are spent there, the session's among them
 * (session.c registers it with on_exit), and no new one can be registered.
 * The parent then ends with no handler run, as it would without mlprof; its
 * profile is finished here instead, when it calls exit() or its main()
 * returns. Otherwise both only pass through: the session ends from its exit
 * handler, after the program's own handlers registered later (C++ static
 * destructors, atexit) have recorded what they record. */
#include <dlfcn.h>
#include <string.h>

#include "../record/internal.h"

#define EXPORT __attribute__((visibility("default")))

typedef void (*exit_fn)(int);
typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void),
                        void (*)(void), void *);

static exit_fn real_exit;
static start_fn real_start;
static main_fn program_main;

__attribute__((constructor)) static void resolve(void) {
  void *fn = dlsym(RTLD_NEXT, "exit");
  memcpy(&real_exit, &fn, sizeof fn);
  fn = dlsym(RTLD_NEXT, "__libc_start_main");
  memcpy(&real_start, &fn, sizeof fn);
}

EXPORT void exit(int status) {
  mlprof__session_exit_spent(status);
  if (!real_exit) resolve();
  real_exit(status);
  __builtin_unreachable();
}

static int main_then_end(int argc, char **argv, char **envp) {
  int status = program_main(argc, argv, envp);
  mlprof__session_exit_spent(status);
  return status;
}

EXPORT int __libc_start_main(main_fn main, int argc, char **argv,
                             void (*init)(void), void (*fini)(void),
                             void (*rtld_fini)(void), void *stack_end) {
  if (!real_start) resolve();
  program_main = main;
  return real_start(main_then_end, argc, argv, init, fini, rtld_fini,
                    stack_end);
}
