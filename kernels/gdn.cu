// gdn.cu: the gated delta rule of all streams in one launch, token by token in
// fp32 (a chunked tensor-core form is a later issue). Rows of S [v_dim][k_dim]
// evolve independently, so a CTA owns one (stream, v head, block of S rows),
// holds those rows in registers and walks the stream's tokens in order.
// Invariants: S is read from and written back to h_state_ptrs[b] (device
// array); per token: S = exp(g) S; delta = beta (v - S k); S += delta k^T;
// o = (S q) / sqrt(k_dim), q and k L2-normalised with eps 1e-6 inside the sqrt.
#include <algorithm>
#include <numeric>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace pb::kernels {

// Tuning knobs.
struct GdnConfig {
  static constexpr int kWarps = 2;         // warps per CTA
  static constexpr int kChunk = 16;        // tokens staged in shared memory per step
  static constexpr int kLanesPerRow = 8;   // lanes sharing one S row (dot products reduce over 8 lanes)
  static constexpr int kStateRegs = 64;    // S floats per lane
};

// Per-k-dim traits (k_dim padded up to KP): elements per lane and rows per lane.
template <int KP>
struct GdnTile {
  static constexpr int kElemsPerLane = KP / GdnConfig::kLanesPerRow;              // 4, 8, 16, 32
  static constexpr int kChunks4 = kElemsPerLane / 4;                             // float4 per lane per row
  static constexpr int kRowsPerLane = GdnConfig::kStateRegs / kElemsPerLane;     // 16, 8, 4, 2
  static constexpr int kRowsPerWarp = (32 / GdnConfig::kLanesPerRow) * kRowsPerLane;
  static constexpr int kRowsPerCta = GdnConfig::kWarps * kRowsPerWarp;
  static_assert(kElemsPerLane % 4 == 0, "float4 chunks");
};

namespace {

struct GdnParams {
  int batch_size, total_tokens;
  int num_k_heads, num_v_heads, k_dim, v_dim, conv_dim;
  int row_blocks;  // CTAs per (stream, v head)
  float sqrt_dk;
  const int32_t* cu_seqlens;
  const uint64_t* h_state_ptrs;
  const int32_t* order;
  const uint16_t* conv_out;
  const float* g;
  const float* beta;
  uint16_t* out;
};

// Version 1: lane (group grp, sub s) of warp w holds S rows
// w*RowsPerWarp + grp*RowsPerLane + rr and, of each, the float4 chunks s + 8e.
// Per chunk of kChunk tokens the CTA stages normalised q/k, its v rows, exp(g)
// and beta in shared memory; outputs go back through shared memory one chunk
// later (coalesced stores while the next chunk is staged).
template <int KP>
__global__ void __launch_bounds__(GdnConfig::kWarps * 32) gdn_kernel(GdnParams p) {
  using namespace detail;
  using Tile = GdnTile<KP>;
  constexpr int C = GdnConfig::kChunk;
  constexpr int RC = Tile::kRowsPerCta;
  constexpr int RPL = Tile::kRowsPerLane;
  constexpr int NC4 = Tile::kChunks4;
  constexpr int kThreads = GdnConfig::kWarps * 32;
  __shared__ __align__(16) float kn_s[C][KP];
  __shared__ __align__(16) float qn_s[C][KP];
  __shared__ float v_s[C][RC];
  __shared__ float o_s[C][RC];
  __shared__ float eg_s[C], bt_s[C];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane >> 3, sub = lane & 7;
  const int per_stream = p.num_v_heads * p.row_blocks;
  const int ob = blockIdx.x / per_stream;
  const int rem = blockIdx.x - ob * per_stream;
  const int h = rem / p.row_blocks;
  const int rb = rem - h * p.row_blocks;
  const int b = p.order ? p.order[ob] : ob;
  if (b < 0 || b >= p.batch_size) return;
  const int kh = h / (p.num_v_heads / p.num_k_heads);
  const StreamRows sr = stream_rows(p.cu_seqlens, b, p.total_tokens);
  float* S_g = reinterpret_cast<float*>(p.h_state_ptrs[b]) + static_cast<size_t>(h) * p.v_dim * p.k_dim;

  const int row_base = warp * Tile::kRowsPerWarp + grp * RPL;  // local row of rr = 0
  float4 S[RPL][NC4];
#pragma unroll
  for (int rr = 0; rr < RPL; ++rr) {
    const int row = rb * RC + row_base + rr;
#pragma unroll
    for (int e = 0; e < NC4; ++e) {
      const int col = 4 * (sub + 8 * e);
      S[rr][e] = (row < p.v_dim && col < p.k_dim)
                     ? *reinterpret_cast<const float4*>(S_g + static_cast<size_t>(row) * p.k_dim + col)
                     : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }

  const size_t q_off = static_cast<size_t>(kh) * p.k_dim;
  const size_t k_off = static_cast<size_t>(p.num_k_heads + kh) * p.k_dim;
  const size_t v_off = static_cast<size_t>(2 * p.num_k_heads) * p.k_dim + static_cast<size_t>(h) * p.v_dim;
  const size_t out_stride = static_cast<size_t>(p.num_v_heads) * p.v_dim;

  // Writes chunk t0's outputs from o_s (rows < v_dim, tokens < end).
  auto flush = [&](int t0) {
    for (int idx = tid; idx < C * RC; idx += kThreads) {
      const int tt = idx / RC, i = idx - (idx / RC) * RC;
      const int r = t0 + tt, row = rb * RC + i;
      if (r < sr.end && row < p.v_dim)
        p.out[static_cast<size_t>(r) * out_stride + static_cast<size_t>(h) * p.v_dim + row] = float_to_bf16(o_s[tt][i]);
    }
  };

  for (int t0 = sr.begin; t0 < sr.end; t0 += C) {
    if (t0 > sr.begin) flush(t0 - C);
    // Stage: normalised q and k (one warp per token), v rows, exp(g), beta.
    for (int tt = warp; tt < C; tt += GdnConfig::kWarps) {
      const int r = t0 + tt;
      float qv[KP / 32], kv[KP / 32];
      float ssq = 0.f, ssk = 0.f;
#pragma unroll
      for (int i = 0; i < KP / 32; ++i) {
        const int e = lane + 32 * i;
        const bool ok = r < sr.end && e < p.k_dim;
        const uint16_t* row = p.conv_out + static_cast<size_t>(ok ? r : 0) * p.conv_dim;
        qv[i] = ok ? bf16_to_float(row[q_off + e]) : 0.f;
        kv[i] = ok ? bf16_to_float(row[k_off + e]) : 0.f;
        ssq = fmaf(qv[i], qv[i], ssq);
        ssk = fmaf(kv[i], kv[i], ssk);
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        ssq += __shfl_xor_sync(0xffffffffu, ssq, off);
        ssk += __shfl_xor_sync(0xffffffffu, ssk, off);
      }
      const float nq = sqrtf(ssq + 1e-6f), nk = sqrtf(ssk + 1e-6f);
#pragma unroll
      for (int i = 0; i < KP / 32; ++i) {
        qn_s[tt][lane + 32 * i] = qv[i] / nq;
        kn_s[tt][lane + 32 * i] = kv[i] / nk;
      }
    }
    for (int idx = tid; idx < C * RC; idx += kThreads) {
      const int tt = idx / RC, i = idx - (idx / RC) * RC;
      const int r = t0 + tt, row = rb * RC + i;
      v_s[tt][i] = (r < sr.end && row < p.v_dim)
                       ? bf16_to_float(p.conv_out[static_cast<size_t>(r) * p.conv_dim + v_off + row])
                       : 0.f;
    }
    if (tid < C) {
      const int r = t0 + tid;
      const bool ok = r < sr.end;
      eg_s[tid] = ok ? expf(p.g[static_cast<size_t>(r) * p.num_v_heads + h]) : 1.f;
      bt_s[tid] = ok ? p.beta[static_cast<size_t>(r) * p.num_v_heads + h] : 0.f;
    }
    __syncthreads();

    const int n = min(C, sr.end - t0);
    for (int tt = 0; tt < n; ++tt) {
      const float eg = eg_s[tt], bt = bt_s[tt];
      float4 kk[NC4];
#pragma unroll
      for (int e = 0; e < NC4; ++e) kk[e] = *reinterpret_cast<const float4*>(&kn_s[tt][4 * (sub + 8 * e)]);
      float dot[RPL];
#pragma unroll
      for (int rr = 0; rr < RPL; ++rr) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < NC4; ++e) {
          S[rr][e].x *= eg;
          S[rr][e].y *= eg;
          S[rr][e].z *= eg;
          S[rr][e].w *= eg;
          d = fmaf(S[rr][e].x, kk[e].x, d);
          d = fmaf(S[rr][e].y, kk[e].y, d);
          d = fmaf(S[rr][e].z, kk[e].z, d);
          d = fmaf(S[rr][e].w, kk[e].w, d);
        }
        dot[rr] = d;
      }
#pragma unroll
      for (int off = 4; off > 0; off >>= 1)
#pragma unroll
        for (int rr = 0; rr < RPL; ++rr) dot[rr] += __shfl_xor_sync(0xffffffffu, dot[rr], off);
#pragma unroll
      for (int rr = 0; rr < RPL; ++rr) {
        const float delta = bt * (v_s[tt][row_base + rr] - dot[rr]);
#pragma unroll
        for (int e = 0; e < NC4; ++e) {
          S[rr][e].x = fmaf(delta, kk[e].x, S[rr][e].x);
          S[rr][e].y = fmaf(delta, kk[e].y, S[rr][e].y);
          S[rr][e].z = fmaf(delta, kk[e].z, S[rr][e].z);
          S[rr][e].w = fmaf(delta, kk[e].w, S[rr][e].w);
        }
      }
      float4 qq[NC4];
#pragma unroll
      for (int e = 0; e < NC4; ++e) qq[e] = *reinterpret_cast<const float4*>(&qn_s[tt][4 * (sub + 8 * e)]);
#pragma unroll
      for (int rr = 0; rr < RPL; ++rr) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < NC4; ++e) {
          d = fmaf(S[rr][e].x, qq[e].x, d);
          d = fmaf(S[rr][e].y, qq[e].y, d);
          d = fmaf(S[rr][e].z, qq[e].z, d);
          d = fmaf(S[rr][e].w, qq[e].w, d);
        }
        dot[rr] = d;
      }
#pragma unroll
      for (int off = 4; off > 0; off >>= 1)
#pragma unroll
        for (int rr = 0; rr < RPL; ++rr) dot[rr] += __shfl_xor_sync(0xffffffffu, dot[rr], off);
      if (sub == 0) {
#pragma unroll
        for (int rr = 0; rr < RPL; ++rr) o_s[tt][row_base + rr] = dot[rr] / p.sqrt_dk;
      }
    }
    __syncthreads();
  }
  if (sr.end > sr.begin) flush(sr.begin + ((sr.end - sr.begin - 1) / C) * C);

#pragma unroll
  for (int rr = 0; rr < RPL; ++rr) {
    const int row = rb * RC + row_base + rr;
    if (row >= p.v_dim) continue;
#pragma unroll
    for (int e = 0; e < NC4; ++e) {
      const int col = 4 * (sub + 8 * e);
      if (col < p.k_dim) *reinterpret_cast<float4*>(S_g + static_cast<size_t>(row) * p.k_dim + col) = S[rr][e];
    }
  }
}

template <int KP>
cudaError_t launch_gdn_k(cudaStream_t stream, GdnParams p) {
  p.row_blocks = (p.v_dim + GdnTile<KP>::kRowsPerCta - 1) / GdnTile<KP>::kRowsPerCta;
  const long long grid = static_cast<long long>(p.batch_size) * p.num_v_heads * p.row_blocks;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidValue;
  gdn_kernel<KP><<<static_cast<unsigned>(grid), GdnConfig::kWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

std::vector<int32_t> plan_gdn_order(const std::vector<int32_t>& cu_seqlens_host) {
  const int n = cu_seqlens_host.empty() ? 0 : static_cast<int>(cu_seqlens_host.size()) - 1;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto count = [&](int b) { return cu_seqlens_host[b + 1] - cu_seqlens_host[b]; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return count(a) > count(b); });
  return order;
}

cudaError_t launch_gdn(cudaStream_t stream, const LayerShape& shape, uint32_t batch_size,
                       uint32_t total_tokens, uint64_t cu_seqlens, uint64_t h_state_ptrs,
                       const int32_t* stream_order, const bf16* conv_out, const float* g,
                       const float* beta, bf16* out) {
  if (shape.num_k_heads <= 0 || shape.num_v_heads <= 0 || shape.num_v_heads % shape.num_k_heads != 0 ||
      shape.k_dim <= 0 || shape.k_dim % 4 != 0 || shape.k_dim > 256 || shape.v_dim <= 0)
    return cudaErrorInvalidValue;
  if (batch_size == 0) return cudaSuccess;
  GdnParams p;
  p.batch_size = static_cast<int>(batch_size);
  p.total_tokens = static_cast<int>(total_tokens);
  p.num_k_heads = shape.num_k_heads;
  p.num_v_heads = shape.num_v_heads;
  p.k_dim = shape.k_dim;
  p.v_dim = shape.v_dim;
  p.conv_dim = 2 * shape.num_k_heads * shape.k_dim + shape.num_v_heads * shape.v_dim;
  p.row_blocks = 1;
  p.sqrt_dk = sqrtf(static_cast<float>(shape.k_dim));
  p.cu_seqlens = reinterpret_cast<const int32_t*>(cu_seqlens);
  p.h_state_ptrs = reinterpret_cast<const uint64_t*>(h_state_ptrs);
  p.order = stream_order;
  p.conv_out = reinterpret_cast<const uint16_t*>(conv_out);
  p.g = g;
  p.beta = beta;
  p.out = reinterpret_cast<uint16_t*>(out);
  if (shape.k_dim <= 32) return launch_gdn_k<32>(stream, p);
  if (shape.k_dim <= 64) return launch_gdn_k<64>(stream, p);
  if (shape.k_dim <= 128) return launch_gdn_k<128>(stream, p);
  return launch_gdn_k<256>(stream, p);
}

}  // namespace pb::kernels
