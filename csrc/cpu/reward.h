// Rewards from image embeddings for K tasks at once (docs/reward.md).
// The embedding x is L2-normalized here; the text side is prepared on the host:
//
//  goal-baseline task: rows g (mean target embedding) and u (unit direction
//    from baseline to goal); constants |g|^2 and g.u. With v = x - g,
//      R = 1 - 0.5 * ((1 - alpha)^2 |v|^2 + (2 alpha - alpha^2) (v.u)^2)
//    where |v|^2 = |x|^2 - 2 x.g + |g|^2 and v.u = x.u - g.u (O(D) per frame).
//  binary task (Baumli et al.): rows goal, negative_1 .. negative_k;
//      p = softmax(scale * [x.goal, x.n_1, ..]) [0]
//    output p (probability) or 1[p > threshold].
// The CUDA kernel in cuda/reward.cu computes the same with the same task table.
#pragma once

#include <cstdint>

#include "cpu/preprocess.h"  // DType

namespace vlmrm {

enum class RewardKind : int32_t { kGoalBaseline = 0, kBinary = 1 };

struct RewardTask {
  int32_t kind = 0;         // RewardKind
  int32_t first_row = 0;    // first row of the task's text matrix rows
  int32_t num_rows = 0;     // goal-baseline: 2 (g, u); binary: 1 + negatives
  int32_t probability = 0;  // binary: output p instead of 1[p > threshold]
  float alpha = 0.f;        // goal-baseline
  float g_norm2 = 0.f;      // goal-baseline: |g|^2
  float g_dot_u = 0.f;      // goal-baseline: g.u
  float scale = 1.f;        // binary: logit scale (1 / temperature)
  float threshold = 0.5f;   // binary
};

// embeddings: n rows of d values of `dtype`, rows `row_stride` elements apart.
// text: m x d float32, row-major. out: n x k float32.
void reward_cpu(const void* embeddings, DType dtype, int64_t n, int64_t d, int64_t row_stride,
                const float* text, int64_t m, const RewardTask* tasks, int64_t k, float* out,
                int max_threads = 0);

// Throws std::invalid_argument when a task reads rows outside [0, m) or has
// parameters out of range; shared by the CPU and CUDA entry points.
void validate_reward_tasks(const RewardTask* tasks, int64_t k, int64_t m);

}  // namespace vlmrm
