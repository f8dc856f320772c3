// gdn_params.cuh: the device-side parameters of both gated-delta-rule kernels
// (the token kernel, gdn.cu, and the chunked one, gdn_chunked.cu), filled in one
// place from a launch's GdnArgs. `blocks` (CTAs per (stream, v head)) is each
// kernel's own split of v_dim, set by its launcher.
#pragma once
#include <cmath>
#include <cstdint>

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

}  // namespace pb::kernels
