// gdn_bf16.cu: the gated delta rule in fla's arithmetic (GdnPrecision::bf16_chunk64:
// reference/gdn_bf16_lp.cpp names every rounding point), split across the context as
// gdn_split.cu is, on bf16 mma.sync (m16n8k16, fp32 accumulators, kernels/mma_bf16.cuh).
// Per 64-token chunk c of a stream, G_i = sum_{j<=i} g_j inside it, S the fp32 state
// entering it ([v_dim][k_dim]), b() = round to bf16:
//   1. prep, per (chunk, v head): q, k L2-normalised and stored as b(q), b(k) (the
//      group's first v head writes the k head's images); A_ij = beta_i e^{G_i-G_j}
//      k_i.k_j (j < i); T = (I + A)^-1 in fp32 blockwise (fla's solve_tril form: the four
//      16 x 16 diagonal blocks by forward substitution, the blocks below them by products),
//      rounded b(T); the scan's decays e^{G_63 - G_j}, e^{G_63} beside G;
//      U^T = b(b(beta v)^T b(T)^T) and W = b(b(T) b(beta e^G k));
//   2. scan, per (stream, v head, 16 NW v rows), chunks in order, each warp holding 16
//      rows of S in its accumulators: b(S) stored (the chunk's entering state),
//      V^T = U^T - b(S) W^T (fp32), b(V)^T stored, S = e^{G_last} S + b(e^{G_last-G} V)^T K;
//   3. out, per (chunk, v head, 128 v columns): o = e^G (Q b(S)^T) + M b(V) with
//      M = b(e^{G_i-G_j} q.k) (j <= i), out = b(o / sqrt(k_dim)).
// Every product's operands are bf16 and its sums fp32, so only the order of the fp32
// sums differs from the lp (which the tolerance allows: docs/TOLERANCES.md), and T's
// block merge, where the lp substitutes over all 64 rows: both forms are fp32-accurate
// before b(T), as TOLERANCES.md's bf16-chunk64 section says of fla's. The scan's
// chain stays in registers: S's accumulators, packed to bf16, are the A operand of
// b(S) W^T, and V's accumulators, scaled and packed, the A operand of E^T K.
// A chunk of n < 64 tokens fills nb = ceil(n / 16) blocks of 16 rows: past them beta and v
// are zero, and so are A, T (but its diagonal), U^T's columns and W's rows. The prep forms
// only those blocks (and stores zeros for the rest), the out pass forms M and o only for the
// row tiles with tokens; a block's sums are the same whatever nb.
// Invariants: grid sizes from total_tokens, batch_size and the shape only; the chunk
// list is read back bounded by its capacity; a scan warp's arithmetic does not depend
// on NW (the batch picks NW), so neither do a stream's bits.
#include "kernels/gdn_bf16.h"

#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/gdn_params.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/mma_bf16.cuh"

namespace pb::kernels {

namespace {

// host-emulated: begin (tests/gdn_bf16_merge_emulation_test.cpp compiles this on the host)
constexpr int kC = kGdnBf16Chunk;  // 64 tokens a chunk
constexpr int kCS = kC + 8;        // stride (bf16) of [..][64] tiles: 144 bytes, ldmatrix conflict-free
constexpr int kAS = kC + 8;        // stride (fp32) of A^T, rows padded so the 4 lanes of a column hit 4 bank groups
// The G image of a (chunk, v head), fp32: G_j at [j], e^{G_63 - G_j} at [64 + j], e^{G_63}
// at [128] (the scan's decays, computed once by the prep), pad to 16 bytes.
constexpr int kGE = kC, kGL = 2 * kC, kGS = 2 * kC + 4;

// Tuning knobs in one place.
struct GdnBf16Traits {
  static constexpr int kPrepThreads = 256;  // 8 warps
  static constexpr int kPrepCtas = 3;       // prep CTAs an SM (73 KB of shared memory at d128)
  static constexpr int kOutWarps = 4;       // warps a column half of the out CTA: 16 token rows each
  static constexpr int kOutHalvesAbove = 64;  // v columns (padded) above which the out CTA has two halves
  static constexpr int kOutCols = 128;      // v columns per out CTA
  static constexpr int kScanSplitBelow = 2;  // scan row blocks a SM below which two warps share one
  static constexpr int kScanDeepStages = 4;  // the scan's ring where it has an SM to itself (else 2)
};
// host-emulated: end

// kp: k_dim padded to the scan's templates; dvp: v_dim padded to 16 (one m-tile of v rows).
__host__ __device__ inline int kp_of(int dk) { return dk <= 32 ? 32 : dk <= 64 ? 64 : 128; }
__host__ __device__ inline int dvp_of(int dv) { return (dv + 15) & ~15; }

struct Bf16Params {
  GdnParams p;
  GdnChunkListView list;
  uint16_t *Q, *K, *W, *Ut, *Vt, *S;  // the layout's images (gdn_bf16.h)
  float* G;
  int dvp;
};

// ---- fragments by ldmatrix (addresses in bf16 elements of a row-major tile at `base`,
// stride `ld`): A [m][k] plain, A from [k][m] transposed, B pairs (two n-tiles) from
// [n][k] plain or from [k][n] transposed.
__device__ __forceinline__ void ld_a(uint32_t (&a)[4], uint32_t base, int ld, int m0, int k0) {
  const int l = threadIdx.x & 31;
  detail::ldmatrix_x4(base + 2 * ((m0 + (l & 15)) * ld + k0 + (l >> 4) * 8), a[0], a[1], a[2], a[3]);
}
__device__ __forceinline__ void ld_a_km(uint32_t (&a)[4], uint32_t base, int ld, int m0, int k0) {
  const int l = threadIdx.x & 31;
  detail::ldmatrix_x4_trans(base + 2 * ((k0 + (l & 7) + ((l >> 4) << 3)) * ld + m0 + ((l >> 3) & 1) * 8), a[0], a[1],
                            a[2], a[3]);
}
// b[0], b[1]: n-tile n0 / 8; b[2], b[3]: n-tile n0 / 8 + 1
__device__ __forceinline__ void ld_b_nk(uint32_t (&b)[4], uint32_t base, int ld, int n0, int k0) {
  const int l = threadIdx.x & 31;
  detail::ldmatrix_x4(base + 2 * ((n0 + (l & 7) + ((l >> 4) << 3)) * ld + k0 + ((l >> 3) & 1) * 8), b[0], b[1], b[2],
                      b[3]);
}
__device__ __forceinline__ void ld_b_kn(uint32_t (&b)[4], uint32_t base, int ld, int n0, int k0) {
  const int l = threadIdx.x & 31;
  detail::ldmatrix_x4_trans(base + 2 * ((k0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + n0 + (l >> 4) * 8), b[0], b[1],
                            b[2], b[3]);
}
__device__ __forceinline__ void mma2(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4], const uint32_t (&b)[4]) {
  detail::mma_bf16(d0, a, b[0], b[1]);
  detail::mma_bf16(d1, a, b[2], b[3]);
}
// The A fragment of k-step s from the accumulators of n-tiles 2s, 2s + 1, each value
// times the column's scale (x0, x1: columns 2t, 2t + 1 of tile 2s; x2, x3: of tile 2s + 1).
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4], float x0 = 1.f,
                                         float x1 = 1.f, float x2 = 1.f, float x3 = 1.f) {
  a[0] = detail::pack2(c0[0] * x0, c0[1] * x1);
  a[1] = detail::pack2(c0[2] * x0, c0[3] * x1);
  a[2] = detail::pack2(c1[0] * x2, c1[1] * x3);
  a[3] = detail::pack2(c1[2] * x2, c1[3] * x3);
}
// The accumulators of n-tiles 0 .. N - 1 to a row-major bf16 tile at dst (stride ld): lane
// (g, t) the rows g, g + 8 and the columns 8 nt + 2t, + 1.
template <int N>
__device__ __forceinline__ void store_acc(uint16_t* dst, int ld, const float (&c)[N][4]) {
  const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
#pragma unroll
  for (int nt = 0; nt < N; ++nt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
      *reinterpret_cast<uint32_t*>(dst + (g + 8 * hr) * ld + 8 * nt + 2 * t) = detail::pack2(c[nt][2 * hr], c[nt][2 * hr + 1]);
}
// e / d and e % d for e = e0, e0 + step, ... (step > 0), one division up front instead of
// one a step: q, r the quotient and remainder of the current e.
struct DivWalk {
  int q, r;
  const int d, dq, dr;
  __device__ DivWalk(int e0, int step, int d_) : q(e0 / d_), r(e0 % d_), d(d_), dq(step / d_), dr(step % d_) {}
  __device__ void next() {
    q += dq;
    r += dr;
    if (r >= d) r -= d, ++q;
  }
};
__device__ __forceinline__ float bf_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// ---- 1. prep: per (chunk, v head), 8 warps. Shared: K [64][kp + 8] b(k), then in place
// b(beta e^G b(k)); A^T [64][kAS] fp32 (A^T[j][i] = A_ij), then b(T) [64][kCS] over it; V [64][dvp + 8]
// v by cp.async, issued first so its latency overlaps q's and k's, then in place b(beta v);
// G, beta, beta e^G [64]; T [64][kTS] fp32 and X [3][16][kXS] fp32 for the blockwise inverse
// (both strides keep 4-float groups 16-byte aligned: the merge reads and writes them as float4).
__host__ __device__ inline int prep_vs(int dvp) { return dvp + 8; }
// host-emulated: begin
constexpr int kTS = kC + 4;  // stride (fp32) of the prep's fp32 T
constexpr int kXS = 20;      // stride (fp32) of a 16 x 16 block of X
// host-emulated: end
inline size_t prep_smem(int kp, int dvp) {
  return 2 * (size_t(kC) * (kp + 8) + size_t(kC) * prep_vs(dvp)) +
         4 * (size_t(kC) * kAS + 3 * kC + size_t(kC) * kTS + 3 * 16 * kXS);
}

// host-emulated: begin
// A_ij (j < i) in the prep's A^T tile: row j, column i + 4 (i / 32) (the pad keeps A^T's
// fragment stores on 32 banks and 4-float groups 16-byte aligned).
__device__ __forceinline__ int at_index(int i, int j) { return j * kAS + i + 4 * (i >> 5); }
// ---- the prep's T = (I + A)^-1 in fp32, T [64][kTS] of its own. First the four 16 x 16
// diagonal blocks by substitution, one column a thread (block d0 / 16, column c), the 16 rows
// in registers: x_r -= A_rj x_j for j ascending (the lp's order inside the block); all 16 rows
// written, zeros above the diagonal included (the merge reads them).
__device__ __forceinline__ void invert_diag_block(const float* A_t, float* Tf, int d0, int c) {
  float x[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) x[r] = r == c ? 1.f : 0.f;
#pragma unroll
  for (int j = 0; j < 15; ++j) {
    const float xj = x[j];
#pragma unroll
    for (int r = j + 1; r < 16; ++r) x[r] = fmaf(-A_t[at_index(d0 + r, d0 + j)], xj, x[r]);
  }
#pragma unroll
  for (int r = 0; r < 16; ++r) Tf[(d0 + r) * kTS + d0 + c] = x[r];
}

// ---- the prep's block merge (T = (I + A)^-1 below the diagonal blocks), by the CTA's
// threads. Blocks (i, j), i > j, in the order (1,0) (2,1) (3,2) (2,0) (3,1) (3,0): the blocks
// of step s (those with i - j >= s) are the list from merge_first(s); the first 4 - s of them
// (i - j = s) are complete after the step.
template <int R>
__device__ __forceinline__ void ld_f(float (&v)[R], const float* p) {
  if constexpr (R == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else if constexpr (R == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x, v[1] = x.y;
  } else {
    v[0] = *p;
  }
}
__device__ __forceinline__ int merge_first(int s) { return s == 1 ? 0 : s == 2 ? 3 : 5; }
__device__ __forceinline__ int merge_i(int b) { return (0x332321 >> (4 * b)) & 15; }
__device__ __forceinline__ int merge_j(int b) { return (0x010210 >> (4 * b)) & 15; }
// Step s's sums, R rows of one column a thread (A^T's R rows one load): X_ij += sum over
// m in block j + s - 1 of A_{16 i + r, m} T_{m, 16 j + c}; complete blocks to X [4 - s][16][kXS].
template <int R>
__device__ __forceinline__ void merge_x(const float* A_t, float* Tf, float* X_s, int s, int tid, int nb) {
  constexpr int TB = 256 / R;  // tasks a block
  const int b0 = merge_first(s), nd = 4 - s;
  for (int e = tid; e < (6 - b0) * TB; e += GdnBf16Traits::kPrepThreads) {
    const int blk = e / TB, le = e % TB, c = le & 15, r0 = R * (le >> 4);
    const int i = merge_i(b0 + blk), j = merge_j(b0 + blk), kb = j + s - 1;
    if (i >= nb) continue;  // a block of rows past the chunk's tokens: never read
    const int row0 = 16 * i + r0, col = 16 * j + c;
    float acc[R];
#pragma unroll
    for (int q = 0; q < R; ++q) acc[q] = s == 1 ? 0.f : Tf[(row0 + q) * kTS + col];
#pragma unroll
    for (int m = 16 * kb; m < 16 * kb + 16; ++m) {
      float a[R];
      ld_f<R>(a, A_t + at_index(row0, m));
      const float tv = Tf[m * kTS + col];
#pragma unroll
      for (int q = 0; q < R; ++q) acc[q] = fmaf(a[q], tv, acc[q]);
    }
#pragma unroll
    for (int q = 0; q < R; ++q) {
      if (blk < nd)
        X_s[(blk * 16 + r0 + q) * kXS + c] = acc[q];
      else
        Tf[(row0 + q) * kTS + col] = acc[q];
    }
  }
}
// Step s's complete blocks (s + b, b): T = -T_ii X, one row r and C columns a thread.
template <int C>
__device__ __forceinline__ void merge_t(float* Tf, const float* X_s, int s, int tid, int nb) {
  constexpr int TB = 256 / C, RC = 16 / C;  // tasks a block, a row
  for (int e = tid; e < (4 - s) * TB; e += GdnBf16Traits::kPrepThreads) {
    const int blk = e / TB, le = e % TB, r = le / RC, c0 = C * (le % RC), i = s + blk;
    if (i >= nb) continue;
    const float* Tii = Tf + (16 * i + r) * kTS + 16 * i;
    float acc[C] = {};
#pragma unroll
    for (int m = 0; m < 16; ++m)
      if (m <= r) {
        const float tv = Tii[m];
        float x[C];
        ld_f<C>(x, X_s + (blk * 16 + m) * kXS + c0);
#pragma unroll
        for (int q = 0; q < C; ++q) acc[q] = fmaf(tv, x[q], acc[q]);
      }
    float* dst = Tf + (16 * i + r) * kTS + 16 * blk + c0;
    if constexpr (C == 4)
      *reinterpret_cast<float4*>(dst) = make_float4(-acc[0], -acc[1], -acc[2], -acc[3]);
    else if constexpr (C == 2)
      *reinterpret_cast<float2*>(dst) = make_float2(-acc[0], -acc[1]);
    else
      *dst = -acc[0];
  }
}
// Step s (1..3) of the merge at the widths the kernel runs it: the sums R = 2, 4, 1 rows a
// thread, then (after a barrier, the caller's) T = -T_ii X at C = 4, 2, 1 columns a thread.
// nb: the 16-row blocks that hold tokens (a short chunk's last ones are left out: neither A's
// rows nor T's are read there); a block's sums are the same whatever nb.
__device__ __forceinline__ void merge_sums(int s, const float* A_t, float* Tf, float* X_s, int tid, int nb) {
  if (s == 1) merge_x<2>(A_t, Tf, X_s, s, tid, nb);
  if (s == 2) merge_x<4>(A_t, Tf, X_s, s, tid, nb);
  if (s == 3) merge_x<1>(A_t, Tf, X_s, s, tid, nb);
}
__device__ __forceinline__ void merge_finish(int s, float* Tf, const float* X_s, int tid, int nb) {
  if (s == 1) merge_t<4>(Tf, X_s, s, tid, nb);
  if (s == 2) merge_t<2>(Tf, X_s, s, tid, nb);
  if (s == 3) merge_t<1>(Tf, X_s, s, tid, nb);
}
// host-emulated: end

// The prep's per-warp staging of U^T and W for their global stores: a 16-row tile of bf16 at
// stride kPS (144 bytes: the fragment stores hit 32 banks), eight warps' tiles over the fp32 T
// and X, which are dead once b(T) is formed.
constexpr int kPS = 72;
static_assert(8 * 16 * kPS * 2 <= 4 * (kC * kTS + 3 * 16 * kXS), "the staging tiles fit over T and X");
// A warp's staged 16 rows of `pieces` 16-byte pieces each to dst (row stride ld, bf16): every
// lane a piece a step, a row's pieces contiguous. The caller __syncwarp()s before (the tile is
// written) and this does after (the tile may be written again).
__device__ __forceinline__ void stage_out(const uint16_t* St, uint16_t* dst, int ld, int pieces, int lane) {
  for (int q = lane; q < 16 * pieces; q += 32) {
    const int r = q / pieces, c = 8 * (q % pieces);
    *reinterpret_cast<uint4*>(dst + r * ld + c) = *reinterpret_cast<const uint4*>(St + r * kPS + c);
  }
  __syncwarp();
}

template <int KP>
__global__ void __launch_bounds__(GdnBf16Traits::kPrepThreads, GdnBf16Traits::kPrepCtas) gdn_bf16_prep(Bf16Params s) {
  using namespace detail;
  constexpr int KS = KP + 8, NT = GdnBf16Traits::kPrepThreads;
  const GdnParams& p = s.p;
  const int item = blockIdx.x, h = blockIdx.y;
  GdnChunkCta cc;
  if (!gdn_chunk_cta(p, s.list, kC, cc, item)) return;
  const GdnChunkItem it = cc.it;
  const int t0 = it.t0, n = cc.n;
  // 16-token blocks that hold tokens: past them A, T, U^T's columns and W's rows are zero
  // (beta and v are), so a short chunk forms only the first nb blocks and stores zeros for the rest.
  const int nb = (n + 15) >> 4;
  const int dk = p.k_dim, dv = p.v_dim, dvp = s.dvp, VS = prep_vs(dvp);
  const int group = p.num_v_heads / p.num_k_heads, kh = h / group;
  extern __shared__ __align__(16) unsigned char smraw[];
  float* A_t = reinterpret_cast<float*>(smraw);      // [64][kAS]
  float* G_s = A_t + kC * kAS;                        // [64]
  float* B_s = G_s + kC;                              // [64]
  float* E_s = B_s + kC;                              // [64] beta e^G, K's scale
  uint16_t* K_s = reinterpret_cast<uint16_t*>(E_s + kC);  // [64][KS]
  uint16_t* T_s = reinterpret_cast<uint16_t*>(A_t);   // [64][kCS], once A is read for the last time
  uint16_t* V_s = K_s + kC * KS;                      // [64][VS]
  float* Tf = reinterpret_cast<float*>(V_s + kC * VS);  // [64][kTS]
  float* X_s = Tf + kC * kTS;                            // [3][16][kXS]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // v, 16-byte pieces by cp.async (zero past n and v_dim), in flight while q and k load.
  for (DivWalk w(tid, NT, dvp / 8); w.q < kC; w.next()) {
    const int i = w.q, c = 8 * w.r;
    uint16_t* piece = V_s + i * VS + c;
    if (i < n && c < dv)
      cp_async16(smem_u32(piece), p.conv_out + static_cast<size_t>(t0 + i) * p.conv_dim +
                                      static_cast<size_t>(2 * p.num_k_heads) * dk + static_cast<size_t>(h) * dv + c);
    else
      *reinterpret_cast<uint4*>(piece) = make_uint4(0, 0, 0, 0);
  }
  cp_async_commit();

  // The gates (warp 0; lane l: tokens 2l, 2l + 1; g = 0, beta = 0 past n), G's image.
  if (warp == 0) {
    const int i0 = 2 * lane, i1 = i0 + 1;
    const size_t hv = static_cast<size_t>(p.num_v_heads);
    const float g0 = i0 < n ? p.g[(t0 + i0) * hv + h] : 0.f, g1 = i1 < n ? p.g[(t0 + i1) * hv + h] : 0.f;
    float x = g0 + g1;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, x, off);
      if (lane >= off) x += y;
    }
    G_s[i1] = x;
    G_s[i0] = x - g1;
    const float b0 = i0 < n ? p.beta[(t0 + i0) * hv + h] : 0.f, b1 = i1 < n ? p.beta[(t0 + i1) * hv + h] : 0.f;
    B_s[i0] = b0;
    B_s[i1] = b1;
    E_s[i0] = b0 * expf(x - g1);  // beta = 0 past n
    E_s[i1] = b1 * expf(x);
    float* Gi = s.G + (static_cast<size_t>(it.chunk) * p.num_v_heads + h) * kGS;
    Gi[i0] = x - g1;
    Gi[i1] = x;
    const float G_last = __shfl_sync(0xffffffffu, x, 31);  // G_63
    Gi[kGE + i0] = expf(G_last - (x - g1));
    Gi[kGE + i1] = expf(G_last - x);
    if (lane == 0) Gi[kGL] = expf(G_last);
    if (lane < kGS - kGL - 1) Gi[kGL + 1 + lane] = 0.f;
  }
  // q, k: 4 lanes a token, 16-byte pieces; inverse norms as qk_inv_norms (eps 1e-6 inside
  // the sqrt); b(k) into K_s, and b(q), b(k) to the k head's images by the group's first
  // v head. Zero past n and k_dim.
  {
    constexpr int PC = KP / 8, PL = PC / 4;  // pieces a row, a lane
    const int tt = tid >> 2, sub = tid & 3;
    uint4 qr[PL], kr[PL];
    float ssq = 0.f, ssk = 0.f;
    const uint16_t* row = p.conv_out + static_cast<size_t>(t0 + tt) * p.conv_dim;
#pragma unroll
    for (int e = 0; e < PL; ++e) {
      const int c = 8 * (sub + 4 * e);
      qr[e] = kr[e] = make_uint4(0, 0, 0, 0);
      if (tt < n && c < dk) {
        qr[e] = *reinterpret_cast<const uint4*>(row + static_cast<size_t>(kh) * dk + c);
        kr[e] = *reinterpret_cast<const uint4*>(row + static_cast<size_t>(p.num_k_heads + kh) * dk + c);
      }
      float qf[8], kf[8];
      unpack8(qr[e], qf);
      unpack8(kr[e], kf);
#pragma unroll
      for (int x = 0; x < 8; ++x) {
        ssq = fmaf(qf[x], qf[x], ssq);
        ssk = fmaf(kf[x], kf[x], ssk);
      }
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      ssq += __shfl_xor_sync(0xffffffffu, ssq, off);
      ssk += __shfl_xor_sync(0xffffffffu, ssk, off);
    }
    const float iq = 1.f / sqrtf(ssq + 1e-6f), ik = 1.f / sqrtf(ssk + 1e-6f);
    const bool store_qk = h % group == 0;
    const size_t img = ((static_cast<size_t>(it.chunk) * p.num_k_heads + kh) * kC + tt) * KS;
#pragma unroll
    for (int e = 0; e < PL; ++e) {
      const int c = 8 * (sub + 4 * e);
      float qf[8], kf[8];
      unpack8(qr[e], qf);
      unpack8(kr[e], kf);
      const uint4 kb = make_uint4(pack2(kf[0] * ik, kf[1] * ik), pack2(kf[2] * ik, kf[3] * ik), pack2(kf[4] * ik, kf[5] * ik),
                                  pack2(kf[6] * ik, kf[7] * ik));
      *reinterpret_cast<uint4*>(K_s + tt * KS + c) = kb;
      if (store_qk) {
        *reinterpret_cast<uint4*>(s.K + img + c) = kb;
        *reinterpret_cast<uint4*>(s.Q + img + c) =
            make_uint4(pack2(qf[0] * iq, qf[1] * iq), pack2(qf[2] * iq, qf[3] * iq), pack2(qf[4] * iq, qf[5] * iq),
                       pack2(qf[6] * iq, qf[7] * iq));
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // A^T: warp w the 16 x 32 block (rows 16 (w / 2), columns 32 (w % 2)) of K K^T, beta_i
  // e^{G_i-G_j} scaled below the diagonal (only entries j < i are read).
  {
    const int mt = warp >> 1, nh = warp & 1;
    if (mt < nb && 32 * nh <= 16 * mt + 15) {  // warp-uniform: rows with tokens, below the diagonal
      float acc[4][4] = {};
      const uint32_t kb = smem_u32(K_s);
#pragma unroll
      for (int ks = 0; ks < KP / 16; ++ks) {
        uint32_t a[4], b[4];
        ld_a(a, kb, KS, 16 * mt, 16 * ks);
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          ld_b_nk(b, kb, KS, 32 * nh + 16 * np, 16 * ks);
          mma2(acc[2 * np], acc[2 * np + 1], a, b);
        }
      }
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 16 * mt + g + 8 * (e >> 1), j = 32 * nh + 8 * nt + 2 * t + (e & 1);
          if (j < i) A_t[at_index(i, j)] = B_s[i] * expf(G_s[i] - G_s[j]) * acc[nt][e];
        }
    }
  }
  __syncthreads();

  // T = (I + A)^-1 blockwise (fla's solve_tril form), in fp32: the four 16 x 16 diagonal
  // blocks T_dd = (I + A_dd)^-1 by forward substitution here, then below
  // T_ij = -T_ii sum_{k=j}^{i-1} A_ik T_kj, left-looking (merge_x, merge_t). A_ij is read only
  // for j < i.
  if (warp < 2) {
    // lane l of warps 0-1: block l / 16 (of the 64 lanes), its column l % 16.
    const int d = (32 * warp + lane) >> 4;
    if (d < nb) invert_diag_block(A_t, Tf, 16 * d, lane & 15);
  } else {
    // b(beta v) over V and b(beta e^G b(k)) over K, in place, 8 columns a piece, by warps
    // 2-7 while warps 0 and 1 invert the diagonal blocks. V past n and v_dim stays zero as it landed.
    const int VP = dvp / 8, PC = VP + KP / 8;
    for (DivWalk w(tid - 64, NT - 64, PC); w.q < kC; w.next()) {
      const int i = w.q, pc = w.r;
      uint16_t* piece;
      float sc;
      if (pc < VP) {
        if (i >= n || 8 * pc >= dv) continue;
        piece = V_s + i * VS + 8 * pc;
        sc = B_s[i];
      } else {
        if (i >= 16 * nb) continue;  // W reads K's rows of the blocks with tokens only
        piece = K_s + i * KS + 8 * (pc - VP);
        sc = E_s[i];
      }
      float b[8];
      unpack8(*reinterpret_cast<const uint4*>(piece), b);
#pragma unroll
      for (int x = 0; x < 8; ++x) b[x] *= sc;
      *reinterpret_cast<uint4*>(piece) =
          make_uint4(pack2(b[0], b[1]), pack2(b[2], b[3]), pack2(b[4], b[5]), pack2(b[6], b[7]));
    }
  }
  __syncthreads();
  // The blocks below the diagonal blocks, left-looking: step s = 1..3 adds to every block
  // (i, j) with i - j >= s the term A_{i, j+s-1} T_{j+s-1, j} (T_{j+s-1, j} is complete since
  // step s - 1); a block's partial sum waits in its own place in Tf, and once complete (i - j
  // = s) goes to X, and T_ij = -T_ii X. Each element's sum still runs m ascending, one fmaf
  // at a time, but the last steps' chains are 16 terms long, not 32 and 48.
  // Step s completes the blocks i - j = s: a chunk of nb blocks needs steps 1 .. nb - 1.
#pragma unroll
  for (int s_ = 1; s_ < 4; ++s_) {
    if (s_ >= nb) break;  // CTA-uniform
    merge_sums(s_, A_t, Tf, X_s, tid, nb);
    __syncthreads();
    merge_finish(s_, Tf, X_s, tid, nb);
    __syncthreads();
  }
  // b(T), zero above the diagonal blocks (inside them the substitution left zeros), two
  // columns a thread; the rows of the blocks with tokens (no product reads the others).
  for (int e = tid; e < 16 * nb * kC / 2; e += NT) {
    const int r = e >> 5, c = 2 * (e & 31);
    const float2 v = *reinterpret_cast<const float2*>(Tf + r * kTS + c);
    *reinterpret_cast<uint32_t*>(T_s + r * kCS + c) = (c >> 4) > (r >> 4) ? 0u : pack2(v.x, v.y);
  }
  __syncthreads();

  const uint32_t tb = smem_u32(T_s), vb = smem_u32(V_s), kb = smem_u32(K_s);
  // The warp's 16-row staging tile for U^T's and W's stores, over the fp32 T and X (dead since
  // b(T)): fragments in, then whole 16-byte pieces out, every row one contiguous run.
  uint16_t* St = reinterpret_cast<uint16_t*>(Tf) + warp * 16 * kPS;
  // U^T = V^T T^T: m = v rows (dvp / 16 tiles, one a warp in turn), n = the 64 tokens i,
  // k = tokens j (T^T[j][i] = 0 for j > i: k-step ks skipped for token pairs np < ks).
  const size_t ut = (static_cast<size_t>(it.chunk) * p.num_v_heads + h) * dvp * kCS;
  for (int mt = warp; mt < dvp / 16; mt += NT / 32) {
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      if (ks >= nb) break;  // tokens j past the chunk's: v is zero
      uint32_t a[4];
      ld_a_km(a, vb, VS, 16 * mt, 16 * ks);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (np < ks) continue;
        if (np >= nb) break;  // tokens i past the chunk's: U^T's columns stay zero
        uint32_t b[4];
        ld_b_nk(b, tb, kCS, 16 * np, 16 * ks);
        mma2(acc[2 * np], acc[2 * np + 1], a, b);
      }
    }
    store_acc(St, kPS, acc);
    __syncwarp();
    stage_out(St, s.Ut + ut + 16 * mt * kCS, kCS, 8, lane);
  }
  // W = T K (K by now b(beta e^G b(k))): warp w the token tile w % 4 and half w / 4 of k_dim's n-tiles (k-steps
  // ks <= the token tile: T is zero above the diagonal).
  {
    constexpr int HN = KP / 16;  // n-tiles a half
    static_assert(8 * HN <= kPS, "a half's row fits the staging tile's row");
    const int mt = warp & 3, n0 = (warp >> 2) * 8 * HN;
    float acc[HN][4] = {};
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      if (ks > mt || mt >= nb) break;  // T is zero above the diagonal; W's rows past the tokens stay zero
      uint32_t a[4];
      ld_a(a, tb, kCS, 16 * mt, 16 * ks);
#pragma unroll
      for (int np = 0; np < HN / 2; ++np) {
        uint32_t b[4];
        ld_b_kn(b, kb, KS, n0 + 16 * np, 16 * ks);
        mma2(acc[2 * np], acc[2 * np + 1], a, b);
      }
    }
    const size_t w = (static_cast<size_t>(it.chunk) * p.num_v_heads + h) * kC * KS;
    store_acc(St, kPS, acc);
    __syncwarp();
    stage_out(St, s.W + w + 16 * mt * KS + n0, KS, HN, lane);
  }
}

// ---- 2. scan: per (stream, v head, block of 16 NW v rows), NW row blocks of 16 v rows,
// each held by KSP warps that split its k_dim columns (KSP = 2 where the batch has too
// few row blocks to keep the SMs issuing). The chunk's W, K [64][KP + 8], U^T [16 NW][kCS]
// and G [132] (with the decays) come ST - 1 chunks ahead into a ring of ST buffers; with KSP = 2 the two
// warps of a row block exchange their halves of b(S) W^T through X.
// The same sums whatever KSP: b(S) W^T is always (first half of k_dim) + (second half),
// each half a chain of m16n8k16 steps in k order, so KSP (which the batch picks) never
// shows in a stream's bits.
template <int KP, int NW, int KSP, int ST>
struct ScanSmem {
  static constexpr int KS = KP + 8;
  static constexpr int W = 0;                        // bf16 offsets in a buffer
  static constexpr int K = W + kC * KS;
  static constexpr int U = K + kC * KS;
  static constexpr int G = U + 16 * NW * kCS;        // kGS floats = 2 kGS bf16
  static constexpr int buf = G + 2 * kGS;
  // after the ST buffers, KSP > 1: float4 X[NW][KSP][8][32], the halves of b(S) W^T
  static constexpr size_t bytes = ST * sizeof(uint16_t) * buf + (KSP > 1 ? size_t(NW) * KSP * 8 * 32 * 16 : 0);
};

template <int KP, int NW, int KSP, int ST>
__global__ void __launch_bounds__(32 * NW * KSP) gdn_bf16_scan(Bf16Params s) {
  using namespace detail;
  using L = ScanSmem<KP, NW, KSP, ST>;
  static_assert(KSP == 1 || KSP == 2, "a row block's k_dim splits in two at most");
  constexpr int KS = L::KS, NTH = 32 * NW * KSP;
  constexpr int KH = KP / 2;              // a half of k_dim's columns
  constexpr int HS = KH / 16;             // k-steps in a half
  constexpr int KT = KP / 8 / KSP;        // n-tiles of S a warp holds
  const GdnParams& p = s.p;
  GdnCtaHead head;
  if (!gdn_cta_head(p, head)) return;
  const int h = head.h, kh = head.kh, dk = p.k_dim, dv = p.v_dim, dvp = s.dvp;
  const int first = s.list.chunk_first[head.b];
  const int nch = (head.sr.count() + kC - 1) / kC;
  if (first < 0 || nch < 0 || first + nch > s.list.max_chunks) return;
  extern __shared__ __align__(16) uint16_t sb[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int rb = warp / KSP, part = warp % KSP;  // the warp's row block, its part of k_dim
  const int c0 = part * (KP / KSP);              // the warp's first column of S
  const int v0 = head.vb * 16 * NW;         // the CTA's first v row
  const int vw = v0 + 16 * rb;              // the warp's first v row
  const int urows = max(0, min(16 * NW, dvp - v0));  // U^T rows that exist (the rest stay zero)

  // U^T rows past dvp: zero in every buffer, once.
  for (int e = tid; e < ST * 16 * NW * (kC / 8); e += NTH) {
    const int bu = e / (16 * NW * (kC / 8)), r = (e / (kC / 8)) % (16 * NW), c = 8 * (e % (kC / 8));
    if (r >= urows) *reinterpret_cast<uint4*>(sb + bu * L::buf + L::U + r * kCS + c) = make_uint4(0, 0, 0, 0);
  }
  // A chunk's inputs are contiguous images laid out as the buffer is (rows padded for
  // ldmatrix by the prep): W, K, the CTA's U^T rows, G.
  auto src = [&](int c, const uint16_t*& W, const uint16_t*& K, const uint16_t*& U, const float*& G) {
    const size_t ci = static_cast<size_t>(first + c);
    W = s.W + (ci * p.num_v_heads + h) * kC * KS;
    K = s.K + (ci * p.num_k_heads + kh) * kC * KS;
    U = s.Ut + ((ci * p.num_v_heads + h) * dvp + v0) * kCS;
    G = s.G + (ci * p.num_v_heads + h) * kGS;
  };
  constexpr uint32_t kWK = kC * KS * 2;  // bytes of W's (and K's) image
  const uint32_t u_bytes = urows * kCS * 2;
#ifdef PB_WGMMA_ENABLED
  // One thread brings a chunk in with four bulk copies, counted on the buffer's mbarrier.
  __shared__ __align__(8) uint64_t full[ST];
  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < ST; ++b) mbar_init(smem_u32(&full[b]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  auto fetch = [&](int c, int bu) {
    if (tid != 0) return;
    const uint16_t *W, *K, *U;
    const float* G;
    src(c, W, K, U, G);
    const uint32_t bar = smem_u32(&full[bu]), B = smem_u32(sb + bu * L::buf);
    mbar_arrive_expect_tx(bar, 2 * kWK + u_bytes + kGS * 4);
    bulk_copy_g2s(B + 2 * L::W, W, kWK, bar);
    bulk_copy_g2s(B + 2 * L::K, K, kWK, bar);
    bulk_copy_g2s(B + 2 * L::U, U, u_bytes, bar);
    bulk_copy_g2s(B + 2 * L::G, G, kGS * 4, bar);
  };
  auto landed = [&](int c) { mbar_wait(smem_u32(&full[c % ST]), (c / ST) & 1); };
#else
  auto fetch = [&](int c, int bu) {
    const uint16_t *W, *K, *U;
    const float* G;
    src(c, W, K, U, G);
    uint16_t* B = sb + bu * L::buf;
    for (int e = tid; e < int(kWK / 16); e += NTH) {
      cp_async16(smem_u32(B + L::W + 8 * e), W + 8 * e);
      cp_async16(smem_u32(B + L::K + 8 * e), K + 8 * e);
    }
    for (int e = tid; e < int(u_bytes / 16); e += NTH) cp_async16(smem_u32(B + L::U + 8 * e), U + 8 * e);
    for (int e = tid; e < kGS / 4; e += NTH) cp_async16(smem_u32(B + L::G + 8 * e), G + 4 * e);
    cp_async_commit();
  };
  auto landed = [&](int) {
    cp_async_wait<ST - 1>();
    __syncthreads();
  };
#endif

  // The warp's 16 rows of S: n-tile nt holds columns c0 + 8 nt + 2t, + 1 of rows vw + g, + 8.
  float S[KT][4];
  float* S_g = head.S_g;
#pragma unroll
  for (int nt = 0; nt < KT; ++nt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int v = vw + g + 8 * hr, c = c0 + 8 * nt + 2 * t;
      float2 x = make_float2(0.f, 0.f);
      if (v < dv && c < dk) x = *reinterpret_cast<const float2*>(S_g + static_cast<size_t>(v) * dk + c);
      S[nt][2 * hr] = x.x;
      S[nt][2 * hr + 1] = x.y;
    }

  __syncthreads();  // U^T's zero rows written before any chunk is read
  // Chunks c + 1 .. c + ST - 1 are on their way while chunk c is worked on.
  for (int c = 0; c < ST - 1; ++c) {
    if (c < nch) fetch(c, c);
#ifndef PB_WGMMA_ENABLED
    else cp_async_commit();  // empty groups keep landed()'s count of the newest ST - 1
#endif
  }
  for (int c = 0; c < nch; ++c) {
    if (c + ST - 1 < nch) fetch(c + ST - 1, (c + ST - 1) % ST);
#ifndef PB_WGMMA_ENABLED
    else cp_async_commit();
#endif
    landed(c);
    const uint16_t* B = sb + (c % ST) * L::buf;
    const size_t ci = static_cast<size_t>(first + c);
    const size_t vh = (ci * p.num_v_heads + h) * dvp;  // row base of this (chunk, v head)'s [dvp][..] images

    // b(S), the chunk's entering state: the A operand of b(S) W^T, and stored.
    uint32_t sa[KT / 2][4];
#pragma unroll
    for (int ks = 0; ks < KT / 2; ++ks) acc_to_a(sa[ks], S[2 * ks], S[2 * ks + 1]);
    if (vw < dvp) {
      uint16_t* Sn = s.S + (vh + vw) * KP + c0;
#pragma unroll
      for (int ks = 0; ks < KT / 2; ++ks) {
        *reinterpret_cast<uint32_t*>(Sn + g * KP + 16 * ks + 2 * t) = sa[ks][0];
        *reinterpret_cast<uint32_t*>(Sn + (g + 8) * KP + 16 * ks + 2 * t) = sa[ks][1];
        *reinterpret_cast<uint32_t*>(Sn + g * KP + 16 * ks + 8 + 2 * t) = sa[ks][2];
        *reinterpret_cast<uint32_t*>(Sn + (g + 8) * KP + 16 * ks + 8 + 2 * t) = sa[ks][3];
      }
    }
    // V^T = U^T - b(S) W^T: m = the warp's 16 v rows, n = 64 tokens, k = k_dim in two
    // halves, V = U - (first + second).
    const uint32_t wb = smem_u32(B + L::W), kb = smem_u32(B + L::K);
    auto half_sw = [&](float (&P)[8][4], int h0, int a0) {  // P = b(S) W^T over the half from k-step h0, sa from a0
#pragma unroll
      for (int ks = 0; ks < HS; ++ks)
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t b[4];
          ld_b_nk(b, wb, KS, 16 * np, 16 * (h0 + ks));
          mma2(P[2 * np], P[2 * np + 1], sa[a0 + ks], b);
        }
    };
    float V[8][4] = {}, X[8][4] = {};  // V: this warp's half (the first with KSP = 1), X: the other
    half_sw(V, part * HS, 0);
    if constexpr (KSP == 1) {
      half_sw(X, HS, HS);
    } else {
      float4* xs = reinterpret_cast<float4*>(sb + ST * L::buf) + (rb * KSP) * 8 * 32 + lane;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) xs[(part * 8 + nt) * 32] = make_float4(V[nt][0], V[nt][1], V[nt][2], V[nt][3]);
      __syncthreads();
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const float4 x = xs[((1 - part) * 8 + nt) * 32];
        X[nt][0] = x.x, X[nt][1] = x.y, X[nt][2] = x.z, X[nt][3] = x.w;
      }
    }
    const uint16_t* U_s = B + L::U + (16 * rb) * kCS;
    const float* G_s = reinterpret_cast<const float*>(B + L::G);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const uint32_t u = *reinterpret_cast<const uint32_t*>(U_s + (g + 8 * hr) * kCS + 8 * nt + 2 * t);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float first = part == 0 ? V[nt][2 * hr + e] : X[nt][2 * hr + e];
          const float second = part == 0 ? X[nt][2 * hr + e] : V[nt][2 * hr + e];
          V[nt][2 * hr + e] = (e ? bf_hi(u) : bf_lo(u)) - (first + second);
        }
      }
    // b(V)^T for the out pass (with KSP = 2 each warp its half of the tokens).
    if (vw < dvp) {
      uint16_t* Vt = s.Vt + (vh + vw) * kC;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        if (nt / (8 / KSP) == part)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr)
            *reinterpret_cast<uint32_t*>(Vt + (g + 8 * hr) * kC + 8 * nt + 2 * t) = pack2(V[nt][2 * hr], V[nt][2 * hr + 1]);
    }
    // S = e^{G_last} S + E^T K, E^T = b(e^{G_last - G_j} V^T) from V's accumulators.
    const float gl = G_s[kGL];  // e^{G_last}, and below e^{G_last - G_j}, from the prep
#pragma unroll
    for (int nt = 0; nt < KT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[nt][e] *= gl;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const int j = 16 * ks + 2 * t;
      uint32_t ea[4];
      acc_to_a(ea, V[2 * ks], V[2 * ks + 1], G_s[kGE + j], G_s[kGE + j + 1], G_s[kGE + j + 8], G_s[kGE + j + 9]);
#pragma unroll
      for (int np = 0; np < KT / 2; ++np) {
        uint32_t b[4];
        ld_b_kn(b, kb, KS, c0 + 16 * np, 16 * ks);
        mma2(S[2 * np], S[2 * np + 1], ea, b);
      }
    }
    __syncthreads();  // every read of this buffer done before the next fetch overwrites it
  }
#ifndef PB_WGMMA_ENABLED
  cp_async_wait<0>();
#endif

#pragma unroll
  for (int nt = 0; nt < KT; ++nt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int v = vw + g + 8 * hr, c = c0 + 8 * nt + 2 * t;
      if (v < dv && c < dk)
        *reinterpret_cast<float2*>(S_g + static_cast<size_t>(v) * dk + c) = make_float2(S[nt][2 * hr], S[nt][2 * hr + 1]);
    }
}

// ---- 3. out: per (chunk, v head, block of OC = kOutCols v columns), W = HALVES x 4 warps.
// Two phases. (a) M = b(e^{G_i-G_j} q.k) (j <= i), formed once a CTA: its ten 16 x 16 blocks
// on or below the diagonal dealt round-robin over the warps, stored bf16 to shared memory.
// (b) o = e^G (Q b(S)^T) + M b(V) in units of (16 token rows, 16 v columns): row tile mt
// costs the Q b(S)^T chain plus mt + 1 steps of M b(V), so where there are enough column
// pairs (2 x pairs >= W) a warp takes row tiles {0, 3} or {1, 2} (equal work) for every
// (W / 2)-th column pair, else one row tile for every (W / 4)-th pair. Before session 50 each
// warp formed its own rows' M (twice with two halves) and kept one row tile: tile 3's warps did
// nearly twice tile 0's work and held the CTA's shared memory while the rest waited at EXIT
// (the balance measured 1.00-1.02x, bit-identical: kernels/PERF-NOTES.md "Session 50").
// Two halves only above kOutHalvesAbove v columns (1.05x at v_dim 128, 0.97x at 64: kernels/
// PERF-NOTES.md "Session 47"). Every output's sums are the same whatever the split: M's blocks
// and o's chain (Q b(S)^T in k order, then M b(V) in token order) as before. Shared: Q, K
// [64][KP + 8], b(S) [oc v][KP + 8], b(V)^T [oc v][kCS], b(M) [64][kCS], G [64], oc = min(OC,
// dvp): a narrow v_dim reserves only its own columns. Two copy groups: Q, K and G first, so M
// forms while b(S) and b(V)^T are still landing.
__host__ __device__ inline int out_cols(int dvp) { return dvp < GdnBf16Traits::kOutCols ? dvp : GdnBf16Traits::kOutCols; }
inline size_t out_smem(int kp, int dvp) {
  const size_t oc = out_cols(dvp);
  return 2 * ((2 * kC + oc) * (kp + 8) + oc * kCS + kC * kCS) + 4 * kC;
}

__host__ __device__ inline int out_halves(int dvp) { return dvp > GdnBf16Traits::kOutHalvesAbove ? 2 : 1; }
// Two halves: registers capped for two CTAs an SM at k_dim 128 (shared memory allows no more)
// and three below (92 registers at k_dim 128, 78 at 64, no spill).
template <int KP, int HALVES>
__global__ void __launch_bounds__(32 * GdnBf16Traits::kOutWarps * HALVES, HALVES == 1 ? 0 : KP == 128 ? 2 : 3)
    gdn_bf16_out(Bf16Params s) {
  using namespace detail;
  constexpr int KS = KP + 8, OC = GdnBf16Traits::kOutCols, NW = GdnBf16Traits::kOutWarps * HALVES, NTH = 32 * NW;
  static_assert(NW % 4 == 0, "row tiles pair up within a warp's set, and four tiles a pass");
  const GdnParams& p = s.p;
  const int item = blockIdx.x, vblocks = (s.dvp + OC - 1) / OC, h = blockIdx.y / vblocks, vbk = blockIdx.y % vblocks;
  GdnChunkCta cc;
  if (!gdn_chunk_cta(p, s.list, kC, cc, item)) return;
  const GdnChunkItem it = cc.it;
  const int t0 = it.t0, n = cc.n;
  const int dv = p.v_dim, dvp = s.dvp, kh = h / (p.num_v_heads / p.num_k_heads);
  const int c0 = vbk * OC, vn = min(OC, dvp - c0);  // v columns of this CTA (a multiple of 16)
  extern __shared__ __align__(16) uint16_t so[];
  uint16_t* Q_s = so;
  uint16_t* K_s = Q_s + kC * KS;
  const int oc = out_cols(dvp);
  uint16_t* S_s = K_s + kC * KS;   // [oc][KS]
  uint16_t* V_s = S_s + oc * KS;   // [oc][kCS]
  uint16_t* M_s = V_s + oc * kCS;  // [64][kCS]
  float* G_s = reinterpret_cast<float*>(M_s + kC * kCS);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const size_t ci = static_cast<size_t>(it.chunk);
  {
    const uint16_t* Q = s.Q + (ci * p.num_k_heads + kh) * kC * KS;
    const uint16_t* K = s.K + (ci * p.num_k_heads + kh) * kC * KS;
    const uint16_t* Sn = s.S + ((ci * p.num_v_heads + h) * dvp + c0) * KP;
    const uint16_t* Vt = s.Vt + ((ci * p.num_v_heads + h) * dvp + c0) * kC;
    for (int e = tid; e < kC * KS / 8; e += NTH) {  // the images' padded rows, as laid out here
      cp_async16(smem_u32(Q_s + 8 * e), Q + 8 * e);
      cp_async16(smem_u32(K_s + 8 * e), K + 8 * e);
    }
    const float* G = s.G + (ci * p.num_v_heads + h) * kGS;
    for (int e = tid; e < kC / 4; e += NTH) cp_async16(smem_u32(G_s + 4 * e), G + 4 * e);
    cp_async_commit();  // group 1: Q, K, G, for M while b(S) and b(V)^T land
    for (int e = tid; e < vn * (KP / 8); e += NTH) {
      const int r = e / (KP / 8), x = 8 * (e % (KP / 8));
      cp_async16(smem_u32(S_s + r * KS + x), Sn + r * KP + x);
    }
    for (int e = tid; e < vn * (kC / 8); e += NTH) {
      const int r = e / (kC / 8), x = 8 * (e % (kC / 8));
      cp_async16(smem_u32(V_s + r * kCS + x), Vt + r * kC + x);
    }
    cp_async_commit();  // group 2: b(S), b(V)^T
    cp_async_wait<1>();
    __syncthreads();
  }
  const uint32_t qb = smem_u32(Q_s), kb = smem_u32(K_s), sbase = smem_u32(S_s), vb = smem_u32(V_s),
                 mb = smem_u32(M_s);
  // (a) M's block (i, j), j <= i, for b = i (i + 1) / 2 + j; a short chunk's row tiles past
  // its tokens (16 i >= n) are never read, so not formed.
  for (int b = warp; b < 10; b += NW) {
    const int i = b >= 6 ? 3 : b >= 3 ? 2 : b >= 1 ? 1 : 0, j = b - i * (i + 1) / 2;
    if (16 * i >= n) continue;  // warp-uniform
    float m[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < KP / 16; ++ks) {
      uint32_t a[4], bk[4];
      ld_a(a, qb, KS, 16 * i, 16 * ks);
      ld_b_nk(bk, kb, KS, 16 * j, 16 * ks);
      mma2(m[0], m[1], a, bk);
    }
#pragma unroll
    for (int x = 0; x < 2; ++x)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 16 * i + g + 8 * (e >> 1), c = 16 * j + 8 * x + 2 * t + (e & 1);
        m[x][e] = c <= r ? m[x][e] * expf(G_s[r] - G_s[c]) : 0.f;
      }
    store_acc(M_s + 16 * i * kCS + 16 * j, kCS, m);
  }
  cp_async_wait<0>();
  __syncthreads();  // M, b(S) and b(V)^T in place
  // (b) the warp's row tiles (one, or a pair of equal work) and its column pairs.
  const int pairs = vn / 16;
  const bool paired = 2 * pairs >= NW;
  const int tiles = paired ? 2 : 1;
  const int tile0 = paired ? (warp & 1) : (warp & 3);
  const int np0 = paired ? warp >> 1 : warp >> 2, nstep = paired ? NW / 2 : NW / 4;
  for (int ti = 0; ti < tiles; ++ti) {
    const int mt = ti == 0 ? tile0 : 3 - tile0;
    if (16 * mt >= n) continue;  // warp-uniform: a short chunk's tile without tokens
    uint32_t qa[KP / 16][4], ma[4][4];
#pragma unroll
    for (int ks = 0; ks < KP / 16; ++ks) ld_a(qa[ks], qb, KS, 16 * mt, 16 * ks);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      if (ks <= mt) ld_a(ma[ks], mb, kCS, 16 * mt, 16 * ks);
    const int i0 = 16 * mt + g;
    const float e0 = expf(G_s[i0]), e1 = expf(G_s[i0 + 8]);
    for (int np = np0; np < pairs; np += nstep) {
      float o[2][4] = {};
#pragma unroll
      for (int ks = 0; ks < KP / 16; ++ks) {
        uint32_t b[4];
        ld_b_nk(b, sbase, KS, 16 * np, 16 * ks);
        mma2(o[0], o[1], qa[ks], b);
      }
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        o[x][0] *= e0;
        o[x][1] *= e0;
        o[x][2] *= e1;
        o[x][3] *= e1;
      }
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        if (ks > mt) break;  // warp-uniform: M is zero there
        uint32_t b[4];
        ld_b_nk(b, vb, kCS, 16 * np, 16 * ks);
        mma2(o[0], o[1], ma[ks], b);
      }
#pragma unroll
      for (int x = 0; x < 2; ++x)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int i = i0 + 8 * hr, v = c0 + 16 * np + 8 * x + 2 * t;
          if (i < n && v < dv)
            *reinterpret_cast<uint32_t*>(p.out + (static_cast<size_t>(t0 + i) * p.num_v_heads + h) * dv + v) =
                pack2(o[x][2 * hr] * p.inv_sqrt_dk, o[x][2 * hr + 1] * p.inv_sqrt_dk);
        }
    }
  }
}

// The scan's shape: NW row blocks a CTA, the widest (fewest loads of W and K a chunk)
// that still gives every SM a CTA; with one, each row block's k_dim split over two warps
// (KSP) when the row blocks number fewer than kScanSplitBelow a SM.
struct ScanShape {
  int nw = 1, ksp = 1, stages = 2;
};
ScanShape scan_shape(long long heads, int dvp) {
  const long long sms = detail::sm_count();
  for (const int nw : {4, 2})
    if (heads * ((dvp + 16 * nw - 1) / (16 * nw)) >= sms) return {nw, 1, 2};
  const long long rows = heads * (dvp / 16);  // row blocks, one a CTA
  if (rows >= GdnBf16Traits::kScanSplitBelow * sms) return {1, 1, 2};
  // One CTA a SM at most: the deep ring fits beside nothing.
  return {1, 2, rows <= sms ? GdnBf16Traits::kScanDeepStages : 2};
}

template <int KP, int NW, int KSP, int ST>
cudaError_t launch_scan(cudaStream_t stream, unsigned grid, const Bf16Params& s) {
  using L = ScanSmem<KP, NW, KSP, ST>;
  static bool configured = false;
  if (!configured) {
    const cudaError_t e = detail::allow_smem(gdn_bf16_scan<KP, NW, KSP, ST>, L::bytes);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  gdn_bf16_scan<KP, NW, KSP, ST><<<grid, 32 * NW * KSP, L::bytes, stream>>>(s);
  return cudaGetLastError();
}

template <int KP>
cudaError_t launch_kp(cudaStream_t stream, const Bf16Params& s, unsigned chunks, int heads_v, ScanShape sh,
                      unsigned scan_grid) {
  static bool configured = false;
  if (!configured) {
    cudaError_t e = detail::allow_smem(gdn_bf16_prep<KP>, prep_smem(KP, 256));
    if (e == cudaSuccess) e = detail::allow_smem(gdn_bf16_out<KP, 1>, out_smem(KP, GdnBf16Traits::kOutHalvesAbove));
    if (e == cudaSuccess) e = detail::allow_smem(gdn_bf16_out<KP, 2>, out_smem(KP, GdnBf16Traits::kOutCols));
    if (e != cudaSuccess) return e;
    configured = true;
  }
  gdn_bf16_prep<KP><<<dim3(chunks, heads_v), GdnBf16Traits::kPrepThreads, prep_smem(KP, s.dvp), stream>>>(s);
  constexpr int DS = GdnBf16Traits::kScanDeepStages;
  cudaError_t e = sh.nw == 4       ? launch_scan<KP, 4, 1, 2>(stream, scan_grid, s)
                  : sh.nw == 2     ? launch_scan<KP, 2, 1, 2>(stream, scan_grid, s)
                  : sh.ksp == 1    ? launch_scan<KP, 1, 1, 2>(stream, scan_grid, s)
                  : sh.stages == 2 ? launch_scan<KP, 1, 2, 2>(stream, scan_grid, s)
                                   : launch_scan<KP, 1, 2, DS>(stream, scan_grid, s);
  if (e != cudaSuccess) return e;
  const int vblocks = (s.dvp + GdnBf16Traits::kOutCols - 1) / GdnBf16Traits::kOutCols;
  const dim3 out_grid(chunks, heads_v * vblocks);
  constexpr int OW = 32 * GdnBf16Traits::kOutWarps;
  if (out_halves(s.dvp) == 2)
    gdn_bf16_out<KP, 2><<<out_grid, 2 * OW, out_smem(KP, s.dvp), stream>>>(s);
  else
    gdn_bf16_out<KP, 1><<<out_grid, OW, out_smem(KP, s.dvp), stream>>>(s);
  return cudaGetLastError();
}

}  // namespace

GdnBf16Layout gdn_bf16_layout(const LayerShape& shape, uint32_t total_tokens, uint32_t batch_size) {
  GdnBf16Layout l;
  l.kp = kp_of(shape.k_dim);
  l.dvp = dvp_of(shape.v_dim);
  l.list = gdn_chunk_list_layout(total_tokens, batch_size, kC);
  const uint64_t C = l.list.max_chunks, Hk = shape.num_k_heads, Hv = shape.num_v_heads, kp = l.kp, dvp = l.dvp;
  l.Q = l.list.bytes;
  l.K = l.Q + gdn_round256(C * Hk * kC * (kp + 8) * 2);
  l.W = l.K + gdn_round256(C * Hk * kC * (kp + 8) * 2);
  l.Ut = l.W + gdn_round256(C * Hv * kC * (kp + 8) * 2);
  l.Vt = l.Ut + gdn_round256(C * Hv * dvp * kCS * 2);
  l.S = l.Vt + gdn_round256(C * Hv * dvp * kC * 2);
  l.G = l.S + gdn_round256(C * Hv * dvp * kp * 2);
  l.bytes = l.G + gdn_round256(C * Hv * kGS * 4);
  return l;
}

bool gdn_bf16_supports(const LayerShape& shape) {
  return shape.num_k_heads > 0 && shape.num_v_heads > 0 && shape.num_v_heads % shape.num_k_heads == 0 &&
         shape.num_v_heads <= 65535 && shape.k_dim > 0 && shape.k_dim % 8 == 0 && shape.k_dim <= 128 &&
         shape.v_dim > 0 && shape.v_dim % 8 == 0 && shape.v_dim <= 256;
}

cudaError_t launch_gdn_bf16(cudaStream_t stream, const GdnArgs& args, uint64_t scratch) {
  const LayerShape& shape = args.shape;
  if (!gdn_bf16_supports(shape)) return cudaErrorInvalidValue;
  if (args.batch_size == 0) return cudaSuccess;
  const GdnBf16Layout l = gdn_bf16_layout(shape, args.total_tokens, args.batch_size);
  if (l.list.max_chunks == 0) return cudaSuccess;
  Bf16Params s;
  s.p = gdn_params(args);
  s.list = gdn_chunk_list_view(scratch, l.list);
  auto at = [&](uint64_t off) { return reinterpret_cast<uint16_t*>(scratch + off); };
  s.Q = at(l.Q);
  s.K = at(l.K);
  s.W = at(l.W);
  s.Ut = at(l.Ut);
  s.Vt = at(l.Vt);
  s.S = at(l.S);
  s.G = reinterpret_cast<float*>(scratch + l.G);
  s.dvp = l.dvp;
  const long long heads = static_cast<long long>(args.batch_size) * shape.num_v_heads;
  const ScanShape sh = scan_shape(heads, l.dvp);
  s.p.blocks = (l.dvp + 16 * sh.nw - 1) / (16 * sh.nw);
  const long long scan_ctas = heads * s.p.blocks;
  const int vblocks = (l.dvp + GdnBf16Traits::kOutCols - 1) / GdnBf16Traits::kOutCols;
  if (scan_ctas > 0x7fffffffLL || l.list.max_chunks > 0x7fffffffu || shape.num_v_heads * vblocks > 65535)
    return cudaErrorInvalidValue;
  const unsigned chunks = l.list.max_chunks, grid = static_cast<unsigned>(scan_ctas);
  if (l.kp == 32) return launch_kp<32>(stream, s, chunks, shape.num_v_heads, sh, grid);
  if (l.kp == 64) return launch_kp<64>(stream, s, chunks, shape.num_v_heads, sh, grid);
  return launch_kp<128>(stream, s, chunks, shape.num_v_heads, sh, grid);
}

}  // namespace pb::kernels
