#include "cpu/reward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/float_convert.h"
#include "cpu/parallel.h"

namespace vlmrm {
namespace {

constexpr float kNormEps = 1e-12f;  // torch.nn.functional.normalize's eps
constexpr int kMaxBinaryRows = 64;

float load(const void* base, DType dtype, int64_t idx) {
  switch (dtype) {
    case DType::kFloat16: return cpu::half_to_float(static_cast<const uint16_t*>(base)[idx]);
    case DType::kBFloat16: return cpu::bfloat16_to_float(static_cast<const uint16_t*>(base)[idx]);
    default: return static_cast<const float*>(base)[idx];
  }
}

}  // namespace

void validate_reward_tasks(const RewardTask* tasks, int64_t k, int64_t m) {
  for (int64_t t = 0; t < k; ++t) {
    const RewardTask& task = tasks[t];
    const std::string name = "reward task " + std::to_string(t);
    if (task.first_row < 0 || task.num_rows < 1 || task.first_row + task.num_rows > m) {
      throw std::invalid_argument(name + " reads text rows outside the text matrix");
    }
    if (task.kind == static_cast<int32_t>(RewardKind::kGoalBaseline)) {
      if (task.num_rows != 2) throw std::invalid_argument(name + ": goal-baseline needs 2 rows");
      if (!(task.alpha >= 0.f && task.alpha <= 1.f)) {
        throw std::invalid_argument(name + ": alpha must be in [0, 1]");
      }
    } else if (task.kind == static_cast<int32_t>(RewardKind::kBinary)) {
      if (task.num_rows > kMaxBinaryRows) {
        throw std::invalid_argument(name + ": at most " + std::to_string(kMaxBinaryRows - 1) +
                                    " negative prompts");
      }
      if (!std::isfinite(task.scale)) throw std::invalid_argument(name + ": scale must be finite");
    } else {
      throw std::invalid_argument(name + ": unknown kind " + std::to_string(task.kind));
    }
  }
}

void reward_cpu(const void* embeddings, DType dtype, int64_t n, int64_t d, int64_t row_stride,
                const float* text, int64_t m, const RewardTask* tasks, int64_t k, float* out,
                int max_threads) {
  validate_reward_tasks(tasks, k, m);
  cpu::parallel_for(n, max_threads, [&](int64_t i) {
    std::vector<float> x(d);
    float norm2 = 0.f;
    for (int64_t j = 0; j < d; ++j) {
      x[j] = load(embeddings, dtype, i * row_stride + j);
      norm2 += x[j] * x[j];
    }
    const float inv = 1.f / std::max(std::sqrt(norm2), kNormEps);
    float xx = 0.f;
    for (int64_t j = 0; j < d; ++j) {
      x[j] *= inv;
      xx += x[j] * x[j];
    }
    auto dot_row = [&](int64_t row) {
      const float* r = text + row * d;
      float s = 0.f;
      for (int64_t j = 0; j < d; ++j) s += x[j] * r[j];
      return s;
    };
    for (int64_t t = 0; t < k; ++t) {
      const RewardTask& task = tasks[t];
      float result;
      if (task.kind == static_cast<int32_t>(RewardKind::kGoalBaseline)) {
        const float xg = dot_row(task.first_row);
        const float xu = dot_row(task.first_row + 1);
        const float vv = xx - 2.f * xg + task.g_norm2;
        const float vu = xu - task.g_dot_u;
        const float a = task.alpha;
        result = 1.f - 0.5f * ((1.f - a) * (1.f - a) * vv + (2.f * a - a * a) * vu * vu);
      } else {
        float logits[kMaxBinaryRows];
        float top = -INFINITY;
        for (int r = 0; r < task.num_rows; ++r) {
          logits[r] = task.scale * dot_row(task.first_row + r);
          top = std::max(top, logits[r]);
        }
        float total = 0.f;
        for (int r = 0; r < task.num_rows; ++r) total += std::exp(logits[r] - top);
        const float p = std::exp(logits[0] - top) / total;
        result = task.probability ? p : (p > task.threshold ? 1.f : 0.f);
      }
      out[i * k + t] = result;
    }
  });
}

}  // namespace vlmrm
