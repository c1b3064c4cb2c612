// _core.render: BatchRenderer, N frames of one model per call in one headless
// EGL context.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "address_args.h"
#include "bindings/bindings.h"
#include "bindings/mujoco_args.h"
#include "render/batch_renderer.h"
#include "render/egl_context.h"
#include "sim/batch_sim.h"

namespace py = pybind11;

namespace vlmrm::bindings {

namespace {

// mjvCamera and mjvOption cross as dicts of their fields (mujoco's Python structs expose no address).
mjvCamera camera_of(const py::dict& fields) {
  mjvCamera c;
  mjv_defaultCamera(&c);
  for (auto item : fields) {
    const std::string key = py::str(item.first);
    const py::handle value = item.second;
    if (key == "type") {
      c.type = value.cast<int>();
    } else if (key == "fixedcamid") {
      c.fixedcamid = value.cast<int>();
    } else if (key == "trackbodyid") {
      c.trackbodyid = value.cast<int>();
    } else if (key == "lookat") {
      auto v = value.cast<std::vector<double>>();
      if (v.size() != 3) throw py::value_error("camera lookat must have 3 values");
      for (int k = 0; k < 3; ++k) c.lookat[k] = v[k];
    } else if (key == "distance") {
      c.distance = value.cast<double>();
    } else if (key == "azimuth") {
      c.azimuth = value.cast<double>();
    } else if (key == "elevation") {
      c.elevation = value.cast<double>();
    } else if (key == "orthographic") {
      c.orthographic = value.cast<int>();
    } else {
      throw py::value_error("camera has no field '" + key + "'");
    }
  }
  if (c.type < mjCAMERA_FREE || c.type > mjCAMERA_FIXED) {
    throw py::value_error("camera type " + std::to_string(c.type) +
                          " is not free (0), tracking (1) or fixed (2)");
  }
  return c;
}

py::dict dict_of(const mjvCamera& c) {
  return py::dict(py::arg("type") = c.type, py::arg("fixedcamid") = c.fixedcamid,
                  py::arg("trackbodyid") = c.trackbodyid,
                  py::arg("lookat") = std::vector<double>(c.lookat, c.lookat + 3),
                  py::arg("distance") = c.distance, py::arg("azimuth") = c.azimuth,
                  py::arg("elevation") = c.elevation, py::arg("orthographic") = c.orthographic);
}

template <typename T>
void set_array(T* out, int size, const py::handle& value, const std::string& key) {
  auto v = value.cast<std::vector<int>>();
  if (static_cast<int>(v.size()) != size) {
    throw py::value_error("option " + key + " must have " + std::to_string(size) + " values");
  }
  for (int k = 0; k < size; ++k) out[k] = static_cast<T>(v[k]);
}

mjvOption option_of(const py::dict& fields) {
  mjvOption o;
  mjv_defaultOption(&o);
  for (auto item : fields) {
    const std::string key = py::str(item.first);
    const py::handle value = item.second;
    if (key == "label") {
      o.label = value.cast<int>();
    } else if (key == "frame") {
      o.frame = value.cast<int>();
    } else if (key == "bvh_depth") {
      o.bvh_depth = value.cast<int>();
    } else if (key == "flex_layer") {
      o.flex_layer = value.cast<int>();
    } else if (key == "flags") {
      set_array(o.flags, mjNVISFLAG, value, key);
    } else if (key == "geomgroup") {
      set_array(o.geomgroup, mjNGROUP, value, key);
    } else if (key == "sitegroup") {
      set_array(o.sitegroup, mjNGROUP, value, key);
    } else if (key == "jointgroup") {
      set_array(o.jointgroup, mjNGROUP, value, key);
    } else if (key == "tendongroup") {
      set_array(o.tendongroup, mjNGROUP, value, key);
    } else if (key == "actuatorgroup") {
      set_array(o.actuatorgroup, mjNGROUP, value, key);
    } else if (key == "flexgroup") {
      set_array(o.flexgroup, mjNGROUP, value, key);
    } else if (key == "skingroup") {
      set_array(o.skingroup, mjNGROUP, value, key);
    } else {
      throw py::value_error("option has no field '" + key +
                            "' (label, frame, bvh_depth, flex_layer, flags and the *group arrays)");
    }
  }
  return o;
}

}  // namespace

void bind_render(py::module_& m) {
  using args::address;

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
           py::arg("model"), py::arg("num_envs"), py::arg("width"), py::arg("height"), py::arg("camera") = -1,
           py::arg("gpu") = -1, py::arg("max_geom") = 10000, py::arg("nthread") = 0,
           "model: mujoco.MjModel._address. camera: -1 (free camera), a camera id or name. gpu: the CUDA "
           "device whose EGL device draws (-1: the first with a CUDA index, else the first).")
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
          [](render::BatchRenderer& r, sim::BatchSim& s, int start, int count, bool kinematics) {
            py::gil_scoped_release release;
            r.render(s, start, count, kinematics);
          },
          py::arg("sim"), py::arg("start") = 0, py::arg("count") = -1, py::arg("kinematics") = true,
          "Draw the current state of the simulator's simulations [start, start + count) (count -1: to the "
          "end), frame i from its camera (set_frame_camera); kinematics=False draws each simulation's data "
          "as it "
          "lies (its last forward pass's poses).")
      .def(
          "render_data",
          [](render::BatchRenderer& r, const std::vector<uintptr_t>& models,
             const std::vector<uintptr_t>& datas, int start) {
            std::vector<const mjModel*> m;
            std::vector<mjData*> d;
            for (uintptr_t p : models) m.push_back(model_at(p));
            for (uintptr_t p : datas) d.push_back(address<mjData>(p, "data"));
            py::gil_scoped_release release;
            r.render_data(m, d, start);
          },
          py::arg("models"), py::arg("datas"), py::arg("start") = 0,
          "Draw frames [start, start + len(models)) of (mujoco.MjModel._address, mujoco.MjData._address) "
          "pairs, each data as it lies (no kinematics pass, as render_sim(kinematics=False)).")
      .def(
          "set_frame_camera",
          [](render::BatchRenderer& r, int frame, const py::dict& fields) {
            r.set_frame_camera(frame, camera_of(fields));
          },
          py::arg("frame"), py::arg("camera"),
          "Set the camera every draw of frame `frame` is drawn from (initially the renderer's): a dict of "
          "mujoco.MjvCamera's fields (type, "
          "fixedcamid, trackbodyid, lookat, distance, azimuth, elevation, orthographic); those left out keep "
          "mjv_defaultCamera's values.")
      .def(
          "frame_camera",
          [](const render::BatchRenderer& r, int frame) { return dict_of(r.frame_camera(frame)); },
          py::arg("frame"), "The camera of frame `frame` now (as set_frame_camera takes it).")
      .def(
          "set_option",
          [](render::BatchRenderer& r, const py::dict& fields) { r.set_option(option_of(fields)); },
          py::arg("option"),
          "Set the visualisation options every frame is drawn with: a dict of mujoco.MjvOption's fields "
          "(label, "
          "frame, flags and the *group arrays); those left out keep mjv_defaultOption's values.")
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
          "The pixel buffer in host memory (copied through CUDA on a CUDA EGL device, else mapped); its "
          "address. "
          "Call release_frames() when done.")
      .def(
          "lend_device",
          [](render::BatchRenderer& r, uintptr_t stream) {
            py::gil_scoped_release release;
            return reinterpret_cast<uintptr_t>(r.lend_device(reinterpret_cast<void*>(stream)));
          },
          py::arg("stream"),
          "Map the pixel buffer into CUDA on stream (GL work first); its device address. release_frames() "
          "unmaps "
          "on the same stream.")
      .def(
          "release_frames",
          [](render::BatchRenderer& r) {
            py::gil_scoped_release release;
            r.release_frames();
          },
          "End a lend (no-op when nothing is lent).")
      .def(
          "close",
          [](render::BatchRenderer& r) {
            py::gil_scoped_release release;
            r.close();
          },
          "Free the GL objects, the EGL context and the threads now; later calls raise.")
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
      .def_property_readonly("offscreen_samples", &render::BatchRenderer::offscreen_samples)
      .def_property_readonly(
          "host_reads_through_cuda", &render::BatchRenderer::host_reads_through_cuda,
          "True when host reads copy the pixel buffer through CUDA into page-locked memory "
          "(a CUDA EGL device); false when they map it (Mesa).")
      .def_property_readonly(
          "frame_layout",
          [](const render::BatchRenderer& r) {
            const FrameLayout l = r.layout(nullptr);
            return py::dict(
                py::arg("num_frames") = l.num_frames, py::arg("height") = l.height,
                py::arg("width") = l.width, py::arg("pixel_stride") = l.pixel_stride,
                py::arg("row_stride") = l.row_stride, py::arg("frames_per_row") = l.frames_per_row,
                py::arg("frame_col_stride") = l.frame_col_stride,
                py::arg("frame_row_stride") = l.frame_row_stride, py::arg("offset") = r.top_row_offset());
          },
          "Where the frames lie in a lent pixel buffer, in bytes from its start "
          "(vlmrm_fast.frames.views.FrameLayout's "
          "fields; offset: frame 0's top row).");
}

}  // namespace vlmrm::bindings
