// export.h: a scenario's batch as a small JSON document for tools outside the
// harness (scripts/peer_torch.py runs PyTorch's attention on the same batch).
// It holds the shape and, per stream, chunk_start / count / kv_len, never the
// tensors: a peer draws its own random inputs of those shapes.
// Schema "prefill-bench.batch/1": {schema, name, scenario, seed, model{num_q_heads,
// num_kv_heads, head_dim, block_size, dtype}, causal, streams[{chunk_start,
// count, kv_len}], total_tokens, attention_flops} with attention_flops counted as
// docs/DESIGN.md "Counting work" (4 * Hq * D * sum_i (chunk_start + i + 1)).
#pragma once
#include <string>

#include "scenario.h"

namespace pb {

// The document as text (pretty-printed JSON, newline-terminated).
std::string batch_json(const Scenario& scenario);
// Writes batch_json(scenario) to `path`; throws std::runtime_error naming the
// path when it cannot be written.
void export_batch(const Scenario& scenario, const std::string& path);

}  // namespace pb
