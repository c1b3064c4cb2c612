#include "render/gl_functions.h"

#include <stdexcept>
#include <string>

#include "render/egl_context.h"

namespace vlmrm::render {
namespace {

template <typename Fn>
void resolve(const EglContext& context, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(context.gl_proc(name));
  if (!*out) {
    throw std::runtime_error(std::string("OpenGL entry point ") + name +
                             " is missing; the renderer needs OpenGL 3.0 (framebuffer objects, "
                             "pixel buffer objects)");
  }
}

}  // namespace

GlFunctions GlFunctions::load(const EglContext& context) {
  GlFunctions gl;
  resolve(context, "glGetError", &gl.GetError);
  resolve(context, "glGetIntegerv", &gl.GetIntegerv);
  resolve(context, "glReadPixels", &gl.ReadPixels);
  resolve(context, "glReadBuffer", &gl.ReadBuffer);
  resolve(context, "glPixelStorei", &gl.PixelStorei);
  resolve(context, "glBindFramebuffer", &gl.BindFramebuffer);
  resolve(context, "glBlitFramebuffer", &gl.BlitFramebuffer);
  resolve(context, "glGenBuffers", &gl.GenBuffers);
  resolve(context, "glDeleteBuffers", &gl.DeleteBuffers);
  resolve(context, "glBindBuffer", &gl.BindBuffer);
  resolve(context, "glBufferData", &gl.BufferData);
  resolve(context, "glMapBufferRange", &gl.MapBufferRange);
  resolve(context, "glUnmapBuffer", &gl.UnmapBuffer);
  return gl;
}

}  // namespace vlmrm::render
