// work_counts.cpp: FLOP and byte counts per kernel (see work_counts.h).
#include "work_counts.h"

namespace pb {

WorkCount count_work(const std::string& kernel, const Batch& batch, const LayerShape& sh) {
  const double T = batch.total_tokens, N = batch.num_streams;
  const double Hq = sh.num_q_heads, Hkv = sh.num_kv_heads, D = sh.head_dim;
  WorkCount w;
  if (kernel == "attention") {
    double pairs = 0, kv_tokens = 0;
    for (const StreamTruth& st : batch.streams) {
      // sum_{i<count} (chunk_start + i + 1)
      pairs += static_cast<double>(st.count) * st.chunk_start + 0.5 * st.count * (st.count + 1.0);
      kv_tokens += st.kv_len;
    }
    w.flops = 4 * Hq * D * pairs;
    w.bytes = 2 * T * Hq * D /*q*/ + 2 * 2 * kv_tokens * Hkv * D /*k, v*/ + 2 * T * Hq * D /*out*/;
  } else if (kernel == "rope") {
    w.flops = 3 * T * (Hq + Hkv) * sh.rotary_dim;
    w.bytes = 2 * 2 * T * (Hq + Hkv) * D + 3 * 4 * T;
  } else if (kernel == "kv_write") {
    w.bytes = 2 * 2 * 2 * T * Hkv * D + 8 * T;
  } else if (kernel == "conv1d") {
    const double C = 2.0 * sh.num_k_heads * sh.k_dim + sh.num_v_heads * sh.v_dim;
    w.flops = 2 * T * C * sh.d_conv;
    w.bytes = 2 * 2 * T * C + 2 * C * sh.d_conv + 2 * 2 * N * C * (sh.d_conv - 1);
  } else if (kernel == "gdn") {
    const double C = 2.0 * sh.num_k_heads * sh.k_dim + sh.num_v_heads * sh.v_dim;
    const double state = static_cast<double>(sh.num_v_heads) * sh.v_dim * sh.k_dim;
    w.flops = 4 * T * sh.num_v_heads * sh.v_dim * sh.k_dim;
    w.bytes = 2 * T * C + 8 * T * sh.num_v_heads + 2 * 4 * N * state + 2 * T * sh.num_v_heads * sh.v_dim;
  }
  return w;
}

}  // namespace pb
