// Device code of the frame copy behind BatchRenderer.render(device="cuda"):
// frames of a (possibly bottom-up, RGBA) pixel buffer -> an upright RGB stack.
// Compiled by nvcc (frames.cu) and by the kernel emulation (emulation/).
#pragma once

#include <cstdint>

#include "cuda/device_builtins.h"

namespace vlmrm {
namespace frames_device {

__global__ void frames_to_rgb(const uint8_t* __restrict__ data, int64_t total, int height, int width,
                              int64_t pixel_stride, int64_t row_stride, int frames_per_row,
                              int64_t frame_col_stride, int64_t frame_row_stride, uint8_t* __restrict__ out) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < total;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = p % width;
    const int64_t rest = p / width;
    const int64_t r = rest % height;
    const int64_t i = rest / height;
    const uint8_t* src = data + (i % frames_per_row) * frame_col_stride +
                         (i / frames_per_row) * frame_row_stride + r * row_stride + c * pixel_stride;
    uint8_t* dst = out + p * 3;
    dst[0] = __ldg(src);
    dst[1] = __ldg(src + 1);
    dst[2] = __ldg(src + 2);
  }
}

}  // namespace frames_device
}  // namespace vlmrm
