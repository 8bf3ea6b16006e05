/* Runs every unit test, or those whose "group/name" contains an argument. */
#include <stdlib.h>

#include "test.h"

int mlprof_test_failed;

static const struct {
  const char *group;
  const mlprof_test *tests;
} groups[] = {
#define MLPROF__GROUP_ENTRY(g) {#g, mlprof_tests_##g},
    MLPROF_TEST_GROUPS(MLPROF__GROUP_ENTRY)
#undef MLPROF__GROUP_ENTRY
};

static int selected(const char *full, int argc, char **argv) {
  if (argc < 2) return 1;
  for (int i = 1; i < argc; i++)
    if (strstr(full, argv[i])) return 1;
  return 0;
}

int main(int argc, char **argv) {
  int passed = 0, failed = 0;
  for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
    for (const mlprof_test *t = groups[g].tests; t->name; t++) {
      char full[256];
      snprintf(full, sizeof full, "%s/%s", groups[g].group, t->name);
      if (!selected(full, argc, argv)) continue;
      mlprof_test_failed = 0;
      t->fn();
      printf("%s %s\n", mlprof_test_failed ? "FAIL" : "ok  ", full);
      fflush(stdout);
      if (mlprof_test_failed)
        failed++;
      else
        passed++;
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed || passed == 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
