// N simulations of one MuJoCo model on MuJoCo's batch thread pool (mjbatch.h).
// A step reproduces gymnasium's MujocoEnv.do_simulation on each simulation bit
// for bit: write ctrl, frame_skip x mj_step, optionally mj_rnePostConstraint,
// then copy the requested mjData fields into one (N x width) float64 buffer
// from that same mjData, so derived fields are what gymnasium reads after a
// step. Knows nothing of Python.
#pragma once

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <mujoco/mjbatch.h>
#include <mujoco/mujoco.h>

namespace vlmrm::sim {

// A flattened mjData field, or the slice [start, start + count) of it.
struct OutputField {
  std::string name;
  int64_t start = 0;
  int64_t count = -1;  // -1: to the end of the field
};

// Where a resolved output lives in a row of the output buffer.
struct OutputSlot {
  std::string name;
  int64_t column = 0;      // first column in the output row
  int64_t count = 0;       // values
  int64_t start = 0;       // first element of the flattened field
  int64_t field_size = 0;  // elements of the whole field
  size_t member = 0;       // offsetof(mjData, <field pointer>)
};

struct SimConfig {
  int num_envs = 1;
  int frame_skip = 1;
  bool rne_post_constraint = false;
  int nthread = 0;         // threads including the caller's; <= 0: the CPUs this process may use
  bool persistent = true;  // one mjData per simulation (gymnasium's semantics for every field)
  std::vector<OutputField> outputs;
};

// MuJoCo raised an error in some simulations of a call; they kept the state
// they had before it.
class SimulationError : public std::runtime_error {
 public:
  SimulationError(const std::string& message, std::vector<int> ids)
      : std::runtime_error(message), ids_(std::move(ids)) {}
  const std::vector<int>& ids() const { return ids_; }

 private:
  std::vector<int> ids_;
};

// mjData fields of type mjtNum that can be outputs, with their sizes for m.
std::vector<std::string> output_field_names();

class BatchSim {
 public:
  // Copies `model`; throws std::invalid_argument on bad configuration and
  // std::runtime_error if MuJoCo cannot make the batch.
  BatchSim(const mjModel* model, const SimConfig& config);
  ~BatchSim();
  BatchSim(const BatchSim&) = delete;
  BatchSim& operator=(const BatchSim&) = delete;

  // Simulations [start, start + count) (count < 0: to the end): ctrl rows of
  // those simulations (ctrl is num_envs x nu, row-major), frame_skip steps,
  // outputs. Throws std::invalid_argument on a bad range or non-finite controls
  // before touching any state, SimulationError if MuJoCo raised in some.
  void step(const double* ctrl, int start = 0, int count = -1);

  // Simulations ids[0..n) (distinct, any order) to the model's defaults
  // (mj_resetData) with qpos/qvel rows k = 0..n-1, then mj_forward and outputs,
  // as gymnasium's reset + set_state. qvel may be null (zeros).
  void reset(const int* ids, int n, const double* qpos, const double* qvel);

  // Runs fn on each simulation's model and data on the batch's threads (all
  // simulations when ids is null); save: write the state back afterwards.
  void apply(mjfBatchFunc fn, void* arg, bool save, const int* ids = nullptr, int n = 0);

  int num_envs() const { return config_.num_envs; }
  int frame_skip() const { return config_.frame_skip; }
  bool rne_post_constraint() const { return config_.rne_post_constraint; }
  bool persistent() const { return config_.persistent; }
  int nthread() const;
  const mjModel* model() const;  // the batch's own copy

  // State rows: component (one mjtState bit of mjSTATE_INTEGRATION) of
  // simulation i starts at state_component(c) + i * nstate().
  int nstate() const;
  double* state_component(int component, int* size);

  // Outputs: num_envs rows of output_width() values.
  double* outputs() { return outputs_.data(); }
  int64_t output_width() const { return output_width_; }
  const std::vector<OutputSlot>& output_slots() const { return slots_; }

  // Per simulation: bit w set when MuJoCo raised warning w (mjtWarning) during
  // its last step or reset, e.g. mjWARN_BADQACC after an instability (MuJoCo
  // then resets that simulation's data, as in a plain mj_step loop).
  const int32_t* last_warnings() const { return warnings_.data(); }

  // Serializes calls from several threads.
  std::mutex& mutex() { return mutex_; }

 private:
  void apply_locked(mjfBatchFunc fn, void* arg, bool save, const int* ids, int n, const char* what);

  SimConfig config_;
  mjBatch* batch_ = nullptr;
  std::vector<OutputSlot> slots_;
  int64_t output_width_ = 0;
  std::vector<double> outputs_;
  std::vector<int32_t> warnings_;
  std::mutex mutex_;
};

// Threads this process may run on (sched_getaffinity), at least 1.
int usable_cpus();

}  // namespace vlmrm::sim
