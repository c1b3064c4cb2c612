// _core.kernels: the fused preprocess and reward kernels, as C++ twins on host
// memory (cpu/) and as CUDA kernels on device memory (cuda/).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "address_args.h"
#include "bindings/bindings.h"
#include "cpu/preprocess.h"
#include "cpu/reward.h"
#include "cuda/kernels.h"

namespace py = pybind11;

namespace vlmrm::bindings {
namespace {

using args::address;
using args::check_positive;
using args::checked_dtype;

void check_reward_args(int64_t n, int64_t d, int64_t row_stride, int64_t m_rows,
                       const std::vector<RewardTask>& tasks) {
  check_positive(n, "n");
  check_positive(d, "d");
  check_positive(m_rows, "text rows");
  if (row_stride < d) throw std::invalid_argument("row_stride must be >= d");
  if (tasks.empty()) throw std::invalid_argument("at least one reward task is needed");
  validate_reward_tasks(tasks.data(), static_cast<int64_t>(tasks.size()), m_rows);
}

void check_device_index(int device) {
  if (device < 0) throw std::invalid_argument("device must be a CUDA device index >= 0");
}

void bind_preprocess(py::module_& m) {
  py::enum_<DType>(m, "DType", "What the kernels write (preprocess) and read (reward embeddings).")
      .value("float32", DType::kFloat32)
      .value("float16", DType::kFloat16)
      .value("bfloat16", DType::kBFloat16);
  py::enum_<Filter>(m, "Filter", "The resample filter (open_clip's interpolation, as Pillow does it).")
      .value("bilinear", Filter::kBilinear)
      .value("bicubic", Filter::kBicubic);
  py::enum_<ResizeMode>(
      m, "ResizeMode",
      "shortest: the shorter side to S, then a center crop; squash: both sides to S; paper: "
      "both sides to S by PyTorch's float bicubic without antialiasing (the paper's "
      "torchvision Resize on tensors).")
      .value("shortest", ResizeMode::kShortest)
      .value("squash", ResizeMode::kSquash)
      .value("paper", ResizeMode::kPaper);

  py::enum_<PassOrder>(m, "PassOrder", "Which axis Pillow resamples first (Pillow >= 13: pillow13).")
      .value("horizontal_first", PassOrder::kHorizontalFirst)
      .value("pillow13", PassOrder::kPillow13);

  py::class_<PreprocessPlan>(m, "PreprocessPlan",
                             "Resample taps for one input size -> (3, S, S) encoder input.")
      .def(py::init([](int in_height, int in_width, int out_size, ResizeMode mode, Filter filter,
                       std::vector<float> mean, std::vector<float> std, PassOrder order) {
             if (mean.size() != 3 || std.size() != 3) {
               throw std::invalid_argument("mean and std need 3 values (RGB)");
             }
             return make_preprocess_plan(in_height, in_width, out_size, mode, filter, mean.data(), std.data(),
                                         order);
           }),
           py::arg("in_height"), py::arg("in_width"), py::arg("out_size"), py::arg("mode"), py::arg("filter"),
           py::arg("mean"), py::arg("std"),
           py::arg_v("pass_order", PassOrder::kHorizontalFirst, "PassOrder.horizontal_first"),
           "Frames of in_height x in_width -> (3, out_size, out_size), normalized by mean and std (RGB); "
           "pass_order: the installed Pillow's (vlmrm_fast.frames.preprocess.pillow_pass_order()).")
      .def_readonly("in_height", &PreprocessPlan::in_height)
      .def_readonly("in_width", &PreprocessPlan::in_width)
      .def_readonly("out_size", &PreprocessPlan::out_size)
      .def_readonly("resized_height", &PreprocessPlan::resized_height, "Before the crop.")
      .def_readonly("resized_width", &PreprocessPlan::resized_width, "Before the crop.")
      .def_readonly("crop_top", &PreprocessPlan::crop_top)
      .def_readonly("crop_left", &PreprocessPlan::crop_left)
      .def_readonly("vertical_first", &PreprocessPlan::vertical_first, "The pass order (see PassOrder).")
      .def_readonly("float_cubic", &PreprocessPlan::float_cubic,
                    "ResizeMode.paper: PyTorch's float bicubic instead of Pillow's fixed-point taps.")
      .def_property_readonly("horizontal_taps", [](const PreprocessPlan& p) { return p.horizontal.taps; })
      .def_property_readonly("vertical_taps", [](const PreprocessPlan& p) { return p.vertical.taps; });

  m.def(
      "preprocess_cpu",
      [](const PreprocessPlan& plan, uintptr_t frames, int num_frames, int height, int width,
         int64_t pixel_stride, int64_t row_stride, int frames_per_row, int64_t frame_col_stride,
         int64_t frame_row_stride, uintptr_t out, DType dtype, int max_threads) {
        FrameLayout layout = args::frame_layout(frames, num_frames, height, width, pixel_stride, row_stride,
                                                frames_per_row, frame_col_stride, frame_row_stride);
        void* dst = address<void>(out, "out");
        DType dt = checked_dtype(dtype);
        py::gil_scoped_release release;
        preprocess_cpu(layout, plan, dst, dt, max_threads);
      },
      py::arg("plan"), py::arg("frames"), py::arg("num_frames"), py::arg("height"), py::arg("width"),
      py::arg("pixel_stride"), py::arg("row_stride"), py::arg("frames_per_row"), py::arg("frame_col_stride"),
      py::arg("frame_row_stride"), py::arg("out"), py::arg("dtype"), py::arg("max_threads") = 0,
      "C++ twin of the preprocess kernel on host memory (addresses as integers).");
}

void bind_reward(py::module_& m) {
  py::enum_<RewardKind>(m, "RewardKind",
                        "goal_baseline: the paper's goal-baseline reward; binary: softmax over a goal and "
                        "negative prompts.")
      .value("goal_baseline", RewardKind::kGoalBaseline)
      .value("binary", RewardKind::kBinary);

  py::class_<RewardTask>(m, "RewardTask", "One row of the fused reward kernel's task table.")
      .def(py::init<>())
      .def_property(
          "kind", [](const RewardTask& t) { return static_cast<RewardKind>(t.kind); },
          [](RewardTask& t, RewardKind k) { t.kind = static_cast<int32_t>(k); })
      .def_readwrite("first_row", &RewardTask::first_row, "The task's first row of the text matrix.")
      .def_readwrite("num_rows", &RewardTask::num_rows, "goal_baseline: 2 (g, u); binary: 1 + negatives.")
      .def_property(
          "probability", [](const RewardTask& t) { return t.probability != 0; },
          [](RewardTask& t, bool p) { t.probability = p ? 1 : 0; },
          "binary: output p instead of 1[p > threshold].")
      .def_readwrite("alpha", &RewardTask::alpha, "goal_baseline: the projection's alpha.")
      .def_readwrite("g_norm2", &RewardTask::g_norm2, "goal_baseline: |g|^2.")
      .def_readwrite("g_dot_u", &RewardTask::g_dot_u, "goal_baseline: g.u.")
      .def_readwrite("scale", &RewardTask::scale, "binary: the logit scale (1 / temperature).")
      .def_readwrite("threshold", &RewardTask::threshold, "binary: the threshold on p.");

  m.def(
      "reward_cpu",
      [](uintptr_t embeddings, DType dtype, int64_t n, int64_t d, int64_t row_stride, uintptr_t text,
         int64_t m_rows, const std::vector<RewardTask>& tasks, uintptr_t out, int max_threads) {
        check_reward_args(n, d, row_stride, m_rows, tasks);
        const void* emb = address<const void>(embeddings, "embeddings");
        const float* txt = address<const float>(text, "text");
        float* dst = address<float>(out, "out");
        DType dt = checked_dtype(dtype);
        py::gil_scoped_release release;
        reward_cpu(emb, dt, n, d, row_stride, txt, m_rows, tasks.data(), static_cast<int64_t>(tasks.size()),
                   dst, max_threads);
      },
      py::arg("embeddings"), py::arg("dtype"), py::arg("n"), py::arg("d"), py::arg("row_stride"),
      py::arg("text"), py::arg("m"), py::arg("tasks"), py::arg("out"), py::arg("max_threads") = 0,
      "C++ twin of the fused reward kernel on host memory (addresses as integers).");
}

// The same computations on device memory, ordered on a CUDA stream (given as
// the integer handle, torch's Stream.cuda_stream). Without CUDA compiled in
// (or without a usable device) every entry point raises RuntimeError.
void bind_cuda_kernels(py::module_& m) {
  py::class_<DevicePreprocessPlan>(m, "DevicePreprocessPlan",
                                   "A PreprocessPlan's tap tables uploaded to one CUDA device.")
      .def(py::init([](const PreprocessPlan& plan, int device) {
             check_device_index(device);
             return std::make_unique<DevicePreprocessPlan>(plan, device);
           }),
           py::arg("plan"), py::arg("device"), "Upload plan's tables to CUDA device `device`.")
      .def_property_readonly("device", &DevicePreprocessPlan::device)
      .def_property_readonly("in_height", [](const DevicePreprocessPlan& p) { return p.plan().in_height; })
      .def_property_readonly("in_width", [](const DevicePreprocessPlan& p) { return p.plan().in_width; })
      .def_property_readonly("out_size", [](const DevicePreprocessPlan& p) { return p.plan().out_size; });

  m.def(
      "preprocess_cuda",
      [](const DevicePreprocessPlan& plan, uintptr_t frames, int num_frames, int height, int width,
         int64_t pixel_stride, int64_t row_stride, int frames_per_row, int64_t frame_col_stride,
         int64_t frame_row_stride, uintptr_t out, DType dtype, uintptr_t stream) {
        FrameLayout layout = args::frame_layout(frames, num_frames, height, width, pixel_stride, row_stride,
                                                frames_per_row, frame_col_stride, frame_row_stride);
        void* dst = address<void>(out, "out");
        DType dt = checked_dtype(dtype);
        py::gil_scoped_release release;
        preprocess_cuda(layout, plan, dst, dt, reinterpret_cast<void*>(stream));
      },
      py::arg("device_plan"), py::arg("frames"), py::arg("num_frames"), py::arg("height"), py::arg("width"),
      py::arg("pixel_stride"), py::arg("row_stride"), py::arg("frames_per_row"), py::arg("frame_col_stride"),
      py::arg("frame_row_stride"), py::arg("out"), py::arg("dtype"), py::arg("stream"),
      "Fused preprocess kernel on the plan's device (addresses and stream as integers).");

  m.attr("MAX_CUDA_REWARD_TASKS") = kMaxRewardTasks;
  m.def(
      "reward_cuda",
      [](uintptr_t embeddings, DType dtype, int64_t n, int64_t d, int64_t row_stride, uintptr_t text,
         int64_t m_rows, const std::vector<RewardTask>& tasks, uintptr_t out, int device, uintptr_t stream) {
        check_reward_args(n, d, row_stride, m_rows, tasks);
        if (tasks.size() > static_cast<size_t>(kMaxRewardTasks)) {
          throw std::invalid_argument(
              std::to_string(tasks.size()) + " reward tasks given; the CUDA kernel takes at most " +
              std::to_string(kMaxRewardTasks) + " per call (split them over several calls)");
        }
        check_device_index(device);
        const void* emb = address<const void>(embeddings, "embeddings");
        const float* txt = address<const float>(text, "text");
        float* dst = address<float>(out, "out");
        DType dt = checked_dtype(dtype);
        py::gil_scoped_release release;
        reward_cuda(emb, dt, n, d, row_stride, txt, m_rows, tasks.data(), static_cast<int64_t>(tasks.size()),
                    dst, device, reinterpret_cast<void*>(stream));
      },
      py::arg("embeddings"), py::arg("dtype"), py::arg("n"), py::arg("d"), py::arg("row_stride"),
      py::arg("text"), py::arg("m"), py::arg("tasks"), py::arg("out"), py::arg("device"), py::arg("stream"),
      "Fused reward kernel on a CUDA device (addresses and stream as integers).");
}

}  // namespace

void bind_kernels(py::module_& m) {
  bind_preprocess(m);
  bind_reward(m);
  bind_cuda_kernels(m);
}

}  // namespace vlmrm::bindings
