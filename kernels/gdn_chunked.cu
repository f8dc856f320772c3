// gdn_chunked.cu: the gated delta rule in chunks of kC tokens (the WY / UT
// form of flash-linear-attention's chunk_gated_delta_rule), with the chunk's
// matrix products on tensor cores (tf32 mma.sync m16n8k8, fp32 accumulators).
// Per chunk, with G_i = sum_{j<=i} g_j inside the chunk and S0 the state before it:
//   A_ij = beta_i e^{G_i-G_j} k_i.k_j (j < i), T = (I + A)^-1,
//   R_i = beta_i (v_i - e^{G_i} S0 k_i), Delta = T R (Delta_i = the token rule's delta),
//   o_i = (e^{G_i} S0 q_i + sum_{j<=i} e^{G_i-G_j} (q_i.k_j) Delta_j) / sqrt(dk),
//   S = e^{G_last} S0 + sum_j e^{G_last-G_j} Delta_j k_j^T.
// Two launches:
//   1. prep, parallel over (chunk, k head): what does not depend on S: q's and k's
//      inverse l2 norms, the k products K K^T and Q K^T once per k head (not per v
//      block and v head), then per v head of the group A, T = (I + A)^-1 (forward
//      substitution on the identity, fp32) and M = tf32(e^{G_i-G_j} q_i.k_j) (j <= i),
//      to the workspace;
//   2. the walk, launched as the prep's programmatic dependent (its launch and state
//      load overlap the prep's tail; it waits for the prep before reading its outputs):
//      a CTA owns one (stream, v head, block of VB rows of S) and walks the stream's
//      chunks in order: P1 [K;Q] S0^T -> R, e^G S0 q; Delta = T R (3xTF32:
//      fp32-accurate); P3 o += M Delta; P4 S += (e^{G_last-G} Delta)^T K. Blocks of 8
//      rows take gdn_walk_narrow.cuh's walk, which stages the next chunk while this
//      one's products run; the same products, summed in the same order.
// Every scale, exp and sum stays in fp32.
// Precision: tf32 operands (10-bit mantissa, rounded to nearest) are 8x finer
// than the bf16 rounding of q, k, v that the tolerance is built from; a host
// emulation of exactly these roundings (2048 tokens, dk = dv = 128) moved the
// state's max error by 2% against the fp32 reference (PERF-NOTES.md). bf16
// operands moved it by 25-85% and were not used. The checks' lp reference
// reproduces these roundings (reference/gdn_chunked_lp.cpp, GdnPrecision::
// tf32_chunked): a change to where this kernel rounds must be mirrored there.
// Invariants: the fp32 state lives in registers (P4's accumulators) for the
// whole stream; shared memory holds a tf32 copy for P1. S is read from and
// written back to h_state_ptrs[b] as [Hv, v_dim, k_dim]; q, k L2-normalised
// with eps 1e-6 inside the sqrt; out rounded to bf16 once.
#include "kernels/gdn_chunked.h"

#include "kernels/common.cuh"
#include "kernels/gdn_chunk_list.h"
#include "kernels/gdn_params.cuh"
#include "kernels/gdn_chunk_math.cuh"
#include "kernels/gdn_state_update.cuh"
#include "kernels/gdn_walk_plan.h"
#include "kernels/mma_tf32.cuh"

namespace pb::kernels {

namespace {

using namespace detail;  // mma_tf32.cuh

constexpr int kC = kGdnChunk;  // tokens per chunk: one warp's lanes (the g scan is a warp scan)
constexpr int kThreads = 256;  // 8 warps
constexpr int kCS = kC + 4;    // stride of [C][C] tiles in shared memory (4 mod 32)
constexpr int kTM = 2 * kC * kC;  // floats of one (chunk, v head)'s T then M in the workspace

// The lockstep walk's work queue (WalkQueue below): one counter, the next item to claim.
constexpr int kQueueInts = 1;

struct ChunkedParams {
  GdnParams p;
  GdnChunkListView list;          // the chunk list (gdn_chunk_list.h)
  float* tm;                      // [max_chunks][Hv][T | M] (kTM floats each)
  float2* nrm;                    // [Hk][total_tokens] inverse l2 norms of q, k
  int* queue;                     // [kQueueInts] the lockstep walk's work queue (WalkQueue); null: no queue walk
};

// ---- 1. prep: one CTA per (chunk, k head). Shared: K, Q [C][KS] tf32; per v head
// in flight A [C][CS], G, beta [C]. Warp (pa, jt) holds the 16 x 8 tiles (token tile
// pa, key tile jt) of K K^T and Q K^T (the same operands, tiles and k order as the
// walk computed them before). HP v heads of the group are done side by side, each by
// kThreads / HP threads: T's substitution is a chain of kC - 1 shuffle-and-fma steps,
// so HP heads take about the time of one (a tiny batch waits on this chain).
template <int KP, int HP>
struct PrepSmem {
  static constexpr int KS = KP + 4;
  static constexpr int K = 0, Q = K + kC * KS, A = Q + kC * KS, G = A + HP * kC * kCS, B = G + HP * kC;
  static constexpr size_t bytes = sizeof(float) * (B + HP * kC);
};

template <int KP, int HP>
__global__ void __launch_bounds__(kThreads) gdn_chunked_prep(ChunkedParams s) {
  using L = PrepSmem<KP, HP>;
  constexpr int KS = L::KS, QL = KP / 8;
  static_assert(kThreads % (HP * 32) == 0 && HP <= kThreads / 32, "whole warps per head");
  const GdnParams& p = s.p;
  const int item = blockIdx.x, kh = blockIdx.y;
  if (s.queue && item == 0 && kh == 0 && threadIdx.x < kQueueInts)  // read after the walk's pdl_wait
    s.queue[threadIdx.x] = 0;
  GdnChunkCta cc;
  if (!gdn_chunk_cta(p, s.list, kC, cc, item)) return;
  const GdnChunkItem it = cc.it;
  const int t0 = it.t0, n = cc.n;
  extern __shared__ __align__(16) float sm[];
  float *K_s = sm + L::K, *Q_s = sm + L::Q, *A_s = sm + L::A, *G_s = sm + L::G, *B_s = sm + L::B;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, fg = lane >> 2, ft = lane & 3;

  stage_qk<QL, kThreads>(p.conv_out, p.conv_dim, static_cast<size_t>(kh) * p.k_dim,
                         static_cast<size_t>(p.num_k_heads + kh) * p.k_dim, t0, n, p.k_dim, Q_s, K_s, KS, KP,
                         [&](int tt, float2 inv) { s.nrm[static_cast<size_t>(kh) * p.total_tokens + t0 + tt] = inv; });
  __syncthreads();

  const int pa = warp >> 2, jt = warp & 3;
  float ak[4] = {0.f, 0.f, 0.f, 0.f}, aq[4] = {0.f, 0.f, 0.f, 0.f};
  // A tile of padded tokens only (rows or keys at or past n) is zero: its products are skipped.
  const bool live = 16 * pa < n && 8 * jt < n;  // warp-uniform
#pragma unroll 4
  for (int kk = 0; kk < (live ? KP : 0); kk += 8) {
    uint32_t a_k[4], a_q[4], b[2];
    ldsm_x4(a_k, ldsm_addr(ldsm_a_row(K_s + 16 * pa * KS + kk, KS, lane)));
    ldsm_x4(a_q, ldsm_addr(ldsm_a_row(Q_s + 16 * pa * KS + kk, KS, lane)));
    ldsm_x2(b, ldsm_addr(ldsm_b2_row(K_s + 8 * jt * KS + kk, KS, lane)));
    mma_tf32(ak, a_k, b);
    mma_tf32(aq, a_q, b);
  }

  const int group = p.num_v_heads / p.num_k_heads, h_end = (kh + 1) * group;
  constexpr int HT = kThreads / HP;              // threads per v head in flight
  constexpr int TPC = HT / kC, RPT = kC / TPC;   // the substitution: a column of T per TPC lanes
  const int hg = tid / HT, ht = tid % HT, col = ht / TPC, sub = ht % TPC;
  for (int h0 = kh * group; h0 < h_end; h0 += HP) {
    if (warp < HP && h0 + warp < h_end)  // warp w: head h0 + w's gates
      load_chunk_gates(p.g, p.beta, p.num_v_heads, t0, n, h0 + warp, G_s + warp * kC, B_s + warp * kC, warp);
    __syncthreads();  // G, beta visible; the previous heads' reads of A_s done
#pragma unroll
    for (int e = 0; e < HP; ++e) {  // this warp's tiles of A and M, for every head in flight
      if (h0 + e >= h_end) break;
      const float *Ge = G_s + e * kC, *Be = B_s + e * kC;
      float* Ae = A_s + e * kC * kCS;
      float* M_g = s.tm + (static_cast<size_t>(it.chunk) * p.num_v_heads + h0 + e) * kTM + kC * kC;
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int i = 16 * pa + fg + 8 * hr, j = 8 * jt + 2 * ft;
        float m2[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float dec = j + c <= i ? expf(Ge[i] - Ge[j + c]) : 0.f;
          Ae[i * kCS + j + c] = j + c < i ? Be[i] * dec * ak[2 * hr + c] : 0.f;
          m2[c] = tf32_round(dec * aq[2 * hr + c]);
        }
        *reinterpret_cast<float2*>(M_g + i * kC + j) = make_float2(m2[0], m2[1]);
      }
    }
    __syncthreads();  // A complete for every head in flight
    if (h0 + hg < h_end) {  // warp-uniform
      // (I + A) T = I, column `col`, rows sub + TPC r (fp32, j ascending: the same fmas in
      // the same order whatever TPC, so T does not depend on HP)
      float* T_g = s.tm + (static_cast<size_t>(it.chunk) * p.num_v_heads + h0 + hg) * kTM;
      float x[RPT];
#pragma unroll
      for (int r = 0; r < RPT; ++r) x[r] = sub + TPC * r == col ? 1.f : 0.f;
      // this warp's first column is (its warp within the head) * 32 / TPC: x_j = 0 above it,
      // so steps before it add nothing; nor do steps from n - 1 on: A's rows past n - 1 and
      // columns from n on are zero
      forward_substitute<TPC, RPT, kC>(x, A_s + hg * kC * kCS, kCS, sub, lane, (ht / 32) * 32 / TPC, n - 1);
#pragma unroll
      for (int r = 0; r < RPT; ++r) T_g[(sub + TPC * r) * kC + col] = x[r];
    }
  }
  pdl_launch_dependents();  // this CTA's writes are issued: the walk may launch (it waits for them)
}


// Shared memory layout (floats). Strides: KS and CS are 4 (mod 32), so that
// fragments read along a row ([m][k] A, [n][k] B) hit 32 distinct banks; VS
// is 8 (mod 32), for fragments read down a column ([k][n] B, [k][m] A).
template <int KP, int VB>
struct ChunkSmem {
  static constexpr int KS = KP + 4, VS = VB + 8, CS = kCS;
  static constexpr int S = 0;                 // [VB][KS] S0, tf32 (the fp32 master is in registers)
  static constexpr int KQ = S + VB * KS;      // [2C][KS] rows 0..C-1 normalised k, C..2C-1 q (tf32)
  static constexpr int D = KQ + 2 * kC * KS;  // [C][VS] v, then R, then Delta (fp32)
  static constexpr int T = D + kC * VS;       // [C][CS] T = (I + A)^-1, lower (fp32, from prep)
  static constexpr int M = T + kC * CS;       // [C][CS] e^{G_i-G_j} q_i.k_j, j <= i (tf32, from prep)
  static constexpr int Gm = M + kC * CS;      // [C] e^{G_i}
  static constexpr int Bt = Gm + kC;          // [C] beta
  static constexpr int E = Bt + kC;           // [C] e^{G_last - G_j}
  static constexpr int Gr = E + kC;           // [C] G_i
  static constexpr int Raw = Gr + kC;         // the next chunk's raw bf16 q | k | v (ChunkRaw)
  static constexpr int total = Raw + (2 * kC * KP + kC * VB) / 2 + 2 * kC;
  static constexpr size_t bytes = sizeof(float) * total;
};

// One chunk's raw inputs in shared memory, copied a chunk ahead by cp.async
// (16-byte pieces of 8 bf16): q [C][KP], k [C][KP], v [C][VB], unpadded.
template <int KP, int VB>
struct ChunkRaw {
  static constexpr int QL = KP / 8, QN = kC * QL, QU = (QN + kThreads - 1) / kThreads;  // q (and k) pieces
  static constexpr int VL = VB / 8, VN = kC * VL, VU = (VN + kThreads - 1) / kThreads;  // v pieces
  static_assert(QN % 32 == 0 && VN % 32 == 0, "whole warps per staging slot");
  static constexpr int Q = 0, K = QN, V = 2 * QN, N = V + VN;  // in 16-byte pieces; N: [C] float2 inverse norms
};

// What one walk CTA owns (gdn_cta_head, gdn_params.cuh, with v blocks of VB rows): v head
// h and its k head, rows v0 .. v0 + vn of the state (S_g: the head's [v_dim][k_dim]
// block), the stream's rows and its first chunk in the prep's T | M, and the offsets of
// its q, k, v columns in a conv_out row. False: the CTA has nothing to do (an order entry
// or chunk_first out of range reads nothing).
struct WalkCta {
  int h, kh, v0, vn, c_first;
  StreamRows sr;
  float* S_g;
  size_t q_off, k_off, v_off, out_stride;
};
template <int VB>
__device__ __forceinline__ bool walk_cta(const ChunkedParams& s, WalkCta& w, unsigned item = blockIdx.x) {
  const GdnParams& p = s.p;
  GdnCtaHead head;
  if (!gdn_cta_head(p, head, item)) return false;
  w.h = head.h;
  w.kh = head.kh;
  w.sr = head.sr;
  w.c_first = s.list.chunk_first[head.b];
  if (w.c_first < 0 || w.c_first + (w.sr.end - w.sr.begin + kC - 1) / kC > s.list.max_chunks) return false;
  w.v0 = head.vb * VB;
  w.vn = min(VB, p.v_dim - w.v0);  // a multiple of 8
  w.S_g = head.S_g;
  w.q_off = static_cast<size_t>(w.kh) * p.k_dim;
  w.k_off = static_cast<size_t>(p.num_k_heads + w.kh) * p.k_dim;
  w.v_off = static_cast<size_t>(2 * p.num_k_heads) * p.k_dim + static_cast<size_t>(w.h) * p.v_dim + w.v0;
  w.out_stride = static_cast<size_t>(p.num_v_heads) * p.v_dim;
  return true;
}

// The lockstep walk's work queue, for a batch that prepare's plan (gdn_walk_plan.h) gives
// it: one CTA an SM, each claiming the next item in launch order (stream-major, longest
// stream first, then v head, then v block) until none is left, so a long stream's chains
// start at once on SMs of their own. Which CTA walks which item changes no sum's order:
// the bits are the same as the one-item-a-CTA launch's. s.queue[0]: the next item,
// zeroed by the prep every launch.
struct WalkQueue {
  // Thread 0, after pdl_wait: the next item for this CTA, or -1 (none left).
  __device__ static int claim(const ChunkedParams& s) {
    const long long items = 1LL * s.p.batch_size * s.p.num_v_heads * s.p.blocks;
    const int i = atomicAdd(s.queue, 1);
    return i >= 0 && i < items ? i : -1;
  }
};

// The walk's per-chunk tile products, shared by both walks (this file's and
// gdn_walk_narrow.cuh's) so that they sum the same products in the same order. A warp
// holds token tile pa (16 rows) against v tiles pn .. pn + TN - 1; `active` is
// warp-uniform (false: the warp skips the product).

// Delta = T R (m = tokens of tile pa, n = v, k = tokens j <= 16 pa + 15), in 3xTF32
// (gdn_chunk_math.cuh). T [C][kCS] fp32, R [C][ds] fp32.
template <int TN>
__device__ __forceinline__ void delta_3xtf32(float (&d)[TN][4], const float* T, const float* R, int ds, int pa,
                                             int pn, int fg, int ft, bool active) {
  lower_product_3xtf32<TN, kC>(d, T, kCS, R, ds, pa, pn, fg, ft, active);
}

// P3: o += (masked q.k) Delta (m = tokens of tile pa, n = v, k = tokens j <= 16 pa + 15),
// M [C][kCS] tf32 from the prep, Delta [C][ds] fp32; then the tile's rows below n into
// out (bf16 of o / sqrt(dk)), at row t0, v head h, v columns v0 .. v0 + vn - 1.
template <int TN>
__device__ __forceinline__ void p3_out_tile(float (&o)[TN][4], const float* M, const float* Dl, int ds,
                                            const GdnParams& p, size_t out_stride, int t0, int n, int h, int v0,
                                            int vn, int pa, int pn, int fg, int ft, bool active) {
#pragma unroll
  for (int kk = 0; kk < kC; kk += 8) {
    if (!active || kk >= 16 * (pa + 1)) break;  // above the diagonal: M is zero there
    uint32_t a[4];
    load_a_mk(a, M + 16 * pa * kCS + kk, kCS, fg, ft);
#pragma unroll
    for (int ni = 0; ni < TN; ++ni) {
      const float* X = Dl + kk * ds + 8 * (pn + ni);
      const uint32_t bd[2] = {tf32_bits(X[ft * ds + fg]), tf32_bits(X[(ft + 4) * ds + fg])};
      mma_tf32(o[ni], a, bd);
    }
  }
#pragma unroll
  for (int ni = 0; ni < TN; ++ni)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = 16 * pa + fg + 8 * hr, v = 8 * (pn + ni) + 2 * ft;
      if (active && i < n && v < vn)
        *reinterpret_cast<uint32_t*>(p.out + static_cast<size_t>(t0 + i) * out_stride +
                                     static_cast<size_t>(h) * p.v_dim + v0 + v) =
            pack2(o[ni][2 * hr] * p.inv_sqrt_dk, o[ni][2 * hr + 1] * p.inv_sqrt_dk);
    }
}

// The walk of one item (gdn_cta_head's): its state loaded, its stream's chunks in order, its
// state stored. sm: the kernel's dynamic shared memory (ChunkSmem).
template <int KP, int VB>
__device__ __forceinline__ void walk_item(const ChunkedParams& s, unsigned item, float* sm) {
  using namespace detail;
  using L = ChunkSmem<KP, VB>;
  using Raw = ChunkRaw<KP, VB>;
  using SG = WarpGrid<VB / 16, KP / 8>;  // P4: the state's tiles
  constexpr int KS = L::KS, VS = L::VS, CS = L::CS;
  // P1, Delta, P3: warp (pa, pn) owns token tile pa, v tiles pn..pn+TN1-1, of both the k
  // rows (R, Delta) and the q rows (o). At VB 16 (too few tiles for 8 warps) the roles
  // split: warps 0-3 the k rows, 4-7 the q rows.
  constexpr bool kRoles = VB == 16;
  constexpr int TN1 = kRoles ? 1 : VB / 32;
  static_assert((VB == 16 || VB % 32 == 0) && KP % 32 == 0, "tile shapes");
  float* S_s = sm + L::S;
  float* KQ_s = sm + L::KQ;
  float* D_s = sm + L::D;
  float* T_s = sm + L::T;
  float* M_s = sm + L::M;
  float* Gm_s = sm + L::Gm;
  float* Bt_s = sm + L::Bt;
  float* E_s = sm + L::E;
  float* Gr_s = sm + L::Gr;
  uint4* R_s = reinterpret_cast<uint4*>(sm + L::Raw);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int fg = lane >> 2, ft = lane & 3;  // fragment row group / column
  const GdnParams& p = s.p;
  WalkCta w;
  if (!walk_cta<VB>(s, w, item)) return;
  const int h = w.h, kh = w.kh, v0 = w.v0, vn = w.vn, c_first = w.c_first;
  const StreamRows sr = w.sr;

  // The state: this warp's SG::TM x SG::TN tiles of [VB][KP], fp32.
  const int sm0 = (warp / SG::WN) * SG::TM, sn0 = (warp % SG::WN) * SG::TN;
  float Sr[SG::TM][SG::TN][4];
  gdn_state_load(Sr, w.S_g, v0, vn, p.k_dim, S_s, KS, sm0, sn0, fg, ft);
  pdl_wait();  // launched as the prep's dependent: its norms, T and M are read below

  const size_t q_off = w.q_off, k_off = w.k_off, v_off = w.v_off, out_stride = w.out_stride;

  // Starts the copies of the chunk at row c0 into R_s (zeros past the stream's
  // end and past k_dim / vn); warp 0 loads its g and beta (lane = token).
  float g_next = 0.f, beta_next = 0.f;
  auto fetch = [&](int c0) {
    const int n = min(kC, sr.end - c0);
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < Raw::QU; ++u) {
      const int idx = tid + kThreads * u, tt = idx / Raw::QL, col = 8 * (idx % Raw::QL);
      if (idx >= Raw::QN) break;
      const uint16_t* row = p.conv_out + static_cast<size_t>(c0 + tt) * p.conv_dim;
      if (tt < n && col < p.k_dim) {
        cp_async16(smem_u32(R_s + Raw::Q + idx), row + q_off + col);
        cp_async16(smem_u32(R_s + Raw::K + idx), row + k_off + col);
      } else {
        R_s[Raw::Q + idx] = zero;
        R_s[Raw::K + idx] = zero;
      }
    }
#pragma unroll
    for (int u = 0; u < Raw::VU; ++u) {
      const int idx = tid + kThreads * u, tt = idx / Raw::VL, col = 8 * (idx % Raw::VL);
      if (idx >= Raw::VN) break;
      if (tt < n && col < vn)
        cp_async16(smem_u32(R_s + Raw::V + idx), p.conv_out + static_cast<size_t>(c0 + tt) * p.conv_dim + v_off + col);
      else
        R_s[Raw::V + idx] = zero;
    }
    if (warp == 0) {  // padded tokens: inverse norms 0
      float2* nr = reinterpret_cast<float2*>(R_s + Raw::N) + lane;
      if (lane < n) cp_async8(smem_u32(nr), s.nrm + static_cast<size_t>(kh) * p.total_tokens + c0 + lane);
      else *nr = make_float2(0.f, 0.f);
    }
    cp_async_commit();
    if (warp == 0) {  // padded tokens: g = 0, beta = 0 (no effect)
      const bool ok = lane < n;
      const size_t gi = static_cast<size_t>(c0 + (ok ? lane : 0)) * p.num_v_heads + h;
      g_next = ok ? p.g[gi] : 0.f;
      beta_next = ok ? p.beta[gi] : 0.f;
    }
  };

  // Starts the copy of chunk c's T and M (prep's, fp32) into T_s, M_s.
  auto fetch_tm = [&](int c) {
    const float* src = s.tm + (static_cast<size_t>(c) * p.num_v_heads + h) * kTM;
    constexpr int PR = kC / 4;  // 16-byte pieces per row
    for (int idx = tid; idx < 2 * kC * PR; idx += kThreads) {
      const int mat = idx / (kC * PR), row = (idx / PR) % kC, c4 = 4 * (idx % PR);
      cp_async16(smem_u32((mat ? M_s : T_s) + row * CS + c4), src + mat * kC * kC + row * kC + c4);
    }
    cp_async_commit();
  };

  if (sr.begin < sr.end) fetch(sr.begin);
  cp_async_wait<0>();
  __syncthreads();  // R_s and the S_s copy visible to every thread
  for (int t0 = sr.begin; t0 < sr.end; t0 += kC) {
    const int n = min(kC, sr.end - t0);
    // ---- 1. stage: normalised q, k (tf32), v, the g scan, beta
#pragma unroll
    for (int u = 0; u < Raw::QU; ++u) {
      const int idx = tid + kThreads * u;
      if (idx < Raw::QN)  // whole warps
        stage_qk_piece<Raw::QL>(R_s + Raw::Q, R_s + Raw::K, reinterpret_cast<const float2*>(R_s + Raw::N)[idx / Raw::QL],
                                idx, KQ_s + kC * KS, KQ_s, KS);
    }
#pragma unroll
    for (int u = 0; u < Raw::VU; ++u) {
      const int idx = tid + kThreads * u;
      if (idx < Raw::VN) stage_v_piece<Raw::VL>(R_s + Raw::V, idx, D_s, VS);
    }
    if (warp == 0) {
      const float G = g_scan(g_next);
      const float G_last = __shfl_sync(0xffffffffu, G, 31);
      Gr_s[lane] = G;
      Gm_s[lane] = expf(G);
      E_s[lane] = expf(G_last - G);
      Bt_s[lane] = beta_next;
    }
    __syncthreads();  // staging done; the previous chunk's reads of T_s and M_s done
    fetch_tm(c_first + (t0 - sr.begin) / kC);  // needed after P1
    if (t0 + kC < sr.end) fetch(t0 + kC);      // in flight during this chunk's products
    else cp_async_commit();                     // (an empty group: the wait below counts groups)

    // ---- 2. P1: [K; Q] S0^T (m = tokens, n = v rows). Warp (pa, pn): the k rows and
    // the q rows of token tile pa against v tiles pn..; the q part (o) stays in this
    // warp's registers for P3.
    const int pa = kRoles ? (warp >> 1) & 1 : warp >> 2, pn = kRoles ? warp & 1 : (warp & 3) * TN1;
    const bool do_r = !kRoles || warp < 4, do_o = !kRoles || warp >= 4;  // warp-uniform
    float o[TN1][4];
    {
      float r[TN1][4];
#pragma unroll
      for (int ni = 0; ni < TN1; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) r[ni][e] = o[ni][e] = 0.f;
      // Fragments by ldmatrix (mma_tf32.cuh) at VB 16 / 32; at VB 64 it cost registers
      // (a 4-byte spill) and time on the mixed batch (PERF-NOTES "gdn v5"), so LDS there.
      constexpr bool kLdsm = VB < 64;
      const uint32_t a_row = ldsm_addr(ldsm_a_row(KQ_s + 16 * pa * KS, KS, lane));
      const uint32_t b_row = ldsm_addr(ldsm_b2_row(S_s + 8 * pn * KS, KS, lane));
#pragma unroll 4
      for (int kk = 0; kk < KP; kk += 8) {
        uint32_t ak[4], aq[4];
        if constexpr (kLdsm) {
          if (do_r) ldsm_x4(ak, a_row + 4 * kk);
          if (do_o) ldsm_x4(aq, a_row + 4 * (kC * KS + kk));
        } else {
          if (do_r) load_a_mk(ak, KQ_s + 16 * pa * KS + kk, KS, fg, ft);
          if (do_o) load_a_mk(aq, KQ_s + (kC + 16 * pa) * KS + kk, KS, fg, ft);
        }
#pragma unroll
        for (int ni = 0; ni < TN1; ++ni) {
          uint32_t bs[2];
          if constexpr (kLdsm) ldsm_x2(bs, b_row + 4 * (ni * 8 * KS + kk));
          else load_b_nk(bs, S_s + 8 * (pn + ni) * KS + kk, KS, fg, ft);
          if (do_r) mma_tf32(r[ni], ak, bs);
          if (do_o) mma_tf32(o[ni], aq, bs);
        }
      }
      // R = beta (v - e^G S0 k) over v in D_s (r_over_v_pair, as every walk rounds it);
      // o = e^G S0 q. A lane's two columns of a row as one float2 (VS = 8 mod 32: a
      // half-warp's pairs are conflict-free, where single floats put rows g and g + 4 on
      // the same banks).
#pragma unroll
      for (int ni = 0; ni < TN1; ++ni)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int i = 16 * pa + fg + 8 * hr, v = 8 * (pn + ni) + 2 * ft;
          const float gm = Gm_s[i];
          if (do_r) r_over_v_pair(&D_s[i * VS + v], Bt_s[i], gm, r[ni][2 * hr], r[ni][2 * hr + 1]);
          if (do_o) {
            o[ni][2 * hr] *= gm;
            o[ni][2 * hr + 1] *= gm;
          }
        }
    }
    cp_async_wait<1>();  // this chunk's T, M (the next chunk's raw copy may still be in flight)
    __syncthreads();     // R complete in D_s; T_s, M_s visible

    // ---- 3. Delta = T R (m = tokens of tile pa, n = v, k = tokens j <= 16 pa + 15), in
    // 3xTF32 (hi and lo tf32 parts of both operands: fp32-accurate), then over R in D_s.
    {
      float d[TN1][4];
      delta_3xtf32<TN1>(d, T_s, D_s, VS, pa, pn, fg, ft, do_r);
      __syncthreads();  // every read of R done
      if (do_r) {
#pragma unroll
        for (int ni = 0; ni < TN1; ++ni)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int i = 16 * pa + fg + 8 * hr, v = 8 * (pn + ni) + 2 * ft;
            *reinterpret_cast<float2*>(&D_s[i * VS + v]) = make_float2(d[ni][2 * hr], d[ni][2 * hr + 1]);
          }
      }
    }
    __syncthreads();  // Delta complete in D_s

    // ---- 4a. P3: o += (masked q.k) Delta, and the output
    p3_out_tile<TN1>(o, M_s, D_s, VS, p, out_stride, t0, n, h, v0, vn, pa, pn, fg, ft, do_o);

    // ---- 4b. P4: S = e^{G_last} S0 + (e^{G_last-G} Delta)^T K (m = v rows, n = k_dim, k = tokens)
    gdn_state_update<SG::TM, SG::TN, kC>(Sr, Gm_s[kC - 1], E_s, D_s, VS, KQ_s, KS, S_s, KS, sm0, sn0, fg, ft);
    cp_async_wait<0>();
    __syncthreads();  // the next chunk's staging overwrites KQ_s and D_s, and reads R_s
  }

  gdn_state_store(Sr, w.S_g, v0, vn, p.k_dim, sm0, sn0, fg, ft);
}

// The lockstep walk: one item a CTA (blockIdx.x), two CTAs a SM; or with kQueue one CTA a
// SM (launch bounds 1: up to 255 registers, 159 at KP 128 / VB 64 against 128), claiming
// items from the queue until none is left (WalkQueue).
template <int KP, int VB, bool kQueue>
__global__ void __launch_bounds__(kThreads, kQueue ? 1 : 2) gdn_chunked_kernel(ChunkedParams s) {
  extern __shared__ __align__(16) float sm[];
  if constexpr (!kQueue) {
    walk_item<KP, VB>(s, blockIdx.x, sm);
  } else {
    __shared__ int item_s;
    detail::pdl_wait();  // the prep has zeroed the queue
    for (;;) {
      __syncthreads();  // every thread has read item_s
      if (threadIdx.x == 0) item_s = WalkQueue::claim(s);
      __syncthreads();
      const int item = item_s;
      if (item < 0) break;
      walk_item<KP, VB>(s, item, sm);
    }
  }
}

#include "kernels/gdn_walk_narrow.cuh"

// The walk's kernel and shared memory at a block width: 8 rows, gdn_walk_narrow.cuh's.
template <int KP, int VB, int RB, bool kQueue = false>
constexpr auto walk_kernel() {
  if constexpr (VB == 8) return gdn_walk_narrow<KP, RB>;
  else return gdn_chunked_kernel<KP, VB, kQueue>;
}
template <int KP, int VB, int RB>
constexpr size_t walk_smem() {
  if constexpr (VB == 8) return NarrowSmem<KP, RB>::bytes;
  else return ChunkSmem<KP, VB>::bytes;
}

// The walk is launched as the prep's programmatic dependent (common.cuh): its
// launch and state load overlap the prep's last CTAs (on tiny batches the second
// launch's cost). A grid of at most one CTA per SM asks for more than half an SM's
// shared memory, so that its CTAs still spread one per SM when they start beside
// the prep's: each walks a chain of chunks, and two on one SM ran 28% slower
// (2 / 8 heads, 2 x 4096, PERF-NOTES "gdn v7").
template <int KP, int VB, int RB, bool kQueue = false>
cudaError_t launch_walk_grid(cudaStream_t stream, const ChunkedParams& s, long long ctas) {
  constexpr auto kernel = walk_kernel<KP, VB, RB, kQueue>();
  constexpr size_t bytes = walk_smem<KP, VB, RB>();
  static size_t whole_sm = 0;  // dynamic shared memory that leaves room for no second CTA
  if (!whole_sm) {
    int dev = 0, per_sm = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
    if (e != cudaSuccess) return e;
    const size_t half = static_cast<size_t>(per_sm) / 2 + 16;
    e = detail::allow_smem(kernel, std::max(bytes, half));
    if (e != cudaSuccess) return e;
    whole_sm = std::max(bytes, half);
  }
  // the queue: one CTA an SM, each claiming items until none is left
  const size_t smem = kQueue || ctas <= detail::sm_count() ? whole_sm : bytes;
  const long long grid = kQueue ? std::min<long long>(ctas, detail::sm_count()) : ctas;
  return detail::launch_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem, stream, s);
}

// The narrow walk with one CTA per SM has the shared memory for a second raw buffer: its
// staging warps then start a chunk's copies two chunks ahead (the bits are the same). Taken
// at k_dim 128 only: 3% faster there (2 / 8 heads, 1 x 16384), 2% slower at 64 (4 / 8
// heads), even at 32 (H100, PERF-NOTES "Session 35").
// s.queue set: the batch's plan takes the queue (the lockstep walk's WalkQueue).
template <int KP, int VB>
cudaError_t launch_walk(cudaStream_t stream, ChunkedParams s) {
  s.p.blocks = (s.p.v_dim + VB - 1) / VB;
  const long long ctas = static_cast<long long>(s.p.batch_size) * s.p.num_v_heads * s.p.blocks;
  if (ctas > 0x7fffffffLL) return cudaErrorInvalidValue;
  if constexpr (VB == 8) {
    if (KP == 128 && ctas <= detail::sm_count()) return launch_walk_grid<KP, VB, 2>(stream, s, ctas);
  } else if constexpr (VB == 64) {  // (plan_gdn_chunked_walk: the queue at 64 rows only)
    if (s.queue) return launch_walk_grid<KP, VB, 1, true>(stream, s, ctas);
  }
  return launch_walk_grid<KP, VB, 1>(stream, s, ctas);
}

// The prep over (chunk, k head), then the walk with v blocks of 64 rows when their
// CTAs fill the GPU's two resident CTAs per SM; else 32 (then the chain of chunks,
// not the throughput, sets the time, and a narrower CTA walks each chunk faster);
// 16 while 16-row CTAs still find an SM each (past that, a narrower block only adds
// per-CTA cost: 4 / 8 heads d64, 8 x 2048, ran slower at 16 than at 32; and 16 rows need
// k_dim over 32), and before that 8 (S^T's 16-row tiles, one a warp) while 8-row CTAs
// fit two per SM: at 2 / 8 heads, 2 x 4096, 256 narrow CTAs two per SM ran 5% faster
// than 128 of 16 rows one per SM (PERF-NOTES "gdn v9"). The block width changes no
// sum's order.
template <int KP, int HP>
cudaError_t launch_prep(cudaStream_t stream, const ChunkedParams& s) {
  using PL = PrepSmem<KP, HP>;
  static bool configured = false;
  if (!configured) {
    const cudaError_t e = detail::allow_smem(gdn_chunked_prep<KP, HP>, PL::bytes);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  gdn_chunked_prep<KP, HP><<<dim3(s.list.max_chunks, s.p.num_k_heads), kThreads, PL::bytes, stream>>>(s);
  return cudaGetLastError();
}

// The walk's block width for this batch (the rule above): 64, 32, 16 or 8 (the narrow walk).
int walk_rows(const LayerShape& shape, uint32_t batch_size, int sms) {
  const long long heads = static_cast<long long>(batch_size) * shape.num_v_heads;
  const int v = shape.v_dim;
  if (v > 32 && heads * ((v + 63) / 64) >= 2LL * sms) return 64;
  // (16 rows need k_dim > 32: 16 x 32 is four state tiles for eight warps)
  if (v > 16 && heads * ((v + 15) / 16) > sms) return 32;
  if (heads * ((v + 7) / 8) <= 2LL * sms) return 8;
  return shape.k_dim <= 32 ? 32 : 16;
}

template <int KP>
cudaError_t launch_k(cudaStream_t stream, const ChunkedParams& s, const GdnArgs& args) {
  const GdnParams& p = s.p;
  const int group = p.num_v_heads / p.num_k_heads;  // v heads side by side in the prep: up to 4
  const cudaError_t pe = group >= 4   ? launch_prep<KP, 4>(stream, s)
                         : group >= 2 ? launch_prep<KP, 2>(stream, s)
                                      : launch_prep<KP, 1>(stream, s);
  if (pe != cudaSuccess) return pe;
  switch (walk_rows(args.shape, args.batch_size, detail::sm_count())) {
    case 64: return launch_walk<KP, 64>(stream, s);
    case 32: return launch_walk<KP, 32>(stream, s);
    case 16: if constexpr (KP > 32) return launch_walk<KP, 16>(stream, s); else return cudaErrorInvalidValue;
    default: return launch_walk<KP, 8>(stream, s);
  }
}

}  // namespace

GdnChunkedLayout gdn_chunked_layout(const LayerShape& shape, uint32_t total_tokens, uint32_t batch_size) {
  GdnChunkedLayout l;
  l.list = gdn_chunk_list_layout(total_tokens, batch_size);
  l.tm = l.list.bytes;
  l.nrm = l.tm + gdn_round256(uint64_t(l.list.max_chunks) * shape.num_v_heads * kTM * sizeof(float));
  l.sched = l.nrm + gdn_round256(uint64_t(shape.num_k_heads) * total_tokens * sizeof(float2));
  l.bytes = l.sched + gdn_round256(kQueueInts * sizeof(int));
  return l;
}

bool plan_gdn_chunked_walk(const LayerShape& shape, uint32_t batch_size, const std::vector<int32_t>& chunks) {
  if (!gdn_chunked_supports(shape)) return false;
  // The queue at 64 rows only: at 32, where a shared step costs less, 3 x 8192 + 100 tokens
  // (16 / 32 heads, d128), which the plan gives the queue, ran 0.87x (PERF-NOTES "Session 40").
  const int sms = detail::sm_count(), rows = walk_rows(shape, batch_size, sms);
  if (rows != 64) return false;
  return plan_gdn_walk_queue(chunks, shape.num_v_heads * ((shape.v_dim + rows - 1) / rows), sms);
}

bool gdn_chunked_supports(const LayerShape& shape) {
  return shape.num_k_heads > 0 && shape.num_v_heads > 0 && shape.num_v_heads % shape.num_k_heads == 0 &&
         shape.k_dim > 0 && shape.k_dim % 8 == 0 && shape.k_dim <= 128 && shape.v_dim > 0 &&
         shape.v_dim % 8 == 0 && shape.num_k_heads <= 65535;
}

cudaError_t launch_gdn_chunked(cudaStream_t stream, const GdnArgs& args, uint64_t scratch, bool walk_queue) {
  const LayerShape& shape = args.shape;
  if (!gdn_chunked_supports(shape)) return cudaErrorInvalidValue;
  if (args.batch_size == 0) return cudaSuccess;
  const GdnChunkedLayout l = gdn_chunked_layout(shape, args.total_tokens, args.batch_size);
  if (l.list.max_chunks == 0) return cudaSuccess;
  if (l.list.max_chunks > 0x7fffffffu) return cudaErrorInvalidValue;
  ChunkedParams s;
  s.p = gdn_params(args);
  s.list = gdn_chunk_list_view(scratch, l.list);
  s.tm = reinterpret_cast<float*>(scratch + l.tm);
  s.nrm = reinterpret_cast<float2*>(scratch + l.nrm);
  s.queue = walk_queue ? reinterpret_cast<int*>(scratch + l.sched) : nullptr;
  if (shape.k_dim <= 32) return launch_k<32>(stream, s, args);
  if (shape.k_dim <= 64) return launch_k<64>(stream, s, args);
  return launch_k<128>(stream, s, args);
}

}  // namespace pb::kernels
