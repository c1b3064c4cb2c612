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

inline uint8_t clip8(int32_t acc) {
  if (acc >= (1 << kResamplePrecisionBits << 8)) return 255;
  if (acc <= 0) return 0;
  return static_cast<uint8_t>(acc >> kResamplePrecisionBits);
}

inline const uint8_t* frame_origin(const FrameLayout& f, int i) {
  return f.data + static_cast<int64_t>(i % f.frames_per_row) * f.frame_col_stride +
         static_cast<int64_t>(i / f.frames_per_row) * f.frame_row_stride;
}

void preprocess_frame(const FrameLayout& frames, const PreprocessPlan& plan, int i, void* out,
                      DType dtype) {
  const AxisPlan& h = plan.horizontal;
  const AxisPlan& v = plan.vertical;
  const int S = plan.out_size;
  int row_first = v.start[0], row_end = v.start[0] + v.count[0];
  for (int o = 1; o < S; ++o) {
    row_first = std::min(row_first, v.start[o]);
    row_end = std::max(row_end, v.start[o] + v.count[o]);
  }
  const uint8_t* origin = frame_origin(frames, i);
  // Horizontal pass over the source rows the vertical pass reads.
  std::vector<uint8_t> rows(static_cast<size_t>(row_end - row_first) * S * 3);
  for (int r = row_first; r < row_end; ++r) {
    const uint8_t* src = origin + static_cast<int64_t>(r) * frames.row_stride;
    uint8_t* dst = rows.data() + static_cast<size_t>(r - row_first) * S * 3;
    for (int x = 0; x < S; ++x) {
      const int32_t* k = h.coeffs.data() + static_cast<size_t>(x) * h.taps;
      int32_t acc[3] = {1 << (kResamplePrecisionBits - 1), 1 << (kResamplePrecisionBits - 1),
                        1 << (kResamplePrecisionBits - 1)};
      for (int j = 0; j < h.count[x]; ++j) {
        const uint8_t* px = src + static_cast<int64_t>(h.start[x] + j) * frames.pixel_stride;
        acc[0] += px[0] * k[j];
        acc[1] += px[1] * k[j];
        acc[2] += px[2] * k[j];
      }
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = clip8(acc[c]);
    }
  }
  // Vertical pass, then (x / 255 - mean) / std in float32, planar output.
  const size_t plane = static_cast<size_t>(S) * S;
  const size_t base = static_cast<size_t>(i) * 3 * plane;
  for (int y = 0; y < S; ++y) {
    const int32_t* k = v.coeffs.data() + static_cast<size_t>(y) * v.taps;
    for (int x = 0; x < S; ++x) {
      for (int c = 0; c < 3; ++c) {
        int32_t acc = 1 << (kResamplePrecisionBits - 1);
        for (int j = 0; j < v.count[y]; ++j) {
          acc += rows[(static_cast<size_t>(v.start[y] + j - row_first) * S + x) * 3 + c] * k[j];
        }
        float value = (static_cast<float>(clip8(acc)) / 255.0f - plan.mean[c]) / plan.std[c];
        size_t idx = base + c * plane + static_cast<size_t>(y) * S + x;
        switch (dtype) {
          case DType::kFloat32: static_cast<float*>(out)[idx] = value; break;
          case DType::kFloat16: static_cast<uint16_t*>(out)[idx] = cpu::float_to_half(value); break;
          case DType::kBFloat16: static_cast<uint16_t*>(out)[idx] = cpu::float_to_bfloat16(value); break;
        }
      }
    }
  }
}

}  // namespace

PreprocessPlan make_preprocess_plan(int in_height, int in_width, int out_size, ResizeMode mode,
                                    Filter filter, const float mean[3], const float std[3]) {
  if (in_height <= 0 || in_width <= 0 || out_size <= 0) {
    throw std::invalid_argument("preprocess: frame size and output size must be positive");
  }
  PreprocessPlan plan;
  plan.in_height = in_height;
  plan.in_width = in_width;
  plan.out_size = out_size;
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
  for (int c = 0; c < 3; ++c) {
    if (!(std[c] > 0.0f)) throw std::invalid_argument("preprocess: std must be positive");
    plan.mean[c] = mean[c];
    plan.std[c] = std[c];
  }
  return plan;
}

void preprocess_cpu(const FrameLayout& frames, const PreprocessPlan& plan, void* out, DType dtype,
                    int max_threads) {
  if (frames.height != plan.in_height || frames.width != plan.in_width) {
    throw std::invalid_argument("preprocess: frames are " + std::to_string(frames.height) + "x" +
                                std::to_string(frames.width) + " but the plan was made for " +
                                std::to_string(plan.in_height) + "x" +
                                std::to_string(plan.in_width));
  }
  cpu::parallel_for(frames.num_frames, max_threads,
                    [&](int64_t i) { preprocess_frame(frames, plan, static_cast<int>(i), out, dtype); });
}

}  // namespace vlmrm
