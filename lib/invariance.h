// invariance.h: the batch-invariance check (docs/DESIGN.md "The checks"): a
// stream's outputs must be bit-identical co-batched, alone, and at another
// position of a reordered batch. The sub-batches come from the truth (sub_batch.h).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "batch.h"
#include "check_result.h"
#include "scenario.h"

namespace pb {

// One sub-batch the check runs: the original indices of its streams, in order.
struct InvarianceBatch {
  std::string name;         // "reversed", "stream 3 alone"
  std::vector<int> order;
};

// The sub-batches: the whole batch reversed (two or more streams), then
// `alone` streams each in a batch of its own: the stream with the fewest tokens
// first, the others drawn from `seed`; every stream when `alone` >= the count.
std::vector<InvarianceBatch> invariance_plan(const Batch& batch, int alone, uint64_t seed);

// What one stream owns of one layer's outputs, in the stream's own order:
// attn `out` rows [count, Hq, D] and the cache slots its chunk wrote, k and v
// [count, Hkv, D]; gdn `out` rows [count, Hv, v_dim], h_state, conv_state.
struct StreamOutputs {
  std::vector<bf16> out, k_written, v_written, conv_state;
  std::vector<float> h_state;
};
std::vector<StreamOutputs> split_by_stream(const Batch& batch, const LayerShape& shape, LayerKind kind,
                                           const LayerOutputs& outputs);

// Compares `got` (stream `stream` of layer `layer` in sub-batch `where`) with
// `want` (the same stream co-batched) bit for bit; each differing tensor is a
// finding naming the first differing element, its index and both values.
void check_invariance(int layer, int stream, const std::string& where, const StreamOutputs& want,
                      const StreamOutputs& got, CheckResult& r);

// Runs every sub-batch of the plan through a fresh backend from `make` (staged
// like any batch, with `faults`), every layer not in `skip`, and checks each
// stream against `cobatched[layer][stream]`.
void run_invariance(const Scenario& s, const Batch& batch, const std::vector<InvarianceBatch>& plan,
                    const std::function<std::unique_ptr<Backend>()>& make, FaultSet faults,
                    const std::vector<std::vector<StreamOutputs>>& cobatched, const std::vector<bool>& skip,
                    CheckResult& r);

}  // namespace pb
