// attention_ws.h: version 4 of the paged varlen causal GQA attention, the
// FlashAttention-3 style warp-specialized Hopper kernel (`--impl attention=ws`).
// Same math contract and invariants as the wgmma kernel of attention_mma.h, its
// work list (plan_attention_tiles) with this kernel's q-tiles, walked by persistent CTAs
// in the lists plan_attention_ws_schedule gives them; sm_90a only.
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
// The (stream, q-tile) work list (plan_attention_tiles) with attention_ws_rows_per_tile's tiles.
std::vector<AttnWorkItem> plan_attention_ws_work(const LayerShape& shape, const std::vector<int32_t>& cu_seqlens_host,
                                                 const std::vector<int32_t>& kv_lens_host);
// Entries per work item: its kv heads times head chunks (an entry is one CTA's unit).
int attention_ws_entries_per_item(const LayerShape& shape);
// The persistent grid for a work list of num_work items (padding included): the CTAs
// that fit on the device at once, at most one per entry; 0 when the shape is unsupported.
int attention_ws_ctas(const LayerShape& shape, int num_work);
// The CTAs' lists (schedule_attention_entries over attention_ws_ctas(shape, work.size())
// CTAs): an entry costs two units a K/V tile it walks and one for its Q and epilogue.
// `work` as launched (padding included), so entry numbers match the kernel's.
// Length attention_ws_ctas + 1 + at most work.size() x attention_ws_entries_per_item.
std::vector<int32_t> plan_attention_ws_schedule(const LayerShape& shape, const std::vector<AttnWorkItem>& work,
                                                const std::vector<int32_t>& cu_seqlens_host,
                                                const std::vector<int32_t>& kv_lens_host);
// Same arguments and semantics as launch_attention_mma; `work` from
// plan_attention_ws_work and args.schedule (device) from plan_attention_ws_schedule on
// that list. `tma`: the producer loads the in-bound pieces of each tile with TMA where
// attention_ws_tma_rows(shape) > 0; false: cp.async only.
cudaError_t launch_attention_ws(cudaStream_t stream, const AttnArgs& args, bool tma);

}  // namespace pb::kernels
