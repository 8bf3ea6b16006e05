/* Timestamps: invariant TSC when the CPU and kernel trust it, calibrated
 * against CLOCK_MONOTONIC by the writer; clock_gettime otherwise. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

MLPROF__HIDDEN int mlprof__use_tsc;

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* The kernel's own verdict is the best evidence: it uses the TSC as its
 * clocksource only when it is invariant and synchronised across CPUs. Failing
 * that, the CPU's invariant-TSC bit (CPUID 0x80000007, EDX bit 8). */
static int clocksource_is_tsc(void *unused) {
  char buf[32] = {0};
  FILE *f = fopen(
      "/sys/devices/system/clocksource/clocksource0/"
      "current_clocksource",
      "re");
  int ok = 0;
  if (f) {
    ok = fgets(buf, sizeof buf, f) && strncmp(buf, "tsc", 3) == 0;
    fclose(f);
  }
  return ok;
}

static int tsc_trusted(void) {
  /* Read where the program's descriptors are out of reach (src/base/fd.c):
   * this runs in the program's thread that starts the session. */
  if (mlprof__fd_run_private(clocksource_is_tsc, NULL)) return 1;
  unsigned a, b, c, d;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u &&
      __get_cpuid(0x80000007u, &a, &b, &c, &d))
    return (d >> 8) & 1;
  return 0;
}
#else
static int tsc_trusted(void) { return 0; }
#endif

void mlprof__clock_setup(void) {
  const char *force = mlprof__env("MLPROF_CLOCK");
  if (force && strcmp(force, "monotonic") == 0)
    mlprof__use_tsc = 0;
  else if (force && strcmp(force, "tsc") == 0)
    mlprof__use_tsc = 1;
  else
    mlprof__use_tsc = tsc_trusted();
#if !defined(__x86_64__) && !defined(__i386__)
  mlprof__use_tsc = 0;
#endif
}

uint64_t mlprof__mono_ns_cold(void) { return mlprof__mono_ns(); }

const char *mlprof__clock_name(void) {
  return mlprof__use_tsc ? "tsc" : "monotonic";
}

/* The monotonic read is bracketed by two raw reads; the pair with the
 * tightest bracket of three tries is kept, its raw taken at the midpoint. */
mlprof__anchor mlprof__clock_anchor(void) {
  mlprof__anchor best = {0, 0};
  uint64_t best_width = UINT64_MAX;
  for (int i = 0; i < 3; i++) {
    uint64_t r0 = mlprof__now();
    uint64_t m = mlprof__mono_ns();
    uint64_t r1 = mlprof__now();
    if (r1 - r0 < best_width) {
      best_width = r1 - r0;
      best.raw = r0 + (r1 - r0) / 2;
      best.mono = m;
    }
  }
  return best;
}

/* Conversions start at 1 ns per tick (exact for the monotonic clock); with
 * the TSC the writer calibrates before each flush it encodes, over the whole
 * time since a0, so even a process that lives a millisecond gets a rate
 * accurate to a few parts in ten thousand, and long runs to parts per million.
 */
void mlprof__timebase_init(mlprof__timebase *tb, mlprof__anchor a0) {
  tb->a0 = a0;
  tb->mult = (uint64_t)1 << 32;
}

void mlprof__timebase_calibrate(mlprof__timebase *tb, mlprof__anchor now) {
  if (!mlprof__use_tsc || now.raw <= tb->a0.raw || now.mono <= tb->a0.mono)
    return;
  uint64_t dmono = now.mono - tb->a0.mono, draw = now.raw - tb->a0.raw;
  tb->mult = (uint64_t)(((unsigned __int128)dmono << 32) / draw);
}
