/* Checks src/intercept/cupti_abi.h, our own declarations of CUPTI's ABI,
 * against the CUDA toolkit's cupti_activity.h: built only where the toolkit
 * is (CMakeLists.txt), it does not compile when an offset differs, and
 * prints the record versions it checked. tests/e2e/test_cupti.py runs it. */
#include <cupti_activity.h>
#include <cupti_version.h>
#include <stddef.h>
#include <stdio.h>

#include "../../src/intercept/cupti_abi.h"

#define SAME(ours, type, field) \
  _Static_assert((ours) == offsetof(type, field), #type "." #field)

SAME(MLPROF__CUPTI_KERNEL_START, CUpti_ActivityKernel10, start);
SAME(MLPROF__CUPTI_KERNEL_END, CUpti_ActivityKernel10, end);
SAME(MLPROF__CUPTI_KERNEL_DEVICE, CUpti_ActivityKernel10, deviceId);
SAME(MLPROF__CUPTI_KERNEL_STREAM, CUpti_ActivityKernel10, streamId);
SAME(MLPROF__CUPTI_KERNEL_CORR, CUpti_ActivityKernel10, correlationId);
SAME(MLPROF__CUPTI_KERNEL_NAME, CUpti_ActivityKernel10, name);
SAME(MLPROF__CUPTI_MEMCPY_KIND, CUpti_ActivityMemcpy6, copyKind);
SAME(MLPROF__CUPTI_MEMCPY_BYTES, CUpti_ActivityMemcpy6, bytes);
SAME(MLPROF__CUPTI_MEMCPY_START, CUpti_ActivityMemcpy6, start);
SAME(MLPROF__CUPTI_MEMCPY_END, CUpti_ActivityMemcpy6, end);
SAME(MLPROF__CUPTI_MEMCPY_DEVICE, CUpti_ActivityMemcpy6, deviceId);
SAME(MLPROF__CUPTI_MEMCPY_STREAM, CUpti_ActivityMemcpy6, streamId);
SAME(MLPROF__CUPTI_MEMCPY_CORR, CUpti_ActivityMemcpy6, correlationId);
SAME(MLPROF__CUPTI_MEMSET_BYTES, CUpti_ActivityMemset4, bytes);
SAME(MLPROF__CUPTI_MEMSET_START, CUpti_ActivityMemset4, start);
SAME(MLPROF__CUPTI_MEMSET_END, CUpti_ActivityMemset4, end);
SAME(MLPROF__CUPTI_MEMSET_DEVICE, CUpti_ActivityMemset4, deviceId);
SAME(MLPROF__CUPTI_MEMSET_STREAM, CUpti_ActivityMemset4, streamId);
SAME(MLPROF__CUPTI_MEMSET_CORR, CUpti_ActivityMemset4, correlationId);
SAME(MLPROF__CUPTI_API_CBID, CUpti_ActivityAPI, cbid);
SAME(MLPROF__CUPTI_API_START, CUpti_ActivityAPI, start);
SAME(MLPROF__CUPTI_API_END, CUpti_ActivityAPI, end);
SAME(MLPROF__CUPTI_API_TID, CUpti_ActivityAPI, threadId);
SAME(MLPROF__CUPTI_API_CORR, CUpti_ActivityAPI, correlationId);
SAME(MLPROF__CUPTI_SYNC_TYPE, CUpti_ActivitySynchronization2, type);
SAME(MLPROF__CUPTI_SYNC_START, CUpti_ActivitySynchronization2, start);
SAME(MLPROF__CUPTI_SYNC_END, CUpti_ActivitySynchronization2, end);
SAME(MLPROF__CUPTI_SYNC_CONTEXT, CUpti_ActivitySynchronization2, contextId);
SAME(MLPROF__CUPTI_SYNC_STREAM, CUpti_ActivitySynchronization2, streamId);
SAME(MLPROF__CUPTI_EXT_ID, CUpti_ActivityExternalCorrelation, externalId);
SAME(MLPROF__CUPTI_EXT_CORR, CUpti_ActivityExternalCorrelation, correlationId);
_Static_assert(MLPROF__CUPTI_KERNEL_SIZE <= sizeof(CUpti_ActivityKernel10),
               "kernel record size");
#define SAME_VALUE(ours, theirs) \
  _Static_assert((long)(ours) == (long)(theirs), #theirs)

SAME_VALUE(MLPROF__CUPTI_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY);
SAME_VALUE(MLPROF__CUPTI_MEMSET, CUPTI_ACTIVITY_KIND_MEMSET);
SAME_VALUE(MLPROF__CUPTI_DRIVER, CUPTI_ACTIVITY_KIND_DRIVER);
SAME_VALUE(MLPROF__CUPTI_RUNTIME, CUPTI_ACTIVITY_KIND_RUNTIME);
SAME_VALUE(MLPROF__CUPTI_CONCURRENT_KERNEL,
           CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
SAME_VALUE(MLPROF__CUPTI_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
SAME_VALUE(MLPROF__CUPTI_EXTERNAL_CORRELATION,
           CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
SAME_VALUE(MLPROF__CUPTI_ERROR_MAX_LIMIT_REACHED,
           CUPTI_ERROR_MAX_LIMIT_REACHED);
SAME_VALUE(MLPROF__CUPTI_FLUSH_FORCED, CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
SAME_VALUE(MLPROF__CUPTI_EXT_KIND_CUSTOM0,
           CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0);

int main(void) {
  printf(
      "cupti_abi: Kernel10 Memcpy6 Memset4 API Synchronization2 "
      "ExternalCorrelation match cupti_abi.h (CUPTI API %d)\n",
      CUPTI_API_VERSION);
  return 0;
}
