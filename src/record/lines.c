/* Line timings handed over by mlprof_lines_set: one encoded LINES payload
 * per function (docs/format.md), kept until exit and rewritten whenever the
 * caller sets it again; the writer takes the ones set since its last flush.
 * They share the metadata lock, which fork handling already takes. */
#include <stdlib.h>
#include <string.h>

#include "../format/wire.h"
#include "internal.h"

typedef struct {
  uint8_t *payload;
  size_t len, key_len; /* the payload's first key_len bytes name the function */
  int dirty;
} lines_entry;

static lines_entry *entries;
static size_t nentries;

static size_t str_room(const char *s) { return (s ? strlen(s) : 0) + 10; }

static uint8_t *put_s(uint8_t *p, const char *s) {
  size_t n = s ? strlen(s) : 0;
  p = mlprof__put_uv(p, n);
  if (n) memcpy(p, s, n);
  return p + n;
}

int mlprof_lines_set(const char *function, const char *file,
                     uint32_t first_line, const mlprof_line *lines, size_t n) {
  if (!function || !file || (n && !lines)) return MLPROF_EINVAL;
  /* A forked child's profile starts on its first event: this is one. */
  if (atomic_load(&mlprof__child_pending)) mlprof__session_child_start();
  size_t cap = str_room(function) + str_room(file) + 20;
  for (size_t i = 0; i < n; i++) {
    if (lines[i].reserved[0] || lines[i].reserved[1]) return MLPROF_EINVAL;
    cap += 40 + str_room(lines[i].source);
  }
  if (cap > MLPROF__CHUNK_MAX) return MLPROF_EINVAL;
  uint8_t *b = malloc(cap);
  if (!b) return MLPROF_ENOMEM;
  uint8_t *p = put_s(put_s(b, function), file);
  p = mlprof__put_uv(p, first_line);
  size_t key_len = (size_t)(p - b);
  p = mlprof__put_uv(p, n);
  for (size_t i = 0; i < n; i++) {
    p = mlprof__put_uv(p, lines[i].line);
    p = mlprof__put_uv(p, lines[i].hits);
    p = mlprof__put_uv(p, lines[i].total_ns);
    p = mlprof__put_uv(p, lines[i].exclusive_ns);
    p = put_s(p, lines[i].source);
  }
  pthread_mutex_lock(&mlprof__meta_lock);
  size_t i = 0;
  while (i < nentries && !(entries[i].key_len == key_len &&
                           memcmp(entries[i].payload, b, key_len) == 0))
    i++;
  if (i == nentries) {
    lines_entry *e = realloc(entries, (nentries + 1) * sizeof *e);
    if (!e) {
      pthread_mutex_unlock(&mlprof__meta_lock);
      free(b);
      return MLPROF_ENOMEM;
    }
    entries = e;
    entries[nentries++] = (lines_entry){NULL, 0, key_len, 0};
  }
  free(entries[i].payload);
  entries[i] = (lines_entry){b, (size_t)(p - b), key_len, 1};
  pthread_mutex_unlock(&mlprof__meta_lock);
  return 0;
}

void mlprof__lines_take(void (*put)(void *ctx, const uint8_t *payload,
                                    size_t len),
                        void *ctx) {
  pthread_mutex_lock(&mlprof__meta_lock);
  for (size_t i = 0; i < nentries; i++)
    if (entries[i].dirty) {
      put(ctx, entries[i].payload, entries[i].len);
      entries[i].dirty = 0;
    }
  pthread_mutex_unlock(&mlprof__meta_lock);
}

/* A forked child's line timings are its own (the parent's stay the
 * parent's): it starts with none. */
void mlprof__lines_after_fork(void) {
  for (size_t i = 0; i < nentries; i++) free(entries[i].payload);
  free(entries);
  entries = NULL;
  nentries = 0;
}
