// The only file that includes pybind11. Arguments are checked here, then the
// GIL is released around every batched call. Buffers cross as integer
// addresses (numpy's ctypes.data, torch's data_ptr()) so one entry point serves
// host and CUDA memory; the Python wrappers in vlmrm_fast/ own the checks of
// dtype, shape and device that need the array objects themselves.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "address_args.h"
#include "build_info.h"
#include "cpu/preprocess.h"
#include "cpu/reward.h"
#include "cuda/kernels.h"
#include "cuda/runtime.h"
#include "render/batch_renderer.h"
#include "render/egl_context.h"
#include "sim/batch_sim.h"

namespace py = pybind11;
using namespace vlmrm;
using args::address;
using args::check_positive;
using args::to_dtype;

namespace {

py::dict build_info_dict() {
  BuildInfo info = build_info();
  py::dict d;
  d["mujoco_version"] = info.mujoco_version;
  d["cuda_compiled"] = info.cuda_compiled;
  d["cuda_version"] = info.cuda_compiled ? py::object(py::str(info.cuda_version)) : py::none();
  d["cuda_device_count"] = info.cuda_device_count;
  d["cuda_available"] = info.cuda_device_count > 0;
  d["cuda_device_name"] = info.cuda_device_count > 0 ? py::object(py::str(info.cuda_device_name)) : py::none();
  d["cuda_error"] = info.cuda_error.empty() ? py::none() : py::object(py::str(info.cuda_error));
  d["egl_available"] = info.egl.available;
  d["egl_error"] = info.egl.error.empty() ? py::none() : py::object(py::str(info.egl.error));
  d["egl_vendor"] = info.egl.vendor;
  d["egl_version"] = info.egl.version;
  py::list devices;
  for (const auto& dev : info.egl.devices) {
    py::dict entry;
    entry["index"] = dev.index;
    entry["cuda_device"] = dev.cuda_device;
    entry["software"] = dev.software;
    devices.append(entry);
  }
  d["egl_devices"] = devices;
  return d;
}

// ------------------------------------------- batch physics and rendering helpers
// Models cross as mujoco.MjModel._address: an mjModel* of the libmujoco that
// this module links (the mujoco package imports it first).
const mjModel* model_at(uintptr_t ptr) { return address<const mjModel>(ptr, "model"); }

using DoubleRows = py::array_t<double, py::array::c_style | py::array::forcecast>;

void check_rows(const py::array& a, int64_t rows, int64_t cols, const char* what) {
  if (a.ndim() != 2 || a.shape(0) != rows || a.shape(1) != cols) {
    std::string got = "(";
    for (py::ssize_t k = 0; k < a.ndim(); ++k) got += (k ? ", " : "") + std::to_string(a.shape(k));
    got += a.ndim() == 1 ? ",)" : ")";
    throw py::value_error(std::string(what) + " must have shape (" + std::to_string(rows) + ", " +
                          std::to_string(cols) + "), got " + got);
  }
}

// A live view of memory the native object owns; the view keeps `owner` alive.
template <typename T>
py::array view_of(T* data, std::vector<py::ssize_t> shape, std::vector<py::ssize_t> strides,
                  py::handle owner) {
  return py::array(py::dtype::of<T>(), std::move(shape), std::move(strides), data, owner);
}

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

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "vlmrm_fast native core: batched MuJoCo physics, EGL rendering, fused kernels";

  m.def("build_info", &build_info_dict,
        "MuJoCo version, CUDA compiled/usable, EGL availability and devices.");
  m.def("cuda_available", [] { return cuda::device_count() > 0; },
        "True when CUDA is compiled in and a device is usable now.");

  // ------------------------------------------------------------------ preprocess
  py::enum_<Filter>(m, "Filter").value("bilinear", Filter::kBilinear).value("bicubic", Filter::kBicubic);
  py::enum_<ResizeMode>(m, "ResizeMode")
      .value("shortest", ResizeMode::kShortest)
      .value("squash", ResizeMode::kSquash);

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
             return make_preprocess_plan(in_height, in_width, out_size, mode, filter, mean.data(),
                                         std.data(), order);
           }),
           py::arg("in_height"), py::arg("in_width"), py::arg("out_size"), py::arg("mode"),
           py::arg("filter"), py::arg("mean"), py::arg("std"),
           py::arg("pass_order") = PassOrder::kHorizontalFirst)
      .def_readonly("in_height", &PreprocessPlan::in_height)
      .def_readonly("in_width", &PreprocessPlan::in_width)
      .def_readonly("out_size", &PreprocessPlan::out_size)
      .def_readonly("resized_height", &PreprocessPlan::resized_height)
      .def_readonly("resized_width", &PreprocessPlan::resized_width)
      .def_readonly("crop_top", &PreprocessPlan::crop_top)
      .def_readonly("crop_left", &PreprocessPlan::crop_left)
      .def_readonly("vertical_first", &PreprocessPlan::vertical_first)
      .def_property_readonly("horizontal_taps", [](const PreprocessPlan& p) { return p.horizontal.taps; })
      .def_property_readonly("vertical_taps", [](const PreprocessPlan& p) { return p.vertical.taps; });

  m.def(
      "preprocess_cpu",
      [](const PreprocessPlan& plan, uintptr_t frames, int num_frames, int height, int width,
         int64_t pixel_stride, int64_t row_stride, int frames_per_row, int64_t frame_col_stride,
         int64_t frame_row_stride, uintptr_t out, int dtype, int max_threads) {
        FrameLayout layout = args::frame_layout(frames, num_frames, height, width, pixel_stride, row_stride,
                                         frames_per_row, frame_col_stride, frame_row_stride);
        void* dst = address<void>(out, "out");
        DType dt = to_dtype(dtype);
        py::gil_scoped_release release;
        preprocess_cpu(layout, plan, dst, dt, max_threads);
      },
      py::arg("plan"), py::arg("frames"), py::arg("num_frames"), py::arg("height"), py::arg("width"),
      py::arg("pixel_stride"), py::arg("row_stride"), py::arg("frames_per_row"),
      py::arg("frame_col_stride"), py::arg("frame_row_stride"), py::arg("out"), py::arg("dtype"),
      py::arg("max_threads") = 0,
      "C++ twin of the preprocess kernel on host memory (addresses as integers).");

  // ---------------------------------------------------------------------- reward
  py::enum_<RewardKind>(m, "RewardKind")
      .value("goal_baseline", RewardKind::kGoalBaseline)
      .value("binary", RewardKind::kBinary);

  py::class_<RewardTask>(m, "RewardTask", "One row of the fused reward kernel's task table.")
      .def(py::init<>())
      .def_property(
          "kind", [](const RewardTask& t) { return static_cast<RewardKind>(t.kind); },
          [](RewardTask& t, RewardKind k) { t.kind = static_cast<int32_t>(k); })
      .def_readwrite("first_row", &RewardTask::first_row)
      .def_readwrite("num_rows", &RewardTask::num_rows)
      .def_property(
          "probability", [](const RewardTask& t) { return t.probability != 0; },
          [](RewardTask& t, bool p) { t.probability = p ? 1 : 0; })
      .def_readwrite("alpha", &RewardTask::alpha)
      .def_readwrite("g_norm2", &RewardTask::g_norm2)
      .def_readwrite("g_dot_u", &RewardTask::g_dot_u)
      .def_readwrite("scale", &RewardTask::scale)
      .def_readwrite("threshold", &RewardTask::threshold);

  m.def(
      "reward_cpu",
      [](uintptr_t embeddings, int dtype, int64_t n, int64_t d, int64_t row_stride, uintptr_t text,
         int64_t m_rows, const std::vector<RewardTask>& tasks, uintptr_t out, int max_threads) {
        check_reward_args(n, d, row_stride, m_rows, tasks);
        const void* emb = address<const void>(embeddings, "embeddings");
        const float* txt = address<const float>(text, "text");
        float* dst = address<float>(out, "out");
        DType dt = to_dtype(dtype);
        py::gil_scoped_release release;
        reward_cpu(emb, dt, n, d, row_stride, txt, m_rows, tasks.data(),
                   static_cast<int64_t>(tasks.size()), dst, max_threads);
      },
      py::arg("embeddings"), py::arg("dtype"), py::arg("n"), py::arg("d"), py::arg("row_stride"),
      py::arg("text"), py::arg("m"), py::arg("tasks"), py::arg("out"), py::arg("max_threads") = 0,
      "C++ twin of the fused reward kernel on host memory (addresses as integers).");

  // -------------------------------------------------- batch physics (sim/)
  py::register_exception<sim::SimulationError>(m, "SimulationError", PyExc_RuntimeError);
  m.def("output_field_names", &sim::output_field_names,
        "mjData fields of type mjtNum that BatchSim can copy out after each step.");

  py::class_<sim::BatchSim>(m, "BatchSim",
                            "N simulations of one model on MuJoCo's batch thread pool.")
      .def(py::init([](uintptr_t model, int num_envs, int frame_skip,
                       const std::vector<std::tuple<std::string, int64_t, int64_t>>& outputs,
                       bool rne_post_constraint, int nthread, bool persistent) {
             sim::SimConfig config;
             config.num_envs = num_envs;
             config.frame_skip = frame_skip;
             config.rne_post_constraint = rne_post_constraint;
             config.nthread = nthread;
             config.persistent = persistent;
             for (const auto& [name, start, count] : outputs) config.outputs.push_back({name, start, count});
             const mjModel* m = model_at(model);
             py::gil_scoped_release release;
             return std::make_unique<sim::BatchSim>(m, config);
           }),
           py::arg("model"), py::arg("num_envs"), py::arg("frame_skip") = 1,
           py::arg("outputs") = std::vector<std::tuple<std::string, int64_t, int64_t>>{},
           py::arg("rne_post_constraint") = false, py::arg("nthread") = 0, py::arg("persistent") = true)
      .def(
          "step",
          [](sim::BatchSim& s, const DoubleRows& ctrl, int start, int count) {
            check_rows(ctrl, s.num_envs(), s.model()->nu, "ctrl");
            const double* data = ctrl.data();
            py::gil_scoped_release release;
            s.step(data, start, count);
          },
          py::arg("ctrl"), py::arg("start") = 0, py::arg("count") = -1,
          "ctrl (num_envs, nu) -> frame_skip x mj_step on simulations [start, start + count) (count -1: to the end).")
      .def(
          "reset",
          [](sim::BatchSim& s, const py::array_t<int, py::array::c_style | py::array::forcecast>& ids,
             const std::optional<DoubleRows>& qpos, const std::optional<DoubleRows>& qvel) {
            if (ids.ndim() != 1) throw py::value_error("ids must be one-dimensional");
            const int n = static_cast<int>(ids.shape(0));
            if (qpos) check_rows(*qpos, n, s.model()->nq, "qpos");
            if (qvel) check_rows(*qvel, n, s.model()->nv, "qvel");
            const int* id = ids.data();
            const double* qp = qpos ? qpos->data() : nullptr;
            const double* qv = qvel ? qvel->data() : nullptr;
            py::gil_scoped_release release;
            s.reset(id, n, qp, qv);
          },
          py::arg("ids"), py::arg("qpos") = py::none(), py::arg("qvel") = py::none(),
          "Reset simulations ids to the model's defaults with qpos/qvel rows, then mj_forward.")
      .def(
          "state_view",
          [](py::object self, int component) {
            auto& s = self.cast<sim::BatchSim&>();
            int size = 0;
            double* first = s.state_component(component, &size);
            const py::ssize_t row = static_cast<py::ssize_t>(s.nstate()) * sizeof(double);
            return view_of(first, {s.num_envs(), size}, {row, sizeof(double)}, self);
          },
          py::arg("component"), "Live (num_envs, size) view of one mjtState component of the state rows.")
      .def("outputs_view",
           [](py::object self) {
             auto& s = self.cast<sim::BatchSim&>();
             const py::ssize_t width = s.output_width();
             return view_of(s.outputs(), {s.num_envs(), width},
                            {width * static_cast<py::ssize_t>(sizeof(double)), sizeof(double)}, self);
           })
      .def("last_warnings_view",
           [](py::object self) {
             auto& s = self.cast<sim::BatchSim&>();
             return view_of(const_cast<int32_t*>(s.last_warnings()), {s.num_envs()}, {sizeof(int32_t)}, self);
           })
      .def_property_readonly("output_slots",
                             [](const sim::BatchSim& s) {
                               py::list slots;
                               for (const auto& slot : s.output_slots()) {
                                 slots.append(py::make_tuple(slot.name, slot.column, slot.count,
                                                             slot.start, slot.field_size));
                               }
                               return slots;
                             })
      .def_property_readonly("num_envs", &sim::BatchSim::num_envs)
      .def_property_readonly("frame_skip", &sim::BatchSim::frame_skip)
      .def_property_readonly("rne_post_constraint", &sim::BatchSim::rne_post_constraint)
      .def_property_readonly("persistent", &sim::BatchSim::persistent)
      .def_property_readonly("nthread", &sim::BatchSim::nthread)
      .def_property_readonly("nstate", &sim::BatchSim::nstate);

  // ------------------------------------------------------ rendering (render/)
  m.def("live_egl_contexts", &render::live_egl_contexts,
        "EGL contexts alive in this process (for leak checks).");

  py::class_<render::BatchRenderer>(m, "BatchRenderer",
                                    "N frames of one model per call in one headless EGL context.")
      .def(py::init([](uintptr_t model, int num_envs, int width, int height, const py::object& camera,
                       int gpu, int max_geom, int nthread) {
             const mjModel* m = model_at(model);
             render::RendererConfig config;
             config.num_envs = num_envs;
             config.width = width;
             config.height = height;
             if (py::isinstance<py::str>(camera)) {
               config.camera = render::camera_id(m, camera.cast<std::string>());
             } else if (py::isinstance<py::int_>(camera) && !py::isinstance<py::bool_>(camera)) {
               config.camera = camera.cast<int>();
             } else {
               throw py::type_error("camera must be -1 (free camera), a camera id or a camera name");
             }
             config.gpu = gpu;
             config.max_geom = max_geom;
             config.nthread = nthread;
             py::gil_scoped_release release;
             return std::make_unique<render::BatchRenderer>(m, config);
           }),
           py::arg("model"), py::arg("num_envs"), py::arg("width"), py::arg("height"),
           py::arg("camera") = -1, py::arg("gpu") = -1, py::arg("max_geom") = 10000,
           py::arg("nthread") = 0)
      .def(
          "render",
          [](render::BatchRenderer& r, const DoubleRows& qpos) {
            check_rows(qpos, r.num_envs(), r.nq(), "qpos");
            const double* data = qpos.data();
            py::gil_scoped_release release;
            r.render(data);
          },
          py::arg("qpos"), "Draw the frames of qpos (num_envs, nq).")
      .def(
          "render_sim",
          [](render::BatchRenderer& r, sim::BatchSim& s, int start, int count) {
            py::gil_scoped_release release;
            r.render(s, start, count);
          },
          py::arg("sim"), py::arg("start") = 0, py::arg("count") = -1,
          "Draw the current state of the simulator's simulations [start, start + count) (count -1: to the end).")
      .def(
          "copy_frames",
          [](render::BatchRenderer& r, uintptr_t out) {
            uint8_t* dst = address<uint8_t>(out, "out");
            py::gil_scoped_release release;
            r.copy_frames(dst);
          },
          py::arg("out"), "Last frames -> host uint8 (num_envs, height, width, 3) at address out.")
      .def(
          "copy_frames_cuda",
          [](render::BatchRenderer& r, uintptr_t out, uintptr_t stream) {
            uint8_t* dst = address<uint8_t>(out, "out");
            py::gil_scoped_release release;
            r.copy_frames_cuda(dst, reinterpret_cast<void*>(stream));
          },
          py::arg("out"), py::arg("stream"),
          "Last frames -> CUDA uint8 (num_envs, height, width, 3) at address out, on stream.")
      // The hand-off: the pixel buffer is lent in place, as an address (frames
      // one after another, RGBA, rows bottom-up; see BatchRenderer::layout).
      .def(
          "lend_host",
          [](render::BatchRenderer& r) {
            py::gil_scoped_release release;
            return reinterpret_cast<uintptr_t>(r.lend_host());
          },
          "Map the pixel buffer into host memory; its address. Call release_frames() when done.")
      .def(
          "lend_device",
          [](render::BatchRenderer& r, uintptr_t stream) {
            py::gil_scoped_release release;
            return reinterpret_cast<uintptr_t>(r.lend_device(reinterpret_cast<void*>(stream)));
          },
          py::arg("stream"),
          "Map the pixel buffer into CUDA on stream (GL work first); its device address. release_frames() unmaps "
          "on the same stream.")
      .def(
          "release_frames",
          [](render::BatchRenderer& r) {
            py::gil_scoped_release release;
            r.release_frames();
          },
          "End a lend (no-op when nothing is lent).")
      .def("close", [](render::BatchRenderer& r) {
        py::gil_scoped_release release;
        r.close();
      })
      .def_property_readonly("closed", &render::BatchRenderer::closed)
      .def_property_readonly("num_envs", &render::BatchRenderer::num_envs)
      .def_property_readonly("nq", &render::BatchRenderer::nq)
      .def_property_readonly("width", &render::BatchRenderer::width)
      .def_property_readonly("height", &render::BatchRenderer::height)
      .def_property_readonly("camera", &render::BatchRenderer::camera)
      .def_property_readonly("egl_device", &render::BatchRenderer::egl_device)
      .def_property_readonly("cuda_device", &render::BatchRenderer::cuda_device)
      .def_property_readonly("software", &render::BatchRenderer::software)
      .def_property_readonly("max_size", &render::BatchRenderer::max_size)
      .def_property_readonly("offscreen_samples", &render::BatchRenderer::offscreen_samples);

  // ---------------------------------------------------------------- CUDA kernels
  // The same computations on device memory, ordered on a CUDA stream (given as
  // the integer handle, torch's Stream.cuda_stream). Without CUDA compiled in
  // (or without a usable device) every entry point raises RuntimeError.
  py::class_<DevicePreprocessPlan>(m, "DevicePreprocessPlan",
                                   "A PreprocessPlan's tap tables uploaded to one CUDA device.")
      .def(py::init([](const PreprocessPlan& plan, int device) {
             check_device_index(device);
             return std::make_unique<DevicePreprocessPlan>(plan, device);
           }),
           py::arg("plan"), py::arg("device"))
      .def_property_readonly("device", &DevicePreprocessPlan::device)
      .def_property_readonly("in_height", [](const DevicePreprocessPlan& p) { return p.plan().in_height; })
      .def_property_readonly("in_width", [](const DevicePreprocessPlan& p) { return p.plan().in_width; })
      .def_property_readonly("out_size", [](const DevicePreprocessPlan& p) { return p.plan().out_size; });

  m.def(
      "preprocess_cuda",
      [](const DevicePreprocessPlan& plan, uintptr_t frames, int num_frames, int height, int width,
         int64_t pixel_stride, int64_t row_stride, int frames_per_row, int64_t frame_col_stride,
         int64_t frame_row_stride, uintptr_t out, int dtype, uintptr_t stream) {
        FrameLayout layout = args::frame_layout(frames, num_frames, height, width, pixel_stride, row_stride,
                                         frames_per_row, frame_col_stride, frame_row_stride);
        void* dst = address<void>(out, "out");
        DType dt = to_dtype(dtype);
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
      [](uintptr_t embeddings, int dtype, int64_t n, int64_t d, int64_t row_stride, uintptr_t text,
         int64_t m_rows, const std::vector<RewardTask>& tasks, uintptr_t out, int device, uintptr_t stream) {
        check_reward_args(n, d, row_stride, m_rows, tasks);
        if (tasks.size() > static_cast<size_t>(kMaxRewardTasks)) {
          throw std::invalid_argument(std::to_string(tasks.size()) + " reward tasks given; the CUDA kernel takes at most " +
                                      std::to_string(kMaxRewardTasks) + " per call (split them over several calls)");
        }
        check_device_index(device);
        const void* emb = address<const void>(embeddings, "embeddings");
        const float* txt = address<const float>(text, "text");
        float* dst = address<float>(out, "out");
        DType dt = to_dtype(dtype);
        py::gil_scoped_release release;
        reward_cuda(emb, dt, n, d, row_stride, txt, m_rows, tasks.data(), static_cast<int64_t>(tasks.size()), dst,
                    device, reinterpret_cast<void*>(stream));
      },
      py::arg("embeddings"), py::arg("dtype"), py::arg("n"), py::arg("d"), py::arg("row_stride"), py::arg("text"),
      py::arg("m"), py::arg("tasks"), py::arg("out"), py::arg("device"), py::arg("stream"),
      "Fused reward kernel on a CUDA device (addresses and stream as integers).");
}
