// gdn_split_scan_st.cuh: the split's state scan on Hopper (sm_90a) with the state held
// transposed: per (stream, v head, block of N v rows) one consumer warpgroup keeps the fp32
// S^T [KP k][N v] in wgmma accumulators (KP / 64 tiles of m64, at least one) for the whole
// stream, and one producer warp streams each 32-token chunk's operands into a ring of
// shared-memory stages by bulk copies: 2 KP / 32 + 2 a chunk ([W ; Q] by slabs, K^T, U | E),
// since the copies' per-request cost (~40 ns on the H200) set the pace at one copy a U row.
// Per chunk (gdn_split.cu's scan, the same products):
//   [Delta' ; P] = [W ; Q] tf32(S)^T      (m64nNk8 over k: A = the prep's [W ; Q] image,
//                                          B = tf32(S) [N v][KP k], written by the consumers)
//   Delta = U - Delta';  S^T = e^{G_last} S^T + K^T tf32(E Delta)   (m64nNk8 over the tokens:
//                                          A = the prep's K^T image, B = tf32(E Delta) [N v][32])
// with Delta and P stored for the out pass. Both operands of both products come from shared
// memory, so the state-sized work per chunk is one tf32 store of S^T (N KP / 128 values a
// thread) and the block width N may be as narrow as 8: the chain per chunk is two wgmma
// groups and two warpgroup barriers, whatever N is (session 27's probe: 1073 cycles a
// 64-token step at N 8 against 2209 at 64). Session 28's form (S [64 v][KP k] as
// the A registers) has N fixed at 64 and a state-sized conversion on the chain.
// The reduction index of every operand sits in the prep's perm8 order (gdn_split_image.cuh);
// the consumers write tf32(S) and tf32(E Delta) in the same order, so only the order of the
// fp32 sums differs from the mma.sync scan: the lp (GdnPrecision::tf32_split) is the same.
// Invariants: one CTA = 160 threads (warps 0-3 consumers, warp 4 the producer); a stage is
// filled once per chunk and released by every consumer thread before it is refilled (full /
// empty mbarriers), every input of a chunk (the decays too) by bulk copy (no plain shared-
// memory hand-off between producer and consumers); rows past the stream's end
// and v rows past v_dim are never stored, and their E Delta enters the state as an exact zero.
// Included by gdn_split.cu inside its anonymous namespace (it uses that file's SplitParams),
// after kernels/mbarrier.cuh, wgmma.cuh and gdn_split_image.cuh.

// The scan's tuning knobs, per padded k_dim and block width.
template <int KP, int N>  // N: v rows per CTA, wgmma's N
struct GdnScanStTraits {
  static constexpr int kC = kGdnChunk;          // tokens per chunk
  static constexpr int kThreads = 160;          // 4 consumer warps + 1 producer warp
  static constexpr int kConsumers = 128;
  static constexpr int kMT = KP < 64 ? 1 : KP / 64;  // m64 tiles of S^T
  static constexpr int kKM = 64 * kMT;          // K^T rows a stage holds (zero past KP)
  static constexpr int kImg = kC * KP * 4;      // bytes of one W, Q or K^T image
  static constexpr int kSlab = kC * 128;        // bytes of one 32-value slab of a W or Q image
  static constexpr int kWQ = 0;                 // [KP / 32][W's 32 rows, Q's 32 rows][32]: one 64-row operand
  static constexpr int kK = 2 * kImg;           // K^T [kKM][32 tokens]: one slab
  static constexpr int kU = kK + kKM * 128;     // the prep's U | E image: U [32 tokens][N], then
  static constexpr int kE = kU + kC * N * 4;    // the decays E [32], e^{G_last} (gdn_split_image.cuh)
  static constexpr int kUE = gdn_ue_floats(N) * 4;
  static constexpr int kStage = (kU + kUE + 1023) / 1024 * 1024;
  static constexpr int kSbBytes = N * KP * 4;   // tf32(S) [N][KP]: KP / 32 slabs of N rows
  static constexpr int kDbBytes = N * kC * 4;   // tf32(E Delta) [N][32]: one slab
  static constexpr int kFree = 227 * 1024 - 1024 - kSbBytes - kDbBytes - 64;
  static constexpr int kStages = kFree / kStage < 4 ? kFree / kStage : 4;  // chunks in flight
  // [W ; Q] tf32(S)^T's k loop as kXChains independent accumulator chains (k-step ks into
  // chain ks % kXChains), summed in chain order after the wait: the tensor core pipelines
  // them where one chain waits on each step. The same at every N, so that a v row's sum
  // order does not depend on the block width the batch gave it (the invariance check).
  static constexpr int kXChains = 2;
  static constexpr int kSb = kStages * kStage, kDb = kSb + kSbBytes;
  static constexpr int kBars = kDb + kDbBytes;  // full[kStages], empty[kStages]
  static constexpr size_t kSmem = 1024 + kBars + 16 * kStages;
  static_assert(KP == 32 || KP == 64 || KP == 128, "k_dim padded to 32, 64 or 128");
  static_assert(N == 8 || N == 16 || N == 32 || N == 64, "wgmma widths the scan instantiates");
  static_assert(kStages >= 2 && kSmem <= 227 * 1024, "the ring must fit an SM's shared memory");
};

#ifdef PB_WGMMA_ENABLED
// The descriptor of k-step ks (8 values) of an image of `rows` rows (gdn_split_image.cuh).
__device__ __forceinline__ uint64_t image_kstep_desc(uint32_t base, int rows, int ks) {
  return detail::gmma_desc(base + (ks >> 2) * (rows * 128) + (ks & 3) * 32, 16, 1024);
}
// A store to shared memory under a predicate, not a branch: a divergent path touching
// accumulators makes ptxas serialize the wgmma (C7518).
__device__ __forceinline__ void sts_if(uint32_t addr, uint32_t v, bool p) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p st.shared.b32 [%0], %1;\n}\n"
               ::"r"(addr), "r"(v), "r"(static_cast<int>(p)) : "memory");
}
__device__ __forceinline__ void stg_if(float* a, float v, bool p) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p st.global.f32 [%0], %1;\n}\n"
               ::"l"(a), "f"(v), "r"(static_cast<int>(p)) : "memory");
}

// Pins accumulator registers in place: the compiler may not move their definitions (the
// decay's multiplies) past the wgmma.fence that follows, where ptxas would have to insert a
// warpgroup.arrive and serialize the wgmma (C7519 / C7520).
template <int NJ>
__device__ __forceinline__ void pin_acc(float (&d)[NJ][4]) {
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}
#endif

template <int KP, int N>
__global__ void __launch_bounds__(GdnScanStTraits<KP, N>::kThreads, 1) gdn_split_scan_st(SplitParams s) {
#ifdef PB_WGMMA_ENABLED
  using namespace detail;
  using T = GdnScanStTraits<KP, N>;
  constexpr int kC = T::kC, kS = T::kStages, NJ = N / 8, MT = T::kMT;
  const GdnParams& p = s.p;
  const int dk = p.k_dim, dv = p.v_dim, Hv = p.num_v_heads;
  GdnCtaHead head;
  if (!gdn_cta_head(p, head)) return;  // CTA-uniform
  const int h = head.h, kh = head.kh;
  const StreamRows sr = head.sr;
  const int v0 = head.vb * N, vn = min(N, dv - v0);
  const int chunks = (sr.count() + kC - 1) / kC;
  // The stream's chunk indices (into the images), bounded by the list's capacity.
  const int cf = s.list.chunk_first[head.b];
  if (vn <= 0 || cf < 0 || cf > s.list.max_chunks - chunks) return;  // CTA-uniform
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sm = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sm_u = smem_u32(sm);
  const uint32_t full0 = sm_u + T::kBars, empty0 = full0 + kS * 8;
  const uint32_t Sb = sm_u + T::kSb, Db = sm_u + T::kDb;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  if (tid == 0) {
    for (int i = 0; i < kS; ++i) {
      mbar_init(full0 + 8 * i, 1);  // the producer's expect_tx arrive
      mbar_init(empty0 + 8 * i, T::kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if constexpr (T::kKM > KP) {  // K^T rows KP..63 of every stage: zero once (the copies fill rows < KP)
    constexpr int kPad = (T::kKM - KP) * 32;  // floats a stage
    if (warp < 4) {
      for (int i = tid; i < kS * kPad; i += T::kConsumers)
        reinterpret_cast<float*>(sm + (i / kPad) * T::kStage + T::kK + KP * 128)[i % kPad] = 0.f;
      fence_proxy_async();
    }
  }
  __syncthreads();

  if (warp == 4) {  // ---- producer: chunk c into stage c % kS
    for (int c = 0; c < chunks; ++c) {
      const int st = c % kS;
      if (c >= kS) mbar_wait(empty0 + 8 * st, ((c / kS) + 1) & 1);
      const uint32_t base = sm_u + st * T::kStage, full = full0 + 8 * st;
      const size_t chunk = static_cast<size_t>(cf + c);
      if (lane == 0) mbar_arrive_expect_tx(full, 3 * T::kImg + T::kUE);
      __syncwarp();
      const float* w = s.Wimg + (chunk * Hv + h) * (T::kImg / 4);
      const float* q = s.Qimg + (chunk * p.num_k_heads + kh) * (T::kImg / 4);
      if (lane < KP / 32) bulk_copy_g2s(base + T::kWQ + lane * 2 * T::kSlab, w + lane * (T::kSlab / 4), T::kSlab, full);
      else if (lane < 2 * (KP / 32))
        bulk_copy_g2s(base + T::kWQ + (lane - KP / 32) * 2 * T::kSlab + T::kSlab, q + (lane - KP / 32) * (T::kSlab / 4),
                      T::kSlab, full);
      else if (lane == 31)
        bulk_copy_g2s(base + T::kK, s.Ktimg + (chunk * p.num_k_heads + kh) * (T::kImg / 4), T::kImg, full);
      else if (lane == 30)
        bulk_copy_g2s(base + T::kU, s.Uimg + ((chunk * Hv + h) * p.blocks + head.vb) * (T::kUE / 4), T::kUE, full);
    }
    return;
  }

  // ---- consumers. S^T tile mt: warp w holds k rows 64 mt + 16 w + g (+ 8), v columns 8 j + 2 t (+ 1).
  // [Delta' ; P]: rows 16 w + g (+ 8); warps 0-1 hold Delta's tokens, warps 2-3 P's.
  float S[MT][NJ][4];
  auto each_state = [&](auto&& f) {  // f(element, k, v) for each of this thread's S^T elements
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) f(S[mt][j][e], 64 * mt + 16 * warp + g + 8 * (e >> 1), 8 * j + 2 * t + (e & 1));
  };
  each_state([&](float& x, int k, int v) {
    x = v < vn && k < dk ? head.S_g[static_cast<size_t>(v0 + v) * dk + k] : 0.f;
  });
  const bool dw = warp < 2;                    // warp-uniform: Delta rows, else P rows
  const int tokA = (16 * warp + g) & 31, tokB = tokA + 8;
  const size_t hv_row = static_cast<size_t>(Hv) * dv;
  constexpr int XC = T::kXChains;
  static_assert(KP / 8 >= XC, "a k-step per chain at least");
  float Xc[XC][NJ][4];
  for (int c = 0; c < chunks; ++c) {
    const int st = c % kS;
    const int t0 = sr.begin + c * kC, n = min(kC, sr.end - t0);
    const uint32_t base = sm_u + st * T::kStage;
    // tf32(S) of the state entering the chunk, as B [N v][KP k] (rows k >= KP are padding).
    each_state([&](float& x, int k, int v) {
      sts_if(Sb + 4 * gdn_image_index(N, v, k & (KP - 1)), tf32_bits(x), k < KP);
    });
    fence_proxy_async();
    named_barrier_sync(1, T::kConsumers);  // Sb complete
    mbar_wait(full0 + 8 * st, (c / kS) & 1);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < KP / 8; ++ks)
      wgmma_tf32_ss(Xc[ks % XC], image_kstep_desc(base + T::kWQ, 2 * kC, ks), image_kstep_desc(Sb, N, ks), ks >= XC);
    wgmma_commit();
    const float* U = reinterpret_cast<const float*>(sm + st * T::kStage + T::kU);
    const float* E = reinterpret_cast<const float*>(sm + st * T::kStage + T::kE);
    const float eA = E[tokA], eB = E[tokB], gl = E[kC];
    wgmma_wait0();
    float (&X)[NJ][4] = Xc[0];
#pragma unroll
    for (int x = 1; x < XC; ++x)
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) X[j][e] += Xc[x][j][e];
    // Delta = U - Delta' (warps 0-1), and tf32(E Delta) as B [N v][32 tokens] (zero past n, vn);
    // O: what the thread stores for the out pass (Delta, or P as the product left it).
    float O[NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = e >> 1 ? tokB : tokA, v = 8 * j + 2 * t + (e & 1);
        const bool in = dw && v < vn && tok < n;  // U past the end or past v_dim is not loaded
        const float d = (in ? U[tok * N + v] : 0.f) - X[j][e];
        const float ed = in ? (e >> 1 ? eB : eA) * d : 0.f;
        O[j][e] = dw ? d : X[j][e];
        sts_if(Db + 4 * gdn_image_index(N, v, tok), tf32_bits(ed), dw);
      }
    fence_proxy_async();
    named_barrier_sync(1, T::kConsumers);  // Db complete
    each_state([&](float& x, int, int) { x *= gl; });
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) pin_acc(S[mt]);
    wgmma_fence();
    // S^T += K^T tf32(E Delta): M = k (MT tiles), N = v, K = tokens
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int ks = 0; ks < kC / 8; ++ks)
        wgmma_tf32_ss(S[mt], image_kstep_desc(base + T::kK + mt * 64 * 128, T::kKM, ks), image_kstep_desc(Db, N, ks), 1);
    wgmma_commit();
    // Delta over U and P, for the out pass; under the update
    float* dst = dw ? s.U : s.P;
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = e >> 1 ? tokB : tokA, v = 8 * j + 2 * t + (e & 1);
        stg_if(dst + static_cast<size_t>(t0 + tok) * hv_row + static_cast<size_t>(h) * dv + v0 + v, O[j][e],
               v < vn && tok < n);
      }
    wgmma_wait0();
    mbar_arrive(empty0 + 8 * st);  // this thread's reads of the stage are done
  }
  each_state([&](float& x, int k, int v) {
    if (v < vn && k < dk) head.S_g[static_cast<size_t>(v0 + v) * dk + k] = x;
  });
#endif
}
