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

#define MLPROF__STR2(x) #x
#define MLPROF__STR(x) MLPROF__STR2(x)

const char *mlprof_version(void) {
  return MLPROF__STR(MLPROF_VERSION_MAJOR) "." MLPROF__STR(
      MLPROF_VERSION_MINOR) "." MLPROF__STR(MLPROF_VERSION_PATCH);
}
