/* Prints the layout of every struct the public header lets callers
 * allocate, and values that are part of the ABI; tests/abi/abi.txt holds
 * what it must print. Built against the installed header by the e2e test. */
#include <mlprof.h>
#include <stddef.h>
#include <stdio.h>

#define FIELD(type, f) \
  printf("offsetof(%s, %s) %zu\n", #type, #f, offsetof(type, f))

int main(void) {
  printf("sizeof(mlprof_site) %zu\n", sizeof(mlprof_site));
  FIELD(mlprof_site, name);
  FIELD(mlprof_site, function);
  FIELD(mlprof_site, file);
  FIELD(mlprof_site, line);
  FIELD(mlprof_site, category);
  printf("sizeof(mlprof_config) %zu\n", sizeof(mlprof_config));
  FIELD(mlprof_config, size);
  FIELD(mlprof_config, output);
  FIELD(mlprof_config, flush_interval_ms);
  FIELD(mlprof_config, memory_cap);
  FIELD(mlprof_config, enabled);
  FIELD(mlprof_config, sample_interval_ms);
  FIELD(mlprof_config, no_gpu);
  FIELD(mlprof_config, stacks_hz);
  FIELD(mlprof_config, stacks_flags);
  FIELD(mlprof_config, reserved);
  printf("sizeof(mlprof_span) %zu\n", sizeof(mlprof_span));
  FIELD(mlprof_span, site);
  FIELD(mlprof_span, begin_ns);
  FIELD(mlprof_span, end_ns);
  FIELD(mlprof_span, unit);
  FIELD(mlprof_span, units);
  FIELD(mlprof_span, reserved);
  printf("sizeof(mlprof_line) %zu\n", sizeof(mlprof_line));
  FIELD(mlprof_line, line);
  FIELD(mlprof_line, hits);
  FIELD(mlprof_line, total_ns);
  FIELD(mlprof_line, exclusive_ns);
  FIELD(mlprof_line, source);
  FIELD(mlprof_line, reserved);
  printf("sizeof(mlprof_frame) %zu\n", sizeof(mlprof_frame));
  FIELD(mlprof_frame, file);
  FIELD(mlprof_frame, function);
  FIELD(mlprof_frame, line);
  FIELD(mlprof_frame, reserved);
  printf("sizeof(mlprof_alloc) %zu\n", sizeof(mlprof_alloc));
  FIELD(mlprof_alloc, time_ns);
  FIELD(mlprof_alloc, address);
  FIELD(mlprof_alloc, size);
  FIELD(mlprof_alloc, frames);
  FIELD(mlprof_alloc, nframes);
  FIELD(mlprof_alloc, reserved);
  for (int e = MLPROF__ERR_LAST + 1; e <= 0; e++)
    printf("%d %s: %s\n", e, mlprof_err_name(e), mlprof_strerror(e));
  for (int c = 0; c < MLPROF_CAT_COUNT; c++)
    printf("category %d %s\n", c, mlprof_category_name((mlprof_category)c));
  mlprof_config cfg;
  mlprof_config_init(&cfg);
  printf("mlprof_config_init size %zu\n", cfg.size);
  return 0;
}
