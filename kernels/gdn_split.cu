// gdn_split.cu: the gated delta rule split across the context (the WY form of
// gdn_chunked.cu reordered so that only a lean state recurrence is sequential).
// Per 32-token chunk c of a stream, G_i = sum_{j<=i} g_j inside it, S_c the
// state entering it ([v_dim][k_dim]):
//   1. prep (parallel over chunk x v head): A_ij = beta_i e^{G_i-G_j} k_i.k_j (j < i),
//      T = (I + A)^-1 by forward substitution, [U | W] = T [beta v | beta e^G k] (3xTF32);
//   2. scan (one CTA per stream x v head x v block, chunks in order; on sm_90a the
//      wgmma scan of gdn_split_scan_st.cuh, elsewhere the mma.sync scan below):
//      Delta_c = U_c - W_c S_c^T, P_c = Q_c S_c^T, S_{c+1} = e^{G_last} S_c + (e^{G_last-G} Delta_c)^T K_c,
//      storing P_c and Delta_c (over U_c) for step 3 (P: T x v_dim per head, 1/4 of S_c's bytes at d128);
//   3. out (parallel over chunk x v head): o = e^G P_c + tril(e^{G_i-G_j} q.k) Delta_c.
// The products (A = K K^T, W S^T, (e^{..}Delta)^T K, M = Q K^T, Q S^T, M Delta) run
// on tf32 mma.sync m16n8k8 (kernels/mma_tf32.cuh) or wgmma; T R in 3xTF32 (fp32-
// accurate); the substitution, exps and scales in fp32 on the CUDA cores.
// Precision (GdnPrecision::tf32_split, reference/gdn_split_lp.cpp mirrors every
// rounding): tf32 operands (cvt.rn) where gdn_chunked.cu has them (k, q, S, the
// masked q.k, Delta, e^{..}Delta) plus W; products of tf32 values are exact in fp32,
// so the tensor cores change only the order of the fp32 sums; [U | W] = T R stands
// where the lp substitutes (as the chunked kernel's Delta = T R does); fp32 scratch.
// Invariants: grid sizes from total_tokens, batch_size and the shape only; the
// work list and its count are read from the workspace.
#include "kernels/gdn_split.h"

#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/gdn_params.cuh"
#include "kernels/gdn_chunk_math.cuh"
#include "kernels/gdn_state_update.cuh"
#include "kernels/gdn_split_image.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/mma_tf32.cuh"
#include "kernels/wgmma.cuh"

namespace pb::kernels {

namespace {

constexpr int kC = kGdnChunk;  // tokens per chunk (one warp's lanes: the g scan)
constexpr int kThreads = 256;  // 8 warps

constexpr int kCS = kC + 4;    // stride of [C][C] tiles (4 mod 32: conflict-free A / B fragments)
constexpr int kScanStBlocks[] = {8, 16, 32, 64};  // the Hopper scan's v block widths, narrowest first

// Stride of [rows][k_dim] tf32 tiles read as mma fragments along a row: k_dim padded
// to 32, plus 4 (4 mod 32: the 32 lanes of a fragment load hit 32 banks).
__host__ __device__ inline int ks_of(int dk) { return ((dk + 31) & ~31) + 4; }

// The 16 x 8 tile (warp / 4, warp % 4) of the 32 x 32 product X Y^T over dk (X, Y
// [C][KS] tf32 in shared memory), in c-fragment order (mma_tf32.cuh).
__device__ __forceinline__ void chunk_xyt(float (&acc)[4], const float* X, const float* Y, int KS, int dk, int warp,
                                          int fg, int ft) {
  using namespace detail;
  const int mt = warp >> 2, nt = warp & 3;
#pragma unroll
  for (int e = 0; e < 4; ++e) acc[e] = 0.f;
#pragma unroll 4
  for (int kk = 0; kk < dk; kk += 8) {
    uint32_t a[4], b[2];
    load_a_mk(a, X + 16 * mt * KS + kk, KS, fg, ft);
    load_b_nk(b, Y + 8 * nt * KS + kk, KS, fg, ft);
    mma_tf32(acc, a, b);
  }
}

struct SplitParams {
  GdnParams p;
  GdnChunkListView list;  // the chunk list (gdn_chunk_list.h)
  float *G, *W, *U, *Kn, *Qn, *P;  // P: q_i tf32(S_c)^T per token, v head and v row
  // The Hopper scan's operand images (gdn_split_image.cuh), per chunk index: W per v head,
  // Q and K^T per k head, kp values wide. Null when the mma.sync scan runs (which reads W).
  // U | E per (chunk index, v head, block of vb v rows) (gdn_ue_floats); null with W.
  float *Wimg, *Qimg, *Ktimg, *Uimg;
  int kp, vb;
};

// ---- 1. prep: per (chunk, v head). Shared: K, Q [C][KS] tf32, A, T [C][CS], the
// right-hand side R [C][kPrepRS], G, beta. A on tf32 mma.sync (warp w: the 16 x 8 tile
// (w / 4, w % 4)); T = (I + A)^-1 by substitution in fp32, a column per kTpc lanes (rows
// sub + kTpc r in registers, x_j by shuffle); [U | W] = T R in 3xTF32 (fp32-accurate: the
// lp's substitution stands for it, as gdn_chunked_lp.cpp's does for the chunked T R).
constexpr int kTpc = 4;           // lanes per substitution column
constexpr int kRpt = kC / kTpc;   // rows per lane
constexpr int kPrepCols = 128;    // columns of [U | W] per block
constexpr int kPrepRS = kPrepCols + 8;  // R's stride: 8 mod 32 (B fragments read down a column)
constexpr int kPrepTN = kPrepCols / 8 / 4;  // 8 x 8 tiles per warp along the block (4 warps per token tile)
__global__ void __launch_bounds__(kThreads, 3) gdn_split_prep(SplitParams s) {
  using namespace detail;
  const GdnParams& p = s.p;
  const int item = blockIdx.x, h = blockIdx.y;
  GdnChunkCta cc;
  if (!gdn_chunk_cta(p, s.list, kC, cc, item)) return;
  const GdnChunkItem it = cc.it;
  const int t0 = it.t0, n = cc.n;
  const int dk = p.k_dim, dv = p.v_dim, KS = ks_of(dk);
  const int group = p.num_v_heads / p.num_k_heads, kh = h / group;
  extern __shared__ __align__(16) float sm[];
  float* K_s = sm;                 // [C][KS]
  float* Q_s = K_s + kC * KS;      // [C][KS]
  float* A_s = Q_s + kC * KS;      // [C][CS]
  float* T_s = A_s + kC * kCS;     // [C][CS]
  float* R_s = T_s + kC * kCS;     // [C][kPrepRS]
  float* G_s = R_s + kC * kPrepRS; // [C]
  float* B_s = G_s + kC;           // [C]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // q, k of this k head, L2-normalised and rounded to tf32 as the chunked prep does
  // (stage_qk); zero past n and k_dim.
  const bool store_qk = h % group == 0;  // the group's first v head also stores them
  stage_qk<16, kThreads>(p.conv_out, p.conv_dim, static_cast<size_t>(kh) * dk, static_cast<size_t>(p.num_k_heads + kh) * dk,
                         t0, n, dk, Q_s, K_s, KS, KS - 4, [](int, float2) {});
  load_chunk_gates(s.p.g, s.p.beta, s.p.num_v_heads, t0, n, h, G_s, B_s);
  __syncthreads();
  if (tid < n) s.G[static_cast<size_t>(t0 + tid) * p.num_v_heads + h] = G_s[tid];
  // The scan's U | E images of this (chunk, v head): U by the product below, E here
  // (E_j, 1 past n; e^{G_last}; padding), once per v block.
  if (s.Uimg && tid < kGdnEImg) {
    const int ue = gdn_ue_floats(s.vb);
    float* img = s.Uimg + (static_cast<size_t>(it.chunk) * p.num_v_heads + h) * p.blocks * ue;
    const float G_last = G_s[n - 1];
    const float e = tid < kC ? expf(G_last - (tid < n ? G_s[tid] : G_last)) : tid == kC ? expf(G_last) : 0.f;
    for (int b = 0; b < p.blocks; ++b) img[b * ue + kC * s.vb + tid] = e;
  }
  if (store_qk) {  // Kn, Qn (rows < n) for the out pass, the images (every row, zero past n and k_dim)
    const int dk4 = dk / 4;
    for (int e = tid; e < n * dk4; e += kThreads) {
      const int i = e / dk4, c = 4 * (e % dk4);
      const size_t o = (static_cast<size_t>(t0 + i) * p.num_k_heads + kh) * dk + c;
      *reinterpret_cast<float4*>(s.Kn + o) = *reinterpret_cast<const float4*>(K_s + i * KS + c);
      *reinterpret_cast<float4*>(s.Qn + o) = *reinterpret_cast<const float4*>(Q_s + i * KS + c);
    }
    if (s.Qimg) {
      const size_t img = (static_cast<size_t>(it.chunk) * p.num_k_heads + kh) * kC * s.kp;
      for (int e = tid; e < kC * s.kp; e += kThreads) {
        const int i = e / s.kp, c = e % s.kp;
        s.Qimg[img + gdn_image_index(kC, i, c)] = c < dk ? Q_s[i * KS + c] : 0.f;
        s.Ktimg[img + gdn_image_index(s.kp, c, i)] = c < dk ? K_s[i * KS + c] : 0.f;
      }
    }
  }
  if (s.Wimg) {  // W's zeros: rows past n, k past k_dim (the product below writes the rest)
    const size_t wimg = (static_cast<size_t>(it.chunk) * p.num_v_heads + h) * kC * s.kp;
    for (int e = tid; e < kC * s.kp; e += kThreads) {
      const int i = e / s.kp, c = e % s.kp;
      if (i >= n || c >= dk) s.Wimg[wimg + gdn_image_index(kC, i, c)] = 0.f;
    }
  }

  // A_ij = beta_i e^{G_i-G_j} k_i.k_j, j < i (zero on and above the diagonal; no exp there)
  {
    const int fg = lane >> 2, ft = lane & 3;
    float acc[4];
    chunk_xyt(acc, K_s, K_s, KS, dk, warp, fg, ft);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 16 * (warp >> 2) + fg + 8 * (e >> 1), j = 8 * (warp & 3) + 2 * ft + (e & 1);
      A_s[i * kCS + j] = j < i ? B_s[i] * expf(G_s[i] - G_s[j]) * acc[e] : 0.f;
    }
  }
  __syncthreads();

  // T = (I + A)^-1: forward substitution on the identity (fp32, j ascending), a column per
  // kTpc lanes of warps 0-3, as gdn_chunked.cu's prep forms it.
  const int sub = tid % kTpc;
  if (warp < kC * kTpc / 32) {  // warp-uniform
    const int col = tid / kTpc;
    float x[kRpt];
#pragma unroll
    for (int r = 0; r < kRpt; ++r) x[r] = sub + kTpc * r == col ? 1.f : 0.f;
    // x_j = 0 above the warp's first column; A's rows past n - 1 and columns from n on are zero
    forward_substitute<kTpc, kRpt, kC>(x, A_s, kCS, sub, lane, warp * 32 / kTpc, n - 1);
#pragma unroll
    for (int r = 0; r < kRpt; ++r) T_s[(sub + kTpc * r) * kCS + col] = x[r];
  }

  // [U | W] = T [beta v | beta e^G k] in blocks of kPrepCols columns: the block's right-hand
  // side staged in R_s (fp32), then warp w's 16 x 8 tiles (w / 4, 4 (w % 4) ..) in 3xTF32.
  const size_t hv_row = static_cast<size_t>(p.num_v_heads);
  const int fg = lane >> 2, ft = lane & 3, pa = warp >> 2, pn = (warp & 3) * kPrepTN;
  const size_t wimg = (static_cast<size_t>(it.chunk) * p.num_v_heads + h) * kC * s.kp;
  for (int c0 = 0; c0 < dv + dk; c0 += kPrepCols) {
    // The block's v columns as 16-byte pieces (8 bf16), every load in flight before the
    // first use (v_dim and k_dim are multiples of 8: a piece is all v or all k).
    constexpr int RP = kPrepCols / 8, RR = kC * RP / kThreads;
    static_assert(RR * kThreads == kC * RP, "whole pieces per thread");
    uint4 vr[RR];
#pragma unroll
    for (int r = 0; r < RR; ++r) {
      const int e = tid + r * kThreads, i = e / RP, c = c0 + 8 * (e % RP);
      vr[r] = make_uint4(0, 0, 0, 0);
      if (i < n && c < dv)
        vr[r] = *reinterpret_cast<const uint4*>(p.conv_out + static_cast<size_t>(t0 + i) * p.conv_dim +
                                                static_cast<size_t>(2 * p.num_k_heads) * dk + static_cast<size_t>(h) * dv + c);
    }
    __syncthreads();  // T_s written; the previous block's reads of R_s done
#pragma unroll
    for (int r = 0; r < RR; ++r) {
      const int e = tid + r * kThreads, i = e / RP, cl = 8 * (e % RP), c = c0 + cl;
      float b[8];
      unpack8(vr[r], b);
      const float bw = B_s[i] * expf(G_s[i]);
#pragma unroll
      for (int x = 0; x < 8; ++x) {
        if (i >= n || c >= dv + dk) b[x] = 0.f;
        else if (c < dv) b[x] = B_s[i] * b[x];
        else b[x] = bw * K_s[i * KS + (c - dv) + x];
      }
      *reinterpret_cast<float4*>(R_s + i * kPrepRS + cl) = make_float4(b[0], b[1], b[2], b[3]);
      *reinterpret_cast<float4*>(R_s + i * kPrepRS + cl + 4) = make_float4(b[4], b[5], b[6], b[7]);
    }
    __syncthreads();
    float d[kPrepTN][4];
    lower_product_3xtf32<kPrepTN, kC>(d, T_s, kCS, R_s, kPrepRS, pa, pn, fg, ft, true);
    if (!s.Uimg) {  // CTA-uniform: the mma.sync scan's layouts, U and W per token row
#pragma unroll
      for (int ni = 0; ni < kPrepTN; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 16 * pa + fg + 8 * (e >> 1), c = c0 + 8 * (pn + ni) + 2 * ft + (e & 1);
          if (i >= n || c >= dv + dk) continue;
          const size_t row = static_cast<size_t>(t0 + i) * hv_row + h;
          if (c < dv) s.U[row * dv + c] = d[ni][e];
          else s.W[row * dk + (c - dv)] = tf32_round(d[ni][e]);
        }
      continue;
    }
    // The Hopper scan's images: the block through R_s, then 4 columns a thread (v_dim and
    // k_dim are multiples of 8, so 4 columns are all U or all W, and in one v block).
    __syncthreads();  // every warp's reads of R_s (the right-hand side) done
#pragma unroll
    for (int ni = 0; ni < kPrepTN; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        R_s[(16 * pa + fg + 8 * (e >> 1)) * kPrepRS + 8 * (pn + ni) + 2 * ft + (e & 1)] = d[ni][e];
    __syncthreads();
    const int ue = gdn_ue_floats(s.vb);
    float* uimg = s.Uimg + (static_cast<size_t>(it.chunk) * p.num_v_heads + h) * p.blocks * ue;
    for (int e = tid; e < n * (kPrepCols / 4); e += kThreads) {
      const int i = e / (kPrepCols / 4), cl = 4 * (e % (kPrepCols / 4)), c = c0 + cl;
      if (c >= dv + dk) continue;
      const float4 x = *reinterpret_cast<const float4*>(R_s + i * kPrepRS + cl);
      if (c < dv) {
        *reinterpret_cast<float4*>(uimg + (c / s.vb) * ue + i * s.vb + c % s.vb) = x;
      } else {
        const int kc = c - dv;
        s.Wimg[wimg + gdn_image_index(kC, i, kc)] = tf32_round(x.x);
        s.Wimg[wimg + gdn_image_index(kC, i, kc + 1)] = tf32_round(x.y);
        s.Wimg[wimg + gdn_image_index(kC, i, kc + 2)] = tf32_round(x.z);
        s.Wimg[wimg + gdn_image_index(kC, i, kc + 3)] = tf32_round(x.w);
      }
    }
  }
}

// ---- 2. scan: per (stream, v head, v block of VB rows), on tf32 mma.sync, the
// fp32 state in mma accumulator registers for the whole stream (as gdn_chunked.cu's
// P4) and a tf32 copy in shared memory for W S^T and Q S^T. Per chunk:
//   Delta = U - W tf32(S)^T (m tokens, n v rows, k k_dim), over U (shared and global);
//   P = Q tf32(S)^T, the outputs' term of the state entering the chunk (global);
//   S = e^{G_last} S + (tf32(e^{G_last-G} Delta))^T K (m v rows, n k_dim, k tokens).
// The next chunk's W, K, U (already tf32 / fp32 in the workspace) are copied a chunk
// ahead by cp.async into the other of two buffers, its Q once this chunk's P is done;
// warp 0 keeps its G in a register.
template <int KP, int VB>
struct ScanSmem {
  static constexpr int WS = KP + 4;   // W, S: [m][k] A and [n][k] B fragments (4 mod 32)
  static constexpr int KSS = KP + 8;  // K: [k][n] B fragments, read down a column (8 mod 32)
  static constexpr int US = VB + 8;   // U / Delta: read down a column for P4's A (t US + g: 32 banks)
  static constexpr int S = 0;                  // [VB][WS] tf32(S)
  static constexpr int W = S + VB * WS;        // 2 x [C][WS]
  static constexpr int K = W + 2 * kC * WS;    // 2 x [C][KSS]
  static constexpr int U = K + 2 * kC * KSS;   // 2 x [C][US]
  static constexpr int Q = U + 2 * kC * US;    // [C][WS] tf32 q (one buffer: refilled after P)
  static constexpr int E = Q + kC * WS;        // 2 x [C] e^{G_last - G_j}
  static constexpr int GL = E + 2 * kC;        // 2 x e^{G_last} (padded to 4)
  static constexpr int total = GL + 4;
  static constexpr size_t bytes = sizeof(float) * total;
};

template <int KP, int VB>
__global__ void __launch_bounds__(kThreads, 2) gdn_split_scan(SplitParams s) {
  using namespace detail;
  using L = ScanSmem<KP, VB>;
  using SG = WarpGrid<VB / 16, KP / 8>;  // the state's tiles
  constexpr int WS = L::WS, KSS = L::KSS, US = L::US;
  constexpr int DT = 2 * (VB / 8);  // 16 x 8 tiles of Delta and of P (2 token tiles x VB / 8 v tiles)
  constexpr bool kHalves = DT == 4;   // VB 16: warps 0-3 Delta, 4-7 P; VB 32: each warp both
  static_assert((DT == 4 || DT == 8) && KP % 32 == 0, "tile shapes");
  const GdnParams& p = s.p;
  const int dk = p.k_dim, dv = p.v_dim;
  GdnCtaHead head;
  if (!gdn_cta_head(p, head)) return;
  const int h = head.h, vblk = head.vb, kh = head.kh;
  const StreamRows sr = head.sr;
  const int v0 = vblk * VB, vn = min(VB, dv - v0);  // vn: a multiple of 8
  extern __shared__ __align__(16) float sm[];
  float* S_s = sm + L::S;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, fg = lane >> 2, ft = lane & 3;
  float* S_g = head.S_g;

  // The state: this warp's SG::TM x SG::TN tiles of [VB][KP], fp32 (zero past vn, dk).
  const int sm0 = (warp / SG::WN) * SG::TM, sn0 = (warp % SG::WN) * SG::TN;
  float Sr[SG::TM][SG::TN][4];
  gdn_state_load(Sr, S_g, v0, vn, dk, S_s, WS, sm0, sn0, fg, ft);

  // Starts the copies of the chunk at row c0 into buffer `buf` (zeros past the
  // stream's end, k_dim and vn); warp 0 loads its G (lane = token; prep wrote G).
  float g_next = 0.f;
  auto fetch = [&](int c0, int buf) {
    const int n = min(kC, sr.end - c0);
    float* W_b = sm + L::W + buf * kC * WS;
    float* K_b = sm + L::K + buf * kC * KSS;
    float* U_b = sm + L::U + buf * kC * US;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    constexpr int KL = KP / 4, UL = VB / 4;  // 16-byte pieces per row
    for (int idx = tid; idx < kC * KL; idx += kThreads) {
      const int i = idx / KL, c = 4 * (idx % KL);
      if (i < n && c < dk) {
        const size_t t = static_cast<size_t>(c0 + i);
        cp_async16(smem_u32(W_b + i * WS + c), s.W + (t * p.num_v_heads + h) * dk + c);
        cp_async16(smem_u32(K_b + i * KSS + c), s.Kn + (t * p.num_k_heads + kh) * dk + c);
      } else {
        *reinterpret_cast<float4*>(W_b + i * WS + c) = zero;
        *reinterpret_cast<float4*>(K_b + i * KSS + c) = zero;
      }
    }
    for (int idx = tid; idx < kC * UL; idx += kThreads) {
      const int i = idx / UL, v = 4 * (idx % UL);
      if (i < n && v < vn)
        cp_async16(smem_u32(U_b + i * US + v),
                   s.U + (static_cast<size_t>(c0 + i) * p.num_v_heads + h) * dv + v0 + v);
      else
        *reinterpret_cast<float4*>(U_b + i * US + v) = zero;
    }
    cp_async_commit();
    if (warp == 0) g_next = lane < n ? s.G[static_cast<size_t>(c0 + lane) * p.num_v_heads + h] : 0.f;
  };
  // The chunk's tf32 q into Q_s (one buffer: called once P's reads of it are done).
  float* Q_s = sm + L::Q;
  auto fetch_q = [&](int c0) {
    const int n = min(kC, sr.end - c0);
    constexpr int KL = KP / 4;
    for (int idx = tid; idx < kC * KL; idx += kThreads) {
      const int i = idx / KL, c = 4 * (idx % KL);
      if (i < n && c < dk)
        cp_async16(smem_u32(Q_s + i * WS + c), s.Qn + (static_cast<size_t>(c0 + i) * p.num_k_heads + kh) * dk + c);
      else
        *reinterpret_cast<float4*>(Q_s + i * WS + c) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    cp_async_commit();
  };

  if (sr.begin < sr.end) {
    fetch(sr.begin, 0);
    fetch_q(sr.begin);
  }
  int buf = 0;
  for (int t0 = sr.begin; t0 < sr.end; t0 += kC, buf ^= 1) {
    const int n = min(kC, sr.end - t0);
    float* W_b = sm + L::W + buf * kC * WS;
    float* K_b = sm + L::K + buf * kC * KSS;
    float* U_b = sm + L::U + buf * kC * US;
    float* E_b = sm + L::E + buf * kC;
    if (warp == 0) {  // this buffer's E was last read two chunks ago, before the last barrier
      const float G_last = __shfl_sync(0xffffffffu, g_next, n - 1);
      E_b[lane] = expf(G_last - (lane < n ? g_next : G_last));
      if (lane == 0) sm[L::GL + buf] = expf(G_last);
    }
    cp_async_wait<0>();
    __syncthreads();  // this chunk's W, K, U, E and S_s visible; the other buffer's reads done
    if (t0 + kC < sr.end) fetch(t0 + kC, buf ^ 1);  // in flight during this chunk

    // Delta = U - W tf32(S)^T and P = Q tf32(S)^T (the outputs' inter-chunk term, with S
    // the state entering this chunk), tile (token tile tl % 2, v tile tl / 2); two
    // accumulator chains over k (even / odd steps) for latency.
    {
      const int tl = kHalves ? (warp & 3) : warp, mt = tl & 1, nt = tl >> 1;
      const bool do_d = !kHalves || warp < 4, do_p = !kHalves || warp >= 4;  // warp-uniform
      float ad[2][4], ap[2][4];
#pragma unroll
      for (int e = 0; e < 4; ++e) ad[0][e] = ad[1][e] = ap[0][e] = ap[1][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < KP; kk += 8) {
        uint32_t bs[2];
        load_b_nk(bs, S_s + 8 * nt * WS + kk, WS, fg, ft);
        if (do_d) {
          uint32_t a[4];
          load_a_mk(a, W_b + 16 * mt * WS + kk, WS, fg, ft);
          mma_tf32(ad[(kk / 8) & 1], a, bs);
        }
        if (do_p) {
          uint32_t a[4];
          load_a_mk(a, Q_s + 16 * mt * WS + kk, WS, fg, ft);
          mma_tf32(ap[(kk / 8) & 1], a, bs);
        }
      }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int i = 16 * mt + fg + 8 * hr, v = 8 * nt + 2 * ft;
        const size_t row = (static_cast<size_t>(t0 + i) * p.num_v_heads + h) * dv + v0 + v;
        if (do_d) {
          float2* u = reinterpret_cast<float2*>(U_b + i * US + v);
          const float2 d = make_float2(u->x - (ad[0][2 * hr] + ad[1][2 * hr]),
                                       u->y - (ad[0][2 * hr + 1] + ad[1][2 * hr + 1]));
          *u = d;
          if (i < n && v < vn) *reinterpret_cast<float2*>(s.U + row) = d;
        }
        if (do_p && i < n && v < vn)
          *reinterpret_cast<float2*>(s.P + row) =
              make_float2(ap[0][2 * hr] + ap[1][2 * hr], ap[0][2 * hr + 1] + ap[1][2 * hr + 1]);
      }
    }
    __syncthreads();  // Delta complete in U_b; every read of S_s and Q_s done
    if (t0 + kC < sr.end) fetch_q(t0 + kC);  // lands before the next chunk's first barrier

    // S = e^{G_last} S + (tf32(E Delta))^T K
    gdn_state_update<SG::TM, SG::TN, kC>(Sr, sm[L::GL + buf], E_b, U_b, US, K_b, KSS, S_s, WS, sm0, sn0, fg, ft);
  }

  gdn_state_store(Sr, S_g, v0, vn, dk, sm0, sn0, fg, ft);
}

// ---- 3. out: per (chunk, v head), on tf32 mma.sync. Shared: Q, K [C][KS] tf32,
// M [C][CS] tf32, then per block of 32 v rows tf32(Delta) [C][DS]. Warp w owns the
// 16 x 8 output tile (tokens 16 (w / 4).., v 8 (w % 4)..): o = e^{G_i} P + M Delta
// (P = Q tf32(S_c)^T from the scan; M Delta: mma over the tokens j <= i).
constexpr int kOutV = 32;
constexpr int kOutDS = kOutV + 8;  // Delta's stride: 8 mod 32 (B fragments read down a column)
__global__ void __launch_bounds__(kThreads) gdn_split_out(SplitParams s) {
  using namespace detail;
  const GdnParams& p = s.p;
  const int item = blockIdx.x, h = blockIdx.y;
  GdnChunkCta cc;
  if (!gdn_chunk_cta(p, s.list, kC, cc, item)) return;
  const GdnChunkItem it = cc.it;
  const int t0 = it.t0, n = cc.n;
  const int dk = p.k_dim, dv = p.v_dim, KS = ks_of(dk), dk4 = dk / 4;
  const int kh = h / (p.num_v_heads / p.num_k_heads);
  extern __shared__ __align__(16) float sm[];
  float* Q_s = sm;                  // [C][KS]
  float* K_s = Q_s + kC * KS;       // [C][KS]
  float* M_s = K_s + kC * KS;       // [C][CS]
  float* D_s = M_s + kC * kCS;      // [C][DS]
  float* G_s = D_s + kC * kOutDS;   // [C]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, fg = lane >> 2, ft = lane & 3;
  const float4 zero4 = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int e = tid; e < kC * dk4; e += kThreads) {  // Qn, Kn rows are 16-byte aligned (dk % 8 == 0)
    const int i = e / dk4, c = 4 * (e % dk4);
    const size_t rk = (static_cast<size_t>(t0 + i) * p.num_k_heads + kh) * dk + c;
    *reinterpret_cast<float4*>(&Q_s[i * KS + c]) = i < n ? *reinterpret_cast<const float4*>(s.Qn + rk) : zero4;
    *reinterpret_cast<float4*>(&K_s[i * KS + c]) = i < n ? *reinterpret_cast<const float4*>(s.Kn + rk) : zero4;
  }
  if (tid < kC) G_s[tid] = tid < n ? s.G[static_cast<size_t>(t0 + tid) * p.num_v_heads + h] : 0.f;
  __syncthreads();
  {  // M_ij = tf32(e^{G_i-G_j} q_i.k_j), j <= i (zero above the diagonal; no exp there)
    float acc[4];
    chunk_xyt(acc, Q_s, K_s, KS, dk, warp, fg, ft);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 16 * (warp >> 2) + fg + 8 * (e >> 1), j = 8 * (warp & 3) + 2 * ft + (e & 1);
      M_s[i * kCS + j] = j <= i && i < n ? tf32_round(expf(G_s[i] - G_s[j]) * acc[e]) : 0.f;
    }
  }
  const size_t out_stride = static_cast<size_t>(p.num_v_heads) * dv;
  const int pa = warp >> 2, pn = warp & 3;  // this warp's token tile, v tile
  for (int vb0 = 0; vb0 < dv; vb0 += kOutV) {
    const int vn = min(kOutV, dv - vb0);  // a multiple of 8
    __syncthreads();  // M_s written; the previous block's D_s reads done
    for (int e = tid; e < kC * (kOutV / 4); e += kThreads) {
      const int i = e / (kOutV / 4), v = 4 * (e % (kOutV / 4));
      float4 x = zero4;
      if (i < n && v < vn) {
        x = *reinterpret_cast<const float4*>(s.U + (static_cast<size_t>(t0 + i) * p.num_v_heads + h) * dv + vb0 + v);
        x = make_float4(tf32_round(x.x), tf32_round(x.y), tf32_round(x.z), tf32_round(x.w));
      }
      *reinterpret_cast<float4*>(&D_s[i * kOutDS + v]) = x;
    }
    __syncthreads();
    if (8 * pn >= vn) continue;  // warp-uniform: this v tile is past v_dim
    float o[4];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = 16 * pa + fg + 8 * hr, v = 8 * pn + 2 * ft;
      float2 x = make_float2(0.f, 0.f);
      if (i < n)
        x = *reinterpret_cast<const float2*>(s.P + (static_cast<size_t>(t0 + i) * p.num_v_heads + h) * dv + vb0 + v);
      const float gm = expf(G_s[i]);
      o[2 * hr] = gm * x.x;
      o[2 * hr + 1] = gm * x.y;
    }
#pragma unroll
    for (int kk = 0; kk < kC; kk += 8) {
      if (kk >= 16 * (pa + 1)) break;  // above the diagonal: M is zero there
      uint32_t a[4], b[2];
      load_a_mk(a, M_s + 16 * pa * kCS + kk, kCS, fg, ft);
      load_b_kn(b, D_s + kk * kOutDS + 8 * pn, kOutDS, fg, ft);
      mma_tf32(o, a, b);
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = 16 * pa + fg + 8 * hr, v = 8 * pn + 2 * ft;
      if (i < n)
        *reinterpret_cast<uint32_t*>(p.out + static_cast<size_t>(t0 + i) * out_stride + static_cast<size_t>(h) * dv +
                                     vb0 + v) = pack2(o[2 * hr] * p.inv_sqrt_dk, o[2 * hr + 1] * p.inv_sqrt_dk);
    }
  }
}

size_t prep_smem(int dk) { return sizeof(float) * (2 * kC * ks_of(dk) + 2 * kC * kCS + kC * kPrepRS + 2 * kC); }
size_t out_smem(int dk) {
  return sizeof(float) * (2 * kC * ks_of(dk) + kC * kCS + kC * kOutDS + kC);
}

#include "kernels/gdn_split_scan_st.cuh"

// One scan kernel's launch, its dynamic shared memory allowed on the first call.
template <auto Kernel, int Threads, size_t Smem>
cudaError_t launch_scan_kernel(cudaStream_t stream, unsigned grid, const SplitParams& s) {
  static bool configured = false;
  if (!configured) {
    const cudaError_t e = detail::allow_smem(Kernel, Smem);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  Kernel<<<grid, Threads, Smem, stream>>>(s);
  return cudaGetLastError();
}
template <int KP, int N>
cudaError_t launch_scan_st(cudaStream_t stream, unsigned grid, const SplitParams& s) {
  using T = GdnScanStTraits<KP, N>;
  return launch_scan_kernel<gdn_split_scan_st<KP, N>, T::kThreads, T::kSmem>(stream, grid, s);
}
template <int KP>
cudaError_t launch_scan_st(cudaStream_t stream, unsigned grid, const SplitParams& s, int vb) {
  return vb == 8 ? launch_scan_st<KP, 8>(stream, grid, s) : vb == 16 ? launch_scan_st<KP, 16>(stream, grid, s)
         : vb == 32 ? launch_scan_st<KP, 32>(stream, grid, s) : launch_scan_st<KP, 64>(stream, grid, s);
}
// The Hopper scan's v block: the narrowest whose CTAs are all resident at once (one an SM),
// since then the chain of chunks, not the throughput, sets the time and a narrower block
// walks a shorter step; 64 when even that width gives more CTAs than SMs.
int scan_st_block(long long heads, int dv) {
  for (int vb : kScanStBlocks)
    if (heads * ((dv + vb - 1) / vb) <= detail::sm_count()) return vb;
  return 64;
}
template <int KP, int VB>
cudaError_t launch_scan(cudaStream_t stream, unsigned grid, const SplitParams& s) {
  return launch_scan_kernel<gdn_split_scan<KP, VB>, kThreads, ScanSmem<KP, VB>::bytes>(stream, grid, s);
}

}  // namespace

GdnSplitLayout gdn_split_layout(const LayerShape& shape, uint32_t total_tokens, uint32_t batch_size) {
  GdnSplitLayout l;
  const uint64_t T = total_tokens, Hv = shape.num_v_heads, Hk = shape.num_k_heads;
  const uint64_t dk = shape.k_dim, dv = shape.v_dim;
  l.list = gdn_chunk_list_layout(total_tokens, batch_size);
  l.G = l.list.bytes;
  l.W = l.G + gdn_round256(T * Hv * 4);
  const bool wg = gdn_split_scan_wg_runs(shape);  // its images replace W
  l.U = l.W + (wg ? 0 : gdn_round256(T * Hv * dk * 4));
  l.Kn = l.U + gdn_round256(T * Hv * dv * 4);
  l.Qn = l.Kn + gdn_round256(T * Hk * dk * 4);
  l.P = l.Qn + gdn_round256(T * Hk * dk * 4);
  l.bytes = l.P + gdn_round256(T * Hv * dv * 4);
  if (wg) {  // images per chunk index: W per v head, Q and K^T per k head, U | E per (v head, v block)
    const uint64_t img = uint64_t(kGdnChunk) * gdn_kp_of(shape.k_dim) * 4, C = l.list.max_chunks;
    l.Wimg = gdn_round256(l.bytes);
    l.Qimg = l.Wimg + gdn_round256(C * Hv * img);
    l.Ktimg = l.Qimg + gdn_round256(C * Hk * img);
    // U | E at the largest size any v block width the scan may take gives
    uint64_t ue = 0;
    for (const int vb : kScanStBlocks) ue = std::max<uint64_t>(ue, ((dv + vb - 1) / vb) * uint64_t(gdn_ue_floats(vb)));
    l.Uimg = l.Ktimg + gdn_round256(C * Hk * img);
    l.bytes = l.Uimg + gdn_round256(C * Hv * ue * 4);
  }
  return l;
}

bool gdn_split_scan_wg_runs(const LayerShape& shape) { return gdn_split_supports(shape) && wgmma_available(); }

bool gdn_split_supports(const LayerShape& shape) {
  return shape.num_k_heads > 0 && shape.num_v_heads > 0 && shape.num_v_heads % shape.num_k_heads == 0 &&
         shape.k_dim > 0 && shape.k_dim % 8 == 0 && shape.k_dim <= 128 && shape.v_dim > 0 &&
         shape.v_dim % 8 == 0;
}

cudaError_t launch_gdn_split(cudaStream_t stream, const GdnArgs& args, uint64_t scratch) {
  const LayerShape& shape = args.shape;
  if (!gdn_split_supports(shape)) return cudaErrorInvalidValue;
  if (args.batch_size == 0) return cudaSuccess;
  const GdnSplitLayout l = gdn_split_layout(shape, args.total_tokens, args.batch_size);
  SplitParams s;
  s.p = gdn_params(args);
  s.list = gdn_chunk_list_view(scratch, l.list);
  s.G = reinterpret_cast<float*>(scratch + l.G);
  s.W = reinterpret_cast<float*>(scratch + l.W);
  s.U = reinterpret_cast<float*>(scratch + l.U);
  s.Kn = reinterpret_cast<float*>(scratch + l.Kn);
  s.Qn = reinterpret_cast<float*>(scratch + l.Qn);
  s.P = reinterpret_cast<float*>(scratch + l.P);
  const bool wg = gdn_split_scan_wg_runs(shape);
  s.Wimg = wg ? reinterpret_cast<float*>(scratch + l.Wimg) : nullptr;
  s.Qimg = wg ? reinterpret_cast<float*>(scratch + l.Qimg) : nullptr;
  s.Ktimg = wg ? reinterpret_cast<float*>(scratch + l.Ktimg) : nullptr;
  s.Uimg = wg ? reinterpret_cast<float*>(scratch + l.Uimg) : nullptr;
  const int kp = s.kp = gdn_kp_of(shape.k_dim);
  // The scan's v block: the Hopper scan's by scan_st_block; the mma.sync scan's 32 rows
  // when that still gives two CTAs per SM, else 16 (the chain of chunks, not the
  // throughput, then sets the time); 32 at k_dim <= 32 (16 x 32 has too few state tiles
  // for 8 warps).
  const long long heads = static_cast<long long>(args.batch_size) * shape.num_v_heads;
  const bool wide = kp == 32 || heads * ((shape.v_dim + 31) / 32) >= 2LL * detail::sm_count();
  const int vb = wg ? scan_st_block(heads, shape.v_dim) : wide ? 32 : 16;
  s.p.blocks = (shape.v_dim + vb - 1) / vb;
  s.vb = vb;
  const size_t b1 = prep_smem(shape.k_dim), b3 = out_smem(shape.k_dim);
  static bool configured = false;  // once, at the largest sizes (k_dim 128)
  if (!configured) {
    cudaError_t e = detail::allow_smem(gdn_split_prep, prep_smem(128));
    if (e == cudaSuccess) e = detail::allow_smem(gdn_split_out, out_smem(128));
    if (e != cudaSuccess) return e;
    configured = true;
  }
  const long long scan_ctas = heads * s.p.blocks;
  if (scan_ctas > 0x7fffffffLL || l.list.max_chunks > 0x7fffffffu || shape.num_v_heads > 65535) return cudaErrorInvalidValue;
  if (l.list.max_chunks == 0) return cudaSuccess;
  const dim3 par(l.list.max_chunks, shape.num_v_heads);
  gdn_split_prep<<<par, kThreads, b1, stream>>>(s);
  cudaError_t e = cudaSuccess;
  const unsigned grid = static_cast<unsigned>(scan_ctas);
  if (wg) e = kp == 32 ? launch_scan_st<32>(stream, grid, s, vb) : kp == 64 ? launch_scan_st<64>(stream, grid, s, vb)
                                                               : launch_scan_st<128>(stream, grid, s, vb);
  else if (kp == 32) e = launch_scan<32, 32>(stream, grid, s);
  else if (kp == 64) e = wide ? launch_scan<64, 32>(stream, grid, s) : launch_scan<64, 16>(stream, grid, s);
  else e = wide ? launch_scan<128, 32>(stream, grid, s) : launch_scan<128, 16>(stream, grid, s);
  if (e != cudaSuccess) return e;
  gdn_split_out<<<par, kThreads, b3, stream>>>(s);
  return cudaGetLastError();
}

}  // namespace pb::kernels
