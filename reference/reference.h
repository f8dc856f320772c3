// reference.h: the independent CPU reference (Eigen). It is computed from the
// Batch's ground truth (streams, positions, block ids, tensors) and never reads
// staged metadata, so metadata bugs show up as differences.
//
// THE MATH CONTRACT (backends and reference implement exactly this):
// RoPE (NeoX "rotate half" over the first rotary_dim dims of each head; dims >=
//   rotary_dim pass through). half = rotary_dim / 2; for i in [0, half):
//   inv_freq[i] = rope_theta ^ (-2i / rotary_dim); angle = pos_sel(i) * inv_freq[i];
//   x1 = x[i], x2 = x[i + half]; y[i] = x1*cos - x2*sin; y[i+half] = x2*cos + x1*sin.
//   pos_sel(i) = T position without MRoPE. Under MRoPE with sections (s_t, s_h, s_w),
//   sectioned: i < s_t -> T, i < s_t + s_h -> H, else W;
//   interleaved (Qwen3-VL): i % 3 == 1 && i < 3*s_h -> H; i % 3 == 2 && i < 3*s_w -> W; else T.
//   Kernels: inv_freq computed in double on the host and rounded to float,
//   angle and sin/cos in float, roped q and k rounded to bf16.
// KV write: roped k (bf16) and v of packed row r go to slot s: cache[s / bs][s % bs][h][:].
// Attention: q head h uses kv head h / (Hq / Hkv); scale 1/sqrt(head_dim); the token at
//   cache index p = chunk_start + i attends keys 0..p of its own stream; softmax in
//   fp32; kernels round P to bf16 before P*V (flash style) and round the output to bf16.
// Gated DeltaNet layer, per stream, tokens in order:
//   conv: u[t][c] = sum_{j<d_conv} conv_w[c][j] * xin[t - (d_conv-1) + j][c], where
//     xin before the chunk's first token comes from conv0 (oldest first); y = silu(u),
//     rounded to bf16 (the kernel stores the conv output). New conv_state = the last
//     d_conv-1 inputs of (conv0 ++ x of the chunk), oldest first (exact bf16 copies).
//   q = y[0 : Hk*dk] as [Hk][dk], k = y[Hk*dk : 2*Hk*dk], v = y[2*Hk*dk :] as [Hv][dv].
//   q, k per head L2-normalised: q / sqrt(sum q^2 + 1e-6).
//   per v head h, k head kh = h / (Hv / Hk), S = h_state[h] as [dv][dk]:
//     S = exp(g_t) * S;  delta = beta_t * (v_t - S k_t);  S = S + delta k_t^T;
//     o_t = (S q_t) / sqrt(dk), rounded to bf16.
//   The final S of each stream is written back to its h_state (f32).
#pragma once
#include <cstdint>
#include <vector>

#include "lib/batch.h"
#include "lib/metadata.h"
#include "lib/scenario.h"

namespace pb {

// The arithmetic the attention lp models, the same for every attention kernel
// (fp32, mma.sync, wgmma): how a report names it.
constexpr const char* kAttentionPrecision = "bf16 io, fp32 math, P rounded to bf16";

// One layer's reference. `hp` is the math in high precision (float64 where it
// matters, no intermediate bf16 rounding); `lp` is the same math at the kernels'
// precision (bf16 rounding where the kernel rounds). The numeric tolerance is
// derived from |lp - hp| (FlashAttention's rule).
struct AttnReference {
  std::vector<float> out_hp, out_lp;  // [T, Hq, D]
  std::vector<uint8_t> computed;      // [T * Hq]: 1 where the row/head was computed
  bool sampled = false;               // true when only sampled rows were computed
  std::vector<bf16> k_cache, v_cache; // the expected paged cache after the layer
};

// The arithmetic of the Gated DeltaNet kernel that ran, which the lp reference
// reproduces so that the numeric limit follows the kernel's real precision
// (docs/TOLERANCES.md). The kernel declares it; never chosen from the output.
enum class GdnPrecision {
  fp32,          // token by token, fp32 math (the host backend, kernels/gdn.cu)
  tf32_chunked,  // chunks of 32 tokens in the WY form, the chunk's four products on
                 // tf32 operands (round to nearest, ties to even) with fp32 accumulation,
                 // everything else and the carried state in fp32 (kernels/gdn_chunked.cu)
  tf32_split,    // the same chunks, tf32 operands and fp32 state, but in the context-parallel
                 // order of kernels/gdn_split.cu: U, W = (I + A)^-1 [beta v | beta e^G k] first,
                 // then Delta = U - W S^T (reference/gdn_split_lp.cpp)
  bf16_chunk64,  // chunks of 64 tokens in the WY form of flash-linear-attention's Triton
                 // chunk_gated_delta_rule: bf16 operands where it rounds (q, k, (I + A)^-1,
                 // U, W, the state snapshot, v_new), fp32 sums and state (reference/gdn_bf16_lp.cpp)
};
// How a report names it: "bf16 io, fp32 math" / "bf16 io, tf32 products (32-token chunks)".
const char* gdn_precision_name(GdnPrecision p);

struct GdnReference {
  std::vector<float> out_hp, out_lp;            // [T, Hv, v_dim]
  std::vector<std::vector<float>> h_hp, h_lp;   // per stream [Hv, v_dim, k_dim]
  std::vector<bf16> conv_state;                 // [N, conv_dim, d_conv - 1]
  GdnPrecision lp_precision = GdnPrecision::fp32;  // the arithmetic out_lp and h_lp follow
};

// RoPE angles' position selection for frequency i (see the contract above).
int rope_section(const LayerShape& shape, int i);  // 0 = T, 1 = H, 2 = W

// `sample` > 0: compute only `sample` rows per stream and q head (chosen from the
// seed, always including each stream's first and last token).
AttnReference attention_reference(const Batch& batch, const LayerShape& shape, int layer,
                                  int sample, uint64_t seed);
// `lp`: the arithmetic of the kernel being checked (hp does not depend on it).
GdnReference gdn_reference(const Batch& batch, const LayerShape& shape, int layer,
                           GdnPrecision lp = GdnPrecision::fp32);

}  // namespace pb
