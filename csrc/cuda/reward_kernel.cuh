// The fused reward kernel's device code: the same computation as reward_cpu
// (cpu/reward.cpp). One block per image embedding: load and L2-normalize the
// row into shared memory, take its dot products with every text row the tasks
// read (one warp per text row, round robin), then one thread per task applies
// the O(D) goal-baseline formula or the binary softmax. The task table travels
// by value in the launch parameters (RewardArgs, planned by plan_reward_launch).
// Compiled by nvcc (reward.cu) and, as host C++, by the kernel emulation that
// the CPU tests run (emulation/).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/device_builtins.h"
#include "cuda/launch_config.h"

namespace vlmrm {
namespace reward_device {

constexpr int kThreads = kRewardThreads;
constexpr int kWarps = kThreads / 32;
constexpr float kNormEps = 1e-12f;  // torch.nn.functional.normalize's eps

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block; every thread gets the total. Also a barrier.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

template <typename InT>
__global__ void __launch_bounds__(kThreads)
    reward_kernel(const InT* __restrict__ embeddings, const float* __restrict__ text, const RewardArgs a,
                  float* __restrict__ out) {
  VLMRM_DYNAMIC_SHARED(float, smem);
  float* x = smem;
  float* dots = smem + a.d;
  float* scratch = dots + a.num_dots;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t i = blockIdx.x;
  const InT* row = embeddings + i * a.row_stride;

  float part = 0.f;
  for (int j = tid; j < a.d; j += kThreads) {
    const float v = to_float(row[j]);
    x[j] = v;
    part += v * v;
  }
  const float norm2 = block_sum(part, scratch);
  const float inv = __fdiv_rn(1.f, fmaxf(sqrtf(norm2), kNormEps));
  part = 0.f;
  for (int j = tid; j < a.d; j += kThreads) {
    const float v = x[j] * inv;
    x[j] = v;
    part += v * v;
  }
  const float xx = block_sum(part, scratch);  // |x|^2 after normalization, as the twin takes it

  int q = 0;
  for (int t = 0; t < a.k; ++t) {
    const int first = a.tasks[t].first_row;
    const int rows = a.tasks[t].num_rows;
    for (int r = 0; r < rows; ++r, ++q) {
      if (q % kWarps != warp) continue;
      const float* text_row = text + static_cast<int64_t>(first + r) * a.d;
      float s = 0.f;
      for (int j = lane; j < a.d; j += 32) s += x[j] * __ldg(text_row + j);
      s = warp_sum(s);
      if (lane == 0) dots[q] = s;
    }
  }
  __syncthreads();

  if (tid < a.k) {
    const RewardTask task = a.tasks[tid];
    const float* dot = dots + a.first_dot[tid];
    float result;
    if (task.kind == static_cast<int32_t>(RewardKind::kGoalBaseline)) {
      const float vv = xx - 2.f * dot[0] + task.g_norm2;
      const float vu = dot[1] - task.g_dot_u;
      const float al = task.alpha;
      result = 1.f - 0.5f * ((1.f - al) * (1.f - al) * vv + (2.f * al - al * al) * vu * vu);
    } else {
      float top = -INFINITY;
      for (int r = 0; r < task.num_rows; ++r) top = fmaxf(top, task.scale * dot[r]);
      float total = 0.f;
      for (int r = 0; r < task.num_rows; ++r) total += expf(task.scale * dot[r] - top);
      const float p = expf(task.scale * dot[0] - top) / total;
      result = task.probability ? p : (p > task.threshold ? 1.f : 0.f);
    }
    out[i * a.k + tid] = result;
  }
}

}  // namespace reward_device
}  // namespace vlmrm
