// common.cuh: device helpers shared by the kernel files: bf16 <-> float, the
// per-stream bounds read from the staged metadata (clamped the same way in
// every kernel), 16-byte vector moves and cp.async.
// Invariant: every bound a kernel uses comes from device memory through these.
#pragma once
#include <utility>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pb::kernels::detail {

__device__ __forceinline__ float bf16_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// Round to nearest even; NaN stays a quiet NaN (same as lib/bf16.h).
__device__ __forceinline__ uint16_t float_to_bf16(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__device__ __forceinline__ float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

__device__ __forceinline__ int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Stream b's packed rows [begin, end) from device cu_seqlens, both clamped to
// [0, total_tokens] and end >= begin.
struct StreamRows {
  int begin, end;
  __device__ __forceinline__ int count() const { return end - begin; }
};
__device__ __forceinline__ StreamRows stream_rows(const int32_t* cu_seqlens, int b, int total_tokens) {
  StreamRows s;
  s.begin = clamp_int(cu_seqlens[b], 0, total_tokens);
  s.end = clamp_int(cu_seqlens[b + 1], 0, total_tokens);
  if (s.end < s.begin) s.end = s.begin;
  return s;
}

// Unpacks 4 bf16 (one 8-byte load) into floats: a bf16 is an fp32's upper half.
__device__ __forceinline__ void unpack4(const uint2& u, float* f) {
  f[0] = __uint_as_float(u.x << 16);
  f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16);
  f[3] = __uint_as_float(u.y & 0xffff0000u);
}
// Unpacks 8 bf16 (one 16-byte load) into floats.
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  unpack4(make_uint2(u.x, u.y), f);
  unpack4(make_uint2(u.z, u.w), f + 4);
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return static_cast<uint32_t>(float_to_bf16(lo)) | (static_cast<uint32_t>(float_to_bf16(hi)) << 16);
}

// cp.async: 16-byte global -> shared copies that bypass the registers.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// A barrier among `threads` threads (whole warps) of the CTA, by id 1..15 (0 is
// __syncthreads's).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Programmatic dependent launch (sm_90; no-ops before it): the primary grid lets
// its dependent launch once every CTA has called pdl_launch_dependents (or exited);
// the dependent's pdl_wait returns once the primary has completed and its writes
// are visible. Reads of the primary's outputs go after pdl_wait.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Launches kernel f<<<grid, block, smem, stream>>>(args...) as a programmatic
// dependent of the previous launch on `stream`: it may start while that one runs
// its last CTAs, and must pdl_wait() before reading what that one wrote.
template <class... P, class... A>
cudaError_t launch_pdl(void (*f)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, f, std::forward<A>(args)...);
}

// Multiprocessors of the current device (read once; 132, an H200's, if the
// query fails). Host side: launch helpers size their grids with it.
inline int sm_count() {
  static int sms = 0;
  if (!sms) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 132;
  }
  return sms;
}

// Bytes of L2 of the current device (read once; 50 MB, an H200's, if the query fails).
// Host side: the attention work list's sections (attention_schedule.h) take half.
inline uint64_t l2_bytes() {
  static int bytes = 0;
  if (!bytes) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, dev) != cudaSuccess ||
        bytes <= 0)
      bytes = 50 << 20;
  }
  return static_cast<uint64_t>(bytes);
}

// Lets kernel f take `bytes` of dynamic shared memory (past the 48 KB default).
template <class F>
cudaError_t allow_smem(F* f, size_t bytes) {
  return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace pb::kernels::detail
