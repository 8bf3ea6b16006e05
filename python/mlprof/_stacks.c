/* The Python stack walker that the recording library's stack sampler and
 * allocation sites use (src/record/stack.h). Compiled against the running
 * CPython's internal headers (Py_BUILD_CORE) so that the frame, thread and
 * GIL layouts are that version's own: 3.11, 3.12 and 3.13. Older versions
 * register no walker (their stacks are not sampled).
 *
 * The sampler's walk runs on the library's thread without the GIL: every
 * thread state, frame, code object and string is copied with the library's
 * fault-safe read (process_vm_readv on our own pid, as Echion does), never
 * dereferenced, so a frame freed or reused while it is read gives a wrong or
 * shorter stack, never a crash. The calling thread's own stack (for a malloc
 * hook) is read directly: only that thread changes its frame chain, and it is
 * inside the hook. Nothing here allocates, takes the GIL or calls Python. */
#define PY_SSIZE_T_CLEAN
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#endif
#include <Python.h>

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "_stacks.h"

#if PY_VERSION_HEX >= 0x030B0000 && !defined(Py_GIL_DISABLED)
#define WALKER 1
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#include <internal/pycore_gil.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>

#include "record/stack.h"

static const mlprof__stack_api *sapi;
static PyInterpreterState *main_interp;
/* Set when the interpreter starts finalizing (the package's atexit): its
 * thread states are then being freed, and walking them would only read
 * garbage (safely, but into the profile). */
static volatile int finalizing;

typedef int (*reader_fn)(void *dst, const void *src, size_t n);

/* The calling thread's own memory. */
static int direct(void *dst, const void *src, size_t n) {
  if (!src) return -1;
  memcpy(dst, src, n);
  return 0;
}

/* The sampler's copy of the thread's data stack, where its frames live:
 * one read per thread instead of one per frame. A frame elsewhere (a
 * generator's, an older chunk's) is read alone. Sampler thread only. */
#define WINDOW_BYTES (256u << 10)
static struct {
  const char *lo, *hi; /* the addresses copied */
  char buf[WINDOW_BYTES];
} win;

/* n 0: 1 when src is in the window, else 0. */
static int windowed(void *dst, const void *src, size_t n) {
  /* Integers, not pointers: a garbage address near the top of the address
   * space must not wrap into the window. */
  uintptr_t a = (uintptr_t)src, lo = (uintptr_t)win.lo, hi = (uintptr_t)win.hi;
  if (!n) return a >= lo && a < hi;
  if (a >= lo && a < hi && n <= hi - a) {
    memcpy(dst, win.buf + (a - lo), n);
    return 0;
  }
  return sapi->read(dst, src, n);
}

/* A second window, for the frames the first one misses: those of the
 * chunk before the current one (a deep stack spans two chunks, and a loop
 * that crosses their border frees and makes the newer one again and
 * again) and those of generators and coroutines, which live in their
 * objects. A miss copies the memory below the frame (older frames of its
 * chunk are there) in one system call; the walk reads the frames only
 * (frame_read), so it is filled by frames alone. */
#define WINDOW2_BYTES (16u << 10)
#define PAGE_BYTES 4096u
static struct {
  uintptr_t lo, hi;
  char buf[WINDOW2_BYTES];
} win2;

static int window2_load(uintptr_t lo, uintptr_t hi) {
  win2.lo = win2.hi = 0;
  if (sapi->read(win2.buf, (const void *)lo, hi - lo) != 0) return -1;
  win2.lo = lo;
  win2.hi = hi;
  return 0;
}

/* A frame's bytes: from either window, else the second is moved to it. */
static int frame_read(void *dst, const void *src, size_t n) {
  uintptr_t a = (uintptr_t)src;
  if (a >= win2.lo && a < win2.hi && n <= win2.hi - a) {
    memcpy(dst, win2.buf + (a - win2.lo), n);
    return 0;
  }
  if (windowed(dst, src, 0) == 1 || n > PAGE_BYTES || a < WINDOW2_BYTES ||
      a > UINTPTR_MAX - n)
    return windowed(dst, src, n);
  uintptr_t hi = a + n;
  /* The pages below too (older frames of its chunk), else only from the
   * frame's own page on (mapped whenever the frame is). */
  if (window2_load(
          (hi - WINDOW2_BYTES + PAGE_BYTES) & ~(uintptr_t)(PAGE_BYTES - 1),
          hi) != 0 &&
      window2_load(a & ~(uintptr_t)(PAGE_BYTES - 1), hi) != 0)
    return -1;
  memcpy(dst, win2.buf + (a - win2.lo), n);
  return 0;
}

/* Room past the data stack's top as the thread state said it: the thread
 * runs on, and the frames it pushed since are in the window too. */
#define WINDOW_SLACK (4u << 10)

/* Reads the pieces (dst[i] from src[i]) with one system call where it can;
 * ok[i] says which were read. A piece that cannot be read (freed memory)
 * is tried alone, and the rest go on together. */
static void read_pieces(const struct iovec *dst, const struct iovec *src,
                        size_t n, int *ok) {
  for (size_t i = 0; i < n;) {
    size_t k = sapi->readv(dst + i, src + i, n - i);
    for (size_t j = 0; j < k; j++) ok[i + j] = 1;
    i += k;
    if (i < n) {
      ok[i] = sapi->read(dst[i].iov_base, src[i].iov_base, src[i].iov_len) == 0;
      i++;
    }
  }
}

/* The part of thread t's data stack to copy into win: the used part of
 * its current chunk (its top WINDOW_BYTES), and WINDOW_SLACK past its top.
 * 0 when t says nothing sensible. */
static int window_range(const PyThreadState *t, uintptr_t *lo, uintptr_t *hi) {
  uintptr_t a = (uintptr_t)t->datastack_chunk;
  uintptr_t top = (uintptr_t)t->datastack_top;
  uintptr_t end = (uintptr_t)t->datastack_limit;
  if (!a || top <= a || top - a > (64u << 20) || end < top) return 0;
  *hi = end - top > WINDOW_SLACK ? top + WINDOW_SLACK : end;
  *lo = *hi - a > WINDOW_BYTES ? *hi - WINDOW_BYTES : a;
  return 1;
}

/* The window of the thread walked first in the previous tick (sampler
 * thread only): copied again with the thread states (walk_all), and used
 * when that thread's state says its frames are still there, so that a
 * program's one running thread costs no system call of its own. */
static struct {
  const PyThreadState *ts; /* NULL: none */
  const void *chunk, *cframe;
  uintptr_t lo, hi;
  int live; /* win holds it, copied this tick */
#if PY_VERSION_HEX < 0x030D0000
  _PyCFrame cf;
#endif
} spec;

/* Whether win holds the speculative copy of thread ts (state t)'s window:
 * then *f gets its current frame. */
static int spec_hit(const PyThreadState *ts, const PyThreadState *t,
                    const _PyInterpreterFrame **f) {
  if (!spec.live || ts != spec.ts ||
      (const void *)t->datastack_chunk != spec.chunk ||
      (uintptr_t)t->datastack_top > spec.hi)
    return 0;
#if PY_VERSION_HEX < 0x030D0000
  if ((const void *)t->cframe != spec.cframe) return 0;
  *f = spec.cf.current_frame;
#else
  *f = t->current_frame;
#endif
  win.lo = (const char *)spec.lo;
  win.hi = (const char *)spec.hi;
  return 1;
}

/* The thread's current frame, and into win its window (window_range),
 * both with one system call. */
static const _PyInterpreterFrame *window_load(const PyThreadState *t) {
  win.lo = win.hi = NULL;
  spec.live = 0; /* win is overwritten */
  uintptr_t lo, hi;
  size_t n = 0;
  struct iovec dst[2], src[2];
  int ok[2];
#if PY_VERSION_HEX < 0x030D0000
  /* The frame is in the evaluation loop's C frame, on the thread's stack. */
  _PyCFrame cf;
  if (!t->cframe) return NULL;
  dst[n] = (struct iovec){&cf, sizeof cf};
  src[n++] = (struct iovec){(void *)t->cframe, sizeof cf};
#endif
  int windowed = window_range(t, &lo, &hi);
  if (windowed) {
    dst[n] = (struct iovec){win.buf, hi - lo};
    src[n++] = (struct iovec){(void *)lo, hi - lo};
  }
  read_pieces(dst, src, n, ok);
  if (windowed && ok[n - 1]) {
    win.lo = (const char *)lo;
    win.hi = (const char *)hi;
  }
#if PY_VERSION_HEX < 0x030D0000
  return ok[0] ? cf.current_frame : NULL;
#else
  return t->current_frame;
#endif
}

/* Code objects read during one walk of every thread, by address: recursion
 * and threads running the same code read it once a tick. used: a frame of
 * this tick's ran it. */
#define CODE_CACHE 64
static struct {
  const PyObject *addr;
  int used;
  PyCodeObject co;
} code_cache[CODE_CACHE];
static size_t ncode_cache;
/* Those used in the previous tick (at most half the cache, so that a tick
 * has room for new ones), read again with the thread states (walk_all): a
 * loop's code objects cost no system call of their own. */
#define CODE_GUESS (CODE_CACHE / 2)
static const PyObject *code_guess[CODE_GUESS];
static size_t ncode_guess;

/* Sampler thread only, across ticks. */
#define FRAME_CACHE 4093
static struct {
  uint64_t key;
  uint32_t unit, frame;
} frame_cache[FRAME_CACHE];

#define MAX_THREADS 4096
#define NAME_MAX_BYTES 1024

/* Copies a str object as UTF-8 into out (cap bytes, NUL-terminated; a lone
 * surrogate, as surrogateescape leaves in file names, becomes U+FFFD).
 * Returns 0, with out "", when it cannot be read, or is no str (a code
 * object read while freed and reused), or holds what no str holds (a code
 * point past U+10FFFF, a non-ASCII one in an ASCII str: torn memory): a
 * name is text or nothing. */
static int read_str(reader_fn rd, const PyObject *addr, char *out, size_t cap) {
  out[0] = 0;
  PyCompactUnicodeObject u;
  if (!addr || rd(&u, addr, sizeof u) != 0) return 0;
  if (u._base.ob_base.ob_type != &PyUnicode_Type || !u._base.state.compact ||
      (u._base.state.ascii && u._base.state.kind != 1))
    return 0;
  size_t len = (size_t)u._base.length, kind = u._base.state.kind;
  const char *data = (const char *)addr +
                     (u._base.state.ascii ? sizeof(PyASCIIObject)
                                          : sizeof(PyCompactUnicodeObject));
  if (kind != 1 && kind != 2 && kind != 4) return 0;
  uint8_t raw[NAME_MAX_BYTES];
  if (len > sizeof raw / kind) len = sizeof raw / kind;
  if (rd(raw, data, len * kind) != 0) return 0;
  size_t o = 0;
  for (size_t i = 0; i < len && o + 5 < cap; i++) {
    uint32_t c = kind == 1   ? raw[i]
                 : kind == 2 ? ((uint16_t *)raw)[i]
                             : ((uint32_t *)raw)[i];
    if (c > 0x10ffff || (u._base.state.ascii && c >= 0x80)) {
      out[0] = 0;
      return 0;
    }
    if (c >= 0xd800 && c < 0xe000) c = 0xfffd;
    if (c < 0x80) {
      out[o++] = (char)c;
    } else if (c < 0x800) {
      out[o++] = (char)(0xc0 | (c >> 6));
      out[o++] = (char)(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out[o++] = (char)(0xe0 | (c >> 12));
      out[o++] = (char)(0x80 | ((c >> 6) & 0x3f));
      out[o++] = (char)(0x80 | (c & 0x3f));
    } else {
      out[o++] = (char)(0xf0 | (c >> 18));
      out[o++] = (char)(0x80 | ((c >> 12) & 0x3f));
      out[o++] = (char)(0x80 | ((c >> 6) & 0x3f));
      out[o++] = (char)(0x80 | (c & 0x3f));
    }
  }
  out[o] = 0;
  return 1;
}

/* A byte window over a bytes object's contents, read as needed. */
typedef struct {
  reader_fn rd;
  const uint8_t *base;
  size_t len, at;
  uint8_t buf[1024];
  size_t lo, hi; /* buf holds [lo, hi) */
} bytes_cursor;

static int next_byte(bytes_cursor *c) {
  if (c->at >= c->len) return -1;
  if (c->at < c->lo || c->at >= c->hi) {
    size_t n = c->len - c->at < sizeof c->buf ? c->len - c->at : sizeof c->buf;
    if (c->rd(c->buf, c->base + c->at, n) != 0) return -1;
    c->lo = c->at;
    c->hi = c->at + n;
  }
  return c->buf[c->at++ - c->lo];
}

static int varint(bytes_cursor *c) {
  int b = next_byte(c);
  if (b < 0) return 0;
  unsigned val = (unsigned)b & 63, shift = 0;
  while (b & 64) {
    if ((b = next_byte(c)) < 0 || (shift += 6) > 28) return 0;
    val |= ((unsigned)b & 63) << shift;
  }
  return (int)val;
}

static int svarint(bytes_cursor *c) {
  unsigned u = (unsigned)varint(c);
  return u & 1 ? -(int)(u >> 1) : (int)(u >> 1);
}

/* The line of byte offset addr in a code object's location table (3.11+,
 * Objects/locations.md); first when it says none. */
static uint32_t addr_to_line(reader_fn rd, const PyObject *table, int first,
                             long addr) {
  PyBytesObject b;
  if (addr < 0 || !table || rd(&b, table, offsetof(PyBytesObject, ob_sval)))
    return (uint32_t)first;
  bytes_cursor c = {rd,
                    (const uint8_t *)table + offsetof(PyBytesObject, ob_sval),
                    (size_t)Py_SIZE(&b) > (1u << 24) ? 0 : (size_t)Py_SIZE(&b),
                    0,
                    {0},
                    0,
                    0};
  int line = first, computed = first;
  long end = 0;
  int byte = next_byte(&c);
  while (byte >= 0) {
    int code = (byte >> 3) & 15;
    long len = ((byte & 7) + 1) * (long)sizeof(_Py_CODEUNIT);
    int delta = 0;
    if (code == 13 || code == 14)
      delta = svarint(&c);
    else if (code >= 10 && code <= 12)
      delta = code - 10;
    computed += delta;
    line = code == 15 ? -1 : computed;
    if (addr < end + len) return (uint32_t)(line < 0 ? first : line);
    end += len;
    /* Skip the rest of the entry: bytes without the top bit. */
    while ((byte = next_byte(&c)) >= 0 && !(byte & 128)) {
    }
  }
  return (uint32_t)first;
}

/* The frame id of code object `addr` at byte offset `off` of its code. */
static uint32_t frame_of(reader_fn rd, const PyObject *addr, long off) {
  PyCodeObject co;
  size_t hit = 0;
  if (rd == windowed)
    while (hit < ncode_cache && code_cache[hit].addr != addr) hit++;
  if (rd == windowed && hit < ncode_cache) {
    co = code_cache[hit].co;
    code_cache[hit].used = 1;
  } else {
    if (rd(&co, addr, sizeof co) != 0) return 0;
    if (rd == windowed && ncode_cache < CODE_CACHE) {
      code_cache[ncode_cache].addr = addr;
      code_cache[ncode_cache].used = 1;
      code_cache[ncode_cache++].co = co;
    }
  }
  if (co.ob_base.ob_base.ob_type != &PyCode_Type) return 0;
  uint64_t key = (uint64_t)(uintptr_t)addr;
  key ^= (uint64_t)(uintptr_t)co.co_qualname * 0x9E3779B97F4A7C15ull;
  key ^= (uint64_t)(uintptr_t)co.co_filename * 0xC2B2AE3D27D4EB4Full;
  key ^= (uint64_t)(uint32_t)co.co_firstlineno << 7;
  if (!key) key = 1;
  uint32_t unit = off < 0 ? 0 : (uint32_t)(off / sizeof(_Py_CODEUNIT));
  /* The sampler's own small cache of (function key, instruction) -> frame
   * id, in front of the library's three shared tables. */
  size_t slot =
      (size_t)((key ^ (unit * 0x9E3779B97F4A7C15ull)) >> 20) % FRAME_CACHE;
  if (rd == windowed && frame_cache[slot].key == key &&
      frame_cache[slot].unit == unit && frame_cache[slot].frame)
    return frame_cache[slot].frame;
  uint32_t func = sapi->func_find(key);
  if (!func) {
    char file[NAME_MAX_BYTES], name[NAME_MAX_BYTES];
    /* Not kept when a name cannot be read: the next sample tries again. */
    if (!read_str(rd, co.co_filename, file, sizeof file) ||
        !read_str(rd, co.co_qualname, name, sizeof name))
      return 0;
    func = sapi->func_add(key, file, name, (uint32_t)co.co_firstlineno);
    if (!func) return 0;
  }
  uint64_t pc = ((uint64_t)func << 32) | unit;
  uint32_t line = sapi->pc_find(pc);
  if (line) {
    line--;
  } else {
    line = addr_to_line(rd, co.co_linetable, co.co_firstlineno, off);
    sapi->pc_add(pc, line);
  }
  uint32_t frame = sapi->frame_py(func, line);
  if (rd == windowed) {
    frame_cache[slot].key = key;
    frame_cache[slot].unit = unit;
    frame_cache[slot].frame = frame;
  }
  return frame;
}

/* Steps from frame *f to the one it was called from: 1 with the code object
 * and byte offset of *f when it runs Python code, 0 for a frame to skip, -1
 * when *f cannot be read. *entry: 1 when *f was the first frame of its call
 * of the evaluation loop (3.11: its is_entry; 3.12+: the loop's own shim
 * frame, owned by the C stack, comes next), 2 when *f is such a shim. */
static int step(reader_fn rd, const _PyInterpreterFrame **f,
                const PyObject **code, long *off, int *entry) {
  _PyInterpreterFrame fr;
  *entry = 0;
  if (rd(&fr, *f, offsetof(_PyInterpreterFrame, localsplus)) != 0) return -1;
  *f = fr.previous;
#if PY_VERSION_HEX >= 0x030C0000
  if (fr.owner == FRAME_OWNED_BY_CSTACK) {
    *entry = 2;
    return 0;
  }
#else
  *entry = fr.is_entry ? 1 : 0;
#endif
#if PY_VERSION_HEX >= 0x030D0000
  *code = fr.f_executable;
  const _Py_CODEUNIT *ip = fr.instr_ptr;
#else
  *code = (const PyObject *)fr.f_code;
  const _Py_CODEUNIT *ip = fr.prev_instr;
#endif
  *off = (long)((const char *)ip - ((const char *)*code +
                                    offsetof(PyCodeObject, co_code_adaptive)));
  return 1;
}

/* Frames of the calling threads' recent allocation sites (a CNN's step
 * samples the same few lines again and again), so that a frame seen before
 * costs a compare instead of a code object's copy and three table look-ups.
 * Keyed as the function table is (the code object's address, file and name
 * objects, first line) plus the instruction: a code object freed and
 * another made at its address is not taken for it. Direct-mapped, shared by
 * the threads: an entry another thread holds is passed by (a look-up), never
 * waited for. Not thread-local: the extension's static TLS must stay small. */
#define SELF_CACHE 256
static struct {
  atomic_flag busy;
  const PyObject *code, *file, *name;
  long off;
  int first;
  uint32_t id;
} self_cache[SELF_CACHE];

static uint32_t self_frame(const PyObject *code, long off) {
  const PyCodeObject *co = (const PyCodeObject *)code;
  if (!co || Py_TYPE(co) != &PyCode_Type) return 0;
  uint64_t h =
      ((uint64_t)(uintptr_t)code >> 4) ^ (uint64_t)off * 0x9E3779B97F4A7C15ull;
  size_t i = (size_t)(h ^ h >> 32) & (SELF_CACHE - 1);
  if (atomic_flag_test_and_set_explicit(&self_cache[i].busy,
                                        memory_order_acquire))
    return frame_of(direct, code, off);
  uint32_t id = self_cache[i].id;
  if (!id || self_cache[i].code != code || self_cache[i].off != off ||
      self_cache[i].file != co->co_filename ||
      self_cache[i].name != co->co_qualname ||
      self_cache[i].first != co->co_firstlineno) {
    if ((id = frame_of(direct, code, off))) {
      self_cache[i].code = code;
      self_cache[i].file = co->co_filename;
      self_cache[i].name = co->co_qualname;
      self_cache[i].off = off;
      self_cache[i].first = co->co_firstlineno;
      self_cache[i].id = id;
    }
  }
  atomic_flag_clear_explicit(&self_cache[i].busy, memory_order_release);
  return id;
}

/* Frames from frame address f outwards, innermost first. */
static size_t walk(reader_fn rd, const _PyInterpreterFrame *f, uint32_t *out,
                   size_t max) {
  size_t n = 0;
  for (size_t guard = 0; f && n < max && guard < 4 * max; guard++) {
    const PyObject *code;
    long off;
    int entry;
    int r = step(rd, &f, &code, &off, &entry);
    if (r < 0) break;
    uint32_t id = !r             ? 0
                  : rd == direct ? self_frame(code, off)
                                 : frame_of(rd, code, off);
    if (id) out[n++] = id;
  }
  return n;
}

/* walk for the sampler: the frames' code objects not read yet this tick
 * are read together, with one system call. entry[i] gets whether out[i] is
 * the first frame of its call of the evaluation loop (mlprof__stack_thread). */
static size_t walk_sampled(const _PyInterpreterFrame *f, uint32_t *out,
                           uint8_t *entry, size_t max) {
  static const PyObject *code[MLPROF__STACK_MAX_DEPTH];
  static long off[MLPROF__STACK_MAX_DEPTH];
  static uint8_t ent[MLPROF__STACK_MAX_DEPTH];
  struct iovec dst[CODE_CACHE], src[CODE_CACHE];
  size_t m = 0, q = 0;
  win2.lo = win2.hi = 0; /* another thread's, or an older tick's */
  for (size_t guard = 0; f && m < max && guard < 4 * max; guard++) {
    int e, r = step(frame_read, &f, &code[m], &off[m], &e);
    if (r < 0) break;
    if (r)
      ent[m++] = e == 1;
    else if (e == 2 && m)
      ent[m - 1] = 1;
  }
  for (size_t i = 0; i < m && ncode_cache + q < CODE_CACHE; i++) {
    size_t c = 0;
    while (c < ncode_cache + q && code_cache[c].addr != code[i]) c++;
    if (c < ncode_cache + q) continue;
    code_cache[c].addr = code[i];
    code_cache[c].used = 0;
    dst[q] = (struct iovec){&code_cache[c].co, sizeof(PyCodeObject)};
    src[q++] = (struct iovec){(void *)code[i], sizeof(PyCodeObject)};
  }
  ncode_cache += q ? sapi->readv(dst, src, q) : 0;
  size_t n = 0;
  for (size_t i = 0; i < m; i++) {
    uint32_t id = frame_of(windowed, code[i], off[i]);
    if (id) {
      entry[n] = ent[i];
      out[n++] = id;
    } else if (ent[i] && n) {
      /* An unreadable frame still ends its loop's frames. */
      entry[n - 1] = 1;
    }
  }
  return n;
}

/* The calling thread's current frame. */
static const _PyInterpreterFrame *current_frame(const PyThreadState *t) {
#if PY_VERSION_HEX >= 0x030D0000
  return t->current_frame;
#else
  return t->cframe ? t->cframe->current_frame : NULL;
#endif
}

static size_t walk_self(uint32_t *out, size_t max) {
  PyThreadState *t = PyGILState_GetThisThreadState();
  if (!t) return 0;
  return walk(direct, current_frame(t), out, max);
}

/* Where the main interpreter's GIL state is, NULL when unreadable. Read
 * once: the interpreter keeps it where it made it. */
static struct _gil_runtime_state *gil_at;

static struct _gil_runtime_state *gil_state(void) {
#if PY_VERSION_HEX >= 0x030C0000
  struct _gil_runtime_state *at;
  if (sapi->read(
          &at,
          (const char *)main_interp + offsetof(PyInterpreterState, ceval.gil),
          sizeof at) != 0)
    return NULL;
  return at;
#else
  return &_PyRuntime.ceval.gil;
#endif
}

/* The thread holding the GIL in g, or NULL when it is free. */
static const PyThreadState *gil_holder(const struct _gil_runtime_state *g) {
#if PY_VERSION_HEX >= 0x030D0000
  return g->locked ? g->last_holder : NULL;
#else
  return g->locked._value ? (const PyThreadState *)g->last_holder._value : NULL;
#endif
}

/* The thread states of the previous tick, in list order, where they were
 * (sampler thread only): read again at once with the list's head and the
 * GIL, one system call for a tick's threads whose list did not change.
 * Each one read is checked against the list as it is read, so a state
 * freed, or a list changed, meanwhile costs only the reads it needs. */
#define GUESS_MAX 64
static const PyThreadState *guess[GUESS_MAX];
#define PIECES (GUESS_MAX + 4 + CODE_GUESS)
static size_t nguess;

static void walk_all(void (*fn)(void *, const mlprof__stack_thread *),
                     void *ctx) {
  static uint32_t frames[MLPROF__STACK_MAX_DEPTH];
  static uint8_t entry[MLPROF__STACK_MAX_DEPTH];
  static PyThreadState got[GUESS_MAX];
  const PyThreadState *ts = NULL;
  struct _gil_runtime_state g;
  if (finalizing) return;
  static struct iovec dst[PIECES], src[PIECES];
  static int ok[PIECES];
  size_t n = 0;
  dst[n] = (struct iovec){&ts, sizeof ts};
  src[n++] = (struct iovec){
      (char *)main_interp + offsetof(PyInterpreterState, threads.head),
      sizeof ts};
  if (gil_at) {
    dst[n] = (struct iovec){&g, sizeof g};
    src[n++] = (struct iovec){gil_at, sizeof g};
  }
  size_t first = n;
  for (size_t i = 0; i < nguess; i++) {
    dst[n] = (struct iovec){&got[i], sizeof got[i]};
    src[n++] = (struct iovec){(void *)guess[i], sizeof got[i]};
  }
  size_t codes = n;
  for (size_t i = 0; i < ncode_guess; i++) {
    code_cache[i].addr = code_guess[i];
    code_cache[i].used = 0;
    dst[n] = (struct iovec){&code_cache[i].co, sizeof code_cache[i].co};
    src[n++] = (struct iovec){(void *)code_guess[i], sizeof code_cache[i].co};
  }
  size_t at_spec = n;
  if (spec.ts) {
#if PY_VERSION_HEX < 0x030D0000
    dst[n] = (struct iovec){&spec.cf, sizeof spec.cf};
    src[n++] = (struct iovec){(void *)spec.cframe, sizeof spec.cf};
#endif
    dst[n] = (struct iovec){win.buf, spec.hi - spec.lo};
    src[n++] = (struct iovec){(void *)spec.lo, spec.hi - spec.lo};
  }
  read_pieces(dst, src, n, ok);
  spec.live = 1;
  for (size_t i = at_spec; i < n; i++) spec.live &= ok[i];
  const PyThreadState *walked = NULL; /* the first thread walked */
  ncode_cache = 0;
  for (size_t i = 0; i < ncode_guess; i++)
    if (ok[codes + i]) code_cache[ncode_cache++] = code_cache[i];
  if (!ok[0]) return;
  const PyThreadState *holder = gil_at && ok[1] ? gil_holder(&g) : NULL;
  size_t nseen = 0;
  for (int i = 0; ts && i < MAX_THREADS; i++) {
    PyThreadState t;
    size_t k = (size_t)i;
    if (k < nguess && guess[k] == ts && ok[first + k])
      t = got[k];
    else if (sapi->read(&t, ts, sizeof t) != 0)
      break;
    if (k < GUESS_MAX) guess[nseen++] = ts;
    mlprof__stack_thread st = {
        .tid = (uint32_t)t.native_thread_id,
        .flags = MLPROF__STACK_GIL_KNOWN |
                 (holder == ts ? MLPROF__STACK_HAS_GIL : 0),
        .frames = frames,
        .entry = entry};
    if (!gil_at || !ok[1]) st.flags = 0;
    /* A thread that has not run since its last sample keeps its stack:
     * most of a tick's reads are saved on threads that wait. */
    if (st.tid && st.tid <= (1u << 22) && sapi->thread_still(st.tid)) {
      st.flags |= MLPROF__STACK_SAME;
    } else {
      const _PyInterpreterFrame *f;
      if (!spec_hit(ts, &t, &f)) f = window_load(&t);
      st.n = walk_sampled(f, frames, entry, MLPROF__STACK_MAX_DEPTH);
      /* Where the innermost frame is named, read again after a native
       * capture (src/record/stacks.c, moved). */
#if PY_VERSION_HEX < 0x030D0000
      if (t.cframe)
        st.top_at = (const void *const *)((const char *)t.cframe +
                                          offsetof(_PyCFrame, current_frame));
#else
      st.top_at = (const void *const *)((const char *)ts +
                                        offsetof(PyThreadState, current_frame));
#endif
      st.top = f;
      if (f && st.top_at) st.flags |= MLPROF__STACK_TOP;
      if (!walked) {
        walked = ts;
        spec.chunk = t.datastack_chunk;
#if PY_VERSION_HEX < 0x030D0000
        spec.cframe = t.cframe;
#endif
        if (!window_range(&t, &spec.lo, &spec.hi)) walked = NULL;
      }
    }
    /* A thread state freed under us reads as anything: a kernel thread id
     * is never 0 nor above pid_max's limit. */
    if (st.tid && st.tid <= (1u << 22)) fn(ctx, &st);
    ts = t.next;
  }
  nguess = nseen;
  spec.ts = walked;
  spec.live = 0;
  ncode_guess = 0;
  for (size_t i = 0; i < ncode_cache && ncode_guess < CODE_GUESS; i++)
    if (code_cache[i].used) code_guess[ncode_guess++] = code_cache[i].addr;
}

static const mlprof__stack_walker walker = {walk_self, walk_all};

void mlprof_stacks_finalizing(void) { finalizing = 1; }

int mlprof_stacks_register(void *lib, void (**fork_child)(void)) {
  const mlprof__stack_api *(*get)(void);
  *fork_child = NULL;
  void *fn = dlsym(lib, "mlprof__stack_api_get");
  if (!fn) return 0; /* a library older than stacks */
  memcpy(&get, &fn, sizeof fn);
  const mlprof__stack_api *a = get();
  if (!a || a->size < sizeof *a) return 0;
  sapi = a;
  *fork_child = a->fork_child;
  main_interp = PyInterpreterState_Main();
  /* Native frames of the evaluation loop become its Python frames; a
   * thread asleep on a futex in the GIL's state (its mutex and condition
   * variables) waits for the GIL. */
  gil_at = gil_state();
  a->interp_set((const void *)_PyEval_EvalFrameDefault, gil_at,
                sizeof(struct _gil_runtime_state));
  return a->walker_set(&walker) == 0;
}

#else

void mlprof_stacks_finalizing(void) {}

int mlprof_stacks_register(void *lib, void (**fork_child)(void)) {
  (void)lib;
  *fork_child = NULL;
  return 0;
}

#endif
