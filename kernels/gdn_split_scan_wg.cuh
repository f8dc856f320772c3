// gdn_split_scan_wg.cuh: the split's state scan on Hopper (sm_90a): per (stream, v head,
// block of 64 v rows) one consumer warpgroup holds the fp32 state S [64 v][KP k] in wgmma
// accumulators for the whole stream, and one producer warp streams each 32-token chunk's
// operands into a ring of shared-memory stages by bulk copies. Per chunk (gdn_split.cu's
// scan, the same products):
//   [Delta^T | P^T] = tf32(S) [W ; Q]^T   (one m64n64k8 group over k; A = tf32(S) from registers,
//                                          B = W's and Q's 32 token rows, one 64-row operand)
//   Delta = U - Delta-product;  S = e^{G_last} S + tf32(E Delta)^T K   (m64nKPk8 over the tokens;
//   A = tf32(E Delta) from registers, B = K^T)
// with Delta and P stored for the out pass. Nothing of the chain goes through shared memory:
// the accumulators of one product are the A registers of the next. That works because a
// thread's accumulator pair (columns 2t, 2t + 1 of a k-step's 8) sits where the tf32 A
// fragment wants columns t and t + 4: the k index of both products is taken in the order
// perm8 (position p of each 8 holds index 2p, p < 4, or 2 (p - 4) + 1), which the prep
// applies when it writes the B operands (gdn_split_image.cuh). Only the order of the fp32
// sums moves: every operand is the tf32 value gdn_split.cu's mma.sync scan uses, so the lp
// (GdnPrecision::tf32_split) is the same.
// Invariants: one CTA = 160 threads (warps 0-3 consumers, warp 4 the producer); each
// stage is filled once per chunk and released by every consumer thread before it is
// refilled (full / empty mbarriers); rows past the stream's end and v rows past v_dim are
// never stored, and their Delta enters the state as an exact zero (E Delta selected to 0).
// Included by gdn_split.cu inside its anonymous namespace (it uses that file's SplitParams),
// after kernels/mbarrier.cuh, wgmma.cuh and gdn_split_image.cuh.

// The scan's tuning knobs, per padded k_dim.
template <int KP>
struct GdnScanWgTraits {
  static constexpr int kC = kGdnChunk;          // tokens per chunk
  static constexpr int kVB = 64;                // v rows per CTA: wgmma's M
  static constexpr int kThreads = 160;          // 4 consumer warps + 1 producer warp
  static constexpr int kConsumers = 128;
  static constexpr int kStages = KP == 128 ? 4 : 6;  // chunks in flight: the copies' latency is ~2 chunk steps
  // U row stride (floats): 68 puts a warp's 4 token pairs on 4 bank groups; at KP 128 the
  // fourth stage needs the 512 bytes, so 64 (4-way conflicts on 16 loads a chunk).
  static constexpr int kUS = KP == 128 ? kVB : kVB + 4;
  static constexpr int kImg = kC * KP * 4;      // bytes of one W, Q or K^T image
  static constexpr int kSlab = kC * 128;        // bytes of one 32-value slab of a W or Q image
  static constexpr int kWQ = 0;                 // [KP / 32][W's 32 rows, Q's 32 rows][32]: one 64-row operand
  static constexpr int kK = 2 * kImg, kU = 3 * kImg;
  static constexpr int kStage = (kU + kC * kUS * 4 + 1023) / 1024 * 1024;
  // After the stages: per stage E [32] then e^{G_last} (36 floats), then full[kStages], empty[kStages].
  static constexpr int kE = kStages * kStage, kEStride = (kC + 4) * 4;
  static constexpr int kBars = kE + kStages * kEStride;
  static constexpr size_t kSmem = 1024 + kBars + 16 * kStages;
  static_assert(KP == 32 || KP == 64 || KP == 128, "k_dim padded to 32, 64 or 128");
  static_assert(kSmem <= 227 * 1024, "the ring must fit an SM's shared memory");
};

#ifdef PB_WGMMA_ENABLED
// The descriptor of k-step ks (8 values) of an image of `rows` rows (gdn_split_image.cuh).
__device__ __forceinline__ uint64_t image_kstep_desc(uint32_t base, int rows, int ks) {
  return detail::gmma_desc(base + (ks >> 2) * (rows * 128) + (ks & 3) * 32, 16, 1024);
}
// A fragment of k-step j from an accumulator tile d[j] (rows g, g + 8; columns 2t, 2t + 1):
// positions t and t + 4 hold columns 2t and 2t + 1 (the perm8 order).
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&d)[4]) {
  a[0] = detail::tf32_bits(d[0]);
  a[1] = detail::tf32_bits(d[2]);
  a[2] = detail::tf32_bits(d[1]);
  a[3] = detail::tf32_bits(d[3]);
}
#endif

template <int KP>
__global__ void __launch_bounds__(GdnScanWgTraits<KP>::kThreads, 1) gdn_split_scan_wg(SplitParams s) {
#ifdef PB_WGMMA_ENABLED
  using namespace detail;
  using T = GdnScanWgTraits<KP>;
  constexpr int kC = T::kC, kS = T::kStages, NT = KP / 8;
  const GdnParams& p = s.p;
  const int dk = p.k_dim, dv = p.v_dim;
  GdnCtaHead head;
  if (!gdn_cta_head(p, head)) return;  // CTA-uniform
  const int h = head.h, kh = head.kh;
  const StreamRows sr = head.sr;
  const int v0 = head.vb * T::kVB, vn = min(T::kVB, dv - v0);
  const int chunks = (sr.count() + kC - 1) / kC;
  // The stream's chunk indices (into the images), bounded by the list's capacity.
  const int cf = s.list.chunk_first[head.b];
  if (vn <= 0 || cf < 0 || cf > s.list.max_chunks - chunks) return;  // CTA-uniform
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sm = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sm_u = smem_u32(sm);
  const uint32_t full0 = sm_u + T::kBars, empty0 = full0 + kS * 8;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  if (tid == 0) {
    for (int i = 0; i < kS; ++i) {
      mbar_init(full0 + 8 * i, 2);  // the producer's expect_tx arrive, then its arrive once E is written
      mbar_init(empty0 + 8 * i, T::kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp == 4) {  // ---- producer: chunk c into stage c % kS
    auto gate = [&](int c) {  // lane's G in chunk c (0 past the end); a load in flight until used
      const int tok = sr.begin + c * kC + lane;
      return c < chunks && tok < sr.end ? s.G[static_cast<size_t>(tok) * p.num_v_heads + h] : 0.f;
    };
    float g_cur = gate(0);
    for (int c = 0; c < chunks; ++c) {
      const int st = c % kS;
      if (c >= kS) mbar_wait(empty0 + 8 * st, ((c / kS) + 1) & 1);
      const int t0 = sr.begin + c * kC, n = min(kC, sr.end - t0);
      const uint32_t base = sm_u + st * T::kStage, full = full0 + 8 * st;
      const size_t chunk = static_cast<size_t>(cf + c);
      if (lane == 0) mbar_arrive_expect_tx(full, 3 * T::kImg + n * vn * 4);
      __syncwarp();
      const float* w = s.Wimg + (chunk * p.num_v_heads + h) * (T::kImg / 4);
      const float* q = s.Qimg + (chunk * p.num_k_heads + kh) * (T::kImg / 4);
      if (lane < KP / 32) bulk_copy_g2s(base + T::kWQ + lane * 2 * T::kSlab, w + lane * (T::kSlab / 4), T::kSlab, full);
      else if (lane < 2 * (KP / 32))
        bulk_copy_g2s(base + T::kWQ + (lane - KP / 32) * 2 * T::kSlab + T::kSlab, q + (lane - KP / 32) * (T::kSlab / 4),
                      T::kSlab, full);
      else if (lane == 31)
        bulk_copy_g2s(base + T::kK, s.Ktimg + (chunk * p.num_k_heads + kh) * (T::kImg / 4), T::kImg, full);
      if (lane < n)
        bulk_copy_g2s(base + T::kU + lane * T::kUS * 4,
                      s.U + (static_cast<size_t>(t0 + lane) * p.num_v_heads + h) * dv + v0, vn * 4, full);
      const float g_next = gate(c + 1);
      // E_j = e^{G_last - G_j} (1 past the end, as the mma.sync scan has it), then e^{G_last}
      const float G_last = __shfl_sync(0xffffffffu, g_cur, n - 1);
      float* E = reinterpret_cast<float*>(sm + T::kE + st * T::kEStride);
      E[lane] = expf(G_last - (lane < n ? g_cur : G_last));
      if (lane == 0) E[kC] = expf(G_last);
      __syncwarp();
      if (lane == 0) mbar_arrive(full);
      g_cur = g_next;
    }
    return;
  }

  // ---- consumers: warp w holds state rows 16 w + g and + 8 (v), columns 8 j + 2 t, + 1 (k)
  float S[NT][4];
  uint32_t Sa[NT][4];  // tf32(S) as the A operand, k-step j
  const int vr0 = 16 * warp + g;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int v = vr0 + 8 * (e >> 1), k = 8 * j + 2 * t + (e & 1);
      S[j][e] = v < vn && k < dk ? head.S_g[static_cast<size_t>(v0 + v) * dk + k] : 0.f;
    }
#pragma unroll
  for (int j = 0; j < NT; ++j) acc_to_a(Sa[j], S[j]);

  float X[8][4];  // [Delta^T | P^T]: [64 v][32 + 32 tokens], tile j = tokens 8 (j % 4)..
  const size_t hv_row = static_cast<size_t>(p.num_v_heads) * dv;
  // Tiles j0.. j0 + 3 of X to dst ([T][Hv][v_dim]). A predicated store, not a branch: a
  // divergent path touching accumulators makes ptxas serialize the wgmma (C7518).
  auto store_tiles = [&](float* dst, int j0, int t0, int n) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int v = vr0 + 8 * (e >> 1), tok = 8 * j + 2 * t + (e & 1);
        float* a = dst + static_cast<size_t>(t0 + tok) * hv_row + static_cast<size_t>(h) * dv + v0 + v;
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p st.global.f32 [%0], %1;\n}\n"
                     ::"l"(a), "f"(X[j0 + j][e]), "r"(static_cast<int>(v < vn && tok < n)) : "memory");
      }
  };
  for (int c = 0; c < chunks; ++c) {
    const int st = c % kS;
    const int t0 = sr.begin + c * kC, n = min(kC, sr.end - t0);
    const uint32_t base = sm_u + st * T::kStage;
    mbar_wait(full0 + 8 * st, (c / kS) & 1);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < NT; ++j) WgmmaTf32Rs<64>::run(X, Sa[j], image_kstep_desc(base + T::kWQ, 2 * kC, j), j);
    wgmma_commit();
    const float* U = reinterpret_cast<const float*>(sm + st * T::kStage + T::kU);
    const float* E = reinterpret_cast<const float*>(sm + T::kE + st * T::kEStride);
    wgmma_wait0();
    uint32_t A[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float ed[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int v = vr0 + 8 * (e >> 1), tok = 8 * j + 2 * t + (e & 1);
        const bool in = v < vn && tok < n;  // U rows past the end or past v_dim are not loaded
        X[j][e] = (in ? U[tok * T::kUS + v] : 0.f) - X[j][e];  // Delta
        ed[e] = in ? E[tok] * X[j][e] : 0.f;
      }
      acc_to_a(A[j], ed);
    }
    const float gl = E[kC];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[j][e] *= gl;
    wgmma_fence();
    // S += tf32(E Delta)^T K: M = v, N = k (KP), K = tokens
#pragma unroll
    for (int j = 0; j < 4; ++j) WgmmaTf32Rs<KP>::run(S, A[j], image_kstep_desc(base + T::kK, KP, j), 1);
    wgmma_commit();
    store_tiles(s.U, 0, t0, n);  // Delta over U, for the out pass; under the update
    store_tiles(s.P, 4, t0, n);  // P = Q tf32(S)^T
    wgmma_wait0();
    mbar_arrive(empty0 + 8 * st);  // this thread's reads of the stage are done
#pragma unroll
    for (int j = 0; j < NT; ++j) acc_to_a(Sa[j], S[j]);
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int v = vr0 + 8 * (e >> 1), k = 8 * j + 2 * t + (e & 1);
      if (v < vn && k < dk) head.S_g[static_cast<size_t>(v0 + v) * dk + k] = S[j][e];
    }
#endif
}
