// gdn_chunk_math.cuh: per-chunk math shared by the chunked GDN kernels
// (gdn_chunked.cu, gdn_split.cu) over one chunk of kC = 32 tokens (a warp's lanes):
// - the in-chunk gate scan G_i = sum_{j<=i} g_j (warp shuffles, lane = token);
// - the forward substitution of the unit lower triangular system (I + A) x = b
//   (chunked prep: b = the identity's columns, T = (I + A)^-1; split prep:
//   b = [beta v | beta e^G k]), a column per TPC consecutive lanes (TPC divides 32),
//   lane `sub` holding rows sub + TPC r in x[r], A strictly lower in shared memory
//   (A[i * as + j]), per (row, column) the same fmas in the same order (j ascending)
//   as a column walked row by row.
// - X = T R with T lower triangular (the chunked walk's Delta = T R, the split prep's
//   [U | W] = T [beta v | beta e^G k]) in 3xTF32;
// - q's and k's inverse l2 norms from 16-byte pieces of the bf16 rows, and the normalised
//   tf32 values, staged for a chunk by stage_qk (both preps, so that the two forms
//   normalise with the same bits).
// Every lane of the warp calls these (the shuffles take all 32).
#pragma once
#include "kernels/common.cuh"
#include "kernels/mma_tf32.cuh"

namespace pb::kernels::detail {

// G_i for this lane's token (padded tokens: g = 0).
__device__ __forceinline__ float g_scan(float g) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, g, off);
    if (lane >= off) g += y;
  }
  return g;
}

// Warp w (0 unless given): the gates of the chunk of n tokens at row t0, v head h, into
// G_s (the scan) and B_s (beta; skipped when null); padded tokens g = 0, beta = 0 (no effect).
__device__ __forceinline__ void load_chunk_gates(const float* g, const float* beta, int num_v_heads, int t0, int n,
                                                 int h, float* G_s, float* B_s, int w = 0) {
  const int lane = threadIdx.x & 31;
  if (static_cast<int>(threadIdx.x >> 5) != w) return;
  const bool ok = lane < n;
  const size_t gi = static_cast<size_t>(t0 + (ok ? lane : 0)) * num_v_heads + h;
  G_s[lane] = g_scan(ok ? g[gi] : 0.f);
  if (B_s) B_s[lane] = ok ? beta[gi] : 0.f;
}

// Steps j < j0 are skipped: the caller knows x_j = 0 there for every column of the
// warp; so are steps j >= j1: the caller knows A's column j is zero below the diagonal.
template <int TPC, int RPT, int kC>
__device__ __forceinline__ void forward_substitute(float (&x)[RPT], const float* A, int as, int sub, int lane,
                                                   int j0 = 0, int j1 = kC - 1) {
#pragma unroll
  for (int j = 0; j < kC - 1; ++j) {
    if (j < j0) continue;   // warp-uniform
    if (j >= j1) break;     // warp-uniform
    const float xj = __shfl_sync(0xffffffffu, x[j / TPC], (lane & ~(TPC - 1)) | (j % TPC));
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const int i = sub + TPC * r;
      if (i > j) x[r] = fmaf(-A[i * as + j], xj, x[r]);
    }
  }
}

// The 16 x 8 tiles (pa, pn .. pn + TN - 1) of T R (m = tokens of tile pa, n = columns of R,
// k = tokens j <= 16 pa + 15), T [kC][ts] lower triangular fp32, R [kC][rs] fp32, both in
// shared memory, in 3xTF32: hi and lo tf32 parts of both operands, lo hi + hi lo + hi hi
// per k-step (fp32-accurate); k-steps above the diagonal (T zero there) skipped.
template <int TN, int kC>
__device__ __forceinline__ void lower_product_3xtf32(float (&d)[TN][4], const float* T, int ts, const float* R, int rs,
                                                     int pa, int pn, int fg, int ft, bool active) {
#pragma unroll
  for (int ni = 0; ni < TN; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[ni][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kC; kk += 8) {
    if (!active || kk >= 16 * (pa + 1)) break;  // above the diagonal: T is zero there
    const float* X = T + 16 * pa * ts + kk;
    const float ta[4] = {X[fg * ts + ft], X[(fg + 8) * ts + ft], X[fg * ts + ft + 4], X[(fg + 8) * ts + ft + 4]};
    uint32_t ahi[4], alo[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      ahi[e] = tf32_bits(ta[e]);
      alo[e] = tf32_bits(ta[e] - __uint_as_float(ahi[e]));
    }
#pragma unroll
    for (int ni = 0; ni < TN; ++ni) {
      const float* Y = R + kk * rs + 8 * (pn + ni);
      const float rb[2] = {Y[ft * rs + fg], Y[(ft + 4) * rs + fg]};
      uint32_t bhi[2], blo[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        bhi[e] = tf32_bits(rb[e]);
        blo[e] = tf32_bits(rb[e] - __uint_as_float(bhi[e]));
      }
      mma_tf32(d[ni], alo, bhi);
      mma_tf32(d[ni], ahi, blo);
      mma_tf32(d[ni], ahi, bhi);
    }
  }
}

// The inverse l2 norms (q, k) of one token (eps 1e-6 inside the sqrt), each of its
// QL lanes holding 8 of its q and k values. Whole warps call it (the preps; the chunked walk
// reads its prep's values back, so both use the same bits).
template <int QL>
__device__ __forceinline__ float2 qk_inv_norms(const uint4& qraw, const uint4& kraw) {
  float qf[8], kf[8];
  unpack8(qraw, qf);
  unpack8(kraw, kf);
  float ssq = 0.f, ssk = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    ssq = fmaf(qf[e], qf[e], ssq);
    ssk = fmaf(kf[e], kf[e], ssk);
  }
#pragma unroll
  for (int off = QL / 2; off > 0; off >>= 1) {  // the QL lanes of one token
    ssq += __shfl_xor_sync(0xffffffffu, ssq, off);
    ssk += __shfl_xor_sync(0xffffffffu, ssk, off);
  }
  return make_float2(1.f / sqrtf(ssq + 1e-6f), 1.f / sqrtf(ssk + 1e-6f));
}

// 8 q and 8 k values scaled by their inverse norms, rounded to tf32, stored.
__device__ __forceinline__ void store_qk8(const uint4& qraw, const uint4& kraw, float2 inv, float* qd, float* kd) {
  float qf[8], kf[8];
  unpack8(qraw, qf);
  unpack8(kraw, kf);
#pragma unroll
  for (int e = 0; e < 8; e += 4) {
    *reinterpret_cast<float4*>(kd + e) = make_float4(tf32_round(kf[e] * inv.y), tf32_round(kf[e + 1] * inv.y),
                                                     tf32_round(kf[e + 2] * inv.y), tf32_round(kf[e + 3] * inv.y));
    *reinterpret_cast<float4*>(qd + e) = make_float4(tf32_round(qf[e] * inv.x), tf32_round(qf[e + 1] * inv.x),
                                                     tf32_round(qf[e + 2] * inv.x), tf32_round(qf[e + 3] * inv.x));
  }
}

// One chunk's q and k rows (n tokens from conv_out row t0; q at column q_off, k at k_off,
// k_dim dk) staged to Q_s and K_s [kC][ks] as tf32, L2-normalised: QL lanes a token, 8
// values a lane (16-byte pieces), every load of the thread in flight before the first use;
// zero past n and dk, stored up to column `width` (a multiple of 8, <= 8 QL). on_norm(tt, inv)
// runs once per token row tt < n with its inverse norms (q, k). Called by all kThreads.
template <int QL, int kThreads, class OnNorm>
__device__ __forceinline__ void stage_qk(const uint16_t* conv_out, int conv_dim, size_t q_off, size_t k_off, int t0,
                                         int n, int dk, float* Q_s, float* K_s, int ks, int width, OnNorm on_norm) {
  constexpr int QN = 32 * QL, QR = (QN + kThreads - 1) / kThreads;
  static_assert(QN % 32 == 0 && kThreads % 32 == 0, "whole warps per staging slot (the norms' shuffles)");
  const int tid = threadIdx.x;
  uint4 qr[QR], kr[QR];
#pragma unroll
  for (int r = 0; r < QR; ++r) {
    const int idx = tid + r * kThreads, tt = idx / QL, col = 8 * (idx % QL);
    qr[r] = kr[r] = make_uint4(0, 0, 0, 0);
    if (idx < QN && tt < n && col < dk) {
      const uint16_t* row = conv_out + static_cast<size_t>(t0 + tt) * conv_dim;
      qr[r] = *reinterpret_cast<const uint4*>(row + q_off + col);
      kr[r] = *reinterpret_cast<const uint4*>(row + k_off + col);
    }
  }
#pragma unroll
  for (int r = 0; r < QR; ++r) {
    const int idx = tid + r * kThreads, tt = idx / QL, col = 8 * (idx % QL);
    if (QR * kThreads > QN && idx >= QN) continue;  // warp-uniform (QN a multiple of 32)
    const float2 inv = qk_inv_norms<QL>(qr[r], kr[r]);
    if (col < width) store_qk8(qr[r], kr[r], inv, Q_s + tt * ks + col, K_s + tt * ks + col);
    if (idx % QL == 0 && tt < n) on_norm(tt, inv);
  }
}

}  // namespace pb::kernels::detail
