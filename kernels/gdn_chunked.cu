// gdn_chunked.cu: the gated delta rule in chunks of kC tokens (the WY / UT
// form of flash-linear-attention's chunk_gated_delta_rule), with the chunk's
// matrix products on tensor cores (tf32 mma.sync m16n8k8, fp32 accumulators).
// A CTA owns one (stream, v head, block of VB rows of S) and walks the
// stream's chunks in order. Per chunk, with G_i = sum_{j<=i} g_j inside the
// chunk and S0 the state before it:
//   A_ij = beta_i e^{G_i-G_j} k_i.k_j (j < i), R_i = beta_i (v_i - e^{G_i} S0 k_i),
//   (I + A) Delta = R (forward substitution: Delta_i = the token rule's delta),
//   o_i = (e^{G_i} S0 q_i + sum_{j<=i} e^{G_i-G_j} (q_i.k_j) Delta_j) / sqrt(dk),
//   S = e^{G_last} S0 + sum_j e^{G_last-G_j} Delta_j k_j^T.
// The products (tensor cores): P1 [K;Q] S0^T -> R, e^G S0 q; P2 [K;Q] K^T -> A,
// the masked q.k; P3 o += (masked q.k) Delta; P4 S += (e^{G_last-G} Delta)^T K.
// The substitution and every scale, exp and sum stay in fp32.
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
#include "kernels/gdn_params.cuh"
#include "kernels/gdn_state_update.cuh"
#include "kernels/mma_tf32.cuh"

namespace pb::kernels {

namespace {

using namespace detail;  // mma_tf32.cuh

constexpr int kC = 32;         // tokens per chunk: one warp's lanes (the g scan is a warp scan)
constexpr int kThreads = 256;  // 8 warps


// Shared memory layout (floats). Strides: KS and CS are 4 (mod 32), so that
// fragments read along a row ([m][k] A, [n][k] B) hit 32 distinct banks; VS
// is 8 (mod 32), for fragments read down a column ([k][n] B, [k][m] A).
template <int KP, int VB>
struct ChunkSmem {
  static constexpr int KS = KP + 4, VS = VB + 8, CS = kC + 4;
  static constexpr int S = 0;                 // [VB][KS] S0, tf32 (the fp32 master is in registers)
  static constexpr int KQ = S + VB * KS;      // [2C][KS] rows 0..C-1 normalised k, C..2C-1 q (tf32)
  static constexpr int D = KQ + 2 * kC * KS;  // [C][VS] v, then R, then Delta (fp32)
  static constexpr int A = D + kC * VS;       // [C][CS] A, strictly lower (fp32)
  static constexpr int M = A + kC * CS;       // [C][CS] e^{G_i-G_j} q_i.k_j, j <= i (tf32)
  static constexpr int Gm = M + kC * CS;      // [C] e^{G_i}
  static constexpr int Bt = Gm + kC;          // [C] beta
  static constexpr int E = Bt + kC;           // [C] e^{G_last - G_j}
  static constexpr int Gr = E + kC;           // [C] G_i
  static constexpr int Raw = Gr + kC;         // the next chunk's raw bf16 q | k | v (ChunkRaw)
  static constexpr int total = Raw + (2 * kC * KP + kC * VB) / 2;
  static constexpr size_t bytes = sizeof(float) * total;
};

// One chunk's raw inputs in shared memory, copied a chunk ahead by cp.async
// (16-byte pieces of 8 bf16): q [C][KP], k [C][KP], v [C][VB], unpadded.
template <int KP, int VB>
struct ChunkRaw {
  static constexpr int QL = KP / 8, QN = kC * QL, QU = (QN + kThreads - 1) / kThreads;  // q (and k) pieces
  static constexpr int VL = VB / 8, VN = kC * VL, VU = (VN + kThreads - 1) / kThreads;  // v pieces
  static_assert(QN % 32 == 0 && VN % 32 == 0, "whole warps per staging slot");
  static constexpr int Q = 0, K = QN, V = 2 * QN;  // in 16-byte pieces
};

template <int KP, int VB>
__global__ void __launch_bounds__(kThreads, 2) gdn_chunked_kernel(GdnParams p) {
  using namespace detail;
  using L = ChunkSmem<KP, VB>;
  using Raw = ChunkRaw<KP, VB>;
  using SG = WarpGrid<VB / 16, KP / 8>;  // P4: the state's tiles
  constexpr int KS = L::KS, VS = L::VS, CS = L::CS;
  constexpr int TN1 = VB / 32;  // P1 / P3: warp (pa, pn) owns token tile pa, v tiles pn..pn+TN1-1
  static_assert(VB % 32 == 0 && KP % 32 == 0, "tile shapes");
  extern __shared__ __align__(16) float sm[];
  float* S_s = sm + L::S;
  float* KQ_s = sm + L::KQ;
  float* D_s = sm + L::D;
  float* A_s = sm + L::A;
  float* M_s = sm + L::M;
  float* Gm_s = sm + L::Gm;
  float* Bt_s = sm + L::Bt;
  float* E_s = sm + L::E;
  float* Gr_s = sm + L::Gr;
  uint4* R_s = reinterpret_cast<uint4*>(sm + L::Raw);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int fg = lane >> 2, ft = lane & 3;  // fragment row group / column
  const int per_stream = p.num_v_heads * p.blocks;
  const int ob = blockIdx.x / per_stream;
  const int rem = blockIdx.x - ob * per_stream;
  const int h = rem / p.blocks;
  const int vb = rem - h * p.blocks;
  const int b = p.order ? p.order[ob] : ob;
  if (b < 0 || b >= p.batch_size) return;
  const int kh = h / (p.num_v_heads / p.num_k_heads);
  const StreamRows sr = stream_rows(p.cu_seqlens, b, p.total_tokens);
  const int v0 = vb * VB;
  const int vn = min(VB, p.v_dim - v0);  // a multiple of 8
  float* S_g = reinterpret_cast<float*>(p.h_state_ptrs[b]) + static_cast<size_t>(h) * p.v_dim * p.k_dim;

  // The state: this warp's SG::TM x SG::TN tiles of [VB][KP], fp32.
  const int sm0 = (warp / SG::WN) * SG::TM, sn0 = (warp % SG::WN) * SG::TN;
  float Sr[SG::TM][SG::TN][4];
  gdn_state_load(Sr, S_g, v0, vn, p.k_dim, S_s, KS, sm0, sn0, fg, ft);

  const size_t q_off = static_cast<size_t>(kh) * p.k_dim;
  const size_t k_off = static_cast<size_t>(p.num_k_heads + kh) * p.k_dim;
  const size_t v_off = static_cast<size_t>(2 * p.num_k_heads) * p.k_dim + static_cast<size_t>(h) * p.v_dim + v0;
  const size_t out_stride = static_cast<size_t>(p.num_v_heads) * p.v_dim;

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
    cp_async_commit();
    if (warp == 0) {  // padded tokens: g = 0, beta = 0 (no effect)
      const bool ok = lane < n;
      const size_t gi = static_cast<size_t>(c0 + (ok ? lane : 0)) * p.num_v_heads + h;
      g_next = ok ? p.g[gi] : 0.f;
      beta_next = ok ? p.beta[gi] : 0.f;
    }
  };

  if (sr.begin < sr.end) fetch(sr.begin);
  cp_async_wait<0>();
  __syncthreads();  // R_s and the S_s copy visible to every thread
  for (int t0 = sr.begin; t0 < sr.end; t0 += kC) {
    const int n = min(kC, sr.end - t0);
    // ---- 1. stage: normalised q, k (tf32), v, the g scan, beta
#pragma unroll
    for (int u = 0; u < Raw::QU; ++u) {
      const int idx = tid + kThreads * u, tt = idx / Raw::QL, col = 8 * (idx % Raw::QL);
      if (idx < Raw::QN) {  // whole warps
        float qf[8], kf[8];
        unpack8(R_s[Raw::Q + idx], qf);
        unpack8(R_s[Raw::K + idx], kf);
        float ssq = 0.f, ssk = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          ssq = fmaf(qf[e], qf[e], ssq);
          ssk = fmaf(kf[e], kf[e], ssk);
        }
#pragma unroll
        for (int off = Raw::QL / 2; off > 0; off >>= 1) {  // the QL lanes of one token
          ssq += __shfl_xor_sync(0xffffffffu, ssq, off);
          ssk += __shfl_xor_sync(0xffffffffu, ssk, off);
        }
        const float iq = 1.f / sqrtf(ssq + 1e-6f), ik = 1.f / sqrtf(ssk + 1e-6f);
        float* kd = &KQ_s[tt * KS + col];
        float* qd = &KQ_s[(kC + tt) * KS + col];
#pragma unroll
        for (int e = 0; e < 8; e += 4) {
          *reinterpret_cast<float4*>(kd + e) = make_float4(tf32_round(kf[e] * ik), tf32_round(kf[e + 1] * ik),
                                                           tf32_round(kf[e + 2] * ik), tf32_round(kf[e + 3] * ik));
          *reinterpret_cast<float4*>(qd + e) = make_float4(tf32_round(qf[e] * iq), tf32_round(qf[e + 1] * iq),
                                                           tf32_round(qf[e + 2] * iq), tf32_round(qf[e + 3] * iq));
        }
      }
    }
#pragma unroll
    for (int u = 0; u < Raw::VU; ++u) {
      const int idx = tid + kThreads * u, tt = idx / Raw::VL, col = 8 * (idx % Raw::VL);
      if (idx < Raw::VN) {
        float vf[8];
        unpack8(R_s[Raw::V + idx], vf);
        *reinterpret_cast<float4*>(&D_s[tt * VS + col]) = make_float4(vf[0], vf[1], vf[2], vf[3]);
        *reinterpret_cast<float4*>(&D_s[tt * VS + col + 4]) = make_float4(vf[4], vf[5], vf[6], vf[7]);
      }
    }
    if (warp == 0) {
      float G = g_next;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, G, off);
        if (lane >= off) G += y;
      }
      const float G_last = __shfl_sync(0xffffffffu, G, 31);
      Gr_s[lane] = G;
      Gm_s[lane] = expf(G);
      E_s[lane] = expf(G_last - G);
      Bt_s[lane] = beta_next;
    }
    __syncthreads();
    if (t0 + kC < sr.end) fetch(t0 + kC);  // in flight during this chunk's products

    // ---- 2. P1: [K; Q] S0^T and P2: [K; Q] K^T in one pass over k_dim (m = tokens;
    // n = v rows for P1, k tokens j for P2). Warp (pa, pn): the k rows and the q
    // rows of token tile pa against P1's v tiles pn.. and P2's j tile jt, so each
    // A fragment feeds both products, and the q part of P1 (o) stays in this
    // warp's registers for P3.
    const int pa = warp >> 2, pn = (warp & 3) * TN1, jt = warp & 3;
    float o[TN1][4];
    {
      float r[TN1][4];
      float ak2[4], aq2[4];  // P2: k rows . k_j, q rows . k_j
#pragma unroll
      for (int ni = 0; ni < TN1; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) r[ni][e] = o[ni][e] = 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) ak2[e] = aq2[e] = 0.f;
#pragma unroll 4
      for (int kk = 0; kk < KP; kk += 8) {
        uint32_t ak[4], aq[4], bk[2];
        load_a_mk(ak, KQ_s + 16 * pa * KS + kk, KS, fg, ft);
        load_a_mk(aq, KQ_s + (kC + 16 * pa) * KS + kk, KS, fg, ft);
        load_b_nk(bk, KQ_s + 8 * jt * KS + kk, KS, fg, ft);
        mma_tf32(ak2, ak, bk);
        mma_tf32(aq2, aq, bk);
#pragma unroll
        for (int ni = 0; ni < TN1; ++ni) {
          uint32_t bs[2];
          load_b_nk(bs, S_s + 8 * (pn + ni) * KS + kk, KS, fg, ft);
          mma_tf32(r[ni], ak, bs);
          mma_tf32(o[ni], aq, bs);
        }
      }
      // R = beta (v - e^G S0 k) over v in D_s; o = e^G S0 q
#pragma unroll
      for (int ni = 0; ni < TN1; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 16 * pa + fg + 8 * (e >> 1), v = 8 * (pn + ni) + 2 * ft + (e & 1);
          const float gm = Gm_s[i];
          D_s[i * VS + v] = Bt_s[i] * (D_s[i * VS + v] - gm * r[ni][e]);
          o[ni][e] *= gm;
        }
      // A (k rows, strictly lower, beta-scaled) and M (q rows, j <= i, tf32), decayed
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 16 * pa + fg + 8 * (e >> 1), j = 8 * jt + 2 * ft + (e & 1);
        const float dec = j <= i ? expf(Gr_s[i] - Gr_s[j]) : 0.f;
        A_s[i * CS + j] = j < i ? Bt_s[i] * dec * ak2[e] : 0.f;
        M_s[i * CS + j] = tf32_round(dec * aq2[e]);
      }
    }
    __syncthreads();

    // ---- 3. (I + A) Delta = R by forward substitution, a column per TPC lanes (fp32)
    {
      constexpr int TPC = kThreads / VB;  // lanes per column (4 or 8)
      constexpr int RPT = kC / TPC;       // rows per lane: i = sub + TPC r
      static_assert(32 % TPC == 0 && kC % TPC == 0, "substitution mapping");
      const int col = tid / TPC, sub = tid % TPC;
      float d[RPT];
#pragma unroll
      for (int r = 0; r < RPT; ++r) d[r] = D_s[(sub + TPC * r) * VS + col];
#pragma unroll
      for (int j = 0; j < kC - 1; ++j) {
        const float dj = __shfl_sync(0xffffffffu, d[j / TPC], (lane & ~(TPC - 1)) | (j % TPC));
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
          const int i = sub + TPC * r;
          if (i > j) d[r] = fmaf(-A_s[i * CS + j], dj, d[r]);
        }
      }
#pragma unroll
      for (int r = 0; r < RPT; ++r) D_s[(sub + TPC * r) * VS + col] = d[r];
    }
    __syncthreads();

    // ---- 4a. P3: o += (masked q.k) Delta (m = tokens of tile pa, n = v, k = tokens j <= 16 pa + 15)
#pragma unroll
    for (int kk = 0; kk < kC; kk += 8) {
      if (kk >= 16 * (pa + 1)) break;  // above the diagonal: M is zero there
      uint32_t a[4];
      load_a_mk(a, M_s + 16 * pa * CS + kk, CS, fg, ft);
#pragma unroll
      for (int ni = 0; ni < TN1; ++ni) {
        const float* X = D_s + kk * VS + 8 * (pn + ni);
        const uint32_t bd[2] = {tf32_bits(X[ft * VS + fg]), tf32_bits(X[(ft + 4) * VS + fg])};
        mma_tf32(o[ni], a, bd);
      }
    }
#pragma unroll
    for (int ni = 0; ni < TN1; ++ni)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int i = 16 * pa + fg + 8 * hr, v = 8 * (pn + ni) + 2 * ft;
        if (i < n && v < vn)
          *reinterpret_cast<uint32_t*>(p.out + static_cast<size_t>(t0 + i) * out_stride +
                                       static_cast<size_t>(h) * p.v_dim + v0 + v) =
              pack2(o[ni][2 * hr] * p.inv_sqrt_dk, o[ni][2 * hr + 1] * p.inv_sqrt_dk);
      }

    // ---- 4b. P4: S = e^{G_last} S0 + (e^{G_last-G} Delta)^T K (m = v rows, n = k_dim, k = tokens)
    gdn_state_update<SG::TM, SG::TN, kC>(Sr, Gm_s[kC - 1], E_s, D_s, VS, KQ_s, KS, S_s, KS, sm0, sn0, fg, ft);
    cp_async_wait<0>();
    __syncthreads();  // the next chunk's staging overwrites KQ_s and D_s, and reads R_s
  }

  gdn_state_store(Sr, S_g, v0, vn, p.k_dim, sm0, sn0, fg, ft);
}

template <int KP, int VB>
cudaError_t launch_variant(cudaStream_t stream, GdnParams p) {
  using L = ChunkSmem<KP, VB>;
  static bool configured = false;
  if (!configured) {
    const cudaError_t e = cudaFuncSetAttribute(gdn_chunked_kernel<KP, VB>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(L::bytes));
    if (e != cudaSuccess) return e;
    configured = true;
  }
  p.blocks = (p.v_dim + VB - 1) / VB;
  const long long ctas = static_cast<long long>(p.batch_size) * p.num_v_heads * p.blocks;
  if (ctas > 0x7fffffffLL) return cudaErrorInvalidValue;
  gdn_chunked_kernel<KP, VB><<<static_cast<unsigned>(ctas), kThreads, L::bytes, stream>>>(p);
  return cudaGetLastError();
}

// v blocks of 64 rows, or of 32 when 64-row CTAs would not fill the GPU's two
// resident CTAs per SM (then the chain of chunks, not the throughput, sets the
// time, and a 32-row CTA walks each chunk faster).
template <int KP>
cudaError_t launch_k(cudaStream_t stream, const GdnParams& p) {
  const long long ctas64 = static_cast<long long>(p.batch_size) * p.num_v_heads * ((p.v_dim + 63) / 64);
  if (p.v_dim <= 32 || ctas64 < 2LL * detail::sm_count()) return launch_variant<KP, 32>(stream, p);
  return launch_variant<KP, 64>(stream, p);
}

}  // namespace

bool gdn_chunked_supports(const LayerShape& shape) {
  return shape.num_k_heads > 0 && shape.num_v_heads > 0 && shape.num_v_heads % shape.num_k_heads == 0 &&
         shape.k_dim > 0 && shape.k_dim % 8 == 0 && shape.k_dim <= 128 && shape.v_dim > 0 &&
         shape.v_dim % 8 == 0;
}

cudaError_t launch_gdn_chunked(cudaStream_t stream, const GdnArgs& args) {
  const LayerShape& shape = args.shape;
  if (!gdn_chunked_supports(shape)) return cudaErrorInvalidValue;
  if (args.batch_size == 0) return cudaSuccess;
  GdnParams p = gdn_params(args);
  if (shape.k_dim <= 32) return launch_k<32>(stream, p);
  if (shape.k_dim <= 64) return launch_k<64>(stream, p);
  return launch_k<128>(stream, p);
}

}  // namespace pb::kernels
