// Host side of the frame copy (frames_kernel.cuh).
#include <stdexcept>

#include "cuda/device_util.h"
#include "cuda/frames_kernel.cuh"
#include "cuda/gl_interop.h"
#include "cuda/launch_config.h"
#include "cuda/runtime.h"

namespace vlmrm::cuda {

void copy_frames_rgb(const FrameLayout& frames, uint8_t* out, void* stream) {
  if (!frames.data || !out) throw std::invalid_argument("copy_frames_rgb: null pointer");
  const int64_t total = static_cast<int64_t>(frames.num_frames) * frames.height * frames.width;
  if (total <= 0) return;
  // Runs with the frames' device current (GlBufferInterop::with_mapped); a host
  // or foreign-device `out` would fault the context that torch shares.
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  require_device_pointer(out, device, "out");
  frames_device::
      frames_to_rgb<<<frame_copy_blocks(frames), kFrameCopyThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          frames.data, total, frames.height, frames.width, frames.pixel_stride, frames.row_stride,
          frames.frames_per_row, frames.frame_col_stride, frames.frame_row_stride, out);
  check(cudaGetLastError(), "frames_to_rgb launch");
}

}  // namespace vlmrm::cuda
