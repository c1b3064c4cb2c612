// Host emulation of the CUDA built-ins that our kernel bodies use, so that the
// CPU tests execute the real device code (cuda/*_kernel.cuh) on machines
// without a GPU. Only for tests: it checks, it does not go fast.
//
// Each CUDA thread of a block is a fiber (ucontext) with its own stack. A
// block runs its threads one at a time, each until it reaches a barrier
// (__syncthreads, or one step of a warp shuffle) or returns, in an order the
// caller picks: forward, reverse, or shuffled with one warp held back until
// no other thread can run. A missing barrier between a shared-memory write
// and a read (or a read and the next write) then shows up as an
// order-dependent result. The
// emulation is strict where CUDA leaves behaviour undefined: every thread of
// the block must reach each __syncthreads, and all 32 lanes each shuffle.
// Reads through __ldg are checked against the buffers the caller declared;
// dynamic shared memory ends at an inaccessible page and starts after a
// canary, and is filled with a pattern before each block so that reading what
// no thread wrote gives wrong results rather than lucky zeros.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cpu/float_convert.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define VLMRM_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::vlmrm::emulation::dynamic_shared())

namespace vlmrm::emulation {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// The built-in variables of the thread that runs now (set by the scheduler).
extern Dim3 thread_idx, block_idx, block_dim, grid_dim;

void* dynamic_shared();
void sync_block();
void sync_warp();
float* warp_slots();  // 32 floats for the running thread's warp
bool check_read(const void* ptr, size_t bytes);
void fail(const std::string& message);

// Which thread of a block runs first in each round between barriers.
enum class Order : int { kForward = 0, kReverse = 1, kShuffled = 2 };

struct Readable {
  const void* begin;
  size_t bytes;
};

struct LaunchConfig {
  unsigned blocks = 1;
  unsigned threads = 1;
  size_t shared_bytes = 0;
  Order order = Order::kForward;
  uint64_t seed = 0;               // for Order::kShuffled
  std::vector<Readable> readable;  // where __ldg may read
};

// Runs `thread_body` (the kernel call) for every thread of every block.
// Throws std::runtime_error describing the first violation: a read outside
// the declared buffers, a barrier not every thread reaches, a write in front
// of the shared memory. Not reentrant: one launch at a time per process.
void launch(const LaunchConfig& config, const std::function<void()>& thread_body);

}  // namespace vlmrm::emulation

#define threadIdx (::vlmrm::emulation::thread_idx)
#define blockIdx (::vlmrm::emulation::block_idx)
#define blockDim (::vlmrm::emulation::block_dim)
#define gridDim (::vlmrm::emulation::grid_dim)

using std::max;
using std::min;

struct __half {
  uint16_t bits;
};
struct __nv_bfloat16 {
  uint16_t bits;
};

inline __half __float2half_rn(float v) { return {vlmrm::cpu::float_to_half(v)}; }
inline float __half2float(__half v) { return vlmrm::cpu::half_to_float(v.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float v) { return {vlmrm::cpu::float_to_bfloat16(v)}; }
inline float __bfloat162float(__nv_bfloat16 v) { return vlmrm::cpu::bfloat16_to_float(v.bits); }

// Host float arithmetic is IEEE round-to-nearest; the emulation target is
// compiled without floating-point contraction.
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }

template <typename T>
inline T __ldg(const T* ptr) {
  return vlmrm::emulation::check_read(ptr, sizeof(T)) ? *ptr : T{};
}

inline void __syncthreads() { vlmrm::emulation::sync_block(); }

inline float __shfl_xor_sync(unsigned mask, float value, int lane_mask) {
  if (mask != 0xffffffffu) vlmrm::emulation::fail("__shfl_xor_sync with a partial mask is not emulated");
  float* slots = vlmrm::emulation::warp_slots();
  const unsigned lane = threadIdx.x & 31u;
  slots[lane] = value;
  vlmrm::emulation::sync_warp();  // every lane has published its value
  const float result = slots[(lane ^ static_cast<unsigned>(lane_mask)) & 31u];
  vlmrm::emulation::sync_warp();  // every lane has read before the next exchange
  return result;
}
