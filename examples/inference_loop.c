/* An inference-like loop: a small "model" answers requests on two worker
 * threads, token by token, the way an LLM server decodes. Every stage is a
 * zone; tokens are counted for throughput and each request ends a step.
 *
 *   mlprof run -- ./inference_loop [requests]
 */
#include <mlprof.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIM 96
#define LAYERS 4

typedef struct {
  float w[LAYERS][DIM][DIM];
} model;

static model weights;

static void matvec(float *out, const float m[DIM][DIM], const float *in) {
  for (int i = 0; i < DIM; i++) {
    float acc = 0;
    for (int j = 0; j < DIM; j++) acc += m[i][j] * in[j];
    out[i] = acc > 0 ? acc : acc * 0.01f;
  }
}

static void load_weights(void) {
  MLPROF_ZONE_CAT("load_weights", MLPROF_CAT_IO);
  unsigned seed = 42;
  for (int l = 0; l < LAYERS; l++)
    for (int i = 0; i < DIM; i++)
      for (int j = 0; j < DIM; j++)
        weights.w[l][i][j] =
            ((float)(rand_r(&seed) % 2001) - 1000.0f) / 40000.0f;
}

static int decode_token(float *state) {
  MLPROF_ZONE_CAT("decode_token", MLPROF_CAT_FORWARD);
  float tmp[DIM];
  {
    MLPROF_ZONE("attention");
    matvec(tmp, weights.w[0], state);
    matvec(state, weights.w[1], tmp);
  }
  {
    MLPROF_ZONE("mlp");
    matvec(tmp, weights.w[2], state);
    matvec(state, weights.w[3], tmp);
  }
  MLPROF_ZONE("sample");
  int best = 0;
  for (int i = 1; i < DIM; i++)
    if (state[i] > state[best]) best = i;
  state[best] += 1.0f;
  return best;
}

typedef struct {
  int index, first, count;
} work;

static void *worker(void *arg) {
  work *wk = arg;
  char name[32];
  snprintf(name, sizeof name, "worker-%d", wk->index);
  mlprof_thread_name(name);
  for (int r = wk->first; r < wk->first + wk->count; r++) {
    MLPROF_ZONE("request");
    float state[DIM];
    int prompt = 16 + r % 17, answer = 24 + (r * 7) % 40;
    {
      MLPROF_ZONE_CAT("prefill", MLPROF_CAT_FORWARD);
      for (int i = 0; i < DIM; i++)
        state[i] = (float)((i * 31 + r) % 17) / 17.0f;
      for (int t = 0; t < prompt; t++) decode_token(state);
      mlprof_units_add("prompt_tokens", (uint64_t)prompt);
    }
    for (int t = 0; t < answer; t++) {
      decode_token(state);
      mlprof_units_add("tokens", 1);
    }
    mlprof_gauge_set("kv_cache_tokens", prompt + answer);
    mlprof_step();
  }
  return NULL;
}

int main(int argc, char **argv) {
  int requests = argc > 1 ? atoi(argv[1]) : 200;
  if (requests <= 0) {
    fprintf(stderr, "usage: %s [requests > 0]\n", argv[0]);
    return 2;
  }
  mlprof_meta("model", "toy-decoder");
  mlprof_meta("layers", "4");
  load_weights();
  pthread_t th[2];
  work wk[2] = {{0, 0, requests / 2},
                {1, requests / 2, requests - requests / 2}};
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, worker, &wk[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  printf("served %d requests\n", requests);
  return 0;
}
