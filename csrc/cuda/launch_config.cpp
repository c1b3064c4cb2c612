#include "cuda/launch_config.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace vlmrm {

namespace {

// The geometry of a float_cubic plan (ResizeMode::kPaper): its index and
// weight tables, tap-major.
PreprocessGeometry cubic_geometry(const PreprocessPlan& plan) {
  const int S = plan.out_size;
  const size_t taps = static_cast<size_t>(S) * kCubicTaps;
  const CubicAxis* axes[2] = {&plan.cubic_horizontal, &plan.cubic_vertical};
  const int limits[2] = {plan.in_width, plan.in_height};
  PreprocessGeometry g;
  for (int a = 0; a < 2; ++a) {
    const CubicAxis& axis = *axes[a];
    if (S <= 0 || axis.out_size != S || axis.index.size() != taps || axis.weight.size() != taps) {
      throw std::invalid_argument("DevicePreprocessPlan: the plan's tap tables are inconsistent");
    }
    for (const int32_t index : axis.index) {
      if (index < 0 || index >= limits[a]) {
        throw std::invalid_argument("DevicePreprocessPlan: a tap reads outside the frame");
      }
    }
    for (int j = 0; j < kCubicTaps; ++j) {
      for (int o = 0; o < S; ++o) {
        g.tables.push_back(axis.index[static_cast<size_t>(o) * kCubicTaps + j]);
        g.weights.push_back(axis.weight[static_cast<size_t>(o) * kCubicTaps + j]);
      }
    }
  }
  g.col_first = 0;
  g.col_end = plan.in_width;
  return g;
}

}  // namespace

PreprocessGeometry make_preprocess_geometry(const PreprocessPlan& plan) {
  if (plan.float_cubic) return cubic_geometry(plan);
  const AxisPlan& h = plan.horizontal;
  const AxisPlan& v = plan.vertical;
  const int S = plan.out_size;
  if (S <= 0 || h.out_size != S || v.out_size != S || h.taps <= 0 || v.taps <= 0 ||
      h.start.size() != static_cast<size_t>(S) || v.start.size() != static_cast<size_t>(S) ||
      h.count.size() != static_cast<size_t>(S) || v.count.size() != static_cast<size_t>(S) ||
      h.coeffs.size() != static_cast<size_t>(S) * h.taps ||
      v.coeffs.size() != static_cast<size_t>(S) * v.taps) {
    throw std::invalid_argument("DevicePreprocessPlan: the plan's tap tables are inconsistent");
  }

  PreprocessGeometry g;
  g.col_first = INT_MAX;
  g.col_end = 0;
  for (int x = 0; x < S; ++x) {
    g.col_first = std::min(g.col_first, h.start[x]);
    g.col_end = std::max(g.col_end, h.start[x] + h.count[x]);
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
    g.rows_spanned[t] = widest;
  }

  g.tables.reserve(2 * S + h.coeffs.size() + 2 * S + v.coeffs.size());
  for (const AxisPlan* axis : {&h, &v}) {
    g.tables.insert(g.tables.end(), axis->start.begin(), axis->start.end());
    g.tables.insert(g.tables.end(), axis->count.begin(), axis->count.end());
    for (int j = 0; j < axis->taps; ++j) {
      for (int o = 0; o < S; ++o) g.tables.push_back(axis->coeffs[static_cast<size_t>(o) * axis->taps + j]);
    }
  }
  return g;
}

PreprocessLaunch plan_preprocess_launch(const FrameLayout& frames, const PreprocessPlan& plan,
                                        const PreprocessGeometry& geometry, const int32_t* device_tables,
                                        const float* device_weights, int multiprocessors,
                                        int max_shared_bytes) {
  if (frames.height != plan.in_height || frames.width != plan.in_width) {
    throw std::invalid_argument("preprocess_cuda: frames are " + std::to_string(frames.height) + "x" +
                                std::to_string(frames.width) + " but the plan was made for " +
                                std::to_string(plan.in_height) + "x" + std::to_string(plan.in_width));
  }
  if (frames.num_frames <= 0) throw std::invalid_argument("preprocess_cuda: num_frames must be positive");
  if (frames.pixel_stride < 3 || frames.pixel_stride > INT_MAX) {
    throw std::invalid_argument("preprocess_cuda: pixel_stride must be >= 3 (RGB or RGBA)");
  }
  if (frames.frames_per_row <= 0)
    throw std::invalid_argument("preprocess_cuda: frames_per_row must be positive");
  if (frames.data == nullptr || device_tables == nullptr || (plan.float_cubic && device_weights == nullptr))
    throw std::invalid_argument("preprocess_cuda: null pointer");

  const int S = plan.out_size;
  const bool vertical_first = plan.vertical_first;
  const int cols = geometry.col_end - geometry.col_first;
  const int64_t span_bytes = static_cast<int64_t>(cols - 1) * frames.pixel_stride + 3;
  const int64_t stage_words = (3 + span_bytes + 3) / 4;

  int tile_rows = 1;
  for (int t = kMaxPreprocessTileRows; t >= 1; t /= 2) {
    if (static_cast<int64_t>(frames.num_frames) * ((S + t - 1) / t) >=
        2 * static_cast<int64_t>(multiprocessors)) {
      tile_rows = t;
      break;
    }
  }
  int stage_rows = vertical_first || plan.float_cubic ? 0 : kMaxPreprocessStageRows;
  auto shared_bytes = [&]() -> int64_t {
    if (plan.float_cubic) return kCubicTableBytes;  // the taps read global memory through the cache
    if (vertical_first) return kPreprocessTableBytes + static_cast<int64_t>(tile_rows) * 3 * cols;
    return kPreprocessTableBytes + stage_rows * stage_words * 4 +
           static_cast<int64_t>(geometry.rows_spanned[tile_rows]) * 3 * S;
  };
  auto fits = [&] { return shared_bytes() <= max_shared_bytes; };
  while (!fits() && stage_rows > 1) stage_rows /= 2;  // staging only batches the loads
  while (!fits() && tile_rows > 1) tile_rows /= 2;
  if (!fits()) {
    throw std::invalid_argument(
        "preprocess_cuda: a " + std::to_string(frames.height) + "x" + std::to_string(frames.width) +
        " frame is too large for one block's shared memory (" + std::to_string(max_shared_bytes) +
        " bytes); downscale the frames before preprocessing");
  }
  const int tiles = (S + tile_rows - 1) / tile_rows;
  const int64_t blocks = static_cast<int64_t>(frames.num_frames) * tiles;
  if (blocks > INT_MAX) throw std::invalid_argument("preprocess_cuda: too many frames for one launch");

  PreprocessLaunch launch;
  launch.float_cubic = plan.float_cubic;
  launch.vertical_first = vertical_first;
  launch.blocks = static_cast<unsigned>(blocks);
  launch.shared_bytes = static_cast<size_t>(shared_bytes());
  PreprocessArgs& a = launch.args;
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
  a.col_first = geometry.col_first;
  a.cols = cols;
  if (plan.float_cubic) {
    a.h_index = device_tables;
    a.v_index = device_tables + static_cast<size_t>(S) * kCubicTaps;
    a.h_weight = device_weights;
    a.v_weight = device_weights + static_cast<size_t>(S) * kCubicTaps;
  } else {
    a.h_start = device_tables;
    a.h_count = a.h_start + S;
    a.h_coeffs = a.h_count + S;
    a.v_start = a.h_coeffs + static_cast<size_t>(S) * plan.horizontal.taps;
    a.v_count = a.v_start + S;
    a.v_coeffs = a.v_count + S;
  }
  for (int c = 0; c < 3; ++c) {
    a.mean[c] = plan.mean[c];
    a.std[c] = plan.std[c];
  }
  return launch;
}

RewardLaunch plan_reward_launch(int64_t n, int64_t d, int64_t row_stride, int64_t m, const RewardTask* tasks,
                                int64_t k) {
  if (k < 1 || k > kMaxRewardTasks) {
    throw std::invalid_argument("reward_cuda: " + std::to_string(k) + " tasks given; one launch takes 1 to " +
                                std::to_string(kMaxRewardTasks) + " (split the tasks over several calls)");
  }
  if (n <= 0 || n > INT_MAX) throw std::invalid_argument("reward_cuda: n must be in [1, 2^31)");
  if (d <= 0 || d > INT_MAX || m <= 0) throw std::invalid_argument("reward_cuda: d and m must be positive");
  if (row_stride < d) throw std::invalid_argument("reward_cuda: row_stride must be >= d");
  if (tasks == nullptr) throw std::invalid_argument("reward_cuda: null pointer");
  validate_reward_tasks(tasks, k, m);

  RewardLaunch launch;
  RewardArgs& a = launch.args;
  a.k = static_cast<int>(k);
  a.d = static_cast<int>(d);
  a.row_stride = row_stride;
  for (int t = 0; t < a.k; ++t) {
    a.tasks[t] = tasks[t];
    a.first_dot[t] = a.num_dots;
    a.num_dots += tasks[t].num_rows;
  }
  launch.blocks = static_cast<unsigned>(n);
  // The normalized embedding, every dot product, one partial sum per warp.
  launch.shared_bytes = (static_cast<size_t>(d) + a.num_dots + kRewardThreads / 32) * sizeof(float);
  return launch;
}

unsigned frame_copy_blocks(const FrameLayout& frames) {
  const int64_t total = static_cast<int64_t>(frames.num_frames) * frames.height * frames.width;
  return static_cast<unsigned>(
      std::min<int64_t>((total + kFrameCopyThreads - 1) / kFrameCopyThreads, kMaxFrameCopyBlocks));
}

}  // namespace vlmrm
