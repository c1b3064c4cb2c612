// Frame preprocessing as open_clip does it for a model (torchvision Resize on a
// PIL image, CenterCrop, ToTensor, Normalize), reproduced to the bit: Pillow's
// two-pass fixed-point resampling with its uint8 rounding after each pass, then
// (x / 255 - mean) / std in float32. The plan (filter taps) is built on the
// host; the CPU twin here and the CUDA kernel in cuda/preprocess.cu apply it.
//
// ResizeMode::kPaper is the preprocessing of the paper's code instead
// (torchvision Resize((S, S)) on a float tensor, which PyTorch computes as
// bicubic interpolation without antialiasing): x / 255 in float32, PyTorch's
// cubic convolution along x, then along y, in float32 with no rounding or
// clamping in between, then (v - mean) / std. Every operation is the IEEE
// float one in PyTorch's order (no fused multiply-add): the result is the bits
// of PyTorch's portable CPU kernel (ATEN_CPU_CAPABILITY=default). Its AVX2 and
// AVX-512 kernels and its CUDA kernel contract some of these operations into
// fused multiply-adds, the source position scale * (o + 0.5) - 0.5 among them,
// which moves that position by up to an ulp and the values by about 1e-5.
#pragma once

#include <cstdint>
#include <vector>

namespace vlmrm {

enum class Filter : int { kBilinear = 0, kBicubic = 1 };
enum class ResizeMode : int { kShortest = 0, kSquash = 1, kPaper = 2 };
// The dtypes the kernels read and write: the one definition (Python gets it as
// vlmrm_fast._core.kernels.DType, bound in bindings/kernels.cpp).
enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Which axis Pillow resamples first; the uint8 rounding between the passes
// makes the order visible. Pillow < 13 always goes horizontal first. Pillow 13
// goes vertical first when the height shrinks by more than twice as many
// pixels as the width (in_h - out_h > 0 and in_h - out_h > 2 (in_w - out_w)).
enum class PassOrder : int { kHorizontalFirst = 0, kPillow13 = 1 };

// Pillow's fixed-point precision for 8-bit images (Resample.c: 32 - 8 - 2).
constexpr int kResamplePrecisionBits = 22;

// Frame i's pixel (row r from the top, column c, channel ch) is at
//   data + (i % frames_per_row) * frame_col_stride
//        + (i / frames_per_row) * frame_row_stride
//        + r * row_stride + c * pixel_stride + ch.
// A stack of upright frames: frames_per_row = 1, frame_row_stride = H*W*3.
// An OpenGL framebuffer of tiles (rows bottom-up): data points at the top row of
// tile 0 and row_stride is negative.
struct FrameLayout {
  const uint8_t* data = nullptr;
  int num_frames = 0;
  int height = 0;
  int width = 0;
  int64_t pixel_stride = 3;
  int64_t row_stride = 0;
  int frames_per_row = 1;
  int64_t frame_col_stride = 0;
  int64_t frame_row_stride = 0;
};

// One axis of the resample restricted to the crop window: output index o reads
// source indices start[o] .. start[o] + count[o] - 1 with weights
// coeffs[o * taps + j] (fixed point, kResamplePrecisionBits). An axis that is
// not resized has one unit tap per output (bit-exact identity).
struct AxisPlan {
  int out_size = 0;
  int taps = 0;
  std::vector<int32_t> start;
  std::vector<int32_t> count;
  std::vector<int32_t> coeffs;
};

// PyTorch's cubic convolution reads four source samples per output.
constexpr int kCubicTaps = 4;

// One axis of PyTorch's bicubic interpolation (upsample_bicubic2d with
// align_corners=False, A = -0.75) for ResizeMode::kPaper: output o reads source
// indices index[o * kCubicTaps + j] (clamped to the frame, so a border sample
// may repeat) with float weights weight[o * kCubicTaps + j], in order j = 0..3.
struct CubicAxis {
  int out_size = 0;
  std::vector<int32_t> index;
  std::vector<float> weight;
};

struct PreprocessPlan {
  int in_height = 0, in_width = 0;
  int resized_height = 0, resized_width = 0;  // before the crop
  int crop_top = 0, crop_left = 0;
  int out_size = 0;             // S: output is (3, S, S)
  AxisPlan horizontal;          // over output columns
  AxisPlan vertical;            // over output rows
  bool vertical_first = false;  // pass order (see PassOrder)
  // ResizeMode::kPaper: the float bicubic axes below replace the fixed-point
  // taps above (which stay empty).
  bool float_cubic = false;
  CubicAxis cubic_horizontal;  // over output columns
  CubicAxis cubic_vertical;    // over output rows
  float mean[3] = {0, 0, 0};
  float std[3] = {1, 1, 1};
};

PreprocessPlan make_preprocess_plan(int in_height, int in_width, int out_size, ResizeMode mode, Filter filter,
                                    const float mean[3], const float std[3],
                                    PassOrder order = PassOrder::kHorizontalFirst);

// Writes num_frames x 3 x S x S values of `dtype` to `out` (contiguous).
void preprocess_cpu(const FrameLayout& frames, const PreprocessPlan& plan, void* out, DType dtype,
                    int max_threads = 0);

}  // namespace vlmrm
