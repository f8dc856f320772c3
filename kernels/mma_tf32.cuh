// mma_tf32.cuh: tf32 tensor-core helpers shared by the GDN kernels (gdn_chunked.cu,
// gdn_split.cu): the tf32 rounding (cvt.rn: nearest, ties to even), mma.sync m16n8k8 (fp32 accumulators) and fragment
// loads of tf32 values from shared memory. Fragments, g = lane / 4, t = lane % 4:
// A (16 x 8): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); B (8 x 8):
// b0 (k t, n g), b1 (k t+4, n g); C (16 x 8): c0,c1 (g, 2t..2t+1), c2,c3 (g+8, ..).
// Conflict-free strides: 4 (mod 32) for fragments read along a row ([m][k] A,
// [n][k] B), 8 (mod 32) for fragments read down a column ([k][n] B).
#pragma once
#include <cstdint>

namespace pb::kernels::detail {

// Round to nearest, ties to even (cvt.rn, sm_90: one SASS instruction where cvt.rna, ties
// away, is three; kernels/PERF-NOTES.md "session 30"); NaN stays NaN, infinity infinity.
__device__ __forceinline__ uint32_t tf32_bits(float f) {
  uint32_t r;
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return r;
}
__device__ __forceinline__ float tf32_round(float f) { return __uint_as_float(tf32_bits(f)); }

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// Fragments of tf32 values stored in shared memory; X is the tile's origin, s the stride.
__device__ __forceinline__ void load_a_mk(uint32_t (&a)[4], const float* X, int s, int g, int t) {
  a[0] = __float_as_uint(X[g * s + t]);
  a[1] = __float_as_uint(X[(g + 8) * s + t]);
  a[2] = __float_as_uint(X[g * s + t + 4]);
  a[3] = __float_as_uint(X[(g + 8) * s + t + 4]);
}
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[2], const float* X, int s, int g, int t) {
  b[0] = __float_as_uint(X[g * s + t]);
  b[1] = __float_as_uint(X[g * s + t + 4]);
}
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[2], const float* X, int s, int g, int t) {
  b[0] = __float_as_uint(X[t * s + g]);
  b[1] = __float_as_uint(X[(t + 4) * s + g]);
}

// The same fragments by ldmatrix (one instruction for four 8 x 4 tf32 pieces: an
// 8 x 8 b16 matrix is 8 rows of 16 bytes). `row` is this lane's row address: for an A
// fragment at X (stride s), X + (lane % 16) * s + 4 * (lane / 16); for two B fragments
// ([n][k], n tiles X and X + 8 s), X + ((lane % 8) + 8 * (lane / 16)) * s + 4 * ((lane / 8) % 2).
// Rows must be 16-byte aligned; ldsm_* take the shared-memory address (ldsm_addr).
// Gives the registers load_a_mk / load_b_nk would.
__device__ __forceinline__ uint32_t ldsm_addr(const float* row) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(row));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], uint32_t a) {  // one B fragment (lanes 0-15)
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
__device__ __forceinline__ const float* ldsm_a_row(const float* X, int s, int lane) {
  return X + (lane % 16) * s + 4 * (lane / 16);
}
__device__ __forceinline__ const float* ldsm_b2_row(const float* X, int s, int lane) {
  return X + ((lane % 8) + 8 * (lane / 16)) * s + 4 * ((lane / 8) % 2);
}

// How W warps tile an MT x NT grid of 16 x 8 tiles: WM x WN warps of TM x TN
// tiles each (TM preferred 2: A fragments reused across TN, B across TM).
constexpr int warp_grid_tm(int mt, int nt, int warps) {
  const int choices[3] = {2, 1, 4};
  for (int i = 0; i < 3; ++i) {
    const int tm = choices[i];
    if (mt % tm != 0 || warps % (mt / tm) != 0) continue;
    if (nt % (warps / (mt / tm)) == 0) return tm;
  }
  return 0;
}
template <int MT, int NT, int W = 8>
struct WarpGrid {
  static constexpr int TM = warp_grid_tm(MT, NT, W);
  static_assert(TM > 0, "no warp grid for this tile count");
  static constexpr int WM = MT / TM, WN = W / WM, TN = NT / WN;
};

}  // namespace pb::kernels::detail
