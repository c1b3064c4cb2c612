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

const uint8_t* GlBufferInterop::map(void* stream, size_t* bytes) {
  DeviceGuard guard(device_);
  auto resource = static_cast<cudaGraphicsResource_t>(resource_);
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  check(cudaGraphicsMapResources(1, &resource, cuda_stream), "cudaGraphicsMapResources");
  void* ptr = nullptr;
  size_t size = 0;
  cudaError_t status = cudaGraphicsResourceGetMappedPointer(&ptr, &size, resource);
  if (status != cudaSuccess) {
    cudaGraphicsUnmapResources(1, &resource, cuda_stream);
    check(status, "cudaGraphicsResourceGetMappedPointer");
  }
  *bytes = size;
  return static_cast<const uint8_t*>(ptr);
}

void GlBufferInterop::unmap(void* stream) {
  DeviceGuard guard(device_);
  auto resource = static_cast<cudaGraphicsResource_t>(resource_);
  check(cudaGraphicsUnmapResources(1, &resource, static_cast<cudaStream_t>(stream)),
        "cudaGraphicsUnmapResources");
}

void GlBufferInterop::with_mapped(void* stream, const std::function<void(const uint8_t*, size_t)>& fn) {
  size_t bytes = 0;
  const uint8_t* pixels = map(stream, &bytes);
  try {
    DeviceGuard guard(device_);
    fn(pixels, bytes);
  } catch (...) {
    try {
      unmap(stream);
    } catch (...) {
      // The first error is the one to report.
    }
    throw;
  }
  unmap(stream);
}

HostMirror::HostMirror(size_t bytes, int device) : bytes_(bytes), device_(device) {
  require_device(device);
  DeviceGuard guard(device);
  void* pixels = nullptr;
  check(cudaHostAlloc(&pixels, bytes, cudaHostAllocDefault),
        "cudaHostAlloc (the host mirror of the pixel buffer)");
  pixels_ = static_cast<uint8_t*>(pixels);
  cudaStream_t stream = nullptr;
  cudaError_t status = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (status != cudaSuccess) {
    cudaFreeHost(pixels_);
    check(status, "cudaStreamCreateWithFlags");
  }
  stream_ = stream;
}

HostMirror::~HostMirror() {
  DeviceGuard guard(device_);
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  cudaFreeHost(pixels_);
}

const uint8_t* HostMirror::read(GlBufferInterop& interop) {
  if (interop.device() != device_)
    throw std::invalid_argument("HostMirror::read: the buffer is on another device");
  DeviceGuard guard(device_);
  auto stream = static_cast<cudaStream_t>(stream_);
  interop.with_mapped(stream_, [&](const uint8_t* mapped, size_t size) {
    if (size < bytes_) throw std::runtime_error("the mapped pixel buffer is smaller than its host mirror");
    check(cudaMemcpyAsync(pixels_, mapped, bytes_, cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (pixel buffer to its host mirror)");
  });
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (pixel buffer to its host mirror)");
  return pixels_;
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
void GlBufferInterop::with_mapped(void*, const std::function<void(const uint8_t*, size_t)>&) { no_cuda(); }
const uint8_t* GlBufferInterop::map(void*, size_t*) { no_cuda(); }
void GlBufferInterop::unmap(void*) { no_cuda(); }
HostMirror::HostMirror(size_t, int) { no_cuda(); }
HostMirror::~HostMirror() = default;
const uint8_t* HostMirror::read(GlBufferInterop&) { no_cuda(); }
void copy_frames_rgb(const FrameLayout&, uint8_t*, void*) { no_cuda(); }

#endif

}  // namespace vlmrm::cuda
