// Host side of the fused preprocess kernel (preprocess_kernel.cuh): upload a
// plan's tap tables once per device, then plan and launch one kernel per call.
#include <stdexcept>

#include "cuda/device_util.h"
#include "cuda/kernels.h"
#include "cuda/preprocess_kernel.cuh"

namespace vlmrm {
namespace {

using preprocess_device::cubic_preprocess_kernel;
using preprocess_device::preprocess_kernel;

template <typename OutT>
void set_shared_limit(int bytes) {
  cuda::check(cudaFuncSetAttribute(preprocess_kernel<OutT, false>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
              "cudaFuncSetAttribute(preprocess)");
  cuda::check(
      cudaFuncSetAttribute(preprocess_kernel<OutT, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
      "cudaFuncSetAttribute(preprocess)");
}

template <typename OutT>
void launch(const PreprocessLaunch& l, cudaStream_t stream, void* out) {
  OutT* dst = static_cast<OutT*>(out);
  if (l.float_cubic) {
    cubic_preprocess_kernel<OutT><<<l.blocks, kPreprocessThreads, l.shared_bytes, stream>>>(l.args, dst);
  } else if (l.vertical_first) {
    preprocess_kernel<OutT, true><<<l.blocks, kPreprocessThreads, l.shared_bytes, stream>>>(l.args, dst);
  } else {
    preprocess_kernel<OutT, false><<<l.blocks, kPreprocessThreads, l.shared_bytes, stream>>>(l.args, dst);
  }
}

}  // namespace

DevicePreprocessPlan::DevicePreprocessPlan(const PreprocessPlan& plan, int device)
    : device_(device), plan_(plan), geometry_(make_preprocess_geometry(plan)) {
  cuda::require_device(device);
  cuda::DeviceGuard guard(device);
  cuda::check(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device),
              "cudaDeviceGetAttribute(multiprocessors)");
  cuda::check(cudaDeviceGetAttribute(&max_shared_bytes_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
              "cudaDeviceGetAttribute(shared memory opt-in)");
  // Opting in up to the device's limit only permits larger launches.
  set_shared_limit<float>(max_shared_bytes_);
  set_shared_limit<__half>(max_shared_bytes_);
  set_shared_limit<__nv_bfloat16>(max_shared_bytes_);
  const std::vector<int32_t>& host = geometry_.tables;
  const size_t bytes = host.size() * sizeof(int32_t);
  cuda::check(cudaMalloc(reinterpret_cast<void**>(&tables_), bytes), "cudaMalloc(preprocess taps)");
  cudaError_t copied = cudaMemcpy(tables_, host.data(), bytes, cudaMemcpyHostToDevice);
  if (copied == cudaSuccess && !geometry_.weights.empty()) {
    const size_t weight_bytes = geometry_.weights.size() * sizeof(float);
    copied = cudaMalloc(reinterpret_cast<void**>(&weights_), weight_bytes);
    if (copied == cudaSuccess)
      copied = cudaMemcpy(weights_, geometry_.weights.data(), weight_bytes, cudaMemcpyHostToDevice);
  }
  if (copied != cudaSuccess) {
    cudaFree(tables_);
    cudaFree(weights_);  // null-safe
    tables_ = nullptr;
    weights_ = nullptr;
    cuda::check(copied, "cudaMemcpy(preprocess taps)");
  }
}

DevicePreprocessPlan::~DevicePreprocessPlan() {
  if (tables_ == nullptr) return;
  int previous = -1;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
  cudaFree(tables_);  // fails harmlessly once the runtime is torn down at exit
  cudaFree(weights_);
  if (switched) cudaSetDevice(previous);
}

void preprocess_cuda(const FrameLayout& frames, const DevicePreprocessPlan& device_plan, void* out,
                     DType dtype, void* stream) {
  const PreprocessLaunch l = plan_preprocess_launch(
      frames, device_plan.plan_, device_plan.geometry_, device_plan.tables_, device_plan.weights_,
      device_plan.multiprocessors_, device_plan.max_shared_bytes_);
  if (out == nullptr) throw std::invalid_argument("preprocess_cuda: null pointer");
  cuda::DeviceGuard guard(device_plan.device_);
  cuda::require_device_pointer(frames.data, device_plan.device_, "frames");
  cuda::require_device_pointer(out, device_plan.device_, "out");

  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::kFloat32: launch<float>(l, s, out); break;
    case DType::kFloat16: launch<__half>(l, s, out); break;
    case DType::kBFloat16: launch<__nv_bfloat16>(l, s, out); break;
    default: throw std::invalid_argument("preprocess_cuda: unknown dtype");
  }
  cuda::check_launch("preprocess_cuda launch");
}

}  // namespace vlmrm
