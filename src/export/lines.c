/* Line timings (mlprof__report.lines) in the text and JSON reports: a
 * table per function like line_profiler's, and the JSON key "lines" (one
 * row per line, as the Python package's mlprof.line_table()). Both are
 * left out when no function's lines were timed. */
#include <inttypes.h>
#include <mlprof.h>
#include <string.h>

#include "export.h"
#include "table.h"

static double share(const mlprof__line_func *f, uint64_t ns) {
  return f->total_ns ? 100.0 * (double)ns / (double)f->total_ns : 0.0;
}

int mlprof__export_lines_text(const mlprof__report *r, mlprof__out *o) {
  for (size_t i = 0; i < r->lines.n; i++) {
    const mlprof__line_func *f = &r->lines.funcs[i];
    char total[32];
    mlprof__fmt_duration(total, sizeof total, (double)f->total_ns);
    mlprof__out_lit(o, "\nLines of ");
    mlprof__out_text_str(o, f->function, strlen(f->function));
    mlprof__out_lit(o, " (");
    mlprof__out_text_str(o, f->file, strlen(f->file));
    mlprof__out_printf(o, ":%" PRIu32 "), %s\n", f->first_line, total);
    static const char *const heads[] = {"line",      "hits",  "total",
                                        "exclusive", "share", "source"};
    mlprof__table t;
    if (mlprof__table_open(&t, heads, "rrrrrl")) return MLPROF_ENOMEM;
    for (size_t j = 0; j < f->n; j++) {
      const mlprof__line_stat *l = &f->rows[j];
      char b[32];
      mlprof__table_cell(&t, "%" PRIu32, l->line);
      mlprof__table_cell(&t, "%" PRIu64, l->hits);
      mlprof__fmt_duration(b, sizeof b, (double)l->total_ns);
      mlprof__table_cell(&t, "%s", b);
      mlprof__fmt_duration(b, sizeof b, (double)l->exclusive_ns);
      mlprof__table_cell(&t, "%s", b);
      mlprof__table_cell(&t, "%.1f%%", share(f, l->total_ns));
      mlprof__table_name(&t, l->source, strlen(l->source), 80);
    }
    int rc = mlprof__table_print(&t, o);
    if (rc) return rc;
  }
  return o->err;
}

void mlprof__export_lines_json(const mlprof__report *r, mlprof__out *o) {
  if (!r->lines.n) return;
  mlprof__out_lit(o, ",\n\"lines\":[");
  const char *sep = "\n";
  for (size_t i = 0; i < r->lines.n; i++) {
    const mlprof__line_func *f = &r->lines.funcs[i];
    for (size_t j = 0; j < f->n; j++, sep = ",\n") {
      const mlprof__line_stat *l = &f->rows[j];
      mlprof__out_str(o, sep);
      mlprof__out_lit(o, "{\"function\":");
      mlprof__out_json_str(o, f->function, strlen(f->function));
      mlprof__out_lit(o, ",\"file\":");
      mlprof__out_json_str(o, f->file, strlen(f->file));
      mlprof__out_printf(o, ",\"first_line\":%" PRIu32 ",\"line\":%" PRIu32,
                         f->first_line, l->line);
      mlprof__out_lit(o, ",\"hits\":");
      mlprof__out_u64(o, l->hits);
      mlprof__out_lit(o, ",\"total_ns\":");
      mlprof__out_u64(o, l->total_ns);
      mlprof__out_lit(o, ",\"exclusive_ns\":");
      mlprof__out_u64(o, l->exclusive_ns);
      mlprof__out_lit(o, ",\"share\":");
      mlprof__out_f64(o, share(f, l->total_ns));
      mlprof__out_lit(o, ",\"source\":");
      mlprof__out_json_str(o, l->source, strlen(l->source));
      mlprof__out_lit(o, "}");
    }
  }
  mlprof__out_lit(o, "]");
}
