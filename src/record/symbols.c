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
 * place). Only the writer asks for symbols; anyone may ask for an object's
 * range (no table). The objects sit in a fixed array, each published whole
 * (filled, then counted), so a child forked while the writer made one finds
 * the tables whole, or without that one, which its writer makes again. */
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "stack.h"

typedef struct {
  uintptr_t start;
  uint32_t size;  /* 0: matches its own address only, as in dladdr */
  uint32_t index; /* in the object's symbol table */
} sym;

typedef struct {
  uintptr_t addr;          /* the object's load bias */
  const ElfW(Phdr) * phdr; /* with addr, which object */
  sym *s;
  size_t n;
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
  for (size_t i = 0; i < n; i++) free(objects[i].s);
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

/* o's table of symbols, sorted by address. */
static int table_make(object *o, const struct dl_phdr_info *info,
                      const dynamic *d) {
  o->s = NULL;
  o->n = 0;
  sym *s = malloc((d->nsyms ? d->nsyms : 1) * sizeof *s);
  if (!s) return MLPROF_ENOMEM;
  size_t k = 0;
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

static size_t copy(char *dst, const char *src) {
  size_t n = src ? strnlen(src, MLPROF__SYM_MAX) : 0;
  if (n) memcpy(dst, src, n);
  dst[n] = 0;
  return n;
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
    *o = (object){info->dlpi_addr, info->dlpi_phdr, NULL, 0};
    if ((q->rc = table_make(o, info, &d)) != 0) return 1;
    atomic_signal_fence(memory_order_seq_cst);
    nobjects++;
  }
  const sym *s = lookup(o, q->pc);
  if (s) {
    out->start = s->start;
    out->size = s->size;
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
  return ask(pc, 1, out);
}

int mlprof__object_of(uintptr_t pc, mlprof__symbol *out) {
  return ask(pc, 0, out);
}
