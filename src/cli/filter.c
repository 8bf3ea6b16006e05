/* The filter options of report, html, trace, diff and compare
 * (src/analyze/filter.h): one parser and one help text for all. */
#include <mlprof.h>
#include <stdio.h>
#include <string.h>

#include "../analyze/findings.h"
#include "cli.h"

const char mlprof__filter_help[] =
    "filters (docs/guide.md, \"Filters\"; each repeatable option adds an\n"
    "alternative, different options must all hold):\n"
    "      --zone GLOB      show only zones whose name matches (fnmatch)\n"
    "      --exclude GLOB   do not show zones whose name matches\n"
    "      --category CAT   show only zones of this category: data, forward,\n"
    "                       backward, optimizer, communication, io, user, "
    "none\n"
    "      --process P      only the processes of pid P or named P (a glob)\n"
    "      --thread T       only the threads of tid T or named T (a glob)\n"
    "      --track P/T      only thread T of process P\n"
    "      --rank N         only the processes of rank N\n"
    "      --steps A:B      only steps A to B-1 of each process (from 0; A or\n"
    "                       B may be left out: 5: is step 5 to the end)\n"
    "      --skip-warmup N  the same as --steps N:\n"
    "      --window T0:T1   only what begins between T0 and T1 after the\n"
    "                       job's start (durations with a unit: 10s:20s, :5s)\n"
    "Zone filters leave the numbers as they are (a parent's self time keeps\n"
    "its hidden children); the others act as if nothing else was recorded.\n";

/* One end of a range: "" is open (def), else a count or a duration. */
static int range_end(const char *s, size_t n, int duration, uint64_t def,
                     uint64_t *out) {
  char b[64];
  if (n >= sizeof b) return -1;
  memcpy(b, s, n);
  b[n] = '\0';
  if (!n) {
    *out = def;
    return 0;
  }
  if (strspn(b, "0") == n || (duration && strcmp(b, "0s") == 0)) {
    *out = 0;
    return 0;
  }
  return duration ? mlprof__duration_parse(b, out)
                  : mlprof__parse_count(b, out);
}

/* "A:B" into [*lo, *hi): A empty is 0, B empty is UINT64_MAX. */
static int parse_range(const char *s, int duration, uint64_t *lo,
                       uint64_t *hi) {
  const char *colon = strchr(s, ':');
  if (!colon || strchr(colon + 1, ':')) return -1;
  if (range_end(s, (size_t)(colon - s), duration, 0, lo) ||
      range_end(colon + 1, strlen(colon + 1), duration, UINT64_MAX, hi))
    return -1;
  return *lo < *hi ? 0 : -1;
}

static int parse_category(const char *s, unsigned *mask) {
  for (int c = 0; c < MLPROF_CAT_COUNT; c++)
    if (strcmp(s, mlprof_category_name((mlprof_category)c)) == 0) {
      *mask |= 1u << c;
      return 0;
    }
  return -1;
}

int mlprof__filter_option(const char *cmd, int ch, const char *arg,
                          mlprof__filter *f) {
  char err[512];
  int kind = -1;
  switch (ch) {
    case MLPROF__OPT_ZONE:
      kind = MLPROF__SEL_ZONE;
      break;
    case MLPROF__OPT_EXCLUDE:
      kind = MLPROF__SEL_EXCLUDE;
      break;
    case MLPROF__OPT_PROCESS:
      kind = MLPROF__SEL_PROCESS;
      break;
    case MLPROF__OPT_THREAD:
      kind = MLPROF__SEL_THREAD;
      break;
    case MLPROF__OPT_TRACK:
      kind = MLPROF__SEL_TRACK;
      break;
    case MLPROF__OPT_RANK:
      kind = MLPROF__SEL_RANK;
      break;
    case MLPROF__OPT_CATEGORY:
      if (parse_category(arg, &f->categories))
        return mlprof__usage_error(
            cmd,
            "unknown category '%s': use data, forward, backward, optimizer, "
            "communication, io, user or none",
            arg);
      return 0;
    case MLPROF__OPT_STEPS:
      if (parse_range(arg, 0, &f->step_from, &f->step_to))
        return mlprof__usage_error(
            cmd,
            "--steps wants A:B, steps from 0 with A < B (e.g. 10:20), not '%s'",
            arg);
      f->steps = 1;
      return 0;
    case MLPROF__OPT_SKIP_WARMUP:
      if (mlprof__parse_count(arg, &f->step_from))
        return mlprof__usage_error(
            cmd, "--skip-warmup wants a number of steps, not '%s'", arg);
      f->step_to = UINT64_MAX;
      f->steps = 1;
      return 0;
    case MLPROF__OPT_WINDOW:
      if (parse_range(arg, 1, &f->t0, &f->t1))
        return mlprof__usage_error(
            cmd,
            "--window wants T0:T1, durations with a unit and T0 < T1 (e.g. "
            "10s:20s), not '%s'",
            arg);
      f->window = 1;
      return 0;
    default:
      return -1;
  }
  int rc = mlprof__filter_add(f, kind, arg, err, sizeof err);
  if (rc == MLPROF_ENOMEM) {
    fprintf(stderr, "mlprof %s: out of memory\n", cmd);
    return 3;
  }
  return rc ? mlprof__usage_error(cmd, "%s", err) : 0;
}
