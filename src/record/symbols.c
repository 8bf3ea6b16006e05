/* Names of native code addresses (stack.h, mlprof__symbolize): what dladdr
 * answers, the loaded object that holds the address and the dynamic symbol
 * whose range holds it, from a table of each object's dynamic symbols
 * sorted by address, made the first time one of its addresses is asked
 * for. dladdr goes through every symbol of the object at each call: a
 * millisecond in libtorch's 200,000, for each sample of a thread running in
 * it (where it was interrupted is a new address each time).
 *
 * The tables point into the objects' own string tables, so names are
 * copied out while the loader's lock is held (dl_iterate_phdr), and every
 * table is dropped once any object was unloaded (another may take its
 * place). C++ names are demangled. Only the writer asks for symbols; anyone may
 * ask for an object's range (no table). The objects sit in a fixed array, each
 * published whole (filled, then counted), so a child forked while the writer
 * made one finds the tables whole, or without that one, which its writer makes
 * again. */
#include <ctype.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "stack.h"

typedef struct {
  uintptr_t start;
  uint32_t size; /* 0: matches its own address only, as in dladdr */
  /* Its index in the dynamic symbol table, or with FROM_FILE, its name's
   * offset in the file's string table. */
  uint32_t index;
} sym;

#define FROM_FILE (1u << 31)

typedef struct {
  uintptr_t addr;          /* the object's load bias */
  const ElfW(Phdr) * phdr; /* with addr, which object */
  sym *s;
  size_t n;
  /* Its file, when its symbol table (.symtab) named functions too: the
   * names are read from there when asked for. */
  char *path;
  uint64_t strtab_off, strtab_size;
} object;

#define OBJECTS_MAX 1024
static object objects[OBJECTS_MAX];
static size_t nobjects;
static unsigned long long subs_seen;

/* Symbols past this many in one object are not read (a corrupt count). */
#define SYMS_MAX (1u << 24)
/* How far below the nearest start a holding symbol is looked for. */
#define BACK_MAX 64

static void drop_all(void) {
  size_t n = nobjects;
  nobjects = 0; /* first: a child forked meanwhile leaks, never frees twice */
  atomic_signal_fence(memory_order_seq_cst);
  for (size_t i = 0; i < n; i++) {
    free(objects[i].s);
    free(objects[i].path);
  }
}

/* A dynamic section's address: relocated in place by the loader, except
 * where the section is read-only (the vDSO's): then relative to addr. */
static uintptr_t dyn_ptr(uintptr_t p, uintptr_t addr) {
  return p < addr ? p + addr : p;
}

/* How many entries the dynamic symbol table has, from its hash table. */
static size_t count_syms(const Elf32_Word *hash, const Elf32_Word *gnu) {
  if (hash) return hash[1];
  if (!gnu) return 0;
  Elf32_Word nbuckets = gnu[0], first = gnu[1], bloom = gnu[2];
  const Elf32_Word *buckets =
      gnu + 4 + bloom * (sizeof(ElfW(Addr)) / sizeof(Elf32_Word));
  const Elf32_Word *chain = buckets + nbuckets;
  Elf32_Word last = 0;
  for (Elf32_Word b = 0; b < nbuckets; b++)
    if (buckets[b] > last) last = buckets[b];
  if (last < first) return first;
  while (last - first < SYMS_MAX && !(chain[last - first] & 1)) last++;
  return (size_t)last + 1;
}

/* By address, then table order (of two symbols at one address dladdr
 * names the first). */
static int by_start(const void *a, const void *b) {
  const sym *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* The dynamic section's symbol and string tables and their sizes. */
typedef struct {
  const ElfW(Sym) * symtab;
  const char *strtab;
  size_t strsz, nsyms;
} dynamic;

static dynamic dynamic_of(const struct dl_phdr_info *info,
                          const ElfW(Dyn) * dyn) {
  dynamic d = {0};
  const Elf32_Word *hash = NULL, *gnu = NULL;
  for (size_t i = 0; i < 4096 && dyn[i].d_tag != DT_NULL; i++) {
    uintptr_t p = dyn_ptr(dyn[i].d_un.d_ptr, info->dlpi_addr);
    switch (dyn[i].d_tag) {
      case DT_SYMTAB:
        d.symtab = (const ElfW(Sym) *)p;
        break;
      case DT_STRTAB:
        d.strtab = (const char *)p;
        break;
      case DT_STRSZ:
        d.strsz = dyn[i].d_un.d_val;
        break;
      case DT_HASH:
        hash = (const Elf32_Word *)p;
        break;
      case DT_GNU_HASH:
        gnu = (const Elf32_Word *)p;
        break;
    }
  }
  if (d.symtab && d.strtab) d.nsyms = count_syms(hash, gnu);
  if (d.nsyms > SYMS_MAX) d.nsyms = SYMS_MAX;
  return d;
}

/* ---- the file's own symbol table ---------------------------------------
 *
 * Most of a big C++ library's functions are not exported (libtorch: 0.5
 * million in .symtab beside the dynamic ones), and a sample in one would be
 * an offset in the library, a "function" of its own for every address. The
 * file's .symtab names them, as perf and py-spy do, where the file on disk
 * is the one loaded (its program headers are those in memory). Read with
 * pread, never mapped: a file truncated meanwhile must not be a SIGBUS in
 * the program. The writer's descriptor table is its own (fd.c). */

/* Bytes of .symtab read at most (libtorch's is 12.7 MB). */
#define FILE_SYMTAB_MAX (256u << 20)

static int read_at(int fd, void *buf, size_t n, uint64_t off) {
  for (size_t done = 0; done < n;) {
    ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
    if (r <= 0) return -1;
    done += (size_t)r;
  }
  return 0;
}

/* path opened for reading when it is a regular file, else -1: a loaded
 * object's path may since name a FIFO (another user's, in a directory
 * both can write), whose open would block the writer forever. */
static int open_regular(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* Whether fd holds the object info describes: same program headers. */
static int same_object(int fd, const ElfW(Ehdr) * e,
                       const struct dl_phdr_info *info) {
  if (e->e_phnum != info->dlpi_phnum || e->e_phentsize != sizeof(ElfW(Phdr)))
    return 0;
  for (size_t i = 0; i < e->e_phnum; i++) {
    ElfW(Phdr) ph;
    if (read_at(fd, &ph, sizeof ph, e->e_phoff + i * sizeof ph)) return 0;
    const ElfW(Phdr) *m = &info->dlpi_phdr[i];
    if (ph.p_type != m->p_type || ph.p_vaddr != m->p_vaddr ||
        ph.p_memsz != m->p_memsz)
      return 0;
  }
  return 1;
}

/* Appends the functions of the file's .symtab to *s (n, cap); sets o's
 * path and string table when there were any. */
static int file_syms(object *o, const struct dl_phdr_info *info, sym **s,
                     size_t *n, size_t *cap) {
  const char *path = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name
                                                           : "/proc/self/exe";
  int fd = open_regular(path);
  if (fd < 0) return 0;
  int rc = 0;
  ElfW(Ehdr) e;
  ElfW(Shdr) tab, str;
  size_t before = *n;
  if (read_at(fd, &e, sizeof e, 0) || memcmp(e.e_ident, ELFMAG, SELFMAG) ||
      e.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
      e.e_shentsize != sizeof(ElfW(Shdr)) || !same_object(fd, &e, info))
    goto out;
  size_t i = 0;
  for (; i < e.e_shnum; i++)
    if (!read_at(fd, &tab, sizeof tab, e.e_shoff + i * sizeof tab) &&
        tab.sh_type == SHT_SYMTAB)
      break;
  if (i == e.e_shnum || tab.sh_entsize != sizeof(ElfW(Sym)) ||
      tab.sh_size > FILE_SYMTAB_MAX || tab.sh_link >= e.e_shnum ||
      read_at(fd, &str, sizeof str, e.e_shoff + tab.sh_link * sizeof str) ||
      str.sh_type != SHT_STRTAB || str.sh_size >= FROM_FILE)
    goto out;
  ElfW(Sym) chunk[1024];
  size_t total = tab.sh_size / sizeof(ElfW(Sym));
  for (size_t at = 0; at < total;) {
    size_t k = total - at < 1024 ? total - at : 1024;
    if (read_at(fd, chunk, k * sizeof *chunk,
                tab.sh_offset + at * sizeof *chunk))
      break;
    for (size_t j = 0; j < k; j++) {
      const ElfW(Sym) *y = &chunk[j];
      int type = ELF64_ST_TYPE(y->st_info);
      if ((type != STT_FUNC && type != STT_GNU_IFUNC) || !y->st_size ||
          y->st_shndx == SHN_UNDEF || y->st_shndx == SHN_ABS || !y->st_name ||
          y->st_name >= str.sh_size)
        continue;
      if (mlprof__grow(s, cap, *n + 1, sizeof **s)) {
        rc = MLPROF_ENOMEM;
        goto out;
      }
      (*s)[(*n)++] =
          (sym){info->dlpi_addr + y->st_value,
                y->st_size > UINT32_MAX ? UINT32_MAX : (uint32_t)y->st_size,
                FROM_FILE | y->st_name};
    }
    at += k;
  }
  if (*n > before && !(o->path = strdup(path))) rc = MLPROF_ENOMEM;
  o->strtab_off = str.sh_offset;
  o->strtab_size = str.sh_size;
out:
  if (rc || !o->path) *n = before;
  close(fd);
  return rc;
}

/* The name at off of o's file's string table, into out. */
static void file_name(const object *o, uint32_t off, char *out) {
  out[0] = 0;
  int fd = o->path ? open_regular(o->path) : -1;
  if (fd < 0) return;
  uint64_t left = o->strtab_size - off;
  size_t n = left < MLPROF__SYM_MAX ? (size_t)left : MLPROF__SYM_MAX;
  ssize_t r = pread(fd, out, n, (off_t)(o->strtab_off + off));
  out[r > 0 ? r : 0] = 0;
  close(fd);
}

/* o's table of symbols, sorted by address: the dynamic ones, and the
 * functions of the file's .symtab. */
static int table_make(object *o, const struct dl_phdr_info *info,
                      const dynamic *d) {
  size_t cap = d->nsyms ? d->nsyms : 1, k = 0;
  sym *s = malloc(cap * sizeof *s);
  if (!s) return MLPROF_ENOMEM;
  for (size_t i = 1; i < d->nsyms; i++) {
    const ElfW(Sym) *e = &d->symtab[i];
    /* dladdr's rule: no thread-local or absolute symbols, and an undefined
     * one only with an address (a program's PLT entry), matched exactly. */
    if (ELF64_ST_TYPE(e->st_info) == STT_TLS || e->st_shndx == SHN_ABS ||
        (e->st_shndx == SHN_UNDEF && !e->st_value) || e->st_name >= d->strsz)
      continue;
    uint64_t size = e->st_shndx == SHN_UNDEF ? 0 : e->st_size;
    s[k++] =
        (sym){info->dlpi_addr + e->st_value,
              size > UINT32_MAX ? UINT32_MAX : (uint32_t)size, (uint32_t)i};
  }
  int rc = file_syms(o, info, &s, &k, &cap);
  if (rc) {
    free(s);
    return rc;
  }
  /* A function in both tables is named by the dynamic one (lower index). */
  qsort(s, k, sizeof *s, by_start);
  o->s = s;
  o->n = k;
  return 0;
}

/* The symbol of o holding pc, NULL when none: the nearest start at or
 * below pc whose range holds it. */
static const sym *lookup(const object *o, uintptr_t pc) {
  size_t lo = 0, hi = o->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (o->s[mid].start <= pc)
      lo = mid + 1;
    else
      hi = mid;
  }
  const sym *best = NULL;
  /* The highest start that holds pc, and of those there the first. */
  for (size_t i = lo, back = 0; i-- > 0 && back < BACK_MAX; back++) {
    const sym *e = &o->s[i];
    if (best && e->start != best->start) break;
    if (e->size ? pc - e->start < e->size : pc == e->start) best = e;
  }
  return best;
}

static void copy(char *dst, const char *src) {
  size_t n = src ? strnlen(src, MLPROF__SYM_MAX) : 0;
  if (n) memcpy(dst, src, n);
  dst[n] = 0;
}

void mlprof__cxx_name_short(char *s) {
  int angle = 0, brace = 0;
  char *space = NULL; /* the last one outside brackets: after a return type */
  for (char *p = s; *p; p++) {
    if (mlprof__has_prefix(p, "(anonymous namespace)")) {
      p += strlen("(anonymous namespace)") - 1;
    } else if (mlprof__has_prefix(p, "operator") &&
               !isalnum((unsigned char)p[8]) && p[8] != '_') {
      /* The operator's own characters are no brackets; "operator new",
       * "operator int" have their space. */
      p += 8;
      if (mlprof__has_prefix(p, "()"))
        p += 2;
      else if (*p == ' ')
        p += 1 + strcspn(p + 1, "(<");
      else
        p += strspn(p, "<>=!+-*/%&|^~[],");
      p--;
    } else if (*p == '{') {
      brace++;
    } else if (*p == '}') {
      brace--;
    } else if (*p == '<') {
      angle++;
    } else if (*p == '>') {
      angle--;
    } else if (*p == ' ' && !angle && !brace && p[1] != '<') {
      space = p;
    } else if (*p == '(' && !angle && !brace) {
      *p = 0;
      break;
    }
  }
  if (space) memmove(s, space + 1, strlen(space + 1) + 1);
}

/* A C++ symbol as people read it (its parameters left out, as py-spy
 * shows it): demangled by the program's own C++ runtime, where one is
 * loaded (in any scope: libtorch's is local to it), else left as it is.
 * Outside dl_iterate_phdr: dlopen takes the loader's other lock. */
static void demangle(char *name) {
  static const char *const runtimes[] = {"libstdc++.so.6", "libc++abi.so.1"};
  if (!mlprof__has_prefix(name, "_Z")) return;
  void *h = NULL, *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
  for (size_t i = 0; !f && i < sizeof runtimes / sizeof *runtimes; i++) {
    /* Only one already loaded; closed after, so it stays as loaded as it
     * was. */
    if (!(h = dlopen(runtimes[i], RTLD_NOW | RTLD_NOLOAD))) continue;
    if (!(f = dlsym(h, "__cxa_demangle"))) {
      dlclose(h);
      h = NULL;
    }
  }
  if (f) {
    char *(*fn)(const char *, char *, size_t *, int *);
    memcpy(&fn, &f, sizeof f);
    int status = -1;
    char *d = fn(name, NULL, NULL, &status);
    if (d && status == 0) {
      mlprof__cxx_name_short(d);
      if (d[0]) copy(name, d);
    }
    free(d);
  }
  if (h) dlclose(h);
}

typedef struct {
  uintptr_t pc;
  int symbol; /* the symbol too (the writer only), else the object alone */
  mlprof__symbol *out;
  int rc;
} query;

static int on_object(struct dl_phdr_info *info, size_t size, void *arg) {
  query *q = arg;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  const ElfW(Dyn) *dyn = NULL;
  int in = 0;
  for (size_t i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *p = &info->dlpi_phdr[i];
    uintptr_t a = info->dlpi_addr + p->p_vaddr;
    if (p->p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)a;
    if (p->p_type != PT_LOAD) continue;
    if (a < lo) lo = a;
    if (a + p->p_memsz > hi) hi = a + p->p_memsz;
    in |= q->pc - a < p->p_memsz;
  }
  if (!in) return 0;
  mlprof__symbol *out = q->out;
  out->lo = lo;
  out->hi = hi;
  out->base = lo & ~(uintptr_t)4095;
  /* The program itself has no name here; dladdr gives its argv[0]. */
  copy(out->module, info->dlpi_name && info->dlpi_name[0]
                        ? info->dlpi_name
                        : program_invocation_name);
  q->rc = 0;
  if (!q->symbol || !dyn) return 1;
  if (size >=
          offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs &&
      info->dlpi_subs != subs_seen) {
    drop_all();
    subs_seen = info->dlpi_subs;
  }
  dynamic d = dynamic_of(info, dyn);
  if (!d.nsyms) return 1;
  object *o = NULL;
  for (size_t i = 0; i < nobjects && !o; i++)
    if (objects[i].addr == info->dlpi_addr &&
        objects[i].phdr == info->dlpi_phdr)
      o = &objects[i];
  if (!o) {
    if (nobjects == OBJECTS_MAX) drop_all();
    o = &objects[nobjects];
    *o = (object){info->dlpi_addr, info->dlpi_phdr, NULL, 0, NULL, 0, 0};
    if ((q->rc = table_make(o, info, &d)) != 0) return 1;
    atomic_signal_fence(memory_order_seq_cst);
    nobjects++;
  }
  const sym *s = lookup(o, q->pc);
  if (s) {
    out->start = s->start;
    out->size = s->size;
    if (s->index & FROM_FILE)
      file_name(o, s->index & ~FROM_FILE, out->name);
    else
      copy(out->name, d.strtab + d.symtab[s->index].st_name);
  }
  return 1;
}

static int ask(uintptr_t pc, int symbol, mlprof__symbol *out) {
  query q = {pc, symbol, out, MLPROF_EINVAL};
  memset(out, 0, offsetof(mlprof__symbol, module));
  out->module[0] = out->name[0] = 0;
  dl_iterate_phdr(on_object, &q);
  return q.rc;
}

int mlprof__symbolize(uintptr_t pc, mlprof__symbol *out) {
  int rc = ask(pc, 1, out);
  demangle(out->name);
  return rc;
}

int mlprof__object_of(uintptr_t pc, mlprof__symbol *out) {
  return ask(pc, 0, out);
}
