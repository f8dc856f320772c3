// invariance_plan.cpp: which sub-batches the invariance check runs (invariance.h):
// the reversed batch, and a seeded sample of streams alone that always holds the
// shortest stream (the one a batch-wide value most misrepresents).
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "invariance.h"
#include "rng.h"

namespace pb {

std::vector<InvarianceBatch> invariance_plan(const Batch& batch, int alone, uint64_t seed) {
  const int N = batch.num_streams;
  std::vector<InvarianceBatch> plan;
  if (N < 2) return plan;  // one stream: alone and reordered are the batch itself
  InvarianceBatch rev{"reversed", std::vector<int>(N)};
  std::iota(rev.order.rbegin(), rev.order.rend(), 0);
  plan.push_back(rev);
  std::vector<int> pick;
  if (alone > 0) {
    int shortest = 0;
    for (int b = 1; b < N; ++b)
      if (batch.streams[b].count < batch.streams[shortest].count) shortest = b;
    pick.push_back(shortest);
    std::vector<int> rest;
    for (int b = 0; b < N; ++b)
      if (b != shortest) rest.push_back(b);
    // Partial Fisher-Yates: the first alone - 1 of a seeded permutation.
    Rng rng = Rng::for_purpose(seed, kRngInvariance);
    const int more = std::min(alone - 1, static_cast<int>(rest.size()));
    for (int i = 0; i < more; ++i) {
      std::swap(rest[i], rest[rng.uniform_int(i, static_cast<int64_t>(rest.size()) - 1)]);
      pick.push_back(rest[i]);
    }
    std::sort(pick.begin() + 1, pick.end());
  }
  for (int b : pick) plan.push_back({fmt::format("stream {} alone", b), {b}});
  return plan;
}

}  // namespace pb
