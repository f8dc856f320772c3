// gdn_walk_plan.h: which streams of a batch the chunked GDN walk gives a multiprocessor
// of their own, planned on the host from the streams' chunk counts (plain C++: the host
// tests include it).
// The lockstep walk (gdn_chunked.cu) runs per_stream items per stream (v heads x v
// blocks), two resident CTAs a multiprocessor; each item is a chain of its stream's
// chunks, walked one after the other. A CTA sharing its SM walks a chunk kSharedStep
// times slower than one alone. So one long stream among many short ones is paced by its
// chain: it walks shared while the rest of the batch runs, then alone. Taking the longest
// streams' items onto SMs of their own (their second CTA leaves) lets those chains walk
// alone from the start, at the cost of the slots they leave empty.
// The estimate, in alone steps, of giving the first k streams of the launch order an SM
// per item (k = 0: nobody):
//   T_k = max(the longest of those k chains,
//             T_shared = max(P, n + P (1 - 1 / kSharedStep)))
// where n is the longest other chain and P = kSharedStep x (the other streams' chunks of
// every item but that chain's) / (the resident CTAs left beside it): the time the others
// keep the SMs full, while that chain walks shared. The plan takes the k of least T_k,
// only if T_0 is at least kMinGain x that (the estimate is coarse: session 39 measured
// 1.15-1.17x where it predicted 1.16x, and 1.02x where it predicted 1.08x).
// Invariants: k x per_stream < sms (an SM is left for the rest); the order is the
// launch order (any order: the prefix is what the kernel takes); the plan moves work
// between CTAs only and never changes a result's bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pb::kernels {

struct GdnWalkPlanTraits {
  // A chunk step of a CTA sharing its SM over one on an SM of its own while the rest of the
  // GPU is busy. 1.5 puts the estimate for issue 13's mixed batch at 1.16x, measured
  // 1.15-1.17x (kernels/PERF-NOTES.md "Session 39"); it over-estimates batches of many
  // short items (estimate 1.08x, measured 1.02x), which kMinGain leaves unplanned.
  static constexpr double kSharedStep = 1.5;
  static constexpr int kCtasPerSm = 2;       // the walk's launch bounds
  static constexpr double kMinGain = 1.10;   // the estimated gain that takes a plan
};

// chunks: each stream's chunk count, in launch order. Returns k: the first k streams of
// the launch order get an SM per item (0: every item shares).
inline int plan_gdn_walk_exclusive(const std::vector<int32_t>& chunks, int per_stream, int sms) {
  using T = GdnWalkPlanTraits;
  const int n = static_cast<int>(chunks.size());
  if (n < 2 || per_stream <= 0 || sms <= 0) return 0;
  std::vector<double> suffix(n + 1, 0.0);  // chunks of streams i..n-1
  std::vector<int32_t> suffix_max(n + 1, 0);
  for (int i = n - 1; i >= 0; --i) {
    suffix[i] = suffix[i + 1] + std::max(chunks[i], 0);
    suffix_max[i] = std::max(suffix_max[i + 1], std::max(chunks[i], 0));
  }
  auto estimate = [&](int k, double* t) {  // false: the others do not fit beside these
    const double left = static_cast<double>(T::kCtasPerSm) * (sms - static_cast<double>(k) * per_stream) - per_stream;
    if (left <= 0) return false;
    const double longest = suffix_max[k];
    const double others = (suffix[k] - longest) * per_stream;
    const double p = T::kSharedStep * others / left;
    const double shared = std::max(p, longest + p * (1.0 - 1.0 / T::kSharedStep));
    const double alone = k > 0 ? *std::max_element(chunks.begin(), chunks.begin() + k) : 0.0;
    *t = std::max(alone, shared);
    return true;
  };
  double t0 = 0;
  if (!estimate(0, &t0)) return 0;
  int best = 0;
  double t_best = t0;
  for (int k = 1; k < n && static_cast<long long>(k) * per_stream < sms; ++k) {
    double t = 0;
    if (estimate(k, &t) && t < t_best) {
      t_best = t;
      best = k;
    }
  }
  return t0 >= T::kMinGain * t_best ? best : 0;
}

}  // namespace pb::kernels
