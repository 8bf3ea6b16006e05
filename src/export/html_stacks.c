/* The dashboard's stack samples as JSON (html.h, mlprof__export_html_stacks):
 * the nodes, functions, files and zones the rows and marks name, each once,
 * renumbered in the order they are written. */
#include <mlprof.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"

/* A node written: its new index, or -1. */
typedef struct {
  int32_t *node, *func, *zone;
  int32_t nnodes, nfuncs, nzones;
  int other; /* a row or mark names MLPROF__FLAME_OTHER */
} renum;

static int32_t new_node(const renum *m, uint32_t node) {
  if (node == MLPROF__NONE) return -1;
  if (node == MLPROF__FLAME_OTHER) return m->nnodes;
  return m->node[node];
}

static void use_node(const mlprof__hot *h, renum *m, uint32_t node) {
  if (node == MLPROF__FLAME_OTHER) m->other = 1;
  for (; node < h->nnodes && m->node[node] == -1; node = h->nodes[node].parent)
    m->node[node] = -2; /* used; numbered below */
}

static void str(mlprof__out *o, const char *s) {
  mlprof__out_json_str(o, s ? s : "", s ? strlen(s) : 0);
}

static void field(mlprof__out *o, const char *name, uint64_t v) {
  mlprof__out_str(o, name);
  mlprof__out_u64(o, v);
}

/* "files", "funcs" and "nodes" of the nodes m marks used. */
static int nodes_json(const mlprof__hot *h, renum *m, mlprof__out *o) {
  mlprof__strindex ix = {0};
  char **files = NULL;
  size_t *lens = NULL, nfiles = 0, cap = 0;
  int32_t *file_of = malloc((h->nfuncs ? h->nfuncs : 1) * sizeof *file_of);
  int rc = file_of ? 0 : MLPROF_ENOMEM;
  /* Parents come before their children: numbering in index order keeps a
   * parent's new index below its children's. */
  for (size_t i = 0; i < h->nnodes && !rc; i++) {
    if (m->node[i] != -2) continue;
    m->node[i] = m->nnodes++;
    uint32_t fn = h->frames[h->nodes[i].frame].func;
    if (m->func[fn] >= 0) continue;
    m->func[fn] = m->nfuncs++;
    const char *file = h->funcs[fn].file;
    uint32_t k = mlprof__strindex_intern(&ix, &files, &lens, &nfiles, &cap,
                                         file, strlen(file));
    if (k == MLPROF__NONE) rc = MLPROF_ENOMEM;
    file_of[fn] = (int32_t)k;
  }
  mlprof__out_lit(o, ",\n\"files\":[");
  for (size_t i = 0; i < nfiles && !rc; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_json_str(o, files[i], lens[i]);
  }
  /* funcs in their new order: [file, name, first line]... */
  mlprof__out_lit(o, "],\n\"funcs\":[");
  int32_t *order = malloc(((size_t)m->nfuncs + 1) * sizeof *order);
  if (!order) rc = MLPROF_ENOMEM;
  for (size_t i = 0; i < h->nfuncs && !rc; i++)
    if (m->func[i] >= 0) order[m->func[i]] = (int32_t)i;
  for (int32_t k = 0; k < m->nfuncs && !rc; k++) {
    const mlprof__hot_func *fn = &h->funcs[order[k]];
    mlprof__out_str(o, k ? "," : "");
    mlprof__out_i64(o, file_of[order[k]]);
    mlprof__out_lit(o, ",");
    str(o, fn->function);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, fn->first_line);
  }
  if (m->other) {
    mlprof__out_str(o, m->nfuncs ? "," : "");
    mlprof__out_lit(o, "-1,\"(smaller stacks)\",0");
  }
  /* nodes: [parent (-1: a root), func, line]... */
  mlprof__out_lit(o, "],\n\"nodes\":[");
  int first = 1;
  for (size_t i = 0; i < h->nnodes && !rc; i++) {
    if (m->node[i] < 0) continue;
    const mlprof__hot_node *n = &h->nodes[i];
    const mlprof__hot_frame *fr = &h->frames[n->frame];
    mlprof__out_str(o, first ? "" : ",");
    first = 0;
    mlprof__out_i64(o, n->parent == MLPROF__NONE ? -1 : m->node[n->parent]);
    mlprof__out_lit(o, ",");
    mlprof__out_i64(o, m->func[fr->func]);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, fr->line);
  }
  if (m->other) {
    mlprof__out_str(o, first ? "" : ",");
    mlprof__out_lit(o, "-1,");
    mlprof__out_i64(o, m->nfuncs);
    mlprof__out_lit(o, ",0");
  }
  mlprof__out_lit(o, "]");
  for (size_t i = 0; i < nfiles; i++) free(files[i]);
  free(files);
  free(lens);
  mlprof__strindex_free(&ix);
  free(file_of);
  free(order);
  return rc;
}

static void rows_json(const mlprof__flame *f, const renum *m, mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"rows\":[");
  for (size_t i = 0; i < f->nrows; i++) {
    const mlprof__flame_row *r = &f->rows[i];
    mlprof__out_str(o, i ? ",\n" : "");
    mlprof__out_i64(o, new_node(m, r->node));
    mlprof__out_lit(o, ",");
    mlprof__out_i64(o, m->zone[r->zone]);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, r->thread);
    mlprof__out_lit(o, ",");
    mlprof__out_i64(o, r->step == MLPROF__NONE ? -1 : (int64_t)r->step);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, r->n);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, r->n_cpu);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, r->wall_ns);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, r->cpu_ns);
  }
  mlprof__out_lit(o, "]");
}

/* "marks": per thread [thread, time, code, time - previous, code, ...],
 * code = (node + 1) * 2 + on a CPU. */
static void marks_json(const mlprof__flame *f, const renum *m, mlprof__out *o) {
  mlprof__out_lit(o, ",\n\"marks\":[");
  for (size_t i = 0; i < f->nmarks; i++) {
    const mlprof__flame_mark *k = &f->marks[i];
    int fresh = i == 0 || f->marks[i - 1].thread != k->thread;
    if (fresh) {
      mlprof__out_str(o, i ? "],\n[" : "[");
      mlprof__out_u64(o, k->thread);
    }
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, fresh ? k->t : k->t - f->marks[i - 1].t);
    mlprof__out_lit(o, ",");
    mlprof__out_i64(o, ((int64_t)new_node(m, k->node) + 1) * 2 + k->on_cpu);
  }
  mlprof__out_str(o, f->nmarks ? "]]" : "]");
}

int mlprof__export_html_stacks(const mlprof__hot *h, const mlprof__flame *f,
                               mlprof__out *o) {
  if (!h || !f || !f->samples) {
    mlprof__out_lit(o, "null");
    return o->err;
  }
  renum m = {0};
  m.node = malloc((h->nnodes ? h->nnodes : 1) * sizeof *m.node);
  m.func = malloc((h->nfuncs ? h->nfuncs : 1) * sizeof *m.func);
  m.zone = malloc((h->nzone_names ? h->nzone_names : 1) * sizeof *m.zone);
  int rc = m.node && m.func && m.zone ? 0 : MLPROF_ENOMEM;
  for (size_t i = 0; !rc && i < h->nnodes; i++) m.node[i] = -1;
  for (size_t i = 0; !rc && i < h->nfuncs; i++) m.func[i] = -1;
  for (size_t i = 0; !rc && i < h->nzone_names; i++) m.zone[i] = -1;
  for (size_t i = 0; !rc && i < f->nrows; i++) {
    use_node(h, &m, f->rows[i].node);
    if (f->rows[i].zone < h->nzone_names && m.zone[f->rows[i].zone] < 0)
      m.zone[f->rows[i].zone] = -2;
  }
  for (size_t i = 0; !rc && i < f->nmarks; i++)
    use_node(h, &m, f->marks[i].node);
  if (!rc) {
    mlprof__out_lit(o, "{\"interval_ns\":");
    mlprof__out_u64(o, (uint64_t)h->interval_ns);
    field(o, ",\"samples\":", f->samples);
    field(o, ",\"unresolved\":", h->unresolved);
    field(o, ",\"steps\":", f->steps);
    field(o, ",\"step_width\":", f->step_width);
    field(o, ",\"nodes_cap\":", f->nodes_cap);
    field(o, ",\"merged\":", f->merged);
    field(o, ",\"merged_ns\":", f->merged_ns);
    field(o, ",\"dropped\":", f->dropped);
    field(o, ",\"dropped_ns\":", f->dropped_ns);
    field(o, ",\"mark_stride\":", f->mark_stride);
    rc = nodes_json(h, &m, o);
  }
  if (!rc) {
    /* Zone 0 ("", no zone) stays 0. */
    mlprof__out_lit(o, ",\n\"zones\":[\"\"");
    m.zone[0] = m.nzones++;
    for (size_t i = 1; i < h->nzone_names; i++) {
      if (m.zone[i] != -2) continue;
      m.zone[i] = m.nzones++;
      mlprof__out_lit(o, ",");
      str(o, h->zone_names[i]);
    }
    mlprof__out_lit(o, "],\n\"procs\":[");
    for (size_t i = 0; i < f->nprocs; i++) {
      mlprof__out_str(o, i ? ",[" : "[");
      mlprof__out_u64(o, f->procs[i].pid);
      mlprof__out_lit(o, ",");
      mlprof__out_i64(o, f->procs[i].rank);
      mlprof__out_lit(o, ",");
      str(o, f->procs[i].name);
      mlprof__out_lit(o, "]");
    }
    mlprof__out_lit(o, "],\n\"threads\":[");
    for (size_t i = 0; i < f->nthreads; i++) {
      mlprof__out_str(o, i ? ",[" : "[");
      mlprof__out_u64(o, f->threads[i].proc);
      mlprof__out_lit(o, ",");
      mlprof__out_u64(o, f->threads[i].tid);
      mlprof__out_lit(o, ",");
      str(o, f->threads[i].name);
      mlprof__out_lit(o, "]");
    }
    mlprof__out_lit(o, "]");
    rows_json(f, &m, o);
    marks_json(f, &m, o);
    mlprof__out_lit(o, "}");
  }
  free(m.node);
  free(m.func);
  free(m.zone);
  return rc ? rc : o->err;
}
