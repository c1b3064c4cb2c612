#include "cuda/runtime.h"

#include <stdexcept>

#ifdef VLMRM_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace vlmrm::cuda {

#ifdef VLMRM_WITH_CUDA

bool compiled() { return true; }
std::string compiled_version() { return VLMRM_CUDA_VERSION; }

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::string runtime_error() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess) return count > 0 ? "" : "no CUDA device";
  cudaGetLastError();
  return cudaGetErrorString(status);
}

std::string device_name(int device) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  return prop.name;
}

void check(int status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(status)));
  }
}

#else

bool compiled() { return false; }
std::string compiled_version() { return ""; }
int device_count() { return 0; }
std::string runtime_error() { return "vlmrm_fast was built without CUDA (no nvcc found)"; }
std::string device_name(int) { return ""; }
void check(int status, const char* what) {
  if (status != 0) throw std::runtime_error(std::string(what) + ": CUDA not compiled in");
}

#endif

void require_device(int device) {
  if (!compiled()) {
    throw std::runtime_error(
        "vlmrm_fast was built without CUDA (nvcc was not found at "
        "build time); reinstall on a machine with the CUDA toolkit");
  }
  int count = device_count();
  if (device < 0 || device >= count) {
    throw std::runtime_error("CUDA device " + std::to_string(device) + " is not usable (" +
                             std::to_string(count) + " visible; " + runtime_error() + ")");
  }
}

}  // namespace vlmrm::cuda
