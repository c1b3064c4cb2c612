// vlmrm_fast._core, one file per concern: module.cpp makes the module (with the
// build information) and one submodule per concern, which sim.cpp, render.cpp
// and kernels.cpp fill. These files and emulation/module.cpp are the only ones
// that include pybind11: the classes they bind know nothing of Python.
//
// Arguments are checked here, then the GIL is released around every batched
// call. Buffers cross as integer addresses (numpy's ctypes.data, torch's
// data_ptr()) so one entry point serves host and CUDA memory; the Python
// wrappers in vlmrm_fast/ own the checks of dtype, shape and device that need
// the array objects themselves.
#pragma once

#include <pybind11/pybind11.h>

namespace vlmrm::bindings {

void bind_sim(pybind11::module_& m);      // _core.sim: BatchSim (sim/)
void bind_render(pybind11::module_& m);   // _core.render: BatchRenderer (render/), after bind_sim
void bind_kernels(pybind11::module_& m);  // _core.kernels: preprocess and reward, C++ twins and CUDA

}  // namespace vlmrm::bindings
