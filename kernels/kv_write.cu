// kv_write.cu: scatters each packed row's roped k and its v into the paged
// caches [num_blocks, block_size, Hkv, D] at the row's staged slot (i64).
// Invariant: a slot outside [0, num_blocks * block_size) writes nothing.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace pb::kernels {

// Tuning knobs.
struct KvWriteConfig {
  static constexpr int kThreads = 256;  // threads per CTA
  static constexpr int kVec = 8;        // bf16 per thread move (16 bytes) when the row allows it
};

namespace {

// Version 1: one thread per (row, 16-byte chunk of the Hkv*D row), K and V
// moved together; the slot is read once per thread (L1 serves the repeats).
template <int VEC>
__global__ void __launch_bounds__(KvWriteConfig::kThreads)
kv_write_kernel(int total_tokens, int row_elems, long long num_slots, const long long* slots,
                const uint16_t* k_rot, const uint16_t* v, uint16_t* k_cache, uint16_t* v_cache) {
  const int chunks = row_elems / VEC;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(total_tokens) * chunks) return;
  const int r = static_cast<int>(idx / chunks);
  const int c = static_cast<int>(idx - static_cast<long long>(r) * chunks);
  const long long s = slots[r];
  if (s < 0 || s >= num_slots) return;
  const size_t src = static_cast<size_t>(r) * row_elems + static_cast<size_t>(c) * VEC;
  const size_t dst = static_cast<size_t>(s) * row_elems + static_cast<size_t>(c) * VEC;
  if constexpr (VEC == 8) {
    *reinterpret_cast<uint4*>(k_cache + dst) = *reinterpret_cast<const uint4*>(k_rot + src);
    *reinterpret_cast<uint4*>(v_cache + dst) = *reinterpret_cast<const uint4*>(v + src);
  } else {
    k_cache[dst] = k_rot[src];
    v_cache[dst] = v[src];
  }
}

}  // namespace

cudaError_t launch_kv_write(cudaStream_t stream, const LayerShape& shape, uint32_t total_tokens,
                            uint64_t slots, const bf16* k_rot, const bf16* v, bf16* k_cache,
                            bf16* v_cache) {
  if (shape.num_kv_heads <= 0 || shape.head_dim <= 0 || shape.block_size <= 0) return cudaErrorInvalidValue;
  if (total_tokens == 0) return cudaSuccess;
  const int row_elems = shape.num_kv_heads * shape.head_dim;
  const long long num_slots = static_cast<long long>(shape.num_blocks) * shape.block_size;
  const auto* sl = reinterpret_cast<const long long*>(slots);
  const auto* kr = reinterpret_cast<const uint16_t*>(k_rot);
  const auto* vv = reinterpret_cast<const uint16_t*>(v);
  auto* kc = reinterpret_cast<uint16_t*>(k_cache);
  auto* vc = reinterpret_cast<uint16_t*>(v_cache);
  constexpr int kT = KvWriteConfig::kThreads;
  if (row_elems % KvWriteConfig::kVec == 0) {
    const long long n = static_cast<long long>(total_tokens) * (row_elems / KvWriteConfig::kVec);
    kv_write_kernel<KvWriteConfig::kVec><<<static_cast<unsigned>((n + kT - 1) / kT), kT, 0, stream>>>(
        static_cast<int>(total_tokens), row_elems, num_slots, sl, kr, vv, kc, vc);
  } else {
    const long long n = static_cast<long long>(total_tokens) * row_elems;
    kv_write_kernel<1><<<static_cast<unsigned>((n + kT - 1) / kT), kT, 0, stream>>>(
        static_cast<int>(total_tokens), row_elems, num_slots, sl, kr, vv, kc, vc);
  }
  return cudaGetLastError();
}

}  // namespace pb::kernels
