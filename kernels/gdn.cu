// gdn.cu: the gated delta rule of all streams in one launch, token by token in
// fp32 (a chunked tensor-core form is a later issue). Rows of S [v_dim][k_dim]
// evolve independently, so a CTA owns one (stream, v head, block of S rows),
// holds those rows in registers and walks the stream's tokens in order.
// Invariants: S is read from and written back to h_state_ptrs[b] (device
// array); per token: S = exp(g) S; delta = beta (v - S k); S += delta k^T;
// o = (S q) / sqrt(k_dim), q and k L2-normalised with eps 1e-6 inside the sqrt.
#include <algorithm>
#include <numeric>

#include "kernels/common.cuh"
#include "kernels/gdn_params.cuh"
#include "kernels/kernels.h"

namespace pb::kernels {

// Tuning knobs.
struct GdnConfig {
  static constexpr int kWarps = 2;          // warps per CTA
  static constexpr int kChunk = 16;         // tokens staged in shared memory per step (+1 look-ahead)
  static constexpr int kLanesPerRow = 8;    // lanes sharing one S row (dot products reduce over 8 lanes)
  static constexpr int kStateRegsWide = 64; // S floats per lane when there are CTAs enough to fill the GPU
  static constexpr int kStateRegsNarrow = 16;  // ... else: fewer rows per CTA, more CTAs, less work per token
  static constexpr int kWideCtasPerSm = 8;     // the wide variant is capped to 128 registers: 8 CTAs per SM
  static constexpr int kStageRowsEquiv = 16;   // staging cost per token of one CTA, in S rows (variant choice;
                                               // fitted to the H200: narrow 7.27 ms vs wide 3.81 ms on gdn-large)
};

// Per-k-dim traits (k_dim padded up to KP) for a given S register budget.
template <int KP, int StateRegs>
struct GdnTile {
  static constexpr int kElemsPerLane = KP / GdnConfig::kLanesPerRow;  // 4, 8, 16, 32
  static constexpr int kChunks4 = kElemsPerLane / 4;                 // float4 per lane per row
  static constexpr int kRowsPerLane = StateRegs / kElemsPerLane > 0 ? StateRegs / kElemsPerLane : 1;
  static constexpr int kRowsPerWarp = (32 / GdnConfig::kLanesPerRow) * kRowsPerLane;
  static constexpr int kRowsPerCta = GdnConfig::kWarps * kRowsPerWarp;
  // Register cap (launch bounds): the wide variant of k_dim 64/128 fits 128
  // registers, so 8 CTAs share an SM and a full GPU's worth runs in one wave;
  // the others would spill under that cap.
  static constexpr int kMinCtasPerSm =
      (StateRegs == GdnConfig::kStateRegsWide && (KP == 64 || KP == 128)) ? GdnConfig::kWideCtasPerSm : 1;
  static_assert(kElemsPerLane % 4 == 0, "float4 chunks");
};

namespace {


// Version 2: lane (group grp, sub s) of warp w holds S rows
// w*RowsPerWarp + grp*RowsPerLane + rr and, of each, the float4 chunks s + 8e.
// The recurrence is evaluated as the reference's lp does, with one pass over S
// per token: given sk = S k_t and sq = S q_t (S before token t),
//   delta = beta (v - a sk),  o = (a sq + delta (k_t . q_t)) / sqrt(dk),
//   S = a S + delta k_t^T, and in the same pass S k_{t+1}, S q_{t+1},
// so a token costs one 8-lane reduction (2 x rows values at once).
// Per chunk of kChunk tokens (+1 look-ahead) the CTA stages normalised q/k,
// k.q, its v rows, exp(g) and beta in shared memory; outputs go back through
// shared memory one chunk later (coalesced stores while the next is staged).
// (Version 1 decayed S, reduced S k, updated S, then reduced S q: two
// dependent reductions per token; 1.2 us per token on a long stream, H200.)
template <int KP, int StateRegs>
__global__ void __launch_bounds__(GdnConfig::kWarps * 32, (GdnTile<KP, StateRegs>::kMinCtasPerSm))
    gdn_kernel(GdnParams p) {
  using namespace detail;
  using Tile = GdnTile<KP, StateRegs>;
  constexpr int C = GdnConfig::kChunk;
  constexpr int CS = C + 1;  // staged tokens: the chunk and one look-ahead
  constexpr int RC = Tile::kRowsPerCta;
  constexpr int RPL = Tile::kRowsPerLane;
  constexpr int NC4 = Tile::kChunks4;
  constexpr int kThreads = GdnConfig::kWarps * 32;
  __shared__ __align__(16) float kn_s[CS][KP];
  __shared__ __align__(16) float qn_s[CS][KP];
  __shared__ float v_s[C][RC];
  __shared__ float o_s[C][RC];
  __shared__ float eg_s[C], bt_s[C], kq_s[C];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = lane >> 3, sub = lane & 7;
  GdnCtaHead head;
  if (!gdn_cta_head(p, head)) return;
  const int h = head.h, rb = head.vb, kh = head.kh;
  const StreamRows sr = head.sr;
  float* S_g = head.S_g;

  const int row_base = warp * Tile::kRowsPerWarp + grp * RPL;  // local row of rr = 0
  float4 S[RPL][NC4];
#pragma unroll
  for (int rr = 0; rr < RPL; ++rr) {
    const int row = rb * RC + row_base + rr;
#pragma unroll
    for (int e = 0; e < NC4; ++e) {
      const int col = 4 * (sub + 8 * e);
      S[rr][e] = (row < p.v_dim && col < p.k_dim)
                     ? *reinterpret_cast<const float4*>(S_g + static_cast<size_t>(row) * p.k_dim + col)
                     : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }

  const size_t q_off = static_cast<size_t>(kh) * p.k_dim;
  const size_t k_off = static_cast<size_t>(p.num_k_heads + kh) * p.k_dim;
  const size_t v_off = static_cast<size_t>(2 * p.num_k_heads) * p.k_dim + static_cast<size_t>(h) * p.v_dim;
  const size_t out_stride = static_cast<size_t>(p.num_v_heads) * p.v_dim;

  // Writes chunk t0's outputs from o_s (rows < v_dim, tokens < end).
  auto flush = [&](int t0) {
#pragma unroll 1
    for (int idx = tid; idx < C * RC; idx += kThreads) {
      const int tt = idx / RC, i = idx - (idx / RC) * RC;
      const int r = t0 + tt, row = rb * RC + i;
      if (r < sr.end && row < p.v_dim)
        p.out[static_cast<size_t>(r) * out_stride + static_cast<size_t>(h) * p.v_dim + row] = float_to_bf16(o_s[tt][i]);
    }
  };
  // 8-lane sums of this lane's per-row partials (xor 4, 2, 1 stay in the group).
  auto reduce_rows = [&](float (&x)[RPL], float (&y)[RPL]) {
#pragma unroll
    for (int off = 4; off > 0; off >>= 1)
#pragma unroll
      for (int rr = 0; rr < RPL; ++rr) {
        x[rr] += __shfl_xor_sync(0xffffffffu, x[rr], off);
        y[rr] += __shfl_xor_sync(0xffffffffu, y[rr], off);
      }
  };

  float sk[RPL], sq[RPL];  // S k_t and S q_t of the next token (S before it)
  for (int t0 = sr.begin; t0 < sr.end; t0 += C) {
    if (t0 > sr.begin) flush(t0 - C);
    // Stage: normalised q and k (one warp per token) and k . q.
#pragma unroll 1
    for (int tt = warp; tt < CS; tt += GdnConfig::kWarps) {
      const int r = t0 + tt;
      float qv[KP / 32], kv[KP / 32];
      float ssq = 0.f, ssk = 0.f;
#pragma unroll
      for (int i = 0; i < KP / 32; ++i) {
        const int e = lane + 32 * i;
        const bool ok = r < sr.end && e < p.k_dim;
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
      float kq = 0.f;
#pragma unroll
      for (int i = 0; i < KP / 32; ++i) {
        const float qn = qv[i] * iq, kn = kv[i] * ik;
        qn_s[tt][lane + 32 * i] = qn;
        kn_s[tt][lane + 32 * i] = kn;
        kq = fmaf(kn, qn, kq);
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) kq += __shfl_xor_sync(0xffffffffu, kq, off);
      if (lane == 0 && tt < C) kq_s[tt] = kq;
    }
#pragma unroll 2
    for (int idx = tid; idx < C * RC; idx += kThreads) {
      const int tt = idx / RC, i = idx - (idx / RC) * RC;
      const int r = t0 + tt, row = rb * RC + i;
      v_s[tt][i] = (r < sr.end && row < p.v_dim)
                       ? bf16_to_float(p.conv_out[static_cast<size_t>(r) * p.conv_dim + v_off + row])
                       : 0.f;
    }
    if (tid < C) {
      const int r = t0 + tid;
      const bool ok = r < sr.end;
      eg_s[tid] = ok ? expf(p.g[static_cast<size_t>(r) * p.num_v_heads + h]) : 1.f;
      bt_s[tid] = ok ? p.beta[static_cast<size_t>(r) * p.num_v_heads + h] : 0.f;
    }
    __syncthreads();

    if (t0 == sr.begin) {  // S k and S q of the stream's first token
#pragma unroll
      for (int rr = 0; rr < RPL; ++rr) sk[rr] = sq[rr] = 0.f;
#pragma unroll
      for (int e = 0; e < NC4; ++e) {
        const float4 k4 = *reinterpret_cast<const float4*>(&kn_s[0][4 * (sub + 8 * e)]);
        const float4 q4 = *reinterpret_cast<const float4*>(&qn_s[0][4 * (sub + 8 * e)]);
#pragma unroll
        for (int rr = 0; rr < RPL; ++rr) {
          const float4 s4 = S[rr][e];
          sk[rr] = fmaf(s4.x, k4.x, fmaf(s4.y, k4.y, fmaf(s4.z, k4.z, fmaf(s4.w, k4.w, sk[rr]))));
          sq[rr] = fmaf(s4.x, q4.x, fmaf(s4.y, q4.y, fmaf(s4.z, q4.z, fmaf(s4.w, q4.w, sq[rr]))));
        }
      }
      reduce_rows(sk, sq);
    }

    const int n = min(C, sr.end - t0);
    for (int tt = 0; tt < n; ++tt) {
      const float a = eg_s[tt], bt = bt_s[tt], kq = kq_s[tt];
      float delta[RPL];
#pragma unroll
      for (int rr = 0; rr < RPL; ++rr) {
        delta[rr] = bt * (v_s[tt][row_base + rr] - a * sk[rr]);
        const float o = (a * sq[rr] + delta[rr] * kq) * p.inv_sqrt_dk;
        if (sub == 0) o_s[tt][row_base + rr] = o;
        sk[rr] = sq[rr] = 0.f;
      }
      // S = a S + delta k_t^T, and its products with the next token's k and q
      // (the look-ahead slot holds zeros past the stream's end).
#pragma unroll
      for (int e = 0; e < NC4; ++e) {
        const int c4 = 4 * (sub + 8 * e);
        const float4 k4 = *reinterpret_cast<const float4*>(&kn_s[tt][c4]);
        const float4 kn4 = *reinterpret_cast<const float4*>(&kn_s[tt + 1][c4]);
        const float4 qn4 = *reinterpret_cast<const float4*>(&qn_s[tt + 1][c4]);
#pragma unroll
        for (int rr = 0; rr < RPL; ++rr) {
          float4& s4 = S[rr][e];
          s4.x = fmaf(delta[rr], k4.x, a * s4.x);
          s4.y = fmaf(delta[rr], k4.y, a * s4.y);
          s4.z = fmaf(delta[rr], k4.z, a * s4.z);
          s4.w = fmaf(delta[rr], k4.w, a * s4.w);
          sk[rr] = fmaf(s4.x, kn4.x, fmaf(s4.y, kn4.y, fmaf(s4.z, kn4.z, fmaf(s4.w, kn4.w, sk[rr]))));
          sq[rr] = fmaf(s4.x, qn4.x, fmaf(s4.y, qn4.y, fmaf(s4.z, qn4.z, fmaf(s4.w, qn4.w, sq[rr]))));
        }
      }
      reduce_rows(sk, sq);
    }
    __syncthreads();
  }
  if (sr.end > sr.begin) flush(sr.begin + ((sr.end - sr.begin - 1) / C) * C);

#pragma unroll
  for (int rr = 0; rr < RPL; ++rr) {
    const int row = rb * RC + row_base + rr;
    if (row >= p.v_dim) continue;
#pragma unroll
    for (int e = 0; e < NC4; ++e) {
      const int col = 4 * (sub + 8 * e);
      if (col < p.k_dim) *reinterpret_cast<float4*>(S_g + static_cast<size_t>(row) * p.k_dim + col) = S[rr][e];
    }
  }
}

// A variant's grid and its estimated makespan. Every CTA walks its whole
// stream, so the time is about (waves of resident CTAs) x (per-token work of
// one CTA ~ its rows + the staging it repeats); occupancy from the runtime.
struct GdnPlan {
  int row_blocks = 1;
  long long ctas = 0;
  double cost = 0;
};
template <int KP, int StateRegs>
GdnPlan plan_variant(const GdnParams& p) {
  constexpr int rc = GdnTile<KP, StateRegs>::kRowsPerCta;
  static int per_sm = 0;  // resident CTAs per SM (registers, shared memory)
  if (!per_sm && (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gdn_kernel<KP, StateRegs>,
                                                                GdnConfig::kWarps * 32, 0) != cudaSuccess ||
                  per_sm < 1)) {
    cudaGetLastError();
    per_sm = 1;
  }
  GdnPlan g;
  g.row_blocks = (p.v_dim + rc - 1) / rc;
  g.ctas = static_cast<long long>(p.batch_size) * p.num_v_heads * g.row_blocks;
  const long long slots = static_cast<long long>(per_sm) * detail::sm_count();
  const long long waves = (g.ctas + slots - 1) / slots;
  g.cost = static_cast<double>(waves) * (rc + GdnConfig::kStageRowsEquiv);
  return g;
}

template <int KP, int StateRegs>
cudaError_t launch_gdn_variant(cudaStream_t stream, GdnParams p, const GdnPlan& g) {
  p.blocks = g.row_blocks;
  if (g.ctas > 0x7fffffffLL) return cudaErrorInvalidValue;
  gdn_kernel<KP, StateRegs><<<static_cast<unsigned>(g.ctas), GdnConfig::kWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

// The wide variant (more S rows per lane, fewer CTAs) or the narrow one
// (shorter per-token chain, more CTAs), whichever the makespan model prefers.
template <int KP>
cudaError_t launch_gdn_k(cudaStream_t stream, const GdnParams& p) {
  const GdnPlan wide = plan_variant<KP, GdnConfig::kStateRegsWide>(p);
  const GdnPlan narrow = plan_variant<KP, GdnConfig::kStateRegsNarrow>(p);
  if (wide.cost < narrow.cost) return launch_gdn_variant<KP, GdnConfig::kStateRegsWide>(stream, p, wide);
  return launch_gdn_variant<KP, GdnConfig::kStateRegsNarrow>(stream, p, narrow);
}

}  // namespace

std::vector<int32_t> plan_gdn_order(const std::vector<int32_t>& cu_seqlens_host) {
  const int n = cu_seqlens_host.empty() ? 0 : static_cast<int>(cu_seqlens_host.size()) - 1;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto count = [&](int b) { return cu_seqlens_host[b + 1] - cu_seqlens_host[b]; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return count(a) > count(b); });
  return order;
}

cudaError_t launch_gdn(cudaStream_t stream, const GdnArgs& args) {
  const LayerShape& shape = args.shape;
  if (shape.num_k_heads <= 0 || shape.num_v_heads <= 0 || shape.num_v_heads % shape.num_k_heads != 0 ||
      shape.k_dim <= 0 || shape.k_dim % 4 != 0 || shape.k_dim > 256 || shape.v_dim <= 0)
    return cudaErrorInvalidValue;
  if (args.batch_size == 0) return cudaSuccess;
  const GdnParams p = gdn_params(args);
  if (shape.k_dim <= 32) return launch_gdn_k<32>(stream, p);
  if (shape.k_dim <= 64) return launch_gdn_k<64>(stream, p);
  if (shape.k_dim <= 128) return launch_gdn_k<128>(stream, p);
  return launch_gdn_k<256>(stream, p);
}

}  // namespace pb::kernels
