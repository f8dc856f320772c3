// gdn_walk_narrow.cuh: the chunked GDN walk for v blocks of 8 rows (included by
// gdn_chunked.cu, inside its anonymous namespace: it uses that file's ChunkedParams,
// WalkCta, kC, kThreads, kCS, kTM; gdn_chunk_math.cuh's stage_qk_piece, stage_v_piece). Taken at every k_dim while its CTAs fit
// two per SM (gdn_chunked.cu's launch_k): few (stream, v head) pairs, as a small
// model's or one tensor-parallel rank's heads over long streams. Such a walk is a
// chain of dependent steps, chunk after chunk, and its time is that chain's latency,
// not its throughput; so this kernel takes off the chain what need not be on it:
// - warps 0-1 run P1's k rows and Delta = T R, warps 2-3 P1's q rows and P3 (a
//   16 x 8 tile each: P1, Delta and P3 have tiles for four warps only);
// - meanwhile warps 4-7 stage the next chunk (raw q | k | v -> normalised tf32 q, k
//   and fp32 v, the g scan) into the other of two slots, and start the copies of
//   the chunk after it (raw) and of the next chunk's T and M; with RB = 2 raw buffers
//   (a launch of one CTA per SM at k_dim 128: gdn_chunked.cu's launch_walk) the raw
//   copies run two chunks ahead;
// - P4 by the KP / 16 warps that hold S^T's 16-row tiles, with S^T in the
//   accumulators (gdn_state_update.cuh's *_t forms): all eight at k_dim 128, four at 64,
//   two at 32.
// Per chunk: P1 -> barrier (warps 0-3) -> Delta -> barrier (0-3) -> Delta stored ->
// CTA barrier -> P3, P4 -> CTA barrier.
// Invariants: the same products of the same operands, summed in the same order, as
// gdn_chunked_kernel at every other block width, so a stream's bits do not depend on
// the block width its batch gets (the invariance check): outputs are bit-identical to
// the 16-row walk's; R's v - e^G (S0 k) is the same explicit fmaf there and here, one
// helper (gdn_chunk_math.cuh's r_over_v_pair; left to the compiler, the fusion differed
// between the two kernels and the invariance check failed on the H200). Every bound as there: chunk_first checked against max_chunks,
// rows past the stream's end and columns past k_dim / v_dim read as zero.
#pragma once

template <int KP, int RB>
struct NarrowSmem {
  static constexpr int VB = 8, KS = KP + 4, VS = 24, CS = kCS;  // VS: [k][n] fragments conflict-free
  static constexpr int S = 0;                 // [VB][KS] S0, tf32 (the fp32 master is in registers)
  // in a slot (one chunk's staged operands; two slots):
  static constexpr int KQ = 0;                // [2C][KS] rows 0..C-1 normalised k, C..2C-1 q (tf32)
  static constexpr int D = KQ + 2 * kC * KS;  // [C][VS] v, then R, then Delta (fp32)
  static constexpr int T = D + kC * VS;       // [C][CS] T = (I + A)^-1, lower (fp32, from prep)
  static constexpr int M = T + kC * CS;       // [C][CS] e^{G_i-G_j} q_i.k_j, j <= i (tf32, from prep)
  static constexpr int Gm = M + kC * CS;      // [C] e^{G_i}
  static constexpr int Bt = Gm + kC;          // [C] beta
  static constexpr int E = Bt + kC;           // [C] e^{G_last - G_j}
  static constexpr int slot = E + kC;         // floats per slot (a multiple of 4)
  static constexpr int Slot0 = S + VB * KS;
  static constexpr int Raw = Slot0 + 2 * slot;  // RB buffers: the raw chunks not yet staged
  // a raw buffer, in 16-byte pieces of 8 bf16: q [C][KP], k [C][KP], v [C][VB], then [C] float2
  // inverse norms; with two buffers also [C] g, [C] beta (fp32; one buffer: in registers)
  static constexpr int QL = KP / 8, QN = kC * QL, VN = kC;
  static constexpr int RQ = 0, RK = QN, RV = 2 * QN, RN = RV + VN;
  static constexpr int RG = 4 * RN + 2 * kC;                  // g, then beta (floats into a buffer)
  static constexpr int RawF = RG + (RB > 1 ? 2 * kC : 0);     // floats per raw buffer (a multiple of 4)
  static constexpr int total = Raw + RB * RawF;
  static constexpr size_t bytes = sizeof(float) * total;
};

template <int KP, int RB>
__global__ void __launch_bounds__(kThreads) gdn_walk_narrow(ChunkedParams s) {
  using namespace detail;
  using L = NarrowSmem<KP, RB>;
  constexpr int VB = L::VB, KS = L::KS, VS = L::VS, CS = L::CS;
  constexpr int NS = kThreads / 2, SW0 = NS / 32;  // the staging threads: warps SW0.. (4-7)
  constexpr int PW = KP / 16 < 8 ? KP / 16 : 8;     // P4's warps: one 16-row tile of S^T each at most
  using SG = WarpGrid<KP / 16, 1, PW>;             // P4: this warp's tiles of S^T [KP][VB]
  const bool p4 = (threadIdx.x >> 5) < PW;         // warp-uniform
  static_assert(kThreads == 256 && L::QN % NS == 0 && L::slot % 4 == 0, "tile shapes");
  extern __shared__ __align__(16) float sm[];
  float* S_s = sm + L::S;
  static_assert(RB == 1 || RB == 2, "one or two raw buffers");
  auto raw_at = [&](int b) { return reinterpret_cast<uint4*>(sm + L::Raw + (RB > 1 ? b * L::RawF : 0)); };
  struct Slot {
    float *KQ, *D, *T, *M, *Gm, *Bt, *E;
  };
  auto slot_at = [&](int i) {
    float* b = sm + L::Slot0 + i * L::slot;
    return Slot{b + L::KQ, b + L::D, b + L::T, b + L::M, b + L::Gm, b + L::Bt, b + L::E};
  };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int fg = lane >> 2, ft = lane & 3;  // fragment row group / column
  const int st = tid - NS;                  // this thread's staging index (negative: a product warp)
  const GdnParams& p = s.p;
  WalkCta w;  // (gdn_chunked.cu)
  if (!walk_cta<VB>(s, w)) return;
  const int h = w.h, kh = w.kh, v0 = w.v0, vn = w.vn, c_first = w.c_first;  // vn = 8: v_dim % 8 == 0
  const StreamRows sr = w.sr;

  const int sm0 = (warp / SG::WN) * SG::TM, sn0 = (warp % SG::WN) * SG::TN;
  float Sr[SG::TM][SG::TN][4];
  if (p4) gdn_state_load_t(Sr, w.S_g, v0, vn, p.k_dim, S_s, KS, sm0, sn0, fg, ft);
  pdl_wait();  // launched as the prep's dependent: its norms, T and M are read below

  const size_t q_off = w.q_off, k_off = w.k_off, v_off = w.v_off, out_stride = w.out_stride;

  // Staging threads: start the copies of the chunk at row c0 into raw buffer b (zeros past
  // the stream's end and past k_dim / vn); warp SW0 loads its g and beta (lane = token): into
  // registers with one raw buffer, into the buffer with two (two chunks in flight).
  float g_next = 0.f, beta_next = 0.f;
  auto fetch = [&](int c0, int b) {
    uint4* R_s = raw_at(b);
    const int n = min(kC, sr.end - c0);
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int idx = st; idx < L::QN; idx += NS) {
      const int tt = idx / L::QL, col = 8 * (idx % L::QL);
      const uint16_t* row = p.conv_out + static_cast<size_t>(c0 + tt) * p.conv_dim;
      if (tt < n && col < p.k_dim) {
        cp_async16(smem_u32(R_s + L::RQ + idx), row + q_off + col);
        cp_async16(smem_u32(R_s + L::RK + idx), row + k_off + col);
      } else {
        R_s[L::RQ + idx] = zero;
        R_s[L::RK + idx] = zero;
      }
    }
    if (warp == SW0) {  // one v piece per token (lane); padded tokens: v 0, inverse norms 0,
                        // g 0, beta 0 (no effect)
      float2* nr = reinterpret_cast<float2*>(R_s + L::RN) + lane;
      float* gb = reinterpret_cast<float*>(R_s) + L::RG + lane;
      if (lane < n) {
        cp_async16(smem_u32(R_s + L::RV + lane), p.conv_out + static_cast<size_t>(c0 + lane) * p.conv_dim + v_off);
        cp_async8(smem_u32(nr), s.nrm + static_cast<size_t>(kh) * p.total_tokens + c0 + lane);
        if constexpr (RB > 1) {
          const size_t gi = static_cast<size_t>(c0 + lane) * p.num_v_heads + h;
          cp_async4(smem_u32(gb), p.g + gi);
          cp_async4(smem_u32(gb + kC), p.beta + gi);
        }
      } else {
        R_s[L::RV + lane] = zero;
        *nr = make_float2(0.f, 0.f);
        if constexpr (RB > 1) {
          gb[0] = 0.f;
          gb[kC] = 0.f;
        }
      }
    }
    cp_async_commit();
    if constexpr (RB == 1)
      if (warp == SW0) {
        const bool ok = lane < n;
        const size_t gi = static_cast<size_t>(c0 + (ok ? lane : 0)) * p.num_v_heads + h;
        g_next = ok ? p.g[gi] : 0.f;
        beta_next = ok ? p.beta[gi] : 0.f;
      }
  };

  // Staging threads: start the copy of chunk c's T and M (prep's, fp32) into slot d.
  auto fetch_tm = [&](int c, const Slot& d) {
    const float* src = s.tm + (static_cast<size_t>(c) * p.num_v_heads + h) * kTM;
    constexpr int PR = kC / 4;  // 16-byte pieces per row
#pragma unroll
    for (int idx = st; idx < 2 * kC * PR; idx += NS) {
      const int mat = idx / (kC * PR), row = (idx / PR) % kC, c4 = 4 * (idx % PR);
      cp_async16(smem_u32((mat ? d.M : d.T) + row * CS + c4), src + mat * kC * kC + row * kC + c4);
    }
    cp_async_commit();
  };

  // Staging threads: the raw chunk in raw buffer b into slot d: normalised q, k (tf32), v,
  // the g scan, beta.
  auto stage = [&](const Slot& d, int b) {
    const uint4* R_s = raw_at(b);
#pragma unroll
    for (int idx = st; idx < L::QN; idx += NS) {
      stage_qk_piece<L::QL>(R_s + L::RQ, R_s + L::RK, reinterpret_cast<const float2*>(R_s + L::RN)[idx / L::QL], idx,
                            d.KQ + kC * KS, d.KQ, KS);
    }
    if (warp == SW0) {
      stage_v_piece<1>(R_s + L::RV, lane, d.D, VS);  // token `lane`'s 8 v values
      const float* gb = reinterpret_cast<const float*>(R_s) + L::RG;
      const float G = g_scan(RB > 1 ? gb[lane] : g_next);
      const float G_last = __shfl_sync(0xffffffffu, G, 31);
      d.Gm[lane] = expf(G);
      d.E[lane] = expf(G_last - G);
      d.Bt[lane] = RB > 1 ? gb[kC + lane] : beta_next;
    }
  };

  // The product warps 0-3: token tile pa; warps 0-1 the k rows, 2-3 the q rows.
  const int pa = warp & 1;
  const bool do_r = warp < 2, do_o = warp >= 2 && warp < 4;  // warp-uniform

  // P1: [K; Q] S0^T (m = tokens, n = the 8 v rows): R = beta (v - e^G S0 k) over v in
  // d.D, or o = e^G S0 q (kept in registers for P3).
  auto p1 = [&](const Slot& d, float (&o)[1][4]) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const uint32_t a_row = ldsm_addr(ldsm_a_row(d.KQ + (do_o ? kC : 0) * KS + 16 * pa * KS, KS, lane));
    const uint32_t b_row = ldsm_addr(ldsm_b2_row(S_s, KS, lane));
#pragma unroll 4
    for (int kk = 0; kk < KP; kk += 8) {
      uint32_t a[4], bs[2];
      ldsm_x4(a, a_row + 4 * kk);
      ldsm_x2(bs, b_row + 4 * kk);
      mma_tf32(acc, a, bs);
    }
    // (a lane's two columns of a row as one float2: at VS = 24 a half-warp's pairs are
    // conflict-free, where single floats put rows g and g + 4 on the same banks)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = 16 * pa + fg + 8 * hr;
      const float gm = d.Gm[i];
      if (do_r) {  // as the lockstep walk rounds it
        r_over_v_pair(&d.D[i * VS + 2 * ft], d.Bt[i], gm, acc[2 * hr], acc[2 * hr + 1]);
      } else {
        o[0][2 * hr] = acc[2 * hr] * gm;
        o[0][2 * hr + 1] = acc[2 * hr + 1] * gm;
      }
    }
  };

  // Delta and P3 + the output: gdn_chunked.cu's delta_3xtf32 and p3_out_tile, as the
  // 16-row walk runs them.
  if (sr.begin < sr.end) {
    Slot cur = slot_at(0), nxt = slot_at(1);
    // the staging warps: the first chunk's raw and T | M, staged into cur; the next RB
    // chunks' raw in flight, chunk j's in raw buffer j % RB (cp.async groups count per
    // thread: each staging thread commits the same groups in the same order)
    if (st >= 0) {
      fetch(sr.begin, 0);
      fetch_tm(c_first, cur);
      cp_async_wait<0>();
      named_barrier_sync(2, NS);  // every staging thread's copies landed
      stage(cur, 0);
      named_barrier_sync(2, NS);  // raw buffer 0 read
      // (the loop below does the same at RB = 1, but compiles to other code than the
      // one-buffer walk measured before session 35; this form compiles to its PTX)
      if constexpr (RB == 1) {
        if (sr.begin + kC < sr.end) fetch(sr.begin + kC, 0);
        else cp_async_commit();
      } else {
#pragma unroll
        for (int j = 1; j <= RB; ++j) {
          if (sr.begin + j * kC < sr.end) fetch(sr.begin + j * kC, j % RB);
          else cp_async_commit();
        }
      }
    } else {  // the product warps pass barrier 1 as often as the staging warps pass 2 above.
              // Only for racecheck, which seems to pair barrier intervals by their count: without
              // these it reported P1's reads of S_s against P4's writes as hazards at k_dim 128,
              // where the staging warps run P4 too (4 on a small batch with one raw buffer, 42
              // on few-heads-long with two); with them, 0 (session 35). Barrier 1 orders
              // nothing against warps 4-7.
      named_barrier_sync(1, NS);
      named_barrier_sync(1, NS);
    }
    __syncthreads();  // cur and the S_s copy visible to every thread
    for (int t0 = sr.begin, ci = 0; t0 < sr.end; t0 += kC, ++ci) {
      const int n = min(kC, sr.end - t0);
      float o[1][4], dl[1][4];
      if (st < 0) {  // this chunk's products. Warps 2-3 pass the two barriers too (they
                     // wait for Delta anyway): with warps 0-1 alone at them, racecheck
                     // reported the Delta store against P3's reads as hazards.
        p1(cur, o);
        named_barrier_sync(1, NS);  // R complete in cur.D
        if (do_r) delta_3xtf32<1>(dl, cur.T, cur.D, VS, pa, 0, fg, ft, true);
        named_barrier_sync(1, NS);  // every read of R done
        if (do_r)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr)
            *reinterpret_cast<float2*>(&cur.D[(16 * pa + fg + 8 * hr) * VS + 2 * ft]) =
                make_float2(dl[0][2 * hr], dl[0][2 * hr + 1]);
      } else {  // the next chunk
        const bool more = t0 + kC < sr.end;
        if (more) fetch_tm(c_first + ci + 1, nxt);
        else cp_async_commit();
        cp_async_wait<RB>();        // the next chunk's raw (its T, M and the raw after it may still fly)
        named_barrier_sync(2, NS);  // every staging thread's pieces landed
        const int b = (ci + 1) % RB;
        if (more) stage(nxt, b);
        named_barrier_sync(2, NS);  // raw buffer b read
        if (t0 + (RB + 1) * kC < sr.end) fetch(t0 + (RB + 1) * kC, b);
        else cp_async_commit();
      }
      __syncthreads();  // Delta complete in cur.D; nxt staged
      if (do_o) p3_out_tile<1>(o, cur.M, cur.D, VS, p, out_stride, t0, n, h, v0, vn, pa, 0, fg, ft, true);
      // P4: S = e^{G_last} S0 + (e^{G_last-G} Delta)^T K, and S's tf32 copy for P1
      if (p4)
        gdn_state_update_t<SG::TM, SG::TN, kC>(Sr, cur.Gm[kC - 1], cur.E, cur.D, VS, cur.KQ, KS, S_s, KS, sm0, sn0,
                                               fg, ft);
      if (st >= 0) cp_async_wait<1>();  // the next chunk's T, M (the last raw copy may still fly)
      __syncthreads();  // S_s complete; nxt's T, M visible; cur free for the chunk after next
      const Slot t = cur;
      cur = nxt;
      nxt = t;
    }
  }
  if (p4) gdn_state_store_t(Sr, w.S_g, v0, vn, p.k_dim, sm0, sn0, fg, ft);
}
