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

#include "kernels/gdn_chunk_list.h"
#include "kernels/kernels.h"

namespace pb::kernels {

// Byte offsets of the split's scratch inside a workspace region starting at 0:
// the chunk list (kernels/gdn_chunk_list.h) first, then the split's own arrays.
// Sizes from the scalars only.
struct GdnSplitLayout {
  GdnChunkList list;
  uint64_t G = 0, W = 0, U = 0, Kn = 0, Qn = 0, P = 0, Wimg = 0, Qimg = 0, Ktimg = 0, Uimg = 0, bytes = 0;
};
GdnSplitLayout gdn_split_layout(const LayerShape& shape, uint32_t total_tokens, uint32_t batch_size);

// True when launch_gdn_split takes this shape (the chunked kernel's shapes).
bool gdn_split_supports(const LayerShape& shape);
// True when its scan is the Hopper one (gdn_split_scan_st.cuh: wgmma, bulk copies; on a
// compute capability 9.0 device): the layout then has the operand images instead of W.
bool gdn_split_scan_wg_runs(const LayerShape& shape);

// `scratch`: the device address of the region gdn_split_layout describes, its
// chunk list written by prepare (plan_gdn_chunks).
cudaError_t launch_gdn_split(cudaStream_t stream, const GdnArgs& args, uint64_t scratch);

}  // namespace pb::kernels
