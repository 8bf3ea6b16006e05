/* The zone table as CSV: one header row, then one row per zone shown. */
#include "export.h"

static void put_u64(mlprof__out *o, uint64_t v) {
  mlprof__out_lit(o, ",");
  mlprof__out_u64(o, v);
}

int mlprof__export_csv(const mlprof__report *r, mlprof__out *o) {
  mlprof__out_lit(o,
                  "zone,category,count,total_ns,self_ns,mean_ns,std_ns,"
                  "min_ns,max_ns,p50_ns,p90_ns,p95_ns,p99_ns,share\r\n");
  for (size_t i = 0; i < r->norder; i++) {
    const mlprof__zone_stats *z = &r->zones[r->order[i]];
    mlprof__out_csv_field(o, z->name, z->name_len);
    mlprof__out_lit(o, ",");
    mlprof__out_str(o, mlprof__category_name(z->category));
    put_u64(o, z->count);
    put_u64(o, z->total_ns);
    put_u64(o, z->self_ns);
    put_u64(o, mlprof__round_ns(z->mean_ns));
    put_u64(o, mlprof__round_ns(z->std_ns));
    put_u64(o, z->min_ns);
    put_u64(o, z->max_ns);
    put_u64(o, z->p50_ns);
    put_u64(o, z->p90_ns);
    put_u64(o, z->p95_ns);
    put_u64(o, z->p99_ns);
    mlprof__out_lit(o, ",");
    mlprof__out_f64(o, z->share);
    mlprof__out_lit(o, "\r\n");
  }
  return o->err;
}
