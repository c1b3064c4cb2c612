// Host API of the fused CUDA kernels (preprocess.cu, reward.cu). Plain C++: no
// CUDA types cross this header; streams travel as void* (cudaStream_t). In a
// build without CUDA the same functions exist and throw std::runtime_error
// (kernels_unavailable.cpp). The C++ twins in cpu/ are the specification:
// preprocess is bit-identical to preprocess_cpu, reward agrees with reward_cpu
// up to float summation order.
#pragma once

#include <cstdint>

#include "cpu/preprocess.h"
#include "cpu/reward.h"
#include "cuda/launch_config.h"

namespace vlmrm {

// A PreprocessPlan's tap tables, uploaded once to one CUDA device.
class DevicePreprocessPlan {
 public:
  DevicePreprocessPlan(const PreprocessPlan& plan, int device);
  ~DevicePreprocessPlan();
  DevicePreprocessPlan(const DevicePreprocessPlan&) = delete;
  DevicePreprocessPlan& operator=(const DevicePreprocessPlan&) = delete;

  int device() const { return device_; }
  const PreprocessPlan& plan() const { return plan_; }

 private:
  friend void preprocess_cuda(const FrameLayout&, const DevicePreprocessPlan&, void*, DType, void*);

  int device_ = -1;
  PreprocessPlan plan_;          // host copy: sizes, taps, mean/std
  PreprocessGeometry geometry_;  // column span, tile heights, the tables uploaded
  int32_t* tables_ = nullptr;    // device copy of geometry_.tables
  float* weights_ = nullptr;     // device copy of geometry_.weights (float_cubic plans)
  int multiprocessors_ = 0;
  int max_shared_bytes_ = 0;  // per block, opt-in limit of the device
};

// Fused preprocess on the plan's device: one launch reads the uint8 frames
// (device memory, any FrameLayout: stacked, or the EGL renderer's bottom-up
// RGBA frames), resamples both axes, normalizes and writes num_frames x 3 x S x S
// values of `dtype` to `out` (contiguous, device memory), ordered on `stream`.
void preprocess_cuda(const FrameLayout& frames, const DevicePreprocessPlan& plan, void* out, DType dtype,
                     void* stream);

// Fused reward on `device`: the same inputs as reward_cpu (embeddings, text and
// out in device memory, the task table on the host), one launch on `stream`.
// At most kMaxRewardTasks tasks.
void reward_cuda(const void* embeddings, DType dtype, int64_t n, int64_t d, int64_t row_stride,
                 const float* text, int64_t m, const RewardTask* tasks, int64_t k, float* out, int device,
                 void* stream);

}  // namespace vlmrm
