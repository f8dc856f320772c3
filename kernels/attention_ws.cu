// attention_ws.cu: version 4 of the paged varlen causal GQA attention, after
// FlashAttention-3: a persistent CTA (one per SM) of a producer warpgroup and C
// consumer warpgroups (C = 2; 3 at d64: WsTraits) walks its list of the schedule
// (plan_attention_ws_schedule: the work list's entries by list scheduling); an entry is
// one work item (stream, q-tile) and one kv head, M = 64 C query vectors (heads packed into M).
//   warpgroup 0, producer (setmaxnreg down to 40, or 32 with three consumers):
//     warp 0 loads Q and the K tiles, warp 1 the V tiles, through the stream's block table into two
//     shared-memory rings (the consumers use K of tile k with V of tile k - 1;
//     WsTraits says which ring is deeper), each stage with its own full/empty mbarriers; each ring's
//     warp waits only on its own ring's free stages. A tile goes piece by piece
//     (the keys of one cache block): a piece in a valid block with its keys in
//     bound goes by TMA (one box holding all D dims of its keys, 128-byte swizzle,
//     completion counted in bytes on the full barrier); a V piece crossing the
//     causal bound or lying past it, and any piece in a bad block, goes by
//     cp.async and st.shared (zeros past the bound, NaN for a bad block), fenced
//     to the async proxy before the arrival. K needs no zeros: a score past every
//     row's bound is replaced by -inf, so a K piece starting in bound goes by TMA
//     whole and one past the bound is not loaded.
//   warpgroups 1..C, consumers (setmaxnreg up to 232, or 160 with three): each
//     owns 64 query vectors; S = Q K^T as wgmma from shared memory; online softmax in fp32
//     (base 2); P rounded to bf16 in registers as the A operand of O += P V.
//     Inside a warpgroup the next tile's S wgmma is issued with the previous
//     tile's P V wgmma before the softmax (wait_group 1); between the
//     warpgroups named barriers hand the tensor cores over in turn (ping-pong,
//     round robin with three), so one's softmax runs under another's wgmma.
// Invariants (those of attention_mma.cu): every bound from device memory; values
// (V) past a tile's last bound are zero in shared memory; a bad block id or table
// index reads as NaN without a dereference; causal tiles above the diagonal are
// skipped, only tiles crossing a row's bound are masked; the roundings are the
// lp contract's (docs/TOLERANCES.md): bf16 q/k/v, fp32 S and softmax, P to
// bf16 before P V, the output to bf16.
#include <cuda.h>  // CUtensorMap and its enums (the encoder comes from the runtime)
#include <cudaTypedefs.h>

#include <algorithm>

#include "kernels/attention_mma.h"
#include "kernels/attention_ws.h"
#include "kernels/common.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/wgmma.cuh"

namespace pb::kernels {

// The CTA's warpgroups: one producer and C consumers of 64 query vectors each (M = 64 C).
// The launch allocates kThreads x (65536 / kThreads) registers (__launch_bounds__(kThreads,
// 1)); setmaxnreg only moves them: C = 2: 128 x 40 + 256 x 232 = 384 x 168; C = 3:
// 128 x 32 + 384 x 160 = 512 x 128. A larger count would leave the consumers'
// setmaxnreg.inc waiting for registers that are never freed (a hang).
template <int C>
struct WsConfig {
  static constexpr int kConsumers = C;
  static constexpr int kThreads = 128 * (1 + C);
  static constexpr int kBlockM = 64 * C;
  static constexpr int kProducerRegs = C == 2 ? 40 : 32;
  static constexpr int kConsumerRegs = C == 2 ? 232 : 160;
  static_assert(C == 2 || C == 3, "two or three consumer warpgroups");
  static_assert(128 * kProducerRegs + 128 * C * kConsumerRegs <= kThreads * (65536 / kThreads / 8 * 8),
                "setmaxnreg cannot hand out more registers than the launch allocated");
};

// Per-head-dim traits: keys per K/V tile, ring depths, Q buffers. Shared memory:
// QB x Q [D/64][128][64] + a K ring [SK][N/8][D/64][8][64] and a V ring [SV][...] bf16 +
// 2 SK + 2 SV + 2 QB mbarriers (+ 1 KB to align the base to a swizzle atom). K is
// consumed a tile ahead of V (S of tile k is issued with P V of tile k - 1), so a K
// tile is asked for SK - 1 tiles before its S and a V tile SV - 1 before its P V.
// Which ring gets the fifth stage was measured (H200, A-B-B-A, bit-identical; PERF-NOTES
// "ring depths"): at d128 K3 / V2, since K2 / V3 gained 1-2% on batches with many items
// but lost 1% at 1 x 16384 and 10% at 1 x 32768 (a single long stream streams K);
// at d256 K2 / V3: 0.3-1.2% faster on the four rows of issue 15's kind, and no slower
// on 1 x 32768 or 2 x 16384 (their run-to-run spread, 3-4%, is larger than any change). With
// two Q buffers the producer loads the next item's Q by TMA while the consumers work
// on this one; d256 has room for one (Q 64 KB + five stages of 32 KB), which its
// consumers load themselves, and keeps N = 64; the consumers' registers (O 128, S 32,
// P 16 per thread) fit 232. (d128 with three stages each and one Q buffer was slower on
// every row: the consumers' own Q loads cost more than the stage gains.)
template <int D_, int BlockN, int KStages, int VStages, int QBuffers, int Consumers = 2>
struct WsTraits {
  using Config = WsConfig<Consumers>;
  static constexpr int kConsumers = Config::kConsumers, kThreads = Config::kThreads, kBlockM = Config::kBlockM;
  static constexpr int kProducerRegs = Config::kProducerRegs, kConsumerRegs = Config::kConsumerRegs;
  static constexpr int D = D_;
  static constexpr int kBlockN = BlockN;
  static constexpr int kKStages = KStages;
  static constexpr int kVStages = VStages;
  static constexpr int kQBuffers = QBuffers;  // 2: the producer loads the next item's Q during this one
  // O's rescale in the turn, between a tile's S and P V issues (under the S wgmma, as
  // FlashAttention-3 orders it), rather than after the softmax: measured faster at
  // d64 / d128 and 4-5% slower at d256 (O is 128 registers a thread there; PERF-NOTES "v6").
  static constexpr bool kRescaleInTurn = D_ <= 128;
  static constexpr uint32_t kQBytes = kBlockM * D * 2;
  static constexpr uint32_t kTileBytes = kBlockN * D * 2;
  static constexpr uint32_t kBarOffset = kQBuffers * kQBytes + (kKStages + kVStages) * kTileBytes;
  static constexpr int kBarriers = 2 * (kKStages + kVStages) + 2 * kQBuffers;
  static constexpr size_t kSmemBytes = kBarOffset + kBarriers * 8 + 1024;
  static_assert(D == 64 || D == 128 || D == 256, "P V is one m64nDk16 wgmma per k-step");
  static_assert(kBlockN == 64 || kBlockN == 128, "S is one m64nNk16 wgmma per k-step");
  static_assert(kKStages >= 2 && kVStages >= 2, "tile k + 1 loads while tile k is in use");
  static_assert(kQBuffers == 1 || kQBuffers == 2, "one Q buffer (loaded by the consumers) or two (by the producer)");
  static_assert(kSmemBytes <= 227 * 1024, "fits an H200 SM's shared memory");
};
// d64: three consumers (M = 192), as FlashAttention-3 does at d64: the softmax is a larger
// share of a tile there, and a third warpgroup keeps the tensor cores fed between turns.
using WsD64 = WsTraits<64, 128, 4, 3, 2, 3>;
using WsD128 = WsTraits<128, 128, 3, 2, 2>;
using WsD256 = WsTraits<256, 64, 2, 3, 1>;

namespace {

struct WsParams {
  int batch_size, total_tokens, max_blocks_per_seq;
  int num_q_heads, num_kv_heads;
  int group, heads_per_cta, head_chunks, rows_per_tile;
  int block_size, num_blocks;
  int block_shift;    // log2(block_size) when a power of two, else -1
  int tma_rows;       // rows of a TMA box; 0: cp.async only
  int q_tma;          // 1: the producer loads Q by TMA (two Q buffers and a Q tensor map)
  uint32_t q_tx;      // bytes of one item's Q boxes (heads_per_cta x rows_per_tile rows)
  int bound_extra;    // 1 under the causal-off-by-one fault
  int num_items;      // entries of the work list: num_work x kv heads x head chunks
  int num_ctas;       // the grid, which the schedule was planned for
  float scale_log2;
  const int32_t* cu_seqlens;
  const int32_t* kv_lens;
  const uint64_t* block_table_ptrs;
  const AttnWorkItem* work;
  const int32_t* schedule;  // num_ctas + 1 offsets, then at most num_items entries
  const int32_t* entries;   // schedule + num_ctas + 1
  const uint16_t* q_rot;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  uint16_t* out;
};

// One entry of the work list as a CTA sees it: (work item, kv head, head chunk)
// decoded, every bound read from device memory and clamped. valid == false for
// padding items ({-1, -1}), bad streams and tiles past a stream's end: the
// producer and the consumers skip the same entries.
struct WsItem {
  bool valid;
  int kvh, begin, row0, nrows, head0, nheads;
  int base_bound, bound_lo, bound_hi, num_tiles;
  const int32_t* table;
};
template <int N>
__device__ __forceinline__ WsItem ws_item(const WsParams& p, int x) {
  using namespace detail;
  WsItem w{};
  w.valid = false;
  if (x < 0 || x >= p.num_items) return w;
  const int per_item = p.num_kv_heads * p.head_chunks;
  const int item = x / per_item;
  const int yy = x - item * per_item;
  w.kvh = yy / p.head_chunks;
  const int hc = yy - w.kvh * p.head_chunks;
  const AttnWorkItem wi = p.work[item];
  const int b = wi.stream;
  if (b < 0 || b >= p.batch_size || wi.tile < 0) return w;
  const StreamRows sr = stream_rows(p.cu_seqlens, b, p.total_tokens);
  const int count = sr.count();
  w.row0 = wi.tile * p.rows_per_tile;
  if (w.row0 >= count) return w;
  w.begin = sr.begin;
  w.nrows = min(p.rows_per_tile, count - w.row0);
  const int kv_len = clamp_int(p.kv_lens[b], 0, p.max_blocks_per_seq * p.block_size);
  const int chunk_start = max(kv_len - count, 0);
  w.table = reinterpret_cast<const int32_t*>(p.block_table_ptrs[b]);
  w.head0 = w.kvh * p.group + hc * p.heads_per_cta;
  w.nheads = min(p.heads_per_cta, p.group - hc * p.heads_per_cta);
  w.base_bound = chunk_start + w.row0 + p.bound_extra;
  w.bound_lo = w.base_bound;
  w.bound_hi = w.base_bound + w.nrows - 1;
  w.num_tiles = w.bound_hi / N + 1;
  w.valid = true;
  return w;
}

#ifdef PB_WGMMA_ENABLED
// ---- PTX wrappers: mbarriers, TMA, named barriers, register rebalancing -----
using detail::mbar_arrive;
using detail::mbar_arrive_expect_tx;
using detail::mbar_expect_tx;
using detail::mbar_init;
using detail::mbar_wait;
// One box of a 5-d tensor map into shared memory, counted on `bar` in bytes.
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            int c4, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}
// One box of a 3-d tensor map (Q: [T, Hq, D]) into shared memory.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
__device__ __forceinline__ void st_shared16(uint32_t dst, uint32_t w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst), "r"(w) : "memory");
}

// Byte offset of 16-byte chunk `ch` of key `row` in a K/V tile of D dims stored
// as 8-key groups of D/64 swizzle atoms ([N/8][D/64][8][64], 128-byte swizzle
// given a 1024-byte aligned base): the layout one TMA box per cache block piece
// writes (all of D at once), and the one the S and P V descriptors read.
template <int D>
__device__ __forceinline__ uint32_t kv_tile_off(int row, int ch) {
  return static_cast<uint32_t>((row >> 3) * (8 * D * 2)) + detail::slab_off<8>(row & 7, ch);
}

// Named barrier ids: 0 is __syncthreads; 1 + c a consumer warpgroup's own (1..3);
// 4 + c the turn of consumer c (its warpgroup and the one handing it over: 256 threads).
constexpr int kBarWg = 1, kBarTurn = 4;

template <int N>
__device__ __forceinline__ void wgmma_s(float (&s)[N / 8][4], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (N == 64) detail::wgmma_ss_n64(s, da, db, scale_d);
  else detail::wgmma_ss_n128(s, da, db, scale_d);
}
template <int D>
__device__ __forceinline__ void wgmma_pv(float (&o)[D / 8][4], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (D == 64) detail::wgmma_rs_n64(o, a, db);
  else if constexpr (D == 128) detail::wgmma_rs_n128(o, a, db);
  else detail::wgmma_rs_n256(o, a, db);
}
#endif

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    attention_ws_kernel(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                        const __grid_constant__ CUtensorMap q_map, WsParams p) {
#ifdef PB_WGMMA_ENABLED
  using namespace detail;
  constexpr int D = Tr::D;
  constexpr int M = Tr::kBlockM;
  constexpr int N = Tr::kBlockN;
  constexpr int SK = Tr::kKStages, SV = Tr::kVStages;
  constexpr int CH = D / 8;  // 16-byte chunks per head row
  constexpr int KSTEPS = D / 16;
  constexpr int NT_S = N / 8;
  constexpr int NT_O = D / 8;
  constexpr int KSTEPS_PV = N / 16;
  constexpr uint32_t kTileBytes = Tr::kTileBytes;
  constexpr uint32_t kGroupBytes = 8 * D * 2;  // 8 keys of a K/V tile: D/64 swizzle atoms

  extern __shared__ uint8_t smem_raw[];
  constexpr int QB = Tr::kQBuffers;
  const uint32_t q_base = (smem_u32(smem_raw) + 1023u) & ~1023u;  // [QB][D/64][M][64]
  const uint32_t k_base = q_base + QB * Tr::kQBytes;               // [SK][N/8][D/64][8][64]
  const uint32_t v_base = k_base + SK * kTileBytes;                // [SV][N/8][D/64][8][64]
  const uint32_t bar_base = q_base + Tr::kBarOffset;
  // Tile i (counted across items) sits in K stage i % SK and V stage i % SV, in phase
  // (i / stages) & 1 of that stage's barriers.
  auto stage_of = [](int which, uint32_t i) { return static_cast<int>(i % (which == 0 ? SK : SV)); };
  auto phase_of = [](int which, uint32_t i) { return (i / (which == 0 ? SK : SV)) & 1u; };
  // full_k[s], full_v[s]: the producer's arrival + TMA bytes; empty_k[s], empty_v[s]: one per consumer warp.
  auto full_bar = [&](int which, int s) { return bar_base + 8u * (which * SK + s); };
  auto empty_bar = [&](int which, int s) { return bar_base + 8u * (SK + SV + which * SK + s); };
  // q_full[b]: the producer's Q boxes of buffer b (q_tma); q_empty[b]: one per consumer warp, after its epilogue.
  auto q_full = [&](int b) { return bar_base + 8u * (2 * (SK + SV) + b); };
  auto q_empty = [&](int b) { return bar_base + 8u * (2 * (SK + SV) + QB + b); };
  const bool q_tma = QB == 2 && p.q_tma != 0;

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2;

  if (tid == 0) {
    for (int which = 0; which < 2; ++which)
      for (int s = 0; s < (which == 0 ? SK : SV); ++s) {
        mbar_init(full_bar(which, s), 1);
        mbar_init(empty_bar(which, s), 4 * Tr::kConsumers);
      }
    for (int b = 0; b < QB; ++b) {
      mbar_init(q_full(b), 1);
      mbar_init(q_empty(b), 4 * Tr::kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // Persistent: CTA i walks its list of the schedule (p.schedule: offsets, then the
  // entries; attention_schedule.h plans it, list scheduling in the work list's L2-section
  // order), its offsets clamped to the entries there are. Producer and consumers walk
  // the same list and skip the same entries (ws_item bounds each one); `it` counts K/V
  // tiles across items, so ring stages and mbarrier phases run on from one item to the
  // next and the producer loads the next item's first tiles while the consumers finish
  // this one. (blockIdx.x < num_ctas: the grid is num_ctas.) Each role reads its bounds
  // after its setmaxnreg: a value held across it made the d64 kernel spill 12 bytes.
  auto first = [&] { return min(max(p.schedule[blockIdx.x], 0), p.num_items); };
  auto last = [&] { return min(p.schedule[blockIdx.x + 1], p.num_items); };

  if (wg == 0) {
    // ---- producer ----
    setmaxnreg_dec<Tr::kProducerRegs>();
    if (warp > 1) return;
    const int role = warp;  // 0: Q and the K ring, 1: the V ring (each walks every item's tiles)
    const int R = p.tma_rows;
    const int pieces = R > 0 ? N / R : 0;
    const int r_shift = R > 0 ? __ffs(R) - 1 : 31;  // R is a power of two (attention_ws_tma_rows)
    const size_t kv_row_stride = static_cast<size_t>(p.num_kv_heads) * D;
    uint32_t it = 0, nq = 0;  // K/V tiles and valid items so far
#pragma unroll 1
    for (int r = first(), end = last(); r < end; ++r) {
      const WsItem w = ws_item<N>(p, p.entries[r]);
      if (!w.valid) continue;
      if (q_tma && role == 0) {  // this item's Q into buffer nq % 2, once the item two back has left it
        const int qb = nq % QB;
        mbar_wait(q_empty(qb), ((nq / QB) & 1) ^ 1u);
        if (lane == 0) {
          mbar_arrive_expect_tx(q_full(qb), p.q_tx);
#pragma unroll
          for (int slab = 0; slab < D / 64; ++slab)
            tma_load_3d(q_base + qb * Tr::kQBytes + slab * (M * 128), &q_map, slab * 64, w.head0, w.begin + w.row0,
                        q_full(qb));
        }
        __syncwarp();
      }
      ++nq;
      const size_t head_off = static_cast<size_t>(w.kvh) * D;
      // Tile i of the running count, keys j0 .. j0 + N - 1, into its K (which 0) or V
      // stage, piece by piece (R keys of one cache block; the whole tile when pieces == 0):
      //   TMA: a piece in a valid block with every key in bound (K: its first key,
      //     since a K row past every row's bound only meets a score the softmax
      //     replaces by -inf);
      //   written here (gen): cp.async of the keys in bound, zeros past the bound
      //     (V: P is 0 there and 0 x V must be 0), NaN for a bad block;
      //   K only: a piece wholly past the bound is left as it is.
      auto load = [&](int which, uint32_t i, int j0) {
        const int st = stage_of(which, i);
        mbar_wait(empty_bar(which, st), phase_of(which, i) ^ 1u);
        const uint32_t dst = (which == 0 ? k_base : v_base) + st * kTileBytes;
        const uint32_t bar = full_bar(which, st);
        uint32_t tma_mask = 0, gen_mask = ~0u;
        int blk = 0, off = 0;
        if (pieces > 0) {
          bool tma = false, gen = false;
          if (lane < pieces) {
            const int j = j0 + lane * R;
            if (j > w.bound_hi) {
              gen = which == 1;
            } else {
              const int bi = p.block_shift >= 0 ? j >> p.block_shift : j / p.block_size;
              off = j - bi * p.block_size;
              blk = bi <= p.max_blocks_per_seq ? __ldg(w.table + bi) : -1;
              tma = blk >= 0 && blk < p.num_blocks && (which == 0 || j + R - 1 <= w.bound_hi);
              gen = !tma;
            }
          }
          tma_mask = __ballot_sync(0xffffffffu, tma);
          gen_mask = __ballot_sync(0xffffffffu, gen);
        }
        if (tma_mask != 0) {
          const uint32_t bytes = static_cast<uint32_t>(__popc(tma_mask)) * (R * D * 2);
          if (lane == 0) {
            if (gen_mask == 0) mbar_arrive_expect_tx(bar, bytes);  // the arrival too: nothing else to wait for
            else mbar_expect_tx(bar, bytes);
          }
          __syncwarp();
          if ((tma_mask >> lane) & 1u) {
            const CUtensorMap* map = which == 0 ? &k_map : &v_map;
            tma_load_5d(dst + lane * (R * D * 2), map, 0, 0, w.kvh * (D / 64), off / 8, blk, bar);
          }
        }
        if (gen_mask != 0) {
          const uint16_t* cache = which == 0 ? p.k_cache : p.v_cache;
          const int row_lo = (__ffs(gen_mask) - 1) << r_shift;  // the first piece written here (0: pieces == 0)
#pragma unroll 4
          for (int idx = row_lo * CH + lane; idx < N * CH; idx += 32) {
            const int row = idx / CH, ch = idx % CH;
            if (!((gen_mask >> (row >> r_shift)) & 1u)) continue;
            const uint32_t d = dst + kv_tile_off<D>(row, ch);
            const int j = j0 + row;
            if (j > w.bound_hi) {
              st_shared16(d, 0u);
              continue;
            }
            const int bi = p.block_shift >= 0 ? j >> p.block_shift : j / p.block_size;
            const int bk = bi <= p.max_blocks_per_seq ? __ldg(w.table + bi) : -1;
            if (bk < 0 || bk >= p.num_blocks) {
              st_shared16(d, 0x7fc07fc0u);
            } else {
              const size_t slot = static_cast<size_t>(bk) * p.block_size + (j - bi * p.block_size);
              cp_async16(d, cache + slot * kv_row_stride + head_off + ch * 8);
            }
          }
          cp_async_commit();
          cp_async_wait<0>();
          fence_proxy_async();  // this lane's writes -> visible to the consumers' wgmma (async proxy)
          __syncwarp();
          if (lane == 0) mbar_arrive(bar);
        } else if (tma_mask == 0 && lane == 0) {
          mbar_arrive(bar);  // (no tile lies wholly past the bound, but its barrier must complete)
        }
      };
#pragma unroll 1
      for (int kt = 0; kt < w.num_tiles; ++kt, ++it) {
        // (`which` a constant in each call: one runtime `which` spilled past 40 registers)
        if (role == 0) load(0, it, kt * N);
        else load(1, it, kt * N);
      }
    }
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<Tr::kConsumerRegs>();
  const int c = wg - 1;          // consumer index
  const int ct = tid & 127;      // thread within the warpgroup
  const int g = lane >> 2, t = lane & 3;
  const int m0 = c * 64 + (warp & 3) * 16;  // this warp's 16 vectors
  uint32_t it = 0, nq = 0;  // the producer's running tile and item counts, kept in step

  // Turns on the tensor cores go round robin, one token for the whole walk: consumer c
  // waits on named barrier kBarTurn + c, issues, and hands the turn to consumer c + 1
  // (mod C), across items too: the last consumer's last turn of an item hands consumer 0
  // the first turn of the next, so consumer 0 starts the next item's first S while the
  // others finish this one's softmax, last P V and epilogue. The last consumer puts the
  // token in before the first item and consumer 0 takes it out after the last, so every
  // arrival has its wait.
  constexpr int CN = Tr::kConsumers;
  if (c == CN - 1) named_arrive(kBarTurn + 0, 256);

#pragma unroll 1
  for (int r = first(), end = last(); r < end; ++r) {
    const WsItem w = ws_item<N>(p, p.entries[r]);
    if (!w.valid) continue;
    const int num_tiles = w.num_tiles;

    // Q: this warpgroup's 64 query vectors in buffer qb. By the producer's TMA
    // (rows past heads_per_cta x rows_per_tile keep stale values and rows past
    // the stream hold other tokens: their outputs are never stored), or loaded
    // here, padding vectors duplicating a real one; then the barrier first: the
    // previous item's epilogue read these rows back.
    const int qb = nq % QB;
    const uint32_t q_buf = q_base + qb * Tr::kQBytes;
    const uint32_t q_wg = q_buf + c * 64 * 128;
    if (q_tma) {
      mbar_wait(q_full(qb), (nq / QB) & 1);
    } else {
      named_sync(kBarWg + c, 128);
      for (int idx = ct; idx < 64 * CH; idx += 128) {
        const int rr = idx / CH, ch = idx % CH;
        const int v = c * 64 + rr;
        const int rl = min(v / p.heads_per_cta, w.nrows - 1);
        const int hh = min(v - (v / p.heads_per_cta) * p.heads_per_cta, w.nheads - 1);
        const size_t qrow = static_cast<size_t>(w.begin + w.row0 + rl) * p.num_q_heads + w.head0 + hh;
        cp_async16(q_buf + slab_off<M>(v, ch), p.q_rot + qrow * D + ch * 8);
      }
      cp_async_commit();
      cp_async_wait<0>();
      fence_proxy_async();
      named_sync(kBarWg + c, 128);
    }
    ++nq;

    int bound[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) bound[hr] = w.base_bound + min((m0 + g + 8 * hr) / p.heads_per_cta, w.nrows - 1);

    float o[NT_O][4];
#pragma unroll
    for (int n = 0; n < NT_O; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY};
    float l_run[2] = {0.f, 0.f};
    uint32_t pa[KSTEPS_PV][4];
    float s[NT_S][4];

    auto issue_pv = [&](int st) {
      const uint32_t vt = v_base + st * kTileBytes;
#pragma unroll
      for (int kk = 0; kk < KSTEPS_PV; ++kk) wgmma_pv<D>(o, pa[kk], gmma_desc(vt + kk * 2 * kGroupBytes, 1024, kGroupBytes));
    };
    auto release = [&](uint32_t bar) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar);
    };

    // S = Q K^T of the tile in stage st into s (issued, not waited for).
    auto issue_s = [&](int st) {
#pragma unroll
      for (int n = 0; n < NT_S; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
      wgmma_fence();
      const uint32_t kt_base = k_base + st * kTileBytes;
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks)
        wgmma_s<N>(s, gmma_desc(q_wg + (ks >> 2) * (M * 128) + (ks & 3) * 32, 16, 1024),
                   gmma_desc(kt_base + (ks >> 2) * 1024 + (ks & 3) * 32, 16, kGroupBytes), ks > 0);
      wgmma_commit();
    };
    // Online softmax of tile kt's s in place (wgmma.cuh); O's rescale factors in alpha.
    auto softmax = [&](int kt, float (&alpha)[2]) {
      const int j0 = kt * N;
      online_softmax_step(s, j0, j0 + N - 1 > w.bound_lo, bound, t, p.scale_log2, m_run, l_run, alpha);
    };
    // P rounded to bf16: the S accumulator layout is the A fragment layout of P V.
    auto pack_p = [&]() {
#pragma unroll
      for (int kk = 0; kk < KSTEPS_PV; ++kk) {
        pa[kk][0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
    };
    // Turns on the tensor cores (see kBarTurn above the item loop).
    auto my_turn = [&]() { named_sync(kBarTurn + c, 256); };
    auto pass_turn = [&]() { named_arrive(kBarTurn + (c + 1) % CN, 256); };

    // O's rescale factors from the last softmax, applied before the next P V issue.
    float alpha_pv[2] = {1.f, 1.f};
    auto rescale_o = [&]() {
      if (alpha_pv[0] != 1.f || alpha_pv[1] != 1.f) {  // the max moved (skipping x * 1 is exact)
        rescale_rows(o, alpha_pv);
      }
      alpha_pv[0] = alpha_pv[1] = 1.f;
    };
    {  // tile 0: S alone (O is zero, nothing to rescale)
      float alpha[2];
      const int st = stage_of(0, it);
      mbar_wait(full_bar(0, st), phase_of(0, it));
      my_turn();
      issue_s(st);
      pass_turn();
      wgmma_wait0();
      release(empty_bar(0, st));
      softmax(0, alpha);
      pack_p();
    }
#pragma unroll 1
    for (int kt = 1; kt < num_tiles; ++kt) {
      const uint32_t i1 = it + kt, i0 = i1 - 1;
      const int st = stage_of(0, i1), pst = stage_of(1, i0);
      mbar_wait(full_bar(0, st), phase_of(0, i1));
      mbar_wait(full_bar(1, pst), phase_of(1, i0));  // (no divergent wait between the two issues)
      my_turn();
      issue_s(st);  // this tile's S, then the previous tile's O += P V behind it
      if constexpr (Tr::kRescaleInTurn) {
        rescale_o();
        wgmma_fence();  // O's registers written: ordered before the P V wgmma reads them
      }
      issue_pv(pst);
      wgmma_commit();
      pass_turn();
      wgmma_wait1();  // S is done: K of tile kt is free; the softmax runs under P V
      release(empty_bar(0, st));
      softmax(kt, alpha_pv);
      wgmma_wait0();  // P V of tile kt - 1 is done: its V is free, O may be rescaled
      release(empty_bar(1, pst));
      if constexpr (!Tr::kRescaleInTurn) rescale_o();
      pack_p();
    }
    {  // the last tile's O += P V
      const uint32_t il = it + num_tiles - 1;
      const int st = stage_of(1, il);
      mbar_wait(full_bar(1, st), phase_of(1, il));
      rescale_o();  // (a no-op unless kRescaleInTurn)
      wgmma_fence();
      issue_pv(st);
      wgmma_commit();
      wgmma_wait0();
      release(empty_bar(1, st));
    }
    it += num_tiles;

    // out = O / l, rounded to bf16, staged through this warpgroup's own Q rows
    // (its wgmma reads of them are complete in all four warps), 16-byte stores.
    float inv_l[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float l = l_run[hr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      inv_l[hr] = 1.f / l;
    }
    named_sync(kBarWg + c, 128);
    uint32_t* stage = reinterpret_cast<uint32_t*>(smem_raw + (q_buf - smem_u32(smem_raw)));
#pragma unroll
    for (int n = 0; n < NT_O; ++n) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = m0 + g + 8 * hr;
        stage[(slab_off<M>(row, n) + 4 * t) / 4] = pack_bf16x2(o[n][2 * hr] * inv_l[hr], o[n][2 * hr + 1] * inv_l[hr]);
      }
    }
    __syncwarp();
    const uint4* stage4 = reinterpret_cast<const uint4*>(stage);
#pragma unroll
    for (int i = 0; i < 16 * CH / 32; ++i) {
      const int idx = lane + 32 * i;
      const int rr = idx / CH, ch = idx % CH;
      const int v = m0 + rr;
      const int rl = v / p.heads_per_cta, hh = v - rl * p.heads_per_cta;
      if (rl >= w.nrows || hh >= w.nheads) continue;
      const uint4 val = stage4[slab_off<M>(v, ch) / 16];
      uint16_t* dst = p.out + (static_cast<size_t>(w.begin + w.row0 + rl) * p.num_q_heads + w.head0 + hh) * D + ch * 8;
      *reinterpret_cast<uint4*>(dst) = val;
    }
    if (q_tma) {  // this warp is done with buffer qb (generic reads before the next TMA write)
      fence_proxy_async();
      release(q_empty(qb));
    }
  }
  if (c == 0) named_sync(kBarTurn + 0, 256);  // the token's last hand-over
#else
  __trap();  // built without sm_90a: the launcher never selects this kernel then
#endif
}

// cuTensorMapEncodeTiled through the runtime (static cudart, no libcuda at link time).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static bool tried = false;
  if (!tried) {
    tried = true;
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
    cudaGetLastError();
  }
  return fn;
}

// A [num_blocks, block_size, Hkv, D] bf16 cache as a 5-d tensor map: {64 dims,
// 8 keys of a group, Hkv x D/64 slabs of 64 dims, block_size / 8 groups, blocks}
// (the slab dim's stride, 128 bytes, is below the keys': the box lands as 8-key
// groups of D/64 swizzle atoms, kv_tile_off's layout). Box {64, 8, D/64, rows / 8,
// 1}: all of D for `rows` keys of one block, 128-byte swizzle.
cudaError_t encode_cache_map(CUtensorMap* map, const void* cache, const LayerShape& s, int rows) {
  const auto fn = tensor_map_encoder();
  if (!fn) return cudaErrorNotSupported;
  const int slabs = s.head_dim / 64;
  const cuuint64_t dims[5] = {64, 8, static_cast<cuuint64_t>(s.num_kv_heads) * slabs,
                              static_cast<cuuint64_t>(s.block_size / 8), static_cast<cuuint64_t>(s.num_blocks)};
  const cuuint64_t row = static_cast<cuuint64_t>(s.head_dim) * 2 * s.num_kv_heads;  // bytes between keys
  const cuuint64_t strides[4] = {row, 128, row * 8, row * s.block_size};
  const cuuint32_t box[5] = {64, 8, static_cast<cuuint32_t>(slabs), static_cast<cuuint32_t>(rows / 8), 1};
  const cuuint32_t elem[5] = {1, 1, 1, 1, 1};
  const CUresult r = fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 5, const_cast<void*>(cache), dims, strides, box, elem,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// q_rot [T, Hq, D] bf16 as a 3-d tensor map (D fastest), box {64 dims,
// heads_per_cta heads, rows_per_tile tokens}: the box lands as the M rows
// (token-major, heads inside) of one 64-dim slab, 128-byte swizzle.
cudaError_t encode_q_map(CUtensorMap* map, const void* q, const LayerShape& s, int total_tokens, int heads, int rows) {
  const auto fn = tensor_map_encoder();
  if (!fn) return cudaErrorNotSupported;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(s.head_dim), static_cast<cuuint64_t>(s.num_q_heads),
                              static_cast<cuuint64_t>(total_tokens)};
  const cuuint64_t row = static_cast<cuuint64_t>(s.head_dim) * 2;
  const cuuint64_t strides[2] = {row, row * s.num_q_heads};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(heads), static_cast<cuuint32_t>(rows)};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(q), dims, strides, box, elem,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The maps of the last (k, v, q, shape, rows) launched: encoding is host work of
// a few microseconds, done again only when the buffers or the shape change.
struct MapCache {
  const void* k = nullptr;
  const void* v = nullptr;
  int d = 0, hkv = 0, bs = 0, nb = 0, rows = 0;
  CUtensorMap km{}, vm{};
};
struct QMapCache {
  const void* q = nullptr;
  int d = 0, hq = 0, t = 0, heads = 0, rows = 0;
  CUtensorMap qm{};
};

// Persistent: as many CTAs as fit at once (one per SM: the shared memory and 384 x 168
// registers); 0 if the occupancy query fails.
template <class Tr>
int ws_resident_ctas() {
  static int per_sm = 0;
  if (per_sm == 0) {
    cudaError_t e = cudaFuncSetAttribute(attention_ws_kernel<Tr>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(Tr::kSmemBytes));
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attention_ws_kernel<Tr>, Tr::kThreads, Tr::kSmemBytes);
    if (e != cudaSuccess) return 0;
    per_sm = std::max(per_sm, 1);
  }
  return per_sm * detail::sm_count();
}

template <class Tr>
cudaError_t launch_ws(cudaStream_t stream, const CUtensorMap& km, const CUtensorMap& vm, const CUtensorMap& qm,
                      WsParams p) {
  if (Tr::kQBuffers != 2) p.q_tma = 0;
  if (ws_resident_ctas<Tr>() == 0) return cudaErrorInvalidConfiguration;
  attention_ws_kernel<Tr><<<static_cast<unsigned>(p.num_ctas), Tr::kThreads, Tr::kSmemBytes, stream>>>(km, vm, qm, p);
  return cudaGetLastError();
}

}  // namespace

bool attention_ws_supported(const LayerShape& shape) {
  return attention_mma_supported(shape) && wgmma_available();
}

int attention_ws_block_n(int head_dim) {
  switch (head_dim) {
    case 64: return WsD64::kBlockN;
    case 128: return WsD128::kBlockN;
    case 256: return WsD256::kBlockN;
    default: return 0;
  }
}

int attention_ws_block_m(int head_dim) {
  switch (head_dim) {
    case 64: return WsD64::kBlockM;
    case 128: return WsD128::kBlockM;
    case 256: return WsD256::kBlockM;
    default: return 0;
  }
}

int attention_ws_rows_per_tile(const LayerShape& shape) {
  const int m = attention_ws_block_m(shape.head_dim);
  if (m == 0 || shape.num_kv_heads <= 0 || shape.num_q_heads % shape.num_kv_heads != 0) return 0;
  return m / std::min(shape.num_q_heads / shape.num_kv_heads, m);
}

std::vector<AttnWorkItem> plan_attention_ws_work(const LayerShape& shape, const std::vector<int32_t>& cu_seqlens_host,
                                                 const std::vector<int32_t>& kv_lens_host) {
  return plan_attention_tiles(shape, attention_ws_rows_per_tile(shape), cu_seqlens_host, kv_lens_host);
}

int attention_ws_entries_per_item(const LayerShape& shape) {
  const int m = attention_ws_block_m(shape.head_dim);
  if (m == 0 || shape.num_kv_heads <= 0 || shape.num_q_heads % shape.num_kv_heads != 0) return 0;
  const int group = shape.num_q_heads / shape.num_kv_heads;
  const int heads_per_cta = std::min(group, m);
  return shape.num_kv_heads * ((group + heads_per_cta - 1) / heads_per_cta);
}

int attention_ws_ctas(const LayerShape& shape, int num_work) {
  const long long entries = static_cast<long long>(num_work) * attention_ws_entries_per_item(shape);
  int resident = 0;
  switch (shape.head_dim) {
    case 64: resident = ws_resident_ctas<WsD64>(); break;
    case 128: resident = ws_resident_ctas<WsD128>(); break;
    case 256: resident = ws_resident_ctas<WsD256>(); break;
    default: return 0;
  }
  return static_cast<int>(std::min<long long>(entries, resident));
}

std::vector<int32_t> plan_attention_ws_schedule(const LayerShape& shape, const std::vector<AttnWorkItem>& work,
                                                const std::vector<int32_t>& cu_seqlens_host,
                                                const std::vector<int32_t>& kv_lens_host) {
  const int rows = attention_ws_rows_per_tile(shape), n = attention_ws_block_n(shape.head_dim);
  std::vector<long long> cost(work.size(), 0);
  for (size_t i = 0; i < work.size(); ++i)
    if (work[i].stream >= 0 && rows > 0 && n > 0)  // two units a K/V tile, one for the item's Q and epilogue
      cost[i] = 2 * ((attention_tile_keys(rows, cu_seqlens_host, kv_lens_host, work[i]) + n - 1) / n) + 1;
  return schedule_attention_entries(work, cost, attention_ws_entries_per_item(shape),
                                    attention_ws_ctas(shape, static_cast<int>(work.size())));
}

int attention_ws_tma_rows(const LayerShape& shape) {
  const int n = attention_ws_block_n(shape.head_dim), bs = shape.block_size;
  if (n == 0 || bs <= 0 || bs % 8 != 0) return 0;  // a box lands on whole 1024-byte swizzle atoms
  if (bs % n == 0) return n;                       // a tile lies inside one block
  if (n % bs == 0) return bs;                      // a tile is n / bs whole blocks
  return 0;
}

cudaError_t launch_attention_ws(cudaStream_t stream, const AttnArgs& a, bool tma) {
  const LayerShape& shape = a.shape;
  if (!attention_ws_supported(shape)) return cudaErrorInvalidValue;
  if (a.num_work <= 0 || a.total_tokens == 0) return cudaSuccess;
  WsParams p;
  p.batch_size = static_cast<int>(a.batch_size);
  p.total_tokens = static_cast<int>(a.total_tokens);
  p.max_blocks_per_seq = static_cast<int>(a.max_blocks_per_seq);
  p.num_q_heads = shape.num_q_heads;
  p.num_kv_heads = shape.num_kv_heads;
  p.group = shape.num_q_heads / shape.num_kv_heads;
  p.heads_per_cta = std::min(p.group, attention_ws_block_m(shape.head_dim));
  p.head_chunks = (p.group + p.heads_per_cta - 1) / p.heads_per_cta;
  p.rows_per_tile = attention_ws_rows_per_tile(shape);  // the work list's tiles (plan_attention_ws_work)
  p.block_size = shape.block_size;
  p.num_blocks = shape.num_blocks;
  p.block_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if ((1 << sh) == shape.block_size) p.block_shift = sh;
  p.tma_rows = tma ? attention_ws_tma_rows(shape) : 0;
  p.q_tma = tma && shape.head_dim <= 128 ? 1 : 0;  // two Q buffers fit at d64 and d128 (WsTraits)
  p.q_tx = static_cast<uint32_t>(p.heads_per_cta * p.rows_per_tile * 128 * (shape.head_dim / 64));
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
  const long long grid = static_cast<long long>(a.num_work) * attention_ws_entries_per_item(shape);
  if (grid > 0x7fffffffLL || !a.schedule) return cudaErrorInvalidValue;
  p.num_items = static_cast<int>(grid);
  p.num_ctas = attention_ws_ctas(shape, a.num_work);  // the grid plan_attention_ws_schedule planned for
  if (p.num_ctas <= 0) return cudaErrorInvalidConfiguration;
  p.schedule = a.schedule;
  p.entries = a.schedule + p.num_ctas + 1;

  static MapCache mc;
  if (p.tma_rows > 0) {
    if (mc.k != a.k_cache || mc.v != a.v_cache || mc.d != shape.head_dim || mc.hkv != shape.num_kv_heads ||
        mc.bs != shape.block_size || mc.nb != shape.num_blocks || mc.rows != p.tma_rows) {
      mc = MapCache{};
      cudaError_t e = encode_cache_map(&mc.km, a.k_cache, shape, p.tma_rows);
      if (e == cudaSuccess) e = encode_cache_map(&mc.vm, a.v_cache, shape, p.tma_rows);
      if (e != cudaSuccess) {
        mc = MapCache{};
        return e;
      }
      mc.k = a.k_cache;
      mc.v = a.v_cache;
      mc.d = shape.head_dim;
      mc.hkv = shape.num_kv_heads;
      mc.bs = shape.block_size;
      mc.nb = shape.num_blocks;
      mc.rows = p.tma_rows;
    }
  }
  static QMapCache qc;
  if (p.q_tma) {
    if (qc.q != a.q_rot || qc.d != shape.head_dim || qc.hq != shape.num_q_heads || qc.t != p.total_tokens ||
        qc.heads != p.heads_per_cta || qc.rows != p.rows_per_tile) {
      qc = QMapCache{};
      const cudaError_t e = encode_q_map(&qc.qm, a.q_rot, shape, p.total_tokens, p.heads_per_cta, p.rows_per_tile);
      if (e != cudaSuccess) return e;
      qc.q = a.q_rot;
      qc.d = shape.head_dim;
      qc.hq = shape.num_q_heads;
      qc.t = p.total_tokens;
      qc.heads = p.heads_per_cta;
      qc.rows = p.rows_per_tile;
    }
  }
  switch (shape.head_dim) {
    case 64: return launch_ws<WsD64>(stream, mc.km, mc.vm, qc.qm, p);
    case 128: return launch_ws<WsD128>(stream, mc.km, mc.vm, qc.qm, p);
    case 256: return launch_ws<WsD256>(stream, mc.km, mc.vm, qc.qm, p);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pb::kernels
