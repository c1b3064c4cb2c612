// Arguments as the Python bindings pass them: buffers as integer addresses
// (numpy's ctypes.data, torch's data_ptr()), frame layouts as their strides.
// Shared by bindings/ and emulation/module.cpp; every check throws
// std::invalid_argument (ValueError in Python).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cpu/preprocess.h"

namespace vlmrm::args {

template <typename T>
T* address(uintptr_t ptr, const char* what) {
  if (ptr == 0) throw std::invalid_argument(std::string(what) + " is a null pointer");
  return reinterpret_cast<T*>(ptr);
}

inline void check_positive(int64_t value, const char* what) {
  if (value <= 0) throw std::invalid_argument(std::string(what) + " must be positive");
}

// A bound enum also takes values that name no member (DType(7) in Python).
inline DType checked_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat16:
    case DType::kBFloat16: return dtype;
  }
  throw std::invalid_argument("dtype must be DType.float32, DType.float16 or DType.bfloat16");
}

inline FrameLayout frame_layout(uintptr_t data, int num_frames, int height, int width, int64_t pixel_stride,
                                int64_t row_stride, int frames_per_row, int64_t frame_col_stride,
                                int64_t frame_row_stride) {
  check_positive(num_frames, "num_frames");
  check_positive(height, "height");
  check_positive(width, "width");
  check_positive(frames_per_row, "frames_per_row");
  if (pixel_stride < 3) throw std::invalid_argument("pixel_stride must be >= 3 (RGB or RGBA)");
  FrameLayout layout;
  layout.data = address<const uint8_t>(data, "frames");
  layout.num_frames = num_frames;
  layout.height = height;
  layout.width = width;
  layout.pixel_stride = pixel_stride;
  layout.row_stride = row_stride;
  layout.frame_col_stride = frame_col_stride;
  layout.frames_per_row = frames_per_row;
  layout.frame_row_stride = frame_row_stride;
  return layout;
}

}  // namespace vlmrm::args
