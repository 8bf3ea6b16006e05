/* The dashboard's memory data (html.h, docs/memory.md): per process the
 * live bytes over time with its peak and step marks, and the allocation
 * sites with their whole stacks for the memory flame graph, bounded. */
#include <inttypes.h>
#include <mlprof.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"

/* A site of the page: its index in mlprof__memory.sites, or a process's
 * sites left out, summed. */
typedef struct {
  uint64_t at_peak, alloc, count, live_end;
} mem_sum;

static int by_alloc_desc(const void *x, const void *y) {
  const mlprof__mem_site *a = *(const mlprof__mem_site *const *)x,
                         *b = *(const mlprof__mem_site *const *)y;
  if (a->alloc_bytes != b->alloc_bytes)
    return a->alloc_bytes > b->alloc_bytes ? -1 : 1;
  return (a > b) - (a < b);
}

static int by_peak_desc(const void *x, const void *y) {
  const mlprof__mem_proc *a = *(const mlprof__mem_proc *const *)x,
                         *b = *(const mlprof__mem_proc *const *)y;
  if (a->peak != b->peak) return a->peak > b->peak ? -1 : 1;
  return (a->proc > b->proc) - (a->proc < b->proc);
}

static uint64_t offset_of(const mlprof__report *r, size_t proc) {
  return proc < r->nprocs ? r->procs[proc].offset_ns : 0;
}

/* One process: {"pid",...,"t":[job ns],"v":[bytes],"steps":[job ns]}. */
static void proc_json(const mlprof__report *r, const mlprof__mem_proc *p,
                      mlprof__out *o) {
  uint64_t off = offset_of(r, p->proc);
  mlprof__out_lit(o, "{\"pid\":");
  mlprof__out_u64(o, p->pid);
  if (p->device >= 0) {
    mlprof__out_lit(o, ",\"cuda_device\":");
    mlprof__out_u64(o, (uint64_t)p->device);
  }
  mlprof__out_str(o, p->exact ? ",\"exact\":true" : ",\"exact\":false");
  mlprof__out_lit(o, ",\"peak_bytes\":");
  mlprof__out_u64(o, p->peak);
  mlprof__out_lit(o, ",\"peak_ns\":");
  mlprof__out_u64(o, p->peak_t + off);
  mlprof__out_lit(o, ",\"allocated_bytes\":");
  mlprof__out_u64(o, p->alloc_bytes);
  mlprof__out_lit(o, ",\"live_end_bytes\":");
  mlprof__out_u64(o, p->live_end);
  mlprof__out_lit(o, ",\"t\":[");
  for (size_t i = 0; i < p->nlive; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_u64(o, p->live_t[i] + off);
  }
  mlprof__out_lit(o, "],\"v\":[");
  for (size_t i = 0; i < p->nlive; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_u64(o, p->live_v[i]);
  }
  mlprof__out_lit(o, "],\"steps\":[");
  size_t n = p->nsteps,
         k = n < MLPROF__HTML_MEM_STEPS ? n : MLPROF__HTML_MEM_STEPS;
  for (size_t i = 0; p->step_t && i < k; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_u64(o, p->step_t[n * i / k] + off);
  }
  mlprof__out_lit(o, "],\"step_groups\":[");
  for (size_t g = 0; g < p->ngroups; g++) {
    const mlprof__mem_group *x = &p->groups[g];
    mlprof__out_str(o, g ? ",[" : "[");
    mlprof__out_u64(o, (uint64_t)x->first + 1);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, x->count);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, x->t0 + off);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, x->t1 + off);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, x->peak);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, x->peak_t + off);
    mlprof__out_lit(o, "]");
  }
  mlprof__out_lit(o, "]}");
}

static uint64_t step_weight(const mlprof__mem_step_site *x) {
  return x->at_peak > x->alloc_bytes ? x->at_peak : x->alloc_bytes;
}

static int by_step_weight(const void *x, const void *y) {
  const mlprof__mem_step_site *a = *(const mlprof__mem_step_site *const *)x,
                              *b = *(const mlprof__mem_step_site *const *)y;
  if (a->group != b->group) return a->group < b->group ? -1 : 1;
  uint64_t wa = step_weight(a), wb = step_weight(b);
  if (wa != wb) return wa > wb ? -1 : 1;
  return (a->site > b->site) - (a->site < b->site);
}

/* The page's "step_sites" of process p (index k among the page's):
 * per group its largest sites on the page (page_site: m->sites index ->
 * index in the page's "sites", or MLPROF__NONE), the rest summed as site
 * -1. *first: no entry written yet. 0 or MLPROF_ENOMEM. */
static int step_sites_json(const mlprof__mem_proc *p, size_t k,
                           const uint32_t *page_site, mlprof__out *o,
                           int *first) {
  size_t n = p->nstep_sites;
  if (!n) return 0;
  const mlprof__mem_step_site **v = malloc(n * sizeof *v);
  if (!v) return MLPROF_ENOMEM;
  for (size_t i = 0; i < n; i++) v[i] = &p->step_sites[i];
  mlprof__sort(v, n, sizeof *v, by_step_weight);
  for (size_t i = 0; i < n;) {
    uint32_t g = v[i]->group;
    mlprof__mem_step_site rest = {0};
    size_t shown = 0;
    for (; i < n && v[i]->group == g; i++) {
      uint32_t ps = page_site[v[i]->site];
      if (ps == MLPROF__NONE || shown == MLPROF__HTML_MEM_STEP_SITES) {
        rest.alloc_bytes += v[i]->alloc_bytes;
        rest.alloc_count += v[i]->alloc_count;
        rest.at_peak += v[i]->at_peak;
        continue;
      }
      shown++;
      mlprof__out_printf(o, "%s[%zu,%u,%u,%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]",
                         *first ? "\n" : ",\n", k, g, ps, v[i]->alloc_bytes,
                         v[i]->alloc_count, v[i]->at_peak);
      *first = 0;
    }
    if (rest.alloc_bytes || rest.at_peak) {
      mlprof__out_printf(o, "%s[%zu,%u,-1,%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]",
                         *first ? "\n" : ",\n", k, g, rest.alloc_bytes,
                         rest.alloc_count, rest.at_peak);
      *first = 0;
    }
  }
  free(v);
  return 0;
}

/* One site: [process, zone, at peak, allocated, count, live at end, leak
 * bytes per step (0: no leak), [frame ids, outermost first], index in the
 * report's memory.sites, Python lines, native frame]. */
static void site_json(const mlprof__mem_site *s, size_t index, size_t proc,
                      mlprof__out *o, uint32_t *frame_page, uint32_t *used,
                      size_t *nused, int first) {
  mlprof__out_str(o, first ? "\n[" : ",\n[");
  mlprof__out_u64(o, proc);
  mlprof__out_lit(o, ",");
  mlprof__out_u64(o, s->zone);
  mlprof__out_lit(o, ",");
  mlprof__out_u64(o, s->at_peak);
  mlprof__out_lit(o, ",");
  mlprof__out_u64(o, s->alloc_bytes);
  mlprof__out_lit(o, ",");
  mlprof__out_u64(o, s->alloc_count);
  mlprof__out_lit(o, ",");
  mlprof__out_u64(o, s->live_end);
  mlprof__out_lit(o, ",");
  mlprof__out_f64(o, s->leak ? s->slope : 0);
  mlprof__out_lit(o, ",[");
  /* The page numbers the frames its sites use, in order of first use. */
  for (uint32_t k = 0; k < s->npath; k++) {
    uint32_t f = s->path[k];
    if (frame_page[f] == MLPROF__NONE) {
      frame_page[f] = (uint32_t)*nused;
      used[(*nused)++] = f;
    }
    if (k) mlprof__out_lit(o, ",");
    mlprof__out_u64(o, frame_page[f]);
  }
  mlprof__out_lit(o, "],");
  mlprof__out_u64(o, index);
  mlprof__out_lit(o, ",");
  mlprof__out_json_str(o, s->python ? s->python : "",
                       s->python ? strlen(s->python) : 0);
  mlprof__out_lit(o, ",");
  mlprof__out_json_str(o, s->native ? s->native : "",
                       s->native ? strlen(s->native) : 0);
  mlprof__out_lit(o, "]");
}

int mlprof__export_html_memory(const mlprof__report *r, mlprof__out *o) {
  const mlprof__memory *m = &r->mem;
  if (!m->nprocs) {
    mlprof__out_lit(o, "null");
    return o->err;
  }
  int rc = MLPROF_ENOMEM;
  size_t ns = m->nsites;
  const mlprof__mem_proc **procs = malloc(m->nprocs * sizeof *procs);
  const mlprof__mem_site **order = malloc((ns ? ns : 1) * sizeof *order);
  /* page[process of m (an address space)]: its index among the page's
   * processes + 1. */
  size_t nj = m->nprocs, *page = calloc(nj + 1, sizeof *page);
  char *keep = calloc(ns + 1, 1);
  mem_sum *other = NULL;
  /* frame_page[frame]: its number in the page; used: the page's frames. */
  size_t nf = m->nframes, nused = 0;
  uint32_t *frame_page = malloc((nf ? nf : 1) * sizeof *frame_page);
  uint32_t *used = malloc((nf ? nf : 1) * sizeof *used);
  /* page_site[site]: its index in the page's "sites", or MLPROF__NONE. */
  uint32_t *page_site = malloc((ns ? ns : 1) * sizeof *page_site);
  if (!procs || !order || !page || !keep || !frame_page || !used || !page_site)
    goto out;
  for (size_t i = 0; i < ns; i++) page_site[i] = MLPROF__NONE;
  for (size_t i = 0; i < nf; i++) frame_page[i] = MLPROF__NONE;
  /* The processes with the largest peaks. */
  for (size_t i = 0; i < m->nprocs; i++) procs[i] = &m->procs[i];
  mlprof__sort(procs, m->nprocs, sizeof *procs, by_peak_desc);
  size_t np = m->nprocs < MLPROF__HTML_MAX_PROCESSES
                  ? m->nprocs
                  : MLPROF__HTML_MAX_PROCESSES;
  for (size_t i = 0; i < np; i++) page[procs[i] - m->procs] = i + 1;
  if (!(other = calloc(np, sizeof *other))) goto out;
  /* Sites: the leaks and the largest at the peak (m->sites' own order),
   * then the largest allocators, half the cap each. */
  size_t kept = 0, half = MLPROF__HTML_MEM_SITES / 2;
  for (size_t i = 0; i < ns && kept < half; i++) {
    const mlprof__mem_site *s = &m->sites[i];
    if (s->mproc >= nj || !page[s->mproc] || (!s->leak && !s->at_peak))
      continue;
    keep[i] = 1;
    kept++;
  }
  for (size_t i = 0; i < ns; i++) order[i] = &m->sites[i];
  mlprof__sort(order, ns, sizeof *order, by_alloc_desc);
  for (size_t i = 0; i < ns && kept < MLPROF__HTML_MEM_SITES; i++) {
    size_t k = (size_t)(order[i] - m->sites);
    if (keep[k] || order[i]->mproc >= nj || !page[order[i]->mproc]) continue;
    keep[k] = 1;
    kept++;
  }
  mlprof__out_str(o, "{\"exact\":");
  int exact = 1;
  for (size_t i = 0; i < m->nprocs; i++) exact &= m->procs[i].exact;
  mlprof__out_str(o, exact ? "true" : "false");
  mlprof__out_lit(o, ",\"processes\":[");
  for (size_t i = 0; i < np; i++) {
    mlprof__out_str(o, i ? ",\n" : "\n");
    proc_json(r, procs[i], o);
  }
  mlprof__out_lit(o, "],\n\"zones\":[");
  for (size_t i = 0; i < m->nzones; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_json_str(o, m->zones[i].name, m->zones[i].name_len);
  }
  mlprof__out_lit(o, "],\n\"sites\":[");
  int first = 1;
  size_t left = 0, npage = 0;
  for (size_t i = 0; i < ns; i++) {
    const mlprof__mem_site *s = &m->sites[i];
    if (s->mproc >= nj || !page[s->mproc]) continue;
    if (!keep[i]) {
      mem_sum *x = &other[page[s->mproc] - 1];
      x->at_peak += s->at_peak;
      x->alloc += s->alloc_bytes;
      x->count += s->alloc_count;
      x->live_end += s->live_end;
      left++;
      continue;
    }
    site_json(s, i, page[s->mproc] - 1, o, frame_page, used, &nused, first);
    page_site[i] = (uint32_t)npage++;
    first = 0;
  }
  mlprof__out_lit(o, "],\n\"other\":[");
  for (size_t i = 0; i < np; i++) {
    mlprof__out_str(o, i ? ",[" : "[");
    mlprof__out_u64(o, other[i].at_peak);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, other[i].alloc);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, other[i].count);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, other[i].live_end);
    mlprof__out_lit(o, "]");
  }
  mlprof__out_lit(o, "],\"other_sites\":");
  mlprof__out_u64(o, left);
  mlprof__out_lit(o, ",\n\"step_sites\":[");
  first = 1;
  for (size_t i = 0; i < np; i++)
    if (step_sites_json(procs[i], i, page_site, o, &first)) goto out;
  mlprof__out_lit(o, "]");
  mlprof__out_lit(o, ",\n\"frames\":[");
  for (size_t i = 0; i < nused; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_json_str(o, m->frames[used[i]], m->frame_lens[used[i]]);
  }
  mlprof__out_lit(o, "]}");
  rc = 0;
out:
  free(frame_page);
  free(used);
  free(page_site);
  free(procs);
  free(order);
  free(page);
  free(keep);
  free(other);
  return rc ? rc : o->err;
}
