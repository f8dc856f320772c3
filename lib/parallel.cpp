// parallel.cpp: the one work splitter of the host backend and the reference.
// Tasks are handed out one at a time from an atomic counter; which thread runs
// a task never changes what it computes, so results do not depend on the
// thread count. A task's exception is rethrown to the caller.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "parallel.h"

namespace pb {

namespace {
// Below this many flops in all tasks together, starting threads costs more than it saves.
constexpr double kMinParallelWork = 2e7;
constexpr int kMaxThreads = 64;
}  // namespace

int worker_threads() {
  if (const char* env = std::getenv("PB_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return std::min(n, kMaxThreads);
  }
  int n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(n, 1, kMaxThreads);
}

void parallel_for(int n, double work, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  const int threads = std::min(worker_threads(), n);
  if (threads <= 1 || work < kMinParallelWork) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto body = [&] {
    for (;;) {
      const int i = next.fetch_add(1);
      if (i >= n) return;
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  try {
    for (int t = 1; t < threads; ++t) pool.emplace_back(body);
  } catch (const std::system_error&) {
    // No more threads to be had: the ones started (and this one) do all the work.
  }
  body();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace pb
