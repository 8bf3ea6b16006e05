/* The Python stack walker (_stacks.c), registered with the recording
 * library's stack sampler. */
#ifndef MLPROF_PY_STACKS_H
#define MLPROF_PY_STACKS_H

/* Registers this interpreter's stack walker with the libmlprof open as lib
 * (a dlopen handle, or RTLD_DEFAULT). Returns 1 when registered, 0 when
 * not (a library older than stacks, a Python older than 3.11, or a walker
 * already registered). Call once, with the GIL, at import. *fork_child gets
 * the library's hook for a forked child (NULL when it has none). */
int mlprof_stacks_register(void *lib, void (**fork_child)(void));

#endif
