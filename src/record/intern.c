/* Dynamic names: each distinct (kind, category, name) becomes one site that
 * lives until exit, so events can refer to it by pointer like a static call
 * site. A small per-thread cache answers repeats without the global lock. */
#include <stdlib.h>
#include <string.h>

#include "../format/wire.h"
#include "internal.h"

#define MAX_NAMES (1u << 20)

typedef struct {
  mlprof_site site; /* first: the site pointer is the entry pointer */
  uint32_t hash;
  uint8_t kind;
  char name[];
} entry;

MLPROF__HIDDEN pthread_mutex_t mlprof__intern_lock = PTHREAD_MUTEX_INITIALIZER;
static entry **table;
static uint32_t table_cap, table_len;

static uint32_t name_hash(int kind, unsigned category, const char *name) {
  uint32_t h = 2166136261u ^ (uint32_t)(kind * 16 + category);
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 16777619u;
  return h ? h : 1;
}

static int matches(const entry *e, uint32_t h, int kind, unsigned category,
                   const char *name) {
  return e->hash == h && e->kind == kind && e->site.category == category &&
         strcmp(e->name, name) == 0;
}

static int grow(void) {
  uint32_t ncap = table_cap ? table_cap * 2 : 1024;
  entry **nt = calloc(ncap, sizeof *nt);
  if (!nt) return -1;
  for (uint32_t i = 0; i < table_cap; i++) {
    if (!table[i]) continue;
    uint32_t j = table[i]->hash & (ncap - 1);
    while (nt[j]) j = (j + 1) & (ncap - 1);
    nt[j] = table[i];
  }
  free(table);
  table = nt;
  table_cap = ncap;
  return 0;
}

static const mlprof_site *lookup_global(uint32_t h, int kind, unsigned category,
                                        const char *name) {
  const mlprof_site *found = NULL;
  /* The table is the library's memory, not the program's; and a signal
   * handler's malloc must not come back here while the lock is held. */
  int quiet = mlprof__quiet;
  mlprof__quiet = 1;
  pthread_mutex_lock(&mlprof__intern_lock);
  if (table_cap) {
    for (uint32_t j = h & (table_cap - 1); table[j];
         j = (j + 1) & (table_cap - 1))
      if (matches(table[j], h, kind, category, name)) {
        found = &table[j]->site;
        goto out;
      }
  }
  if (table_len >= MAX_NAMES) goto out;
  if ((table_len + 1) * 2 > table_cap && grow() != 0) goto out;
  size_t len = strlen(name);
  entry *e = malloc(sizeof *e + len + 1);
  if (!e) goto out;
  memcpy(e->name, name, len + 1);
  e->site = (mlprof_site){e->name, NULL, NULL, 0, category};
  e->hash = h;
  e->kind = (uint8_t)kind;
  uint32_t j = h & (table_cap - 1);
  while (table[j]) j = (j + 1) & (table_cap - 1);
  table[j] = e;
  table_len++;
  found = &e->site;
out:
  pthread_mutex_unlock(&mlprof__intern_lock);
  mlprof__quiet = quiet;
  return found;
}

const mlprof_site *mlprof__intern(int kind, unsigned category,
                                  const char *name) {
  if (!name) return NULL;
  uint32_t h = name_hash(kind, category, name);
  mlprof__thread *t = mlprof__tls.thread;
  if (t) {
    uint32_t slot = h & (MLPROF__ICACHE - 1);
    const mlprof_site *s = t->icache[slot].site;
    if (s && t->icache[slot].hash == h &&
        matches((const entry *)s, h, kind, category, name))
      return s;
    s = lookup_global(h, kind, category, name);
    if (s) {
      t->icache[slot].site = s;
      t->icache[slot].hash = h;
    }
    return s;
  }
  return lookup_global(h, kind, category, name);
}

const mlprof_site *mlprof_site_intern(const char *name, mlprof_category cat) {
  return mlprof__intern(MLPROF__NAME_ZONE, cat, name);
}
