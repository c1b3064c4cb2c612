// Renders N simulations of one model per step in one headless EGL context.
//
// Each frame is drawn exactly as mujoco.Renderer draws it (mjv_updateScene with
// default options, mjr_render at viewport (0, 0, W, H) of a W x H offscreen
// buffer with the model's multisampling, resolved by a blit), so the pixels are
// the same. Drawing every frame at the origin is what makes them the same: a
// tile drawn at another viewport offset of a larger framebuffer differs in
// interpolated colours and shadow-map tests (measured on llvmpipe: up to 148
// levels at shadow edges). Each resolved frame is read into its slot of one
// pixel buffer object (no CPU wait on a GPU); the CUDA path maps it into CUDA
// through GL interop. The host reads it once per step: on a CUDA EGL device
// through that interop, copied into page-locked memory (mapping the buffer on
// the host would let the driver move it out of video memory); elsewhere (Mesa)
// by mapping it.
//
// Scene updates (kinematics for the current state unless the data is drawn as
// it lies, then mjv_updateScene) run in parallel on a MuJoCo batch thread pool:
// the simulator's own when rendering from a BatchSim, an internal one when
// rendering given qpos, the renderer's threads for data it does not hold.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <mujoco/mujoco.h>

#include "cpu/preprocess.h"
#include "render/gl_functions.h"

namespace vlmrm::sim {
class BatchSim;
}
namespace vlmrm::cuda {
class GlBufferInterop;
class HostMirror;
}  // namespace vlmrm::cuda

namespace vlmrm::render {

class EglContext;

struct RendererConfig {
  int num_envs = 1;
  int width = 0;
  int height = 0;
  int camera = -1;       // -1: free camera (mjv_defaultFreeCamera); else a fixed camera id
  int gpu = -1;          // CUDA index of the EGL device; -1: automatic (EglContext::create)
  int max_geom = 10000;  // per-frame scene capacity, as mujoco.Renderer's default
  int nthread = 0;       // scene-update threads for render(qpos); <= 0: the CPUs we may use
};

// The camera id of `name` in m; throws std::invalid_argument listing the cameras.
int camera_id(const mjModel* m, const std::string& name);

class BatchRenderer {
 public:
  // Copies `model`. Throws std::invalid_argument for bad sizes or camera, and
  // std::runtime_error when EGL or OpenGL cannot be set up.
  BatchRenderer(const mjModel* model, const RendererConfig& config);
  ~BatchRenderer();
  BatchRenderer(const BatchRenderer&) = delete;
  BatchRenderer& operator=(const BatchRenderer&) = delete;

  // Frees GL objects, the context and the threads now; later calls throw.
  void close();
  bool closed() const { return !egl_; }

  // Draws num_envs frames for positions qpos (num_envs x nq, row-major); every
  // other state component has the model's default value.
  void render(const double* qpos);
  // Draws the current state of the simulator's simulations [start, start +
  // count) (count < 0: to the end) into their frames, on its threads; the other
  // frames keep what they hold. kinematics: the bodies' poses computed from
  // the positions first (the state reached); false: the data drawn as it lies
  // (after mj_step, the poses of its last forward pass, as gymnasium draws).
  void render(sim::BatchSim& sim, int start = 0, int count = -1, bool kinematics = true);
  // Draws frames [start, start + models.size()) from simulations the renderer
  // does not hold (each env's own, or a copy of the fields a scene reads): each
  // (model, data) pair as its data lies, as render(sim, ..., false) draws a
  // simulator's (what a gymnasium or dm_control env's render() draws). The
  // models must have the renderer's model's sizes; their visual fields are
  // each one's own.
  void render_data(const std::vector<const mjModel*>& models, const std::vector<mjData*>& datas, int start);
  // The camera every draw of frame `frame` is drawn from (initially the
  // renderer's camera), which keeps its state between draws as a viewer's does
  // (a tracking camera moves smoothly), and the visualisation options of every
  // frame.
  void set_frame_camera(int frame, const mjvCamera& camera);
  mjvCamera frame_camera(int frame) const;
  void set_option(const mjvOption& option);

  // The last frames, upright, as num_envs x height x width x 3 uint8 in host memory.
  void copy_frames(uint8_t* out);
  // The same into CUDA memory on `stream` through CUDA-GL interop (no host copy).
  void copy_frames_cuda(uint8_t* out, void* stream);

  // Lending the pixel buffer in place (see layout() for where the frames are).
  // lend_host gives it in host memory (see host_reads_through_cuda);
  // lend_device maps it into CUDA on `stream`: GL work issued before completes
  // before CUDA work on `stream` reads it. Until release_frames (on the same
  // stream, which orders the unmap after the work enqueued there), drawing
  // throws. One lend at a time.
  const uint8_t* lend_host();
  const uint8_t* lend_device(void* stream);
  void release_frames();

  // Runs fn on the last frames without copying them: `pixels` is the start of
  // the pixel buffer, `layout` describes the frames in it (RGBA, rows bottom-up).
  using FramesFn = std::function<void(const uint8_t* pixels, const FrameLayout& layout)>;
  void with_host_frames(const FramesFn& fn);
  // Same with the pixel buffer mapped into CUDA on `stream`; work fn enqueues
  // on `stream` completes before the buffer is drawn into again.
  void with_device_frames(const FramesFn& fn, void* stream);

  // The frames in a pixel buffer that starts at `pixels`: num_envs RGBA frames
  // of width x height, one after another, rows bottom-up (layout.data points at
  // frame 0's top row, top_row_offset() bytes past `pixels`; row_stride < 0,
  // frames_per_row = 1; pixels null: the strides alone). The one definition of
  // where GL puts the frames: the Python side reads it through frame_layout.
  FrameLayout layout(const uint8_t* pixels) const;
  int64_t top_row_offset() const;

  int num_envs() const { return config_.num_envs; }
  int nq() const;
  int width() const { return config_.width; }
  int height() const { return config_.height; }
  int camera() const { return config_.camera; }
  int egl_device() const;   // index of the EGL device in use
  int cuda_device() const;  // its CUDA index, -1 for a software device
  bool software() const;    // Mesa llvmpipe
  int max_size() const;     // largest width/height this OpenGL accepts
  int offscreen_samples() const;
  // True when host reads copy the pixel buffer through CUDA into page-locked
  // memory (a CUDA EGL device with CUDA usable); false when they map it (Mesa).
  bool host_reads_through_cuda() const;

 private:
  struct ContextScope;
  void check_open() const;
  void check_not_lent() const;
  void update_scenes(sim::BatchSim& sim, int start, int count, bool kinematics);
  void check_scenes(int start, int count) const;  // throws where a frame's scene filled max_geom
  void draw_and_read(int start, int count);
  const uint8_t* map_host_locked();
  void unmap_host_locked();
  cuda::GlBufferInterop& interop_locked();
  void check_gl(const char* what);
  void release();

  RendererConfig config_;
  std::unique_ptr<EglContext> egl_;
  GlFunctions gl_;
  mjModel* model_ = nullptr;
  mjrContext con_;
  bool con_made_ = false;
  std::vector<mjvScene> scenes_;
  int scenes_made_ = 0;
  mjvOption option_;
  unsigned int pbo_ = 0;
  int64_t frame_bytes_ = 0;
  int max_size_ = 0;
  bool has_frames_ = false;
  // kHostMapped: the GL buffer mapped on the host; kHostCopy: host_mirror_.
  enum class Lent { kNone, kHostMapped, kHostCopy, kDevice } lent_ = Lent::kNone;
  void* lent_stream_ = nullptr;
  std::unique_ptr<sim::BatchSim> positions_;  // scene updates for render(qpos)
  std::unique_ptr<cuda::GlBufferInterop> interop_;
  std::unique_ptr<cuda::HostMirror> host_mirror_;  // made at the first host read through CUDA
  std::vector<int32_t> overflow_;                  // per frame: the scene ran out of geoms
  std::vector<mjvCamera> frame_cameras_;           // per frame: the camera it is drawn from
  std::mutex mutex_;
};

}  // namespace vlmrm::render
