// _core.sim: BatchSim, N simulations of one model on MuJoCo's batch thread pool.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/bindings.h"
#include "bindings/mujoco_args.h"
#include "sim/batch_sim.h"

namespace py = pybind11;

namespace vlmrm::bindings {
namespace {

// A live view of memory the native object owns; the view keeps `owner` alive.
template <typename T>
py::array view_of(T* data, std::vector<py::ssize_t> shape, std::vector<py::ssize_t> strides,
                  py::handle owner) {
  return py::array(py::dtype::of<T>(), std::move(shape), std::move(strides), data, owner);
}

}  // namespace

void bind_sim(py::module_& m) {
  py::register_exception<sim::SimulationError>(m, "SimulationError", PyExc_RuntimeError);
  m.def("output_field_names", &sim::output_field_names,
        "mjData fields of type mjtNum that BatchSim can copy out after each step.");

  py::class_<sim::BatchSim>(m, "BatchSim", "N simulations of one model on MuJoCo's batch thread pool.")
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
           py::arg("rne_post_constraint") = false, py::arg("nthread") = 0, py::arg("persistent") = true,
           "model: mujoco.MjModel._address. outputs: (mjData field, first element, count) to copy out "
           "after each step (count < 0: to the end of the field).")
      .def(
          "step",
          [](sim::BatchSim& s, const DoubleRows& ctrl, int start, int count) {
            check_rows(ctrl, s.num_envs(), s.model()->nu, "ctrl");
            const double* data = ctrl.data();
            py::gil_scoped_release release;
            s.step(data, start, count);
          },
          py::arg("ctrl"), py::arg("start") = 0, py::arg("count") = -1,
          "ctrl (num_envs, nu) -> frame_skip x mj_step on simulations [start, start + count) (count -1: to "
          "the end).")
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
      .def(
          "outputs_view",
          [](py::object self) {
            auto& s = self.cast<sim::BatchSim&>();
            const py::ssize_t width = s.output_width();
            return view_of(s.outputs(), {s.num_envs(), width},
                           {width * static_cast<py::ssize_t>(sizeof(double)), sizeof(double)}, self);
          },
          "Live (num_envs, width) view of the output columns (see output_slots), refreshed by every step.")
      .def(
          "last_warnings_view",
          [](py::object self) {
            auto& s = self.cast<sim::BatchSim&>();
            return view_of(const_cast<int32_t*>(s.last_warnings()), {s.num_envs()}, {sizeof(int32_t)}, self);
          },
          "Live (num_envs,) view: per simulation, bit w set when its last step or reset raised mjtWarning w.")
      .def_property_readonly(
          "output_slots",
          [](const sim::BatchSim& s) {
            py::list slots;
            for (const auto& slot : s.output_slots()) {
              slots.append(py::make_tuple(slot.name, slot.column, slot.count, slot.start, slot.field_size));
            }
            return slots;
          },
          "Per output: (field, first column in outputs_view, count, first element of the field, field size).")
      .def_property_readonly("num_envs", &sim::BatchSim::num_envs)
      .def_property_readonly("frame_skip", &sim::BatchSim::frame_skip)
      .def_property_readonly("rne_post_constraint", &sim::BatchSim::rne_post_constraint)
      .def_property_readonly("persistent", &sim::BatchSim::persistent)
      .def_property_readonly("nthread", &sim::BatchSim::nthread)
      .def_property_readonly("nstate", &sim::BatchSim::nstate);
}

}  // namespace vlmrm::bindings
