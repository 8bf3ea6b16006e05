/* A library that must never be loaded: when it is, its constructor creates
 * the file named by MLPROF_TEST_MARKER. tests/e2e/test_security_record.py
 * offers it as MLPROF_NVML_LIB to a setuid program. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void loaded(void) {
  const char *marker = getenv("MLPROF_TEST_MARKER");
  if (marker) close(open(marker, O_WRONLY | O_CREAT, 0644));
}
