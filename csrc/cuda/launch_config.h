// The host half of the fused kernels' launches, in plain C++: the kernels'
// argument structs and the functions that fill them (tap tables, tile height,
// shared memory). preprocess.cu and reward.cu call these before launching; the
// host emulation of the kernels (emulation/) calls the same ones, so the CPU
// tests cover every launch decision a GPU would see.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/preprocess.h"
#include "cpu/reward.h"

namespace vlmrm {

// The reward kernel takes its task table by value as a launch parameter.
constexpr int kMaxRewardTasks = 32;

// Output rows one preprocess block produces at most (the launcher picks fewer
// for small batches so that every multiprocessor has work).
constexpr int kMaxPreprocessTileRows = 16;

constexpr int kPreprocessThreads = 256;
constexpr int kRewardThreads = 128;

// Shared memory the preprocess kernel reserves for its 3 x 256 table of
// normalized values (sized for float, the widest output type).
constexpr int kPreprocessTableBytes = 3 * 256 * 4;
// Shared memory of the float bicubic kernel (kPaper): its table of v / 255.
constexpr int kCubicTableBytes = 256 * 4;
// Source rows the horizontal-first pass stages in shared memory at a time.
constexpr int kMaxPreprocessStageRows = 8;

struct PreprocessArgs {
  const uint8_t* frames;
  int64_t row_stride;
  int64_t frame_col_stride;
  int64_t frame_row_stride;
  int pixel_stride;
  int frames_per_row;
  int size;         // S
  int tiles;        // blocks per frame
  int tile_rows;    // output rows per block
  int stage_rows;   // source rows staged at a time
  int stage_words;  // 32-bit words per staged row (room for a misaligned start)
  int span_bytes;   // bytes of a source row the horizontal taps read
  int col_first;    // first source column read
  int cols;         // source columns read, from col_first
  const int32_t* h_start;
  const int32_t* h_count;
  const int32_t* h_coeffs;  // tap-major: coefficient j of output o at [j * S + o]
  const int32_t* v_start;
  const int32_t* v_count;
  const int32_t* v_coeffs;
  // ResizeMode::kPaper (float_cubic): kCubicTaps source indices and float
  // weights per output, tap-major like the coefficients above.
  const int32_t* h_index;
  const float* h_weight;
  const int32_t* v_index;
  const float* v_weight;
  float mean[3];
  float std[3];
};

// What a device needs of a PreprocessPlan, computed once per plan.
struct PreprocessGeometry {
  int col_first = 0, col_end = 0;  // source columns any output column reads
  // rows_spanned[t]: source rows the widest tile of t output rows reads.
  std::array<int, kMaxPreprocessTileRows + 1> rows_spanned{};
  // start, count, coefficients [tap][output] of the horizontal axis, then the
  // same for the vertical axis: the table uploaded to the device. Tap-major,
  // so the threads of a warp (neighbouring outputs) read one tap's
  // coefficients from consecutive addresses. A float_cubic plan (kPaper) has
  // its horizontal source indices [tap][output], then the vertical ones, here,
  // and its weights in the same layout in `weights`.
  std::vector<int32_t> tables;
  std::vector<float> weights;
};

// Throws std::invalid_argument when the plan's tap tables are inconsistent.
PreprocessGeometry make_preprocess_geometry(const PreprocessPlan& plan);

struct PreprocessLaunch {
  PreprocessArgs args{};
  bool float_cubic = false;  // the paper's float bicubic kernel (cubic_preprocess_kernel)
  bool vertical_first = false;
  unsigned blocks = 0;
  size_t shared_bytes = 0;
};

// Checks `frames` against the plan and picks the launch for a device with
// `multiprocessors` and `max_shared_bytes` per block: the tallest tile that
// still gives every multiprocessor two blocks, then shorter tiles (and fewer
// staged rows) until a block fits in shared memory. `device_tables` is where
// geometry.tables lives on the device, `device_weights` where geometry.weights
// does (null unless the plan is float_cubic). Throws std::invalid_argument on
// bad input or a frame too large for one block.
PreprocessLaunch plan_preprocess_launch(const FrameLayout& frames, const PreprocessPlan& plan,
                                        const PreprocessGeometry& geometry, const int32_t* device_tables,
                                        const float* device_weights, int multiprocessors,
                                        int max_shared_bytes);

struct RewardArgs {
  RewardTask tasks[kMaxRewardTasks];
  int32_t first_dot[kMaxRewardTasks];  // where each task's dot products start in shared memory
  int k;
  int num_dots;
  int d;
  int64_t row_stride;
};

struct RewardLaunch {
  RewardArgs args{};
  unsigned blocks = 0;  // one per embedding row
  size_t shared_bytes = 0;
};

// Validates the arguments as reward_cpu's callers do (plus the kMaxRewardTasks
// limit) and lays out the task table. Throws std::invalid_argument.
RewardLaunch plan_reward_launch(int64_t n, int64_t d, int64_t row_stride, int64_t m, const RewardTask* tasks,
                                int64_t k);

// The frame copy behind BatchRenderer.render(device="cuda"): one thread per
// pixel in a grid-stride loop.
constexpr int kFrameCopyThreads = 256;
constexpr int64_t kMaxFrameCopyBlocks = 65535LL * 32;
unsigned frame_copy_blocks(const FrameLayout& frames);

}  // namespace vlmrm
