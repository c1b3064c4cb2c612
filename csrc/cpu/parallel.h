// A minimal fork-join loop for the CPU twins: splits [0, n) into contiguous
// chunks over at most `max_threads` threads (0: all hardware threads).
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace vlmrm::cpu {

template <typename Fn>
void parallel_for(int64_t n, int max_threads, Fn&& fn) {
  if (n <= 0) return;
  int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = max_threads > 0 ? std::min(max_threads, hw) : hw;
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  auto run_chunk = [&](int t) {
    int64_t begin = n * t / threads, end = n * (t + 1) / threads;
    for (int64_t i = begin; i < end; ++i) fn(i);
  };
  for (int t = 1; t < threads; ++t) pool.emplace_back(run_chunk, t);
  run_chunk(0);
  for (auto& th : pool) th.join();
}

}  // namespace vlmrm::cpu
