// gdn_split_lp.cpp: the lp reference of GdnPrecision::tf32_split, i.e. one chunk
// of kernels/gdn_split.cu's arithmetic on the host (its three launches: the
// chunk-local WY terms, the state scan, the outputs), tf32 rounding exactly where
// that kernel rounds, fp32 everywhere else. Invariant: a change to the kernel's
// roundings or order of operations must be mirrored here (docs/TOLERANCES.md).
#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/reference_internal.h"

namespace pb::detail {

// Per chunk, G_i = sum_{j<=i} g_j, S the state entering the chunk (names as in
// kernels/gdn_split.cu):
//   prep: A_ij = beta_i e^{G_i-G_j} tf32(k_i).tf32(k_j) (j < i); (I + A) [U | W] =
//         [beta_i v_i | (beta_i e^{G_i}) tf32(k_i)] by forward substitution (fp32, fma);
//         W is stored rounded to tf32 (it is only ever an operand)
//   scan: Delta_i = U_i - W_i tf32(S)^T;
//         S' = e^{G_last} S + sum_j tf32(e^{G_last-G_j} Delta_j) tf32(k_j)^T
//   out:  o_i = e^{G_i} (tf32(q_i) tf32(S)^T) + sum_{j<=i} tf32(e^{G_i-G_j} tf32(q_i).tf32(k_j)) tf32(Delta_j),
//         out_i = bf16(o_i / sqrt(dk))
// Products of two tf32 values are exact in fp32; each sum runs in fp32 in index
// order (Tf32Sums::wide: in double, a stand-in for another summation order).
namespace {

template <class Acc>
void chunk(int n, int dk, int dv, const float* q, const float* k, const float* v, const float* g,
           const float* beta, float* S, float* out, size_t out_stride) {
  std::vector<float> kt(static_cast<size_t>(n) * dk), qt(kt.size()), St(static_cast<size_t>(dk) * dv);
  for (size_t e = 0; e < kt.size(); ++e) kt[e] = round_tf32(k[e]), qt[e] = round_tf32(q[e]);
  for (int r = 0; r < dv; ++r)  // St = tf32(S)^T, [dk][dv]
    for (int c = 0; c < dk; ++c) St[c * dv + r] = round_tf32(S[r * dk + c]);
  std::vector<float> G(n), Gm(n), E(n);
  float acc = 0.f;
  for (int i = 0; i < n; ++i) G[i] = acc += g[i];
  const float G_last = G[n - 1];
  for (int i = 0; i < n; ++i) Gm[i] = std::exp(G[i]), E[i] = std::exp(G_last - G[i]);

  // prep: A, then [U | W] by forward substitution, column by column
  std::vector<float> A(static_cast<size_t>(n) * n, 0.f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < i; ++j) {
      Acc kk = 0.f;
      for (int c = 0; c < dk; ++c) kk += kt[i * dk + c] * kt[j * dk + c];
      A[i * n + j] = beta[i] * std::exp(G[i] - G[j]) * static_cast<float>(kk);
    }
  const int cols = dv + dk;
  std::vector<float> X(static_cast<size_t>(n) * cols);
  for (int i = 0; i < n; ++i) {
    const float bw = beta[i] * Gm[i];
    for (int r = 0; r < dv; ++r) X[i * cols + r] = beta[i] * v[i * dv + r];
    for (int c = 0; c < dk; ++c) X[i * cols + dv + c] = bw * kt[i * dk + c];
  }
  for (int i = 1; i < n; ++i)
    for (int j = 0; j < i; ++j)
      for (int r = 0; r < cols; ++r) X[i * cols + r] = std::fma(-A[i * n + j], X[j * cols + r], X[i * cols + r]);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < dk; ++c) X[i * cols + dv + c] = round_tf32(X[i * cols + dv + c]);

  // scan: Delta = U - W tf32(S)^T
  std::vector<float> D(static_cast<size_t>(n) * dv);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < dv; ++r) {
      Acc s = 0.f;
      for (int c = 0; c < dk; ++c) s += X[i * cols + dv + c] * St[c * dv + r];
      D[i * dv + r] = X[i * cols + r] - static_cast<float>(s);
    }
  // out
  const float inv_sqrt_dk = 1.f / std::sqrt(static_cast<float>(dk));
  std::vector<float> M(static_cast<size_t>(n) * n, 0.f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) {
      Acc qk = 0.f;
      for (int c = 0; c < dk; ++c) qk += qt[i * dk + c] * kt[j * dk + c];
      M[i * n + j] = round_tf32(std::exp(G[i] - G[j]) * static_cast<float>(qk));
    }
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < dv; ++r) {
      Acc sq = 0.f;
      for (int c = 0; c < dk; ++c) sq += qt[i * dk + c] * St[c * dv + r];
      Acc oi = Gm[i] * static_cast<float>(sq);
      for (int j = 0; j <= i; ++j) oi += M[i * n + j] * round_tf32(D[j * dv + r]);
      out[i * out_stride + r] = round_bf16(static_cast<float>(oi) * inv_sqrt_dk);
    }
  // the state update (scan)
  const float gl = std::exp(G_last);
  std::vector<Acc> row(dk);
  for (int r = 0; r < dv; ++r) {
    for (int c = 0; c < dk; ++c) row[c] = S[r * dk + c] * gl;
    for (int j = 0; j < n; ++j) {
      const float a = round_tf32(E[j] * D[j * dv + r]);
      for (int c = 0; c < dk; ++c) row[c] += a * kt[j * dk + c];
    }
    for (int c = 0; c < dk; ++c) S[r * dk + c] = static_cast<float>(row[c]);
  }
}

}  // namespace

void gdn_chunk_split(int n, int dk, int dv, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, float* S, float* out, size_t out_stride,
                     Tf32Sums sums) {
  if (sums == Tf32Sums::wide) chunk<double>(n, dk, dv, q, k, v, g, beta, S, out, out_stride);
  else chunk<float>(n, dk, dv, q, k, v, g, beta, S, out, out_stride);
}
}  // namespace pb::detail
