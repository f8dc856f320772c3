// gdn_step_probe.cu: two measurements for the GDN walk's next form (issue 13; kernels/
// PERF-NOTES.md "gdn: the step on wgmma"), on whatever sm_90a GPU runs it:
// 1. bits: is a product over k = 128 on wgmma m64nNk8 tf32 (operands in 128-byte-swizzled
//    shared memory, or A from registers) bit-identical to the chain of mma.sync m16n8k8 tf32
//    the walks run now, k ascending? (The A-from-registers form is how the state update
//    would read K^T, which tf32 wgmma cannot take transposed from shared memory.) If so,
//    a product can move to wgmma at one block width without breaking the invariance check
//    (a stream's bits must not depend on the block width its batch gets).
//    Exit 1 when any element differs.
// 2. latency, one warpgroup per CTA (1 CTA, then one per SM): a 16-deep mma.sync chain, one
//    wgmma product over k = 128, and the W / U form's chunk step at 64 tokens and N v rows:
//    Delta = W S^T (m64nNk8, k 128) -> Delta^T to shared memory as tf32 -> S^T += K^T Delta
//    (two m64nNk8 over 64 tokens) -> S to shared memory as tf32, each hand-over a proxy fence
//    and a warpgroup barrier. Cycles by clock64 per step, microseconds by CUDA events.
// Not a benchmark of a shipped kernel: operand values are synthetic (the step's time does not
// depend on them), and only the chain's shape matches a kernel's. Usage: pb_probe_gdn_step
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

#define CK(x)                                                                             \
  do {                                                                                    \
    const cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "pb_probe_gdn_step: %s: %s\n", #x, cudaGetErrorString(e_));    \
      std::exit(3);                                                                       \
    }                                                                                     \
  } while (0)

__device__ __forceinline__ uint32_t tf32_bits(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return r;
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PB_PROBE_WGMMA 1
#endif

// K-major operand of `rows` rows of fp32 (tf32) values, 128-byte swizzle: [k / 32][rows][32],
// each 128-byte row's 16-byte pieces XOR-ed by row % 8 (kernels/wgmma.cuh's slab layout).
__host__ __device__ inline uint32_t sw_off(int rows, int row, int k) {
  const int ch = k / 4;
  return static_cast<uint32_t>((ch >> 3) * (rows * 128) + row * 128 + (((ch & 7) ^ (row & 7)) << 4) + (k % 4) * 4);
}
// The descriptor of k-step ks (8 tf32 = 32 bytes) of such an operand at `base` (1024-aligned).
__device__ __forceinline__ uint64_t kstep_desc(uint32_t base, int rows, int ks) {
  const uint32_t addr = base + (ks >> 2) * (rows * 128) + (ks & 3) * 32;
  uint64_t d = static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(16 >> 4) << 16;    // leading byte offset (unused with swizzle)
  d |= static_cast<uint64_t>(1024 >> 4) << 32;  // 8 rows of 128 bytes
  d |= 1ull << 62;                              // 128-byte swizzle
  return d;
}
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

#ifdef PB_PROBE_WGMMA
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_tf32(float (&d)[N / 2], uint64_t da, uint64_t db, int acc);
template <>
__device__ __forceinline__ void wgmma_tf32<8>(float (&d)[4], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0,%1,%2,%3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(da), "l"(db), "r"(acc));
}

template <>
__device__ __forceinline__ void wgmma_tf32<16>(float (&d)[8], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(da), "l"(db), "r"(acc));
}

template <>
__device__ __forceinline__ void wgmma_tf32<32>(float (&d)[16], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(acc));
}

template <>
__device__ __forceinline__ void wgmma_tf32<64>(float (&d)[32], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(acc));
}
// A from registers (the RS form): per warp w of the warpgroup, rows 16w.. of A in the
// m16n8k8 fragment order (a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)).
__device__ __forceinline__ void wgmma_tf32_rs32(float (&d)[16], const uint32_t (&a)[4], uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
      "{%16,%17,%18,%19}, %20, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
#endif

constexpr int kM = 64, kN = 32, kK = 128;

// 1. C = A B^T (A [64][128], B [32][128], tf32 values) four ways: a chain of mma.sync
// (warp w: rows 16w..16w+15), one wgmma m64n32k8 group, four wgmma m64n8k8 groups, and
// one m64n32k8 group with A from registers (RS).
__global__ void bits_kernel(const float* A, const float* B, float* c_mma, float* c_n32, float* c_n8, float* c_rs) {
  extern __shared__ unsigned char smem[];
  unsigned char* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem) + 1023) & ~uintptr_t(1023));
  unsigned char* As = base;
  unsigned char* Bs = base + kM * kK * 4;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  auto store = [&](float* C, int nt, const float* d) {
    const int r = 16 * warp + g, c = 8 * nt + 2 * t;
    C[r * kN + c] = d[0], C[r * kN + c + 1] = d[1], C[(r + 8) * kN + c] = d[2], C[(r + 8) * kN + c + 1] = d[3];
  };
  for (int nt = 0; nt < kN / 8; ++nt) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    const int r = 16 * warp + g, n = 8 * nt + g;
    for (int kk = 0; kk < kK; kk += 8) {
      const uint32_t a[4] = {__float_as_uint(A[r * kK + kk + t]), __float_as_uint(A[(r + 8) * kK + kk + t]),
                             __float_as_uint(A[r * kK + kk + t + 4]), __float_as_uint(A[(r + 8) * kK + kk + t + 4])};
      const uint32_t b[2] = {__float_as_uint(B[n * kK + kk + t]), __float_as_uint(B[n * kK + kk + t + 4])};
      mma_tf32(d, a, b);
    }
    store(c_mma, nt, d);
  }
#ifdef PB_PROBE_WGMMA
  for (int i = tid; i < kM * kK; i += blockDim.x) *reinterpret_cast<float*>(As + sw_off(kM, i / kK, i % kK)) = A[i];
  for (int i = tid; i < kN * kK; i += blockDim.x) *reinterpret_cast<float*>(Bs + sw_off(kN, i / kK, i % kK)) = B[i];
  fence_async();
  __syncthreads();
  {
    float d[16] = {};
    wg_fence();
    for (int ks = 0; ks < kK / 8; ++ks)
      wgmma_tf32<32>(d, kstep_desc(smem_u32(As), kM, ks), kstep_desc(smem_u32(Bs), kN, ks), ks > 0);
    wg_commit();
    wg_wait0();
    for (int nt = 0; nt < 4; ++nt) store(c_n32, nt, d + 4 * nt);
  }
  for (int nt = 0; nt < kN / 8; ++nt) {  // rows 8 nt.. of B: its nt-th 1024-byte group of 8 rows
    float d[4] = {};
    wg_fence();
    for (int ks = 0; ks < kK / 8; ++ks)
      wgmma_tf32<8>(d, kstep_desc(smem_u32(As), kM, ks), kstep_desc(smem_u32(Bs) + nt * 1024, kN, ks), ks > 0);
    wg_commit();
    wg_wait0();
    store(c_n8, nt, d);
  }
  {
    float d[16] = {};
    const int r = 16 * warp + g;
    uint32_t a[kK / 8][4];  // every k-step's fragment first: no register write between the issues
    for (int ks = 0; ks < kK / 8; ++ks) {
      const int kk = 8 * ks;
      a[ks][0] = __float_as_uint(A[r * kK + kk + t]);
      a[ks][1] = __float_as_uint(A[(r + 8) * kK + kk + t]);
      a[ks][2] = __float_as_uint(A[r * kK + kk + t + 4]);
      a[ks][3] = __float_as_uint(A[(r + 8) * kK + kk + t + 4]);
    }
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < kK / 8; ++ks) wgmma_tf32_rs32(d, a[ks], kstep_desc(smem_u32(Bs), kN, ks), ks > 0);
    wg_commit();
    wg_wait0();
    for (int nt = 0; nt < 4; ++nt) store(c_rs, nt, d + 4 * nt);
  }
#endif
}

// 2. mode 0: a 16-deep mma.sync chain per warp; 1: one wgmma m64nN product over k 128;
// 2: the W / U form's step at 64 tokens (see the top of the file).
template <int N>
__global__ void latency_kernel(int mode, int iters, long long* cycles, float* sink) {
  extern __shared__ unsigned char smem[];
  unsigned char* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem) + 1023) & ~uintptr_t(1023));
  unsigned char* Ws = base;                // W [64 tokens][128 k]
  unsigned char* Ss = Ws + 64 * 128 * 4;   // S [N v][128 k]
  unsigned char* Kt = Ss + N * 128 * 4;    // K^T [128 k][64 tokens] (two m64 halves)
  unsigned char* Dt = Kt + 128 * 64 * 4;   // Delta^T [N v][64 tokens]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int floats = 64 * 128 + N * 128 + 128 * 64 + N * 64;
  for (int i = tid; i < floats; i += blockDim.x) reinterpret_cast<float*>(base)[i] = __uint_as_float(tf32_bits(1e-3f * (i % 97)));
  __syncthreads();
  float d4[4] = {0.f, 0.f, 0.f, 0.f};
  float acc[N / 2] = {}, s_lo[N / 2] = {}, s_hi[N / 2] = {};
  const long long c0 = clock64();
  for (int it = 0; it < iters; ++it) {
    if (mode == 0) {
      const uint32_t a[4] = {__float_as_uint(d4[0]), __float_as_uint(d4[1]), 1u, 2u}, b[2] = {3u, 4u};
      for (int kk = 0; kk < 16; ++kk) mma_tf32(d4, a, b);
    }
#ifdef PB_PROBE_WGMMA
    else if (mode == 1) {
      fence_async();
      wg_fence();
      for (int ks = 0; ks < 16; ++ks)
        wgmma_tf32<N>(acc, kstep_desc(smem_u32(Ws), 64, ks), kstep_desc(smem_u32(Ss), N, ks), 1);
      wg_commit();
      wg_wait0();
    } else {
      fence_async();
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
      wg_fence();
      for (int ks = 0; ks < 16; ++ks)
        wgmma_tf32<N>(acc, kstep_desc(smem_u32(Ws), 64, ks), kstep_desc(smem_u32(Ss), N, ks), ks > 0);
      wg_commit();
      wg_wait0();
      for (int j = 0; j < N / 8; ++j)  // Delta (token rows, v columns) -> Dt [v][token]
        for (int e = 0; e < 4; ++e) {
          const int tok = 16 * warp + g + 8 * (e >> 1), v = 8 * j + 2 * t + (e & 1);
          *reinterpret_cast<float*>(Dt + sw_off(N, v, tok)) = __uint_as_float(tf32_bits(acc[4 * j + e] * 0.5f));
        }
      fence_async();
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
      wg_fence();
      for (int ks = 0; ks < 8; ++ks) {
        wgmma_tf32<N>(s_lo, kstep_desc(smem_u32(Kt), 128, ks), kstep_desc(smem_u32(Dt), N, ks), 1);
        wgmma_tf32<N>(s_hi, kstep_desc(smem_u32(Kt) + 64 * 128, 128, ks), kstep_desc(smem_u32(Dt), N, ks), 1);
      }
      wg_commit();
      wg_wait0();
      for (int j = 0; j < N / 8; ++j)  // S^T (k rows, v columns) -> Ss [v][k]
        for (int e = 0; e < 4; ++e) {
          const int k = 16 * warp + g + 8 * (e >> 1), v = 8 * j + 2 * t + (e & 1);
          *reinterpret_cast<float*>(Ss + sw_off(N, v, k)) = __uint_as_float(tf32_bits(s_lo[4 * j + e]));
          *reinterpret_cast<float*>(Ss + sw_off(N, v, k + 64)) = __uint_as_float(tf32_bits(s_hi[4 * j + e]));
        }
    }
#endif
  }
  const long long c1 = clock64();
  if (tid == 0) cycles[blockIdx.x] = c1 - c0;
  float x = d4[0];
  for (int i = 0; i < N / 2; ++i) x += acc[i] + s_lo[i] + s_hi[i];
  sink[blockIdx.x * blockDim.x + tid] = x;
}

template <int N>
void time_mode(int mode, const char* what, int sms) {
  const int smem = (64 * 128 + N * 128 + 128 * 64 + N * 64) * 4 + 1024;
  CK(cudaFuncSetAttribute(latency_kernel<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  long long* cycles = nullptr;
  float* sink = nullptr;
  CK(cudaMalloc(&cycles, sms * sizeof(long long)));
  CK(cudaMalloc(&sink, sms * 128 * sizeof(float)));
  constexpr int kIters = 2000;
  for (int blocks : {1, sms}) {
    latency_kernel<N><<<blocks, 128, smem>>>(mode, 10, cycles, sink);  // warm-up
    CK(cudaDeviceSynchronize());
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a));
    latency_kernel<N><<<blocks, 128, smem>>>(mode, kIters, cycles, sink);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, a, b));
    long long cy = 0;
    CK(cudaMemcpy(&cy, cycles, sizeof(cy), cudaMemcpyDeviceToHost));
    std::printf("%-58s N %2d, %3d CTAs: %7.1f cycles, %6.3f us per iteration\n", what, N, blocks,
                static_cast<double>(cy) / kIters, ms * 1e3 / kIters);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
  }
  CK(cudaFree(cycles));
  CK(cudaFree(sink));
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  if (prop.major != 9) {
    std::printf("skipped: wgmma needs sm_90\n");
    return 77;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  auto tf32 = [](float f) {  // round to nearest, ties away (cvt.rna), for finite values
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u = (u + 0x1000u) & 0xffffe000u;
    std::memcpy(&f, &u, 4);
    return f;
  };
  std::vector<float> A(kM * kK), B(kN * kK);
  for (float& x : A) x = tf32(uni(rng));
  for (float& x : B) x = tf32(uni(rng));
  float *dA, *dB, *c[4];
  CK(cudaMalloc(&dA, A.size() * 4));
  CK(cudaMalloc(&dB, B.size() * 4));
  for (float*& p : c) CK(cudaMalloc(&p, kM * kN * 4));
  CK(cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice));
  const int smem = (kM + kN) * kK * 4 + 1024;
  CK(cudaFuncSetAttribute(bits_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  bits_kernel<<<1, 128, smem>>>(dA, dB, c[0], c[1], c[2], c[3]);
  CK(cudaDeviceSynchronize());
  std::vector<float> h[4];
  for (int i = 0; i < 4; ++i) {
    h[i].resize(kM * kN);
    CK(cudaMemcpy(h[i].data(), c[i], kM * kN * 4, cudaMemcpyDeviceToHost));
  }
  int differ_n32 = 0, differ_n8 = 0, differ_rs = 0;
  double err = 0;
  for (int i = 0; i < kM * kN; ++i) {
    differ_n32 += std::memcmp(&h[0][i], &h[1][i], 4) != 0;
    differ_n8 += std::memcmp(&h[0][i], &h[2][i], 4) != 0;
    differ_rs += std::memcmp(&h[0][i], &h[3][i], 4) != 0;
    double ref = 0;
    for (int k = 0; k < kK; ++k) ref += static_cast<double>(A[(i / kN) * kK + k]) * B[(i % kN) * kK + k];
    err = std::max(err, std::abs(h[0][i] - ref));
  }
  std::printf("bits: of %d products over k = %d, wgmma m64n32k8 differs from the mma.sync chain in %d, "
              "m64n8k8 in %d, m64n32k8 with A from registers in %d (max |mma.sync - fp64| %.3g)\n",
              kM * kN, kK, differ_n32, differ_n8, differ_rs, err);
  const int sms = prop.multiProcessorCount;
  time_mode<32>(0, "mma.sync m16n8k8 chain, 16 deep", sms);
  time_mode<8>(1, "wgmma m64nNk8 over k 128", sms);
  time_mode<32>(1, "wgmma m64nNk8 over k 128", sms);
  for (int mode = 2, n = 0; n < 4; ++n) {
    const char* what = "step: W S^T, Delta^T out, S^T += K^T Delta, S out";
    if (n == 0) time_mode<8>(mode, what, sms);
    if (n == 1) time_mode<16>(mode, what, sms);
    if (n == 2) time_mode<32>(mode, what, sms);
    if (n == 3) time_mode<64>(mode, what, sms);
  }
  return differ_n32 || differ_n8 || differ_rs ? 1 : 0;
}
