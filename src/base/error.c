#include <stddef.h>

#include "mlprof.h"

const char *mlprof_strerror(int err) {
  switch (err) {
    case 0:
      return "success";
#define MLPROF__ERR_CASE(name, code, text) \
  case code:                               \
    return text;
      MLPROF_ERRNO_MAP(MLPROF__ERR_CASE)
#undef MLPROF__ERR_CASE
    default:
      return "unknown error";
  }
}

const char *mlprof_err_name(int err) {
  switch (err) {
    case 0:
      return "0";
#define MLPROF__ERR_NAME(name, code, text) \
  case code:                               \
    return "MLPROF_" #name;
      MLPROF_ERRNO_MAP(MLPROF__ERR_NAME)
#undef MLPROF__ERR_NAME
    default:
      return "unknown error";
  }
}

const char *mlprof_category_name(mlprof_category cat) {
  static const char *const names[MLPROF_CAT_COUNT] = {
#define MLPROF__CAT_NAME(name, code, text) [code] = text,
      MLPROF_CATEGORY_MAP(MLPROF__CAT_NAME)
#undef MLPROF__CAT_NAME
  };
  return (unsigned)cat < MLPROF_CAT_COUNT ? names[cat] : "unknown";
}

#define MLPROF__STR2(x) #x
#define MLPROF__STR(x) MLPROF__STR2(x)

const char *mlprof_version(void) {
  return MLPROF__STR(MLPROF_VERSION_MAJOR) "." MLPROF__STR(
      MLPROF_VERSION_MINOR) "." MLPROF__STR(MLPROF_VERSION_PATCH);
}
