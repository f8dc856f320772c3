// parallel.h: parallel_for over [0, n) on std::threads, items handed out
// dynamically; used by the host backend and the reference. Results never
// depend on the thread count (each item writes its own outputs). $PB_THREADS
// overrides the thread count (default: the CPUs this process may run on).
#pragma once
#include <functional>
#include <limits>

namespace pb {

int worker_threads();

// `work` (e.g. FLOPs of all items together) below a threshold runs inline:
// starting threads would cost more than it saves.
void parallel_for(int n, double work, const std::function<void(int)>& fn);
inline void parallel_for(int n, const std::function<void(int)>& fn) {
  parallel_for(n, std::numeric_limits<double>::infinity(), fn);
}

}  // namespace pb
