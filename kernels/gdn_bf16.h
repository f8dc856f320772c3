// gdn_bf16.h: the Gated DeltaNet prefill in bf16 operands over 64-token chunks
// (--impl gdn=bf16; GdnPrecision::bf16_chunk64, reference/gdn_bf16_lp.cpp): the
// context-parallel form of gdn_split.h with fla's arithmetic. Three batched launches:
// chunk-local WY terms per (chunk, v head), a state scan per (stream, v head, v block)
// that stores each chunk's entering state in bf16, then the outputs per (chunk, v head,
// block of 128 v columns).
// Invariants: launch sizes come only from total_tokens, batch_size and the shape (the
// chunk list is read from the workspace, bounded by its capacity); every warp of the
// scan owns 16 v rows whatever the block width, so a stream's bits do not depend on the
// batch it is in.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gdn_chunk_list.h"
#include "kernels/kernels.h"

namespace pb::kernels {

constexpr int kGdnBf16Chunk = 64;  // tokens per chunk (the lp's kGdnBf16ChunkTokens)

// Byte offsets of the scratch inside a workspace region starting at 0: the 64-token
// chunk list first, then per chunk index (bf16 unless said): Q and K [Hk][64][kp + 8],
// W [Hv][64][kp + 8], U^T [Hv][dvp][72], b(V)^T [Hv][dvp][64], the entering state b(S)
// [Hv][dvp][kp], G [Hv][132] fp32 (G_j, then e^{G_63 - G_j}, then e^{G_63}, padded; kp =
// k_dim padded to 32, 64 or 128; dvp = v_dim padded to 16). The rows the scan and the out
// pass read into shared memory carry ldmatrix's 16-byte pad already, so a chunk's image is
// one contiguous copy.
struct GdnBf16Layout {
  GdnChunkList list;
  uint64_t Q = 0, K = 0, W = 0, Ut = 0, Vt = 0, S = 0, G = 0, bytes = 0;
  int kp = 0, dvp = 0;
};
GdnBf16Layout gdn_bf16_layout(const LayerShape& shape, uint32_t total_tokens, uint32_t batch_size);

// True when launch_gdn_bf16 takes this shape: whole GQA groups, k_dim a multiple of 8
// up to 128, v_dim a multiple of 8 up to 256.
bool gdn_bf16_supports(const LayerShape& shape);

// `scratch`: the device address of the region gdn_bf16_layout describes, its chunk
// list written by prepare (plan_gdn_chunks with kGdnBf16Chunk).
cudaError_t launch_gdn_bf16(cudaStream_t stream, const GdnArgs& args, uint64_t scratch);

}  // namespace pb::kernels
