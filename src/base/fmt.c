/* Numbers for people. */
#include <stdio.h>

#include "base.h"

void mlprof__fmt_duration(char *b, size_t len, double ns) {
  static const struct {
    double div;
    const char *unit;
  } units[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "\xc2\xb5s"}, {1, "ns"}};
  if (!(ns >= 0) || ns > 1e30) {
    snprintf(b, len, "-");
    return;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (ns < units[i].div && i + 1 < sizeof units / sizeof units[0]) continue;
    double v = ns / units[i].div;
    if (i + 1 == sizeof units / sizeof units[0])
      snprintf(b, len, "%.0f ns", v);
    else
      snprintf(b, len,
               v < 10    ? "%.2f %s"
               : v < 100 ? "%.1f %s"
                         : "%.0f %s",
               v, units[i].unit);
    return;
  }
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
