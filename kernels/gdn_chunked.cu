// gdn_chunked.cu: the gated delta rule in chunks of kC tokens (the WY / UT
// form of flash-linear-attention's chunk_gated_delta_rule), fp32 throughout.
// A CTA owns one (stream, v head, block of VB rows of S) and walks the
// stream's chunks in order, S [VB][k_dim] in shared memory. Per chunk, with
// G_i = sum_{j<=i} g_j inside the chunk and S0 the state before it:
//   A_ij = beta_i e^{G_i-G_j} k_i.k_j (j < i), R_i = beta_i (v_i - e^{G_i} S0 k_i),
//   (I + A) Delta = R (forward substitution: Delta_i = the token rule's delta),
//   o_i = (e^{G_i} S0 q_i + sum_{j<=i} e^{G_i-G_j} (q_i.k_j) Delta_j) / sqrt(dk),
//   S = e^{G_last} S0 + sum_j e^{G_last-G_j} Delta_j k_j^T.
// (Checked against the token recurrence in double before this was written.)
// Rows of S evolve independently, so v blocks split the work across CTAs; each
// recomputes the chunk's k-only products (A, the masked q.k).
// Invariants: S read from / written back to h_state_ptrs[b]; q, k L2-normalised
// with eps 1e-6 inside the sqrt; out rounded to bf16 once.
#include "kernels/gdn_chunked.h"

#include "kernels/common.cuh"

namespace pb::kernels {

namespace {

constexpr int kC = 32;         // tokens per chunk: one warp's lanes (the g scan is a warp scan)
constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;

struct ChunkParams {
  int batch_size, total_tokens;
  int num_k_heads, num_v_heads, k_dim, v_dim, conv_dim;
  int v_blocks;  // CTAs per (stream, v head)
  float inv_sqrt_dk;
  const int32_t* cu_seqlens;
  const uint64_t* h_state_ptrs;
  const int32_t* order;
  const uint16_t* conv_out;
  const float* g;
  const float* beta;
  uint16_t* out;
};

// Shared memory layout (floats). Row strides padded by 4 so float4 rows of
// consecutive rows fall on distinct banks.
template <int KP, int VB>
struct ChunkSmem {
  static constexpr int KS = KP + 4, VS = VB + 4, CS = kC + 1;
  static constexpr int S = 0;              // [VB][KS] state rows
  static constexpr int K = S + VB * KS;    // [C][KS] normalised k
  static constexpr int Q = K + kC * KS;    // [C][KS] normalised q
  static constexpr int D = Q + kC * KS;    // [C][VS] v, then R, then Delta
  static constexpr int O = D + kC * VS;    // [C][VS] e^{G_i} S0 q_i
  static constexpr int A = O + kC * VS;    // [C][CS] A (strictly lower)
  static constexpr int M = A + kC * CS;    // [C][CS] e^{G_i-G_j} q_i.k_j (j <= i)
  static constexpr int Gm = M + kC * CS;   // [C] e^{G_i}
  static constexpr int Bt = Gm + kC;       // [C] beta
  static constexpr int E = Bt + kC;        // [C] e^{G_last - G_j}
  static constexpr int Gr = E + kC;        // [C] G_i
  static constexpr int total = Gr + kC;
  static constexpr size_t bytes = sizeof(float) * total;
};

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  return fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, fmaf(a.w, b.w, acc))));
}

template <int KP, int VB>
__global__ void __launch_bounds__(kThreads, 2) gdn_chunked_kernel(ChunkParams p) {
  using namespace detail;
  using L = ChunkSmem<KP, VB>;
  constexpr int KS = L::KS, VS = L::VS, CS = L::CS;
  extern __shared__ __align__(16) float sm[];
  float* S_s = sm + L::S;
  float* K_s = sm + L::K;
  float* Q_s = sm + L::Q;
  float* D_s = sm + L::D;
  float* O_s = sm + L::O;
  float* A_s = sm + L::A;
  float* M_s = sm + L::M;
  float* Gm_s = sm + L::Gm;
  float* Bt_s = sm + L::Bt;
  float* E_s = sm + L::E;
  float* Gr_s = sm + L::Gr;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per_stream = p.num_v_heads * p.v_blocks;
  const int ob = blockIdx.x / per_stream;
  const int rem = blockIdx.x - ob * per_stream;
  const int h = rem / p.v_blocks;
  const int vb = rem - h * p.v_blocks;
  const int b = p.order ? p.order[ob] : ob;
  if (b < 0 || b >= p.batch_size) return;
  const int kh = h / (p.num_v_heads / p.num_k_heads);
  const StreamRows sr = stream_rows(p.cu_seqlens, b, p.total_tokens);
  const int v0 = vb * VB;
  const int vn = min(VB, p.v_dim - v0);
  float* S_g = reinterpret_cast<float*>(p.h_state_ptrs[b]) + static_cast<size_t>(h) * p.v_dim * p.k_dim;
  constexpr int NK4 = KP / 4;

  for (int idx = tid; idx < VB * NK4; idx += kThreads) {
    const int v = idx / NK4, col = 4 * (idx - (idx / NK4) * NK4);
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    if (v < vn && col < p.k_dim)
      s = *reinterpret_cast<const float4*>(S_g + static_cast<size_t>(v0 + v) * p.k_dim + col);
    *reinterpret_cast<float4*>(&S_s[v * KS + col]) = s;
  }

  const size_t q_off = static_cast<size_t>(kh) * p.k_dim;
  const size_t k_off = static_cast<size_t>(p.num_k_heads + kh) * p.k_dim;
  const size_t v_off = static_cast<size_t>(2 * p.num_k_heads) * p.k_dim + static_cast<size_t>(h) * p.v_dim + v0;
  const size_t out_stride = static_cast<size_t>(p.num_v_heads) * p.v_dim;
  constexpr int TV = VB / 32;  // phases 2a / 4a: rows i = warp + 8r (r < 4), cols v = lane + 32c
  static_assert(kC == 4 * kWarps, "row mapping");

  for (int t0 = sr.begin; t0 < sr.end; t0 += kC) {
    const int n = min(kC, sr.end - t0);
    // ---- 1. stage: normalised q, k (a warp per token), v, the g scan, beta
    // (unrolled by 2: two tokens' global loads of a warp in flight together;
    // by 4, ptxas spilled under the 128-register cap)
#pragma unroll 2
    for (int u = 0; u < kC / kWarps; ++u) {
      const int tt = warp + kWarps * u;
      const int r = t0 + tt;
      float qv[KP / 32], kv[KP / 32];
      float ssq = 0.f, ssk = 0.f;
#pragma unroll
      for (int i = 0; i < KP / 32; ++i) {
        const int e = lane + 32 * i;
        const bool ok = tt < n && e < p.k_dim;
        const uint16_t* row = p.conv_out + static_cast<size_t>(ok ? r : 0) * p.conv_dim;
        qv[i] = ok ? bf16_to_float(row[q_off + e]) : 0.f;
        kv[i] = ok ? bf16_to_float(row[k_off + e]) : 0.f;
        ssq = fmaf(qv[i], qv[i], ssq);
        ssk = fmaf(kv[i], kv[i], ssk);
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        ssq += __shfl_xor_sync(0xffffffffu, ssq, off);
        ssk += __shfl_xor_sync(0xffffffffu, ssk, off);
      }
      const float iq = 1.f / sqrtf(ssq + 1e-6f), ik = 1.f / sqrtf(ssk + 1e-6f);
#pragma unroll
      for (int i = 0; i < KP / 32; ++i) {
        Q_s[tt * KS + lane + 32 * i] = qv[i] * iq;
        K_s[tt * KS + lane + 32 * i] = kv[i] * ik;
      }
    }
#pragma unroll 4
    for (int u = 0; u < kC * VB / kThreads; ++u) {
      const int idx = tid + kThreads * u;
      const int tt = idx / VB, v = idx - (idx / VB) * VB;
      D_s[tt * VS + v] = (tt < n && v < vn)
                             ? bf16_to_float(p.conv_out[static_cast<size_t>(t0 + tt) * p.conv_dim + v_off + v])
                             : 0.f;
    }
    if (warp == 0) {
      const bool ok = lane < n;
      const size_t gi = static_cast<size_t>(t0 + (ok ? lane : 0)) * p.num_v_heads + h;
      float G = ok ? p.g[gi] : 0.f;  // padded tokens: g = 0, beta = 0 (no effect)
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, G, off);
        if (lane >= off) G += y;
      }
      const float G_last = __shfl_sync(0xffffffffu, G, 31);
      Gr_s[lane] = G;
      Gm_s[lane] = expf(G);
      E_s[lane] = expf(G_last - G);
      Bt_s[lane] = ok ? p.beta[gi] : 0.f;
    }
    __syncthreads();

    // ---- 2a. R = beta (v - e^G S0 k), O = e^G S0 q
    {
      float sk[4][TV], sq[4][TV];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < TV; ++c) sk[r][c] = sq[r][c] = 0.f;
#pragma unroll 4
      for (int c4 = 0; c4 < NK4; ++c4) {
        float4 s4[TV];
#pragma unroll
        for (int c = 0; c < TV; ++c) s4[c] = *reinterpret_cast<const float4*>(&S_s[(lane + 32 * c) * KS + 4 * c4]);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float4 k4 = *reinterpret_cast<const float4*>(&K_s[(warp + 8 * r) * KS + 4 * c4]);
          const float4 q4 = *reinterpret_cast<const float4*>(&Q_s[(warp + 8 * r) * KS + 4 * c4]);
#pragma unroll
          for (int c = 0; c < TV; ++c) {
            sk[r][c] = dot4(k4, s4[c], sk[r][c]);
            sq[r][c] = dot4(q4, s4[c], sq[r][c]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = warp + 8 * r;
        const float gm = Gm_s[i], bt = Bt_s[i];
#pragma unroll
        for (int c = 0; c < TV; ++c) {
          const int v = lane + 32 * c;
          D_s[i * VS + v] = bt * (D_s[i * VS + v] - gm * sk[r][c]);
          O_s[i * VS + v] = gm * sq[r][c];
        }
      }
    }
    // ---- 2b. A and the masked q.k: rows i = warp + 8r, column j = lane
    {
      float kk[4] = {0.f, 0.f, 0.f, 0.f}, qk[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
      for (int c4 = 0; c4 < NK4; ++c4) {
        const float4 kj = *reinterpret_cast<const float4*>(&K_s[lane * KS + 4 * c4]);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float4 ki = *reinterpret_cast<const float4*>(&K_s[(warp + 8 * r) * KS + 4 * c4]);
          const float4 qi = *reinterpret_cast<const float4*>(&Q_s[(warp + 8 * r) * KS + 4 * c4]);
          kk[r] = dot4(ki, kj, kk[r]);
          qk[r] = dot4(qi, kj, qk[r]);
        }
      }
      const int j = lane;
      const float Gj = Gr_s[j];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = warp + 8 * r;
        const float dec = j <= i ? expf(Gr_s[i] - Gj) : 0.f;
        A_s[i * CS + j] = j < i ? Bt_s[i] * dec * kk[r] : 0.f;
        M_s[i * CS + j] = j <= i ? dec * qk[r] : 0.f;
      }
    }
    __syncthreads();

    // ---- 3. (I + A) Delta = R by forward substitution, a column per TPC lanes
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

    // ---- 4a. outputs: o_i = O_i + sum_{j<=i} M_ij Delta_j
    {
      float o[4][TV];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < TV; ++c) o[r][c] = O_s[(warp + 8 * r) * VS + lane + 32 * c];
#pragma unroll 8
      for (int j = 0; j < kC; ++j) {
        float dj[TV];
#pragma unroll
        for (int c = 0; c < TV; ++c) dj[c] = D_s[j * VS + lane + 32 * c];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float m = M_s[(warp + 8 * r) * CS + j];
#pragma unroll
          for (int c = 0; c < TV; ++c) o[r][c] = fmaf(m, dj[c], o[r][c]);
        }
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = warp + 8 * r;
#pragma unroll
        for (int c = 0; c < TV; ++c) {
          const int v = lane + 32 * c;
          if (i < n && v < vn)
            p.out[static_cast<size_t>(t0 + i) * out_stride + static_cast<size_t>(h) * p.v_dim + v0 + v] =
                float_to_bf16(o[r][c] * p.inv_sqrt_dk);
        }
      }
    }
    // ---- 4b. S = e^{G_last} S0 + sum_j e^{G_last-G_j} Delta_j k_j^T:
    // lane column float4 k4, rows v = tv RV + c (contiguous: broadcast loads of Delta)
    {
      constexpr int NVT = kThreads / NK4;
      constexpr int RV = VB / NVT;
      static_assert(RV >= 1 && VB % NVT == 0, "update mapping");
      const int k4 = tid % NK4, tv = tid / NK4;
      const float gl = Gm_s[kC - 1];
      float4 s[RV];
#pragma unroll
      for (int c = 0; c < RV; ++c) {
        s[c] = *reinterpret_cast<const float4*>(&S_s[(tv * RV + c) * KS + 4 * k4]);
        s[c].x *= gl; s[c].y *= gl; s[c].z *= gl; s[c].w *= gl;
      }
#pragma unroll 4
      for (int j = 0; j < kC; ++j) {
        const float4 kj = *reinterpret_cast<const float4*>(&K_s[j * KS + 4 * k4]);
        const float e = E_s[j];
        float dd[RV];
        if constexpr (RV % 4 == 0) {
#pragma unroll
          for (int c = 0; c < RV; c += 4) {
            const float4 d4 = *reinterpret_cast<const float4*>(&D_s[j * VS + tv * RV + c]);
            dd[c] = d4.x; dd[c + 1] = d4.y; dd[c + 2] = d4.z; dd[c + 3] = d4.w;
          }
        } else {
#pragma unroll
          for (int c = 0; c < RV; ++c) dd[c] = D_s[j * VS + tv * RV + c];
        }
#pragma unroll
        for (int c = 0; c < RV; ++c) {
          const float w = e * dd[c];
          s[c].x = fmaf(w, kj.x, s[c].x);
          s[c].y = fmaf(w, kj.y, s[c].y);
          s[c].z = fmaf(w, kj.z, s[c].z);
          s[c].w = fmaf(w, kj.w, s[c].w);
        }
      }
#pragma unroll
      for (int c = 0; c < RV; ++c) *reinterpret_cast<float4*>(&S_s[(tv * RV + c) * KS + 4 * k4]) = s[c];
    }
    __syncthreads();
  }

  for (int idx = tid; idx < VB * NK4; idx += kThreads) {
    const int v = idx / NK4, col = 4 * (idx - (idx / NK4) * NK4);
    if (v < vn && col < p.k_dim)
      *reinterpret_cast<float4*>(S_g + static_cast<size_t>(v0 + v) * p.k_dim + col) =
          *reinterpret_cast<const float4*>(&S_s[v * KS + col]);
  }
}

template <int KP, int VB>
cudaError_t launch_variant(cudaStream_t stream, ChunkParams p) {
  using L = ChunkSmem<KP, VB>;
  static bool configured = false;
  if (!configured) {
    const cudaError_t e = cudaFuncSetAttribute(gdn_chunked_kernel<KP, VB>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(L::bytes));
    if (e != cudaSuccess) return e;
    configured = true;
  }
  p.v_blocks = (p.v_dim + VB - 1) / VB;
  const long long ctas = static_cast<long long>(p.batch_size) * p.num_v_heads * p.v_blocks;
  if (ctas > 0x7fffffffLL) return cudaErrorInvalidValue;
  gdn_chunked_kernel<KP, VB><<<static_cast<unsigned>(ctas), kThreads, L::bytes, stream>>>(p);
  return cudaGetLastError();
}

// v blocks of 64 rows, or of 32 when 64-row CTAs would not fill the GPU's two
// resident CTAs per SM (then the chain of chunks, not the throughput, sets the
// time, and a 32-row CTA walks each chunk faster).
template <int KP>
cudaError_t launch_k(cudaStream_t stream, const ChunkParams& p) {
  const long long ctas64 = static_cast<long long>(p.batch_size) * p.num_v_heads * ((p.v_dim + 63) / 64);
  if (p.v_dim <= 32 || ctas64 < 2LL * detail::sm_count()) return launch_variant<KP, 32>(stream, p);
  return launch_variant<KP, 64>(stream, p);
}

}  // namespace

bool gdn_chunked_supports(const LayerShape& shape) {
  return shape.num_k_heads > 0 && shape.num_v_heads > 0 && shape.num_v_heads % shape.num_k_heads == 0 &&
         shape.k_dim > 0 && shape.k_dim % 4 == 0 && shape.k_dim <= 128 && shape.v_dim > 0;
}

cudaError_t launch_gdn_chunked(cudaStream_t stream, const LayerShape& shape, uint32_t batch_size,
                               uint32_t total_tokens, uint64_t cu_seqlens, uint64_t h_state_ptrs,
                               const int32_t* stream_order, const bf16* conv_out, const float* g,
                               const float* beta, bf16* out) {
  if (!gdn_chunked_supports(shape)) return cudaErrorInvalidValue;
  if (batch_size == 0) return cudaSuccess;
  ChunkParams p;
  p.batch_size = static_cast<int>(batch_size);
  p.total_tokens = static_cast<int>(total_tokens);
  p.num_k_heads = shape.num_k_heads;
  p.num_v_heads = shape.num_v_heads;
  p.k_dim = shape.k_dim;
  p.v_dim = shape.v_dim;
  p.conv_dim = 2 * shape.num_k_heads * shape.k_dim + shape.num_v_heads * shape.v_dim;
  p.v_blocks = 1;
  p.inv_sqrt_dk = 1.f / sqrtf(static_cast<float>(shape.k_dim));
  p.cu_seqlens = reinterpret_cast<const int32_t*>(cu_seqlens);
  p.h_state_ptrs = reinterpret_cast<const uint64_t*>(h_state_ptrs);
  p.order = stream_order;
  p.conv_out = reinterpret_cast<const uint16_t*>(conv_out);
  p.g = g;
  p.beta = beta;
  p.out = reinterpret_cast<uint16_t*>(out);
  if (shape.k_dim <= 32) return launch_k<32>(stream, p);
  if (shape.k_dim <= 64) return launch_k<64>(stream, p);
  return launch_k<128>(stream, p);
}

}  // namespace pb::kernels
