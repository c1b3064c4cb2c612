#include "render/batch_renderer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "cpu/parallel.h"
#include "cuda/gl_interop.h"
#include "cuda/runtime.h"
#include "render/egl_context.h"
#include "sim/batch_sim.h"
#include "sim/mj_guard.h"

namespace vlmrm::render {
namespace {

// The scene of frame `frame` from one simulation's model and data, as
// mujoco.Renderer.update_scene builds it, from the frame's camera (kept between
// draws, as a viewer keeps its camera). kinematics: the poses computed from the
// positions first (all mj_forward computes from them: the state reached);
// otherwise the data drawn as it lies (after mj_step, the poses of its last
// forward pass: what gymnasium's and dm_control's render() draw). The one scene
// update of every draw: run by mjb_apply on a simulator's threads, or by
// render_data on the renderer's for data it does not hold. Plain pointers only:
// MuJoCo may unwind this function with longjmp.
struct SceneArgs {
  mjvScene* scenes;
  const mjvOption* option;
  mjvCamera* cameras;  // per frame
  int32_t* overflow;
  bool kinematics;
};

void update_scene_one(const mjModel* m, mjData* d, int frame, void* arg) {
  const SceneArgs* a = static_cast<const SceneArgs*>(arg);
  if (a->kinematics) {
    mj_fwdPosition(m, d);
    mj_sensorPos(m, d);
  }
  mjvScene* scene = a->scenes + frame;
  mjv_updateScene(m, d, a->option, nullptr, a->cameras + frame, mjCAT_ALL, scene);
  a->overflow[frame] = scene->ngeom >= scene->maxgeom ? 1 : 0;
}

bool same_layout(const mjModel* a, const mjModel* b) {
  return a->nq == b->nq && a->nv == b->nv && a->nu == b->nu && a->nbody == b->nbody && a->ngeom == b->ngeom &&
         a->nsite == b->nsite && a->ncam == b->ncam && a->nlight == b->nlight && a->ntendon == b->ntendon &&
         a->nskin == b->nskin && a->nflex == b->nflex && a->nmocap == b->nmocap && a->nmesh == b->nmesh;
}

}  // namespace

int camera_id(const mjModel* m, const std::string& name) {
  int id = mj_name2id(m, mjOBJ_CAMERA, name.c_str());
  if (id >= 0) return id;
  std::string names;
  for (int i = 0; i < m->ncam; ++i) {
    const char* n = mj_id2name(m, mjOBJ_CAMERA, i);
    names +=
        (i ? ", " : "") + ((n && *n) ? "'" + std::string(n) + "'" : "#" + std::to_string(i) + " (unnamed)");
  }
  throw std::invalid_argument("camera '" + name + "' is not in the model; its cameras: " +
                              (names.empty() ? std::string("none (use camera=-1, the free camera)") : names));
}

// Makes the renderer's context current for one call; afterwards puts back
// whatever was current before (another library's context, e.g. a gymnasium
// env's renderer in the same thread), or releases it, so any thread may make
// the next call.
struct BatchRenderer::ContextScope {
  explicit ContextScope(EglContext& context)
      : context_(context), was_current_(context.is_current()), previous_(current_egl_binding()) {
    context_.make_current();
  }
  ~ContextScope() {
    if (was_current_) return;
    context_.release_current();
    restore_egl_binding(previous_);
  }
  EglContext& context_;
  bool was_current_;
  EglBinding previous_;
};

BatchRenderer::BatchRenderer(const mjModel* model, const RendererConfig& config) : config_(config) {
  if (!model) throw std::invalid_argument("model is null");
  if (config_.num_envs < 1) throw std::invalid_argument("num_envs must be >= 1");
  if (config_.width < 1 || config_.height < 1) throw std::invalid_argument("width and height must be >= 1");
  if (config_.max_geom < 1) throw std::invalid_argument("max_geom must be >= 1");
  if (config_.camera < -1 || config_.camera >= model->ncam) {
    throw std::invalid_argument("camera id " + std::to_string(config_.camera) + " is outside [-1, " +
                                std::to_string(model->ncam) + ") (-1: the free camera)");
  }
  mjr_defaultContext(&con_);
  try {
    mjModel* copy = nullptr;
    mj::guarded("mj_copyModel", [&] { copy = mj_copyModel(nullptr, model); });
    model_ = copy;
    // The offscreen buffer is one frame: every frame is drawn at the origin.
    model_->vis.global.offwidth = config_.width;
    model_->vis.global.offheight = config_.height;

    const EglBinding previous = current_egl_binding();
    egl_ = EglContext::create(config_.gpu);
    egl_->release_current();  // create() leaves it current; the scope below owns that now
    restore_egl_binding(previous);
    ContextScope scope(*egl_);
    gl_ = GlFunctions::load(*egl_);
    GLint viewport_dims[2] = {0, 0};
    gl_.GetIntegerv(GL_MAX_VIEWPORT_DIMS, viewport_dims);
    const int limit = std::min({egl_->gl_max_renderbuffer_size(), static_cast<int>(viewport_dims[0]),
                                static_cast<int>(viewport_dims[1])});
    max_size_ = limit;
    if (config_.width > limit || config_.height > limit) {
      throw std::invalid_argument("frame size " + std::to_string(config_.width) + "x" +
                                  std::to_string(config_.height) + " exceeds this OpenGL's limit of " +
                                  std::to_string(limit) + " pixels per side");
    }

    mjrContext* con = &con_;
    const mjModel* m = model_;
    mj::guarded("mjr_makeContext", [&] {
      mjr_makeContext(m, con, mjFONTSCALE_150);
      mjr_setBuffer(mjFB_OFFSCREEN, con);
    });
    con_made_ = true;
    if (con_.offWidth != config_.width || con_.offHeight != config_.height || !con_.offFBO) {
      throw std::runtime_error("MuJoCo could not make a " + std::to_string(config_.width) + "x" +
                               std::to_string(config_.height) + " offscreen framebuffer");
    }

    frame_bytes_ = static_cast<int64_t>(config_.width) * config_.height * 4;
    // On a CUDA device the frames are read by kernels through interop, so ask
    // for video memory (a COPY buffer: GL writes, GL/CUDA read); GL_STREAM_READ
    // (for host reads) puts it in system memory, which kernels read 7.8x slower.
    const GLenum usage = egl_->device().cuda_device >= 0 ? GL_DYNAMIC_COPY : GL_STREAM_READ;
    gl_.GenBuffers(1, &pbo_);
    gl_.BindBuffer(GL_PIXEL_PACK_BUFFER, pbo_);
    gl_.BufferData(GL_PIXEL_PACK_BUFFER, static_cast<GLsizeiptr>(frame_bytes_ * config_.num_envs), nullptr,
                   usage);
    gl_.BindBuffer(GL_PIXEL_PACK_BUFFER, 0);
    check_gl("allocating the pixel buffer");

    scenes_.resize(config_.num_envs);
    for (auto& scene : scenes_) {
      mjvScene* scn = &scene;
      int max_geom = config_.max_geom;
      mjv_defaultScene(scn);
      mj::guarded("mjv_makeScene", [&] { mjv_makeScene(m, scn, max_geom); });
      ++scenes_made_;
    }
    mjv_defaultOption(&option_);
    mjvCamera camera;
    mjv_defaultCamera(&camera);
    if (config_.camera < 0) {
      camera.type = mjCAMERA_FREE;
      mjv_defaultFreeCamera(model_, &camera);
    } else {
      camera.type = mjCAMERA_FIXED;
      camera.fixedcamid = config_.camera;
    }
    overflow_.assign(config_.num_envs, 0);
    frame_cameras_.assign(config_.num_envs, camera);

    sim::SimConfig positions;
    positions.num_envs = config_.num_envs;
    positions.nthread = config_.nthread;
    positions.persistent = false;
    positions_ = std::make_unique<sim::BatchSim>(model_, positions);
  } catch (...) {
    release();
    throw;
  }
}

BatchRenderer::~BatchRenderer() { release(); }

void BatchRenderer::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  release();
}

void BatchRenderer::release() {
  if (egl_) {
    const EglBinding previous = current_egl_binding();
    const bool ours_was_current = egl_->is_current();
    try {
      egl_->make_current();
      if (lent_ == Lent::kHostMapped) {
        gl_.BindBuffer(GL_PIXEL_PACK_BUFFER, pbo_);
        gl_.UnmapBuffer(GL_PIXEL_PACK_BUFFER);
        gl_.BindBuffer(GL_PIXEL_PACK_BUFFER, 0);
      } else if (lent_ == Lent::kDevice && interop_) {
        interop_->unmap(lent_stream_);
      }
      lent_ = Lent::kNone;
      host_mirror_.reset();
      interop_.reset();
      if (pbo_) gl_.DeleteBuffers(1, &pbo_);
      if (con_made_) mjr_freeContext(&con_);
    } catch (...) {
      // A context that cannot be made current frees its objects with it.
    }
    pbo_ = 0;
    con_made_ = false;
    egl_->release_current();
    egl_.reset();
    if (!ours_was_current) restore_egl_binding(previous);  // another library's context, current again
  }
  for (int i = 0; i < scenes_made_; ++i) mjv_freeScene(&scenes_[i]);
  scenes_made_ = 0;
  scenes_.clear();
  positions_.reset();
  if (model_) mj_deleteModel(model_);
  model_ = nullptr;
  has_frames_ = false;
}

void BatchRenderer::check_open() const {
  if (!egl_) throw std::runtime_error("the renderer is closed");
}

void BatchRenderer::check_not_lent() const {
  if (lent_ != Lent::kNone) {
    throw std::runtime_error(
        "the frames are lent (lend_host/lend_device): release them before drawing or lending again");
  }
}

void BatchRenderer::check_gl(const char* what) {
  GLenum error = gl_.GetError();
  if (error != GL_NO_ERROR) {
    while (gl_.GetError() != GL_NO_ERROR) {
    }
    char code[16];
    std::snprintf(code, sizeof(code), "0x%04x", error);
    throw std::runtime_error(std::string("OpenGL error ") + code + " while " + what);
  }
}

int BatchRenderer::nq() const {
  check_open();
  return static_cast<int>(model_->nq);
}
int BatchRenderer::egl_device() const {
  check_open();
  return egl_->device().index;
}
int BatchRenderer::cuda_device() const {
  check_open();
  return egl_->device().cuda_device;
}
bool BatchRenderer::software() const {
  check_open();
  return egl_->device().software;
}
int BatchRenderer::max_size() const {
  check_open();
  return max_size_;
}
int BatchRenderer::offscreen_samples() const {
  check_open();
  return con_.offSamples;
}
bool BatchRenderer::host_reads_through_cuda() const {
  check_open();
  return egl_->device().cuda_device >= 0 && cuda::device_count() > egl_->device().cuda_device;
}

void BatchRenderer::render(const double* qpos) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  const int64_t nq = model_->nq;
  const int64_t n = nq * config_.num_envs;
  if (n && !qpos) throw std::invalid_argument("qpos is null");
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(qpos[i])) throw std::invalid_argument("qpos has non-finite values (NaN or inf)");
  }
  int size = 0;
  double* rows = positions_->state_component(mjSTATE_QPOS, &size);
  const int64_t stride = positions_->nstate();
  for (int i = 0; i < config_.num_envs; ++i) {
    std::copy(qpos + i * nq, qpos + (i + 1) * nq, rows + i * stride);
  }
  check_not_lent();
  update_scenes(*positions_, 0, config_.num_envs, true);
  draw_and_read(0, config_.num_envs);
}

void BatchRenderer::render(sim::BatchSim& sim, int start, int count, bool kinematics) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  check_not_lent();
  if (sim.num_envs() != config_.num_envs) {
    throw std::invalid_argument("the simulator has " + std::to_string(sim.num_envs()) +
                                " simulations, the renderer " + std::to_string(config_.num_envs));
  }
  if (!same_layout(sim.model(), model_)) {
    throw std::invalid_argument("the simulator's model is not the renderer's (sizes differ)");
  }
  if (count < 0) count = config_.num_envs - start;
  if (start < 0 || count < 1 || start + count > config_.num_envs) {
    throw std::invalid_argument("render: frames [" + std::to_string(start) + ", " +
                                std::to_string(start + count) + ") are not a range of [0, " +
                                std::to_string(config_.num_envs) + ")");
  }
  update_scenes(sim, start, count, kinematics);
  draw_and_read(start, count);
}

void BatchRenderer::render_data(const std::vector<const mjModel*>& models, const std::vector<mjData*>& datas,
                                int start) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  check_not_lent();
  const int count = static_cast<int>(models.size());
  if (datas.size() != models.size()) throw std::invalid_argument("render_data: one data per model");
  if (start < 0 || count < 1 || start + count > config_.num_envs) {
    throw std::invalid_argument("render_data: frames [" + std::to_string(start) + ", " +
                                std::to_string(start + count) + ") are not a range of [0, " +
                                std::to_string(config_.num_envs) + ")");
  }
  for (int k = 0; k < count; ++k) {
    if (!models[k] || !datas[k]) throw std::invalid_argument("render_data: a model or data is null");
    if (!same_layout(models[k], model_)) {
      throw std::invalid_argument("render_data: model " + std::to_string(k) +
                                  " is not the renderer's (sizes differ)");
    }
  }
  has_frames_ = false;
  // The scene updates on the CPUs we may use; each thread keeps MuJoCo's first error to throw after the join.
  SceneArgs args{scenes_.data(), &option_, frame_cameras_.data(), overflow_.data(), false};
  const int threads = config_.nthread > 0 ? config_.nthread : sim::usable_cpus();
  std::vector<std::string> errors(count);
  cpu::parallel_for(count, threads, [&](int64_t k) {
    const mjModel* m = models[k];
    mjData* d = datas[k];
    const int frame = start + static_cast<int>(k);
    try {
      mj::guarded("mjv_updateScene", [&] { update_scene_one(m, d, frame, &args); });
    } catch (const std::exception& e) {
      errors[k] = e.what();
    }
  });
  for (const std::string& error : errors) {
    if (!error.empty()) throw std::runtime_error(error);
  }
  check_scenes(start, count);
  draw_and_read(start, count);
}

void BatchRenderer::set_frame_camera(int frame, const mjvCamera& camera) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  if (frame < 0 || frame >= config_.num_envs) {
    throw std::invalid_argument("frame " + std::to_string(frame) + " is outside [0, " +
                                std::to_string(config_.num_envs) + ")");
  }
  if (camera.type == mjCAMERA_FIXED && (camera.fixedcamid < 0 || camera.fixedcamid >= model_->ncam)) {
    throw std::invalid_argument("camera id " + std::to_string(camera.fixedcamid) + " is outside [0, " +
                                std::to_string(model_->ncam) + ")");
  }
  if (camera.type == mjCAMERA_TRACKING && (camera.trackbodyid < 0 || camera.trackbodyid >= model_->nbody)) {
    throw std::invalid_argument("track body id " + std::to_string(camera.trackbodyid) + " is outside [0, " +
                                std::to_string(model_->nbody) + ")");
  }
  frame_cameras_[frame] = camera;
}

mjvCamera BatchRenderer::frame_camera(int frame) const {
  check_open();
  if (frame < 0 || frame >= config_.num_envs) {
    throw std::invalid_argument("frame " + std::to_string(frame) + " is outside [0, " +
                                std::to_string(config_.num_envs) + ")");
  }
  return frame_cameras_[frame];
}

void BatchRenderer::set_option(const mjvOption& option) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  option_ = option;
}

void BatchRenderer::update_scenes(sim::BatchSim& sim, int start, int count, bool kinematics) {
  SceneArgs args{scenes_.data(), &option_, frame_cameras_.data(), overflow_.data(), kinematics};
  has_frames_ = false;
  if (count == config_.num_envs) {
    sim.apply(update_scene_one, &args, false);
  } else {
    std::vector<int> ids(count);
    for (int k = 0; k < count; ++k) ids[k] = start + k;
    sim.apply(update_scene_one, &args, false, ids.data(), count);
  }
  check_scenes(start, count);
}

void BatchRenderer::check_scenes(int start, int count) const {
  for (int i = start; i < start + count; ++i) {
    if (overflow_[i]) {
      throw std::runtime_error("the scene of frame " + std::to_string(i) + " filled max_geom=" +
                               std::to_string(config_.max_geom) + " geoms; pass a larger max_geom");
    }
  }
}

void BatchRenderer::draw_and_read(int start, int count) {
  ContextScope scope(*egl_);
  while (gl_.GetError() != GL_NO_ERROR) {
  }
  const GlFunctions gl = gl_;
  mjrContext* con = &con_;
  mjvScene* scenes = scenes_.data();
  const int first = start, last = start + count, w = config_.width, h = config_.height;
  const int64_t frame_bytes = frame_bytes_;
  const unsigned int pbo = pbo_;
  mj::guarded("mjr_render", [&] {
    const mjrRect viewport = {0, 0, w, h};
    mjr_setBuffer(mjFB_OFFSCREEN, con);
    gl.BindBuffer(GL_PIXEL_PACK_BUFFER, pbo);
    for (int i = first; i < last; ++i) {
      mjr_render(viewport, scenes + i, con);
      // Resolve the multisampled frame as mjr_readPixels does, then read it
      // into its slot of the pixel buffer (asynchronous on a GPU).
      if (con->offFBO_r) {
        gl.BindFramebuffer(GL_READ_FRAMEBUFFER, con->offFBO);
        gl.BindFramebuffer(GL_DRAW_FRAMEBUFFER, con->offFBO_r);
        gl.BlitFramebuffer(0, 0, w, h, 0, 0, w, h, GL_COLOR_BUFFER_BIT, GL_NEAREST);
        gl.BindFramebuffer(GL_READ_FRAMEBUFFER, con->offFBO_r);
      } else {
        gl.BindFramebuffer(GL_READ_FRAMEBUFFER, con->offFBO);
      }
      gl.ReadBuffer(GL_COLOR_ATTACHMENT0);
      gl.ReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE,
                    reinterpret_cast<void*>(static_cast<uintptr_t>(frame_bytes * i)));
      gl.BindFramebuffer(GL_FRAMEBUFFER, con->offFBO);
    }
    gl.BindBuffer(GL_PIXEL_PACK_BUFFER, 0);
  });
  check_gl("drawing the frames");
  has_frames_ = true;
}

int64_t BatchRenderer::top_row_offset() const {
  return static_cast<int64_t>(config_.height - 1) * config_.width * 4;
}

FrameLayout BatchRenderer::layout(const uint8_t* pixels) const {
  const int64_t row_bytes = static_cast<int64_t>(config_.width) * 4;
  FrameLayout l;
  l.data = pixels ? pixels + top_row_offset() : nullptr;  // top row of frame 0 (none: strides only)
  l.num_frames = config_.num_envs;
  l.height = config_.height;
  l.width = config_.width;
  l.pixel_stride = 4;
  l.row_stride = -row_bytes;
  l.frames_per_row = 1;
  l.frame_col_stride = 0;
  l.frame_row_stride = frame_bytes_;
  return l;
}

const uint8_t* BatchRenderer::map_host_locked() {
  check_open();
  check_not_lent();
  if (!has_frames_) throw std::runtime_error("no frames yet: render first");
  ContextScope scope(*egl_);
  if (host_reads_through_cuda()) {
    cuda::GlBufferInterop& interop = interop_locked();
    if (!host_mirror_) {
      host_mirror_ = std::make_unique<cuda::HostMirror>(static_cast<size_t>(frame_bytes_ * config_.num_envs),
                                                        egl_->device().cuda_device);
    }
    const uint8_t* pixels = host_mirror_->read(interop);
    lent_ = Lent::kHostCopy;
    return pixels;
  }
  gl_.BindBuffer(GL_PIXEL_PACK_BUFFER, pbo_);
  auto* pixels = static_cast<const uint8_t*>(gl_.MapBufferRange(
      GL_PIXEL_PACK_BUFFER, 0, static_cast<GLsizeiptr>(frame_bytes_ * config_.num_envs), GL_MAP_READ_BIT));
  gl_.BindBuffer(GL_PIXEL_PACK_BUFFER, 0);
  if (!pixels) {
    check_gl("mapping the pixel buffer");
    throw std::runtime_error("glMapBufferRange returned no memory for the pixel buffer");
  }
  lent_ = Lent::kHostMapped;
  return pixels;
}

void BatchRenderer::unmap_host_locked() {
  if (lent_ == Lent::kHostCopy) {  // the mirror stays; nothing of GL's is held
    lent_ = Lent::kNone;
    return;
  }
  ContextScope scope(*egl_);
  lent_ = Lent::kNone;
  gl_.BindBuffer(GL_PIXEL_PACK_BUFFER, pbo_);
  gl_.UnmapBuffer(GL_PIXEL_PACK_BUFFER);
  gl_.BindBuffer(GL_PIXEL_PACK_BUFFER, 0);
  check_gl("reading the pixel buffer");
}

cuda::GlBufferInterop& BatchRenderer::interop_locked() {
  check_open();
  check_not_lent();
  if (!has_frames_) throw std::runtime_error("no frames yet: render first");
  if (egl_->device().cuda_device < 0) {
    throw std::runtime_error(
        "CUDA output needs an EGL device that is a CUDA device (the NVIDIA driver's EGL); this "
        "renderer runs on " +
        std::string(egl_->device().software ? "software (Mesa llvmpipe)" : "a non-CUDA") + " EGL device");
  }
  // The caller holds a ContextScope: registering, mapping and unmapping happen
  // with the GL context current, as the interop needs.
  if (!interop_) interop_ = std::make_unique<cuda::GlBufferInterop>(pbo_, egl_->device().cuda_device);
  return *interop_;
}

const uint8_t* BatchRenderer::lend_host() {
  std::lock_guard<std::mutex> lock(mutex_);
  return map_host_locked();
}

const uint8_t* BatchRenderer::lend_device(void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  ContextScope scope(*egl_);
  cuda::GlBufferInterop& interop = interop_locked();
  size_t bytes = 0;
  const uint8_t* pixels = interop.map(stream, &bytes);
  if (static_cast<int64_t>(bytes) < frame_bytes_ * config_.num_envs) {
    interop.unmap(stream);
    throw std::runtime_error("the mapped pixel buffer is smaller than the frames");
  }
  lent_ = Lent::kDevice;
  lent_stream_ = stream;
  return pixels;
}

void BatchRenderer::release_frames() {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  if (lent_ == Lent::kHostMapped || lent_ == Lent::kHostCopy) {
    unmap_host_locked();
  } else if (lent_ == Lent::kDevice) {
    ContextScope scope(*egl_);
    lent_ = Lent::kNone;
    interop_->unmap(lent_stream_);
  }
}

void BatchRenderer::with_host_frames(const FramesFn& fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint8_t* pixels = map_host_locked();
  try {
    fn(pixels, layout(pixels));
  } catch (...) {
    unmap_host_locked();
    throw;
  }
  unmap_host_locked();
}

void BatchRenderer::with_device_frames(const FramesFn& fn, void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  ContextScope scope(*egl_);
  cuda::GlBufferInterop& interop = interop_locked();
  const int64_t bytes = frame_bytes_ * config_.num_envs;
  interop.with_mapped(stream, [&](const uint8_t* pixels, size_t size) {
    if (static_cast<int64_t>(size) < bytes) {
      throw std::runtime_error("the mapped pixel buffer is smaller than the frames");
    }
    fn(pixels, layout(pixels));
  });
}

void BatchRenderer::copy_frames(uint8_t* out) {
  if (!out) throw std::invalid_argument("out is null");
  with_host_frames([&](const uint8_t*, const FrameLayout& l) {
    const int64_t rows = static_cast<int64_t>(l.num_frames) * l.height;
    const int64_t pixels = rows * l.width;
    int threads = static_cast<int>(std::min<int64_t>(sim::usable_cpus(), 1 + pixels / (1 << 18)));
    cpu::parallel_for(rows, threads, [&](int64_t k) {
      const int64_t i = k / l.height, r = k % l.height;
      const uint8_t* src = l.data + i * l.frame_row_stride + r * l.row_stride;
      uint8_t* dst = out + k * l.width * 3;
      for (int c = 0; c < l.width; ++c) {
        dst[3 * c] = src[4 * c];
        dst[3 * c + 1] = src[4 * c + 1];
        dst[3 * c + 2] = src[4 * c + 2];
      }
    });
  });
}

void BatchRenderer::copy_frames_cuda(uint8_t* out, void* stream) {
  if (!out) throw std::invalid_argument("out is null");
  with_device_frames([&](const uint8_t*, const FrameLayout& l) { cuda::copy_frames_rgb(l, out, stream); },
                     stream);
}

}  // namespace vlmrm::render
