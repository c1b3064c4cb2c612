// The kernel API in a build without CUDA (compiled instead of preprocess.cu and
// reward.cu): every entry point says that CUDA is not compiled in, so callers
// get a clear error instead of a missing symbol. The C++ twins in cpu/ serve
// this build.
#include <stdexcept>
#include <string>

#include "cuda/kernels.h"

namespace vlmrm {
namespace {

[[noreturn]] void not_compiled(const char* what, const char* cpu_alternative) {
  throw std::runtime_error(
      std::string(what) +
      ": vlmrm_fast was built without CUDA (no nvcc at build time, or VLMRM_WITH_CUDA=OFF); use " +
      cpu_alternative + " or reinstall on a machine with the CUDA toolkit");
}

}  // namespace

DevicePreprocessPlan::DevicePreprocessPlan(const PreprocessPlan& plan, int device)
    : device_(device), plan_(plan) {
  not_compiled("DevicePreprocessPlan", "preprocess_cpu");
}

DevicePreprocessPlan::~DevicePreprocessPlan() = default;

void preprocess_cuda(const FrameLayout&, const DevicePreprocessPlan&, void*, DType, void*) {
  not_compiled("preprocess_cuda", "preprocess_cpu");
}

void reward_cuda(const void*, DType, int64_t, int64_t, int64_t, const float*, int64_t, const RewardTask*,
                 int64_t, float*, int, void*) {
  not_compiled("reward_cuda", "reward_cpu");
}

}  // namespace vlmrm
