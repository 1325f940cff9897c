/* A program written against an earlier flytune_runtime.h (tests/abi/headers/vN,
 * chosen by the include path; FT_ABI_HEADER_VERSION is N): one layer through
 * the calls that header declared -- ft_plan_launch and ft_plan_reference
 * without a size -- run against today's library. Its ft_layer_buffers ends
 * exactly where a page without access begins, so a library reading one byte
 * past the struct that header declared dies; the fields that header added
 * after the first release's 13 pointers hold poison (pointers no buffer lives
 * at), so a library that used them would fail. Plain C99, no flytune code. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "flytune_runtime.h"
#include "tests/abi/old_caller.h"

#define CALLER_NAME2(n) ft_abi_caller_v##n
#define CALLER_NAME(n) CALLER_NAME2(n)
#define SIZE_NAME2(n) ft_abi_buffers_size_v##n
#define SIZE_NAME(n) SIZE_NAME2(n)

size_t SIZE_NAME(FT_ABI_HEADER_VERSION)(void) { return sizeof(ft_layer_buffers); }

static float bf16_value(uint16_t bits) {
  uint32_t w = (uint32_t)bits << 16;
  float f;
  memcpy(&f, &w, 4);
  return f;
}

struct allocations {
  ft_runtime* rt;
  void* p[16];
  int n;
};

static void* device_alloc(struct allocations* a, size_t bytes) {
  void* p = NULL;
  if (bytes == 0 || a->n == 16 || ft_runtime_alloc(a->rt, bytes, &p) != FT_OK) return NULL;
  a->p[a->n++] = p;
  return p;
}

static void release(struct allocations* a) {
  for (int i = 0; i < a->n; ++i) ft_runtime_free(a->rt, a->p[i]);
  a->n = 0;
}

static int fail(ft_abi_result* r, int status, const char* what, ft_runtime* rt) {
  r->status = status;
  snprintf(r->message, sizeof r->message, "%s: %s", what, ft_runtime_last_error(rt));
  return status;
}

int CALLER_NAME(FT_ABI_HEADER_VERSION)(ft_runtime* rt, const char* key, int tokens, ft_abi_result* r) {
  memset(r, 0, sizeof *r);
  ft_plan* plan = NULL;
  if (ft_runtime_select(rt, key, tokens, &plan) != FT_OK) return fail(r, -1, "ft_runtime_select", rt);
  ft_problem_shape s;
  ft_plan_shape(plan, &s);
  ft_workspace_sizes ws;
  ft_plan_workspace(plan, &ws);
  const size_t T = (size_t)tokens, E = (size_t)s.experts, H = (size_t)s.hidden, I = (size_t)s.inter, K = (size_t)s.topk;

  /* The struct at the end of a page whose successor has no access. */
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char* pages = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED || mprotect(pages + page, page, PROT_NONE) != 0) {
    ft_plan_free(plan);
    r->status = -1;
    snprintf(r->message, sizeof r->message, "mmap of the guard page failed");
    return -1;
  }
  ft_layer_buffers* b = (ft_layer_buffers*)(pages + page - sizeof(ft_layer_buffers));
  memset(b, 0, sizeof *b);

  struct allocations a = {rt, {0}, 0};
  void* x = device_alloc(&a, T * H * 2);
  int32_t* ids = device_alloc(&a, T * K * 4);
  float* weights = device_alloc(&a, T * K * 4);
  void* w1 = device_alloc(&a, E * 2 * I * H * 2);
  void* w2 = device_alloc(&a, E * H * I * 2);
  void* y = device_alloc(&a, T * H * 2);
  void* y_ref = device_alloc(&a, T * H * 2);
  b->x = x, b->topk_ids = ids, b->topk_weights = weights, b->w1 = w1, b->w2 = w2, b->y = y;
  b->inter = device_alloc(&a, ws.inter);
  b->y_acc = device_alloc(&a, ws.y_acc);
  b->sorted_ids = device_alloc(&a, ws.sorted_ids);
  b->block_experts = device_alloc(&a, ws.block_experts);
  b->padded_rows = device_alloc(&a, ws.padded_rows);
  if (!x || !ids || !weights || !w1 || !w2 || !y || !y_ref || !b->inter || !b->sorted_ids || !b->block_experts ||
      !b->padded_rows) {
    fail(r, -1, "ft_runtime_alloc", rt);
    goto done;
  }
  if (ft_runtime_fill_random(rt, x, T * H, 11, 1.0f) || ft_runtime_fill_random(rt, w1, E * 2 * I * H, 12, 0.05f) ||
      ft_runtime_fill_random(rt, w2, E * H * I, 13, 0.05f)) {
    fail(r, -1, "ft_runtime_fill_random", rt);
    goto done;
  }
  {
    int32_t* host_ids = malloc(T * K * 4);
    float* host_weights = malloc(T * K * 4);
    for (size_t t = 0; t < T; ++t)
      for (size_t k = 0; k < K; ++k) {
        host_ids[t * K + k] = (int32_t)((t * 7 + k * 3) % E);
        if (K > 1 && k > 0 && host_ids[t * K + k] == host_ids[t * K]) host_ids[t * K + k] = (int32_t)((host_ids[t * K] + 1) % E);
        host_weights[t * K + k] = 1.0f / (float)K;
      }
    const int up = ft_runtime_upload(rt, ids, host_ids, T * K * 4) || ft_runtime_upload(rt, weights, host_weights, T * K * 4);
    free(host_ids);
    free(host_weights);
    if (up) {
      fail(r, -1, "ft_runtime_upload", rt);
      goto done;
    }
  }
  if (ft_plan_needs_shuffled(plan, 1)) {
    void* w1s = device_alloc(&a, E * 2 * I * H * 2);
    b->w1_shuffled = w1s;
    if (!w1s || ft_runtime_shuffle_weights(rt, w1, w1s, (int)(E * 2 * I), (int)H, NULL)) {
      fail(r, -1, "ft_runtime_shuffle_weights", rt);
      goto done;
    }
  }
  if (ft_plan_needs_shuffled(plan, 2)) {
    void* w2s = device_alloc(&a, E * H * I * 2);
    b->w2_shuffled = w2s;
    if (!w2s || ft_runtime_shuffle_weights(rt, w2, w2s, (int)(E * H), (int)I, NULL)) {
      fail(r, -1, "ft_runtime_shuffle_weights", rt);
      goto done;
    }
  }
  /* Poison in the fields this header added after the first release. */
#if FT_ABI_HEADER_VERSION >= 2
  b->w1_tiled = (const void*)(uintptr_t)0x10;
  b->w2_tiled = (const void*)(uintptr_t)0x10;
#endif
#if FT_ABI_HEADER_VERSION >= 3
  b->bad_ids = (int32_t*)(uintptr_t)0x20;
#endif
#if FT_ABI_HEADER_VERSION >= 4
  b->workspace = (void*)(uintptr_t)0x30;
  b->workspace_bytes = 1;
#endif
#if FT_ABI_HEADER_VERSION >= 5
  b->x_scale = (const float*)(uintptr_t)0x40;
  b->w1_scales = (const float*)(uintptr_t)0x40;
  b->w2_scales = (const float*)(uintptr_t)0x40;
#endif

  r->status = ft_plan_launch(plan, b, NULL);
  if (r->status != FT_OK) {
    fail(r, r->status, "ft_plan_launch", rt);
    goto done;
  }
  if (ft_runtime_synchronize(rt, NULL) != FT_OK) {
    fail(r, -1, "ft_runtime_synchronize", rt);
    goto done;
  }
  {
    uint16_t* got = malloc(T * H * 2);
    uint16_t* want = malloc(T * H * 2);
    int st = ft_runtime_download(rt, got, y, T * H * 2);
    if (st == FT_OK) st = ft_plan_reference(plan, b, y_ref, NULL);
    if (st == FT_OK) st = ft_runtime_synchronize(rt, NULL);
    if (st == FT_OK) st = ft_runtime_download(rt, want, y_ref, T * H * 2);
    if (st == FT_OK) {
      double e = 0, n = 0;
      for (size_t i = 0; i < T * H; ++i) {
        const double g = bf16_value(got[i]), w = bf16_value(want[i]);
        e += (g - w) * (g - w);
        n += w * w;
      }
      r->rel_l2 = n > 0 ? sqrt(e / n) : (e > 0 ? 1.0 : 0.0);
      r->bucket = ft_plan_bucket(plan);
    } else {
      fail(r, st, "ft_plan_reference", rt);
    }
    free(got);
    free(want);
  }
done:
  release(&a);
  munmap(pages, 2 * page);
  ft_plan_free(plan);
  return r->status;
}
