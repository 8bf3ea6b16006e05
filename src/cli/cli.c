/* What every subcommand's argument handling shares. */
#include <stdio.h>

#include "cli.h"

int mlprof__usage_error(const char *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "mlprof %s: ", cmd);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see mlprof %s --help)\n", cmd);
  return 2;
}

int mlprof__option_error(const char *cmd, int ch, char **argv, int optind_,
                         int optopt_) {
  if (ch == ':')
    return mlprof__usage_error(cmd, "%s needs a value", argv[optind_ - 1]);
  char opt[3] = {'-', (char)optopt_, '\0'};
  return mlprof__usage_error(cmd, "unknown option '%s'",
                             optopt_ ? opt : argv[optind_ - 1]);
}

int mlprof__parse_count(const char *s, uint64_t *out) {
  if (!*s) return -1;
  uint64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10) return -1;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  *out = v;
  return 0;
}
