/* A program annotated with NVTX only (no mlprof in it), built against the
 * CUDA toolkit's NVTX v3 headers: nested push/pop ranges, a domain with a
 * named category and a registered string, marks (one with a payload), a
 * start/end range ended on another thread, wide strings and named threads.
 * tests/e2e/test_nvtx.py runs it with and without `mlprof run`; its output
 * and exit status must not change. Usage: nvtx_demo [STEPS | --edge] */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile double sink;

/* About `us` microseconds of arithmetic, so that every range has a length. */
static void work(int us) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  double x = 1;
  do {
    for (int i = 0; i < 100; i++) x = x * 1.0000001 + 1e-9;
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000000 + (t.tv_nsec - t0.tv_nsec) / 1000 <
           us);
  sink += x;
}

static uint32_t gettid_(void) { return (uint32_t)syscall(SYS_gettid); }

typedef struct {
  int index;
  nvtxRangeId_t epoch; /* ended by worker 0 */
  uint32_t tid;
  pthread_barrier_t *named;
} worker_arg;

static void *worker(void *p) {
  worker_arg *a = p;
  a->tid = gettid_();
  if (a->index == 0) {
    nvtxNameOsThreadA(a->tid, "nvtx-worker-0");
  }
  /* Worker 1 is named by the main thread, before it records anything. */
  pthread_barrier_wait(a->named);
  pthread_barrier_wait(a->named);
  for (int i = 0; i < 3; i++) {
    nvtxRangePushA("worker_task");
    work(300);
    nvtxRangePushA("worker_inner");
    work(200);
    nvtxRangePop();
    nvtxRangePop();
  }
  if (a->index == 0) nvtxRangeEnd(a->epoch);
  return NULL;
}

/* Calls a tool must survive: pops with nothing pushed, ends of ranges never
 * started, attributes missing or empty, NULL names and handles, a thread
 * id that does not exist. Then one range, so the test sees recording went
 * on. */
static int edge(void) {
  nvtxRangePop();
  nvtxDomainRangePop(NULL);
  nvtxRangeEnd(12345);
  nvtxRangeEnd(0);
  nvtxEventAttributes_t empty = {0};
  nvtxMarkEx(&empty);
  nvtxRangePushEx(&empty); /* no message: "(unnamed)" */
  nvtxRangePop();
  nvtxEventAttributes_t noreg = {0};
  noreg.version = NVTX_VERSION;
  noreg.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  noreg.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  noreg.category = 4000000000u; /* no such category */
  nvtxDomainRangePushEx(NULL, &noreg);
  nvtxDomainRangePop(NULL);
  nvtxDomainHandle_t none = nvtxDomainCreateA(NULL);
  (void)none;
  (void)nvtxDomainRegisterStringA(NULL, NULL);
  nvtxNameOsThreadA(4000000000u, "nobody");
  nvtxNameCategoryA(7, NULL);
  nvtxMarkA(NULL);
  nvtxRangePushA("after_edge");
  nvtxRangePop();
  nvtxRangePop();
  printf("nvtx_demo: edge cases done\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--edge") == 0) return edge();
  int steps = argc > 1 ? atoi(argv[1]) : 3;
  nvtxNameOsThreadA(gettid_(), "nvtx-main");
  nvtxNameCategoryA(1, "forward");
  nvtxDomainHandle_t io = nvtxDomainCreateA("demo_io");
  nvtxDomainNameCategoryA(io, 2, "data");
  nvtxStringHandle_t load = nvtxDomainRegisterStringA(io, "load_batch");

  nvtxRangeId_t epoch = nvtxRangeStartA("epoch");
  for (int s = 0; s < steps; s++) {
    nvtxRangePushA("step");

    nvtxEventAttributes_t fw = {0};
    fw.version = NVTX_VERSION;
    fw.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    fw.category = 1;
    fw.messageType = NVTX_MESSAGE_TYPE_ASCII;
    fw.message.ascii = "forward_pass";
    nvtxRangePushEx(&fw);
    work(500);
    nvtxRangePushA("matmul");
    work(500);
    nvtxRangePop();
    nvtxRangePop();

    nvtxEventAttributes_t ld = {0};
    ld.version = NVTX_VERSION;
    ld.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    ld.category = 2;
    ld.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    ld.message.registered = load;
    nvtxDomainRangePushEx(io, &ld);
    work(400);
    nvtxDomainRangePop(io);

    nvtxMarkA("checkpoint");
    nvtxEventAttributes_t loss = {0};
    loss.version = NVTX_VERSION;
    loss.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    loss.payloadType = NVTX_PAYLOAD_TYPE_DOUBLE;
    loss.payload.dValue = 2.5 - s;
    loss.messageType = NVTX_MESSAGE_TYPE_ASCII;
    loss.message.ascii = "loss";
    nvtxMarkEx(&loss);

    nvtxRangePop();
  }
  nvtxRangePushW(L"wide_range");
  work(200);
  nvtxRangePop();

  pthread_barrier_t named;
  pthread_barrier_init(&named, NULL, 3);
  pthread_t th[2];
  worker_arg args[2];
  for (int i = 0; i < 2; i++) {
    args[i] = (worker_arg){i, epoch, 0, &named};
    pthread_create(&th[i], NULL, worker, &args[i]);
  }
  pthread_barrier_wait(&named);
  nvtxNameOsThreadA(args[1].tid, "nvtx-worker-1");
  pthread_barrier_wait(&named);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&named);

  printf("nvtx_demo: %d steps, 2 workers\n", steps);
  return 3; /* not 0, so that a changed exit status shows */
}
