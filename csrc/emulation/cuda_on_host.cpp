#include "emulation/cuda_on_host.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <csetjmp>
#include <csignal>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>

namespace vlmrm::emulation {

Dim3 thread_idx, block_idx, block_dim, grid_dim;

namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr uint8_t kSharedFill = 0xA5;  // what a block finds in shared memory
constexpr uint8_t kCanary = 0x5A;      // in front of the shared memory

enum class State { kRunnable, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  ucontext_t context;
  State state = State::kDone;
};

// Dynamic shared memory placed so that it ends where an inaccessible page
// starts; the bytes in front of it, to the start of its first page, hold a
// canary checked after every block.
class SharedMemory {
 public:
  explicit SharedMemory(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t aligned = (bytes + 15) / 16 * 16;
    const size_t pages = (aligned + page - 1) / page + 1;  // + one guard page
    mapped_bytes_ = (pages + 1) * page;                    // + one canary page in front
    void* region = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) throw std::runtime_error("emulation: mmap of shared memory failed");
    region_ = static_cast<uint8_t*>(region);
    uint8_t* guard = region_ + mapped_bytes_ - page;
    mprotect(guard, page, PROT_NONE);
    data_ = guard - aligned;
    bytes_ = aligned;
  }
  ~SharedMemory() { munmap(region_, mapped_bytes_); }
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  void reset() {
    std::memset(region_, kCanary, static_cast<size_t>(data_ - region_));
    std::memset(data_, kSharedFill, bytes_);
  }
  bool front_intact() const {
    return std::all_of(region_, data_, [](uint8_t b) { return b == kCanary; });
  }
  uint8_t* data() { return data_; }

 private:
  uint8_t* region_ = nullptr;
  size_t mapped_bytes_ = 0;
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

struct Launch {
  const LaunchConfig* config = nullptr;
  const std::function<void()>* body = nullptr;
  ucontext_t scheduler;
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<char[]>> stacks;  // uninitialized: only what a thread uses is touched
  std::vector<float> warp_slots;
  SharedMemory* shared = nullptr;
  std::string error;
};

Launch* g_launch = nullptr;

// A fault inside a kernel (past the end of shared memory, a stray pointer)
// jumps back to launch(), which reports it as an error instead of a crash.
sigjmp_buf g_fault_return;
volatile sig_atomic_t g_fault_address = 0;

void on_fault(int, siginfo_t* info, void*) {
  g_fault_address = static_cast<sig_atomic_t>(reinterpret_cast<uintptr_t>(info->si_addr) & 0x7fffffff);
  siglongjmp(g_fault_return, 1);
}

void run_current_thread() {
  (*g_launch->body)();
  g_launch->fibers[thread_idx.x].state = State::kDone;
  // Returning resumes the scheduler through uc_link.
}

void wait_at(State state) {
  Fiber& fiber = g_launch->fibers[thread_idx.x];
  fiber.state = state;
  swapcontext(&fiber.context, &g_launch->scheduler);
}

// Releases the threads waiting at a barrier that all of its threads reached.
// Returns false when the block can make no progress (a divergent barrier).
// Threads still runnable (skipped by a shuffled round) count as progress.
bool release_barriers(Launch& l, unsigned threads) {
  size_t at_block = 0, done = 0, runnable = 0;
  for (const Fiber& f : l.fibers) {
    at_block += f.state == State::kAtBlockBarrier;
    done += f.state == State::kDone;
    runnable += f.state == State::kRunnable;
  }
  if (at_block == threads) {
    for (Fiber& f : l.fibers) f.state = State::kRunnable;
    return true;
  }
  bool released = false;
  for (unsigned first = 0; first < threads; first += 32) {
    const unsigned end = std::min(threads, first + 32);
    bool all = true;
    for (unsigned t = first; t < end; ++t) all = all && l.fibers[t].state == State::kAtWarpBarrier;
    if (!all) continue;
    for (unsigned t = first; t < end; ++t) l.fibers[t].state = State::kRunnable;
    released = true;
  }
  if (released || runnable > 0 || done == threads) return true;
  size_t at_warp = threads - at_block - done;
  l.error = "block " + std::to_string(block_idx.x) + " cannot go on: " + std::to_string(at_block) +
            " threads wait at __syncthreads, " + std::to_string(at_warp) + " at a warp shuffle, " +
            std::to_string(done) + " have returned (every thread must reach each barrier)";
  return false;
}

}  // namespace

void* dynamic_shared() { return g_launch->shared->data(); }

void sync_block() { wait_at(State::kAtBlockBarrier); }

void sync_warp() { wait_at(State::kAtWarpBarrier); }

float* warp_slots() { return g_launch->warp_slots.data() + (thread_idx.x / 32) * 32; }

void fail(const std::string& message) {
  if (g_launch->error.empty()) {
    g_launch->error =
        "block " + std::to_string(block_idx.x) + ", thread " + std::to_string(thread_idx.x) + ": " + message;
  }
}

bool check_read(const void* ptr, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(ptr);
  for (const Readable& r : g_launch->config->readable) {
    const auto* begin = static_cast<const uint8_t*>(r.begin);
    if (p >= begin && p + bytes <= begin + r.bytes) return true;
  }
  fail("__ldg of " + std::to_string(bytes) + " bytes at " + std::to_string(reinterpret_cast<uintptr_t>(ptr)) +
       " is outside every buffer the kernel may read");
  return false;
}

void launch(const LaunchConfig& config, const std::function<void()>& thread_body) {
  if (g_launch != nullptr) throw std::runtime_error("emulation: one launch at a time");
  if (config.threads == 0 || config.threads > 1024 || config.blocks == 0) {
    throw std::runtime_error("emulation: a launch needs 1 to 1024 threads and at least one block");
  }
  Launch l;
  l.config = &config;
  l.body = &thread_body;
  l.fibers.resize(config.threads);
  for (unsigned t = 0; t < config.threads; ++t) l.stacks.emplace_back(new char[kStackBytes]);
  l.warp_slots.assign((config.threads + 31) / 32 * 32, 0.f);
  SharedMemory shared(config.shared_bytes);
  l.shared = &shared;

  std::vector<unsigned> order(config.threads);
  std::iota(order.begin(), order.end(), 0u);
  if (config.order == Order::kReverse) std::reverse(order.begin(), order.end());
  std::mt19937_64 rng(config.seed);

  struct sigaction fault{}, previous_segv{}, previous_bus{};
  fault.sa_sigaction = on_fault;
  fault.sa_flags = SA_SIGINFO;
  sigemptyset(&fault.sa_mask);
  sigaction(SIGSEGV, &fault, &previous_segv);
  sigaction(SIGBUS, &fault, &previous_bus);
  auto restore_handlers = [&] {
    sigaction(SIGSEGV, &previous_segv, nullptr);
    sigaction(SIGBUS, &previous_bus, nullptr);
  };
  if (sigsetjmp(g_fault_return, 1) != 0) {
    g_launch = nullptr;
    restore_handlers();
    throw std::runtime_error("emulated kernel: block " + std::to_string(block_idx.x) + ", thread " +
                             std::to_string(thread_idx.x) + " faulted (low address bits " +
                             std::to_string(static_cast<long>(g_fault_address)) +
                             "): a read or write past the end of shared memory, or a stray pointer");
  }

  g_launch = &l;
  grid_dim = {config.blocks, 1, 1};
  block_dim = {config.threads, 1, 1};
  for (unsigned b = 0; b < config.blocks && l.error.empty(); ++b) {
    block_idx = {b, 0, 0};
    // Shuffled: a random order each round, and one warp that runs only when
    // no other thread can, so the other warps reach the next barrier (and
    // write what comes after it) before the laggard reads what came before.
    const bool shuffled = config.order == Order::kShuffled;
    const unsigned laggard =
        shuffled ? static_cast<unsigned>(rng() % ((config.threads + 31) / 32)) : config.threads;
    shared.reset();
    for (unsigned t = 0; t < config.threads; ++t) {
      Fiber& f = l.fibers[t];
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = l.stacks[t].get();
      f.context.uc_stack.ss_size = kStackBytes;
      f.context.uc_link = &l.scheduler;
      makecontext(&f.context, run_current_thread, 0);
      f.state = State::kRunnable;
    }
    bool progress = true;
    while (progress && l.error.empty()) {
      if (shuffled) std::shuffle(order.begin(), order.end(), rng);
      bool ran = false;
      for (int pass = 0; pass < 2 && !ran; ++pass) {
        for (unsigned t : order) {
          if (l.fibers[t].state != State::kRunnable || (pass == 0) == (t / 32 == laggard)) continue;
          thread_idx = {t, 0, 0};
          swapcontext(&l.scheduler, &l.fibers[t].context);
          ran = true;
        }
      }
      bool all_done = true;
      for (const Fiber& f : l.fibers) all_done = all_done && f.state == State::kDone;
      if (all_done) break;
      progress = release_barriers(l, config.threads);
    }
    if (l.error.empty() && !shared.front_intact()) {
      l.error = "block " + std::to_string(b) + " wrote in front of its dynamic shared memory";
    }
  }
  g_launch = nullptr;
  restore_handlers();
  if (!l.error.empty()) throw std::runtime_error("emulated kernel: " + l.error);
}

}  // namespace vlmrm::emulation
