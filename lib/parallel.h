// parallel.h: parallel_for over [0, n) on std::threads (one per hardware
// thread), items handed out dynamically. The host backend and the reference
// use it; results never depend on the thread count (each item writes its own
// outputs, no reductions across items).
#pragma once
#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace pb {

template <typename F>
void parallel_for(long n, F&& fn) {
  const long threads = std::max(1L, std::min<long>(n, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (long i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<long> next{0};
  auto worker = [&]() {
    for (long i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  std::vector<std::thread> pool;
  for (long t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

}  // namespace pb
