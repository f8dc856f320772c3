// common.cuh: device helpers shared by the kernel files: bf16 <-> float, the
// per-stream bounds read from the staged metadata (clamped the same way in
// every kernel), 16-byte vector moves and cp.async.
// Invariant: every bound a kernel uses comes from device memory through these.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernels.h"

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

// The addresses [lo, hi] at which a pointer read back from staged metadata may
// start so that the `bytes` read through it lie inside `range`. Computed once
// on the host (launchers), so a kernel's check is two compares: registers in
// the hot kernels are tight. An empty range ({0, 0}) admits any non-null
// address; a range smaller than `bytes` admits none.
struct PtrWindow {
  uint64_t lo, hi;
};
inline PtrWindow ptr_window(AddressRange range, uint64_t bytes) {
  if (range.end == 0) return {1, ~uint64_t(0)};
  if (range.end < range.begin || range.end - range.begin < bytes) return {1, 0};
  return {range.begin, range.end - bytes};
}
// True when `a` may be dereferenced as the window says and is `align`-aligned;
// false: the caller skips the stream, whose output stays poisoned.
__device__ __forceinline__ bool in_window(uint64_t a, PtrWindow w, unsigned align) {
  return a >= w.lo && a <= w.hi && a % align == 0;
}

// Unpacks 8 bf16 (one 16-byte load) into floats.
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
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
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
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

}  // namespace pb::kernels::detail
