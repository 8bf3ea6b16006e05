/* The part of CUPTI's C ABI that mlprof uses (src/intercept/cupti.c) and its
 * test double (tests/fake_cupti) implements: our own declarations, following
 * NVIDIA's documented cupti_activity.h (never included: the library builds
 * where no CUDA toolkit is). Activity records are read by field offsets,
 * which have stayed put in every version of each record (Kernel4..Kernel10,
 * Memcpy5..6, Memset4, API, Synchronization2) since CUDA 11; fields were
 * only ever appended. tests/programs/cupti_abi.c checks every offset below
 * against the toolkit's header. */
#ifndef MLPROF_CUPTI_ABI_H
#define MLPROF_CUPTI_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int mlprof__cupti_result; /* CUptiResult */
enum {
  MLPROF__CUPTI_SUCCESS = 0,
  MLPROF__CUPTI_ERROR_MAX_LIMIT_REACHED = 12, /* GetNextRecord: no more */
};

/* CUpti_ActivityKind values we enable. */
enum {
  MLPROF__CUPTI_MEMCPY = 1,
  MLPROF__CUPTI_MEMSET = 2,
  MLPROF__CUPTI_DRIVER = 4,
  MLPROF__CUPTI_RUNTIME = 5,
  MLPROF__CUPTI_CONCURRENT_KERNEL = 10,
  MLPROF__CUPTI_SYNCHRONIZATION = 38,
  MLPROF__CUPTI_EXTERNAL_CORRELATION = 39,
};

/* cuptiActivityFlushAll's flag: flush records of unfinished work too. */
#define MLPROF__CUPTI_FLUSH_FORCED 1u

/* Field offsets, bytes from the record's start (kind, a uint32, at 0). */
/* CUpti_ActivityKernel10 (CONCURRENT_KERNEL) */
#define MLPROF__CUPTI_KERNEL_START 16  /* uint64 ns */
#define MLPROF__CUPTI_KERNEL_END 24    /* uint64 ns */
#define MLPROF__CUPTI_KERNEL_DEVICE 40 /* uint32 */
#define MLPROF__CUPTI_KERNEL_STREAM 48 /* uint32 */
#define MLPROF__CUPTI_KERNEL_CORR 92   /* uint32 correlationId */
#define MLPROF__CUPTI_KERNEL_NAME 104  /* const char * */
/* CUpti_ActivityMemcpy6 */
#define MLPROF__CUPTI_MEMCPY_KIND 4    /* uint8 copyKind */
#define MLPROF__CUPTI_MEMCPY_BYTES 8   /* uint64 */
#define MLPROF__CUPTI_MEMCPY_START 16  /* uint64 ns */
#define MLPROF__CUPTI_MEMCPY_END 24    /* uint64 ns */
#define MLPROF__CUPTI_MEMCPY_DEVICE 32 /* uint32 */
#define MLPROF__CUPTI_MEMCPY_STREAM 40 /* uint32 */
#define MLPROF__CUPTI_MEMCPY_CORR 44   /* uint32 */
/* CUpti_ActivityMemset4 */
#define MLPROF__CUPTI_MEMSET_BYTES 8
#define MLPROF__CUPTI_MEMSET_START 16
#define MLPROF__CUPTI_MEMSET_END 24
#define MLPROF__CUPTI_MEMSET_DEVICE 32
#define MLPROF__CUPTI_MEMSET_STREAM 40
#define MLPROF__CUPTI_MEMSET_CORR 44
/* CUpti_ActivityAPI (RUNTIME, DRIVER) */
#define MLPROF__CUPTI_API_CBID 4 /* uint32 callback id */
#define MLPROF__CUPTI_API_START 8
#define MLPROF__CUPTI_API_END 16
#define MLPROF__CUPTI_API_TID 28 /* uint32 threadId */
#define MLPROF__CUPTI_API_CORR 32
/* CUpti_ActivitySynchronization2 */
#define MLPROF__CUPTI_SYNC_TYPE 4 /* uint32 */
#define MLPROF__CUPTI_SYNC_START 8
#define MLPROF__CUPTI_SYNC_END 16
#define MLPROF__CUPTI_SYNC_CONTEXT 28 /* uint32 contextId */
#define MLPROF__CUPTI_SYNC_STREAM 32  /* uint32 streamId */
/* CUpti_ActivityExternalCorrelation */
#define MLPROF__CUPTI_EXT_ID 8    /* uint64 externalId */
#define MLPROF__CUPTI_EXT_CORR 16 /* uint32 correlationId */
/* The largest offset read, + its size: a record is at least this long. */
#define MLPROF__CUPTI_KERNEL_SIZE 112

/* CUpti_ExternalCorrelationKind used for mlprof's zone ids. */
#define MLPROF__CUPTI_EXT_KIND_CUSTOM0 3

typedef void (*mlprof__cupti_buf_request)(uint8_t **buffer, size_t *size,
                                          size_t *max_records);
typedef void (*mlprof__cupti_buf_complete)(void *context, uint32_t stream,
                                           uint8_t *buffer, size_t size,
                                           size_t valid);

#endif
