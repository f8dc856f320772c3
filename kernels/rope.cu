// rope.cu: NeoX rotate-half RoPE / MRoPE of q and k for every packed row, one
// launch for all streams. Positions T/H/W are read per row from the staged
// metadata; inv_freq comes from the host (double, rounded to float).
// Invariant: angle = float(pos) * inv_freq[i] and the rotation are computed
// without FMA contraction (as the host does); sin/cos are the correctly
// rounded floats of the float angle (double sincos, rounded once).
#include <cmath>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace pb::kernels {

// Tuning knobs.
struct RopeConfig {
  static constexpr int kThreads = 128;      // threads per CTA; one CTA per packed row
  static constexpr int kMaxHalf = 128;      // rotary_dim / 2 <= 128 (head_dim <= 256)
};

namespace {

// Which position stream frequency i takes its angle from: 0 = T, 1 = H, 2 = W.
__device__ __forceinline__ int rope_section(int i, bool mrope, bool interleaved, int s_t, int s_h,
                                            int s_w) {
  if (!mrope) return 0;
  if (interleaved) {
    if (i % 3 == 1 && i < 3 * s_h) return 1;
    if (i % 3 == 2 && i < 3 * s_w) return 2;
    return 0;
  }
  if (i < s_t) return 0;
  if (i < s_t + s_h) return 1;
  return 2;
}

struct RopeParams {
  int total_tokens, num_q_heads, num_kv_heads, head_dim, rotary_dim;
  bool mrope, interleaved;
  int s_t, s_h, s_w;
  const uint32_t* pos_t;
  const uint32_t* pos_h;
  const uint32_t* pos_w;
  const float* inv_freq;
  const uint16_t* q;
  const uint16_t* k;
  uint16_t* q_rot;
  uint16_t* k_rot;
};

// Version 1: one CTA per row; the row's cos/sin table is computed once in
// shared memory and serves all q and k heads; each thread rotates one pair
// (i, i + half) or copies two pass-through dims, so a head's reads are coalesced.
__global__ void __launch_bounds__(RopeConfig::kThreads) rope_kernel(RopeParams p) {
  using namespace detail;
  __shared__ float cos_s[RopeConfig::kMaxHalf];
  __shared__ float sin_s[RopeConfig::kMaxHalf];
  const int r = blockIdx.x;
  const int half = p.rotary_dim / 2;
  const uint32_t pt = p.pos_t[r], ph = p.pos_h[r], pw = p.pos_w[r];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const int sec = rope_section(i, p.mrope, p.interleaved, p.s_t, p.s_h, p.s_w);
    const uint32_t pos = sec == 0 ? pt : (sec == 1 ? ph : pw);
    const float angle = __fmul_rn(static_cast<float>(pos), p.inv_freq[i]);
    // Float sin/cos, correctly rounded: evaluated in double and rounded once.
    // sincosf (<= 2 ulp) disagreed with the host libm by enough to move a
    // roped k past the kv_write check's relative tolerance where x1*cos and
    // x2*sin cancel (~1 element per million, seen on the H200).
    double sd, cd;
    sincos(static_cast<double>(angle), &sd, &cd);
    cos_s[i] = static_cast<float>(cd);
    sin_s[i] = static_cast<float>(sd);
  }
  __syncthreads();
  const int slots_per_head = p.head_dim / 2;
  const int heads = p.num_q_heads + p.num_kv_heads;
  for (int idx = threadIdx.x; idx < heads * slots_per_head; idx += blockDim.x) {
    const int head = idx / slots_per_head;
    const int s = idx - head * slots_per_head;
    const uint16_t* src;
    uint16_t* dst;
    if (head < p.num_q_heads) {
      const size_t base = (static_cast<size_t>(r) * p.num_q_heads + head) * p.head_dim;
      src = p.q + base;
      dst = p.q_rot + base;
    } else {
      const size_t base = (static_cast<size_t>(r) * p.num_kv_heads + (head - p.num_q_heads)) * p.head_dim;
      src = p.k + base;
      dst = p.k_rot + base;
    }
    if (s < half) {
      const float x1 = bf16_to_float(src[s]);
      const float x2 = bf16_to_float(src[s + half]);
      const float c = cos_s[s], sn = sin_s[s];
      const float y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, sn));
      const float y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn));
      dst[s] = float_to_bf16(y1);
      dst[s + half] = float_to_bf16(y2);
    } else {
      const int j = p.rotary_dim + 2 * (s - half);  // pass-through dims, two per slot
      dst[j] = src[j];
      dst[j + 1] = src[j + 1];
    }
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const LayerShape& shape) {
  const int half = shape.rotary_dim / 2;
  std::vector<float> f(half > 0 ? half : 0);
  for (int i = 0; i < half; ++i)
    f[i] = static_cast<float>(std::pow(static_cast<double>(shape.rope_theta),
                                       -2.0 * i / static_cast<double>(shape.rotary_dim)));
  return f;
}

cudaError_t launch_rope(cudaStream_t stream, const LayerShape& shape, uint32_t total_tokens,
                        uint64_t positions, uint64_t positions_h, uint64_t positions_w,
                        const float* inv_freq, const bf16* q, const bf16* k, bf16* q_rot,
                        bf16* k_rot) {
  if (shape.head_dim <= 0 || shape.head_dim % 2 != 0 || shape.rotary_dim < 0 ||
      shape.rotary_dim % 2 != 0 || shape.rotary_dim > shape.head_dim ||
      shape.rotary_dim / 2 > RopeConfig::kMaxHalf)
    return cudaErrorInvalidValue;
  if (total_tokens == 0) return cudaSuccess;
  RopeParams p;
  p.total_tokens = static_cast<int>(total_tokens);
  p.num_q_heads = shape.num_q_heads;
  p.num_kv_heads = shape.num_kv_heads;
  p.head_dim = shape.head_dim;
  p.rotary_dim = shape.rotary_dim;
  p.mrope = shape.mrope;
  p.interleaved = shape.mrope_interleaved;
  p.s_t = shape.mrope_sections[0];
  p.s_h = shape.mrope_sections[1];
  p.s_w = shape.mrope_sections[2];
  p.pos_t = reinterpret_cast<const uint32_t*>(positions);
  p.pos_h = reinterpret_cast<const uint32_t*>(positions_h);
  p.pos_w = reinterpret_cast<const uint32_t*>(positions_w);
  p.inv_freq = inv_freq;
  p.q = reinterpret_cast<const uint16_t*>(q);
  p.k = reinterpret_cast<const uint16_t*>(k);
  p.q_rot = reinterpret_cast<uint16_t*>(q_rot);
  p.k_rot = reinterpret_cast<uint16_t*>(k_rot);
  rope_kernel<<<total_tokens, RopeConfig::kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pb::kernels
