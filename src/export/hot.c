/* Hot functions (mlprof__report.hot) in the text and JSON reports, and the
 * stacks as folded lines (FlameGraph's and speedscope's collapsed format).
 * All are left out when no stack was sampled. */
#include <inttypes.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "table.h"

#define TOP_FUNCS 15
#define TOP_ZONES 8
#define TOP_ZONE_FUNCS 5

static double pct(uint64_t n, uint64_t of) {
  return of ? 100.0 * (double)n / (double)of : 0.0;
}

static void fmt_ns(char *b, size_t len, uint64_t ns) {
  mlprof__fmt_duration(b, len, (double)ns);
}

static void where(const mlprof__hot *h, const mlprof__hot_row *row, char *b,
                  size_t len) {
  const mlprof__hot_func *f = &h->funcs[row->func];
  uint32_t line = row->line == MLPROF__NONE ? f->first_line : row->line;
  if (!f->first_line && !line)
    snprintf(b, len, "%s", f->file);
  else
    snprintf(b, len, "%s:%u", f->file, (unsigned)line);
}

/* The rows of one table: on a CPU (cpu) or all samples. */
static int rows_table(const mlprof__hot *h, const mlprof__hot_row *rows,
                      size_t n, size_t top, uint64_t of, int cpu,
                      mlprof__out *o) {
  static const char *const heads[] = {"function", "where", "self",
                                      "self%",    "total", "total%"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "llrrrr")) return MLPROF_ENOMEM;
  size_t shown = 0;
  for (size_t i = 0; i < n && shown < top; i++) {
    const mlprof__hot_row *r = &rows[i];
    uint64_t self = cpu ? r->self_cpu : r->self;
    uint64_t total = cpu ? r->total_cpu : r->total;
    if (!self && !total) continue;
    const mlprof__hot_func *f = &h->funcs[r->func];
    char w[512], b[32];
    mlprof__table_name(&t, f->function, strlen(f->function), 40);
    where(h, r, w, sizeof w);
    mlprof__table_name(&t, w, strlen(w), 50);
    fmt_ns(b, sizeof b, self);
    mlprof__table_cell(&t, "%s", b);
    mlprof__table_cell(&t, "%.1f%%", pct(self, of));
    fmt_ns(b, sizeof b, total);
    mlprof__table_cell(&t, "%s", b);
    mlprof__table_cell(&t, "%.1f%%", pct(total, of));
    shown++;
  }
  return mlprof__table_print(&t, o);
}

/* The samples inside the steps by step part (mlprof__hot_steps). */
static int parts_text(const mlprof__hot *h, mlprof__out *o) {
  uint64_t in = 0;
  for (int k = 0; k < MLPROF__HOT_PARTS; k++) in += h->parts[k].on_cpu_ns;
  if (!h->steps || !in) return 0;
  char b[32], out[32];
  fmt_ns(b, sizeof b, in);
  fmt_ns(out, sizeof out, h->outside_on_cpu_ns);
  mlprof__out_printf(o,
                     "\nHot functions by step part (samples inside the steps, "
                     "on a CPU: %s; outside them, start-up included: %s)\n",
                     b, out);
  for (int k = 0; k < MLPROF__HOT_PARTS; k++) {
    const mlprof__hot_zone *p = &h->parts[k];
    if (!p->on_cpu_ns) continue;
    fmt_ns(b, sizeof b, p->on_cpu_ns);
    mlprof__out_printf(o, "  %s: %s, %.1f%% of the steps' time on a CPU\n",
                       mlprof__part_name(k), b, pct(p->on_cpu_ns, in));
    int rc =
        rows_table(h, p->rows, p->nrows, TOP_ZONE_FUNCS, p->on_cpu_ns, 1, o);
    if (rc) return rc;
  }
  return o->err;
}

int mlprof__export_hot_text(const mlprof__report *r, mlprof__out *o) {
  const mlprof__hot *h = &r->hot;
  if (!h->samples) return 0;
  char rate[32] = "", cpu[32];
  if (h->interval_ns > 0)
    snprintf(rate, sizeof rate, " at %.0f Hz", 1e9 / h->interval_ns);
  mlprof__fmt_duration(cpu, sizeof cpu, (double)h->cpu_ns);
  mlprof__out_printf(o,
                     "\nHot functions (stack samples%s: %" PRIu64
                     " on a CPU of %" PRIu64
                     ", threads' CPU time %s; the whole run, start-up "
                     "included)\n",
                     rate, h->on_cpu, h->samples, cpu);
  int rc;
  if (h->on_cpu_ns) {
    mlprof__out_lit(o,
                    "  on a CPU (self: innermost; total: anywhere in the "
                    "stack)\n");
    if ((rc = rows_table(h, h->rows, h->nrows, TOP_FUNCS, h->on_cpu_ns, 1, o)))
      return rc;
  }
  if (h->wall_ns > h->on_cpu_ns) {
    /* Wall time: where threads wait (locks, I/O, sleep) shows here. */
    mlprof__hot_row wall[TOP_FUNCS];
    size_t n = 0;
    for (size_t i = 0; i < h->nrows; i++) {
      const mlprof__hot_row *row = &h->rows[i];
      uint64_t off = row->self - row->self_cpu;
      if (!off) continue;
      size_t j = n < TOP_FUNCS ? n++ : TOP_FUNCS;
      while (j > 0 && wall[j - 1].self - wall[j - 1].self_cpu < off) {
        if (j < TOP_FUNCS) wall[j] = wall[j - 1];
        j--;
      }
      if (j < TOP_FUNCS) {
        wall[j] = *row;
        wall[j].self = off;
        wall[j].total = row->total - row->total_cpu;
      }
    }
    mlprof__out_lit(o, "  off a CPU (waiting: locks, I/O, sleep, the GIL)\n");
    if ((rc = rows_table(h, wall, n, TOP_FUNCS, h->wall_ns - h->on_cpu_ns, 0,
                         o)))
      return rc;
  }
  if ((rc = parts_text(h, o))) return rc;
  size_t zones = 0;
  for (size_t z = 0; z < h->nzones; z++) zones += h->zones[z].name[0] != 0;
  if (!zones) return o->err;
  mlprof__out_lit(o,
                  "\nHot functions by zone (innermost zone open on the "
                  "thread; on a CPU)\n");
  for (size_t z = 0; z < h->nzones && z < TOP_ZONES; z++) {
    const mlprof__hot_zone *hz = &h->zones[z];
    if (!hz->on_cpu_ns) continue;
    char b[32];
    fmt_ns(b, sizeof b, hz->on_cpu_ns);
    mlprof__out_lit(o, "  ");
    if (hz->name[0])
      mlprof__out_text_str(o, hz->name, strlen(hz->name));
    else
      mlprof__out_lit(o, "(no zone)");
    mlprof__out_printf(o, ": %s, %.1f%% of the time on a CPU\n", b,
                       pct(hz->on_cpu_ns, h->on_cpu_ns));
    if ((rc = rows_table(h, hz->rows, hz->nrows, TOP_ZONE_FUNCS, hz->on_cpu_ns,
                         1, o)))
      return rc;
  }
  return o->err;
}

int mlprof__export_hot_other_text(const mlprof__report *r, mlprof__out *o) {
  const mlprof__hot *h = &r->hot;
  /* Only the samples of the "other" time itself: inside the steps, outside
   * every part's zones. */
  const mlprof__hot_zone *none = &h->parts[MLPROF__PART_OTHER];
  if (!h->steps || !none->on_cpu_ns || !none->nrows) return 0;
  mlprof__out_lit(o,
                  "  other, by stack samples inside the steps outside every "
                  "part's zones (self, on a CPU):");
  const char *sep = " ";
  for (size_t i = 0; i < none->nrows && i < 3; i++) {
    const mlprof__hot_row *row = &none->rows[i];
    if (!row->self_cpu) break;
    const mlprof__hot_func *f = &h->funcs[row->func];
    char w[512];
    where(h, row, w, sizeof w);
    mlprof__out_str(o, sep);
    mlprof__out_text_str(o, f->function, strlen(f->function));
    mlprof__out_lit(o, " (");
    mlprof__out_text_str(o, w, strlen(w));
    mlprof__out_printf(o, ") %.0f%%", pct(row->self_cpu, none->on_cpu_ns));
    sep = ", ";
  }
  mlprof__out_lit(o, "\n");
  return o->err;
}

static void json_rows(const mlprof__hot *h, const mlprof__hot_row *rows,
                      size_t n, mlprof__out *o) {
  mlprof__out_lit(o, "[");
  for (size_t i = 0; i < n; i++) {
    const mlprof__hot_row *r = &rows[i];
    const mlprof__hot_func *f = &h->funcs[r->func];
    mlprof__out_str(o, i ? ",\n{\"function\":" : "\n{\"function\":");
    mlprof__out_json_str(o, f->function, strlen(f->function));
    mlprof__out_lit(o, ",\"file\":");
    mlprof__out_json_str(o, f->file, strlen(f->file));
    mlprof__out_printf(o, ",\"first_line\":%" PRIu32 ",\"line\":%" PRIu32,
                       f->first_line,
                       r->line == MLPROF__NONE ? f->first_line : r->line);
    mlprof__out_lit(o, ",\"self_ns\":");
    mlprof__out_u64(o, r->self);
    mlprof__out_lit(o, ",\"total_ns\":");
    mlprof__out_u64(o, r->total);
    mlprof__out_lit(o, ",\"self_cpu_ns\":");
    mlprof__out_u64(o, r->self_cpu);
    mlprof__out_lit(o, ",\"total_cpu_ns\":");
    mlprof__out_u64(o, r->total_cpu);
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "]");
}

/* A zone's or a step part's samples and top functions, then the closing
 * brace of its object. */
static void zone_json(const mlprof__hot *h, const mlprof__hot_zone *z,
                      mlprof__out *o) {
  mlprof__out_lit(o, "\"samples\":");
  mlprof__out_u64(o, z->samples);
  mlprof__out_lit(o, ",\"on_cpu\":");
  mlprof__out_u64(o, z->on_cpu);
  mlprof__out_lit(o, ",\"wall_ns\":");
  mlprof__out_u64(o, z->wall_ns);
  mlprof__out_lit(o, ",\"on_cpu_ns\":");
  mlprof__out_u64(o, z->on_cpu_ns);
  mlprof__out_lit(o, ",\"functions\":");
  json_rows(h, z->rows, z->nrows < 20 ? z->nrows : 20, o);
  mlprof__out_lit(o, "}");
}

void mlprof__export_hot_json(const mlprof__report *r, mlprof__out *o) {
  const mlprof__hot *h = &r->hot;
  if (!h->samples) return;
  mlprof__out_lit(o, ",\n\"hot\":{\"interval_ns\":");
  mlprof__out_f64(o, h->interval_ns);
  mlprof__out_lit(o, ",\"samples\":");
  mlprof__out_u64(o, h->samples);
  mlprof__out_lit(o, ",\"on_cpu\":");
  mlprof__out_u64(o, h->on_cpu);
  mlprof__out_lit(o, ",\"wall_ns\":");
  mlprof__out_u64(o, h->wall_ns);
  mlprof__out_lit(o, ",\"on_cpu_ns\":");
  mlprof__out_u64(o, h->on_cpu_ns);
  mlprof__out_lit(o, ",\"cpu_ns\":");
  mlprof__out_u64(o, h->cpu_ns);
  mlprof__out_lit(o, ",\"functions\":");
  json_rows(h, h->rows, h->nrows, o);
  mlprof__out_lit(o, ",\"zones\":[");
  for (size_t z = 0; z < h->nzones; z++) {
    const mlprof__hot_zone *hz = &h->zones[z];
    mlprof__out_str(o, z ? ",\n{\"zone\":" : "\n{\"zone\":");
    if (hz->name[0])
      mlprof__out_json_str(o, hz->name, strlen(hz->name));
    else
      mlprof__out_lit(o, "null");
    mlprof__out_lit(o, ",");
    zone_json(h, hz, o);
  }
  mlprof__out_lit(o, "]");
  if (h->steps) {
    mlprof__out_lit(o, ",\n\"outside_steps\":{\"samples\":");
    mlprof__out_u64(o, h->outside_samples);
    mlprof__out_lit(o, ",\"wall_ns\":");
    mlprof__out_u64(o, h->outside_wall_ns);
    mlprof__out_lit(o, ",\"on_cpu_ns\":");
    mlprof__out_u64(o, h->outside_on_cpu_ns);
    mlprof__out_lit(o, "},\n\"parts\":{");
    for (int k = 0; k < MLPROF__HOT_PARTS; k++) {
      const mlprof__hot_zone *p = &h->parts[k];
      mlprof__out_str(o, k ? ",\n\"" : "\n\"");
      mlprof__out_str(o, mlprof__part_name(k));
      mlprof__out_lit(o, "\":{");
      zone_json(h, p, o);
    }
    mlprof__out_lit(o, "}");
  }
  mlprof__out_lit(o, "}");
}

/* A name in a folded line: ';' and newlines would split it (they become
 * ':'); other control characters and invalid UTF-8 become U+FFFD, so the
 * lines are text whatever the profile holds. */
static void folded_name(const char *name, mlprof__out *o) {
  char b[1024];
  snprintf(b, sizeof b, "%s", name);
  for (char *c = b; *c; c++)
    if (*c == ';' || *c == '\n' || *c == '\r') *c = ':';
  mlprof__out_text_str(o, b, strlen(b));
}

static void folded_frame(const mlprof__hot *h, uint32_t frame, mlprof__out *o) {
  char b[1024];
  mlprof__hot_frame_name(h, frame, b, sizeof b);
  folded_name(b, o);
}

int mlprof__export_folded(const mlprof__report *r, int wall, int by_zone,
                          mlprof__out *o) {
  const mlprof__hot *h = &r->hot;
  uint32_t chain[1100];
  /* One line per stack (and zone): the stacks are kept per label (zone,
   * step part...), so the same one may come several times. */
  mlprof__map first = {0}; /* (node, zone) -> its first stack */
  uint64_t *sum = calloc(h->nstacks ? h->nstacks : 1, sizeof *sum);
  if (!sum) return MLPROF_ENOMEM;
  for (size_t i = 0; i < h->nstacks; i++) {
    const mlprof__hot_stack *s = &h->stacks[i];
    uint64_t key = (uint64_t)s->node << 32 | (by_zone ? s->zone : 0);
    uint32_t at = mlprof__map_get(&first, key);
    if (at == MLPROF__NONE) {
      if (mlprof__map_put(&first, key, (uint32_t)i)) {
        free(sum);
        mlprof__map_clear(&first);
        return MLPROF_ENOMEM;
      }
      at = (uint32_t)i;
    }
    sum[at] += wall ? s->samples : s->on_cpu;
  }
  mlprof__map_clear(&first);
  for (size_t i = 0; i < h->nstacks; i++) {
    const mlprof__hot_stack *s = &h->stacks[i];
    uint64_t n = sum[i];
    if (!n || s->node == MLPROF__NONE) continue;
    size_t depth = 0;
    for (uint32_t k = s->node; k != MLPROF__NONE && depth < 1100;
         k = h->nodes[k].parent)
      chain[depth++] = h->nodes[k].frame;
    const char *sep = "";
    if (by_zone) {
      /* The zone is a root frame of its own. */
      const char *z = s->zone && s->zone < h->nzone_names
                          ? h->zone_names[s->zone]
                          : "(no zone)";
      mlprof__out_lit(o, "[");
      folded_name(z, o);
      mlprof__out_lit(o, "]");
      sep = ";";
    }
    while (depth-- > 0) {
      mlprof__out_str(o, sep);
      folded_frame(h, chain[depth], o);
      sep = ";";
    }
    mlprof__out_printf(o, " %" PRIu64 "\n", n);
  }
  free(sum);
  return o->err;
}
