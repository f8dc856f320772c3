// gdn_bf16_lp.cpp: the lp reference of GdnPrecision::bf16_chunk64, the arithmetic of
// the widely used Triton GDN prefill (flash-linear-attention 0.5.2's
// chunk_gated_delta_rule, read from its source: the fused kkt + solve, recompute_w_u,
// chunk_gated_delta_rule_fwd_h and chunk_fwd_o kernels) on one chunk of 64 tokens:
// bf16 operands wherever that kernel stores or casts to bf16, fp32 sums and an fp32
// carried state. Invariant: a change to a rounding point below names the kernel line
// it follows (docs/TOLERANCES.md).
#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/reference_internal.h"

namespace pb::detail {

// Per chunk, G_i = sum_{j<=i} g_j (fp32), S the fp32 state entering it ([dv][dk]),
// b() = round to bf16:
//   q, k: b(q), b(k) (the L2 norm's output is stored in bf16)
//   A_ij = beta_i e^{G_i-G_j} k_i.k_j (j < i), T = (I + A)^-1 in fp32, stored b(T)
//   U = b(b(T) b(beta v)), W = b(b(T) b(beta e^G k))                  (recompute_w_u)
//   per chunk, S_b = b(S) (the stored state snapshot):
//     V_i = U_i - W_i S_b^T (fp32), stored b(V)                        (fwd_h's v_new)
//     S' = e^{G_last} S + sum_j b(e^{G_last-G_j} V_j) k_j^T           (fwd_h, fp32 S)
//   o_i = e^{G_i} (q_i S_b^T) + sum_{j<=i} b(e^{G_i-G_j} q_i.k_j) b(V_j), out_i = b(o_i / sqrt(dk))
// Products of two bf16 values are exact in fp32; each sum runs in fp32 in index order
// (Tf32Sums::wide: in double, a stand-in for a kernel summing in another order).
namespace {

template <class Acc>
void chunk(int n, int dk, int dv, const float* q, const float* k, const float* v, const float* g,
           const float* beta, float* S, float* out, size_t out_stride) {
  std::vector<float> kb(static_cast<size_t>(n) * dk), qb(kb.size()), Sb(static_cast<size_t>(dv) * dk);
  for (size_t e = 0; e < kb.size(); ++e) kb[e] = round_bf16(k[e]), qb[e] = round_bf16(q[e]);
  for (size_t e = 0; e < Sb.size(); ++e) Sb[e] = round_bf16(S[e]);
  std::vector<float> G(n);
  float acc = 0.f;
  for (int i = 0; i < n; ++i) G[i] = acc += g[i];
  const float G_last = G[n - 1];

  // T = (I + A)^-1 by forward substitution on the identity (fp32), then stored in bf16
  std::vector<float> A(static_cast<size_t>(n) * n, 0.f), T(A.size(), 0.f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < i; ++j) {
      Acc kk = 0.f;
      for (int c = 0; c < dk; ++c) kk += kb[i * dk + c] * kb[j * dk + c];
      A[i * n + j] = beta[i] * std::exp(G[i] - G[j]) * static_cast<float>(kk);
    }
  for (int i = 0; i < n; ++i) {
    T[i * n + i] = 1.f;
    for (int c = 0; c < i; ++c) {
      Acc s = 0.f;
      for (int j = c; j < i; ++j) s += A[i * n + j] * T[j * n + c];
      T[i * n + c] = -static_cast<float>(s);
    }
  }
  for (float& t : T) t = round_bf16(t);

  // U, W = b(T) [b(beta v) | b(beta e^G k)], stored in bf16
  std::vector<float> U(static_cast<size_t>(n) * dv), W(static_cast<size_t>(n) * dk);
  std::vector<float> bv(U.size()), bk(W.size());
  for (int i = 0; i < n; ++i) {
    for (int r = 0; r < dv; ++r) bv[i * dv + r] = round_bf16(beta[i] * v[i * dv + r]);
    const float s = beta[i] * std::exp(G[i]);
    for (int c = 0; c < dk; ++c) bk[i * dk + c] = round_bf16(s * kb[i * dk + c]);
  }
  for (int i = 0; i < n; ++i) {
    for (int r = 0; r < dv; ++r) {
      Acc s = 0.f;
      for (int j = 0; j <= i; ++j) s += T[i * n + j] * bv[j * dv + r];
      U[i * dv + r] = round_bf16(static_cast<float>(s));
    }
    for (int c = 0; c < dk; ++c) {
      Acc s = 0.f;
      for (int j = 0; j <= i; ++j) s += T[i * n + j] * bk[j * dk + c];
      W[i * dk + c] = round_bf16(static_cast<float>(s));
    }
  }

  // V = U - W b(S)^T: fp32 for the state update, b(V) for the outputs
  std::vector<float> V(static_cast<size_t>(n) * dv), Vb(V.size());
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < dv; ++r) {
      Acc s = 0.f;
      for (int c = 0; c < dk; ++c) s += W[i * dk + c] * Sb[r * dk + c];
      V[i * dv + r] = U[i * dv + r] - static_cast<float>(s);
      Vb[i * dv + r] = round_bf16(V[i * dv + r]);
    }

  // outputs, from the snapshot b(S) and b(V)
  const float inv_sqrt_dk = 1.f / std::sqrt(static_cast<float>(dk));
  std::vector<float> M(static_cast<size_t>(n) * n, 0.f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) {
      Acc qk = 0.f;
      for (int c = 0; c < dk; ++c) qk += qb[i * dk + c] * kb[j * dk + c];
      M[i * n + j] = round_bf16(std::exp(G[i] - G[j]) * static_cast<float>(qk));
    }
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < dv; ++r) {
      Acc sq = 0.f;
      for (int c = 0; c < dk; ++c) sq += qb[i * dk + c] * Sb[r * dk + c];
      Acc oi = std::exp(G[i]) * static_cast<float>(sq);
      for (int j = 0; j <= i; ++j) oi += M[i * n + j] * Vb[j * dv + r];
      out[i * out_stride + r] = round_bf16(static_cast<float>(oi) * inv_sqrt_dk);
    }

  // the state update: S = e^{G_last} S + sum_j b(e^{G_last-G_j} V_j) k_j^T (fp32 S)
  const float gl = std::exp(G_last);
  std::vector<float> E(static_cast<size_t>(n) * dv);
  for (int j = 0; j < n; ++j)
    for (int r = 0; r < dv; ++r) E[j * dv + r] = round_bf16(std::exp(G_last - G[j]) * V[j * dv + r]);
  std::vector<Acc> row(dk);
  for (int r = 0; r < dv; ++r) {
    for (int c = 0; c < dk; ++c) row[c] = S[r * dk + c] * gl;
    for (int j = 0; j < n; ++j) {
      const float a = E[j * dv + r];
      for (int c = 0; c < dk; ++c) row[c] += a * kb[j * dk + c];
    }
    for (int c = 0; c < dk; ++c) S[r * dk + c] = static_cast<float>(row[c]);
  }
}

}  // namespace

void gdn_chunk_bf16(int n, int dk, int dv, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, float* S, float* out, size_t out_stride, Tf32Sums sums) {
  if (sums == Tf32Sums::wide) chunk<double>(n, dk, dv, q, k, v, g, beta, S, out, out_stride);
  else chunk<float>(n, dk, dv, q, k, v, g, beta, S, out, out_stride);
}

}  // namespace pb::detail
