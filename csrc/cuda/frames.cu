// Frames of a (possibly bottom-up, RGBA) pixel buffer -> upright RGB stack.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <stdexcept>

#include "cuda/device_util.h"
#include "cuda/gl_interop.h"
#include "cuda/runtime.h"

namespace vlmrm::cuda {
namespace {

__global__ void frames_to_rgb(const uint8_t* __restrict__ data, int64_t total, int height,
                              int width, int64_t pixel_stride, int64_t row_stride,
                              int frames_per_row, int64_t frame_col_stride,
                              int64_t frame_row_stride, uint8_t* __restrict__ out) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < total;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t c = p % width;
    int64_t rest = p / width;
    int64_t r = rest % height;
    int64_t i = rest / height;
    const uint8_t* src = data + (i % frames_per_row) * frame_col_stride +
                         (i / frames_per_row) * frame_row_stride + r * row_stride +
                         c * pixel_stride;
    uint8_t* dst = out + p * 3;
    dst[0] = src[0];
    dst[1] = src[1];
    dst[2] = src[2];
  }
}

}  // namespace

void copy_frames_rgb(const FrameLayout& frames, uint8_t* out, void* stream) {
  if (!frames.data || !out) throw std::invalid_argument("copy_frames_rgb: null pointer");
  int64_t total = static_cast<int64_t>(frames.num_frames) * frames.height * frames.width;
  if (total <= 0) return;
  // Runs with the frames' device current (GlBufferInterop::with_mapped); a host
  // or foreign-device `out` would fault the context that torch shares.
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  require_device_pointer(out, device, "out");
  const int threads = 256;
  int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535LL * 32);
  frames_to_rgb<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      frames.data, total, frames.height, frames.width, frames.pixel_stride, frames.row_stride,
      frames.frames_per_row, frames.frame_col_stride, frames.frame_row_stride, out);
  check(cudaGetLastError(), "frames_to_rgb launch");
}

}  // namespace vlmrm::cuda
