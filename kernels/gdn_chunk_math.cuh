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

// R = beta (v - e^G (S0 k)) over v, for one lane's two columns of a row: d points at the
// pair of v (fp32, 8-byte aligned), r0 / r1 are S0 k there, gm = e^G and bt = beta of the row.
// v - e^G (S0 k) is one fmaf, written out: a product and a difference that the compiler may
// fuse or not would let R's bits depend on the walk (the block width), and every walk must
// round it the same way (the invariance check catches a difference); so every walk calls this.
__device__ __forceinline__ void r_over_v_pair(float* d, float bt, float gm, float r0, float r1) {
  float2* dv = reinterpret_cast<float2*>(d);
  const float2 x = *dv;
  *dv = make_float2(bt * fmaf(-gm, r0, x.x), bt * fmaf(-gm, r1, x.y));
}

// 4 q and 4 k values (two bf16 pairs each) scaled by their inverse norms, rounded to tf32, stored.
__device__ __forceinline__ void store_qk4(const uint2& qraw, const uint2& kraw, float2 inv, float* qd, float* kd) {
  float qf[4], kf[4];
  unpack4(qraw, qf);
  unpack4(kraw, kf);
  *reinterpret_cast<float4*>(kd) = make_float4(tf32_round(kf[0] * inv.y), tf32_round(kf[1] * inv.y),
                                               tf32_round(kf[2] * inv.y), tf32_round(kf[3] * inv.y));
  *reinterpret_cast<float4*>(qd) = make_float4(tf32_round(qf[0] * inv.x), tf32_round(qf[1] * inv.x),
                                               tf32_round(qf[2] * inv.x), tf32_round(qf[3] * inv.x));
}

// 8 q and 8 k values scaled by their inverse norms, rounded to tf32, stored.
__device__ __forceinline__ void store_qk8(const uint4& qraw, const uint4& kraw, float2 inv, float* qd, float* kd) {
  store_qk4(make_uint2(qraw.x, qraw.y), make_uint2(kraw.x, kraw.y), inv, qd, kd);
  store_qk4(make_uint2(qraw.z, qraw.w), make_uint2(kraw.z, kraw.w), inv, qd + 4, kd + 4);
}

// Where piece `idx` of a chunk's raw rows lands in shared memory. The raw rows are L
// 16-byte pieces (8 bf16) a token, copied unpadded; the staged rows are fp32 at a stride
// of 4 or 8 modulo 32 words. A thread that stored its piece's 8 values as two float4 at 8
// consecutive columns put lanes j and j + 4 of a quarter-warp on the same banks: two
// wavefronts where one would do (ncu, the 64-row walk on the H200: half of its STS.128
// wavefronts excessive, session 38). With L >= 8 the thread takes instead the 4 columns
// 4 j of each half of its row (j = idx % L): a quarter-warp's float4 stores cover 32
// consecutive columns of one row, conflict-free at any stride. At L = 8 (8 lanes a row)
// odd rows take their upper half first, so that a half-warp's 8-byte raw reads cover one
// 128-byte row whole. The same values land in the same places (bit-identical); below 8
// lanes a row the thread keeps its 8 consecutive columns (raw piece idx, column 8 j).
template <int L>
struct RawHalves {
  static constexpr bool kSplit = L >= 8;
  // the raw 8-byte piece a thread takes for its half hh (0, 1): an index into the row's 2 L
  // uint2, whose 4 values go to columns 4 piece .. 4 piece + 3
  __device__ __forceinline__ static int piece(int idx, int hh) {
    const int tt = idx / L, j = idx % L, half = L == 8 ? hh ^ (tt & 1) : hh;
    return half * L + j;
  }
};

// One staging thread's piece idx of a chunk's q and k: raw rows Rq, Rk (L pieces a token),
// scaled by the token's inverse norms inv, rounded to tf32, into Qd and Kd [tokens][ks].
template <int L>
__device__ __forceinline__ void stage_qk_piece(const uint4* Rq, const uint4* Rk, float2 inv, int idx, float* Qd,
                                               float* Kd, int ks) {
  const int tt = idx / L;
  if constexpr (RawHalves<L>::kSplit) {
    const uint2* q2 = reinterpret_cast<const uint2*>(Rq + tt * L);
    const uint2* k2 = reinterpret_cast<const uint2*>(Rk + tt * L);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int pc = RawHalves<L>::piece(idx, hh), c = 4 * pc;
      store_qk4(q2[pc], k2[pc], inv, Qd + tt * ks + c, Kd + tt * ks + c);
    }
  } else {
    const int c = 8 * (idx % L);
    store_qk8(Rq[idx], Rk[idx], inv, Qd + tt * ks + c, Kd + tt * ks + c);
  }
}

// One staging thread's piece idx of a chunk's v: raw rows Rv (L pieces a token) into Dd
// [tokens][ds], fp32.
template <int L>
__device__ __forceinline__ void stage_v_piece(const uint4* Rv, int idx, float* Dd, int ds) {
  const int tt = idx / L;
  if constexpr (RawHalves<L>::kSplit) {
    const uint2* v2 = reinterpret_cast<const uint2*>(Rv + tt * L);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int pc = RawHalves<L>::piece(idx, hh);
      float vf[4];
      unpack4(v2[pc], vf);
      *reinterpret_cast<float4*>(Dd + tt * ds + 4 * pc) = make_float4(vf[0], vf[1], vf[2], vf[3]);
    }
  } else {
    const int c = 8 * (idx % L);
    float vf[8];
    unpack8(Rv[idx], vf);
    *reinterpret_cast<float4*>(Dd + tt * ds + c) = make_float4(vf[0], vf[1], vf[2], vf[3]);
    *reinterpret_cast<float4*>(Dd + tt * ds + c + 4) = make_float4(vf[4], vf[5], vf[6], vf[7]);
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
