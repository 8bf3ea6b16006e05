#include "dashboard.h"

void mlprof__dash_opts(mlprof__analysis_opts *o, size_t top) {
  mlprof__analysis_opts_init(o);
  o->want = MLPROF__ANALYSIS_STATS | MLPROF__ANALYSIS_RESOURCES |
            MLPROF__ANALYSIS_FINDINGS | MLPROF__ANALYSIS_TREE |
            MLPROF__ANALYSIS_LOD | MLPROF__ANALYSIS_FLAME;
  o->top = top;
  o->lod_items = MLPROF__DASH_LOD_ITEMS;
}
