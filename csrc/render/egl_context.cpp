#include "render/egl_context.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

#define EGL_NO_X11
#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GL/gl.h>

namespace vlmrm::render {
namespace {

// Entry points of libEGL, resolved once per process.
struct EglApi {
  std::string error;  // empty when loaded
  PFNEGLGETPROCADDRESSPROC GetProcAddress = nullptr;
  PFNEGLGETERRORPROC GetError = nullptr;
  PFNEGLINITIALIZEPROC Initialize = nullptr;
  PFNEGLQUERYSTRINGPROC QueryString = nullptr;
  PFNEGLCHOOSECONFIGPROC ChooseConfig = nullptr;
  PFNEGLBINDAPIPROC BindAPI = nullptr;
  PFNEGLCREATECONTEXTPROC CreateContext = nullptr;
  PFNEGLDESTROYCONTEXTPROC DestroyContext = nullptr;
  PFNEGLMAKECURRENTPROC MakeCurrent = nullptr;
  PFNEGLGETCURRENTCONTEXTPROC GetCurrentContext = nullptr;
  PFNEGLGETCURRENTDISPLAYPROC GetCurrentDisplay = nullptr;
  PFNEGLGETCURRENTSURFACEPROC GetCurrentSurface = nullptr;
  PFNEGLQUERYDEVICESEXTPROC QueryDevicesEXT = nullptr;
  PFNEGLQUERYDEVICESTRINGEXTPROC QueryDeviceStringEXT = nullptr;
  PFNEGLQUERYDEVICEATTRIBEXTPROC QueryDeviceAttribEXT = nullptr;
  PFNEGLGETPLATFORMDISPLAYEXTPROC GetPlatformDisplayEXT = nullptr;
};

// What to install, in every "no EGL" message.
constexpr const char* kInstallEgl =
    "Install EGL: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri (CPU, Mesa's software "
    "rasterizer) or the NVIDIA driver's EGL library (GPU).";

template <typename Fn>
bool load_symbol(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  return *out != nullptr;
}

template <typename Fn>
bool load_extension(const EglApi& api, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(api.GetProcAddress(name));
  return *out != nullptr;
}

const EglApi& egl_api() {
  static EglApi api = [] {
    EglApi a;
    // RTLD_GLOBAL: MuJoCo's GL loader finds eglGetProcAddress by global lookup.
    void* lib = dlopen("libEGL.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      a.error = std::string("libEGL.so.1 could not be loaded (") + dlerror() + "). " + kInstallEgl;
      return a;
    }
    bool ok =
        load_symbol(lib, "eglGetProcAddress", &a.GetProcAddress) &&
        load_symbol(lib, "eglGetError", &a.GetError) && load_symbol(lib, "eglInitialize", &a.Initialize) &&
        load_symbol(lib, "eglQueryString", &a.QueryString) &&
        load_symbol(lib, "eglChooseConfig", &a.ChooseConfig) && load_symbol(lib, "eglBindAPI", &a.BindAPI) &&
        load_symbol(lib, "eglCreateContext", &a.CreateContext) &&
        load_symbol(lib, "eglDestroyContext", &a.DestroyContext) &&
        load_symbol(lib, "eglMakeCurrent", &a.MakeCurrent) &&
        load_symbol(lib, "eglGetCurrentContext", &a.GetCurrentContext) &&
        load_symbol(lib, "eglGetCurrentDisplay", &a.GetCurrentDisplay) &&
        load_symbol(lib, "eglGetCurrentSurface", &a.GetCurrentSurface);
    if (!ok) {
      a.error = "libEGL.so.1 lacks core EGL 1.4 entry points";
      return a;
    }
    ok = load_extension(a, "eglQueryDevicesEXT", &a.QueryDevicesEXT) &&
         load_extension(a, "eglQueryDeviceStringEXT", &a.QueryDeviceStringEXT) &&
         load_extension(a, "eglQueryDeviceAttribEXT", &a.QueryDeviceAttribEXT) &&
         load_extension(a, "eglGetPlatformDisplayEXT", &a.GetPlatformDisplayEXT);
    if (!ok) {
      a.error = std::string(
                    "EGL lacks EGL_EXT_device_enumeration / EGL_EXT_platform_device (no "
                    "vendor EGL library found?): no headless rendering. ") +
                kInstallEgl;
    }
    // A dlopen'ed libEGL stays loaded for the life of the process, like libGL.
    return a;
  }();
  return api;
}

std::string hex(EGLint code) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%04x", code);
  return buf;
}

std::vector<EGLDeviceEXT> query_devices(const EglApi& api) {
  EGLint count = 0;
  if (!api.QueryDevicesEXT(0, nullptr, &count) || count <= 0) return {};
  std::vector<EGLDeviceEXT> devices(count);
  api.QueryDevicesEXT(count, devices.data(), &count);
  devices.resize(count);
  return devices;
}

EglDeviceInfo describe(const EglApi& api, EGLDeviceEXT device, int index) {
  EglDeviceInfo info;
  info.index = index;
  const char* ext = api.QueryDeviceStringEXT(device, EGL_EXTENSIONS);
  info.extensions = ext ? ext : "";
  info.software = info.extensions.find("EGL_MESA_device_software") != std::string::npos;
  EGLAttrib cuda = -1;
  if (info.extensions.find("EGL_NV_device_cuda") != std::string::npos &&
      api.QueryDeviceAttribEXT(device, EGL_CUDA_DEVICE_NV, &cuda)) {
    info.cuda_device = static_cast<int>(cuda);
  }
  api.GetError();  // a failed attribute query is not an error of ours
  return info;
}

// One initialized display per EGL device for the process' lifetime. Terminating
// and re-initializing displays is where drivers leak, so displays stay open.
struct DisplayRegistry {
  std::mutex mutex;
  std::map<int, EGLDisplay> displays;
};

DisplayRegistry& displays() {
  static DisplayRegistry* registry = new DisplayRegistry();  // never destroyed: exit order
  return *registry;
}

EGLDisplay display_for(const EglApi& api, EGLDeviceEXT device, int index) {
  auto& reg = displays();
  std::lock_guard<std::mutex> lock(reg.mutex);
  auto it = reg.displays.find(index);
  if (it != reg.displays.end()) return it->second;
  EGLDisplay dpy = api.GetPlatformDisplayEXT(EGL_PLATFORM_DEVICE_EXT, device, nullptr);
  if (dpy == EGL_NO_DISPLAY) {
    throw std::runtime_error("eglGetPlatformDisplayEXT failed for EGL device " + std::to_string(index) +
                             " (error " + hex(api.GetError()) + ")");
  }
  EGLint major = 0, minor = 0;
  if (!api.Initialize(dpy, &major, &minor)) {
    throw std::runtime_error("eglInitialize failed for EGL device " + std::to_string(index) + " (error " +
                             hex(api.GetError()) + ")");
  }
  reg.displays[index] = dpy;
  return dpy;
}

std::atomic<int> g_live_contexts{0};

}  // namespace

EglProbe probe_egl() {
  EglProbe probe;
  const EglApi& api = egl_api();
  if (!api.error.empty()) {
    probe.error = api.error;
    return probe;
  }
  auto devices = query_devices(api);
  for (size_t i = 0; i < devices.size(); ++i) {
    probe.devices.push_back(describe(api, devices[i], static_cast<int>(i)));
  }
  if (devices.empty()) {
    probe.error = std::string("EGL reports no devices (eglQueryDevicesEXT). ") + kInstallEgl;
    return probe;
  }
  try {
    EGLDisplay dpy = display_for(api, devices[0], 0);
    const char* vendor = api.QueryString(dpy, EGL_VENDOR);
    const char* version = api.QueryString(dpy, EGL_VERSION);
    probe.vendor = vendor ? vendor : "";
    probe.version = version ? version : "";
    probe.available = true;
  } catch (const std::exception& e) {
    probe.error = e.what();
  }
  return probe;
}

std::unique_ptr<EglContext> EglContext::create(int gpu) {
  const EglApi& api = egl_api();
  if (!api.error.empty()) throw std::runtime_error(api.error);
  auto devices = query_devices(api);
  if (devices.empty()) {
    throw std::runtime_error(std::string("EGL reports no devices (eglQueryDevicesEXT). ") + kInstallEgl);
  }
  std::vector<EglDeviceInfo> infos;
  for (size_t i = 0; i < devices.size(); ++i) {
    infos.push_back(describe(api, devices[i], static_cast<int>(i)));
  }
  int chosen = -1;
  bool any_cuda = false;
  for (const auto& info : infos) any_cuda |= info.cuda_device >= 0;
  if (gpu < 0) {
    chosen = 0;
    for (const auto& info : infos) {
      if (info.cuda_device >= 0) {
        chosen = info.index;
        break;
      }
    }
  } else if (any_cuda) {
    for (const auto& info : infos) {
      if (info.cuda_device == gpu) {
        chosen = info.index;
        break;
      }
    }
    if (chosen < 0) {
      std::string have;
      for (const auto& info : infos) {
        if (info.cuda_device >= 0) have += (have.empty() ? "" : ", ") + std::to_string(info.cuda_device);
      }
      throw std::invalid_argument("gpu=" + std::to_string(gpu) +
                                  " has no EGL device; CUDA devices with EGL: " + have);
    }
  } else {
    if (gpu != 0) {
      throw std::invalid_argument("gpu=" + std::to_string(gpu) +
                                  " requested, but no EGL device reports a CUDA "
                                  "index (software EGL?); use gpu=None or gpu=0");
    }
    chosen = 0;
  }

  EGLDisplay dpy = display_for(api, devices[chosen], chosen);
  const EGLint config_attribs[] = {EGL_SURFACE_TYPE,
                                   EGL_PBUFFER_BIT,
                                   EGL_RED_SIZE,
                                   8,
                                   EGL_GREEN_SIZE,
                                   8,
                                   EGL_BLUE_SIZE,
                                   8,
                                   EGL_ALPHA_SIZE,
                                   8,
                                   EGL_DEPTH_SIZE,
                                   24,
                                   EGL_STENCIL_SIZE,
                                   8,
                                   EGL_RENDERABLE_TYPE,
                                   EGL_OPENGL_BIT,
                                   EGL_NONE};
  EGLConfig config = nullptr;
  EGLint num_configs = 0;
  if (!api.ChooseConfig(dpy, config_attribs, &config, 1, &num_configs) || num_configs < 1) {
    throw std::runtime_error("eglChooseConfig found no RGBA8/depth24 OpenGL config (error " +
                             hex(api.GetError()) + ")");
  }
  if (!api.BindAPI(EGL_OPENGL_API)) {
    throw std::runtime_error("eglBindAPI(EGL_OPENGL_API) failed (error " + hex(api.GetError()) + ")");
  }
  EGLContext ctx = api.CreateContext(dpy, config, EGL_NO_CONTEXT, nullptr);
  if (ctx == EGL_NO_CONTEXT) {
    throw std::runtime_error("eglCreateContext failed (error " + hex(api.GetError()) + ")");
  }
  std::unique_ptr<EglContext> out(new EglContext());
  out->display_ = dpy;
  out->context_ = ctx;
  out->device_ = infos[chosen];
  ++g_live_contexts;
  out->make_current();
  GLint max_rb = 0;
  auto get_integerv = reinterpret_cast<void (*)(GLenum, GLint*)>(out->gl_proc("glGetIntegerv"));
  if (get_integerv) get_integerv(GL_MAX_RENDERBUFFER_SIZE, &max_rb);
  out->max_renderbuffer_size_ = max_rb;
  return out;
}

EglContext::~EglContext() {
  const EglApi& api = egl_api();
  if (context_) {
    if (api.GetCurrentContext() == context_) {
      api.MakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    }
    api.DestroyContext(display_, context_);
    --g_live_contexts;
  }
}

void EglContext::make_current() {
  const EglApi& api = egl_api();
  if (api.GetCurrentContext() == context_) return;
  if (!api.MakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, context_)) {
    throw std::runtime_error("eglMakeCurrent failed (error " + hex(api.GetError()) +
                             "); the driver needs EGL_KHR_surfaceless_context");
  }
}

void EglContext::release_current() {
  const EglApi& api = egl_api();
  if (api.GetCurrentContext() == context_) {
    api.MakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
  }
}

bool EglContext::is_current() const { return egl_api().GetCurrentContext() == context_; }

EglBinding current_egl_binding() {
  const EglApi& api = egl_api();
  EglBinding b;
  if (!api.error.empty()) return b;
  b.context = api.GetCurrentContext();
  if (b.context != EGL_NO_CONTEXT) {
    b.display = api.GetCurrentDisplay();
    b.draw = api.GetCurrentSurface(EGL_DRAW);
    b.read = api.GetCurrentSurface(EGL_READ);
  }
  return b;
}

void restore_egl_binding(const EglBinding& binding) {
  const EglApi& api = egl_api();
  if (!api.error.empty() || binding.context == EGL_NO_CONTEXT) return;
  if (api.GetCurrentContext() == binding.context) return;
  api.MakeCurrent(binding.display, binding.draw, binding.read,
                  binding.context);  // best effort: theirs to check
}

void* EglContext::gl_proc(const char* name) const {
  return reinterpret_cast<void*>(egl_api().GetProcAddress(name));
}

int live_egl_contexts() { return g_live_contexts.load(); }

}  // namespace vlmrm::render
