// Headless EGL: libEGL is opened at run time, so the module imports on machines
// without it and can say what is missing. One display per EGL device per
// process, one context per renderer.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace vlmrm::render {

struct EglDeviceInfo {
  int index = -1;          // position in eglQueryDevicesEXT's list
  int cuda_device = -1;    // EGL_CUDA_DEVICE_NV, -1 when the driver does not say
  bool software = false;   // EGL_MESA_device_software (llvmpipe)
  std::string extensions;  // device extension string
};

struct EglProbe {
  bool available = false;  // a context can be created on some device
  std::string error;       // why not, when unavailable
  std::string vendor;      // EGL_VENDOR of the chosen display
  std::string version;     // EGL_VERSION
  std::vector<EglDeviceInfo> devices;
};

// Enumerates EGL devices without creating a context. Never throws.
EglProbe probe_egl();

// An OpenGL context with no surface on one EGL device. Rendering goes to
// framebuffer objects; MuJoCo's mjr_makeContext creates them.
class EglContext {
 public:
  // gpu < 0: the first hardware device with a CUDA index if any, else the first
  // device. gpu >= 0: the device whose EGL_CUDA_DEVICE_NV equals gpu; on
  // machines whose driver does not report CUDA indices (Mesa), only gpu == 0 is
  // accepted and means the first device. Throws std::runtime_error with the fix.
  static std::unique_ptr<EglContext> create(int gpu);
  ~EglContext();
  EglContext(const EglContext&) = delete;
  EglContext& operator=(const EglContext&) = delete;

  void make_current();      // on the calling thread; throws on failure
  void release_current();   // if current on the calling thread
  bool is_current() const;  // current on the calling thread
  const EglDeviceInfo& device() const { return device_; }
  int gl_max_renderbuffer_size() const { return max_renderbuffer_size_; }

  // OpenGL entry points beyond what MuJoCo exposes, from eglGetProcAddress.
  void* gl_proc(const char* name) const;

 private:
  EglContext() = default;
  void* display_ = nullptr;
  void* context_ = nullptr;
  EglDeviceInfo device_;
  int max_renderbuffer_size_ = 0;
};

// The EGL context current on the calling thread, whichever library made it
// (gymnasium's or dm_control's renderer beside ours), with its display and
// surfaces: the renderer puts it back after each call instead of leaving the
// thread with none current.
struct EglBinding {
  void* display = nullptr;
  void* draw = nullptr;
  void* read = nullptr;
  void* context = nullptr;
};
EglBinding current_egl_binding();
// Makes `binding` current again (nothing when it holds no context).
void restore_egl_binding(const EglBinding& binding);

// Number of live EglContext objects in this process (for leak tests).
int live_egl_contexts();

}  // namespace vlmrm::render
