#include "cuda/gl_interop.h"

#include <stdexcept>
#include <string>

#include "cuda/runtime.h"

#ifdef VLMRM_WITH_CUDA
#include <GL/gl.h>
#include <cuda_gl_interop.h>
#include <cuda_runtime_api.h>

#include "cuda/device_util.h"
#endif

namespace vlmrm::cuda {

#ifdef VLMRM_WITH_CUDA

GlBufferInterop::GlBufferInterop(unsigned int gl_buffer, int device) : device_(device) {
  require_device(device);
  DeviceGuard guard(device);
  cudaGraphicsResource_t resource = nullptr;
  check(cudaGraphicsGLRegisterBuffer(&resource, gl_buffer, cudaGraphicsRegisterFlagsReadOnly),
        "cudaGraphicsGLRegisterBuffer (is the EGL device the CUDA device?)");
  resource_ = resource;
}

GlBufferInterop::~GlBufferInterop() {
  if (!resource_) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaGraphicsUnregisterResource(static_cast<cudaGraphicsResource_t>(resource_));
  cudaSetDevice(previous);
}

void GlBufferInterop::with_mapped(void* stream,
                                  const std::function<void(const uint8_t*, size_t)>& fn) {
  DeviceGuard guard(device_);
  auto resource = static_cast<cudaGraphicsResource_t>(resource_);
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  check(cudaGraphicsMapResources(1, &resource, cuda_stream), "cudaGraphicsMapResources");
  try {
    void* ptr = nullptr;
    size_t bytes = 0;
    check(cudaGraphicsResourceGetMappedPointer(&ptr, &bytes, resource),
          "cudaGraphicsResourceGetMappedPointer");
    fn(static_cast<const uint8_t*>(ptr), bytes);
  } catch (...) {
    cudaGraphicsUnmapResources(1, &resource, cuda_stream);
    throw;
  }
  check(cudaGraphicsUnmapResources(1, &resource, cuda_stream), "cudaGraphicsUnmapResources");
}

#else

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error(
      "vlmrm_fast was built without CUDA (nvcc was not found at build time): CUDA-GL interop "
      "and device outputs are unavailable; use host outputs or reinstall with the CUDA toolkit");
}
}  // namespace

GlBufferInterop::GlBufferInterop(unsigned int, int) { no_cuda(); }
GlBufferInterop::~GlBufferInterop() = default;
void GlBufferInterop::with_mapped(void*, const std::function<void(const uint8_t*, size_t)>&) {
  no_cuda();
}
void copy_frames_rgb(const FrameLayout&, uint8_t*, void*) { no_cuda(); }

#endif

}  // namespace vlmrm::cuda
