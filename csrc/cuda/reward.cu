// Host side of the fused reward kernel (reward_kernel.cuh): plan, check the
// pointers and launch one kernel on the caller's stream.
#include <stdexcept>
#include <string>

#include "cuda/device_util.h"
#include "cuda/kernels.h"
#include "cuda/reward_kernel.cuh"

namespace vlmrm {
namespace {

using reward_device::reward_kernel;

constexpr size_t kDefaultSharedBytes = 48 * 1024;

template <typename InT>
void launch(const void* embeddings, const float* text, const RewardLaunch& l, float* out, int device,
            cudaStream_t stream) {
  if (l.shared_bytes > kDefaultSharedBytes) {
    int limit = 0;
    cuda::check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                "cudaDeviceGetAttribute(shared memory opt-in)");
    if (l.shared_bytes > static_cast<size_t>(limit)) {
      throw std::invalid_argument("reward_cuda: embedding dimension " + std::to_string(l.args.d) +
                                  " is too large for one block's shared memory");
    }
    cuda::check(cudaFuncSetAttribute(reward_kernel<InT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(l.shared_bytes)),
                "cudaFuncSetAttribute(reward)");
  }
  reward_kernel<InT><<<l.blocks, kRewardThreads, l.shared_bytes, stream>>>(
      static_cast<const InT*>(embeddings), text, l.args, out);
}

}  // namespace

void reward_cuda(const void* embeddings, DType dtype, int64_t n, int64_t d, int64_t row_stride,
                 const float* text, int64_t m, const RewardTask* tasks, int64_t k, float* out, int device,
                 void* stream) {
  const RewardLaunch l = plan_reward_launch(n, d, row_stride, m, tasks, k);
  if (embeddings == nullptr || text == nullptr || out == nullptr) {
    throw std::invalid_argument("reward_cuda: null pointer");
  }
  cuda::require_device(device);
  cuda::DeviceGuard guard(device);
  cuda::require_device_pointer(embeddings, device, "embeddings");
  cuda::require_device_pointer(text, device, "text");
  cuda::require_device_pointer(out, device, "out");

  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::kFloat32: launch<float>(embeddings, text, l, out, device, s); break;
    case DType::kFloat16: launch<__half>(embeddings, text, l, out, device, s); break;
    case DType::kBFloat16: launch<__nv_bfloat16>(embeddings, text, l, out, device, s); break;
    default: throw std::invalid_argument("reward_cuda: unknown dtype");
  }
  cuda::check_launch("reward_cuda launch");
}

}  // namespace vlmrm
