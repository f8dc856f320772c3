// gdn_chunked_lp.cpp: the lp reference of GdnPrecision::tf32_chunked, i.e. one
// chunk of kernels/gdn_chunked.cu's arithmetic on the host: the same products in
// the same form, tf32 rounding (cvt.rn) exactly where the kernel rounds an mma
// operand, fp32 everywhere else. Invariant: a change to the kernel's roundings
// or its order of operations must be mirrored here (docs/TOLERANCES.md).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "reference/reference_internal.h"

namespace pb::detail {

float round_tf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;  // NaN, infinity
  u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;   // nearest, ties to even
  std::memcpy(&f, &u, 4);
  return f;
}

// Per chunk, G_i = sum_{j<=i} g_j, S0 the state before the chunk (the kernel's
// steps 1-4b; names as in kernels/gdn_chunked.cu):
//   P1: R_i = beta_i (v_i - e^{G_i} tf32(S0) tf32(k_i)),  o_i = e^{G_i} tf32(S0) tf32(q_i)
//   P2: A_ij = beta_i e^{G_i-G_j} tf32(k_i).tf32(k_j) (j < i), M_ij = tf32(e^{G_i-G_j} tf32(q_i).tf32(k_j)) (j <= i)
//   (I + A) Delta = R by forward substitution (fp32, fma)
//   P3: o_i += sum_{j<=i} M_ij tf32(Delta_j);  out_i = bf16(o_i / sqrt(dk))
//   P4: S = e^{G_last} S0 + sum_j tf32(e^{G_last-G_j} Delta_j) tf32(k_j)^T
// Products of two tf32 values are exact in fp32; sums run in fp32 in token /
// column order (the tensor core's internal summation order is not modelled;
// Tf32Sums::wide sums in double instead, to bound what that order can change).
namespace {

// Acc: the type the products are summed in (float: the kernel's accumulators).
template <class Acc>
void chunk(int n, int dk, int dv, const float* q, const float* k, const float* v, const float* g,
           const float* beta, float* S, float* out, size_t out_stride) {
  std::vector<float> kt(static_cast<size_t>(n) * dk), qt(kt.size()), St(static_cast<size_t>(dk) * dv);
  for (size_t e = 0; e < kt.size(); ++e) kt[e] = round_tf32(k[e]), qt[e] = round_tf32(q[e]);
  for (int r = 0; r < dv; ++r)  // St = tf32(S0)^T, [dk][dv]: the loops below run along v rows
    for (int c = 0; c < dk; ++c) St[c * dv + r] = round_tf32(S[r * dk + c]);
  std::vector<float> G(n), Gm(n), E(n);
  float acc = 0.f;
  for (int i = 0; i < n; ++i) G[i] = acc += g[i];
  const float G_last = G[n - 1];  // padded tokens have g = 0
  for (int i = 0; i < n; ++i) Gm[i] = std::exp(G[i]), E[i] = std::exp(G_last - G[i]);

  // P1
  std::vector<float> D(static_cast<size_t>(n) * dv), o(D.size());
  std::vector<Acc> sk(dv), sq(dv);
  for (int i = 0; i < n; ++i) {
    std::fill(sk.begin(), sk.end(), Acc(0));
    std::fill(sq.begin(), sq.end(), Acc(0));
    for (int c = 0; c < dk; ++c) {  // each sum in column order
      const float kc = kt[i * dk + c], qc = qt[i * dk + c];
      for (int r = 0; r < dv; ++r) {
        sk[r] += kc * St[c * dv + r];
        sq[r] += qc * St[c * dv + r];
      }
    }
    for (int r = 0; r < dv; ++r) {
      D[i * dv + r] = beta[i] * std::fma(-Gm[i], static_cast<float>(sk[r]), v[i * dv + r]);
      o[i * dv + r] = static_cast<float>(sq[r]) * Gm[i];
    }
  }
  // P2
  std::vector<float> A(static_cast<size_t>(n) * n, 0.f), M(A.size(), 0.f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) {
      Acc kk = 0.f, qk = 0.f;
      for (int c = 0; c < dk; ++c) {
        kk += kt[i * dk + c] * kt[j * dk + c];
        qk += qt[i * dk + c] * kt[j * dk + c];
      }
      const float dec = std::exp(G[i] - G[j]);
      if (j < i) A[i * n + j] = beta[i] * dec * static_cast<float>(kk);
      M[i * n + j] = round_tf32(dec * static_cast<float>(qk));
    }
  // (I + A) Delta = R
  for (int j = 0; j < n; ++j)
    for (int i = j + 1; i < n; ++i)
      for (int r = 0; r < dv; ++r) D[i * dv + r] = std::fma(-A[i * n + j], D[j * dv + r], D[i * dv + r]);
  // P3 and the output
  const float inv_sqrt_dk = 1.f / std::sqrt(static_cast<float>(dk));
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < dv; ++r) {
      Acc oi = o[i * dv + r];
      for (int j = 0; j <= i; ++j) oi += M[i * n + j] * round_tf32(D[j * dv + r]);
      out[i * out_stride + r] = round_bf16(static_cast<float>(oi) * inv_sqrt_dk);
    }
  // P4
  const float gl = std::exp(G_last);
  std::vector<Acc> row(dk);
  for (int r = 0; r < dv; ++r) {
    for (int c = 0; c < dk; ++c) row[c] = S[r * dk + c] * gl;
    for (int j = 0; j < n; ++j) {  // each sum in token order
      const float a = round_tf32(E[j] * D[j * dv + r]);
      for (int c = 0; c < dk; ++c) row[c] += a * kt[j * dk + c];
    }
    for (int c = 0; c < dk; ++c) S[r * dk + c] = static_cast<float>(row[c]);
  }
}

}  // namespace

void gdn_chunk_tf32(int n, int dk, int dv, const float* q, const float* k, const float* v,
                    const float* g, const float* beta, float* S, float* out, size_t out_stride,
                    Tf32Sums sums) {
  if (sums == Tf32Sums::wide) chunk<double>(n, dk, dv, q, k, v, g, beta, S, out, out_stride);
  else chunk<float>(n, dk, dv, q, k, v, g, beta, S, out, out_stride);
}
}  // namespace pb::detail
