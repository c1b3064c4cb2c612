// What this build of the core has and what the machine offers at run time.
#pragma once

#include <string>
#include <vector>

#include "render/egl_context.h"

namespace vlmrm {

struct BuildInfo {
  std::string mujoco_version;  // mj_versionString() of the loaded libmujoco
  bool cuda_compiled = false;
  std::string cuda_version;      // toolkit at build time
  int cuda_device_count = 0;     // usable now
  std::string cuda_device_name;  // device 0
  std::string cuda_error;        // why no device, when none
  render::EglProbe egl;
};

BuildInfo build_info();

}  // namespace vlmrm
