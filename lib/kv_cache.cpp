// kv_cache.cpp: ground-truth facts every backend and the reference share: the
// model shape a layer call takes, and the initial content of a paged cache
// (NaN poison everywhere, each stream's prior KV at its own physical blocks).
#include <cmath>

#include "backend.h"

namespace pb {

LayerShape layer_shape(const Scenario& s, const Batch& b) {
  const ModelSpec& m = s.model;
  LayerShape sh;
  sh.num_q_heads = m.num_q_heads;
  sh.num_kv_heads = m.num_kv_heads;
  sh.head_dim = m.head_dim;
  sh.rotary_dim = m.rotary_dim;
  sh.rope_theta = static_cast<float>(m.rope_theta);
  sh.mrope = m.mrope.enabled;
  sh.mrope_interleaved = m.mrope.interleaved;
  for (int i = 0; i < 3; ++i) sh.mrope_sections[i] = m.mrope.sections[i];
  sh.block_size = m.block_size;
  sh.num_blocks = b.num_blocks;
  sh.poison_block = b.poison_block;
  if (m.gdn.present) {
    sh.num_k_heads = m.gdn.num_k_heads;
    sh.num_v_heads = m.gdn.num_v_heads;
    sh.k_dim = m.gdn.k_dim;
    sh.v_dim = m.gdn.v_dim;
    sh.d_conv = m.gdn.d_conv;
  }
  return sh;
}

std::vector<bf16> initial_cache(const Batch& batch, const LayerShape& shape, int layer, bool v) {
  const size_t row = static_cast<size_t>(shape.num_kv_heads) * shape.head_dim;
  std::vector<bf16> cache(static_cast<size_t>(batch.num_blocks) * shape.block_size * row,
                          bf16{kBf16PoisonBits});
  const AttnInputs& in = batch.layers[layer].attn;
  for (size_t b = 0; b < batch.streams.size(); ++b) {
    const StreamTruth& st = batch.streams[b];
    const std::vector<bf16>& prior = v ? in.prior_v[b] : in.prior_k[b];
    for (int p = 0; p < st.chunk_start; ++p) {
      const size_t slot = static_cast<size_t>(st.blocks[p / shape.block_size]) * shape.block_size +
                          p % shape.block_size;
      std::copy(prior.begin() + p * row, prior.begin() + (p + 1) * row, cache.begin() + slot * row);
    }
  }
  return cache;
}

}  // namespace pb
