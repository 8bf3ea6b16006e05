/* A minimal test harness in the manner of libuv's: named test functions in
 * one list per file, each runnable alone, assertions that print both values. */
#ifndef MLPROF_TEST_H
#define MLPROF_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  const char *name;
  void (*fn)(void);
} mlprof_test;

extern int mlprof_test_failed;

#define TEST_FAIL(...)                                \
  do {                                                \
    fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                     \
    fputc('\n', stderr);                              \
    mlprof_test_failed = 1;                           \
    return;                                           \
  } while (0)

#define CHECK(cond)                                    \
  do {                                                 \
    if (!(cond)) TEST_FAIL("check failed: %s", #cond); \
  } while (0)

#define CHECK_EQ(a, b)                                                 \
  do {                                                                 \
    long long a_ = (long long)(a), b_ = (long long)(b);                \
    if (a_ != b_) TEST_FAIL("%s == %s: %lld != %lld", #a, #b, a_, b_); \
  } while (0)

#define CHECK_EQ_U64(a, b)                                            \
  do {                                                                \
    uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                  \
    if (a_ != b_)                                                     \
      TEST_FAIL("%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, a_, b_); \
  } while (0)

#define CHECK_STR(a, b)                                                   \
  do {                                                                    \
    const char *a_ = (a), *b_ = (b);                                      \
    if (!a_ || !b_ || strcmp(a_, b_) != 0)                                \
      TEST_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)", \
                b_ ? b_ : "(null)");                                      \
  } while (0)

/* Each test file defines one list, terminated by {NULL, NULL}. */
/* clang-format off */
#define MLPROF_TEST_GROUPS(X)                                             \
  X(wire) X(record) X(reader) X(stats) X(export) X(sample) X(compare)     \
  X(findings) X(tree) X(prom) X(table) X(diff) X(filter) X(dist) X(lod) \
  X(pb) X(parquet) X(stack) X(memory) X(flame) X(hot) X(fold)
/* clang-format on */
#define MLPROF__DECLARE_GROUP(g) extern const mlprof_test mlprof_tests_##g[];
MLPROF_TEST_GROUPS(MLPROF__DECLARE_GROUP)
#undef MLPROF__DECLARE_GROUP

#endif
