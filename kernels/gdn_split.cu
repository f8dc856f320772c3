// gdn_split.cu: the gated delta rule split across the context (the WY form of
// gdn_chunked.cu reordered so that only a lean state recurrence is sequential).
// Per 32-token chunk c of a stream, G_i = sum_{j<=i} g_j inside it, S_c the
// state entering it ([v_dim][k_dim]):
//   1. prep (parallel over chunk x v head): A_ij = beta_i e^{G_i-G_j} k_i.k_j (j < i),
//      (I + A) [U | W] = [beta v | beta e^G k] by forward substitution;
//   2. scan (one CTA per stream x v head x v block, chunks in order):
//      Delta_c = U_c - W_c S_c^T, S_{c+1} = e^{G_last} S_c + (e^{G_last-G} Delta_c)^T K_c,
//      storing S_c and Delta_c (over U_c) for step 3;
//   3. out (parallel over chunk x v head): o = e^G q S_c^T + tril(e^{G_i-G_j} q.k) Delta_c.
// Precision (GdnPrecision::tf32_split, reference/gdn_split_lp.cpp mirrors every
// line): tf32 operands (cvt.rna) where gdn_chunked.cu has them (k, q, S, the masked
// q.k, Delta, e^{..}Delta) plus W; sums in fp32 in index order; fp32 scratch.
// Invariants: grid sizes from total_tokens, batch_size and the shape only; the
// work list and its count are read from the workspace.
#include "kernels/gdn_split.h"

#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/gdn_params.cuh"

namespace pb::kernels {

namespace {

constexpr int kC = 32;         // tokens per chunk (one warp's lanes: the g scan)
constexpr int kThreads = 256;  // 8 warps

uint64_t round256(uint64_t n) { return (n + 255) & ~uint64_t(255); }

__device__ __forceinline__ float tf32_round(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return __uint_as_float(r);
}

struct SplitParams {
  GdnParams p;
  const int32_t* count;
  const GdnSplitItem* items;
  const int32_t* chunk_first;
  float *G, *W, *U, *Kn, *Qn, *Sc;
  int vb;          // the scan's v rows per CTA
  int max_chunks;  // Sc's chunk capacity (the scan never writes past it)
};

// Warp 0: the chunk's g scan (lane = token; padded tokens g = 0, beta = 0).
__device__ __forceinline__ void load_gates(const SplitParams& s, int t0, int n, int h, float* G_s, float* B_s) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32) return;
  const bool ok = lane < n;
  const size_t gi = static_cast<size_t>(t0 + (ok ? lane : 0)) * s.p.num_v_heads + h;
  float G = ok ? s.p.g[gi] : 0.f;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, G, off);
    if (lane >= off) G += y;
  }
  G_s[lane] = G;
  if (B_s) B_s[lane] = ok ? s.p.beta[gi] : 0.f;
}

// ---- 1. prep: per (chunk, v head). Shared: K [C][KS] tf32 k, A [C][C+1], G, beta.
__global__ void __launch_bounds__(kThreads) gdn_split_prep(SplitParams s) {
  using namespace detail;
  const GdnParams& p = s.p;
  const int item = blockIdx.x, h = blockIdx.y;
  if (item >= *s.count) return;
  const GdnSplitItem it = s.items[item];
  const StreamRows sr = stream_rows(p.cu_seqlens, it.stream, p.total_tokens);
  const int t0 = it.t0, n = min(kC, sr.end - t0);
  if (n <= 0) return;
  const int dk = p.k_dim, dv = p.v_dim, KS = dk + 4, AS = kC + 1;
  const int group = p.num_v_heads / p.num_k_heads, kh = h / group;
  extern __shared__ __align__(16) float sm[];
  float* K_s = sm;                 // [C][KS]
  float* Q_s = K_s + kC * KS;      // [C][KS]
  float* A_s = Q_s + kC * KS;      // [C][AS]
  float* G_s = A_s + kC * AS;      // [C]
  float* B_s = G_s + kC;           // [C]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // q, k of this k head: L2-normalised (eps 1e-6 inside the sqrt), rounded to tf32;
  // the group's first v head also stores them for the scan and the outputs.
  const bool store_qk = h % group == 0;
  for (int i = warp; i < kC; i += kThreads / 32) {
    const uint16_t* row = p.conv_out + static_cast<size_t>(t0 + i) * p.conv_dim;
    float ssq = 0.f, ssk = 0.f;
    for (int c = lane; c < dk; c += 32) {
      const float qv = i < n ? bf16_to_float(row[static_cast<size_t>(kh) * dk + c]) : 0.f;
      const float kv = i < n ? bf16_to_float(row[static_cast<size_t>(p.num_k_heads + kh) * dk + c]) : 0.f;
      ssq = fmaf(qv, qv, ssq);
      ssk = fmaf(kv, kv, ssk);
      Q_s[i * KS + c] = qv;
      K_s[i * KS + c] = kv;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      ssq += __shfl_xor_sync(0xffffffffu, ssq, off);
      ssk += __shfl_xor_sync(0xffffffffu, ssk, off);
    }
    const float iq = 1.f / sqrtf(ssq + 1e-6f), ik = 1.f / sqrtf(ssk + 1e-6f);
    for (int c = lane; c < dk; c += 32) {
      const float qn = tf32_round(Q_s[i * KS + c] * iq), kn = tf32_round(K_s[i * KS + c] * ik);
      K_s[i * KS + c] = kn;
      if (store_qk && i < n) {
        const size_t o = (static_cast<size_t>(t0 + i) * p.num_k_heads + kh) * dk + c;
        s.Kn[o] = kn;
        s.Qn[o] = qn;
      }
    }
  }
  load_gates(s, t0, n, h, G_s, B_s);
  __syncthreads();
  if (tid < n) s.G[static_cast<size_t>(t0 + tid) * p.num_v_heads + h] = G_s[tid];

  // A_ij = beta_i e^{G_i-G_j} k_i.k_j, j < i (zero on and above the diagonal)
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int i = e / kC, j = e % kC;
    float a = 0.f;
    if (j < i) {
      float acc = 0.f;
      for (int c = 0; c < dk; ++c) acc = fmaf(K_s[i * KS + c], K_s[j * KS + c], acc);
      a = B_s[i] * expf(G_s[i] - G_s[j]) * acc;
    }
    A_s[i * AS + j] = a;
  }
  __syncthreads();

  // (I + A) X = [beta v | beta e^G k], one column per thread, rows in registers.
  const size_t hv_row = static_cast<size_t>(p.num_v_heads);
  for (int col = tid; col < dv + dk; col += kThreads) {
    float x[kC];
    const bool is_v = col < dv;
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      float b = 0.f;
      if (i < n) {
        if (is_v) {
          const size_t off = static_cast<size_t>(t0 + i) * p.conv_dim + static_cast<size_t>(2 * p.num_k_heads) * dk +
                             static_cast<size_t>(h) * dv + col;
          b = B_s[i] * bf16_to_float(p.conv_out[off]);
        } else {
          const float bw = B_s[i] * expf(G_s[i]);
          b = bw * K_s[i * KS + (col - dv)];
        }
      }
      x[i] = b;
    }
#pragma unroll
    for (int i = 1; i < kC; ++i)
#pragma unroll
      for (int j = 0; j < i; ++j) x[i] = fmaf(-A_s[i * AS + j], x[j], x[i]);
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      if (i >= n) break;
      const size_t r = static_cast<size_t>(t0 + i) * hv_row + h;
      if (is_v) s.U[r * dv + col] = x[i];
      else s.W[r * dk + (col - dv)] = tf32_round(x[i]);
    }
  }
}

// ---- 2. scan: per (stream, v head, v block of vb rows). Shared: S [vb][dk+1]
// fp32, then per chunk W, K [C][dk+4], U / Delta [C][vb], E.Delta tf32 [C][vb].
__global__ void __launch_bounds__(kThreads) gdn_split_scan(SplitParams s) {
  using namespace detail;
  const GdnParams& p = s.p;
  const int dk = p.k_dim, dv = p.v_dim, VB = s.vb;
  const int per_stream = p.num_v_heads * p.blocks;
  const int ob = blockIdx.x / per_stream;
  const int rem = blockIdx.x - ob * per_stream;
  const int h = rem / p.blocks, vblk = rem - h * p.blocks;
  const int b = p.order ? p.order[ob] : ob;
  if (b < 0 || b >= p.batch_size) return;
  const int kh = h / (p.num_v_heads / p.num_k_heads);
  const StreamRows sr = stream_rows(p.cu_seqlens, b, p.total_tokens);
  const int v0 = vblk * VB, vn = min(VB, dv - v0);
  const int SS = dk + 1, KS = dk + 4;
  extern __shared__ __align__(16) float sm[];
  float* S_s = sm;                // [VB][SS]
  float* W_s = S_s + VB * SS;     // [C][KS]
  float* K_s = W_s + kC * KS;     // [C][KS]
  float* D_s = K_s + kC * KS;     // [C][VB] U, then Delta
  float* De_s = D_s + kC * VB;    // [C][VB] tf32(e^{G_last-G_j} Delta_j)
  float* G_s = De_s + kC * VB;    // [C]
  const int tid = threadIdx.x;
  float* S_g = reinterpret_cast<float*>(p.h_state_ptrs[b]) + static_cast<size_t>(h) * dv * dk;
  for (int e = tid; e < VB * dk; e += kThreads) {
    const int v = e / dk, c = e % dk;
    S_s[v * SS + c] = v < vn ? S_g[static_cast<size_t>(v0 + v) * dk + c] : 0.f;
  }
  const int first = s.chunk_first[b];
  const size_t head_state = static_cast<size_t>(dv) * dk;
  for (int t0 = sr.begin, chunk = first; t0 < sr.end && chunk < s.max_chunks; t0 += kC, ++chunk) {
    const int n = min(kC, sr.end - t0);
    __syncthreads();  // S_s complete; the previous chunk's W_s, K_s, D_s reads done
    float* Sc = s.Sc + (static_cast<size_t>(chunk) * p.num_v_heads + h) * head_state;
    for (int e = tid; e < VB * dk; e += kThreads) {
      const int v = e / dk, c = e % dk;
      if (v < vn) Sc[static_cast<size_t>(v0 + v) * dk + c] = S_s[v * SS + c];
    }
    for (int e = tid; e < kC * dk; e += kThreads) {
      const int i = e / dk, c = e % dk;
      const size_t r = static_cast<size_t>(t0 + i) * p.num_v_heads + h;
      const size_t rk = (static_cast<size_t>(t0 + i) * p.num_k_heads + kh) * dk + c;
      W_s[i * KS + c] = i < n ? s.W[r * dk + c] : 0.f;
      K_s[i * KS + c] = i < n ? s.Kn[rk] : 0.f;
    }
    for (int e = tid; e < kC * VB; e += kThreads) {
      const int i = e / VB, v = e % VB;
      D_s[e] = i < n && v < vn ? s.U[(static_cast<size_t>(t0 + i) * p.num_v_heads + h) * dv + v0 + v] : 0.f;
    }
    load_gates(s, t0, n, h, G_s, nullptr);
    __syncthreads();
    const float G_last = G_s[n - 1];
    // Delta_i = U_i - W_i tf32(S)^T, stored over U and scaled for the update
    for (int e = tid; e < n * VB; e += kThreads) {
      const int i = e / VB, v = e % VB;
      float acc = 0.f;
      for (int c = 0; c < dk; ++c) acc = fmaf(W_s[i * KS + c], tf32_round(S_s[v * SS + c]), acc);
      const float d = D_s[e] - acc;
      D_s[e] = d;
      De_s[e] = tf32_round(expf(G_last - G_s[i]) * d);
      if (v < vn) s.U[(static_cast<size_t>(t0 + i) * p.num_v_heads + h) * dv + v0 + v] = d;
    }
    __syncthreads();
    // S = e^{G_last} S + sum_j De_j K_j^T
    const float gl = expf(G_last);
    for (int e = tid; e < VB * dk; e += kThreads) {
      const int v = e / dk, c = e % dk;
      float acc = S_s[v * SS + c] * gl;
      for (int j = 0; j < n; ++j) acc = fmaf(De_s[j * VB + v], K_s[j * KS + c], acc);
      S_s[v * SS + c] = acc;
    }
  }
  __syncthreads();
  for (int e = tid; e < VB * dk; e += kThreads) {
    const int v = e / dk, c = e % dk;
    if (v < vn) S_g[static_cast<size_t>(v0 + v) * dk + c] = S_s[v * SS + c];
  }
}

// ---- 3. out: per (chunk, v head). Shared: Q, K [C][dk+4] (tf32), M [C][C+1],
// then per block of 32 v rows tf32(S_c) [32][dk+1] and tf32(Delta) [C][32].
constexpr int kOutV = 32;
__global__ void __launch_bounds__(kThreads) gdn_split_out(SplitParams s) {
  using namespace detail;
  const GdnParams& p = s.p;
  const int item = blockIdx.x, h = blockIdx.y;
  if (item >= *s.count) return;
  const GdnSplitItem it = s.items[item];
  const StreamRows sr = stream_rows(p.cu_seqlens, it.stream, p.total_tokens);
  const int t0 = it.t0, n = min(kC, sr.end - t0);
  if (n <= 0) return;
  const int dk = p.k_dim, dv = p.v_dim, KS = dk + 4, MS = kC + 1, SS = dk + 1;
  const int kh = h / (p.num_v_heads / p.num_k_heads);
  extern __shared__ __align__(16) float sm[];
  float* Q_s = sm;                 // [C][KS]
  float* K_s = Q_s + kC * KS;      // [C][KS]
  float* M_s = K_s + kC * KS;      // [C][MS]
  float* S_s = M_s + kC * MS;      // [32][SS]
  float* D_s = S_s + kOutV * SS;   // [C][32]
  float* G_s = D_s + kC * kOutV;   // [C]
  const int tid = threadIdx.x;
  for (int e = tid; e < kC * dk; e += kThreads) {
    const int i = e / dk, c = e % dk;
    const size_t rk = (static_cast<size_t>(t0 + i) * p.num_k_heads + kh) * dk + c;
    Q_s[i * KS + c] = i < n ? s.Qn[rk] : 0.f;
    K_s[i * KS + c] = i < n ? s.Kn[rk] : 0.f;
  }
  if (tid < kC) G_s[tid] = tid < n ? s.G[static_cast<size_t>(t0 + tid) * p.num_v_heads + h] : 0.f;
  __syncthreads();
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int i = e / kC, j = e % kC;
    float m = 0.f;
    if (j <= i) {
      float acc = 0.f;
      for (int c = 0; c < dk; ++c) acc = fmaf(Q_s[i * KS + c], K_s[j * KS + c], acc);
      m = tf32_round(expf(G_s[i] - G_s[j]) * acc);
    }
    M_s[i * MS + j] = m;
  }
  const float* Sc = s.Sc + (static_cast<size_t>(it.chunk) * p.num_v_heads + h) * dv * dk;
  const size_t out_stride = static_cast<size_t>(p.num_v_heads) * dv;
  for (int vb0 = 0; vb0 < dv; vb0 += kOutV) {
    const int vn = min(kOutV, dv - vb0);
    __syncthreads();  // M_s written; the previous block's S_s, D_s reads done
    for (int e = tid; e < kOutV * dk; e += kThreads) {
      const int v = e / dk, c = e % dk;
      S_s[v * SS + c] = v < vn ? tf32_round(Sc[static_cast<size_t>(vb0 + v) * dk + c]) : 0.f;
    }
    for (int e = tid; e < kC * kOutV; e += kThreads) {
      const int i = e / kOutV, v = e % kOutV;
      D_s[e] = i < n && v < vn ? tf32_round(s.U[(static_cast<size_t>(t0 + i) * p.num_v_heads + h) * dv + vb0 + v]) : 0.f;
    }
    __syncthreads();
    for (int e = tid; e < n * kOutV; e += kThreads) {
      const int i = e / kOutV, v = e % kOutV;
      if (v >= vn) continue;
      float sq = 0.f;
      for (int c = 0; c < dk; ++c) sq = fmaf(Q_s[i * KS + c], S_s[v * SS + c], sq);
      float o = expf(G_s[i]) * sq;
      for (int j = 0; j <= i; ++j) o = fmaf(M_s[i * MS + j], D_s[j * kOutV + v], o);
      p.out[static_cast<size_t>(t0 + i) * out_stride + static_cast<size_t>(h) * dv + vb0 + v] =
          float_to_bf16(o * p.inv_sqrt_dk);
    }
  }
}

size_t prep_smem(int dk) { return sizeof(float) * (2 * kC * (dk + 4) + kC * (kC + 1) + 2 * kC); }
size_t scan_smem(int dk, int vb) { return sizeof(float) * (vb * (dk + 1) + 2 * kC * (dk + 4) + 2 * kC * vb + kC); }
size_t out_smem(int dk) {
  return sizeof(float) * (2 * kC * (dk + 4) + kC * (kC + 1) + kOutV * (dk + 1) + kC * kOutV + kC);
}

template <class F>
cudaError_t allow_smem(F* f, size_t bytes) {
  return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace

GdnSplitLayout gdn_split_layout(const LayerShape& shape, uint32_t total_tokens, uint32_t batch_size) {
  GdnSplitLayout l;
  const uint64_t T = total_tokens, N = batch_size, Hv = shape.num_v_heads, Hk = shape.num_k_heads;
  const uint64_t dk = shape.k_dim, dv = shape.v_dim;
  l.max_chunks = static_cast<uint32_t>(T / kC + N);
  l.count = 0;
  l.items = 256;
  l.chunk_first = l.items + round256(uint64_t(l.max_chunks + 1) * sizeof(GdnSplitItem));
  l.G = l.chunk_first + round256((N + 1) * 4);
  l.W = l.G + round256(T * Hv * 4);
  l.U = l.W + round256(T * Hv * dk * 4);
  l.Kn = l.U + round256(T * Hv * dv * 4);
  l.Qn = l.Kn + round256(T * Hk * dk * 4);
  l.Sc = l.Qn + round256(T * Hk * dk * 4);
  l.bytes = l.Sc + round256(uint64_t(l.max_chunks) * Hv * dv * dk * 4);
  return l;
}

void plan_gdn_split(const std::vector<int32_t>& cu, const std::vector<int32_t>& order,
                    std::vector<GdnSplitItem>* items, std::vector<int32_t>* chunk_first) {
  const int n = cu.empty() ? 0 : static_cast<int>(cu.size()) - 1;
  chunk_first->assign(static_cast<size_t>(n) + 1, 0);
  for (int b = 0; b < n; ++b) {
    const int len = std::max(0, cu[b + 1] - cu[b]);
    (*chunk_first)[b + 1] = (*chunk_first)[b] + (len + kC - 1) / kC;
  }
  items->clear();
  for (const int32_t b : order) {
    if (b < 0 || b >= n) continue;
    for (int t0 = cu[b], c = (*chunk_first)[b]; t0 < cu[b + 1]; t0 += kC, ++c) items->push_back({b, t0, c, 0});
  }
}

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
  s.count = reinterpret_cast<const int32_t*>(scratch + l.count);
  s.items = reinterpret_cast<const GdnSplitItem*>(scratch + l.items);
  s.chunk_first = reinterpret_cast<const int32_t*>(scratch + l.chunk_first);
  s.G = reinterpret_cast<float*>(scratch + l.G);
  s.W = reinterpret_cast<float*>(scratch + l.W);
  s.U = reinterpret_cast<float*>(scratch + l.U);
  s.Kn = reinterpret_cast<float*>(scratch + l.Kn);
  s.Qn = reinterpret_cast<float*>(scratch + l.Qn);
  s.Sc = reinterpret_cast<float*>(scratch + l.Sc);
  // The scan's v block: the widest of 64, 32, 16, 8 rows that still gives two
  // CTAs per SM; fewer rows per CTA when streams x heads are few (the chain of
  // chunks, not the throughput, then sets the time).
  const long long heads = static_cast<long long>(args.batch_size) * shape.num_v_heads;
  int vb = 8;
  for (const int cand : {64, 32, 16})
    if (heads * ((shape.v_dim + cand - 1) / cand) >= 2LL * detail::sm_count()) {
      vb = cand;
      break;
    }
  vb = std::min(vb, shape.v_dim);
  s.vb = vb;
  s.max_chunks = static_cast<int>(l.max_chunks);
  s.p.blocks = (shape.v_dim + vb - 1) / vb;
  const size_t b1 = prep_smem(shape.k_dim), b2 = scan_smem(shape.k_dim, vb), b3 = out_smem(shape.k_dim);
  static bool configured = false;  // once, at the largest sizes (k_dim 128, 64-row v blocks)
  if (!configured) {
    cudaError_t e = allow_smem(gdn_split_prep, prep_smem(128));
    if (e == cudaSuccess) e = allow_smem(gdn_split_scan, scan_smem(128, 64));
    if (e == cudaSuccess) e = allow_smem(gdn_split_out, out_smem(128));
    if (e != cudaSuccess) return e;
    configured = true;
  }
  const long long scan_ctas = heads * s.p.blocks;
  if (scan_ctas > 0x7fffffffLL || l.max_chunks > 0x7fffffffu || shape.num_v_heads > 65535) return cudaErrorInvalidValue;
  if (l.max_chunks == 0) return cudaSuccess;
  const dim3 par(l.max_chunks, shape.num_v_heads);
  gdn_split_prep<<<par, kThreads, b1, stream>>>(s);
  gdn_split_scan<<<static_cast<unsigned>(scan_ctas), kThreads, b2, stream>>>(s);
  gdn_split_out<<<par, kThreads, b3, stream>>>(s);
  return cudaGetLastError();
}

}  // namespace pb::kernels
