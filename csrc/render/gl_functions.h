// OpenGL entry points the batch renderer calls beyond MuJoCo's, resolved
// through eglGetProcAddress: the module links no GL library, and GL headers
// are included for types and constants only.
#pragma once

#include <GL/gl.h>
#include <GL/glext.h>

namespace vlmrm::render {

class EglContext;

struct GlFunctions {
  // GL 1.0 entry points have no PFN typedefs in glext.h.
  using GetErrorFn = GLenum (*)();
  using GetIntegervFn = void (*)(GLenum, GLint*);
  using ReadPixelsFn = void (*)(GLint, GLint, GLsizei, GLsizei, GLenum, GLenum, void*);
  using ReadBufferFn = void (*)(GLenum);
  using PixelStoreiFn = void (*)(GLenum, GLint);

  GetErrorFn GetError = nullptr;
  GetIntegervFn GetIntegerv = nullptr;
  ReadPixelsFn ReadPixels = nullptr;
  ReadBufferFn ReadBuffer = nullptr;
  PixelStoreiFn PixelStorei = nullptr;
  PFNGLBINDFRAMEBUFFERPROC BindFramebuffer = nullptr;
  PFNGLBLITFRAMEBUFFERPROC BlitFramebuffer = nullptr;
  PFNGLGENBUFFERSPROC GenBuffers = nullptr;
  PFNGLDELETEBUFFERSPROC DeleteBuffers = nullptr;
  PFNGLBINDBUFFERPROC BindBuffer = nullptr;
  PFNGLBUFFERDATAPROC BufferData = nullptr;
  PFNGLMAPBUFFERRANGEPROC MapBufferRange = nullptr;
  PFNGLUNMAPBUFFERPROC UnmapBuffer = nullptr;

  // Resolves every entry point on `context` (current); throws naming a missing one.
  static GlFunctions load(const EglContext& context);
};

}  // namespace vlmrm::render
