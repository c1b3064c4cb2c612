// Fused preprocess kernel: uint8 frames -> (N, 3, S, S) encoder input, the same
// arithmetic as preprocess_cpu (cpu/preprocess.cpp) and so bit-identical to it.
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
// are read through FrameLayout's strides, so the renderer's bottom-up tile
// atlas (negative row stride) needs no copy.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/device_util.h"
#include "cuda/kernels.h"

namespace vlmrm {
namespace {

constexpr int kThreads = 256;
constexpr int kHalfUnit = 1 << (kResamplePrecisionBits - 1);
constexpr int kTableBytes = 3 * 256 * 4;  // room for the float table
constexpr int kMaxStageRows = 8;

struct PreprocessArgs {
  const uint8_t* frames;
  int64_t row_stride;
  int64_t frame_col_stride;
  int64_t frame_row_stride;
  int pixel_stride;
  int frames_per_row;
  int size;        // S
  int tiles;       // blocks per frame
  int tile_rows;   // output rows per block
  int stage_rows;  // source rows staged at a time
  int stage_words; // 32-bit words per staged row (room for a misaligned start)
  int span_bytes;  // bytes of a source row the horizontal taps read
  int col_first;   // first source column read
  int cols;        // source columns read, from col_first
  const int32_t* h_start;
  const int32_t* h_count;
  const int32_t* h_coeffs;  // tap-major: coefficient j of output o at [j * S + o]
  const int32_t* v_start;
  const int32_t* v_count;
  const int32_t* v_coeffs;
  float mean[3];
  float std[3];
};

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
                                                         uint8_t* work, const OutT* table, OutT* frame_out, int y0,
                                                         int rows_out) {
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
                                                         uint8_t* mid, const OutT* table, OutT* frame_out, int y0,
                                                         int rows_out) {
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
__global__ void __launch_bounds__(kThreads) preprocess_kernel(const PreprocessArgs a, OutT* __restrict__ out) {
  extern __shared__ __align__(16) uint8_t smem[];
  OutT* table = reinterpret_cast<OutT*>(smem);
  uint8_t* work = smem + kTableBytes;

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

template <typename OutT>
void set_shared_limit(int bytes) {
  cuda::check(cudaFuncSetAttribute(preprocess_kernel<OutT, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
              "cudaFuncSetAttribute(preprocess)");
  cuda::check(cudaFuncSetAttribute(preprocess_kernel<OutT, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
              "cudaFuncSetAttribute(preprocess)");
}

template <typename OutT>
void launch(const PreprocessArgs& a, bool vertical_first, unsigned blocks, size_t shared, cudaStream_t stream,
            void* out) {
  if (vertical_first) {
    preprocess_kernel<OutT, true><<<blocks, kThreads, shared, stream>>>(a, static_cast<OutT*>(out));
  } else {
    preprocess_kernel<OutT, false><<<blocks, kThreads, shared, stream>>>(a, static_cast<OutT*>(out));
  }
}

}  // namespace

DevicePreprocessPlan::DevicePreprocessPlan(const PreprocessPlan& plan, int device) : device_(device), plan_(plan) {
  cuda::require_device(device);
  const AxisPlan& h = plan.horizontal;
  const AxisPlan& v = plan.vertical;
  const int S = plan.out_size;
  if (S <= 0 || h.out_size != S || v.out_size != S || h.taps <= 0 || v.taps <= 0 ||
      h.start.size() != static_cast<size_t>(S) || v.start.size() != static_cast<size_t>(S) ||
      h.coeffs.size() != static_cast<size_t>(S) * h.taps || v.coeffs.size() != static_cast<size_t>(S) * v.taps) {
    throw std::invalid_argument("DevicePreprocessPlan: the plan's tap tables are inconsistent");
  }

  col_first_ = INT_MAX;
  col_end_ = 0;
  for (int x = 0; x < S; ++x) {
    col_first_ = std::min(col_first_, h.start[x]);
    col_end_ = std::max(col_end_, h.start[x] + h.count[x]);
  }
  for (int t = 1; t <= kMaxPreprocessTileRows; ++t) {
    int widest = 0;
    for (int y0 = 0; y0 < S; y0 += t) {
      int first = INT_MAX, end = 0;
      for (int y = y0; y < std::min(y0 + t, S); ++y) {
        first = std::min(first, v.start[y]);
        end = std::max(end, v.start[y] + v.count[y]);
      }
      widest = std::max(widest, end - first);
    }
    rows_spanned_[t] = widest;
  }

  // Coefficients go tap-major, so the threads of a warp (neighbouring
  // outputs) read one tap's coefficients from consecutive addresses.
  std::vector<int32_t> host;
  host.reserve(2 * S + h.coeffs.size() + 2 * S + v.coeffs.size());
  for (const AxisPlan* axis : {&h, &v}) {
    host.insert(host.end(), axis->start.begin(), axis->start.end());
    host.insert(host.end(), axis->count.begin(), axis->count.end());
    for (int j = 0; j < axis->taps; ++j) {
      for (int o = 0; o < S; ++o) host.push_back(axis->coeffs[static_cast<size_t>(o) * axis->taps + j]);
    }
  }

  cuda::DeviceGuard guard(device);
  cuda::check(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device),
              "cudaDeviceGetAttribute(multiprocessors)");
  cuda::check(cudaDeviceGetAttribute(&max_shared_bytes_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
              "cudaDeviceGetAttribute(shared memory opt-in)");
  // Opting in up to the device's limit only permits larger launches.
  set_shared_limit<float>(max_shared_bytes_);
  set_shared_limit<__half>(max_shared_bytes_);
  set_shared_limit<__nv_bfloat16>(max_shared_bytes_);
  const size_t bytes = host.size() * sizeof(int32_t);
  cuda::check(cudaMalloc(reinterpret_cast<void**>(&tables_), bytes), "cudaMalloc(preprocess taps)");
  const cudaError_t copied = cudaMemcpy(tables_, host.data(), bytes, cudaMemcpyHostToDevice);
  if (copied != cudaSuccess) {
    cudaFree(tables_);
    tables_ = nullptr;
    cuda::check(copied, "cudaMemcpy(preprocess taps)");
  }
}

DevicePreprocessPlan::~DevicePreprocessPlan() {
  if (tables_ == nullptr) return;
  int previous = -1;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  cudaFree(tables_);  // fails harmlessly once the runtime is torn down at exit
  if (switched) cudaSetDevice(previous);
}

void preprocess_cuda(const FrameLayout& frames, const DevicePreprocessPlan& device_plan, void* out, DType dtype,
                     void* stream) {
  const PreprocessPlan& plan = device_plan.plan_;
  if (frames.height != plan.in_height || frames.width != plan.in_width) {
    throw std::invalid_argument("preprocess_cuda: frames are " + std::to_string(frames.height) + "x" +
                                std::to_string(frames.width) + " but the plan was made for " +
                                std::to_string(plan.in_height) + "x" + std::to_string(plan.in_width));
  }
  if (frames.num_frames <= 0) throw std::invalid_argument("preprocess_cuda: num_frames must be positive");
  if (frames.pixel_stride < 3 || frames.pixel_stride > INT_MAX) {
    throw std::invalid_argument("preprocess_cuda: pixel_stride must be >= 3 (RGB or RGBA)");
  }
  if (frames.frames_per_row <= 0) throw std::invalid_argument("preprocess_cuda: frames_per_row must be positive");
  if (frames.data == nullptr || out == nullptr) throw std::invalid_argument("preprocess_cuda: null pointer");
  const int device = device_plan.device_;
  cuda::DeviceGuard guard(device);
  cuda::require_device_pointer(frames.data, device, "frames");
  cuda::require_device_pointer(out, device, "out");

  const int S = plan.out_size;
  const bool vertical_first = plan.vertical_first;
  const int cols = device_plan.col_end_ - device_plan.col_first_;
  const int64_t span_bytes = static_cast<int64_t>(cols - 1) * frames.pixel_stride + 3;
  const int64_t stage_words = (3 + span_bytes + 3) / 4;

  // The tallest tile that still gives every multiprocessor two blocks, then
  // shorter tiles (and fewer staged rows) until the block fits in shared memory.
  int tile_rows = 1;
  for (int t = kMaxPreprocessTileRows; t >= 1; t /= 2) {
    if (static_cast<int64_t>(frames.num_frames) * ((S + t - 1) / t) >= 2 * device_plan.multiprocessors_) {
      tile_rows = t;
      break;
    }
  }
  int stage_rows = vertical_first ? 0 : kMaxStageRows;
  auto shared_bytes = [&]() -> int64_t {
    if (vertical_first) return kTableBytes + static_cast<int64_t>(tile_rows) * 3 * cols;
    return kTableBytes + stage_rows * stage_words * 4 + static_cast<int64_t>(device_plan.rows_spanned_[tile_rows]) * 3 * S;
  };
  auto fits = [&] { return shared_bytes() <= device_plan.max_shared_bytes_; };
  while (!fits() && stage_rows > 1) stage_rows /= 2;  // staging only batches the loads
  while (!fits() && tile_rows > 1) tile_rows /= 2;
  if (!fits()) {
    throw std::invalid_argument("preprocess_cuda: a " + std::to_string(frames.height) + "x" +
                                std::to_string(frames.width) + " frame is too large for one block's shared memory (" +
                                std::to_string(device_plan.max_shared_bytes_) +
                                " bytes); downscale the frames before preprocessing");
  }
  const int tiles = (S + tile_rows - 1) / tile_rows;
  const int64_t blocks = static_cast<int64_t>(frames.num_frames) * tiles;
  if (blocks > INT_MAX) throw std::invalid_argument("preprocess_cuda: too many frames for one launch");

  PreprocessArgs a{};
  a.frames = frames.data;
  a.row_stride = frames.row_stride;
  a.frame_col_stride = frames.frame_col_stride;
  a.frame_row_stride = frames.frame_row_stride;
  a.pixel_stride = static_cast<int>(frames.pixel_stride);
  a.frames_per_row = frames.frames_per_row;
  a.size = S;
  a.tiles = tiles;
  a.tile_rows = tile_rows;
  a.stage_rows = stage_rows;
  a.stage_words = static_cast<int>(stage_words);
  a.span_bytes = static_cast<int>(span_bytes);
  a.col_first = device_plan.col_first_;
  a.cols = cols;
  a.h_start = device_plan.tables_;
  a.h_count = a.h_start + S;
  a.h_coeffs = a.h_count + S;
  a.v_start = a.h_coeffs + static_cast<size_t>(S) * plan.horizontal.taps;
  a.v_count = a.v_start + S;
  a.v_coeffs = a.v_count + S;
  for (int c = 0; c < 3; ++c) {
    a.mean[c] = plan.mean[c];
    a.std[c] = plan.std[c];
  }

  const size_t shared = static_cast<size_t>(shared_bytes());
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned grid = static_cast<unsigned>(blocks);
  switch (dtype) {
    case DType::kFloat32: launch<float>(a, vertical_first, grid, shared, s, out); break;
    case DType::kFloat16: launch<__half>(a, vertical_first, grid, shared, s, out); break;
    case DType::kBFloat16: launch<__nv_bfloat16>(a, vertical_first, grid, shared, s, out); break;
    default: throw std::invalid_argument("preprocess_cuda: unknown dtype");
  }
  cuda::check_launch("preprocess_cuda launch");
}

}  // namespace vlmrm
