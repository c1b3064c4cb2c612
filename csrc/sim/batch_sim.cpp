#include "sim/batch_sim.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include <mujoco/mjxmacro.h>

#include "sim/mj_guard.h"

namespace vlmrm::sim {
namespace {

struct FieldInfo {
  const char* name;
  size_t member;  // offsetof(mjData, name)
  bool is_mjtnum;
  int64_t size;  // elements for the model
};

std::vector<FieldInfo> data_fields(const mjModel* m) {
  std::vector<FieldInfo> fields;
  // XNV (fields not needed by mjvScene) expands to X in mjxmacro.h.
#define X(type, name, nr, nc)                                                         \
  fields.push_back({#name, offsetof(mjData, name), std::is_same<type, mjtNum>::value, \
                    m ? static_cast<int64_t>(m->nr) * (nc) : 0});
  MJDATA_POINTERS
#undef X
  return fields;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Everything a per-simulation function needs, as plain pointers: functions run
// by mjb_apply may be unwound by longjmp when MuJoCo raises.
struct OutputCopy {
  const OutputSlot* slots;
  size_t nslots;
  int64_t width;
  double* outputs;
  int32_t* warnings;
};

void write_outputs(const OutputCopy& c, const mjData* d, int sim) {
  double* row = c.outputs + static_cast<int64_t>(sim) * c.width;
  for (size_t k = 0; k < c.nslots; ++k) {
    const OutputSlot& s = c.slots[k];
    const mjtNum* field = *reinterpret_cast<mjtNum* const*>(reinterpret_cast<const char*>(d) + s.member);
    std::memcpy(row + s.column, field + s.start, sizeof(double) * s.count);
  }
}

struct StepArgs {
  OutputCopy out;
  const double* ctrl;
  int frame_skip;
  bool rne_post_constraint;
};

void step_one(const mjModel* m, mjData* d, int sim, void* arg) {
  const StepArgs* a = static_cast<const StepArgs*>(arg);
  int before[mjNWARNING];
  for (int w = 0; w < mjNWARNING; ++w) before[w] = d->warning[w].number;
  if (m->nu) mju_copy(d->ctrl, a->ctrl + static_cast<int64_t>(sim) * m->nu, m->nu);
  for (int k = 0; k < a->frame_skip; ++k) mj_step(m, d);
  if (a->rne_post_constraint) mj_rnePostConstraint(m, d);
  int32_t bits = 0;
  for (int w = 0; w < mjNWARNING; ++w) {
    if (d->warning[w].number != before[w]) bits |= 1 << w;
  }
  a->out.warnings[sim] = bits;
  write_outputs(a->out, d, sim);
}

struct ResetArgs {
  OutputCopy out;
  const int* row_of_sim;  // num_envs entries: row of qpos/qvel for a simulation
  const double* qpos;     // null: the model's qpos0
  const double* qvel;     // null: zeros
};

void reset_one(const mjModel* m, mjData* d, int sim, void* arg) {
  const ResetArgs* a = static_cast<const ResetArgs*>(arg);
  mj_resetData(m, d);
  int64_t row = a->row_of_sim[sim];
  if (a->qpos) mju_copy(d->qpos, a->qpos + row * m->nq, m->nq);
  if (a->qvel) mju_copy(d->qvel, a->qvel + row * m->nv, m->nv);
  mj_forward(m, d);
  int32_t bits = 0;
  for (int w = 0; w < mjNWARNING; ++w) {
    if (d->warning[w].number) bits |= 1 << w;
  }
  a->out.warnings[sim] = bits;
  write_outputs(a->out, d, sim);
}

bool all_finite(const double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
  }
  return true;
}

}  // namespace

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

std::vector<std::string> output_field_names() {
  std::vector<std::string> names;
  for (const auto& f : data_fields(nullptr)) {
    if (f.is_mjtnum) names.push_back(f.name);
  }
  return names;
}

BatchSim::BatchSim(const mjModel* model, const SimConfig& config) : config_(config) {
  if (!model) throw std::invalid_argument("model is null");
  if (config_.num_envs < 1) throw std::invalid_argument("num_envs must be >= 1");
  if (config_.frame_skip < 1) throw std::invalid_argument("frame_skip must be >= 1");

  // Resolve the outputs before allocating anything.
  auto fields = data_fields(model);
  for (const auto& request : config_.outputs) {
    auto it = std::find_if(fields.begin(), fields.end(),
                           [&](const FieldInfo& f) { return request.name == f.name; });
    if (it == fields.end() || !it->is_mjtnum) {
      throw std::invalid_argument(
          "output '" + request.name +
          "' is not an mjData field of type mjtNum; choose from: " + join(output_field_names()));
    }
    for (const auto& slot : slots_) {
      if (slot.name == request.name) {
        throw std::invalid_argument("output '" + request.name + "' is requested twice");
      }
    }
    OutputSlot slot;
    slot.name = request.name;
    slot.field_size = it->size;
    slot.member = it->member;
    slot.start = request.start;
    slot.count = request.count < 0 ? it->size - request.start : request.count;
    if (request.start < 0 || slot.count < 0 || slot.start + slot.count > it->size) {
      throw std::invalid_argument("output '" + request.name + "' slice [" + std::to_string(request.start) +
                                  ", " + std::to_string(request.start + slot.count) +
                                  ") is outside the field's " + std::to_string(it->size) + " values");
    }
    slot.column = output_width_;
    output_width_ += slot.count;
    slots_.push_back(slot);
  }

  mjBatchConfig batch_config;
  mjb_defaultConfig(&batch_config);
  batch_config.nthread = config_.nthread > 0 ? config_.nthread : usable_cpus();
  batch_config.persistent = config_.persistent ? 1 : 0;
  char error[1024] = "";
  mjBatch* batch = nullptr;
  mj::guarded("mjb_makeBatch",
              [&] { batch = mjb_makeBatch(model, config_.num_envs, &batch_config, error, sizeof(error)); });
  if (!batch) throw std::runtime_error(std::string("mjb_makeBatch failed: ") + error);
  batch_ = batch;

  outputs_.assign(static_cast<size_t>(config_.num_envs) * output_width_, 0.0);
  warnings_.assign(config_.num_envs, 0);
  try {
    // Start as after a reset to the model's defaults, outputs included.
    std::vector<int> all(config_.num_envs);
    for (int i = 0; i < config_.num_envs; ++i) all[i] = i;
    reset(all.data(), config_.num_envs, nullptr, nullptr);
  } catch (...) {
    mjb_deleteBatch(batch_);
    throw;
  }
}

BatchSim::~BatchSim() { mjb_deleteBatch(batch_); }

int BatchSim::nthread() const { return mjb_nthread(batch_); }
const mjModel* BatchSim::model() const { return mjb_model(batch_); }
int BatchSim::nstate() const { return mjb_nstate(batch_); }

double* BatchSim::state_component(int component, int* size) {
  bool one_bit = component > 0 && (component & (component - 1)) == 0;
  if (!one_bit || !(component & mjSTATE_INTEGRATION)) {
    throw std::invalid_argument("state component " + std::to_string(component) +
                                " is not one bit of mjSTATE_INTEGRATION");
  }
  double* ptr = nullptr;
  mj::guarded("mjb_stateComponent", [&] { ptr = mjb_stateComponent(batch_, component, size); });
  return ptr;
}

void BatchSim::step(const double* ctrl, int start, int count) {
  const mjModel* m = model();
  if (count < 0) count = config_.num_envs - start;
  if (start < 0 || count < 1 || start + count > config_.num_envs) {
    throw std::invalid_argument("step: simulations [" + std::to_string(start) + ", " +
                                std::to_string(start + count) + ") are not a range of [0, " +
                                std::to_string(config_.num_envs) + ")");
  }
  const int64_t first = static_cast<int64_t>(start) * m->nu;
  const int64_t n = static_cast<int64_t>(count) * m->nu;
  if (n && !ctrl) throw std::invalid_argument("ctrl is null");
  if (!all_finite(ctrl + first, n)) {
    throw std::invalid_argument("ctrl has non-finite values (NaN or inf); no simulation was stepped");
  }
  StepArgs args{{slots_.data(), slots_.size(), output_width_, outputs_.data(), warnings_.data()},
                ctrl,
                config_.frame_skip,
                config_.rne_post_constraint};
  std::vector<int> ids;
  if (count < config_.num_envs) {
    ids.resize(count);
    for (int k = 0; k < count; ++k) ids[k] = start + k;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  apply_locked(step_one, &args, true, ids.empty() ? nullptr : ids.data(), static_cast<int>(ids.size()),
               "step");
}

void BatchSim::reset(const int* ids, int n, const double* qpos, const double* qvel) {
  const mjModel* m = model();
  if (n < 0 || (n > 0 && !ids)) throw std::invalid_argument("reset needs ids");
  if (n == 0) return;
  std::vector<int> row_of_sim(config_.num_envs, -1);
  for (int k = 0; k < n; ++k) {
    int id = ids[k];
    if (id < 0 || id >= config_.num_envs) {
      throw std::invalid_argument("reset: simulation id " + std::to_string(id) + " is outside [0, " +
                                  std::to_string(config_.num_envs) + ")");
    }
    if (row_of_sim[id] >= 0) {
      throw std::invalid_argument("reset: simulation id " + std::to_string(id) + " appears twice");
    }
    row_of_sim[id] = k;
  }
  if (qpos && !all_finite(qpos, static_cast<int64_t>(n) * m->nq)) {
    throw std::invalid_argument("reset: qpos has non-finite values");
  }
  if (qvel && !all_finite(qvel, static_cast<int64_t>(n) * m->nv)) {
    throw std::invalid_argument("reset: qvel has non-finite values");
  }
  std::vector<int> sorted;
  sorted.reserve(n);
  for (int i = 0; i < config_.num_envs; ++i) {
    if (row_of_sim[i] >= 0) sorted.push_back(i);
  }
  ResetArgs args{{slots_.data(), slots_.size(), output_width_, outputs_.data(), warnings_.data()},
                 row_of_sim.data(),
                 qpos,
                 qvel};
  std::lock_guard<std::mutex> lock(mutex_);
  apply_locked(reset_one, &args, true, sorted.data(), n, "reset");
}

void BatchSim::apply(mjfBatchFunc fn, void* arg, bool save, const int* ids, int n) {
  std::lock_guard<std::mutex> lock(mutex_);
  apply_locked(fn, arg, save, ids, n, "apply");
}

void BatchSim::apply_locked(mjfBatchFunc fn, void* arg, bool save, const int* ids, int n, const char* what) {
  int failed = 0;
  mjBatch* batch = batch_;
  mj::guarded(what, [&] { failed = mjb_apply(batch, ids, n, fn, arg, save ? 1 : 0); });
  if (failed == 0) return;
  const int* status = mjb_status(batch_);
  std::vector<int> failed_ids;
  int count = ids ? n : config_.num_envs;
  for (int k = 0; k < count; ++k) {
    int sim = ids ? ids[k] : k;
    if (status[sim]) failed_ids.push_back(sim);
  }
  std::string shown;
  for (size_t k = 0; k < failed_ids.size() && k < 5; ++k) {
    shown += (k ? ", " : "") + std::to_string(failed_ids[k]);
  }
  if (failed_ids.size() > 5) shown += ", ...";
  std::string message = std::string(what) + ": MuJoCo raised an error in " +
                        std::to_string(failed_ids.size()) + " simulation(s) (" + shown + ")";
  if (!failed_ids.empty()) {
    message += "; simulation " + std::to_string(failed_ids[0]) + ": " + mjb_error(batch_, failed_ids[0]);
  }
  message += ". Those simulations kept the state they had before the call.";
  throw SimulationError(message, failed_ids);
}

}  // namespace vlmrm::sim
