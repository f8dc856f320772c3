// gdn_params.cuh: the device-side parameters of the gated-delta-rule kernels
// (the token kernel, gdn.cu, the chunked walks, gdn_chunked.cu, and the splits,
// gdn_split.cu and gdn_bf16.cu), filled in one place from a launch's GdnArgs, the one
// decode of a state-walking CTA's blockIdx that they share, and the one decode of a
// per-chunk CTA's work item. `blocks` (CTAs
// per (stream, v head)) is each kernel's own split of v_dim, set by its launcher.
// Invariant: the stream index comes through `order` and is bounded by batch_size
// before anything of the stream is read.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/gdn_chunk_list.h"
#include "kernels/kernels.h"

namespace pb::kernels {

struct GdnParams {
  int batch_size, total_tokens;
  int num_k_heads, num_v_heads, k_dim, v_dim, conv_dim;
  int blocks;  // CTAs per (stream, v head)
  float inv_sqrt_dk;
  const int32_t* cu_seqlens;
  const uint64_t* h_state_ptrs;
  const int32_t* order;
  const uint16_t* conv_out;
  const float* g;
  const float* beta;
  uint16_t* out;
};

inline GdnParams gdn_params(const GdnArgs& a) {
  const LayerShape& s = a.shape;
  GdnParams p;
  p.batch_size = static_cast<int>(a.batch_size);
  p.total_tokens = static_cast<int>(a.total_tokens);
  p.num_k_heads = s.num_k_heads;
  p.num_v_heads = s.num_v_heads;
  p.k_dim = s.k_dim;
  p.v_dim = s.v_dim;
  p.conv_dim = 2 * s.num_k_heads * s.k_dim + s.num_v_heads * s.v_dim;
  p.blocks = 1;
  p.inv_sqrt_dk = 1.f / std::sqrt(static_cast<float>(s.k_dim));
  p.cu_seqlens = reinterpret_cast<const int32_t*>(a.cu_seqlens);
  p.h_state_ptrs = reinterpret_cast<const uint64_t*>(a.h_state_ptrs);
  p.order = a.stream_order;
  p.conv_out = reinterpret_cast<const uint16_t*>(a.conv_out);
  p.g = a.g;
  p.beta = a.beta;
  p.out = reinterpret_cast<uint16_t*>(a.out);
  return p;
}

// What one CTA of a state walk owns, from its work item (blockIdx.x, or a queue's entry
// below batch_size x num_v_heads x blocks; stream-major through p.order, then v head,
// then block of v rows): stream b, v head h and its k head kh, block vb
// of p.blocks, the stream's rows, and the head's [v_dim][k_dim] fp32 state S_g.
struct GdnCtaHead {
  int b, h, kh, vb;
  detail::StreamRows sr;
  float* S_g;
};
// False: the order entry names no stream of the batch (the CTA has nothing to do).
__device__ __forceinline__ bool gdn_cta_head(const GdnParams& p, GdnCtaHead& c, unsigned item = blockIdx.x) {
  const int per_stream = p.num_v_heads * p.blocks;
  const int ob = item / per_stream;
  const int rem = item - ob * per_stream;
  c.h = rem / p.blocks;
  c.vb = rem - c.h * p.blocks;
  c.b = p.order ? p.order[ob] : ob;
  if (c.b < 0 || c.b >= p.batch_size) return false;
  c.kh = c.h / (p.num_v_heads / p.num_k_heads);
  c.sr = detail::stream_rows(p.cu_seqlens, c.b, p.total_tokens);
  c.S_g = reinterpret_cast<float*>(p.h_state_ptrs[c.b]) + static_cast<size_t>(c.h) * p.v_dim * p.k_dim;
  return true;
}

// What one per-chunk CTA (a prep or out pass over the chunk list) owns: its list entry
// and the chunk's token count n (<= chunk, within the stream's rows). The entry is read
// back bounded: false when the CTA is past the list's count or capacity, or its entry
// names no chunk of the batch (nothing to do).
struct GdnChunkCta {
  GdnChunkItem it;
  int n;
};
__device__ __forceinline__ bool gdn_chunk_cta(const GdnParams& p, const GdnChunkListView& list, int chunk,
                                              GdnChunkCta& c, int item = blockIdx.x) {
  if (item >= *list.count || item >= list.max_chunks) return false;
  c.it = list.items[item];
  if (c.it.stream < 0 || c.it.stream >= p.batch_size || c.it.chunk < 0 || c.it.chunk >= list.max_chunks) return false;
  const detail::StreamRows sr = detail::stream_rows(p.cu_seqlens, c.it.stream, p.total_tokens);
  c.n = min(chunk, sr.end - c.it.t0);
  return c.it.t0 >= sr.begin && c.n > 0;
}

}  // namespace pb::kernels
