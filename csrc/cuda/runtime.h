// CUDA at run time: compiled in or not, and whether a device is usable. Code
// that launches kernels checks `device_count() > 0` first and says what it lacks.
#pragma once

#include <cstdint>
#include <string>

namespace vlmrm::cuda {

bool compiled();                 // built with nvcc
std::string compiled_version();  // toolkit version at build time, "" without CUDA
int device_count();              // 0 when no driver or device (never throws)
std::string device_name(int device);
std::string runtime_error();  // why device_count() is 0, "" otherwise

// Throws std::runtime_error naming the CUDA error when `status` is not success.
void check(int status, const char* what);

// Throws when CUDA is not compiled in or `device` is not usable.
void require_device(int device);

}  // namespace vlmrm::cuda
