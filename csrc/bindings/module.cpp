// vlmrm_fast._core: the build information here, each concern in a submodule
// filled by its own file (see bindings.h).
#include <pybind11/pybind11.h>

#include "bindings/bindings.h"
#include "build_info.h"
#include "cuda/runtime.h"

namespace py = pybind11;
using namespace vlmrm;

namespace {

py::dict build_info_dict() {
  BuildInfo info = build_info();
  py::dict d;
  d["mujoco_version"] = info.mujoco_version;
  d["cuda_compiled"] = info.cuda_compiled;
  d["cuda_version"] = info.cuda_compiled ? py::object(py::str(info.cuda_version)) : py::none();
  d["cuda_device_count"] = info.cuda_device_count;
  d["cuda_available"] = info.cuda_device_count > 0;
  d["cuda_device_name"] =
      info.cuda_device_count > 0 ? py::object(py::str(info.cuda_device_name)) : py::none();
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

// A submodule that is also in sys.modules, so that `import vlmrm_fast._core.sim`
// and pickle (which imports a class's __module__) find it.
py::module_ add_submodule(py::module_& parent, const char* name, const char* doc) {
  py::module_ sub = parent.def_submodule(name, doc);
  py::module_::import("sys").attr("modules")[sub.attr("__name__")] = sub;
  return sub;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() =
      "vlmrm_fast native core: batched MuJoCo physics (sim), EGL rendering (render), fused kernels "
      "(kernels).\n\nBuffers cross as integer addresses (numpy's ctypes.data, torch's data_ptr()), models "
      "as mujoco.MjModel._address and CUDA streams as integer handles (torch's Stream.cuda_stream). Bad "
      "arguments raise ValueError; the CUDA entry points raise RuntimeError when CUDA is not compiled in or "
      "no device is usable.";

  m.def("build_info", &build_info_dict,
        "MuJoCo version, CUDA compiled/usable, EGL availability and devices.");
  m.def(
      "cuda_available", [] { return cuda::device_count() > 0; },
      "True when CUDA is compiled in and a device is usable now.");

  py::module_ sim = add_submodule(m, "sim", "Batched MuJoCo physics: N simulations of one model (csrc/sim).");
  bindings::bind_sim(sim);
  py::module_ render = add_submodule(m, "render", "Headless EGL batch rendering (csrc/render).");
  bindings::bind_render(render);
  py::module_ kernels = add_submodule(
      m, "kernels",
      "The fused preprocess and reward kernels: C++ twins on host memory (csrc/cpu), CUDA on device memory "
      "(csrc/cuda).");
  bindings::bind_kernels(kernels);
}
