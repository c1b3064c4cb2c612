// vlmrm_fast._cuda_emulation: the CUDA kernels' device code (cuda/*_kernel.cuh)
// executed on the host by emulation/cuda_on_host.h, with each launch planned
// by the same functions the CUDA entry points call (cuda/launch_config.h). It
// exists for the tests (python_tests/test_kernels_emulated.py), which hold
// these results to the C++ twins on machines without a GPU. Buffers cross as
// integer addresses, with the bounds of the allocation they belong to: reads
// outside those bounds are reported, not performed.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "address_args.h"
#include "cuda/frames_kernel.cuh"
#include "cuda/launch_config.h"
#include "cuda/preprocess_kernel.cuh"
#include "cuda/reward_kernel.cuh"

namespace py = pybind11;
using namespace vlmrm;
using args::address;

namespace {

emulation::Order to_order(const std::string& order) {
  if (order == "forward") return emulation::Order::kForward;
  if (order == "reverse") return emulation::Order::kReverse;
  if (order == "shuffled") return emulation::Order::kShuffled;
  throw std::invalid_argument("order must be 'forward', 'reverse' or 'shuffled', got '" + order + "'");
}

template <typename OutT>
void run_preprocess(const PreprocessLaunch& l, const emulation::LaunchConfig& config, void* out) {
  OutT* dst = static_cast<OutT*>(out);
  if (l.float_cubic) {
    emulation::launch(config, [&] { preprocess_device::cubic_preprocess_kernel<OutT>(l.args, dst); });
  } else if (l.vertical_first) {
    emulation::launch(config, [&] { preprocess_device::preprocess_kernel<OutT, true>(l.args, dst); });
  } else {
    emulation::launch(config, [&] { preprocess_device::preprocess_kernel<OutT, false>(l.args, dst); });
  }
}

py::dict preprocess(const PreprocessPlan& plan, uintptr_t frames, int num_frames, int height, int width,
                    int64_t pixel_stride, int64_t row_stride, int frames_per_row, int64_t frame_col_stride,
                    int64_t frame_row_stride, uintptr_t buffer, size_t buffer_bytes, uintptr_t out,
                    DType dtype, int multiprocessors, int max_shared_bytes, const std::string& order,
                    uint64_t seed) {
  const FrameLayout layout = args::frame_layout(frames, num_frames, height, width, pixel_stride, row_stride,
                                                frames_per_row, frame_col_stride, frame_row_stride);
  void* dst = address<void>(out, "out");
  const PreprocessGeometry geometry = make_preprocess_geometry(plan);
  const PreprocessLaunch l = plan_preprocess_launch(
      layout, plan, geometry, geometry.tables.data(),
      geometry.weights.empty() ? nullptr : geometry.weights.data(), multiprocessors, max_shared_bytes);
  emulation::LaunchConfig config;
  config.blocks = l.blocks;
  config.threads = kPreprocessThreads;
  config.shared_bytes = l.shared_bytes;
  config.order = to_order(order);
  config.seed = seed;
  config.readable = {{address<const void>(buffer, "buffer"), buffer_bytes},
                     {geometry.tables.data(), geometry.tables.size() * sizeof(int32_t)},
                     {geometry.weights.data(), geometry.weights.size() * sizeof(float)}};
  switch (args::checked_dtype(dtype)) {
    case DType::kFloat32: run_preprocess<float>(l, config, dst); break;
    case DType::kFloat16: run_preprocess<__half>(l, config, dst); break;
    case DType::kBFloat16: run_preprocess<__nv_bfloat16>(l, config, dst); break;
  }
  py::dict launch;
  launch["blocks"] = l.blocks;
  launch["tile_rows"] = l.args.tile_rows;
  launch["stage_rows"] = l.args.stage_rows;
  launch["shared_bytes"] = l.shared_bytes;
  launch["vertical_first"] = l.vertical_first;
  launch["float_cubic"] = l.float_cubic;
  return launch;
}

template <typename InT>
void run_reward(const RewardLaunch& l, const emulation::LaunchConfig& config, const void* embeddings,
                const float* text, float* out) {
  const InT* rows = static_cast<const InT*>(embeddings);
  emulation::launch(config, [&] { reward_device::reward_kernel<InT>(rows, text, l.args, out); });
}

py::dict reward(uintptr_t embeddings, DType dtype, int64_t n, int64_t d, int64_t row_stride,
                size_t embeddings_bytes, uintptr_t text, int64_t m, const std::vector<RewardTask>& tasks,
                uintptr_t out, const std::string& order, uint64_t seed) {
  const RewardLaunch l =
      plan_reward_launch(n, d, row_stride, m, tasks.data(), static_cast<int64_t>(tasks.size()));
  const void* emb = address<const void>(embeddings, "embeddings");
  const float* txt = address<const float>(text, "text");
  float* dst = address<float>(out, "out");
  emulation::LaunchConfig config;
  config.blocks = l.blocks;
  config.threads = kRewardThreads;
  config.shared_bytes = l.shared_bytes;
  config.order = to_order(order);
  config.seed = seed;
  config.readable = {{emb, embeddings_bytes}, {txt, static_cast<size_t>(m * d) * sizeof(float)}};
  switch (args::checked_dtype(dtype)) {
    case DType::kFloat32: run_reward<float>(l, config, emb, txt, dst); break;
    case DType::kFloat16: run_reward<__half>(l, config, emb, txt, dst); break;
    case DType::kBFloat16: run_reward<__nv_bfloat16>(l, config, emb, txt, dst); break;
  }
  py::dict launch;
  launch["blocks"] = l.blocks;
  launch["shared_bytes"] = l.shared_bytes;
  return launch;
}

void copy_frames_rgb(uintptr_t frames, int num_frames, int height, int width, int64_t pixel_stride,
                     int64_t row_stride, int frames_per_row, int64_t frame_col_stride,
                     int64_t frame_row_stride, uintptr_t buffer, size_t buffer_bytes, uintptr_t out,
                     const std::string& order) {
  const FrameLayout f = args::frame_layout(frames, num_frames, height, width, pixel_stride, row_stride,
                                           frames_per_row, frame_col_stride, frame_row_stride);
  uint8_t* dst = address<uint8_t>(out, "out");
  const int64_t total = static_cast<int64_t>(num_frames) * height * width;  // positive: checked above
  emulation::LaunchConfig config;
  config.blocks = frame_copy_blocks(f);
  config.threads = kFrameCopyThreads;
  config.order = to_order(order);
  config.readable = {{address<const void>(buffer, "buffer"), buffer_bytes}};
  emulation::launch(config, [&] {
    frames_device::frames_to_rgb(f.data, total, f.height, f.width, f.pixel_stride, f.row_stride,
                                 f.frames_per_row, f.frame_col_stride, f.frame_row_stride, dst);
  });
}

// Small kernels with a known defect (and one without), so that the tests can
// show the emulation catching what it claims to catch. Returns, per thread,
// the neighbour's value that thread read from shared memory.
std::vector<int> self_test(const std::string& kernel, const std::string& order) {
  constexpr unsigned kThreads = 64;
  emulation::LaunchConfig config;
  config.threads = kThreads;
  config.shared_bytes = kThreads * sizeof(int);
  config.order = to_order(order);
  std::vector<int> seen(kThreads, 0);
  std::function<void()> body;
  if (kernel == "missing_barrier" || kernel == "with_barrier") {
    const bool barrier = kernel == "with_barrier";
    body = [&] {
      VLMRM_DYNAMIC_SHARED(int, values);
      const unsigned t = threadIdx.x;
      values[t] = static_cast<int>(t);
      if (barrier) __syncthreads();
      seen[t] = values[(t + 1) % kThreads];
    };
  } else if (kernel == "divergent_barrier") {
    body = [] {
      if (threadIdx.x < 16) __syncthreads();
    };
  } else if (kernel == "shared_write_in_front") {
    body = [] {
      VLMRM_DYNAMIC_SHARED(int, values);
      if (threadIdx.x == 0) *(values - 1) = 0;
    };
  } else if (kernel == "shared_overrun") {
    body = [] {
      VLMRM_DYNAMIC_SHARED(int, values);
      values[threadIdx.x + kThreads] = 0;
    };
  } else if (kernel == "partial_shuffle") {
    body = [] { __shfl_xor_sync(0xffffu, 1.f, 1); };
  } else {
    throw std::invalid_argument("unknown self-test kernel '" + kernel + "'");
  }
  emulation::launch(config, body);
  return seen;
}

}  // namespace

PYBIND11_MODULE(_cuda_emulation, m) {
  m.doc() = "The CUDA kernels' device code run on the host, one fiber per CUDA thread (for tests)";
  // PreprocessPlan, RewardTask and DType are _core.kernels' types.
  py::module_::import("vlmrm_fast._core");

  m.def("preprocess", &preprocess, py::arg("plan"), py::arg("frames"), py::arg("num_frames"),
        py::arg("height"), py::arg("width"), py::arg("pixel_stride"), py::arg("row_stride"),
        py::arg("frames_per_row"), py::arg("frame_col_stride"), py::arg("frame_row_stride"),
        py::arg("buffer"), py::arg("buffer_bytes"), py::arg("out"), py::arg("dtype"),
        py::arg("multiprocessors"), py::arg("max_shared_bytes"), py::arg("order") = "forward",
        py::arg("seed") = 0,
        "preprocess_cuda's kernel, planned for a device with the given multiprocessors and shared memory "
        "per block; returns the launch it planned.");
  m.def("reward", &reward, py::arg("embeddings"), py::arg("dtype"), py::arg("n"), py::arg("d"),
        py::arg("row_stride"), py::arg("embeddings_bytes"), py::arg("text"), py::arg("m"), py::arg("tasks"),
        py::arg("out"), py::arg("order") = "forward", py::arg("seed") = 0,
        "reward_cuda's kernel; returns the launch it planned.");
  m.def("copy_frames_rgb", &copy_frames_rgb, py::arg("frames"), py::arg("num_frames"), py::arg("height"),
        py::arg("width"), py::arg("pixel_stride"), py::arg("row_stride"), py::arg("frames_per_row"),
        py::arg("frame_col_stride"), py::arg("frame_row_stride"), py::arg("buffer"), py::arg("buffer_bytes"),
        py::arg("out"), py::arg("order") = "forward",
        "The frame copy behind BatchRenderer.render(device='cuda').");
  m.def("self_test", &self_test, py::arg("kernel"), py::arg("order"),
        "Runs one of the emulation's own test kernels: missing_barrier, with_barrier, divergent_barrier, "
        "shared_write_in_front, shared_overrun, partial_shuffle.");
  m.attr("PREPROCESS_THREADS") = kPreprocessThreads;
  m.attr("REWARD_THREADS") = kRewardThreads;
}
