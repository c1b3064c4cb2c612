// CUDA-GL interop for the renderer's pixel buffer: the GL buffer object is
// registered with CUDA once and mapped on a stream each step, so frames go from
// the GL framebuffer to CUDA memory without a host copy; reads for the host go
// through CUDA too (HostMirror). A build without CUDA has these entry points,
// and they throw saying so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "cpu/preprocess.h"

namespace vlmrm::cuda {

class GlBufferInterop {
 public:
  // The GL context owning `gl_buffer` must be current and run on CUDA device
  // `device` (the EGL device matching it).
  GlBufferInterop(unsigned int gl_buffer, int device);
  ~GlBufferInterop();  // the GL context must be current
  GlBufferInterop(const GlBufferInterop&) = delete;
  GlBufferInterop& operator=(const GlBufferInterop&) = delete;

  // Maps the buffer on `stream` (a cudaStream_t; null: the default stream) and
  // runs fn(device address, size) with this buffer's CUDA device current: GL
  // work issued before completes before CUDA work fn enqueues on `stream`, and
  // that work completes before later GL work touches the buffer.
  void with_mapped(void* stream, const std::function<void(const uint8_t*, size_t)>& fn);
  // The two halves of with_mapped, for a mapping that outlives one call: map
  // returns the device address and writes the size; unmap must follow on the
  // same stream before GL draws into the buffer again.
  const uint8_t* map(void* stream, size_t* bytes);
  void unmap(void* stream);
  int device() const { return device_; }

 private:
  void* resource_ = nullptr;  // cudaGraphicsResource_t
  int device_ = -1;
};

// The pixel buffer read for the host through CUDA: copied over DMA into
// page-locked memory of its own. Mapping a video-memory (GL_DYNAMIC_COPY)
// buffer on the host instead lets the driver move it to system memory, where
// kernels then read it several times slower.
class HostMirror {
 public:
  // `bytes` of page-locked memory and a stream of its own (one that waits for
  // no other stream) on CUDA device `device`.
  HostMirror(size_t bytes, int device);
  ~HostMirror();
  HostMirror(const HostMirror&) = delete;
  HostMirror& operator=(const HostMirror&) = delete;

  // Copies the first `bytes` of the buffer `interop` maps (GL work issued
  // before completes first) into the mirror and waits for the copy; returns
  // the mirror. The GL context owning the buffer must be current.
  const uint8_t* read(GlBufferInterop& interop);

 private:
  uint8_t* pixels_ = nullptr;
  size_t bytes_ = 0;
  void* stream_ = nullptr;  // cudaStream_t
  int device_ = -1;
};

// Writes frames (device memory described by `frames`) to `out` as
// num_frames x height x width x 3 uint8, upright, on `stream`.
void copy_frames_rgb(const FrameLayout& frames, uint8_t* out, void* stream);

}  // namespace vlmrm::cuda
