// gdn_chunk_math.cuh: per-chunk math shared by the chunked GDN kernels
// (gdn_chunked.cu, gdn_split.cu) over one chunk of kC = 32 tokens (a warp's lanes):
// - the in-chunk gate scan G_i = sum_{j<=i} g_j (warp shuffles, lane = token);
// - the forward substitution of the unit lower triangular system (I + A) x = b
//   (chunked prep: b = the identity's columns, T = (I + A)^-1; split prep:
//   b = [beta v | beta e^G k]), a column per TPC consecutive lanes (TPC divides 32),
//   lane `sub` holding rows sub + TPC r in x[r], A strictly lower in shared memory
//   (A[i * as + j]), per (row, column) the same fmas in the same order (j ascending)
//   as a column walked row by row.
// Every lane of the warp calls these (the shuffles take all 32).
#pragma once

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

}  // namespace pb::kernels::detail
