// gdn_chunked.h: the chunked (WY / UT-transform) Gated DeltaNet prefill kernels
// (a parallel prep over chunks, then the walk over each stream's chunks), same
// contract and arguments as launch_gdn (kernels/kernels.h), which stays the
// oracle (--impl gdn=token, kernels/kernel_table.cu), plus a workspace.
// Invariants: reference/reference.h's math with an fp32 state, fp32 sums and
// tf32 (tensor-core) operands in the chunk's matrix products (the .cu says why
// that keeps the tolerance); S f32 read from and written back to h_state_ptrs[b]
// as [Hv, v_dim, k_dim]; q, k L2-normalised with eps 1e-6 inside the sqrt; out
// rounded to bf16. Shapes: k_dim <= 128, k_dim % 8 == 0, v_dim % 8 == 0 (other
// shapes: cudaErrorInvalidValue, the caller falls back to the token kernel).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "lib/bf16.h"
#include "kernels/gdn_chunk_list.h"
#include "kernels/kernels.h"
#include "lib/metadata.h"

namespace pb::kernels {

// Byte offsets of the kernel's scratch inside a workspace region starting at 0: the
// chunk list (gdn_chunk_list.h), then the prep's T = (I + A)^-1 and masked q.k per
// (chunk, v head), 8 KB each, and q's and k's inverse l2 norms per (k head, token).
// Sizes from the scalars only.
struct GdnChunkedLayout {
  GdnChunkList list;
  // sched: the lockstep walk's work queue (gdn_chunked.cu's WalkQueue), zeroed by the kernel
  uint64_t tm = 0, nrm = 0, sched = 0, bytes = 0;
};
GdnChunkedLayout gdn_chunked_layout(const LayerShape& shape, uint32_t total_tokens, uint32_t batch_size);

// True when launch_gdn_chunked takes this shape.
bool gdn_chunked_supports(const LayerShape& shape);

// The walk's plan for this batch on the current device (kernels/gdn_walk_plan.h): true
// when the lockstep walk takes its work queue; chunks: each stream's chunk count in
// launch order. False where the batch takes a walk that does not plan (the narrow walk, or
// blocks of 16 rows: taken only while every CTA has an SM of its own).
bool plan_gdn_chunked_walk(const LayerShape& shape, uint32_t batch_size, const std::vector<int32_t>& chunks);

// `scratch`: the device address of the region gdn_chunked_layout describes, its
// chunk list written by prepare (plan_gdn_chunks). walk_queue: the lockstep walk takes its
// work queue (plan_gdn_chunked_walk's answer for this batch; false: one item a CTA).
cudaError_t launch_gdn_chunked(cudaStream_t stream, const GdnArgs& args, uint64_t scratch, bool walk_queue = false);

}  // namespace pb::kernels
