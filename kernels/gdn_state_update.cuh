// gdn_state_update.cuh: the gated delta rule's state in mma accumulators, shared by
// the chunked kernel (gdn_chunked.cu) and the split's scan (gdn_split.cu): loading a
// stream's state block from h_state, the per-chunk update S = e^{G_last} S +
// (tf32(e^{G_last - G_j} Delta_j))^T K_j over the chunk's kC tokens followed by S's
// tf32 copy for the next chunk's products, and the store back.
// Invariants: the fp32 state lives in this warp's mma accumulators (TM x TN tiles of
// 16 x 8 at tile (sm0, sn0) of [v rows][k_dim]; the *_t forms, for 8-row v blocks, hold
// S^T instead: tiles of [k_dim][v rows], with the same products summed in the same
// order, so the same bits); Delta [kC][ds] (v columns) and K
// [kC][ks] (k_dim columns, tf32 values) are in shared memory, token-major; the
// roundings are the lp's (reference/gdn_chunked_lp.cpp, gdn_split_lp.cpp).
#pragma once
#include "kernels/mma_tf32.cuh"

namespace pb::kernels::detail {

// f(mi, ni, hr, v, c) for each row half of this warp's state tiles: the accumulator
// pair Sr[mi][ni][2 hr], [2 hr + 1] is the state at row v, columns c and c + 1.
template <int TM, int TN, class F>
__device__ __forceinline__ void for_state_pairs(int sm0, int sn0, int fg, int ft, F&& f) {
#pragma unroll
  for (int mi = 0; mi < TM; ++mi)
#pragma unroll
    for (int ni = 0; ni < TN; ++ni)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) f(mi, ni, hr, 16 * (sm0 + mi) + fg + 8 * hr, 8 * (sn0 + ni) + 2 * ft);
}

// Sr <- the block [v0, v0 + vn) x [0, dk) of S_g ([v_dim][dk] fp32; zero past vn or dk),
// and its tf32 copy into S_s [v][ss].
template <int TM, int TN>
__device__ __forceinline__ void gdn_state_load(float (&Sr)[TM][TN][4], const float* S_g, int v0, int vn, int dk,
                                               float* S_s, int ss, int sm0, int sn0, int fg, int ft) {
  for_state_pairs<TM, TN>(sm0, sn0, fg, ft, [&](int mi, int ni, int hr, int v, int c) {
    float2 x = make_float2(0.f, 0.f);
    if (v < vn && c < dk) x = *reinterpret_cast<const float2*>(S_g + static_cast<size_t>(v0 + v) * dk + c);
    Sr[mi][ni][2 * hr] = x.x;
    Sr[mi][ni][2 * hr + 1] = x.y;
    *reinterpret_cast<float2*>(&S_s[v * ss + c]) = make_float2(tf32_round(x.x), tf32_round(x.y));
  });
}

// The block back into S_g (rows past vn, columns past dk untouched).
template <int TM, int TN>
__device__ __forceinline__ void gdn_state_store(const float (&Sr)[TM][TN][4], float* S_g, int v0, int vn, int dk,
                                                int sm0, int sn0, int fg, int ft) {
  for_state_pairs<TM, TN>(sm0, sn0, fg, ft, [&](int mi, int ni, int hr, int v, int c) {
    if (v < vn && c < dk)
      *reinterpret_cast<float2*>(S_g + static_cast<size_t>(v0 + v) * dk + c) =
          make_float2(Sr[mi][ni][2 * hr], Sr[mi][ni][2 * hr + 1]);
  });
}

// Sr *= g: the chunk's decay e^{G_last} of every accumulator (either form).
template <int TM, int TN>
__device__ __forceinline__ void scale_state(float (&Sr)[TM][TN][4], float g) {
#pragma unroll
  for (int mi = 0; mi < TM; ++mi)
#pragma unroll
    for (int ni = 0; ni < TN; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) Sr[mi][ni][e] *= g;
}

template <int TM, int TN, int kC>
__device__ __forceinline__ void gdn_state_update(float (&Sr)[TM][TN][4], float g_last_exp, const float* E,
                                                 const float* D, int ds, const float* K, int ks, float* S_s, int ss,
                                                 int sm0, int sn0, int fg, int ft) {
  scale_state(Sr, g_last_exp);
#pragma unroll
  for (int kk = 0; kk < kC; kk += 8) {
    const float e0 = E[kk + ft], e1 = E[kk + ft + 4];
    const float* D0 = D + (kk + ft) * ds;
    const float* D1 = D + (kk + ft + 4) * ds;
    uint32_t a[TM][4];
#pragma unroll
    for (int mi = 0; mi < TM; ++mi) {
      const int vr = 16 * (sm0 + mi) + fg;
      a[mi][0] = tf32_bits(e0 * D0[vr]);
      a[mi][1] = tf32_bits(e0 * D0[vr + 8]);
      a[mi][2] = tf32_bits(e1 * D1[vr]);
      a[mi][3] = tf32_bits(e1 * D1[vr + 8]);
    }
#pragma unroll
    for (int ni = 0; ni < TN; ++ni) {
      uint32_t bk[2];
      load_b_kn(bk, K + kk * ks + 8 * (sn0 + ni), ks, fg, ft);
#pragma unroll
      for (int mi = 0; mi < TM; ++mi) mma_tf32(Sr[mi][ni], a[mi], bk);
    }
  }
  for_state_pairs<TM, TN>(sm0, sn0, fg, ft, [&](int mi, int ni, int hr, int v, int c) {
    *reinterpret_cast<float2*>(&S_s[v * ss + c]) =
        make_float2(tf32_round(Sr[mi][ni][2 * hr]), tf32_round(Sr[mi][ni][2 * hr + 1]));
  });
}

// ---- The transposed forms (*_t): the accumulators hold S^T, TM x TN tiles of 16 x 8
// at tile (sm0, sn0) of [k_dim][v rows], for v blocks of 8 rows (a 16-row state tile
// would be half padding). The update multiplies the same pairs (K_j[c] and
// tf32(e^{G_last-G_j} Delta_j[v])) and sums them over j in the same steps of 8 as
// gdn_state_update, so S is bit-identical whichever form a block uses.

// f(mi, ni, e, v, c): the accumulator Sr[mi][ni][e] is the state at row v, column c.
template <int TM, int TN, class F>
__device__ __forceinline__ void for_state_elems_t(int sm0, int sn0, int fg, int ft, F&& f) {
#pragma unroll
  for (int mi = 0; mi < TM; ++mi)
#pragma unroll
    for (int ni = 0; ni < TN; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f(mi, ni, e, 8 * (sn0 + ni) + 2 * ft + (e & 1), 16 * (sm0 + mi) + fg + 8 * (e >> 1));
}

template <int TM, int TN>
__device__ __forceinline__ void gdn_state_load_t(float (&Sr)[TM][TN][4], const float* S_g, int v0, int vn, int dk,
                                                 float* S_s, int ss, int sm0, int sn0, int fg, int ft) {
  for_state_elems_t<TM, TN>(sm0, sn0, fg, ft, [&](int mi, int ni, int e, int v, int c) {
    const float x = v < vn && c < dk ? S_g[static_cast<size_t>(v0 + v) * dk + c] : 0.f;
    Sr[mi][ni][e] = x;
    S_s[v * ss + c] = tf32_round(x);
  });
}

template <int TM, int TN>
__device__ __forceinline__ void gdn_state_store_t(const float (&Sr)[TM][TN][4], float* S_g, int v0, int vn, int dk,
                                                  int sm0, int sn0, int fg, int ft) {
  for_state_elems_t<TM, TN>(sm0, sn0, fg, ft, [&](int mi, int ni, int e, int v, int c) {
    if (v < vn && c < dk) S_g[static_cast<size_t>(v0 + v) * dk + c] = Sr[mi][ni][e];
  });
}

template <int TM, int TN, int kC>
__device__ __forceinline__ void gdn_state_update_t(float (&Sr)[TM][TN][4], float g_last_exp, const float* E,
                                                   const float* D, int ds, const float* K, int ks, float* S_s, int ss,
                                                   int sm0, int sn0, int fg, int ft) {
  scale_state(Sr, g_last_exp);
#pragma unroll
  for (int kk = 0; kk < kC; kk += 8) {
    const float e0 = E[kk + ft], e1 = E[kk + ft + 4];
    const float* D0 = D + (kk + ft) * ds;
    const float* D1 = D + (kk + ft + 4) * ds;
    uint32_t b[TN][2];  // tf32(e Delta): k = token, n = v row
#pragma unroll
    for (int ni = 0; ni < TN; ++ni) {
      const int vr = 8 * (sn0 + ni) + fg;
      b[ni][0] = tf32_bits(e0 * D0[vr]);
      b[ni][1] = tf32_bits(e1 * D1[vr]);
    }
#pragma unroll
    for (int mi = 0; mi < TM; ++mi) {
      const float* Kc = K + kk * ks + 16 * (sm0 + mi) + fg;  // K^T: m = column c, k = token
      const uint32_t a[4] = {__float_as_uint(Kc[ft * ks]), __float_as_uint(Kc[ft * ks + 8]),
                             __float_as_uint(Kc[(ft + 4) * ks]), __float_as_uint(Kc[(ft + 4) * ks + 8])};
#pragma unroll
      for (int ni = 0; ni < TN; ++ni) mma_tf32(Sr[mi][ni], a, b[ni]);
    }
  }
  for_state_elems_t<TM, TN>(sm0, sn0, fg, ft,
                            [&](int mi, int ni, int e, int v, int c) { S_s[v * ss + c] = tf32_round(Sr[mi][ni][e]); });
}

}  // namespace pb::kernels::detail
