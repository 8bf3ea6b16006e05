/* A job: the profiles given on a command line (files, or run directories
 * holding one profile per process), placed on one timeline. */
#ifndef MLPROF_JOB_H
#define MLPROF_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "../format/reader.h"

/* The clock values a job places (starts, measured offsets, the times of a
 * measurement) lie within +-2^62 ns (146 years): one past that is damage
 * (or hostile), and keeping within it lets the sums and differences of a
 * few of them stay within int64_t. */
#define MLPROF__CLOCK_MAX (INT64_C(1) << 62)

typedef struct {
  char *path;
  uint64_t pid, ppid;
  int64_t rank, world_size, local_rank; /* -1: unknown */
  char *job_id;                         /* the launcher's job id, "" */
  char *hostname, *exe;
  char *cmdline; /* argv joined with spaces */
  /* The process's name wherever one is shown: the last part of argv[0] (as
   * the profile's file name and ps have it), of exe when argv is empty. */
  char *name;
  uint64_t start_wall_ns;
  uint64_t start_mono_ns;
  /* A rank's measured clock offsets to rank 0 (dist.clock.init, .final;
   * docs/distributed.md, "Clock offsets"): rank 0's CLOCK_MONOTONIC read at
   * clock_at_ns[k] on this one was clock_at_ns[k] + clock_off_ns[k], within
   * +- clock_unc_ns[k]; has_clock[k] says whether it was recorded. */
  int has_clock[2];
  int64_t clock_off_ns[2], clock_unc_ns[2], clock_at_ns[2];
  /* 1: a measurement whose values were past MLPROF__CLOCK_MAX (or not
   * numbers) was left out: the report says so. */
  int clock_rejected;
  /* Add to a time of this profile to place it on the job's timeline, whose 0
   * is the earliest start: use mlprof__job_time, which adds the drift. The
   * starts are monotonic when all profiles come from one host, wall-clock
   * otherwise; a rank's is moved onto rank 0's clock by its measured offset
   * (its children's by their rank's). */
  uint64_t offset_ns;
  /* Between its two measurements a rank's offset moves by drift ns per ns
   * (times drift_from_ns..drift_to_ns of this profile); 0 otherwise. */
  double drift;
  uint64_t drift_from_ns, drift_to_ns;
  int parent; /* index of the parent process's profile, -1 */
  /* 1: its HEADER chunk was damaged: pid, host and start are unknown (0,
   * ""), and it is placed at the job's time 0. */
  int header_damaged;
  /* A process that called exec has a profile per program it ran, chained:
   * exec_seq is this program's place (0 for the first), exec_next the index
   * of the profile of the program it exec'd, -1. */
  uint32_t exec_seq;
  int exec_next;
  /* Whether pid is alive now: 1 or 0 for a profile of this host, -1 for
   * another host's. */
  int alive;
} mlprof__job_profile;

typedef struct {
  mlprof__job_profile *profiles; /* sorted by start, then pid */
  size_t count;
  /* One line on the files of listed directories that were left out because
   * they are not profiles (empty, foreign), or NULL when none were. */
  char *skipped;
} mlprof__job;

/* Opens every path (a profile file, or a directory whose *.mlprof files are
 * taken) and reads each profile's header. A file found in a directory that
 * is not a profile (empty: a full disk; foreign) is left out and counted in
 * job->skipped. Returns 0, or a negative mlprof error with a one-line reason
 * in err: a path that does not exist, a file named in paths that is not a
 * profile, a directory holding no profile, no readable profile left. */
int mlprof__job_open(mlprof__job *job, const char *const *paths, size_t npaths,
                     char *err, size_t errlen);
void mlprof__job_close(mlprof__job *job);

/* A META entry of the profile ud (an mlprof__job_profile *), as a reader's
 * meta callback: dist.clock.init and .final set its clock and drift; a value
 * that is not three numbers within MLPROF__CLOCK_MAX (the uncertainty and
 * the time not negative) is left out and sets clock_rejected; another key
 * is passed over. Returns 0. */
int mlprof__job_take_meta(void *ud, const char *key, size_t klen,
                          const char *value, size_t vlen);

/* Time t of profile p on the job's timeline: offset_ns + t, plus the drift
 * accumulated since the first measurement (held after the last). */
uint64_t mlprof__job_time(const mlprof__job_profile *p, uint64_t t);

#endif
