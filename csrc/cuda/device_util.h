// Helpers shared by the CUDA sources (compiled only with CUDA): make a device
// current for a scope, and refuse pointers a kernel on that device cannot read
// (a fault there would poison the whole CUDA context, torch's included).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "cuda/runtime.h"

namespace vlmrm::cuda {

// Makes `device` current and restores the previous device on scope exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int current = previous_;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Throws std::invalid_argument when `ptr` is plain host memory or device
// memory of another device. Device, managed and CUDA-registered host memory
// pass; so does a pointer the runtime cannot classify (the query fails), which
// is left to the launch rather than refused.
inline void require_device_pointer(const void* ptr, int device, const char* what) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so check_launch reports only the launch
    return;
  }
  if (attr.type == cudaMemoryTypeUnregistered) {
    throw std::invalid_argument(std::string(what) +
                                " is ordinary host memory that a CUDA kernel cannot read; pass a CUDA tensor "
                                "(or use the CPU entry point)");
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != device) {
    throw std::invalid_argument(std::string(what) + " lives on CUDA device " + std::to_string(attr.device) +
                                " but the kernel runs on device " + std::to_string(device));
  }
}

// Checks the launch that just happened (configuration errors surface here;
// faults inside the kernel surface at the caller's next synchronization).
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

}  // namespace vlmrm::cuda
