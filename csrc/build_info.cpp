#include "build_info.h"

#include <mujoco/mujoco.h>

#include "cuda/runtime.h"

namespace vlmrm {

BuildInfo build_info() {
  BuildInfo info;
  info.mujoco_version = mj_versionString();
  info.cuda_compiled = cuda::compiled();
  info.cuda_version = cuda::compiled_version();
  info.cuda_device_count = cuda::device_count();
  info.cuda_device_name = info.cuda_device_count > 0 ? cuda::device_name(0) : "";
  info.cuda_error = info.cuda_device_count > 0 ? "" : cuda::runtime_error();
  info.egl = render::probe_egl();
  return info;
}

}  // namespace vlmrm
