// gdn_split.h: the context-parallel Gated DeltaNet prefill (--impl gdn=split):
// three batched launches over every stream and v head: chunk-local WY terms in
// parallel over (chunk, v head), a lean sequential state scan per (stream, v
// head, v block), then the outputs in parallel over (chunk, v head).
// Invariants: same contract and arithmetic model as gdn_chunked.h except the
// order (GdnPrecision::tf32_split, reference/gdn_split_lp.cpp); launch sizes come
// only from total_tokens, batch_size and the shape (the work list is read from the
// workspace), so a graph replay with another batch of the same bucket stays right.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace pb::kernels {

// One chunk of one stream: its stream, first token row, and index into the
// per-chunk state array (stream-major, chunk order).
struct GdnSplitItem {
  int32_t stream, t0, chunk, pad;
};

// Byte offsets of the split's scratch inside a workspace region starting at 0.
// Sizes from the scalars only: chunks <= total_tokens / 32 + batch_size.
struct GdnSplitLayout {
  uint64_t count = 0, items = 0, chunk_first = 0, G = 0, W = 0, U = 0, Kn = 0, Qn = 0, P = 0, bytes = 0;
  uint32_t max_chunks = 0;
};
GdnSplitLayout gdn_split_layout(const LayerShape& shape, uint32_t total_tokens, uint32_t batch_size);

// The work list (host, untimed): every stream's chunks, streams in `order`;
// chunk_first[b] is stream b's first chunk index (size batch + 1).
void plan_gdn_split(const std::vector<int32_t>& cu_seqlens_host, const std::vector<int32_t>& order,
                    std::vector<GdnSplitItem>* items, std::vector<int32_t>* chunk_first);

// True when launch_gdn_split takes this shape (the chunked kernel's shapes).
bool gdn_split_supports(const LayerShape& shape);

// `scratch`: the device address of the region gdn_split_layout describes, holding
// the count (int32), items and chunk_first written by prepare.
cudaError_t launch_gdn_split(cudaStream_t stream, const GdnArgs& args, uint64_t scratch);

}  // namespace pb::kernels
