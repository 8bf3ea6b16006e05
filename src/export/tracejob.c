/* The processes a job is drawn as in a trace (tracejob.h). */
#include "tracejob.h"

#include "../format/wire.h"

#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Chrome keys processes by pid: profiles that share one (pid reuse, other
 * hosts) get an id above any Linux pid (2^22) instead. */
static uint64_t trace_pid(mlprof__map *seen, const mlprof__job_profile *p,
                          size_t index, int *oom) {
  uint64_t pid = p->pid;
  if (mlprof__map_get(seen, pid) != MLPROF__NONE) pid = (1u << 22) + index;
  if (mlprof__map_put(seen, pid, 0)) *oom = 1;
  return pid;
}

int mlprof__trace_plan_init(mlprof__trace_plan *plan, const mlprof__job *job) {
  memset(plan, 0, sizeof *plan);
  plan->job = job;
  size_t n = job->count ? job->count : 1;
  plan->tpids = malloc(n * sizeof *plan->tpids);
  plan->hosts = malloc(n * sizeof *plan->hosts);
  plan->next_same = malloc(n * sizeof *plan->next_same);
  if (!plan->tpids || !plan->hosts || !plan->next_same) return MLPROF_ENOMEM;
  int oom = 0;
  size_t nhosts = 0;
  mlprof__map seen = {0};
  mlprof__map by_hash = {0}; /* hostname hash -> first profile of it */
  for (size_t i = 0; i < job->count; i++) {
    const mlprof__job_profile *p = &job->profiles[i];
    plan->tpids[i] = trace_pid(&seen, p, i, &oom);
    const char *h = p->hostname ? p->hostname : "";
    uint64_t hash = mlprof__hash(h, strlen(h), MLPROF__HASH_START);
    uint32_t k = mlprof__map_get(&by_hash, hash);
    /* A collision of two hostnames only shares their pseudo-processes. */
    if (k == MLPROF__NONE) {
      plan->hosts[i] = nhosts++;
      if (mlprof__map_put(&by_hash, hash, (uint32_t)i)) oom = 1;
    } else {
      plan->hosts[i] = plan->hosts[k];
    }
    plan->next_same[i] = -1;
  }
  mlprof__map_clear(&by_hash);
  mlprof__map_clear(&seen);
  /* Chains in job order (by start): walk backwards, pushing on the front. */
  for (size_t i = job->count; i-- > 0;) {
    uint64_t key =
        (uint64_t)plan->hosts[i] << 32 | (job->profiles[i].pid & 0xffffffffu);
    uint32_t at = mlprof__map_get(&plan->first_of, key);
    plan->next_same[i] = at == MLPROF__NONE ? -1 : (int)at;
    if (mlprof__map_put(&plan->first_of, key, (uint32_t)i)) oom = 1;
  }
  return oom ? MLPROF_ENOMEM : 0;
}

void mlprof__trace_plan_free(mlprof__trace_plan *plan) {
  free(plan->tpids);
  free(plan->hosts);
  free(plan->next_same);
  mlprof__map_clear(&plan->first_of);
  mlprof__map_clear(&plan->unprofiled);
  memset(plan, 0, sizeof *plan);
}

uint64_t mlprof__trace_process_pid(mlprof__trace_plan *plan, size_t host,
                                   uint64_t pid, uint64_t t, int *fresh,
                                   int *rc) {
  *fresh = 0;
  uint64_t key = (uint64_t)host << 32 | (pid & 0xffffffffu);
  uint32_t at = mlprof__map_get(&plan->first_of, key);
  if (at != MLPROF__NONE) {
    int best = (int)at;
    for (int j = plan->next_same[at]; j >= 0; j = plan->next_same[j])
      if (plan->job->profiles[j].offset_ns <= t) best = j;
    return plan->tpids[best];
  }
  /* No profile: one pseudo-process per host and pid. */
  uint32_t have = mlprof__map_get(&plan->unprofiled, key);
  if (have != MLPROF__NONE) return MLPROF__TRACE_UNPROFILED_PID + have;
  uint64_t tp = MLPROF__TRACE_UNPROFILED_PID + plan->next_pseudo;
  if (plan->next_pseudo >= MLPROF__NONE - 1 ||
      mlprof__map_put(&plan->unprofiled, key, (uint32_t)plan->next_pseudo++)) {
    *rc = MLPROF_ENOMEM;
    return tp;
  }
  *fresh = 1;
  return tp;
}

static int has_clock(const mlprof__job_profile *p) {
  return p->has_clock[0] || p->has_clock[1];
}

/* Whether p is the profile of its rank: the one that measured its clock or,
 * when none did, one that is not a child of a process of the same rank (a
 * launcher's wrapper, a DataLoader worker carry the rank too). */
static int is_rank(const mlprof__job *job, const mlprof__job_profile *p) {
  if (p->rank < 0) return 0;
  if (has_clock(p)) return 1;
  for (size_t i = 0; i < job->count; i++)
    if (job->profiles[i].rank == p->rank && has_clock(&job->profiles[i]))
      return 0;
  return p->parent < 0 || job->profiles[p->parent].rank != p->rank;
}

void mlprof__trace_process_label(const mlprof__job *job, size_t index,
                                 char *label, size_t size, size_t *order) {
  const mlprof__job_profile *p = &job->profiles[index];
  const char *base = p->name ? p->name : "";
  /* A rank is shown as such, first and in rank order; its children (which
   * carry its rank) under their own names. */
  int ranks = is_rank(job, p);
  *order = index;
  if (ranks) {
    snprintf(label, size, "rank %lld (%s)", (long long)p->rank,
             p->hostname ? p->hostname : "");
    *order = (size_t)p->rank;
  } else if (p->rank >= 0) {
    snprintf(label, size, "%s %llu (rank %lld)", base,
             (unsigned long long)p->pid, (long long)p->rank);
  } else {
    snprintf(label, size, "%s %llu", base, (unsigned long long)p->pid);
  }
  /* Other processes of a job of ranks after the ranks. */
  for (size_t i = 0; i < job->count && !ranks; i++)
    if (job->profiles[i].rank >= 0) {
      *order += job->count;
      break;
    }
}

int mlprof__trace_walk(const mlprof__job *job, const mlprof__trace_plan *plan,
                       const mlprof__filter *filter, const mlprof__visitor *v,
                       const mlprof__trace_emitter *e, mlprof__out *o,
                       mlprof__chrome_result *res, char *err, size_t errlen) {
  mlprof__filtered *fd = NULL;
  int rc = 0;
  if (res) res->warning[0] = '\0';
  if (filter &&
      (mlprof__filter_records(filter) || mlprof__filter_zones(filter)))
    rc = mlprof__filter_prepare(filter, job, 1, &fd, res ? res->warning : err,
                                res ? sizeof res->warning : errlen);
  if (rc) snprintf(err, errlen, "out of memory");
  if (!rc && mlprof__filtered_unmatched(fd)) {
    snprintf(err, errlen, "%s", mlprof__filtered_unmatched(fd));
    rc = MLPROF_EINVAL;
  }
  size_t shown = 0, hidden = 0; /* zone names, by what the filter does */
  for (size_t i = 0; i < job->count && !rc; i++) {
    *e->at = (mlprof__trace_at){.prof = &job->profiles[i],
                                .pid = plan->tpids[i],
                                .host = plan->hosts[i]};
    if ((rc = e->begin(e->ud, i))) {
      snprintf(err, errlen, "out of memory");
      break;
    }
    mlprof__read_report rep;
    memset(&rep, 0, sizeof rep);
    char why[256] = "";
    mlprof__visitor fv = *v;
    mlprof__filter_read fr = {0};
    if (fd) mlprof__filter_visitor(fd, i, &fr, v, &fv);
    int rd =
        mlprof__read_file(job->profiles[i].path, &fv, &rep, why, sizeof why);
    shown += fr.zones_shown;
    hidden += fr.zones_hidden;
    mlprof__filter_read_free(&fr);
    if (rd == MLPROF_ENOMEM || o->err == MLPROF_ENOMEM) {
      rc = MLPROF_ENOMEM;
      snprintf(err, errlen, "out of memory");
      break;
    }
    if (o->err) {
      rc = o->err;
      snprintf(err, errlen, "cannot write the trace");
      break;
    }
    if ((rc = e->finish(e->ud, &rep)) || (rc = o->err)) {
      snprintf(
          err, errlen, "%s",
          rc == MLPROF_ENOMEM ? "out of memory" : "cannot write the trace");
      break;
    }
    if (res && res->reads) res->reads[i] = rep;
    if (res && res->read_errors)
      snprintf(res->read_errors[i], sizeof res->read_errors[i], "%s",
               !rd      ? ""
               : why[0] ? why
                        : mlprof_strerror(rd));
  }
  if (!rc && hidden && !shown) {
    snprintf(err, errlen,
             "--zone/--category/--exclude match no zone of this run");
    rc = MLPROF_EINVAL;
  }
  mlprof__filtered_free(fd);
  return rc;
}

static int live_add(mlprof__trace_live *l, uint64_t t, uint64_t addr,
                    uint64_t weight) {
  if (l->n >= UINT32_MAX - 2) return 0; /* the map's values are 32-bit */
  if (mlprof__grow(&l->rec, &l->cap, l->n + 1, sizeof *l->rec))
    return MLPROF_ENOMEM;
  l->rec[l->n] = (mlprof__trace_mem){t, addr, weight, l->n};
  l->n++;
  return 0;
}

int mlprof__trace_live_alloc(mlprof__trace_live *l, const mlprof__alloc *a) {
  if (a->tid >= MLPROF__TRACK_TID_BASE) return 0;
  return live_add(l, a->t, a->addr, a->weight ? a->weight : 1);
}

int mlprof__trace_live_free_at(mlprof__trace_live *l, uint32_t tid, uint64_t t,
                               uint64_t addr) {
  if (tid >= MLPROF__TRACK_TID_BASE) return 0;
  return live_add(l, t, addr, 0);
}

static int mem_by_time(const void *x, const void *y) {
  const mlprof__trace_mem *a = x, *b = y;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

int mlprof__trace_live_replay(mlprof__trace_live *l,
                              void (*point)(void *ud, uint64_t t,
                                            uint64_t bytes),
                              void *ud) {
  if (!l->n) return 0;
  const mlprof__trace_mem *r = l->rec;
  mlprof__sort(l->rec, l->n, sizeof *l->rec, mem_by_time);
  mlprof__map at = {0}; /* address -> index of its live allocation */
  uint64_t live = 0, high = 0, bucket = r[0].t / 1000000;
  int rc = 0;
  for (size_t i = 0; i <= l->n && !rc; i++) {
    if (i == l->n || r[i].t / 1000000 != bucket) {
      point(ud, bucket * 1000000, high);
      if (i == l->n) break;
      bucket = r[i].t / 1000000;
      high = live;
    }
    uint32_t j = mlprof__map_get(&at, r[i].addr);
    if (r[i].weight) {
      rc = mlprof__map_put(&at, r[i].addr, (uint32_t)i);
      live += r[i].weight;
    } else if (j != MLPROF__NONE && j != UINT32_MAX - 1) {
      live -= r[j].weight;
      rc = mlprof__map_put(&at, r[i].addr, UINT32_MAX - 1);
    }
    if (live > high) high = live;
  }
  mlprof__map_clear(&at);
  l->n = 0;
  return rc ? MLPROF_ENOMEM : 0;
}
