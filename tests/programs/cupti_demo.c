/* A CUDA program without a GPU, for tests/e2e/test_cupti.py: it does what
 * the CUDA driver does at cuInit when CUDA_INJECTION64_PATH is set (load
 * that library, call its InitializeInjection), then, in each of STEPS
 * zones "step", makes the activity records a GPU would (through the test
 * double tests/fake_cupti, which it is linked with): a kernel and a
 * host-to-device copy on device 0 stream 7, a memset on device 1 stream 8,
 * the runtime call that launched the kernel, and a stream synchronisation.
 * MODE "gaps": each step waits 4 ms in a zone "data_wait" with the GPU idle,
 * launches a 1 ms kernel from a zone "forward", copies 1 MB to the device for
 * 800 us and synchronises for 600 us. MODE "busy": kernels back to back
 * over each whole step (no gap, copy or synchronisation). MODE "comm": an
 * NCCL kernel on stream 9 runs after the step's compute kernel, alone;
 * "overlap": the two run side by side.
 * Usage: cupti_demo [STEPS [MODE]] */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mlprof.h"

uint64_t fake_cupti_now(void);
unsigned fake_cupti_flushes(int forced);
void fake_cupti_kernel(const char *name, uint32_t dev, uint32_t stream,
                       uint64_t start, uint64_t end, uint32_t corr);
void fake_cupti_memcpy(uint8_t copy_kind, uint64_t bytes, uint32_t dev,
                       uint32_t stream, uint64_t start, uint64_t end);
void fake_cupti_memset(uint64_t bytes, uint32_t dev, uint32_t stream,
                       uint64_t start, uint64_t end);
void fake_cupti_api(uint32_t kind, uint32_t cbid, uint32_t tid, uint64_t start,
                    uint64_t end, uint32_t corr);
void fake_cupti_sync(uint32_t type, uint32_t context, uint32_t stream,
                     uint64_t start, uint64_t end);

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 3;
  const char *inj = getenv("CUDA_INJECTION64_PATH");
  if (inj && *inj) {
    void *h = dlopen(inj, RTLD_NOW);
    int (*init)(void) =
        h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
    if (!init || init() != 1) {
      fprintf(stderr, "cupti_demo: cannot inject %s\n", inj);
      return 1;
    }
  }
  uint32_t tid = (uint32_t)syscall(SYS_gettid);
  const char *mode = argc > 2 ? argv[2] : "";
  for (int s = 0; s < steps && strcmp(mode, "gaps") == 0; s++) {
    MLPROF_ZONE("step");
    {
      MLPROF_ZONE("data_wait");
      sleep_us(4000);
    }
    {
      MLPROF_ZONE("forward");
      /* Launched well inside the zone: the clocks map within a few us. */
      sleep_us(50);
      uint64_t a = fake_cupti_now();
      fake_cupti_api(5, 211, tid, a, fake_cupti_now(), 1000 + (uint32_t)s);
      sleep_us(1000);
      fake_cupti_kernel("gemm_kernel", 0, 7, a, fake_cupti_now(),
                        1000 + (uint32_t)s);
    }
    uint64_t h = fake_cupti_now();
    sleep_us(800);
    fake_cupti_memcpy(1, 1 << 20, 0, 7, h, fake_cupti_now());
    uint64_t w = fake_cupti_now();
    sleep_us(600);
    fake_cupti_sync(3, 1, 7, w, fake_cupti_now());
  }
  for (int s = 0; s < steps && strcmp(mode, "busy") == 0; s++) {
    uint64_t a = fake_cupti_now();
    {
      MLPROF_ZONE("step");
      MLPROF_ZONE("forward");
      sleep_us(1000);
    }
    uint64_t z = fake_cupti_now() + 10000, t = a - 10000;
    for (int k = 1; k <= 4; k++) {
      uint64_t e = k == 4 ? z : t + (z - t) / 4;
      fake_cupti_kernel("gemm_kernel", 0, 7, t, e, 0);
      t = e;
    }
  }
  int comm = !strcmp(mode, "comm"), overlap = !strcmp(mode, "overlap");
  for (int s = 0; s < steps && (comm || overlap); s++) {
    uint64_t a = fake_cupti_now();
    MLPROF_ZONE("step");
    {
      MLPROF_ZONE("forward");
      sleep_us(1000);
    }
    uint64_t b = fake_cupti_now();
    {
      MLPROF_ZONE("backward");
      sleep_us(1000);
    }
    uint64_t c = fake_cupti_now();
    fake_cupti_kernel("gemm_kernel", 0, 7, a, overlap ? c : b, 0);
    fake_cupti_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, 9, b, c, 0);
  }
  for (int s = 0; s < steps && !*mode; s++) {
    MLPROF_ZONE("step");
    uint64_t a = fake_cupti_now();
    sleep_us(200);
    uint64_t b = fake_cupti_now();
    fake_cupti_api(5, 211, tid, a, b, 1 + (uint32_t)s);
    sleep_us(500);
    uint64_t c = fake_cupti_now();
    fake_cupti_kernel("gemm_kernel", 0, 7, b, c, 1 + (uint32_t)s);
    fake_cupti_memcpy(1, 4096, 0, 7, c, c + 1000);
    fake_cupti_memset(512, 1, 8, a, a + 2000);
    sleep_us(300);
    fake_cupti_sync(3, 1, 7, c, fake_cupti_now());
    sleep_us(100);
  }
  /* Long enough for the capture's flusher (MLPROF_FLUSH_MS) to run. */
  sleep_us(300000);
  printf("cupti_demo: %d steps, periodic flushes %s\n", steps,
         fake_cupti_flushes(0) ? "seen" : "none");
  return 0;
}
