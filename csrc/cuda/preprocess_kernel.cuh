// The fused preprocess kernel's device code: uint8 frames -> (N, 3, S, S)
// encoder input, the same arithmetic as preprocess_cpu (cpu/preprocess.cpp) and
// so bit-identical to it. Compiled by nvcc (preprocess.cu) and, as host C++, by
// the kernel emulation that the CPU tests run (emulation/).
//
// One block produces `tile_rows` output rows of one frame:
//   1. a 3 x 256 table of normalized values, (v / 255 - mean) / std with IEEE
//      rounding, converted to the output dtype (every output is a table entry);
//   2. the first pass into a planar uint8 buffer in shared memory. Horizontal
//      first (the usual order): the source rows the tile's vertical taps read
//      are staged a few at a time with coalesced 32-bit loads and resampled
//      along x. Vertical first (Pillow 13, frames shrinking much more in
//      height): the tile's rows are resampled along y straight from global
//      memory over the source columns the horizontal taps read;
//   3. the second pass from that buffer, written with coalesced stores.
// Both passes use Pillow's fixed point with uint8 rounding in between. Frames
// are read through FrameLayout's strides, so the EGL renderer's bottom-up
// RGBA frames (negative row stride) need no copy. The launch (tile height, shared
// memory, tap tables) is planned by plan_preprocess_launch (launch_config.h).
//
// cubic_preprocess_kernel is ResizeMode::kPaper, the paper's float bicubic
// (PyTorch's upsample_bicubic2d): each thread computes one output pixel's three
// channels from its 4 x 4 source samples (v / 255 from a shared table), along x
// for each of the four rows, then along y, with __fmul_rn / __fadd_rn so that
// nvcc contracts nothing into FMAs: the same bits as cubic_frame in
// cpu/preprocess.cpp.
#pragma once

#include <climits>
#include <cstdint>

#include "cuda/device_builtins.h"
#include "cuda/launch_config.h"

namespace vlmrm {
namespace preprocess_device {

constexpr int kThreads = kPreprocessThreads;
constexpr int kHalfUnit = 1 << (kResamplePrecisionBits - 1);

__device__ __forceinline__ int clip8(int32_t acc) {
  if (acc >= (1 << kResamplePrecisionBits << 8)) return 255;
  if (acc <= 0) return 0;
  return acc >> kResamplePrecisionBits;
}

template <typename T>
__device__ __forceinline__ T convert(float v);
template <>
__device__ __forceinline__ float convert<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half convert<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 convert<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Horizontal pass of the source rows the tile reads into mid ([row][3][S]),
// then the vertical pass into the output.
template <typename OutT>
__device__ __forceinline__ void horizontal_then_vertical(const PreprocessArgs& a, const uint8_t* origin,
                                                         uint8_t* work, const OutT* table, OutT* frame_out,
                                                         int y0, int rows_out) {
  const int S = a.size;
  const int tid = threadIdx.x;
  const int ps = a.pixel_stride;
  uint32_t* stage = reinterpret_cast<uint32_t*>(work);
  uint8_t* mid = work + static_cast<size_t>(a.stage_rows) * a.stage_words * 4;

  int row_first = INT_MAX, row_end = 0;
  for (int y = y0; y < y0 + rows_out; ++y) {
    const int start = __ldg(a.v_start + y);
    row_first = min(row_first, start);
    row_end = max(row_end, start + __ldg(a.v_count + y));
  }

  for (int r0 = row_first; r0 < row_end; r0 += a.stage_rows) {
    const int rows = min(a.stage_rows, row_end - r0);
    // Aligned 32-bit words over the bytes the taps read; the (at most two)
    // words that stick out of the row's span are assembled from byte loads so
    // that nothing outside the frame is read.
    for (int i = tid; i < rows * a.stage_words; i += kThreads) {
      const int rr = i / a.stage_words;
      const int w = i - rr * a.stage_words;
      const uint8_t* seg = origin + (r0 + rr) * a.row_stride;
      const int lead = static_cast<int>(reinterpret_cast<uintptr_t>(seg) & 3);
      const int first = 4 * w - lead;  // offset of the word's first byte from seg
      if (first >= a.span_bytes) continue;
      if (first >= 0 && first + 4 <= a.span_bytes) {
        stage[i] = __ldg(reinterpret_cast<const uint32_t*>(seg + first));
      } else {
        uint32_t word = 0;
        for (int b = max(0, -first); b < 4 && first + b < a.span_bytes; ++b) {
          word |= static_cast<uint32_t>(__ldg(seg + first + b)) << (8 * b);
        }
        stage[i] = word;
      }
    }
    __syncthreads();
    for (int i = tid; i < rows * S; i += kThreads) {
      const int rr = i / S;
      const int x = i - rr * S;
      const uintptr_t seg = reinterpret_cast<uintptr_t>(origin + (r0 + rr) * a.row_stride);
      const uint8_t* src = reinterpret_cast<const uint8_t*>(stage + rr * a.stage_words) + (seg & 3) +
                           (__ldg(a.h_start + x) - a.col_first) * ps;
      const int32_t* k = a.h_coeffs + x;
      const int count = __ldg(a.h_count + x);
      int32_t acc0 = kHalfUnit, acc1 = kHalfUnit, acc2 = kHalfUnit;
      for (int j = 0; j < count; ++j) {
        const int32_t w = __ldg(k + j * S);
        acc0 += src[0] * w;
        acc1 += src[1] * w;
        acc2 += src[2] * w;
        src += ps;
      }
      uint8_t* dst = mid + (r0 + rr - row_first) * 3 * S + x;
      dst[0] = static_cast<uint8_t>(clip8(acc0));
      dst[S] = static_cast<uint8_t>(clip8(acc1));
      dst[2 * S] = static_cast<uint8_t>(clip8(acc2));
    }
    __syncthreads();
  }

  const size_t plane = static_cast<size_t>(S) * S;
  for (int i = tid; i < rows_out * S; i += kThreads) {
    const int yl = i / S;
    const int x = i - yl * S;
    const int y = y0 + yl;
    const int32_t* k = a.v_coeffs + y;
    const int count = __ldg(a.v_count + y);
    const uint8_t* src = mid + (__ldg(a.v_start + y) - row_first) * 3 * S + x;
    int32_t acc0 = kHalfUnit, acc1 = kHalfUnit, acc2 = kHalfUnit;
    for (int j = 0; j < count; ++j) {
      const int32_t w = __ldg(k + j * S);
      acc0 += src[0] * w;
      acc1 += src[S] * w;
      acc2 += src[2 * S] * w;
      src += 3 * S;
    }
    const size_t at = static_cast<size_t>(y) * S + x;
    frame_out[at] = table[clip8(acc0)];
    frame_out[plane + at] = table[256 + clip8(acc1)];
    frame_out[2 * plane + at] = table[512 + clip8(acc2)];
  }
}

// Vertical pass of the tile's rows over the columns the horizontal taps read
// into mid ([row][3][cols]), then the horizontal pass into the output.
template <typename OutT>
__device__ __forceinline__ void vertical_then_horizontal(const PreprocessArgs& a, const uint8_t* origin,
                                                         uint8_t* mid, const OutT* table, OutT* frame_out,
                                                         int y0, int rows_out) {
  const int S = a.size;
  const int tid = threadIdx.x;
  const int cols = a.cols;
  const int samples = 3 * cols;  // per row, channel fastest: neighbouring threads read neighbouring bytes
  for (int i = tid; i < rows_out * samples; i += kThreads) {
    const int yl = i / samples;
    const int b = i - yl * samples;
    const int col = b / 3;
    const int c = b - col * 3;
    const int y = y0 + yl;
    const int32_t* k = a.v_coeffs + y;
    const int count = __ldg(a.v_count + y);
    const uint8_t* src = origin + __ldg(a.v_start + y) * a.row_stride + col * a.pixel_stride + c;
    int32_t acc = kHalfUnit;
    for (int j = 0; j < count; ++j) acc += __ldg(src + j * a.row_stride) * __ldg(k + j * S);
    mid[(yl * 3 + c) * cols + col] = static_cast<uint8_t>(clip8(acc));
  }
  __syncthreads();

  const size_t plane = static_cast<size_t>(S) * S;
  for (int i = tid; i < rows_out * S; i += kThreads) {
    const int yl = i / S;
    const int x = i - yl * S;
    const int32_t* k = a.h_coeffs + x;
    const int count = __ldg(a.h_count + x);
    const uint8_t* src = mid + yl * 3 * cols + (__ldg(a.h_start + x) - a.col_first);
    int32_t acc0 = kHalfUnit, acc1 = kHalfUnit, acc2 = kHalfUnit;
    for (int j = 0; j < count; ++j) {
      const int32_t w = __ldg(k + j * S);
      acc0 += src[j] * w;
      acc1 += src[cols + j] * w;
      acc2 += src[2 * cols + j] * w;
    }
    const size_t at = static_cast<size_t>(y0 + yl) * S + x;
    frame_out[at] = table[clip8(acc0)];
    frame_out[plane + at] = table[256 + clip8(acc1)];
    frame_out[2 * plane + at] = table[512 + clip8(acc2)];
  }
}

template <typename OutT, bool kVerticalFirst>
__global__ void __launch_bounds__(kThreads)
    preprocess_kernel(const PreprocessArgs a, OutT* __restrict__ out) {
  VLMRM_DYNAMIC_SHARED(uint8_t, smem);
  OutT* table = reinterpret_cast<OutT*>(smem);
  uint8_t* work = smem + kPreprocessTableBytes;

  const int S = a.size;
  const int frame = blockIdx.x / a.tiles;
  const int y0 = (blockIdx.x - frame * a.tiles) * a.tile_rows;
  const int rows_out = min(a.tile_rows, S - y0);

  // (v / 255 - mean) / std, rounded as the CPU rounds (no contraction, IEEE
  // division). Both passes below cross a barrier before reading the table.
  for (int i = threadIdx.x; i < 3 * 256; i += kThreads) {
    const int c = i >> 8;
    const float unit = __fdiv_rn(static_cast<float>(i & 255), 255.0f);
    table[i] = convert<OutT>(__fdiv_rn(__fsub_rn(unit, a.mean[c]), a.std[c]));
  }

  const uint8_t* origin = a.frames + (frame % a.frames_per_row) * a.frame_col_stride +
                          (frame / a.frames_per_row) * a.frame_row_stride +
                          static_cast<int64_t>(a.col_first) * a.pixel_stride;
  OutT* frame_out = out + static_cast<size_t>(frame) * 3 * S * S;
  if constexpr (kVerticalFirst) {
    vertical_then_horizontal(a, origin, work, table, frame_out, y0, rows_out);
  } else {
    horizontal_then_vertical(a, origin, work, table, frame_out, y0, rows_out);
  }
}

// One row of the float bicubic: the four samples of channel c along x (at byte
// offsets `offset`, weights `weight`), summed left to right in float.
__device__ __forceinline__ float cubic_along_x(const uint8_t* row, const float* unit, const int64_t* offset,
                                               const float* weight, int c) {
  float acc = 0.0f;
  for (int j = 0; j < kCubicTaps; ++j) {
    const float term = __fmul_rn(unit[__ldg(row + offset[j] + c)], weight[j]);
    acc = j == 0 ? term : __fadd_rn(acc, term);
  }
  return acc;
}

template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    cubic_preprocess_kernel(const PreprocessArgs a, OutT* __restrict__ out) {
  VLMRM_DYNAMIC_SHARED(float, unit);  // v / 255 for every byte value
  const int S = a.size;
  const int frame = blockIdx.x / a.tiles;
  const int y0 = (blockIdx.x - frame * a.tiles) * a.tile_rows;
  const int rows_out = min(a.tile_rows, S - y0);
  for (int i = threadIdx.x; i < 256; i += kThreads) unit[i] = __fdiv_rn(static_cast<float>(i), 255.0f);
  __syncthreads();

  const uint8_t* origin = a.frames + (frame % a.frames_per_row) * a.frame_col_stride +
                          (frame / a.frames_per_row) * a.frame_row_stride;
  OutT* frame_out = out + static_cast<size_t>(frame) * 3 * S * S;
  const size_t plane = static_cast<size_t>(S) * S;
  for (int i = threadIdx.x; i < rows_out * S; i += kThreads) {
    const int y = y0 + i / S;
    const int x = i - (i / S) * S;
    const size_t at = static_cast<size_t>(y) * S + x;
    // The pixel's taps, read once for its three channels.
    int64_t h_offset[kCubicTaps];
    float h_weight[kCubicTaps];
    const uint8_t* rows[kCubicTaps];
    float v_weight[kCubicTaps];
    for (int j = 0; j < kCubicTaps; ++j) {
      h_offset[j] = static_cast<int64_t>(__ldg(a.h_index + j * S + x)) * a.pixel_stride;
      h_weight[j] = __ldg(a.h_weight + j * S + x);
      rows[j] = origin + static_cast<int64_t>(__ldg(a.v_index + j * S + y)) * a.row_stride;
      v_weight[j] = __ldg(a.v_weight + j * S + y);
    }
    for (int c = 0; c < 3; ++c) {
      float acc = 0.0f;
      for (int r = 0; r < kCubicTaps; ++r) {
        const float term = __fmul_rn(cubic_along_x(rows[r], unit, h_offset, h_weight, c), v_weight[r]);
        acc = r == 0 ? term : __fadd_rn(acc, term);
      }
      frame_out[c * plane + at] = convert<OutT>(__fdiv_rn(__fsub_rn(acc, a.mean[c]), a.std[c]));
    }
  }
}

}  // namespace preprocess_device
}  // namespace vlmrm
