/* Growable arrays, heap copies and the 64-bit key map. */
#include <mlprof.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

uint32_t mlprof__map_find(const mlprof__map *m, uint64_t key) {
  if (!m->cap) return MLPROF__NONE;
  for (size_t i = mlprof__map_slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (m->vals[i] == MLPROF__NONE) return MLPROF__NONE;
    if (m->keys[i] == key) return m->vals[i];
  }
}

static void map_insert(uint64_t *keys, uint32_t *vals, size_t cap, uint64_t key,
                       uint32_t val) {
  size_t i = mlprof__map_slot(key, cap);
  while (vals[i] != MLPROF__NONE && keys[i] != key) i = (i + 1) & (cap - 1);
  keys[i] = key;
  vals[i] = val;
}

int mlprof__map_put(mlprof__map *m, uint64_t key, uint32_t val) {
  if ((m->count + 1) * 4 > m->cap * 3) {
    size_t cap = m->cap ? m->cap * 2 : 16;
    uint64_t *keys = malloc(cap * sizeof *keys);
    uint32_t *vals = malloc(cap * sizeof *vals);
    if (!keys || !vals) {
      free(keys);
      free(vals);
      return MLPROF_ENOMEM;
    }
    memset(vals, 0xff, cap * sizeof *vals);
    for (size_t i = 0; i < m->cap; i++)
      if (m->vals[i] != MLPROF__NONE)
        map_insert(keys, vals, cap, m->keys[i], m->vals[i]);
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
  }
  size_t before = mlprof__map_get(m, key) == MLPROF__NONE;
  map_insert(m->keys, m->vals, m->cap, key, val);
  m->count += before;
  return 0;
}

void mlprof__map_clear(mlprof__map *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

int mlprof__grow(void *pp, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 8;
  while (c < need) c += c / 2 + 8;
  void *n = realloc(*(void **)pp, c * elem);
  if (!n) return MLPROF_ENOMEM;
  *(void **)pp = n;
  *cap = c;
  return 0;
}

char *mlprof__dup(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) return NULL;
  if (n) memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

uint64_t mlprof__hash(const void *s, size_t n, uint64_t h) {
  const unsigned char *p = s;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint32_t mlprof__strindex_intern(mlprof__strindex *ix, char ***names,
                                 size_t **lens, size_t *count, size_t *cap,
                                 const char *s, size_t n) {
  uint64_t h = mlprof__hash(s, n, MLPROF__HASH_START);
  uint32_t first = mlprof__map_get(&ix->first, h);
  for (uint32_t i = first; i != MLPROF__NONE; i = ix->next[i])
    if ((*lens)[i] == n && memcmp((*names)[i], s, n) == 0) return i;
  /* The two arrays grow alike from *cap; should the second fail, the first
   * is only larger than *cap says, which its next growth takes in. */
  size_t id = *count, names_cap = *cap;
  if (id >= MLPROF__NONE - 1 ||
      mlprof__grow(names, &names_cap, id + 1, sizeof **names) ||
      mlprof__grow(lens, cap, id + 1, sizeof **lens) ||
      mlprof__grow(&ix->next, &ix->next_cap, id + 1, sizeof *ix->next))
    return MLPROF__NONE;
  char *copy = mlprof__dup(s, n);
  if (!copy || mlprof__map_put(&ix->first, h, (uint32_t)id)) {
    free(copy);
    return MLPROF__NONE;
  }
  (*names)[id] = copy;
  (*lens)[id] = n;
  ix->next[id] = first;
  *count = id + 1;
  return (uint32_t)id;
}

void mlprof__strindex_free(mlprof__strindex *ix) {
  mlprof__map_clear(&ix->first);
  free(ix->next);
  memset(ix, 0, sizeof *ix);
}
