/* The recording library, read back through the reader. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "format/reader.h"
#include "format/wire.h"
#include "mlprof.h"
#include "test.h"

#define MAX_NAMES 64

typedef struct {
  char names[MAX_NAMES][32];
  uint8_t kinds[MAX_NAMES], cats[MAX_NAMES];
  uint64_t spans, span_ns_total, opens, steps, step_ends, counters, units,
      span_units;
  uint64_t per_name[MAX_NAMES];
  uint32_t max_depth;
  uint64_t dropped_end, unmatched_end;
  uint64_t dropped_by_tid[16];
  uint32_t tids[16];
  int ntids;
  double last_counter;
  char meta_key[32], meta_value[32], thread_name[32];
  int clean_end;
  int span_order_ok; /* a parent never precedes its children */
  uint64_t last_end_at_depth[8];
} readback;

static int rb_name(void *ud, const mlprof__name *n) {
  readback *r = ud;
  if (n->id < MAX_NAMES) {
    snprintf(r->names[n->id], sizeof r->names[0], "%s", n->name);
    r->kinds[n->id] = n->kind;
    r->cats[n->id] = n->category;
  }
  return 0;
}

static int tid_index(readback *r, uint32_t tid) {
  for (int i = 0; i < r->ntids; i++)
    if (r->tids[i] == tid) return i;
  if (r->ntids == 16) return 15;
  r->tids[r->ntids] = tid;
  return r->ntids++;
}

static int rb_events(void *ud, uint32_t tid, uint64_t dropped) {
  readback *r = ud;
  int i = tid_index(r, tid);
  if (dropped > r->dropped_by_tid[i]) r->dropped_by_tid[i] = dropped;
  return 0;
}

static int rb_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  readback *r = ud;
  r->spans++;
  r->span_ns_total += end - begin;
  if (name < MAX_NAMES) r->per_name[name]++;
  if (depth > r->max_depth) r->max_depth = depth;
  if (end < begin) r->span_order_ok = 0;
  return 0;
}

static int rb_open(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin) {
  ((readback *)ud)->opens++;
  return 0;
}

static int rb_step(void *ud, uint32_t tid, uint64_t t) {
  ((readback *)ud)->steps++;
  return 0;
}

static int rb_step_end(void *ud, uint32_t tid, uint64_t t) {
  ((readback *)ud)->step_ends++;
  return 0;
}

static int rb_counter(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                      double v) {
  readback *r = ud;
  r->counters++;
  r->last_counter = v;
  return 0;
}

static int rb_units(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                    uint64_t n) {
  ((readback *)ud)->units += n;
  return 0;
}

static int rb_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  ((readback *)ud)->span_units += n;
  return 0;
}

static int rb_span_meta(void *ud, uint32_t tid, uint32_t key, uint32_t value) {
  readback *r = ud;
  if (key < MAX_NAMES && value < MAX_NAMES) {
    snprintf(r->meta_key, sizeof r->meta_key, "%s", r->names[key]);
    snprintf(r->meta_value, sizeof r->meta_value, "%s", r->names[value]);
  }
  return 0;
}

static int rb_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  readback *r = ud;
  if (strncmp(name, "named-", 6) == 0)
    snprintf(r->thread_name, sizeof r->thread_name, "%.*s", (int)len, name);
  return 0;
}

static int rb_end(void *ud, uint64_t end_ns, uint64_t dropped,
                  uint64_t unmatched) {
  readback *r = ud;
  r->clean_end = 1;
  r->dropped_end = dropped;
  r->unmatched_end = unmatched;
  return 0;
}

static int read_back(const char *path, readback *r) {
  memset(r, 0, sizeof *r);
  r->span_order_ok = 1;
  mlprof__visitor v = {.ud = r,
                       .name = rb_name,
                       .events = rb_events,
                       .span = rb_span,
                       .open = rb_open,
                       .step = rb_step,
                       .step_end = rb_step_end,
                       .counter = rb_counter,
                       .units = rb_units,
                       .span_units = rb_span_units,
                       .span_meta = rb_span_meta,
                       .thread = rb_thread,
                       .end = rb_end};
  mlprof__read_report rep;
  char err[256];
  int rc = mlprof__read_file(path, &v, &rep, err, sizeof err);
  if (rc != 0) fprintf(stderr, "  read %s: %s\n", path, err);
  if (rep.damaged_chunks || rep.truncated_bytes)
    fprintf(stderr, "  read %s: %s\n", path, rep.problem);
  return rc != 0 || rep.damaged_chunks || rep.truncated_bytes ? -1 : 0;
}

static int name_id(const readback *r, const char *name) {
  for (int i = 1; i < MAX_NAMES; i++)
    if (strcmp(r->names[i], name) == 0) return i;
  return 0;
}

static char tmpdir[] = "/tmp/mlprof-test-XXXXXX";

static const char *temp_path(const char *leaf) {
  static char buf[256];
  static int made;
  if (!made) made = mkdtemp(tmpdir) != NULL;
  snprintf(buf, sizeof buf, "%s/%s", tmpdir, leaf);
  return buf;
}

static int start(const char *leaf, size_t cap) {
  mlprof_config c;
  mlprof_config_init(&c);
  c.output = temp_path(leaf);
  if (cap) c.memory_cap = cap;
  return mlprof_init(&c);
}

/* A session without the sampler thread, for tests that need to know which
 * descriptor numbers are free: the sampler opens and closes /proc files all
 * the time (and dup2 onto a number being opened fails with EBUSY). */
static int start_unsampled(const char *leaf) {
  mlprof_config c;
  mlprof_config_init(&c);
  c.output = temp_path(leaf);
  c.sample_interval_ms = -1;
  return mlprof_init(&c);
}

/* A span without the reserved fields' warnings (-Wmissing-field-initializers
 * on positional initializers). */
#define SPAN(s, b, e, u, n) \
  { .site = (s), .begin_ns = (b), .end_ns = (e), .unit = (u), .units = (n) }

/* ---- tests -------------------------------------------------------------- */

static void zones_round_trip(void) {
  CHECK_EQ(start("rt.mlprof", 0), 0);
  CHECK_STR(mlprof_output_path(), temp_path("rt.mlprof"));
  mlprof_config c;
  mlprof_config_init(&c);
  CHECK_EQ(mlprof_init(&c), MLPROF_EALREADY);
  mlprof_thread_name("named-main");
  mlprof_meta("model", "tiny");
  for (int i = 0; i < 1000; i++) {
    MLPROF_ZONE_CAT("step", MLPROF_CAT_FORWARD);
    {
      MLPROF_ZONE("inner");
      mlprof_units_add("tokens", 3);
    }
    mlprof_zone_begin("dynamic");
    mlprof_zone_meta("shape", "[8, 3]");
    mlprof_zone_end();
    mlprof_step();
  }
  mlprof_step_end();
  MLPROF_UNITS("outside", 5);
  MLPROF_GAUGE("loss", 0.25);
  mlprof_zone_begin("still_open");
  CHECK_EQ(mlprof_shutdown(), 0);
  CHECK_EQ(mlprof_shutdown(), MLPROF_ENOTSTARTED);
  CHECK(mlprof_output_path() == NULL);

  readback r;
  CHECK_EQ(read_back(temp_path("rt.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 3000);
  CHECK_EQ_U64(r.per_name[name_id(&r, "step")], 1000);
  CHECK_EQ_U64(r.per_name[name_id(&r, "inner")], 1000);
  CHECK_EQ_U64(r.per_name[name_id(&r, "dynamic")], 1000);
  CHECK_EQ(r.cats[name_id(&r, "step")], MLPROF_CAT_FORWARD);
  CHECK_EQ(r.kinds[name_id(&r, "tokens")], MLPROF__NAME_UNITS);
  CHECK_EQ(r.max_depth, 1);
  CHECK_EQ_U64(r.span_units, 3000); /* attributed to "inner" spans */
  CHECK_EQ_U64(r.units, 5);         /* outside any zone */
  CHECK_EQ_U64(r.steps, 1000);
  CHECK_EQ_U64(r.step_ends, 1);
  CHECK_EQ_U64(r.counters, 1);
  CHECK(r.last_counter == 0.25);
  CHECK_STR(r.meta_key, "shape");
  CHECK_STR(r.meta_value, "[8, 3]");
  CHECK_STR(r.thread_name, "named-main");
  CHECK_EQ_U64(r.opens, 1);
  CHECK(r.clean_end);
  CHECK_EQ_U64(r.dropped_end, 0);
  CHECK(r.span_order_ok);
  /* still_open's end arrives after the session: nothing to pair, no crash */
  mlprof_zone_end();
}

static int copy_header(void *ud, const mlprof__header *h) {
  snprintf(ud, 64, "%lld %lld %lld %s", (long long)h->rank,
           (long long)h->world_size, (long long)h->local_rank, h->job_id);
  return 0;
}

/* The launchers' variables reach the header: torchrun's win over Slurm's. */
static void header_has_ranks(void) {
  setenv("RANK", "5", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("SLURM_LOCALID", "3", 1);
  setenv("TORCHELASTIC_RUN_ID", "job-abc", 1);
  setenv("SLURM_JOB_ID", "77", 1);
  CHECK_EQ(start("ranks.mlprof", 0), 0);
  CHECK_EQ(mlprof_shutdown(), 0);
  unsetenv("LOCAL_RANK");
  unsetenv("TORCHELASTIC_RUN_ID");
  CHECK_EQ(start("ranks-slurm.mlprof", 0), 0);
  CHECK_EQ(mlprof_shutdown(), 0);
  unsetenv("SLURM_LOCALID");
  unsetenv("SLURM_JOB_ID");
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  char got[64] = "", got_slurm[64] = "";
  mlprof__visitor v = {.ud = got, .header = copy_header};
  mlprof__read_report rep;
  CHECK_EQ(mlprof__read_file(temp_path("ranks.mlprof"), &v, &rep, NULL, 0), 0);
  v.ud = got_slurm;
  CHECK_EQ(
      mlprof__read_file(temp_path("ranks-slurm.mlprof"), &v, &rep, NULL, 0), 0);
  CHECK_STR(got, "5 8 1 job-abc");
  CHECK_STR(got_slurm, "5 8 3 77");
}

/* The deprecated names record what the new ones do. */
static void deprecated_names_still_record(void) {
  CHECK_EQ(start("old-names.mlprof", 0), 0);
  {
    MLPROF_ZONE("work");
    mlprof_count("tokens", 2);
    MLPROF_COUNT("tokens", 3);
  }
  mlprof_counter("loss", 0.5);
  MLPROF_COUNTER("loss", 0.75);
  CHECK_EQ(mlprof_shutdown(), 0);
  readback r;
  CHECK_EQ(read_back(temp_path("old-names.mlprof"), &r), 0);
  CHECK_EQ(r.kinds[name_id(&r, "tokens")], MLPROF__NAME_UNITS);
  CHECK_EQ(r.kinds[name_id(&r, "loss")], MLPROF__NAME_GAUGE);
  CHECK_EQ_U64(r.span_units, 5);
  CHECK_EQ_U64(r.counters, 2);
  CHECK(r.last_counter == 0.75);
}

static void disabled_records_nothing(void) {
  CHECK_EQ(start("off.mlprof", 0), 0);
  mlprof_set_enabled(0);
  CHECK_EQ(mlprof_is_enabled(), 0);
  for (int i = 0; i < 100; i++) {
    MLPROF_ZONE("hidden");
    mlprof_gauge_set("c", 1);
  }
  mlprof_set_enabled(1);
  { MLPROF_ZONE("shown"); }
  CHECK_EQ(mlprof_shutdown(), 0);
  readback r;
  CHECK_EQ(read_back(temp_path("off.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 1);
  CHECK_EQ_U64(r.counters, 0);
  CHECK(name_id(&r, "shown") > 0);
}

static void end_recorded_after_switch_off(void) {
  CHECK_EQ(start("switch.mlprof", 0), 0);
  mlprof_zone_begin("spans_the_switch");
  mlprof_set_enabled(0);
  mlprof_zone_end();
  mlprof_set_enabled(1);
  CHECK_EQ(mlprof_shutdown(), 0);
  readback r;
  CHECK_EQ(read_back(temp_path("switch.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 1);
  CHECK_EQ_U64(r.opens, 0);
}

/* Begins while recording is off, inside a recorded zone, must not let their
 * ends close it, whichever API began them. */
static void off_inside_recorded_zone_keeps_pairing(void) {
  CHECK_EQ(start("offnest.mlprof", 0), 0);
  mlprof_zone_begin("outer");
  mlprof_set_enabled(0);
  mlprof_zone_begin("inner_by_name");
  { MLPROF_ZONE("inner_scoped"); }
  mlprof_zone_end();
  mlprof_set_enabled(1);
  { MLPROF_ZONE("after"); }
  mlprof_zone_end(); /* outer */
  CHECK_EQ(mlprof_shutdown(), 0);
  readback r;
  CHECK_EQ(read_back(temp_path("offnest.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 2);
  CHECK_EQ_U64(r.per_name[name_id(&r, "outer")], 1);
  CHECK_EQ_U64(r.per_name[name_id(&r, "after")], 1);
  CHECK_EQ(name_id(&r, "inner_by_name"), 0);
  CHECK_EQ_U64(r.opens, 0);
  CHECK_EQ_U64(r.unmatched_end, 0);
}

static void *leave_zone_open(void *arg) {
  (void)arg;
  mlprof_zone_begin("never_ended");
  { MLPROF_ZONE("ended"); }
  return NULL;
}

/* A thread that exits with a zone open: the zone is recorded as open, and
 * the thread's state is released (the process may start many such). */
static void thread_exiting_with_open_zone(void) {
  CHECK_EQ(start("exitopen.mlprof", 0), 0);
  for (int i = 0; i < 3; i++) {
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, leave_zone_open, NULL), 0);
    pthread_join(th, NULL);
  }
  CHECK_EQ(mlprof_flush(), 0);
  CHECK_EQ(mlprof_flush(), 0); /* the writer has seen the threads exit */
  CHECK_EQ(mlprof_shutdown(), 0);
  readback r;
  CHECK_EQ(read_back(temp_path("exitopen.mlprof"), &r), 0);
  CHECK_EQ_U64(r.per_name[name_id(&r, "ended")], 3);
  CHECK_EQ_U64(r.opens, 3);
}

static void unbalanced_ends_are_harmless(void) {
  CHECK_EQ(start("unbalanced.mlprof", 0), 0);
  mlprof_zone_end();
  mlprof_zone_end();
  { MLPROF_ZONE("ok"); }
  CHECK_EQ(mlprof_shutdown(), 0);
  readback r;
  CHECK_EQ(read_back(temp_path("unbalanced.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 1);
}

static void intern_is_stable(void) {
  const mlprof_site *a = mlprof_site_intern("layer1", MLPROF_CAT_FORWARD);
  const mlprof_site *b = mlprof_site_intern("layer1", MLPROF_CAT_FORWARD);
  const mlprof_site *c = mlprof_site_intern("layer1", MLPROF_CAT_BACKWARD);
  CHECK(a && a == b);
  CHECK(c && c != a);
  CHECK_STR(a->name, "layer1");
  CHECK(mlprof_site_intern(NULL, MLPROF_CAT_NONE) == NULL);
}

static void reinit_writes_new_file(void) {
  for (int round = 0; round < 3; round++) {
    char leaf[32];
    snprintf(leaf, sizeof leaf, "again-%d.mlprof", round);
    CHECK_EQ(start(leaf, 0), 0);
    for (int i = 0; i <= round; i++) {
      MLPROF_ZONE("z");
    }
    CHECK_EQ(mlprof_shutdown(), 0);
    readback r;
    CHECK_EQ(read_back(temp_path(leaf), &r), 0);
    CHECK_EQ_U64(r.spans, (uint64_t)round + 1);
  }
}

/* Every zone is either in the file or counted as dropped, whatever the cap. */
typedef struct {
  int zones;
} stress_arg;

static void *stress_thread(void *arg) {
  stress_arg *a = arg;
  for (int i = 0; i < a->zones; i++) {
    MLPROF_ZONE("outer");
    if (i % 4 == 0) {
      MLPROF_ZONE("nested");
    }
  }
  return NULL;
}

static void stress(const char *leaf, int nthreads, int zones, size_t cap) {
  CHECK_EQ(start(leaf, cap), 0);
  pthread_t th[16];
  stress_arg a = {zones};
  for (int i = 0; i < nthreads; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, stress_thread, &a), 0);
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  uint64_t dropped = mlprof_dropped();
  CHECK_EQ(mlprof_shutdown(), 0);
  readback r;
  CHECK_EQ(read_back(temp_path(leaf), &r), 0);
  uint64_t expected = (uint64_t)nthreads * ((uint64_t)zones + (zones + 3) / 4);
  uint64_t per_thread_dropped = 0;
  for (int i = 0; i < r.ntids; i++) per_thread_dropped += r.dropped_by_tid[i];
  printf("    %d threads: %" PRIu64 " recorded + %" PRIu64 " dropped = %" PRIu64
         " of %" PRIu64 "\n",
         nthreads, r.spans, r.dropped_end, r.spans + r.dropped_end, expected);
  CHECK_EQ_U64(r.dropped_end, dropped);
  CHECK_EQ_U64(per_thread_dropped, dropped);
  CHECK_EQ_U64(r.spans + r.dropped_end, expected);
  CHECK_EQ_U64(r.opens, 0);
}

static int stress_zones(void) {
  const char *s = getenv("MLPROF_STRESS_ZONES");
  return s ? atoi(s) : 1000000;
}

static void eight_threads_all_accounted(void) {
  stress("stress8.mlprof", 8, stress_zones(), 0);
}

static void memory_cap_drops_are_counted(void) {
  /* Two buffers for eight threads: most events are dropped, and each one
   * must be counted. */
  stress("cap.mlprof", 8, stress_zones() / 10, 2 * 65536);
}

static void bad_output_is_an_error(void) {
  mlprof_config c;
  mlprof_config_init(&c);
  c.output = "/nonexistent-dir/x/y.mlprof";
  CHECK_EQ(mlprof_init(&c), MLPROF_EIO);
  CHECK(mlprof_output_path() == NULL);
  { MLPROF_ZONE("nowhere"); } /* no session: a no-op */
  CHECK_EQ(mlprof_flush(), MLPROF_ENOTSTARTED);
}

static void strerror_covers_codes(void) {
  CHECK_STR(mlprof_strerror(0), "success");
  CHECK_STR(mlprof_strerror(MLPROF_EIO), "cannot write the profile file");
  CHECK_STR(mlprof_strerror(12345), "unknown error");
  CHECK_STR(mlprof_err_name(MLPROF_EIO), "MLPROF_EIO");
  CHECK_STR(mlprof_err_name(12345), "unknown error");
  CHECK_STR(mlprof_category_name(MLPROF_CAT_COMM), "communication");
  CHECK_STR(mlprof_category_name((mlprof_category)200), "unknown");
  CHECK_STR(mlprof_version(), "0.1.0");
}

/* A config not filled by mlprof_config_init (no size), of another size, or
 * with a reserved field set is refused; one from an older, smaller struct
 * (everything before reserved) starts with the defaults for the rest. */
static void config_size_is_checked(void) {
  mlprof_config c;
  mlprof_config_init(&c);
  CHECK_EQ_U64(c.size, sizeof c);
  c.output = temp_path("cfgsize.mlprof");
  c.size = 0;
  CHECK_EQ(mlprof_init(&c), MLPROF_EINVAL);
  c.size = sizeof c + 8;
  CHECK_EQ(mlprof_init(&c), MLPROF_EINVAL);
  c.size = sizeof c;
  c.reserved[4] = 1;
  CHECK_EQ(mlprof_init(&c), MLPROF_EINVAL);
  c.reserved[4] = 0;
  /* A stacks flag this library does not know. */
  c.stacks_flags = 2;
  CHECK_EQ(mlprof_init(&c), MLPROF_EINVAL);
  c.stacks_flags = 0;
  c.size = offsetof(mlprof_config, reserved);
  CHECK_EQ(mlprof_init(&c), 0);
  CHECK_STR(mlprof_output_path(), temp_path("cfgsize.mlprof"));
  CHECK_EQ(mlprof_shutdown(), 0);
}

/* ---- files, descriptors and losses -------------------------------------- */

static uint64_t dropped_by_threads(const readback *r) {
  uint64_t n = 0;
  for (int i = 0; i < r->ntids; i++) n += r->dropped_by_tid[i];
  return n;
}

static void deep_nesting_drops_are_counted(void) {
  CHECK_EQ(start("deep.mlprof", 0), 0);
  for (int i = 0; i < 300; i++) mlprof_zone_begin("deep");
  for (int i = 0; i < 300; i++) mlprof_zone_end();
  CHECK_EQ(mlprof_shutdown(), 0);
  readback r;
  CHECK_EQ(read_back(temp_path("deep.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 256);
  CHECK_EQ_U64(r.dropped_end, 300 - 256);
  CHECK_EQ_U64(dropped_by_threads(&r), 300 - 256);
  CHECK_EQ_U64(r.unmatched_end, 0);
}

static void zone_meta_beyond_room_is_counted(void) {
  CHECK_EQ(start("meta.mlprof", 0), 0);
  mlprof_zone_begin("annotated");
  for (int i = 0; i < 8; i++) {
    char key[8];
    snprintf(key, sizeof key, "k%d", i);
    mlprof_zone_meta(key, "v");
  }
  mlprof_zone_end();
  CHECK_EQ(mlprof_shutdown(), 0);
  readback r;
  CHECK_EQ(read_back(temp_path("meta.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 1);
  CHECK_EQ_U64(r.dropped_end, 2);
  CHECK_EQ_U64(dropped_by_threads(&r), 2);
}

/* A zone whose name could not be interned (mlprof_zone_begin_site(NULL)) is
 * a counted drop, and its end does not close the zone around it. */
static void zone_without_site_is_counted_and_pairs(void) {
  CHECK_EQ(start("nosite.mlprof", 0), 0);
  mlprof_zone_begin("outer");
  mlprof_zone_begin_site(NULL);
  mlprof_zone_end();
  { MLPROF_ZONE("inner"); }
  mlprof_zone_end();
  CHECK_EQ(mlprof_shutdown(), 0);
  readback r;
  CHECK_EQ(read_back(temp_path("nosite.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 2);
  CHECK_EQ(r.max_depth, 1); /* inner stays inside outer */
  CHECK_EQ_U64(r.unmatched_end, 0);
  CHECK_EQ_U64(r.dropped_end, 1);
}

static void put_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* The whole content of path ("" when it cannot be read). */
static const char *file_text(const char *path) {
  static char buf[256];
  buf[0] = 0;
  FILE *f = fopen(path, "r");
  if (f) {
    buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
    fclose(f);
  }
  return buf;
}

/* A file or a link where the profile would go is left alone: the profile
 * takes the next free name. */
static void existing_name_is_never_overwritten(void) {
  char taken[256], target[256], link[256];
  snprintf(taken, sizeof taken, "%s", temp_path("taken.mlprof"));
  snprintf(target, sizeof target, "%s", temp_path("target"));
  snprintf(link, sizeof link, "%s", temp_path("link.mlprof"));
  put_file(taken, "keep");
  put_file(target, "target");
  CHECK_EQ(symlink(target, link), 0);

  CHECK_EQ(start("taken.mlprof", 0), 0);
  CHECK_STR(mlprof_output_path(), temp_path("taken.1.mlprof"));
  { MLPROF_ZONE("z"); }
  CHECK_EQ(mlprof_shutdown(), 0);
  CHECK_STR(file_text(taken), "keep");
  readback r;
  CHECK_EQ(read_back(temp_path("taken.1.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 1);

  CHECK_EQ(start("link.mlprof", 0), 0);
  CHECK_STR(mlprof_output_path(), temp_path("link.1.mlprof"));
  CHECK_EQ(mlprof_shutdown(), 0);
  CHECK_STR(file_text(target), "target");
}

/* An output directory is never entered through a symbolic link. */
static void output_directory_link_is_refused(void) {
  char real[256], link[256];
  snprintf(real, sizeof real, "%s", temp_path("realdir"));
  snprintf(link, sizeof link, "%s", temp_path("dirlink"));
  CHECK_EQ(mkdir(real, 0755), 0);
  CHECK_EQ(symlink(real, link), 0);
  mlprof_config c;
  mlprof_config_init(&c);
  strcat(link, "/");
  c.output = link;
  CHECK_EQ(mlprof_init(&c), MLPROF_EIO);
  link[strlen(link) - 1] = 0;
  CHECK_EQ(mlprof_init(&c), MLPROF_EIO);
  DIR *d = opendir(real);
  int entries = 0;
  for (struct dirent *e; d && (e = readdir(d));) entries += e->d_name[0] != '.';
  if (d) closedir(d);
  CHECK_EQ(entries, 0);
  strcat(real, "/");
  c.output = real; /* the directory itself is fine */
  CHECK_EQ(mlprof_init(&c), 0);
  CHECK(strncmp(mlprof_output_path(), real, strlen(real)) == 0);
  CHECK_EQ(mlprof_shutdown(), 0);
}

/* The descriptor this process has on path, or -1. */
static int fd_of(const char *path) {
  for (int fd = 0; fd < 1024; fd++) {
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (strcmp(target, path) == 0) return fd;
  }
  return -1;
}

/* The profile's descriptor is in the writer thread's own table: the
 * program holds no descriptor of it (its /proc/self/fd), so a daemon closing
 * every descriptor cannot close it nor get its number back, and a file the
 * program opens is its own alone. */
static void profile_descriptor_is_not_the_programs(void) {
  CHECK_EQ(start_unsampled("fd.mlprof"), 0);
  { MLPROF_ZONE("before"); }
  CHECK_EQ(mlprof_flush(), 0);
  CHECK_EQ(fd_of(temp_path("fd.mlprof")), -1);
  char mine[300];
  snprintf(mine, sizeof mine, "%s.mine", temp_path("fd.mlprof"));
  int d = open(mine, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(d >= 0);
  CHECK_EQ(write(d, "mine", 4), 4);
  { MLPROF_ZONE("after"); }
  CHECK_EQ(mlprof_flush(), 0);
  CHECK_EQ(fd_of(temp_path("fd.mlprof")), -1);
  CHECK_EQ(mlprof_shutdown(), 0);
  close(d);
  CHECK_STR(file_text(mine), "mine");
  readback r;
  CHECK_EQ(read_back(temp_path("fd.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 2);
  CHECK(r.clean_end);
}

/* A thread of the library with a table of its own: none of the program's
 * descriptors (not even 0) is in it, and what it opens is not in the
 * program's (src/base/fd.c). */
typedef struct {
  int program_fd, saw_program, saw_stdin, rc;
  const char *path;
  pthread_barrier_t opened, checked;
} fd_probe;

static void *private_table_thread(void *arg) {
  fd_probe *p = arg;
  p->rc = mlprof__fd_private();
  p->saw_program = fcntl(p->program_fd, F_GETFD) >= 0;
  p->saw_stdin = fcntl(0, F_GETFD) >= 0;
  int fd = open(p->path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  pthread_barrier_wait(&p->opened);
  pthread_barrier_wait(&p->checked);
  if (fd >= 0) close(fd);
  return NULL;
}

static void thread_table_is_private(void) {
  int pipefd[2];
  CHECK_EQ(pipe(pipefd), 0);
  fd_probe p = {.program_fd = pipefd[1], .path = temp_path("private.txt")};
  pthread_barrier_init(&p.opened, NULL, 2);
  pthread_barrier_init(&p.checked, NULL, 2);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, private_table_thread, &p), 0);
  pthread_barrier_wait(&p.opened);
  CHECK_EQ(fd_of(temp_path("private.txt")), -1);
  pthread_barrier_wait(&p.checked);
  pthread_join(t, NULL);
  CHECK_EQ(p.rc, 0);
  CHECK_EQ(p.saw_program, 0);
  CHECK_EQ(p.saw_stdin, 0);
  CHECK(fcntl(pipefd[1], F_GETFD) >= 0); /* the program's, untouched */
  close(pipefd[0]);
  close(pipefd[1]);
  pthread_barrier_destroy(&p.opened);
  pthread_barrier_destroy(&p.checked);
}

/* Where the kernel gives the writer no table of its own
 * (MLPROF_FD_SHARED=1 acts so), the profile's descriptor is the program's
 * to see. A daemon's move: the program closes the profile's descriptor (after
 * removing the profile, with gone) and opens a file of its own, mine (the
 * path is written there), which gets the old number (a daemon's next open
 * would; dup2 makes it so if a number below was free); it writes "mine".
 * *own gets the program's descriptor, -1 when a check failed. */
static void program_takes_descriptor(const char *leaf, int gone, char *mine,
                                     size_t len, int *own) {
  *own = -1;
  setenv("MLPROF_FD_SHARED", "1", 1);
  int rc = start_unsampled(leaf);
  unsetenv("MLPROF_FD_SHARED");
  CHECK_EQ(rc, 0);
  { MLPROF_ZONE("before"); }
  CHECK_EQ(mlprof_flush(), 0);
  int fd = fd_of(temp_path(leaf));
  CHECK(fd >= 0);
  if (gone) CHECK_EQ(unlink(temp_path(leaf)), 0);
  close(fd);
  snprintf(mine, len, "%s.mine", temp_path(leaf));
  int d = open(mine, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(d >= 0);
  if (d != fd) {
    CHECK_EQ(dup2(d, fd), fd);
    close(d);
    d = fd;
  }
  CHECK_EQ(write(d, "mine", 4), 4);
  *own = d;
}

/* The profile goes on in its own file; the program's file holds only the
 * program's data. */
static void shared_table_reused_descriptor_is_not_written(void) {
  char mine[300];
  int own;
  program_takes_descriptor("fd.mlprof", 0, mine, sizeof mine, &own);
  if (own < 0) return;
  { MLPROF_ZONE("after"); }
  CHECK_EQ(mlprof_shutdown(), 0);
  close(own);
  CHECK_STR(file_text(mine), "mine");
  readback r;
  CHECK_EQ(read_back(temp_path("fd.mlprof"), &r), 0);
  CHECK_EQ_U64(r.spans, 2);
  CHECK(r.clean_end);
}

/* As above, and the profile's path is gone too: the profile stops. */
static void shared_table_removed_profile_stops(void) {
  char mine[300];
  int own;
  program_takes_descriptor("fdgone.mlprof", 1, mine, sizeof mine, &own);
  if (own < 0) return;
  { MLPROF_ZONE("after"); }
  CHECK_EQ(mlprof_shutdown(), MLPROF_EIO);
  close(own);
  CHECK_STR(file_text(mine), "mine");
}

/* Writes that fail (here the file size limit, as a full disk would) lose
 * events: the END chunk, which still fits once the file is cut back to its
 * last whole chunk, counts each one. */
static void unwritten_events_are_counted(void) {
  struct rlimit old, lim;
  CHECK_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
  CHECK_EQ(start("full.mlprof", 0), 0);
  lim = old;
  lim.rlim_cur = 64 << 10;
  CHECK_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  enum { ZONES = 200000 };
  for (int i = 0; i < ZONES; i++) {
    MLPROF_ZONE("z");
  }
  int rc = mlprof_shutdown();
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, oldsig);
  CHECK_EQ(rc, MLPROF_EIO);
  readback r;
  CHECK_EQ(read_back(temp_path("full.mlprof"), &r), 0);
  printf("    %" PRIu64 " written + %" PRIu64 " lost = %" PRIu64 " of %d\n",
         r.spans, r.dropped_end, r.spans + r.dropped_end, ZONES);
  CHECK(r.clean_end);
  CHECK(r.dropped_end > 0);
  CHECK_EQ_U64(r.spans + r.dropped_end, ZONES);
}

/* ---- tracks: spans measured elsewhere ---------------------------------- */

typedef struct {
  uint64_t start_mono;
  char names[64][32];
  char track_name[2][32];
  uint32_t track_tid[2];
  int ntracks;
  struct {
    uint32_t tid, name, depth;
    uint64_t begin, end, units;
  } s[64];
  int n;
  int main_spans; /* spans of real threads */
} track_rb;

static int tr_header(void *ud, const mlprof__header *h) {
  ((track_rb *)ud)->start_mono = h->start_mono_ns;
  return 0;
}

static int tr_name(void *ud, const mlprof__name *n) {
  track_rb *r = ud;
  if (n->id < 64) snprintf(r->names[n->id], sizeof r->names[0], "%s", n->name);
  return 0;
}

static int tr_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  track_rb *r = ud;
  if (tid >= 0x80000000u && r->ntracks < 2) {
    r->track_tid[r->ntracks] = tid;
    snprintf(r->track_name[r->ntracks++], 32, "%.*s", (int)len, name);
  }
  return 0;
}

static int tr_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  track_rb *r = ud;
  if (tid < 0x80000000u) {
    r->main_spans++;
  } else if (r->n < 64) {
    r->s[r->n].tid = tid;
    r->s[r->n].name = name;
    r->s[r->n].depth = depth;
    r->s[r->n].begin = begin;
    r->s[r->n].end = end;
    r->s[r->n++].units = 0;
  }
  return 0;
}

static int tr_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  track_rb *r = ud;
  if (tid >= 0x80000000u && r->n &&
      strcmp(r->names[name < 64 ? name : 0], "flops") == 0)
    r->s[r->n - 1].units = n;
  return 0;
}

static int track_read(const char *path, track_rb *r) {
  memset(r, 0, sizeof *r);
  mlprof__visitor v = {.ud = r,
                       .header = tr_header,
                       .name = tr_name,
                       .thread = tr_thread,
                       .span = tr_span,
                       .span_units = tr_span_units};
  mlprof__read_report rep;
  char err[256];
  int rc = mlprof__read_file(path, &v, &rep, err, sizeof err);
  if (rc != 0) fprintf(stderr, "  read %s: %s\n", path, err);
  return rc;
}

static int track_find(const track_rb *r, const char *name) {
  for (int i = 0; i < r->n; i++)
    if (strcmp(r->names[r->s[i].name], name) == 0) return i;
  return -1;
}

static uint64_t mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spans given out of order come back on their track, nested by their
 * times, children before parents, at their exact times. */
static void track_spans_nest_by_time(void) {
  CHECK_EQ(start("track.mlprof", 0), 0);
  { MLPROF_ZONE("real"); }
  uint64_t m = mono_now();
  const mlprof_site *parent = mlprof_site_intern("op_parent", MLPROF_CAT_NONE);
  const mlprof_site *a = mlprof_site_intern("op_a", MLPROF_CAT_NONE);
  const mlprof_site *b = mlprof_site_intern("op_b", MLPROF_CAT_NONE);
  const mlprof_site *leaf = mlprof_site_intern("op_leaf", MLPROF_CAT_NONE);
  const mlprof_site *next = mlprof_site_intern("op_next", MLPROF_CAT_NONE);
  mlprof_span ops[] = {
      SPAN(next, m + 9000, m + 9500, NULL, 0),
      SPAN(leaf, m + 4000, m + 5000, NULL, 0),
      SPAN(parent, m + 1000, m + 9000, "flops", 1234),
      SPAN(b, m + 3000, m + 8000, NULL, 0),
      SPAN(a, m + 2000, m + 3000, NULL, 0),
  };
  CHECK_EQ(mlprof_track_spans("torch ops", ops, 5), 0);
  mlprof_span kernel = SPAN(mlprof_site_intern("kernel", MLPROF_CAT_NONE),
                            m + 1500, m + 2500, NULL, 0);
  CHECK_EQ(mlprof_track_spans("cuda:0 stream 7", &kernel, 1), 0);
  CHECK_EQ(mlprof_shutdown(), 0);

  track_rb r;
  CHECK_EQ(track_read(temp_path("track.mlprof"), &r), 0);
  CHECK_EQ(r.main_spans, 1);
  CHECK_EQ(r.ntracks, 2);
  CHECK_STR(r.track_name[0], "torch ops");
  CHECK_STR(r.track_name[1], "cuda:0 stream 7");
  CHECK_EQ(r.n, 6);
  static const struct {
    const char *name;
    uint32_t depth;
    uint64_t begin, end, units;
  } want[] = {{"op_a", 1, 2000, 3000, 0},
              {"op_leaf", 2, 4000, 5000, 0},
              {"op_b", 1, 3000, 8000, 0},
              {"op_parent", 0, 1000, 9000, 1234},
              {"op_next", 0, 9000, 9500, 0}};
  for (int i = 0; i < 5; i++) { /* in this order: by end, children first */
    CHECK_STR(r.names[r.s[i].name], want[i].name);
    CHECK_EQ(r.s[i].tid, r.track_tid[0]);
    CHECK_EQ(r.s[i].depth, want[i].depth);
    CHECK_EQ_U64(r.s[i].begin + r.start_mono, m + want[i].begin);
    CHECK_EQ_U64(r.s[i].end + r.start_mono, m + want[i].end);
    CHECK_EQ_U64(r.s[i].units, want[i].units);
  }
  int k = track_find(&r, "kernel");
  CHECK(k >= 0);
  CHECK_EQ(r.s[k].tid, r.track_tid[1]);
  CHECK_EQ(r.s[k].depth, 0);
}

/* Two spans with the same times: the one given first encloses the other,
 * whatever qsort does with ties. */
static void track_spans_ties_keep_given_order(void) {
  CHECK_EQ(start("tracktie.mlprof", 0), 0);
  uint64_t m = mono_now();
  const mlprof_site *outer = mlprof_site_intern("outer", MLPROF_CAT_NONE);
  const mlprof_site *inner = mlprof_site_intern("inner", MLPROF_CAT_NONE);
  mlprof_span a[] = {SPAN(outer, m + 100, m + 200, NULL, 0),
                     SPAN(inner, m + 100, m + 200, NULL, 0)};
  mlprof_span b[] = {SPAN(inner, m + 300, m + 400, NULL, 0),
                     SPAN(outer, m + 300, m + 400, NULL, 0)};
  CHECK_EQ(mlprof_track_spans("a", a, 2), 0);
  CHECK_EQ(mlprof_track_spans("b", b, 2), 0);
  CHECK_EQ(mlprof_shutdown(), 0);
  track_rb r;
  CHECK_EQ(track_read(temp_path("tracktie.mlprof"), &r), 0);
  CHECK_EQ(r.n, 4);
  for (int i = 0; i < 4; i++) {
    const char *first = r.s[i].tid == r.track_tid[0] ? "outer" : "inner";
    CHECK_EQ(r.s[i].depth, strcmp(r.names[r.s[i].name], first) == 0 ? 0 : 1);
  }
}

static void track_spans_bad_calls(void) {
  const mlprof_site *site = mlprof_site_intern("op", MLPROF_CAT_NONE);
  mlprof_span ok = SPAN(site, 10, 20, NULL, 0);
  CHECK_EQ(mlprof_track_spans("t", &ok, 1), MLPROF_ENOTSTARTED);
  CHECK_EQ(start("trackbad.mlprof", 0), 0);
  mlprof_span backwards = SPAN(site, 20, 10, NULL, 0);
  mlprof_span nosite = SPAN(NULL, 10, 20, NULL, 0);
  CHECK_EQ(mlprof_track_spans(NULL, &ok, 1), MLPROF_EINVAL);
  CHECK_EQ(mlprof_track_spans("", &ok, 1), MLPROF_EINVAL);
  CHECK_EQ(mlprof_track_spans("t", NULL, 1), MLPROF_EINVAL);
  CHECK_EQ(mlprof_track_spans("t", &backwards, 1), MLPROF_EINVAL);
  CHECK_EQ(mlprof_track_spans("t", &nosite, 1), MLPROF_EINVAL);
  mlprof_span reserved = ok;
  reserved.reserved[1] = 1;
  CHECK_EQ(mlprof_track_spans("t", &reserved, 1), MLPROF_EINVAL);
  CHECK_EQ(mlprof_track_spans("t", NULL, 0), 0);
  CHECK_EQ(mlprof_shutdown(), 0);
  track_rb r;
  CHECK_EQ(track_read(temp_path("trackbad.mlprof"), &r), 0);
  CHECK_EQ(r.n, 0);
}

static int count_spans(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                       uint64_t begin, uint64_t end) {
  ++*(uint64_t *)ud;
  return 0;
}

/* A batch far larger than the memory cap allows at once is written in
 * pieces: nothing is lost. */
static void track_spans_beyond_cap_all_kept(void) {
  CHECK_EQ(start("trackbig.mlprof", 2 * 65536), 0);
  enum { N = 100000 };
  mlprof_span *s = calloc(N, sizeof *s);
  CHECK(s != NULL);
  const mlprof_site *site = mlprof_site_intern("op", MLPROF_CAT_NONE);
  uint64_t m = mono_now();
  for (int i = 0; i < N; i++)
    s[i] = (mlprof_span)SPAN(site, m + (uint64_t)i * 10,
                             m + (uint64_t)i * 10 + 5, NULL, 0);
  int rc = mlprof_track_spans("big", s, N);
  free(s);
  CHECK_EQ(rc, 0);
  CHECK_EQ(mlprof_shutdown(), 0);
  uint64_t spans = 0;
  mlprof__visitor v = {.ud = &spans, .span = count_spans};
  mlprof__read_report rep;
  char err[256];
  CHECK_EQ(mlprof__read_file(temp_path("trackbig.mlprof"), &v, &rep, err,
                             sizeof err),
           0);
  CHECK_EQ_U64(spans, N);
}

static void *import_thread(void *arg) {
  const char *track = arg;
  enum { N = 20000 };
  static const mlprof_site site = {"imported", NULL, NULL, 0, 0};
  mlprof_span s[1000];
  for (int k = 0; k < N / 1000; k++) {
    uint64_t m = mono_now();
    for (int i = 0; i < 1000; i++)
      s[i] = (mlprof_span)SPAN(&site, m + (uint64_t)i * 10,
                               m + (uint64_t)i * 10 + 5, "flops", 2);
    if (mlprof_track_spans(track, s, 1000) != 0) return (void *)1;
    MLPROF_ZONE("between");
  }
  return NULL;
}

/* Threads importing at once, onto one track and onto their own, while the
 * writer flushes under a small cap: every span is written. */
static void track_spans_from_threads(void) {
  CHECK_EQ(start("trackmt.mlprof", 16 * 65536), 0);
  pthread_t th[3];
  const char *tracks[3] = {"shared", "shared", "own"};
  for (int i = 0; i < 3; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, import_thread, (void *)tracks[i]), 0);
  void *ret[3];
  for (int i = 0; i < 3; i++) pthread_join(th[i], &ret[i]);
  CHECK_EQ(mlprof_shutdown(), 0);
  for (int i = 0; i < 3; i++) CHECK(ret[i] == NULL);
  readback r;
  CHECK_EQ(read_back(temp_path("trackmt.mlprof"), &r), 0);
  CHECK_EQ_U64(r.per_name[name_id(&r, "imported")], 60000);
  CHECK_EQ_U64(r.span_units, 120000);
  CHECK_EQ_U64(r.per_name[name_id(&r, "between")], 60);
}

const mlprof_test mlprof_tests_record[] = {
    {"zones_round_trip", zones_round_trip},
    {"header_has_ranks", header_has_ranks},
    {"deprecated_names_still_record", deprecated_names_still_record},
    {"disabled_records_nothing", disabled_records_nothing},
    {"end_recorded_after_switch_off", end_recorded_after_switch_off},
    {"off_inside_recorded_zone_keeps_pairing",
     off_inside_recorded_zone_keeps_pairing},
    {"thread_exiting_with_open_zone", thread_exiting_with_open_zone},
    {"unbalanced_ends_are_harmless", unbalanced_ends_are_harmless},
    {"intern_is_stable", intern_is_stable},
    {"reinit_writes_new_file", reinit_writes_new_file},
    {"eight_threads_all_accounted", eight_threads_all_accounted},
    {"memory_cap_drops_are_counted", memory_cap_drops_are_counted},
    {"track_spans_nest_by_time", track_spans_nest_by_time},
    {"track_spans_ties_keep_given_order", track_spans_ties_keep_given_order},
    {"track_spans_bad_calls", track_spans_bad_calls},
    {"track_spans_beyond_cap_all_kept", track_spans_beyond_cap_all_kept},
    {"track_spans_from_threads", track_spans_from_threads},
    {"bad_output_is_an_error", bad_output_is_an_error},
    {"strerror_covers_codes", strerror_covers_codes},
    {"config_size_is_checked", config_size_is_checked},
    {"deep_nesting_drops_are_counted", deep_nesting_drops_are_counted},
    {"zone_meta_beyond_room_is_counted", zone_meta_beyond_room_is_counted},
    {"zone_without_site_is_counted_and_pairs",
     zone_without_site_is_counted_and_pairs},
    {"existing_name_is_never_overwritten", existing_name_is_never_overwritten},
    {"output_directory_link_is_refused", output_directory_link_is_refused},
    {"thread_table_is_private", thread_table_is_private},
    {"profile_descriptor_is_not_the_programs",
     profile_descriptor_is_not_the_programs},
    {"shared_table_reused_descriptor_is_not_written",
     shared_table_reused_descriptor_is_not_written},
    {"shared_table_removed_profile_stops", shared_table_removed_profile_stops},
    {"unwritten_events_are_counted", unwritten_events_are_counted},
    {NULL, NULL}};
