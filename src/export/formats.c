/* The report's formats by name: the one list that the command line
 * (mlprof report) and the Python package (export(), summary()) choose
 * from, so a new format reaches both at once. */
#include <string.h>

#include "export.h"

static int write_text(const mlprof__analysis *a, mlprof__out *o) {
  return mlprof__export_text(&a->r, &a->res, &a->f, o);
}

static int write_json(const mlprof__analysis *a, mlprof__out *o) {
  return mlprof__export_json(&a->r, &a->res, &a->f, o);
}

static int write_csv(const mlprof__analysis *a, mlprof__out *o) {
  return mlprof__export_csv(&a->r, o);
}

static int write_findings_csv(const mlprof__analysis *a, mlprof__out *o) {
  return mlprof__export_findings_csv(&a->f, o);
}

/* Folded stacks: on a CPU or every sample (wall), the zone as a root frame
 * or not. */
static int write_folded(const mlprof__analysis *a, mlprof__out *o) {
  return mlprof__export_folded(&a->r, 0, 0, o);
}

static int write_folded_wall(const mlprof__analysis *a, mlprof__out *o) {
  return mlprof__export_folded(&a->r, 1, 0, o);
}

static int write_folded_zone(const mlprof__analysis *a, mlprof__out *o) {
  return mlprof__export_folded(&a->r, 0, 1, o);
}

static int write_folded_wall_zone(const mlprof__analysis *a, mlprof__out *o) {
  return mlprof__export_folded(&a->r, 1, 1, o);
}

static const mlprof__report_format formats[] = {
    {.name = "text", .write = write_text, .findings = 1},
    {.name = "json", .write = write_json, .findings = 1},
    {.name = "csv", .write = write_csv, .findings = 0},
    {.name = "findings-csv", .write = write_findings_csv, .findings = 1},
    {.name = "folded", .write = write_folded, .findings = 0},
    {.name = "folded-wall", .write = write_folded_wall, .findings = 0},
    {.name = "folded-zone", .write = write_folded_zone, .findings = 0},
    {.name = "folded-wall-zone",
     .write = write_folded_wall_zone,
     .findings = 0},
};

const mlprof__report_format *mlprof__report_format_find(const char *name) {
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
    if (strcmp(formats[i].name, name) == 0) return &formats[i];
  return NULL;
}
