/* A job: the profiles given on a command line (files, or run directories
 * holding one profile per process), placed on one timeline. */
#ifndef MLPROF_JOB_H
#define MLPROF_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "../format/reader.h"

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
  /* Add to a time of this profile to place it on the job's timeline, whose 0
   * is the earliest start. Monotonic starts when all profiles come from one
   * host, wall-clock starts otherwise. */
  uint64_t offset_ns;
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

#endif
