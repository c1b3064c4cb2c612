#include "cpu/preprocess.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cpu/float_convert.h"
#include "cpu/parallel.h"

namespace vlmrm {
namespace {

double bicubic_weight(double x) {
  constexpr double a = -0.5;  // Pillow's (and Keys') bicubic
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

double bilinear_weight(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Python's round(d / 2.0), as torchvision's CenterCrop uses: halves go to the
// even neighbour.
int python_round_half(int d) {
  int q = d / 2;
  if (d % 2 == 0) return q;
  return (q % 2 == 0) ? q : q + 1;
}

int32_t to_fixed(double w) {
  double scaled = w * static_cast<double>(1 << kResamplePrecisionBits);
  return static_cast<int32_t>(w < 0 ? scaled - 0.5 : scaled + 0.5);
}

AxisPlan identity_axis(int offset, int out_size) {
  AxisPlan plan;
  plan.out_size = out_size;
  plan.taps = 1;
  plan.start.resize(out_size);
  plan.count.assign(out_size, 1);
  plan.coeffs.assign(out_size, 1 << kResamplePrecisionBits);
  for (int o = 0; o < out_size; ++o) plan.start[o] = offset + o;
  return plan;
}

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for resized outputs
// offset .. offset + out_size - 1 of an in_size -> resized resample.
AxisPlan resample_axis(int in_size, int resized, int offset, int out_size, Filter filter) {
  // Pillow skips a pass whose size does not change (and torchvision the whole resize).
  if (resized == in_size) return identity_axis(offset, out_size);
  const double filter_support = filter == Filter::kBicubic ? 2.0 : 1.0;
  const double scale = static_cast<double>(static_cast<float>(in_size)) / resized;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter_support * filterscale;
  AxisPlan plan;
  plan.out_size = out_size;
  plan.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  plan.start.resize(out_size);
  plan.count.resize(out_size);
  plan.coeffs.assign(static_cast<size_t>(out_size) * plan.taps, 0);
  std::vector<double> w(plan.taps);
  for (int o = 0; o < out_size; ++o) {
    const int xx = offset + o;
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double total = 0.0;
    for (int x = 0; x < xmax; ++x) {
      double arg = (x + xmin - center + 0.5) * ss;
      w[x] = filter == Filter::kBicubic ? bicubic_weight(arg) : bilinear_weight(arg);
      total += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      if (total != 0.0) w[x] /= total;
      plan.coeffs[static_cast<size_t>(o) * plan.taps + x] = to_fixed(w[x]);
    }
    plan.start[o] = xmin;
    plan.count[o] = xmax;
  }
  return plan;
}

// PyTorch's cubic convolution weights of the four taps around a source
// position with fraction t (get_cubic_upsample_coefficients, A = -0.75), in
// float and in PyTorch's order of operations.
void cubic_weights(float t, float w[kCubicTaps]) {
  constexpr float a = -0.75f;
  auto near = [](float x) { return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f; };       // |x| <= 1
  auto far = [](float x) { return ((a * x - 5.0f * a) * x + 8.0f * a) * x - 4.0f * a; };  // 1 < |x| < 2
  w[0] = far(t + 1.0f);
  w[1] = near(t);
  w[2] = near(1.0f - t);
  w[3] = far((1.0f - t) + 1.0f);
}

// PyTorch's upsample_bicubic2d indices and weights for one axis, in_size ->
// out_size, align_corners=False and no scale factor given (as torchvision's
// Resize calls it): the scale is in_size / out_size in float, the source
// position scale * (o + 0.5) - 0.5, and the taps floor(position) - 1 .. + 2,
// clamped to the frame.
CubicAxis cubic_axis(int in_size, int out_size) {
  CubicAxis axis;
  axis.out_size = out_size;
  axis.index.resize(static_cast<size_t>(out_size) * kCubicTaps);
  axis.weight.resize(static_cast<size_t>(out_size) * kCubicTaps);
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  for (int o = 0; o < out_size; ++o) {
    const float position = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
    const int first = std::min(static_cast<int>(std::floor(position)), in_size - 1);
    const float t = std::min(std::max(position - static_cast<float>(first), 0.0f), 1.0f);
    float* w = axis.weight.data() + static_cast<size_t>(o) * kCubicTaps;
    cubic_weights(t, w);
    for (int j = 0; j < kCubicTaps; ++j) {
      axis.index[static_cast<size_t>(o) * kCubicTaps + j] = std::max(std::min(first - 1 + j, in_size - 1), 0);
    }
  }
  return axis;
}

inline uint8_t clip8(int32_t acc) {
  if (acc >= (1 << kResamplePrecisionBits << 8)) return 255;
  if (acc <= 0) return 0;
  return static_cast<uint8_t>(acc >> kResamplePrecisionBits);
}

inline const uint8_t* frame_origin(const FrameLayout& f, int i) {
  return f.data + static_cast<int64_t>(i % f.frames_per_row) * f.frame_col_stride +
         static_cast<int64_t>(i / f.frames_per_row) * f.frame_row_stride;
}

// One output sample of a pass: count taps over src[0], src[step], ..., with
// Pillow's rounding offset and uint8 clipping.
inline uint8_t tap_sum(const uint8_t* src, int64_t step, const int32_t* k, int count) {
  int32_t acc = 1 << (kResamplePrecisionBits - 1);
  for (int j = 0; j < count; ++j) acc += src[j * step] * k[j];
  return clip8(acc);
}

// Both passes in Pillow's order for this plan; `resized` gets S x S x 3 uint8.
void resample_frame(const FrameLayout& frames, const PreprocessPlan& plan, int i,
                    std::vector<uint8_t>& resized) {
  const AxisPlan& h = plan.horizontal;
  const AxisPlan& v = plan.vertical;
  const int S = plan.out_size;
  const int64_t ps = frames.pixel_stride;
  const uint8_t* origin = frame_origin(frames, i);
  std::vector<uint8_t> mid;
  if (!plan.vertical_first) {
    // Horizontal pass over the source rows the vertical pass reads.
    int row_first = v.start[0], row_end = v.start[0] + v.count[0];
    for (int o = 1; o < S; ++o) {
      row_first = std::min(row_first, v.start[o]);
      row_end = std::max(row_end, v.start[o] + v.count[o]);
    }
    mid.resize(static_cast<size_t>(row_end - row_first) * S * 3);
    for (int r = row_first; r < row_end; ++r) {
      const uint8_t* src = origin + static_cast<int64_t>(r) * frames.row_stride;
      uint8_t* dst = mid.data() + static_cast<size_t>(r - row_first) * S * 3;
      for (int x = 0; x < S; ++x) {
        const int32_t* k = h.coeffs.data() + static_cast<size_t>(x) * h.taps;
        for (int c = 0; c < 3; ++c) dst[x * 3 + c] = tap_sum(src + h.start[x] * ps + c, ps, k, h.count[x]);
      }
    }
    for (int y = 0; y < S; ++y) {
      const int32_t* k = v.coeffs.data() + static_cast<size_t>(y) * v.taps;
      const uint8_t* src = mid.data() + static_cast<size_t>(v.start[y] - row_first) * S * 3;
      for (int x = 0; x < S * 3; ++x)
        resized[static_cast<size_t>(y) * S * 3 + x] = tap_sum(src + x, S * 3, k, v.count[y]);
    }
  } else {
    // Vertical pass over the source columns the horizontal pass reads.
    int col_first = h.start[0], col_end = h.start[0] + h.count[0];
    for (int o = 1; o < S; ++o) {
      col_first = std::min(col_first, h.start[o]);
      col_end = std::max(col_end, h.start[o] + h.count[o]);
    }
    const int cols = col_end - col_first;
    mid.resize(static_cast<size_t>(S) * cols * 3);
    for (int y = 0; y < S; ++y) {
      const int32_t* k = v.coeffs.data() + static_cast<size_t>(y) * v.taps;
      const uint8_t* src = origin + static_cast<int64_t>(v.start[y]) * frames.row_stride;
      uint8_t* dst = mid.data() + static_cast<size_t>(y) * cols * 3;
      for (int x = 0; x < cols; ++x) {
        for (int c = 0; c < 3; ++c) {
          dst[x * 3 + c] = tap_sum(src + (col_first + x) * ps + c, frames.row_stride, k, v.count[y]);
        }
      }
    }
    for (int y = 0; y < S; ++y) {
      const uint8_t* src = mid.data() + static_cast<size_t>(y) * cols * 3;
      uint8_t* dst = resized.data() + static_cast<size_t>(y) * S * 3;
      for (int x = 0; x < S; ++x) {
        const int32_t* k = h.coeffs.data() + static_cast<size_t>(x) * h.taps;
        for (int c = 0; c < 3; ++c)
          dst[x * 3 + c] = tap_sum(src + (h.start[x] - col_first) * 3 + c, 3, k, h.count[x]);
      }
    }
  }
}

inline void store(void* out, size_t idx, float value, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(out)[idx] = value; break;
    case DType::kFloat16: static_cast<uint16_t*>(out)[idx] = cpu::float_to_half(value); break;
    case DType::kBFloat16: static_cast<uint16_t*>(out)[idx] = cpu::float_to_bfloat16(value); break;
  }
}

// ResizeMode::kPaper for frame i: every source row the vertical taps read is
// interpolated along x (a float sum of the four products, left to right), then
// each output along y from those rows, then normalized. The per-row sums are
// the same values PyTorch computes inside its 4 x 4 loop, so keeping them is
// only a saving.
void cubic_frame(const FrameLayout& frames, const PreprocessPlan& plan, int i, void* out, DType dtype) {
  const CubicAxis& h = plan.cubic_horizontal;
  const CubicAxis& v = plan.cubic_vertical;
  const int S = plan.out_size;
  const int64_t ps = frames.pixel_stride;
  const uint8_t* origin = frame_origin(frames, i);
  float unit[256];
  for (int k = 0; k < 256; ++k) unit[k] = static_cast<float>(k) / 255.0f;
  std::vector<int> slot(plan.in_height, -1);  // where a source row's x-interpolation is kept
  std::vector<int> rows;
  for (const int32_t r : v.index) {
    if (slot[r] < 0) {
      slot[r] = static_cast<int>(rows.size());
      rows.push_back(r);
    }
  }
  std::vector<float> along_x(rows.size() * S * 3);
  for (size_t k = 0; k < rows.size(); ++k) {
    const uint8_t* src = origin + static_cast<int64_t>(rows[k]) * frames.row_stride;
    float* dst = along_x.data() + k * S * 3;
    for (int x = 0; x < S; ++x) {
      const int32_t* index = h.index.data() + static_cast<size_t>(x) * kCubicTaps;
      const float* w = h.weight.data() + static_cast<size_t>(x) * kCubicTaps;
      for (int c = 0; c < 3; ++c) {
        float acc = unit[src[index[0] * ps + c]] * w[0];
        for (int j = 1; j < kCubicTaps; ++j) acc += unit[src[index[j] * ps + c]] * w[j];
        dst[x * 3 + c] = acc;
      }
    }
  }
  const size_t plane = static_cast<size_t>(S) * S;
  const size_t base = static_cast<size_t>(i) * 3 * plane;
  for (int y = 0; y < S; ++y) {
    const int32_t* index = v.index.data() + static_cast<size_t>(y) * kCubicTaps;
    const float* w = v.weight.data() + static_cast<size_t>(y) * kCubicTaps;
    for (int x = 0; x < S; ++x) {
      for (int c = 0; c < 3; ++c) {
        float acc = along_x[(static_cast<size_t>(slot[index[0]]) * S + x) * 3 + c] * w[0];
        for (int j = 1; j < kCubicTaps; ++j)
          acc += along_x[(static_cast<size_t>(slot[index[j]]) * S + x) * 3 + c] * w[j];
        store(out, base + c * plane + static_cast<size_t>(y) * S + x, (acc - plan.mean[c]) / plan.std[c],
              dtype);
      }
    }
  }
}

// Resample, then (x / 255 - mean) / std in float32, planar output.
void preprocess_frame(const FrameLayout& frames, const PreprocessPlan& plan, int i, void* out, DType dtype) {
  if (plan.float_cubic) {
    cubic_frame(frames, plan, i, out, dtype);
    return;
  }
  const int S = plan.out_size;
  std::vector<uint8_t> resized(static_cast<size_t>(S) * S * 3);
  resample_frame(frames, plan, i, resized);
  const size_t plane = static_cast<size_t>(S) * S;
  const size_t base = static_cast<size_t>(i) * 3 * plane;
  for (size_t p = 0; p < plane; ++p) {
    for (int c = 0; c < 3; ++c) {
      float value = (static_cast<float>(resized[p * 3 + c]) / 255.0f - plan.mean[c]) / plan.std[c];
      store(out, base + c * plane + p, value, dtype);
    }
  }
}

}  // namespace

PreprocessPlan make_preprocess_plan(int in_height, int in_width, int out_size, ResizeMode mode, Filter filter,
                                    const float mean[3], const float std[3], PassOrder order) {
  if (in_height <= 0 || in_width <= 0 || out_size <= 0) {
    throw std::invalid_argument("preprocess: frame size and output size must be positive");
  }
  PreprocessPlan plan;
  plan.in_height = in_height;
  plan.in_width = in_width;
  plan.out_size = out_size;
  for (int c = 0; c < 3; ++c) {
    if (!(std[c] > 0.0f)) throw std::invalid_argument("preprocess: std must be positive");
    plan.mean[c] = mean[c];
    plan.std[c] = std[c];
  }
  if (mode == ResizeMode::kPaper) {
    if (filter != Filter::kBicubic) {
      throw std::invalid_argument(
          "preprocess: the paper resize mode is bicubic (PyTorch's); use Filter.bicubic");
    }
    plan.resized_height = plan.resized_width = out_size;
    plan.float_cubic = true;
    plan.cubic_horizontal = cubic_axis(in_width, out_size);
    plan.cubic_vertical = cubic_axis(in_height, out_size);
    return plan;
  }
  if (mode == ResizeMode::kSquash) {
    plan.resized_height = plan.resized_width = out_size;
  } else {
    // torchvision's _compute_resized_output_size for Resize(S): the short side
    // becomes S, the long side int(S * long / short).
    const bool wide = in_width > in_height;
    const int short_side = wide ? in_height : in_width;
    const int long_side = wide ? in_width : in_height;
    const int new_long = static_cast<int>(static_cast<double>(out_size) * long_side / short_side);
    plan.resized_height = wide ? out_size : new_long;
    plan.resized_width = wide ? new_long : out_size;
  }
  plan.crop_top = python_round_half(plan.resized_height - out_size);
  plan.crop_left = python_round_half(plan.resized_width - out_size);
  plan.horizontal = resample_axis(in_width, plan.resized_width, plan.crop_left, out_size, filter);
  plan.vertical = resample_axis(in_height, plan.resized_height, plan.crop_top, out_size, filter);
  const int shrink_h = in_height - plan.resized_height, shrink_w = in_width - plan.resized_width;
  plan.vertical_first = order == PassOrder::kPillow13 && shrink_h > 0 && shrink_h > 2 * shrink_w;
  return plan;
}

void preprocess_cpu(const FrameLayout& frames, const PreprocessPlan& plan, void* out, DType dtype,
                    int max_threads) {
  if (frames.height != plan.in_height || frames.width != plan.in_width) {
    throw std::invalid_argument("preprocess: frames are " + std::to_string(frames.height) + "x" +
                                std::to_string(frames.width) + " but the plan was made for " +
                                std::to_string(plan.in_height) + "x" + std::to_string(plan.in_width));
  }
  cpu::parallel_for(frames.num_frames, max_threads,
                    [&](int64_t i) { preprocess_frame(frames, plan, static_cast<int>(i), out, dtype); });
}

}  // namespace vlmrm
