// attention_ws.h: version 4 of the paged varlen causal GQA attention, the
// FlashAttention-3 style warp-specialized Hopper kernel (`--impl attention=ws`).
// Same math contract and invariants as the wgmma kernel of attention_mma.h, its
// longest-first work list with this kernel's q-tiles (plan_attention_ws_work); sm_90a only.
#pragma once
#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/kernels.h"

namespace pb::kernels {

// Head dim 64, 128 or 256, a valid GQA shape, and a device that runs sm_90a.
bool attention_ws_supported(const LayerShape& shape);
// Rows of one TMA box (one piece of a K/V tile inside one cache block): the
// tile's keys or the block size; 0 when the block size does not tile the key
// tile in pieces of whole 1024-byte swizzle atoms (then the producer copies
// with cp.async).
int attention_ws_tma_rows(const LayerShape& shape);
// Keys per K/V tile and query vectors per CTA (64 per consumer warpgroup) at this
// head dim (the traits table).
int attention_ws_block_n(int head_dim);
int attention_ws_block_m(int head_dim);
// Tokens per q-tile: block_m / min(GQA group, block_m) (heads packed into M).
int attention_ws_rows_per_tile(const LayerShape& shape);
// The longest-first (stream, q-tile) work list with attention_ws_rows_per_tile's tiles.
std::vector<AttnWorkItem> plan_attention_ws_work(const LayerShape& shape, const std::vector<int32_t>& cu_seqlens_host,
                                                 const std::vector<int32_t>& kv_lens_host);
// Same arguments and semantics as launch_attention_mma; `work` from
// plan_attention_ws_work. `tma`: the producer loads the in-bound pieces of
// each tile with TMA where attention_ws_tma_rows(shape) > 0; false: cp.async only.
cudaError_t launch_attention_ws(cudaStream_t stream, const AttnArgs& args, bool tma);

}  // namespace pb::kernels
