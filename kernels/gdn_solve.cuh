// gdn_solve.cuh: the forward substitution of the chunked GDN kernels' unit lower
// triangular system (I + A) x = b over one chunk's kC tokens, shared by the chunked
// kernel's prep (b = the identity's columns: T = (I + A)^-1) and the split's prep
// (b = [beta v | beta e^G k]).
// Invariants: a column per TPC consecutive lanes (TPC divides 32), lane `sub` of it
// holding rows sub + TPC r in x[r]; A strictly lower in shared memory, A[i * as + j];
// per (row, column) the same fmas in the same order (j ascending) as a column walked
// row by row. Every lane of the warp calls it (the shuffles take all 32).
#pragma once

namespace pb::kernels::detail {

// Steps j < j0 are skipped: the caller knows x_j = 0 there for every column of the warp.
template <int TPC, int RPT, int kC>
__device__ __forceinline__ void forward_substitute(float (&x)[RPT], const float* A, int as, int sub, int lane,
                                                   int j0 = 0) {
#pragma unroll
  for (int j = 0; j < kC - 1; ++j) {
    if (j < j0) continue;  // warp-uniform
    const float xj = __shfl_sync(0xffffffffu, x[j / TPC], (lane & ~(TPC - 1)) | (j % TPC));
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const int i = sub + TPC * r;
      if (i > j) x[r] = fmaf(-A[i * as + j], xj, x[r]);
    }
  }
}

}  // namespace pb::kernels::detail
