// graph_bucket.h: the second batch of a --graph run, another batch of the first
// one's bucket (docs/DESIGN.md "Graph mode"): the same batch_size, total_tokens,
// KV cache (num_blocks, poison block) and shapes, so every staged address and
// every captured argument stays valid; per-stream counts <= the first batch's
// chunk_len and block counts <= its max_blocks_per_seq (capacities); different
// counts, chunk starts, kv_lens, block tables and inputs, drawn from the seed.
#pragma once
#include <string>

#include "batch.h"
#include "scenario.h"

namespace pb {

// What differs between the two batches of a bucket (the graph check asserts it).
struct BucketDiff {
  bool counts = false, chunk_starts = false, kv_lens = false, block_tables = false, inputs = false;
  std::string note;  // what cannot vary on this scenario, e.g. one stream's count
  bool any() const { return counts || chunk_starts || kv_lens || block_tables; }
};

// The bucket's second batch, deterministic in the scenario's seed.
Batch generate_bucket_batch(const Scenario& s, const Batch& first);
BucketDiff bucket_diff(const Batch& first, const Batch& second);

}  // namespace pb
