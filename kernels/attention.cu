// attention.cu: paged varlen causal GQA attention for all streams in one launch
// (fp32 FMA math; a tensor-core version is a later issue). A CTA owns one work
// item (stream, q-tile) and one kv head: its 64 query vectors are the tile's
// rows times the q heads of that kv head's GQA group (heads packed into the M
// dimension, as FlashInfer does), so each K/V tile in shared memory serves the
// whole group. Online softmax in fp32; P rounded to bf16 before P*V.
// Invariants: every bound comes from device memory (cu_seqlens, kv_lens, block
// tables); a key outside a row's causal range contributes exactly nothing (its
// V is never multiplied); a block id outside [0, num_blocks), or a table index
// past max_blocks_per_seq, reads as NaN without being dereferenced.
#include <algorithm>
#include <cmath>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace pb::kernels {

// Tuning knobs shared by every head dim.
struct AttnConfig {
  static constexpr int kThreads = 256;  // a 16 x 16 thread grid over the S tile
  static constexpr int kBlockM = 64;    // query vectors (row, q head) per CTA
  static constexpr int kPad = 4;        // floats of padding per smem row: spreads banks, keeps 16 B alignment
};

// Per-head-dim tile traits: K/V keys per shared-memory tile. Shared memory per
// CTA is (kBlockM + 2 * kBlockN) * (D + kPad) * 4 bytes: 51 KB (D=64),
// 99 KB (D=128, two CTAs per SM), 130 KB (D=256, one CTA per SM).
template <int D> struct AttnTile;
template <> struct AttnTile<64> { static constexpr int kBlockN = 64; };
template <> struct AttnTile<128> { static constexpr int kBlockN = 64; };
template <> struct AttnTile<256> { static constexpr int kBlockN = 32; };

namespace {

struct AttnParams {
  int batch_size, total_tokens, max_blocks_per_seq;
  int num_q_heads, num_kv_heads;
  int group;          // q heads per kv head
  int heads_per_cta;  // q heads of the group one CTA serves (= group unless group > kBlockM)
  int head_chunks;    // ceil(group / heads_per_cta)
  int rows_per_tile;  // kBlockM / heads_per_cta
  int block_size, num_blocks;
  int bound_extra;    // 0, or 1 under the causal-off-by-one fault
  float scale;
  const int32_t* cu_seqlens;
  const int32_t* kv_lens;
  const uint64_t* block_table_ptrs;
  const AttnWorkItem* work;
  const uint16_t* q_rot;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  uint16_t* out;
};

template <int D>
constexpr size_t attention_smem_bytes() {
  return static_cast<size_t>(AttnConfig::kBlockM + 2 * AttnTile<D>::kBlockN) * (D + AttnConfig::kPad) *
         sizeof(float);
}

__device__ __forceinline__ float f4get(const float4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

// Version 1 (fp32 FMA). Thread (tm, tn) of the 16 x 16 grid owns query vectors
// tm + 16 r (r < 4) and, in S, keys tn + 16 c; in O it owns columns
// tn * 4 + 64 k, so a row's softmax state lives in the 16 lanes of its half-warp
// (shuffle reductions, no shared memory). Per K/V tile: load (bf16 -> fp32 smem),
// S = Q K^T, online softmax, P -> smem (over K), O += P V.
template <int D>
__global__ void __launch_bounds__(AttnConfig::kThreads) attention_kernel(AttnParams p) {
  using namespace detail;
  constexpr int M = AttnConfig::kBlockM;
  constexpr int N = AttnTile<D>::kBlockN;
  constexpr int LD = D + AttnConfig::kPad;   // Q/K/V smem row stride (floats)
  constexpr int LDP = N + AttnConfig::kPad;  // P smem row stride
  constexpr int RM = M / 16;                 // query vectors per thread
  constexpr int CN = N / 16;                 // S columns per thread
  constexpr int CO = D / 64;                 // float4 groups of O columns per thread
  constexpr int CH = D / 8;                  // 16-byte chunks per head row
  static_assert(AttnConfig::kThreads == 256, "the 16 x 16 thread grid");
  static_assert(M % 16 == 0 && N % 16 == 0 && D % 64 == 0, "tile divisibility");
  static_assert(M * LDP <= N * LD, "P must fit in the K buffer it reuses");

  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);  // [M][LD]
  float* Ks = Qs + M * LD;                      // [N][LD]; reused as P [M][LDP]
  float* Vs = Ks + N * LD;                      // [N][LD]
  float* Ps = Ks;

  const int tid = threadIdx.x;
  const int tm = tid >> 4, tn = tid & 15;

  const int per_item = p.num_kv_heads * p.head_chunks;
  const int item = blockIdx.x / per_item;
  const int yy = blockIdx.x - item * per_item;
  const int kvh = yy / p.head_chunks;
  const int hc = yy - kvh * p.head_chunks;
  const AttnWorkItem w = p.work[item];
  const int b = w.stream;
  if (b < 0 || b >= p.batch_size || w.tile < 0) return;
  const StreamRows sr = stream_rows(p.cu_seqlens, b, p.total_tokens);
  const int count = sr.count();
  const int row0 = w.tile * p.rows_per_tile;  // token index i of the tile's first row
  if (row0 >= count) return;
  const int nrows = min(p.rows_per_tile, count - row0);
  const int kv_len = clamp_int(p.kv_lens[b], 0, p.max_blocks_per_seq * p.block_size);
  const int chunk_start = max(kv_len - count, 0);
  const int32_t* table = reinterpret_cast<const int32_t*>(p.block_table_ptrs[b]);
  const int head0 = kvh * p.group + hc * p.heads_per_cta;
  const int nheads = min(p.heads_per_cta, p.group - hc * p.heads_per_cta);
  // Token at cache index pos attends keys 0..pos (+1 under the fault).
  const int base_bound = chunk_start + row0 + p.bound_extra;
  const int bound_lo = base_bound;              // the tile's first row
  const int bound_hi = base_bound + nrows - 1;  // the tile's last row

  // Q tile: query vector v = (row rl, head g); padding vectors duplicate a real one.
  for (int idx = tid; idx < M * CH; idx += AttnConfig::kThreads) {
    const int v = idx / CH, ch = idx - (idx / CH) * CH;
    const int rl = min(v / p.heads_per_cta, nrows - 1);
    const int g = min(v - (v / p.heads_per_cta) * p.heads_per_cta, nheads - 1);
    const size_t qrow = static_cast<size_t>(sr.begin + row0 + rl) * p.num_q_heads + head0 + g;
    const uint4 u = *reinterpret_cast<const uint4*>(p.q_rot + qrow * D + ch * 8);
    float f[8];
    unpack8(u, f);
    float4* dst = reinterpret_cast<float4*>(Qs + v * LD + ch * 8);
    dst[0] = make_float4(f[0], f[1], f[2], f[3]);
    dst[1] = make_float4(f[4], f[5], f[6], f[7]);
  }

  int bound[RM];  // last key each of this thread's query vectors attends
#pragma unroll
  for (int r = 0; r < RM; ++r) bound[r] = base_bound + min((tm + 16 * r) / p.heads_per_cta, nrows - 1);

  float o[RM][CO][4];
  float m_run[RM], l_run[RM];
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    m_run[r] = -INFINITY;
    l_run[r] = 0.f;
#pragma unroll
    for (int k = 0; k < CO; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[r][k][e] = 0.f;
  }

  const int num_tiles = bound_hi / N + 1;
  const size_t kv_row_stride = static_cast<size_t>(p.num_kv_heads) * D;  // elements per cache slot
  for (int kt = 0; kt < num_tiles; ++kt) {
    const int j0 = kt * N;
    __syncthreads();  // the previous tile's P*V is done with Ps (= Ks) and Vs
    // K/V tile: keys past the tile's last bound are zeros (never used, never read);
    // bad table index or block id -> NaN poison, not dereferenced.
    for (int idx = tid; idx < N * CH; idx += AttnConfig::kThreads) {
      const int n = idx / CH, ch = idx - (idx / CH) * CH;
      const int j = j0 + n;
      float fk[8], fv[8];
      if (j > bound_hi) {
#pragma unroll
        for (int e = 0; e < 8; ++e) fk[e] = fv[e] = 0.f;
      } else {
        const int bi = j / p.block_size;
        const int blk = bi <= p.max_blocks_per_seq ? table[bi] : -1;
        if (blk < 0 || blk >= p.num_blocks) {
#pragma unroll
          for (int e = 0; e < 8; ++e) fk[e] = fv[e] = __int_as_float(0x7fc00000);
        } else {
          const size_t slot = static_cast<size_t>(blk) * p.block_size + (j - bi * p.block_size);
          const size_t off = slot * kv_row_stride + static_cast<size_t>(kvh) * D + ch * 8;
          unpack8(*reinterpret_cast<const uint4*>(p.k_cache + off), fk);
          unpack8(*reinterpret_cast<const uint4*>(p.v_cache + off), fv);
        }
      }
      float4* dk = reinterpret_cast<float4*>(Ks + n * LD + ch * 8);
      float4* dv = reinterpret_cast<float4*>(Vs + n * LD + ch * 8);
      dk[0] = make_float4(fk[0], fk[1], fk[2], fk[3]);
      dk[1] = make_float4(fk[4], fk[5], fk[6], fk[7]);
      dv[0] = make_float4(fv[0], fv[1], fv[2], fv[3]);
      dv[1] = make_float4(fv[4], fv[5], fv[6], fv[7]);
    }
    __syncthreads();

    // S = Q K^T (this thread's RM x CN entries).
    float s[RM][CN];
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int c = 0; c < CN; ++c) s[r][c] = 0.f;
#pragma unroll 4
    for (int d = 0; d < D; d += 4) {
      float4 qv[RM], kv[CN];
#pragma unroll
      for (int r = 0; r < RM; ++r) qv[r] = *reinterpret_cast<const float4*>(Qs + (tm + 16 * r) * LD + d);
#pragma unroll
      for (int c = 0; c < CN; ++c) kv[c] = *reinterpret_cast<const float4*>(Ks + (tn + 16 * c) * LD + d);
#pragma unroll
      for (int r = 0; r < RM; ++r)
#pragma unroll
        for (int c = 0; c < CN; ++c) {
          s[r][c] = fmaf(qv[r].x, kv[c].x, s[r][c]);
          s[r][c] = fmaf(qv[r].y, kv[c].y, s[r][c]);
          s[r][c] = fmaf(qv[r].z, kv[c].z, s[r][c]);
          s[r][c] = fmaf(qv[r].w, kv[c].w, s[r][c]);
        }
    }

    // Online softmax. Masked keys get p = 0 explicitly (never exp(-inf - -inf)).
    const bool masked_tile = j0 + N - 1 > bound_lo;
#pragma unroll
    for (int r = 0; r < RM; ++r) {
      bool keep[CN];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < CN; ++c) {
        keep[c] = j0 + tn + 16 * c <= bound[r];
        s[r][c] *= p.scale;
        if (keep[c]) mx = fmaxf(mx, s[r][c]);
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m_run[r], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = expf(m_run[r] - m_use);
      float lsum = 0.f;
#pragma unroll
      for (int c = 0; c < CN; ++c) {
        const float pv = keep[c] ? expf(s[r][c] - m_use) : 0.f;
        lsum += pv;
        s[r][c] = round_bf16(pv);  // P as the P*V product sees it
      }
      l_run[r] = l_run[r] * alpha + lsum;
      m_run[r] = m_new;
#pragma unroll
      for (int k = 0; k < CO; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[r][k][e] *= alpha;
    }
    __syncthreads();  // every thread is done reading Ks
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int c = 0; c < CN; ++c) Ps[(tm + 16 * r) * LDP + tn + 16 * c] = s[r][c];
    __syncthreads();

    // O += P V. In a tile with masked keys, a zero P entry skips its V entirely
    // (V of a key outside the range may be NaN poison: 0 * NaN = NaN).
    if (!masked_tile) {
#pragma unroll 2
      for (int n = 0; n < N; n += 4) {
        float4 pr[RM];
#pragma unroll
        for (int r = 0; r < RM; ++r) pr[r] = *reinterpret_cast<const float4*>(Ps + (tm + 16 * r) * LDP + n);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int k = 0; k < CO; ++k) {
            const float4 vv = *reinterpret_cast<const float4*>(Vs + (n + i) * LD + tn * 4 + 64 * k);
#pragma unroll
            for (int r = 0; r < RM; ++r) {
              const float pi = f4get(pr[r], i);
              o[r][k][0] = fmaf(pi, vv.x, o[r][k][0]);
              o[r][k][1] = fmaf(pi, vv.y, o[r][k][1]);
              o[r][k][2] = fmaf(pi, vv.z, o[r][k][2]);
              o[r][k][3] = fmaf(pi, vv.w, o[r][k][3]);
            }
          }
      }
    } else {
#pragma unroll 1
      for (int n = 0; n < N; n += 4) {
        float4 pr[RM];
#pragma unroll
        for (int r = 0; r < RM; ++r) pr[r] = *reinterpret_cast<const float4*>(Ps + (tm + 16 * r) * LDP + n);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int k = 0; k < CO; ++k) {
            const float4 vv = *reinterpret_cast<const float4*>(Vs + (n + i) * LD + tn * 4 + 64 * k);
#pragma unroll
            for (int r = 0; r < RM; ++r) {
              const float pi = f4get(pr[r], i);
              if (pi != 0.f) {
                o[r][k][0] = fmaf(pi, vv.x, o[r][k][0]);
                o[r][k][1] = fmaf(pi, vv.y, o[r][k][1]);
                o[r][k][2] = fmaf(pi, vv.z, o[r][k][2]);
                o[r][k][3] = fmaf(pi, vv.w, o[r][k][3]);
              }
            }
          }
      }
    }
  }

  // out = O / l, rounded to bf16.
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    float l = l_run[r];
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
    const int v = tm + 16 * r;
    const int rl = v / p.heads_per_cta, g = v - rl * p.heads_per_cta;
    if (rl >= nrows || g >= nheads) continue;  // a padding vector
    uint16_t* dst = p.out + (static_cast<size_t>(sr.begin + row0 + rl) * p.num_q_heads + head0 + g) * D;
#pragma unroll
    for (int k = 0; k < CO; ++k) {
      uint2 u;
      u.x = pack2(o[r][k][0] / l, o[r][k][1] / l);
      u.y = pack2(o[r][k][2] / l, o[r][k][3] / l);
      *reinterpret_cast<uint2*>(dst + tn * 4 + 64 * k) = u;
    }
  }
}

struct GroupSplit {
  int group, heads_per_cta, head_chunks, rows_per_tile;
};
GroupSplit group_split(const LayerShape& shape) {
  GroupSplit g;
  g.group = shape.num_kv_heads > 0 ? shape.num_q_heads / shape.num_kv_heads : 1;
  if (g.group < 1) g.group = 1;
  g.heads_per_cta = std::min(g.group, AttnConfig::kBlockM);
  g.head_chunks = (g.group + g.heads_per_cta - 1) / g.heads_per_cta;
  g.rows_per_tile = AttnConfig::kBlockM / g.heads_per_cta;
  return g;
}

template <int D>
cudaError_t launch_attention_d(cudaStream_t stream, const AttnParams& p, unsigned grid) {
  constexpr size_t smem = attention_smem_bytes<D>();
  static bool configured = false;  // the attribute is per function; set it once
  if (!configured) {
    const cudaError_t e = cudaFuncSetAttribute(attention_kernel<D>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    configured = true;
  }
  attention_kernel<D><<<grid, AttnConfig::kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

int attention_rows_per_tile(const LayerShape& shape) { return group_split(shape).rows_per_tile; }

std::vector<AttnWorkItem> plan_attention_tiles(const LayerShape& shape, int rows,
                                               const std::vector<int32_t>& cu_seqlens_host,
                                               const std::vector<int32_t>& kv_lens_host) {
  const uint64_t kv_bytes_per_token = uint64_t(std::max(shape.num_kv_heads, 0)) * uint64_t(std::max(shape.head_dim, 0)) * 2 * 2;
  return order_attention_tiles(rows, cu_seqlens_host, kv_lens_host, kv_bytes_per_token, detail::l2_bytes() / 2);
}

std::vector<AttnWorkItem> plan_attention_work(const LayerShape& shape,
                                              const std::vector<int32_t>& cu_seqlens_host,
                                              const std::vector<int32_t>& kv_lens_host) {
  return plan_attention_tiles(shape, attention_rows_per_tile(shape), cu_seqlens_host, kv_lens_host);
}

cudaError_t launch_attention(cudaStream_t stream, const AttnArgs& a) {
  const LayerShape& shape = a.shape;
  if (shape.num_kv_heads <= 0 || shape.num_q_heads % shape.num_kv_heads != 0 || shape.block_size <= 0)
    return cudaErrorInvalidValue;
  if (a.num_work <= 0 || a.total_tokens == 0) return cudaSuccess;
  const GroupSplit g = group_split(shape);
  AttnParams p;
  p.batch_size = static_cast<int>(a.batch_size);
  p.total_tokens = static_cast<int>(a.total_tokens);
  p.max_blocks_per_seq = static_cast<int>(a.max_blocks_per_seq);
  p.num_q_heads = shape.num_q_heads;
  p.num_kv_heads = shape.num_kv_heads;
  p.group = g.group;
  p.heads_per_cta = g.heads_per_cta;
  p.head_chunks = g.head_chunks;
  p.rows_per_tile = g.rows_per_tile;
  p.block_size = shape.block_size;
  p.num_blocks = shape.num_blocks;
  p.bound_extra = a.causal_off_by_one ? 1 : 0;
  p.scale = a.scale;
  p.cu_seqlens = reinterpret_cast<const int32_t*>(a.cu_seqlens);
  p.kv_lens = reinterpret_cast<const int32_t*>(a.kv_lens);
  p.block_table_ptrs = reinterpret_cast<const uint64_t*>(a.block_table_ptrs);
  p.work = a.work;
  p.q_rot = reinterpret_cast<const uint16_t*>(a.q_rot);
  p.k_cache = reinterpret_cast<const uint16_t*>(a.k_cache);
  p.v_cache = reinterpret_cast<const uint16_t*>(a.v_cache);
  p.out = reinterpret_cast<uint16_t*>(a.out);
  const long long grid = static_cast<long long>(a.num_work) * shape.num_kv_heads * g.head_chunks;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidValue;
  switch (shape.head_dim) {
    case 64: return launch_attention_d<64>(stream, p, static_cast<unsigned>(grid));
    case 128: return launch_attention_d<128>(stream, p, static_cast<unsigned>(grid));
    case 256: return launch_attention_d<256>(stream, p, static_cast<unsigned>(grid));
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pb::kernels
