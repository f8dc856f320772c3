// check_determinism.cpp: two runs of the same layer on the same inputs must be
// bit-identical (a moving result is a race, or a kernel that behaves otherwise
// when timed).
#include <fmt/format.h>

#include <cstring>

#include "checks.h"

namespace pb {

namespace {

template <typename T>
long long count_diff(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return static_cast<long long>(std::max(a.size(), b.size()));
  long long n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return n;
}

}  // namespace

void check_determinism(int layer, const LayerOutputs& first, const LayerOutputs& again, CheckResult& r,
                       const std::string& which) {
  const struct { const char* what; long long n; } parts[] = {
      {"out", count_diff(first.out, again.out)},
      {"k_cache", count_diff(first.k_cache, again.k_cache)},
      {"v_cache", count_diff(first.v_cache, again.v_cache)},
      {"conv_state", count_diff(first.conv_state, again.conv_state)},
  };
  for (const auto& p : parts)
    if (p.n) r.fail(layer, -1, fmt::format("{}: {} element(s) differ {}", p.what, p.n, which));
  for (size_t b = 0; b < first.h_state.size() && b < again.h_state.size(); ++b)
    if (long long n = count_diff(first.h_state[b], again.h_state[b]))
      r.fail(layer, static_cast<int>(b), fmt::format("stream {} h_state: {} element(s) differ {}", b, n, which));
}

}  // namespace pb
