// Arguments shared by the sim and render bindings: models as addresses and
// float64 rows checked against the model's sizes.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include <mujoco/mujoco.h>

#include "address_args.h"

namespace vlmrm::bindings {

// Models cross as mujoco.MjModel._address: an mjModel* of the libmujoco that
// this module links (the mujoco package imports it first).
inline const mjModel* model_at(uintptr_t ptr) { return args::address<const mjModel>(ptr, "model"); }

using DoubleRows = pybind11::array_t<double, pybind11::array::c_style | pybind11::array::forcecast>;

inline void check_rows(const pybind11::array& a, int64_t rows, int64_t cols, const char* what) {
  if (a.ndim() != 2 || a.shape(0) != rows || a.shape(1) != cols) {
    std::string got = "(";
    for (pybind11::ssize_t k = 0; k < a.ndim(); ++k) got += (k ? ", " : "") + std::to_string(a.shape(k));
    got += a.ndim() == 1 ? ",)" : ")";
    throw pybind11::value_error(std::string(what) + " must have shape (" + std::to_string(rows) + ", " +
                                std::to_string(cols) + "), got " + got);
  }
}

}  // namespace vlmrm::bindings
