// attention_mma.cu: paged varlen causal GQA attention on tensor cores, all
// streams in one launch. Versions side by side (attention.cu's fp32 FMA kernel
// is version 1 and stays as the oracle):
//   version 2, attention_mma_kernel: FlashAttention-2 style, bf16 mma.sync
//     m16n8k16 fed by ldmatrix, 8 warps x 16 query vectors; the fallback on
//     devices without sm_90a.
//   version 3, attention_wgmma_kernel: the same CTA and loader, but each of two
//     warpgroups issues S = Q K^T and O += P V as Hopper wgmma (operands read by
//     the tensor cores from swizzled shared memory; P from registers): the
//     default on the H200 (kernels/PERF-NOTES.md has the measurements).
// A CTA owns one work item (stream, q-tile) and one kv head; its 128 query
// vectors are the tile's rows times the q heads of that kv head's GQA group
// (heads packed into M), so one K/V tile in shared memory serves the group.
// K/V tiles come through the block table with cp.async into a multi-stage
// ring; the online softmax is fp32 in registers; P is rounded to bf16 in
// registers for the P*V product (the contract's lp rounding); the output is
// staged through the warp's own Q rows for 16-byte stores.
// Invariants (kept from attention.cu): every bound comes from device memory
// (cu_seqlens, kv_lens, block tables); keys past a tile's last bound are zero
// in shared memory (never loaded), so in a correct run a masked key never
// multiplies a NaN V; a key inside a row's range that is NaN makes the row
// NaN; a block id outside [0, num_blocks), or a table index past
// max_blocks_per_seq, reads as NaN without being dereferenced. Causal tiles
// above the diagonal are skipped; only tiles crossing a row's bound are masked.
// Note: the tensor core multiplies a whole tile, so under an injected fault a
// NaN V inside the loaded range reaches the other rows of that tile too
// (0 * NaN); the fp32 kernel confines it to the rows whose range holds it.
#include <algorithm>
#include <cmath>

#include "kernels/attention_mma.h"
#include "kernels/common.cuh"
#include "kernels/mma_bf16.cuh"
#include "kernels/wgmma.cuh"

namespace pb::kernels {

// Knobs shared by every head dim.
struct MmaConfig {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 16 * kWarps;  // query vectors (row, q head) per CTA: 16 per warp
};

// Per-head-dim tile traits: keys per K/V tile, cp.async ring depth, whether Q
// fragments live in registers (else re-read from shared memory per k-step),
// and the CTAs per SM the register cap aims at. Shared memory per CTA:
// (kBlockM + 2 * kStages * kBlockN) * D * 2 bytes.
template <int D_, int BlockN, int Stages, bool QInRegs, int MinCtas>
struct MmaTraits {
  static constexpr int D = D_;
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr bool kQInRegs = QInRegs;
  static constexpr int kMinCtas = MinCtas;
  static constexpr int kBlockM = MmaConfig::kBlockM;
  static constexpr int kChunks = D / 8;  // 16-byte chunks per head row
  static constexpr size_t kSmemBytes = static_cast<size_t>(kBlockM + 2 * kStages * kBlockN) * D * 2;
  static_assert(D % 64 == 0, "swizzle: at least 8 chunks per row, whole 8-chunk groups");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 16, "P*V k-steps of 16 keys");
  static_assert((kBlockN / 8) % 2 == 0 && (D / 8) % 2 == 0, "ldmatrix.x4 loads two n-tiles");
  static_assert(kStages >= 2, "a ring of at least two K/V stages");
  static_assert(MmaConfig::kThreads % kChunks == 0, "a thread owns one chunk column of a tile");
  static_assert((MmaConfig::kThreads / kChunks) % 8 == 0, "the swizzle phase of a thread's rows is fixed");
  static_assert(kBlockN % (MmaConfig::kThreads / kChunks) == 0, "K/V tile rows split evenly");
  static_assert(kBlockM % (MmaConfig::kThreads / kChunks) == 0, "Q tile rows split evenly");
  static_assert(kSmemBytes <= 227 * 1024, "fits an H200 SM's shared memory");
};

// The compiled variants; index 0 of each head dim is the default.
using Mma64v0 = MmaTraits<64, 64, 3, true, 2>;
using Mma64v1 = MmaTraits<64, 64, 2, true, 2>;
using Mma128v0 = MmaTraits<128, 64, 2, true, 1>;
using Mma128v1 = MmaTraits<128, 64, 3, true, 1>;
using Mma128v2 = MmaTraits<128, 64, 2, false, 1>;
using Mma128v3 = MmaTraits<128, 128, 2, false, 1>;
using Mma256v0 = MmaTraits<256, 32, 2, false, 1>;
using Mma256v1 = MmaTraits<256, 64, 2, false, 1>;

// Version 3 traits (Hopper wgmma): per head dim, keys per K/V tile and the
// cp.async ring depth. Shared memory: (kBlockM + 2 * kStages * kBlockN) * D * 2
// bytes, every tile stored as D/64 slabs of [rows][64] bf16 (128-byte rows) in
// the 128-byte swizzle wgmma's descriptors describe.
template <int D_, int BlockN, int Stages, int MinCtas>
struct WgTraits {
  static constexpr int D = D_;
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr int kMinCtas = MinCtas;
  static constexpr int kBlockM = MmaConfig::kBlockM;  // two warpgroups of 64 rows
  static constexpr int kChunks = D / 8;
  static constexpr size_t kSmemBytes = static_cast<size_t>(kBlockM + 2 * kStages * kBlockN) * D * 2;
  static_assert(MmaConfig::kWarps == 8 && kBlockM == 128, "two warpgroups of 64 query vectors");
  static_assert(D == 64 || D == 128 || D == 256, "P*V is one m64nDk16 wgmma per k-step (N <= 256)");
  static_assert(kBlockN == 64 || kBlockN == 128, "S is one m64nNk16 wgmma per k-step");
  static_assert(kStages >= 2, "a ring of at least two K/V stages");
  static_assert((MmaConfig::kThreads / kChunks) % 8 == 0, "the swizzle phase of a thread's rows is fixed");
  static_assert(kBlockN % (MmaConfig::kThreads / kChunks) == 0, "K/V tile rows split evenly");
  static_assert((kBlockN * 128) % 1024 == 0 && (kBlockM * 128) % 1024 == 0, "slabs keep 1024-byte swizzle atoms aligned");
  static_assert(kSmemBytes <= 227 * 1024, "fits an H200 SM's shared memory");
};
using Wg64v0 = WgTraits<64, 128, 2, 1>;
using Wg64v1 = WgTraits<64, 64, 3, 1>;
using Wg128v0 = WgTraits<128, 128, 2, 1>;
using Wg128v1 = WgTraits<128, 64, 3, 1>;
using Wg128v2 = WgTraits<128, 64, 2, 2>;  // two CTAs per SM: one's softmax overlaps the other's wgmma
using Wg256v0 = WgTraits<256, 64, 2, 1>;

namespace {

struct MmaParams {
  int batch_size, total_tokens, max_blocks_per_seq;
  int num_q_heads, num_kv_heads;
  int group;          // q heads per kv head
  int heads_per_cta;  // q heads of the group one CTA serves
  int head_chunks;    // ceil(group / heads_per_cta)
  int rows_per_tile;  // kBlockM / heads_per_cta
  int block_size, num_blocks;
  int block_shift;    // log2(block_size) when it is a power of two, else -1
  int bound_extra;    // 0, or 1 under the causal-off-by-one fault
  float scale_log2;   // scale * log2(e): softmax in base 2
  const int32_t* cu_seqlens;
  const int32_t* kv_lens;
  const uint64_t* block_table_ptrs;
  const AttnWorkItem* work;
  const uint16_t* q_rot;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  uint16_t* out;
};

// ---- PTX wrappers ---------------------------------------------------------
// (smem_u32 and the cp.async wrappers: kernels/common.cuh)
__device__ __forceinline__ void st_shared16(uint32_t dst, uint32_t w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst), "r"(w) : "memory");
}
// (ldmatrix_x4, ldmatrix_x4_trans, mma_bf16: kernels/mma_bf16.cuh)

// Byte offset of 16-byte chunk `ch` of row `row` in a [rows][D] bf16 tile:
// the chunk's low 3 bits XOR the row's low 3 bits, so the 8 rows an ldmatrix
// phase reads (and a warp's cp.async writes) hit 8 different bank groups.
template <int D>
__device__ __forceinline__ uint32_t swz(int row, int ch) {
  return static_cast<uint32_t>(row * (D * 2) + ((ch ^ (row & 7)) << 4));
}

// Version 2 (tensor cores). Warp w owns query vectors 16w..16w+15; lane
// (g = lane / 4, t = lane % 4) holds rows g and g + 8 of every m16n8 fragment,
// so a row's softmax state lives in a quad (two shuffles per reduction).
template <class Tr>
__global__ void __launch_bounds__(MmaConfig::kThreads, Tr::kMinCtas) attention_mma_kernel(MmaParams p) {
  using namespace detail;
  constexpr int D = Tr::D;
  constexpr int M = Tr::kBlockM;
  constexpr int N = Tr::kBlockN;
  constexpr int S = Tr::kStages;
  constexpr int CH = Tr::kChunks;
  constexpr int RSTEP = MmaConfig::kThreads / CH;  // tile rows covered per pass of the CTA
  constexpr int KV_ROWS = N / RSTEP;               // K/V rows this thread loads per tile
  constexpr int Q_ROWS = M / RSTEP;
  constexpr int KSTEPS = D / 16;                   // k-steps of Q K^T
  constexpr int NT_S = N / 8;                      // n-tiles of S per warp
  constexpr int NT_O = D / 8;                      // n-tiles of O per warp
  constexpr int KSTEPS_PV = N / 16;                // k-steps of P V
  constexpr uint32_t kRowBytes = D * 2;
  constexpr uint32_t kTileBytes = N * kRowBytes;

  extern __shared__ uint4 smem4[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem4);  // [M][D]
  const uint32_t q_base = smem_u32(Qs);
  const uint32_t k_base = q_base + M * kRowBytes;     // [S][N][D]
  const uint32_t v_base = k_base + S * kTileBytes;    // [S][N][D]

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;

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
  const int row0 = w.tile * p.rows_per_tile;
  if (row0 >= count) return;
  const int nrows = min(p.rows_per_tile, count - row0);
  const int kv_len = clamp_int(p.kv_lens[b], 0, p.max_blocks_per_seq * p.block_size);
  const int chunk_start = max(kv_len - count, 0);
  const int32_t* table = reinterpret_cast<const int32_t*>(p.block_table_ptrs[b]);
  const int head0 = kvh * p.group + hc * p.heads_per_cta;
  const int nheads = min(p.heads_per_cta, p.group - hc * p.heads_per_cta);
  // Token at cache index pos attends keys 0..pos (+1 under the fault).
  const int base_bound = chunk_start + row0 + p.bound_extra;
  const int bound_lo = base_bound;
  const int bound_hi = base_bound + nrows - 1;
  const int num_tiles = bound_hi / N + 1;

  // This thread's loader column and rows: chunk ld_ch of rows ld_row + RSTEP * i.
  const int ld_ch = tid % CH, ld_row = tid / CH;
  const uint32_t ld_off = swz<D>(ld_row, ld_ch);  // + i * RSTEP * kRowBytes (same swizzle phase)

  // Q tile: query vector v = (row rl, head hh); padding vectors duplicate a real one.
#pragma unroll
  for (int i = 0; i < Q_ROWS; ++i) {
    const int v = ld_row + i * RSTEP;
    const int rl = min(v / p.heads_per_cta, nrows - 1);
    const int hh = min(v - (v / p.heads_per_cta) * p.heads_per_cta, nheads - 1);
    const size_t qrow = static_cast<size_t>(sr.begin + row0 + rl) * p.num_q_heads + head0 + hh;
    cp_async16(q_base + ld_off + i * RSTEP * kRowBytes, p.q_rot + qrow * D + ld_ch * 8);
  }

  // K/V tile kt into ring stage st. Keys past the tile's last bound: zeros (not
  // loaded). Bad table index or block id: NaN, not dereferenced. One table read
  // per tile row this thread loads (its CH - 1 neighbours read the same entry).
  const size_t kv_row_stride = static_cast<size_t>(p.num_kv_heads) * D;
  const size_t head_off = static_cast<size_t>(kvh) * D + ld_ch * 8;
  auto load_kv = [&](int kt, int st) {
    const int j0 = kt * N;
    int blk[KV_ROWS], jj[KV_ROWS];
#pragma unroll
    for (int i = 0; i < KV_ROWS; ++i) {
      const int j = j0 + ld_row + i * RSTEP;
      jj[i] = j;
      const int bi = j / p.block_size;
      blk[i] = j > bound_hi ? 0 : (bi <= p.max_blocks_per_seq ? __ldg(table + bi) : -1);
    }
#pragma unroll
    for (int i = 0; i < KV_ROWS; ++i) {
      const uint32_t dk = k_base + st * kTileBytes + ld_off + i * RSTEP * kRowBytes;
      const uint32_t dv = dk + (v_base - k_base);
      if (jj[i] > bound_hi) {
        st_shared16(dk, 0u);
        st_shared16(dv, 0u);
      } else if (blk[i] < 0 || blk[i] >= p.num_blocks) {
        st_shared16(dk, 0x7fc07fc0u);
        st_shared16(dv, 0x7fc07fc0u);
      } else {
        const int bi = jj[i] / p.block_size;
        const size_t slot = static_cast<size_t>(blk[i]) * p.block_size + (jj[i] - bi * p.block_size);
        const size_t off = slot * kv_row_stride + head_off;
        cp_async16(dk, p.k_cache + off);
        cp_async16(dv, p.v_cache + off);
      }
    }
  };

  // Prologue: Q with tile 0 in group 0, tiles 1..S-2 in their own groups.
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < num_tiles) load_kv(s, s);
    cp_async_commit();
  }

  // Row bounds of this lane's two rows (vectors 16w + g and 16w + g + 8).
  const int m0 = warp * 16;
  int bound[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) bound[hr] = base_bound + min((m0 + g + 8 * hr) / p.heads_per_cta, nrows - 1);

  // ldmatrix lane addressing. The swizzle phase of every row a lane addresses is lane & 7.
  const int x7 = lane & 7;
  // A (Q): rows m0 + lane % 16, chunk 2ks + lane / 16.
  const uint32_t qa_row = q_base + (m0 + (lane & 15)) * kRowBytes;
  const int qa_hi = lane >> 4;
  // B of S (K, non-trans): rows (lane / 16) * 8 + lane % 8 of an n-tile pair, chunk 2ks + (lane / 8) % 2.
  const uint32_t kb_row = (((lane >> 4) << 3) + x7) * kRowBytes;
  const int kb_lo = (lane >> 3) & 1;
  // B of O (V, trans): key rows lane % 16 of a k-step, chunk nt + lane / 16.
  const uint32_t vb_row = (lane & 15) * kRowBytes;
  const int vb_hi = lane >> 4;

  float o[NT_O][4];
#pragma unroll
  for (int n = 0; n < NT_O; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max of raw scores (unscaled)
  float l_run[2] = {0.f, 0.f};              // this lane's partial row sums
  uint32_t qf[Tr::kQInRegs ? KSTEPS : 1][4];

#pragma unroll 1
  for (int kt = 0; kt < num_tiles; ++kt) {
    cp_async_wait<S - 2>();
    __syncthreads();  // tile kt landed for all; every warp is done with tile kt - 1's stage
    if (kt + S - 1 < num_tiles) load_kv(kt + S - 1, (kt + S - 1) % S);
    cp_async_commit();

    if constexpr (Tr::kQInRegs) {
      if (kt == 0) {
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks)
          ldmatrix_x4(qa_row + (((2 * ks + qa_hi) ^ x7) << 4), qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3]);
      }
    }
    const int st = kt % S;
    const uint32_t kt_base = k_base + st * kTileBytes;
    const uint32_t vt_base = v_base + st * kTileBytes;

    // S = Q K^T for this warp's 16 rows x N keys.
    float s[NT_S][4];
#pragma unroll
    for (int n = 0; n < NT_S; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      uint32_t a[4];
      if constexpr (Tr::kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = qf[ks][e];
      } else {
        ldmatrix_x4(qa_row + (((2 * ks + qa_hi) ^ x7) << 4), a[0], a[1], a[2], a[3]);
      }
      const uint32_t kcol = ((2 * ks + kb_lo) ^ x7) << 4;
#pragma unroll
      for (int n = 0; n < NT_S; n += 2) {
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4(kt_base + n * 8 * kRowBytes + kb_row + kcol, b0, b1, b2, b3);
        mma_bf16(s[n], a, b0, b1);
        mma_bf16(s[n + 1], a, b2, b3);
      }
    }

    // Online softmax (base 2). Masked keys: p = 0 explicitly, never exp(-inf - -inf).
    const int j0 = kt * N;
    float alpha[2];
    online_softmax_step(s, j0, j0 + N - 1 > bound_lo, bound, t, p.scale_log2, m_run, l_run, alpha);
    rescale_rows(o, alpha);

    // O += P V: P rounded to bf16 in registers (the C fragment of S is the A fragment of P V).
#pragma unroll
    for (int kk = 0; kk < KSTEPS_PV; ++kk) {
      uint32_t a[4];
      a[0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const uint32_t vrow = vt_base + kk * 16 * kRowBytes + vb_row;
#pragma unroll
      for (int n = 0; n < NT_O; n += 2) {
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4_trans(vrow + (((n + vb_hi) ^ x7) << 4), b0, b1, b2, b3);
        mma_bf16(o[n], a, b0, b1);
        mma_bf16(o[n + 1], a, b2, b3);
      }
    }
  }

  // out = O / l, rounded to bf16, staged through this warp's own Q rows (no other
  // warp reads them), then written as 16-byte row chunks.
  float inv_l[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float l = l_run[hr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv_l[hr] = 1.f / l;
  }
  __syncwarp();  // this warp's last ldmatrix of its Q rows is done
  uint32_t* stage = reinterpret_cast<uint32_t*>(Qs);
#pragma unroll
  for (int n = 0; n < NT_O; ++n) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = m0 + g + 8 * hr;
      const uint32_t byte = swz<D>(row, n) + 4 * t;
      stage[byte / 4] = pack_bf16x2(o[n][2 * hr] * inv_l[hr], o[n][2 * hr + 1] * inv_l[hr]);
    }
  }
  __syncwarp();
  const uint4* stage4 = reinterpret_cast<const uint4*>(Qs);
#pragma unroll
  for (int i = 0; i < 16 * CH / 32; ++i) {
    const int idx = lane + 32 * i;
    const int r = idx / CH, ch = idx % CH;
    const int v = m0 + r;
    const int rl = v / p.heads_per_cta, hh = v - rl * p.heads_per_cta;
    if (rl >= nrows || hh >= nheads) continue;  // a padding vector
    const uint4 val = stage4[swz<D>(v, ch) / 16];
    uint16_t* dst = p.out + (static_cast<size_t>(sr.begin + row0 + rl) * p.num_q_heads + head0 + hh) * D + ch * 8;
    *reinterpret_cast<uint4*>(dst) = val;
  }
}


// ---- Version 3: Hopper warpgroup MMA (wgmma, sm_90a) ------------------------
// Same work decomposition, loader, masking and NaN rules as version 2; the two
// warpgroups each own 64 query vectors and issue S = Q K^T as m64nNk16 wgmma
// with Q and K read by the tensor cores straight from shared memory
// (descriptors, 128-byte swizzle, K-major), then O += P V as m64nDk16 wgmma
// with P from registers (the S accumulator layout is the A fragment layout) and
// V from shared memory as an MN-major operand. A warpgroup reads each K/V tile
// once, where version 2's four warps each read it: a quarter of the shared
// memory traffic, and no ldmatrix in the inner loop. Two issue-slot savings on
// top (v3.1): block index/offset by shift and mask for power-of-two block
// sizes, and O rescaled only when a row's running max moved (x * 1 skipped).
template <class Tr>
__global__ void __launch_bounds__(MmaConfig::kThreads, Tr::kMinCtas) attention_wgmma_kernel(MmaParams p) {
#ifdef PB_WGMMA_ENABLED
  using namespace detail;
  constexpr int D = Tr::D;
  constexpr int M = Tr::kBlockM;
  constexpr int N = Tr::kBlockN;
  constexpr int S = Tr::kStages;
  constexpr int CH = Tr::kChunks;
  constexpr int RSTEP = MmaConfig::kThreads / CH;
  constexpr int KV_ROWS = N / RSTEP;
  constexpr int Q_ROWS = M / RSTEP;
  constexpr int KSTEPS = D / 16;
  constexpr int NT_S = N / 8;
  constexpr int NT_O = D / 8;
  constexpr int KSTEPS_PV = N / 16;
  constexpr uint32_t kQBytes = M * D * 2;
  constexpr uint32_t kTileBytes = N * D * 2;

  extern __shared__ __align__(1024) uint8_t smem_wg[];
  const uint32_t q_base = smem_u32(smem_wg);  // [D/64][M][64]
  const uint32_t k_base = q_base + kQBytes;   // [S][D/64][N][64]
  const uint32_t v_base = k_base + S * kTileBytes;
  if (q_base & 1023) __trap();  // the swizzle atoms need a 1024-byte aligned base

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2;
  const int g = lane >> 2, t = lane & 3;

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
  const int row0 = w.tile * p.rows_per_tile;
  if (row0 >= count) return;
  const int nrows = min(p.rows_per_tile, count - row0);
  const int kv_len = clamp_int(p.kv_lens[b], 0, p.max_blocks_per_seq * p.block_size);
  const int chunk_start = max(kv_len - count, 0);
  const int32_t* table = reinterpret_cast<const int32_t*>(p.block_table_ptrs[b]);
  const int head0 = kvh * p.group + hc * p.heads_per_cta;
  const int nheads = min(p.heads_per_cta, p.group - hc * p.heads_per_cta);
  const int base_bound = chunk_start + row0 + p.bound_extra;
  const int bound_lo = base_bound;
  const int bound_hi = base_bound + nrows - 1;
  const int num_tiles = bound_hi / N + 1;

  const int ld_ch = tid % CH, ld_row = tid / CH;
  const uint32_t q_ld = q_base + slab_off<M>(ld_row, ld_ch);  // + i * RSTEP * 128
  const uint32_t kv_ld = slab_off<N>(ld_row, ld_ch);

#pragma unroll
  for (int i = 0; i < Q_ROWS; ++i) {
    const int v = ld_row + i * RSTEP;
    const int rl = min(v / p.heads_per_cta, nrows - 1);
    const int hh = min(v - (v / p.heads_per_cta) * p.heads_per_cta, nheads - 1);
    const size_t qrow = static_cast<size_t>(sr.begin + row0 + rl) * p.num_q_heads + head0 + hh;
    cp_async16(q_ld + i * RSTEP * 128, p.q_rot + qrow * D + ld_ch * 8);
  }

  const size_t kv_row_stride = static_cast<size_t>(p.num_kv_heads) * D;
  const size_t head_off = static_cast<size_t>(kvh) * D + ld_ch * 8;
  auto load_kv = [&](int kt, int st) {
    const int j0 = kt * N;
    // Block index and offset of each row: a shift and a mask for the usual
    // power-of-two block sizes (an integer division costs ~20 instructions).
    int blk[KV_ROWS], jj[KV_ROWS], in_blk[KV_ROWS];
#pragma unroll
    for (int i = 0; i < KV_ROWS; ++i) {
      const int j = j0 + ld_row + i * RSTEP;
      jj[i] = j;
      const int bi = p.block_shift >= 0 ? j >> p.block_shift : j / p.block_size;
      in_blk[i] = j - bi * p.block_size;
      blk[i] = j > bound_hi ? 0 : (bi <= p.max_blocks_per_seq ? __ldg(table + bi) : -1);
    }
#pragma unroll
    for (int i = 0; i < KV_ROWS; ++i) {
      const uint32_t dk = k_base + st * kTileBytes + kv_ld + i * RSTEP * 128;
      const uint32_t dv = dk + (v_base - k_base);
      if (jj[i] > bound_hi) {
        st_shared16(dk, 0u);
        st_shared16(dv, 0u);
      } else if (blk[i] < 0 || blk[i] >= p.num_blocks) {
        st_shared16(dk, 0x7fc07fc0u);
        st_shared16(dv, 0x7fc07fc0u);
      } else {
        const size_t slot = static_cast<size_t>(blk[i]) * p.block_size + in_blk[i];
        const size_t off = slot * kv_row_stride + head_off;
        cp_async16(dk, p.k_cache + off);
        cp_async16(dv, p.v_cache + off);
      }
    }
  };

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < num_tiles) load_kv(s, s);
    cp_async_commit();
  }

  const int m0 = warp * 16;
  int bound[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) bound[hr] = base_bound + min((m0 + g + 8 * hr) / p.heads_per_cta, nrows - 1);

  float o[NT_O][4];
#pragma unroll
  for (int n = 0; n < NT_O; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.f, 0.f};
  const uint32_t q_wg = q_base + wg * 64 * 128;  // this warpgroup's 64 rows in every slab

#pragma unroll 1
  for (int kt = 0; kt < num_tiles; ++kt) {
    cp_async_wait<S - 2>();
    fence_proxy_async();  // this thread's shared-memory writes -> visible to the tensor cores' reads
    __syncthreads();
    if (kt + S - 1 < num_tiles) load_kv(kt + S - 1, (kt + S - 1) % S);
    cp_async_commit();
    const int st = kt % S;
    const uint32_t kt_base = k_base + st * kTileBytes;
    const uint32_t vt_base = v_base + st * kTileBytes;

    // S = Q K^T: KSTEPS wgmma of 64 x N x 16, both operands K-major in shared memory.
    float s[NT_S][4];
#pragma unroll
    for (int n = 0; n < NT_S; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      const uint64_t da = gmma_desc(q_wg + (ks >> 2) * (M * 128) + (ks & 3) * 32, 16, 1024);
      const uint64_t db = gmma_desc(kt_base + (ks >> 2) * (N * 128) + (ks & 3) * 32, 16, 1024);
      if constexpr (N == 64) wgmma_ss_n64(s, da, db, ks > 0);
      else wgmma_ss_n128(s, da, db, ks > 0);
    }
    wgmma_commit();
    wgmma_wait0();

    const int j0 = kt * N;
    float alpha[2];
    online_softmax_step(s, j0, j0 + N - 1 > bound_lo, bound, t, p.scale_log2, m_run, l_run, alpha);
    if (alpha[0] != 1.f || alpha[1] != 1.f) {  // the max moved: rescale (skipping x * 1 is exact)
      rescale_rows(o, alpha);
    }

    // O += P V: KSTEPS_PV wgmma of 64 x D x 16, P (bf16) from registers, V MN-major
    // (LBO: the next 64 dims = the next slab; SBO: the next 8 keys).
    uint32_t pa[KSTEPS_PV][4];
#pragma unroll
    for (int kk = 0; kk < KSTEPS_PV; ++kk) {
      pa[kk][0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KSTEPS_PV; ++kk) {
      const uint64_t db = gmma_desc(vt_base + kk * 16 * 128, N * 128, 1024);
      if constexpr (D == 64) wgmma_rs_n64(o, pa[kk], db);
      else if constexpr (D == 128) wgmma_rs_n128(o, pa[kk], db);
      else wgmma_rs_n256(o, pa[kk], db);
    }
    wgmma_commit();
    wgmma_wait0();
  }

  float inv_l[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float l = l_run[hr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv_l[hr] = 1.f / l;
  }
  // The warpgroup's wgmma reads of its Q rows are complete in all four warps.
  if (wg == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else asm volatile("bar.sync 2, 128;\n" ::: "memory");
  uint32_t* stage = reinterpret_cast<uint32_t*>(smem_wg);
#pragma unroll
  for (int n = 0; n < NT_O; ++n) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = m0 + g + 8 * hr;
      stage[(slab_off<M>(row, n) + 4 * t) / 4] =
          pack_bf16x2(o[n][2 * hr] * inv_l[hr], o[n][2 * hr + 1] * inv_l[hr]);
    }
  }
  __syncwarp();
  const uint4* stage4 = reinterpret_cast<const uint4*>(smem_wg);
#pragma unroll
  for (int i = 0; i < 16 * CH / 32; ++i) {
    const int idx = lane + 32 * i;
    const int r = idx / CH, ch = idx % CH;
    const int v = m0 + r;
    const int rl = v / p.heads_per_cta, hh = v - rl * p.heads_per_cta;
    if (rl >= nrows || hh >= nheads) continue;
    const uint4 val = stage4[slab_off<M>(v, ch) / 16];
    uint16_t* dst = p.out + (static_cast<size_t>(sr.begin + row0 + rl) * p.num_q_heads + head0 + hh) * D + ch * 8;
    *reinterpret_cast<uint4*>(dst) = val;
  }
#else
  __trap();  // built without sm_90a: the launcher never selects this kernel then
#endif
}

struct GroupSplit {
  int group, heads_per_cta, head_chunks, rows_per_tile;
};
GroupSplit mma_group_split(const LayerShape& shape) {
  GroupSplit g;
  g.group = shape.num_kv_heads > 0 ? shape.num_q_heads / shape.num_kv_heads : 1;
  if (g.group < 1) g.group = 1;
  g.heads_per_cta = std::min(g.group, MmaConfig::kBlockM);
  g.head_chunks = (g.group + g.heads_per_cta - 1) / g.heads_per_cta;
  g.rows_per_tile = MmaConfig::kBlockM / g.heads_per_cta;
  return g;
}

// The kernel of a traits type: version 2 (mma.sync) or version 3 (wgmma).
template <class Tr> struct KernelOf;
template <int D, int BN, int ST, bool QR, int MC>
struct KernelOf<MmaTraits<D, BN, ST, QR, MC>> {
  static constexpr bool kWgmma = false;
  static constexpr bool kQInRegs = QR;
  static auto fn() { return attention_mma_kernel<MmaTraits<D, BN, ST, QR, MC>>; }
};
template <int D, int BN, int ST, int MC>
struct KernelOf<WgTraits<D, BN, ST, MC>> {
  static constexpr bool kWgmma = true;
  static constexpr bool kQInRegs = false;
  static auto fn() { return attention_wgmma_kernel<WgTraits<D, BN, ST, MC>>; }
};

template <class Tr>
cudaError_t configure() {
  static cudaError_t state = cudaErrorNotReady;  // the attribute is per function; set it once
  if (state == cudaErrorNotReady)
    state = cudaFuncSetAttribute(KernelOf<Tr>::fn(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(Tr::kSmemBytes));
  return state;
}

template <class Tr>
cudaError_t launch_tr(cudaStream_t stream, const MmaParams& p, unsigned grid) {
  const cudaError_t e = configure<Tr>();
  if (e != cudaSuccess) return e;
  KernelOf<Tr>::fn()<<<grid, MmaConfig::kThreads, Tr::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <class Tr>
AttnMmaVariant describe(int variant, const char* name) {
  AttnMmaVariant v;
  v.head_dim = Tr::D;
  v.variant = variant;
  v.name = name;
  v.wgmma = KernelOf<Tr>::kWgmma;
  v.block_m = Tr::kBlockM;
  v.block_n = Tr::kBlockN;
  v.stages = Tr::kStages;
  v.q_in_regs = KernelOf<Tr>::kQInRegs;
  v.threads = MmaConfig::kThreads;
  v.smem_bytes = Tr::kSmemBytes;
  cudaFuncAttributes a{};
  if (configure<Tr>() == cudaSuccess && cudaFuncGetAttributes(&a, KernelOf<Tr>::fn()) == cudaSuccess) {
    v.regs = a.numRegs;
    v.local_bytes = a.localSizeBytes;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, KernelOf<Tr>::fn(), MmaConfig::kThreads,
                                                      Tr::kSmemBytes) == cudaSuccess)
      v.ctas_per_sm = n;
  }
  cudaGetLastError();
  return v;
}

// Whether device 0 runs sm_90a code (wgmma): compute capability 9.0.
bool device_has_wgmma() {
  static int state = -1;
  if (state < 0) {
    int dev = 0, major = 0, minor = 0;
    state = cudaGetDevice(&dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
                    major == 9 && minor == 0
                ? 1
                : 0;
    cudaGetLastError();
  }
  return state == 1;
}

}  // namespace

bool attention_mma_supported(const LayerShape& shape) {
  return (shape.head_dim == 64 || shape.head_dim == 128 || shape.head_dim == 256) && shape.num_kv_heads > 0 &&
         shape.num_q_heads % shape.num_kv_heads == 0 && shape.block_size > 0;
}

bool wgmma_available() { return device_has_wgmma(); }

int attention_mma_rows_per_tile(const LayerShape& shape) { return mma_group_split(shape).rows_per_tile; }

std::vector<AttnWorkItem> plan_attention_mma_work(const LayerShape& shape,
                                                  const std::vector<int32_t>& cu_seqlens_host,
                                                  const std::vector<int32_t>& kv_lens_host) {
  return plan_attention_tiles(shape, attention_mma_rows_per_tile(shape), cu_seqlens_host, kv_lens_host);
}

cudaError_t launch_attention_mma(cudaStream_t stream, const AttnArgs& a) {
  const LayerShape& shape = a.shape;
  int variant = a.variant;
  if (!attention_mma_supported(shape)) return cudaErrorInvalidValue;
  if (a.num_work <= 0 || a.total_tokens == 0) return cudaSuccess;
  const GroupSplit g = mma_group_split(shape);
  MmaParams p;
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
  p.block_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if ((1 << sh) == shape.block_size) p.block_shift = sh;
  p.num_blocks = shape.num_blocks;
  p.bound_extra = a.causal_off_by_one ? 1 : 0;
  p.scale_log2 = a.scale * 1.4426950408889634f;
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
  const unsigned gr = static_cast<unsigned>(grid);
  if (variant < 0) variant = attention_mma_default_variant(shape.head_dim);
  if (variant >= kFirstWgmmaVariant && !device_has_wgmma()) return cudaErrorInvalidDeviceFunction;
  switch (shape.head_dim * 16 + variant) {
    case 64 * 16 + 0: return launch_tr<Mma64v0>(stream, p, gr);
    case 64 * 16 + 1: return launch_tr<Mma64v1>(stream, p, gr);
    case 128 * 16 + 0: return launch_tr<Mma128v0>(stream, p, gr);
    case 128 * 16 + 1: return launch_tr<Mma128v1>(stream, p, gr);
    case 128 * 16 + 2: return launch_tr<Mma128v2>(stream, p, gr);
    case 128 * 16 + 3: return launch_tr<Mma128v3>(stream, p, gr);
    case 256 * 16 + 0: return launch_tr<Mma256v0>(stream, p, gr);
    case 256 * 16 + 1: return launch_tr<Mma256v1>(stream, p, gr);
    case 64 * 16 + 8: return launch_tr<Wg64v0>(stream, p, gr);
    case 64 * 16 + 9: return launch_tr<Wg64v1>(stream, p, gr);
    case 128 * 16 + 8: return launch_tr<Wg128v0>(stream, p, gr);
    case 128 * 16 + 9: return launch_tr<Wg128v1>(stream, p, gr);
    case 128 * 16 + 10: return launch_tr<Wg128v2>(stream, p, gr);
    case 256 * 16 + 8: return launch_tr<Wg256v0>(stream, p, gr);
    default: return cudaErrorInvalidValue;
  }
}

std::vector<AttnMmaVariant> attention_mma_variants(int head_dim) {
  std::vector<AttnMmaVariant> v;
  switch (head_dim) {
    case 64:
      v = {describe<Mma64v0>(0, "N64.S3.Qreg"), describe<Mma64v1>(1, "N64.S2.Qreg")};
      if (device_has_wgmma()) v.insert(v.end(), {describe<Wg64v0>(8, "wg.N128.S2"), describe<Wg64v1>(9, "wg.N64.S3")});
      break;
    case 128:
      v = {describe<Mma128v0>(0, "N64.S2.Qreg"), describe<Mma128v1>(1, "N64.S3.Qreg"),
           describe<Mma128v2>(2, "N64.S2.Qsmem"), describe<Mma128v3>(3, "N128.S2.Qsmem")};
      if (device_has_wgmma()) v.insert(v.end(), {describe<Wg128v0>(8, "wg.N128.S2"), describe<Wg128v1>(9, "wg.N64.S3"),
                                                describe<Wg128v2>(10, "wg.N64.S2.2cta")});
      break;
    case 256:
      v = {describe<Mma256v0>(0, "N32.S2.Qsmem"), describe<Mma256v1>(1, "N64.S2.Qsmem")};
      if (device_has_wgmma()) v.push_back(describe<Wg256v0>(8, "wg.N64.S2"));
      break;
    default: break;
  }
  return v;
}

// Measured on the H200 (kernels/PERF-NOTES.md): the wgmma kernel where the
// device runs it, else the fastest mma.sync variant of each head dim.
int attention_mma_default_variant(int head_dim) {
  if (device_has_wgmma()) return head_dim == 64 ? 9 : (head_dim == 128 ? 10 : 8);
  return head_dim == 128 ? 3 : 1;
}

}  // namespace pb::kernels
